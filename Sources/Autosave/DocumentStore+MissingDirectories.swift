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
            missingDirectories.contains(PathKey(directory))
        else { return false }
        guard let watcher, watcher.watchesEverything else {
            forgetMissingDirectories()
            return false
        }
        return true
    }

    /// After a look found nothing at `path`, for a new document: remembers its directory
    /// as missing if it is not there, and it holds no open document yet (the first new
    /// document of a directory asks; the next ones do not ask again). A directory that is
    /// there counts the look towards listing it (``lookedInDirectory(of:)``).
    func noteNothingFound(at path: String, unopened: some UnopenedPathCheck) {
        guard let watcher, watcher.watchesEverything else { return }
        if let directory = Self.directory(of: path), directoryUses[PathKey(directory)] == nil,
            missingDirectories.count < Self.missingDirectoryLimit, unopened.directoryIsMissing(directory)
        {
            missingDirectories.insert(PathKey(directory))
            return
        }
        lookedInDirectory(of: path)
    }

    /// Something was reported at `path` (made, written, renamed there): it, the
    /// directories above it, and every directory remembered beneath it may be there now.
    /// Nothing to do while none is remembered (at most ``missingDirectoryLimit``).
    func forgetMissingDirectories(atOrUnder path: String) {
        guard !missingDirectories.isEmpty else { return }
        var above: String? = path
        while let directory = above {
            missingDirectories.remove(PathKey(directory))
            above = Self.directory(of: directory)
        }
        let prefix = path + "/"
        if missingDirectories.contains(where: { PathName.starts($0.path, with: prefix) }) {
            missingDirectories = missingDirectories.filter { !PathName.starts($0.path, with: prefix) }
        }
    }

    /// The directories remembered as missing among `path` and those above it.
    func missingDirectories(atOrAbove path: String) -> [String] {
        var found: [String] = []
        var above: String? = path
        while let directory = above {
            if missingDirectories.contains(PathKey(directory)) { found.append(directory) }
            above = Self.directory(of: directory)
        }
        return found
    }

    /// Forgets every directory remembered as missing, and every one known whole (below).
    func forgetMissingDirectories() {
        missingDirectories.removeAll()
        knownDirectories.removeAll()
        namesInTheWay.removeAll()
    }
}

/// Directories listed: for a directory the store has listed while inotify watches every
/// directory, the names in it that are not its own (another program's files, directories,
/// links, ignored names, documents let go whose files stay) are remembered, so that a new
/// document at any other name there needs no look at the disk.
///
/// A directory is listed when it is first needed, and only once the watcher has its watch
/// (so that whatever appears in it after the listing is reported): remembered as missing
/// and then reported made (by this store's save of its first new document, as a rule), or
/// found there by the look a new document in it took. A look at a directory that is not
/// known counts towards listing it again; after a listing of `n` names, the next one waits
/// for `n / 16` looks (`n` when it had too many names not the store's to be known, or more
/// than ``listingLimit`` names), so that listing a large directory costs no more than the
/// looks it spares. Whatever appears in a known directory later is reported, and its name
/// is added to those remembered there (and in each known directory above it, the name on
/// its way). A report of something leaving (removed, renamed) ends the knowledge of every
/// directory above the thing reported, it, and those beneath it. So does everything that
/// ends the missing directories (events lost, the root gone or back, the ignore rules
/// changed, the watcher stopped, anything polled). A file another program made there just
/// before a request, whose report has not reached the store yet, is caught by the save,
/// which expects to find nothing (as for a missing directory).
extension DocumentStore {
    /// The most directories known at once.
    static let knownDirectoryLimit = 256
    /// The most names not the store's that a known directory may hold.
    static let namesInTheWayLimit = 256
    /// The most names a directory may hold for the store to list it (on the loop).
    static let listingLimit = 16384
    /// The most directories whose looks are counted at once.
    static let directoryLooksLimit = 4096

    /// Whether `path`, at which the store holds no document, lies in a known directory and
    /// is none of the names there that are not the store's: then nothing is there.
    func isNewInKnownDirectory(_ path: String) -> Bool {
        guard !knownDirectories.isEmpty else { return false }
        let directory = PathKey(Self.directory(of: path) ?? "")
        guard knownDirectories.contains(directory) else { return false }
        guard let watcher, watcher.watchesEverything else {
            forgetMissingDirectories()
            return false
        }
        if let names = namesInTheWay[directory], names.contains(PathKey(PathName.lastComponent(path))) { return false }
        return true
    }

    /// Whether a path the watcher reported is the store's own: an open document's file (or
    /// a member of an open package), a save's temporary file, a sync cookie.
    func isStoreOwn(_ path: String) -> Bool {
        path.hasPrefix(Self.syncCookiePrefix) || isDocumentOrTemporary(path)
    }

    /// Whether `path` is an open document's file (or a member of an open package) or a save's temporary file.
    private func isDocumentOrTemporary(_ path: String) -> Bool {
        TemporaryName.isInside(path) || entries.index(forKey: documentPath(for: path)) != nil
    }

    /// Lists `directory` ("" for the root) and knows it, with the names in it that are not
    /// the store's own, unless there are more of those than ``namesInTheWayLimit`` (or more
    /// names than ``listingLimit``). Returns how many names it read and whether it is known
    /// now (`nil`: not listed, the watcher has no watch on it or it cannot be listed).
    @discardableResult
    func learnDirectory(_ directory: String) -> (names: Int, known: Bool)? {
        let key = PathKey(directory)
        guard knownDirectories.count < Self.knownDirectoryLimit || knownDirectories.contains(key),
            let watcher, watcher.watchesEverything, watcher.isWatching(directory)
        else { return nil }
        let listed: [DirectoryEntry]
        do {
            // The root itself may be a symbolic link (see `scan`); below it, none is followed.
            let fd =
                directory.isEmpty
                ? try FileDescriptor.open(root, options: [.directory])
                : try FileDescriptor.open(root + "/" + directory, options: [.directory, .noFollow])
            let (read, complete) = try fd.closeAfter {
                () throws(Errno) -> ([DirectoryEntry], Bool) in try fd.directoryEntries(atMost: Self.listingLimit)
            }
            guard complete else {
                forgetKnown(key)
                return (read.count, false)
            }
            listed = read
        } catch {
            return nil
        }
        var names: Set<PathKey> = []
        // A sync cookie's name is not free: only the store's documents and temporary files are its own here.
        for entry in listed {
            let path = directory.isEmpty ? entry.name : directory + "/" + entry.name
            if isDocumentOrTemporary(path) { continue }
            guard names.count < Self.namesInTheWayLimit else {
                forgetKnown(key)
                return (listed.count, false)
            }
            names.insert(PathKey(entry.name))
        }
        knownDirectories.insert(key)
        namesInTheWay[key] = names.isEmpty ? nil : names
        return (listed.count, true)
    }

    /// A new document's look found nothing at `path`, in a directory that is there (or
    /// not known to be missing): the look counts towards listing that directory (see above).
    func lookedInDirectory(of path: String) {
        guard let watcher, watcher.watchesEverything else { return }
        let directory = PathKey(Self.directory(of: path) ?? "")
        guard directoryLooks.count < Self.directoryLooksLimit || directoryLooks[directory] != nil else { return }
        var looks = directoryLooks[directory] ?? DirectoryLooks()
        looks.since += 1
        if looks.since >= looks.before, knownDirectories.count < Self.knownDirectoryLimit {
            looks.since = 0
            if let (names, known) = learnDirectory(directory.path) {
                looks.before = max(1, known ? names / 16 : names)
            }
        }
        directoryLooks[directory] = looks
    }

    /// Something not the store's own was reported made or changed at `path`, or a document
    /// there was let go (its file may stay): in each known directory on its way, the name
    /// that leads to it is no longer free.
    func noteInTheWay(_ path: String) {
        guard !knownDirectories.isEmpty else { return }
        var directory: PathKey = ""
        var start = path.utf8.startIndex
        while true {
            let slash = path.utf8[start...].firstIndex(of: UInt8(ascii: "/"))
            if knownDirectories.contains(directory) {
                let name = PathKey(String(Substring(path.utf8[start..<(slash ?? path.utf8.endIndex)])))
                var names = namesInTheWay.removeValue(forKey: directory) ?? []
                if names.contains(name) || names.count < Self.namesInTheWayLimit {
                    names.insert(name)
                    namesInTheWay[directory] = names
                } else {
                    forgetKnown(directory)
                }
            }
            guard let slash else { return }
            directory = PathKey(String(Substring(path.utf8[..<slash])))
            start = path.utf8.index(after: slash)
        }
    }

    /// Something not the store's own left `path` (removed, renamed): the directories above
    /// it, it, and those beneath it are no longer known.
    func forgetKnownDirectories(atOrUnder path: String) {
        guard !knownDirectories.isEmpty else { return }
        var above = Self.directory(of: path)
        while let directory = above {
            forgetKnown(PathKey(directory))
            above = Self.directory(of: directory)
        }
        forgetKnown("")
        forgetKnown(PathKey(path))
        let prefix = path + "/"
        if knownDirectories.contains(where: { PathName.starts($0.path, with: prefix) }) {
            for directory in knownDirectories where PathName.starts(directory.path, with: prefix) {
                forgetKnown(directory)
            }
        }
    }

    private func forgetKnown(_ directory: PathKey) {
        if knownDirectories.remove(directory) != nil { namesInTheWay.removeValue(forKey: directory) }
    }
}

/// How many looks a new document in a directory took since the directory was last
/// listed, and how many it waits for before the next listing (``DocumentStore/lookedInDirectory(of:)``).
struct DirectoryLooks {
    var since = 0
    var before = 1
}
