import Documents
import Posix

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

    /// The directories remembered as missing among `path` and those above it.
    func missingDirectories(atOrAbove path: String) -> [String] {
        var found: [String] = []
        var above: String? = path
        while let directory = above {
            if missingDirectories.contains(directory) { found.append(directory) }
            above = Self.directory(of: directory)
        }
        return found
    }

    /// Forgets every directory remembered as missing, and every one known whole (below).
    func forgetMissingDirectories() {
        missingDirectories.removeAll()
        knownDirectories.removeAll()
    }
}

/// Directories known whole: every entry in one is an open document (or a save's temporary
/// file, or a sync cookie), so that a new document there needs no look at the disk either.
///
/// A directory remembered as missing and then reported there — made by this store's save
/// of the first new document in it, as a rule — is listed once, when the report arrives;
/// if each entry is the store's own, the directory is known whole from then on. The
/// watcher watches it by then, so whatever appears in it later is reported. A report of
/// something not the store's own made or changed in it or beneath it (another program's
/// file, a directory) ends that for every directory above the thing reported; one of
/// something leaving (removed, renamed), and a document being let go (closed: its file
/// may stay), for the directories above it, it, and those beneath it. So does everything
/// that ends the missing directories (events lost, the root gone or back, the ignore rules
/// changed, the watcher stopped, anything polled). A file another program made there
/// just before a request, whose report has not reached the store yet, is caught by the
/// save, which expects to find nothing (as for a missing directory).
extension DocumentStore {
    /// The most directories known whole at once.
    static let knownDirectoryLimit = 256

    /// Whether `path`, at which the store holds no document, lies in a directory known
    /// whole: then nothing is there.
    func isNewInKnownDirectory(_ path: String) -> Bool {
        guard !knownDirectories.isEmpty, knownDirectories.contains(Self.directory(of: path) ?? "") else {
            return false
        }
        guard let watcher, watcher.watchesEverything else {
            forgetMissingDirectories()
            return false
        }
        return true
    }

    /// Whether a path the watcher reported is the store's own: an open document's file (or
    /// a member of an open package), a save's temporary file, a sync cookie.
    func isStoreOwn(_ path: String) -> Bool {
        path.hasPrefix(Self.syncCookiePrefix) || TemporaryName.isInside(path)
            || entries.index(forKey: documentPath(for: path)) != nil
    }

    /// Lists `directory`, just reported made where it was remembered missing, and knows it
    /// whole if every entry is the store's own.
    func learnDirectory(_ directory: String) {
        guard knownDirectories.count < Self.knownDirectoryLimit, let watcher, watcher.watchesEverything else {
            return
        }
        let listed: [DirectoryEntry]
        do {
            let fd = try FileDescriptor.open(root + "/" + directory, options: [.directory, .noFollow])
            listed = try fd.closeAfter { () throws(Errno) -> [DirectoryEntry] in try fd.directoryEntries() }
        } catch {
            return
        }
        for entry in listed where !isStoreOwn(directory.isEmpty ? entry.name : directory + "/" + entry.name) {
            return
        }
        knownDirectories.insert(directory)
    }

    /// Something not the store's own was reported made or changed at `path`: the
    /// directories above it are no longer known whole (what is inside `path`, if it is a
    /// directory, is reported on its own).
    func forgetKnownDirectories(above path: String) {
        guard !knownDirectories.isEmpty else { return }
        var above = Self.directory(of: path)
        while let directory = above {
            knownDirectories.remove(directory)
            above = Self.directory(of: directory)
        }
        knownDirectories.remove("")
    }

    /// Something not the store's own left `path` (removed, renamed), or a document there
    /// was let go: the directories above it, it, and those beneath it are no longer known
    /// whole.
    func forgetKnownDirectories(atOrUnder path: String) {
        guard !knownDirectories.isEmpty else { return }
        forgetKnownDirectories(above: path)
        knownDirectories.remove(path)
        let prefix = path + "/"
        if knownDirectories.contains(where: { $0.hasPrefix(prefix) }) {
            knownDirectories = knownDirectories.filter { !$0.hasPrefix(prefix) }
        }
    }
}
