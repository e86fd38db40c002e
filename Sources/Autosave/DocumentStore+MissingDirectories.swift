/// Directories known not to be there, so that a new document in one needs no look at the
/// disk.
///
/// A request that creates a document at a path the store does not hold looks there
/// first (``UnopenedPathCheck``): a file another program left there is opened and edited
/// rather than replaced, and a path through a symbolic link is refused. When that look
/// found nothing, the first new document of a directory looks once more, at the directory
/// itself; if it is not there either, and inotify watches every directory under the root,
/// the store remembers it as missing, and the next new documents there are made without a
/// look. Whatever puts something at its place or above it — another program making the
/// directory (or a file or link of that name, or of a directory above it), this store's
/// own save making the directories a new document needs — is reported by the watcher, and
/// the directory is forgotten then (with every one remembered beneath the place
/// reported, and any remembered above something reported inside it). A directory and a
/// file in it made by another program just before a request, whose report has not
/// reached the store yet, is caught by the save, which expects to find nothing at the
/// path and keeps both versions (the `[Conflicts]` policy) instead of replacing anything
/// — as it catches a file made just after a look. Everything is forgotten when events
/// were lost, the root goes or comes back, the ignore rules change, the watcher stops, or
/// anything is polled rather than watched.
extension DocumentStore {
    /// The most directories remembered as missing at once.
    static let missingDirectoryLimit = 256

    /// Whether `path`'s directory is remembered as missing (see above).
    func isInMissingDirectory(_ path: String) -> Bool {
        guard !missingDirectories.isEmpty, let directory = Self.directory(of: path),
            missingDirectories.contains(directory)
        else { return false }
        guard let watcher, watcher.watchesEverything else {
            forgetMissingDirectories()
            return false
        }
        return true
    }

    /// After a look found nothing at `path`, for a new document: remembers its directory
    /// as missing if it is not there, and it holds no open document yet (the first new
    /// document of a directory asks; the next ones do not ask again).
    func noteMissingDirectory(of path: String, unopened: some UnopenedPathCheck) {
        guard let directory = Self.directory(of: path), directoryUses[directory] == nil,
            missingDirectories.count < Self.missingDirectoryLimit, let watcher, watcher.watchesEverything,
            unopened.directoryIsMissing(directory)
        else { return }
        missingDirectories.insert(directory)
    }

    /// Something was reported at `path` (made, written, renamed there): it, the
    /// directories above it, and every directory remembered beneath it may be there now.
    /// Nothing to do while none is remembered (at most ``missingDirectoryLimit``).
    func forgetMissingDirectories(atOrUnder path: String) {
        guard !missingDirectories.isEmpty else { return }
        var above: String? = path
        while let directory = above {
            missingDirectories.remove(directory)
            above = Self.directory(of: directory)
        }
        let prefix = path + "/"
        if missingDirectories.contains(where: { $0.hasPrefix(prefix) }) {
            missingDirectories = missingDirectories.filter { !$0.hasPrefix(prefix) }
        }
    }

    /// Forgets every directory remembered as missing.
    func forgetMissingDirectories() { missingDirectories.removeAll() }
}
