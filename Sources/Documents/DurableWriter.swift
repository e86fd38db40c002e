import Foundation
import Posix
import Synchronization

/// The one code path through which document bytes reach the disk.
///
/// A regular file is replaced by the durable recipe: a temporary file
/// `.<name>.autosave-XXXXXX` created exclusively in the same directory, all bytes
/// written, the old file's mode and owner restored, `fsync`, `renameat` over the
/// destination, `fsync` of the directory. Any failure unlinks the temporary file and
/// leaves the old file untouched. When ``write(_:to:options:originalContentsPath:)``
/// returns, the new version is durable.
///
/// A directory (package) that exists is updated in place: only children that changed
/// since the wrapper was last read or written are written (each by the recipe above),
/// removed children are unlinked, and the directory is synced once. With `.atomic`, a
/// new tree is built beside the old one — unchanged files hard-linked, changed ones
/// written — and swapped in with `renameat2(RENAME_EXCHANGE)`; where the file system
/// refuses the exchange, the old tree is renamed aside first. Renames that must not
/// replace anything use `RENAME_NOREPLACE`, or where the file system refuses the flag,
/// a hard link or a checked rename (see `Renaming`). ``recover(at:recursive:)``
/// resolves whatever a crash leaves behind.
public struct DurableWriter: Sendable {
    /// What to do when the destination is a symbolic link.
    public enum SymlinkPolicy: Sendable, Hashable {
        /// Write to the file the link points at, keeping the link (as editors do).
        case follow
        /// Refuse to write; the error's operation is `.followSymbolicLink`.
        case refuse
    }

    /// How a new package tree replaces the old one.
    public enum PackageSwap: Sendable, Hashable {
        /// `renameat2(RENAME_EXCHANGE)`: the destination always names a complete tree.
        /// Where the file system refuses it (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`), the
        /// writer falls back to ``renameAside`` by itself.
        case exchange
        /// Rename the old tree aside, then the new one into place. For file systems that
        /// accept the exchange but mishandle it; a crash between the renames is finished
        /// by ``DurableWriter/recover(at:recursive:)``.
        case renameAside
    }

    public var symlinkPolicy: SymlinkPolicy
    public var packageSwap: PackageSwap
    /// Whether written regular-file wrappers keep their bytes in memory (as Apple's do).
    /// With `false`, a written wrapper becomes lazy, like one read from disk: its bytes
    /// are read back on access, checked against the file written. A daemon holding many
    /// documents keeps one copy of each in memory instead of two.
    public var keepsWrittenContents: Bool
    /// A directory every write and prepared write of this writer is confined to: the
    /// destination (and `originalContentsPath`) must lie beneath it, their directories
    /// are opened beneath it without following any symbolic link (`openat2` with
    /// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or, in one lookup, with
    /// `RESOLVE_NO_SYMLINKS` on their whole path while no link leads to the root), and no
    /// link at the destination is followed, so a directory swapped for a link between a
    /// caller's checks and the write cannot take the write elsewhere. `nil`: none.
    public var confinement: String?
    /// Called with the destination's path right after a regular file's rename, before
    /// anything else, and once a package's directory is swapped in or updated in place:
    /// where tests stand in for another program that replaces the file or the directory
    /// in that moment.
    var afterRename: (@Sendable (String) -> Void)?
    /// Called with a package's path right before the writer puts its directory in place:
    /// once a new tree is built, before the look that precedes the exchange, or before the
    /// directory found there is opened to be updated in place (and with a package
    /// directory's path once its own new tree is built): where tests stand in for another
    /// program that replaces the package in that moment.
    var beforePlacing: (@Sendable (String) -> Void)?
    /// Whether a directory beneath ``confinement`` may be opened by its whole path in one
    /// lookup: shared by this writer's copies, and given up for good once a symbolic link
    /// is found above the root (see `WriteSession.openDirectory(_:relativeTo:)`).
    let wholePathLookup = WholePathLookup()

    public init(
        symlinkPolicy: SymlinkPolicy = .follow, packageSwap: PackageSwap = .exchange, keepsWrittenContents: Bool = true,
        confinedTo confinement: String? = nil
    ) {
        self.symlinkPolicy = symlinkPolicy
        self.packageSwap = packageSwap
        self.keepsWrittenContents = keepsWrittenContents
        self.confinement = confinement
    }

    /// What a write did.
    public struct Report: Sendable, Hashable {
        /// The path actually written (after following symbolic links).
        public var path = ""
        /// Bytes of regular-file contents written.
        public var bytesWritten = 0
        /// Regular files and links written.
        public var filesWritten = 0
        /// Unchanged files hard-linked into a new package tree.
        public var filesLinked = 0
        /// Unchanged children left as they were.
        public var filesUnchanged = 0
        /// Children removed from a package.
        public var entriesRemoved = 0
        /// For a regular file: the temporary name (in the destination's directory) it was
        /// written under and renamed from, which the rename's inotify event names.
        public var temporaryName: String?
        /// The status of what this write put in place, taken from its own descriptor: a
        /// regular file's right after the rename (which changes its change time), a
        /// package's directory once every member is written and the directory swapped in
        /// or updated in place. A status looked up by path could be another program's
        /// file or directory that replaced this one in the meantime, and a caller
        /// recording it would take that for its own; `nil` for a symbolic link, or if the
        /// status could not be taken.
        public var placed: FileStatus?
    }

    // MARK: Writing

    /// Writes `wrapper` to `path` durably.
    ///
    /// - Parameters:
    ///   - wrapper: A regular-file, directory or symbolic-link wrapper.
    ///   - path: The destination. Its parent directory must exist.
    ///   - options: `.atomic` swaps a package in whole; `.withNameUpdating` sets the
    ///     wrappers' `filename`s to the names written.
    ///   - originalContentsPath: Where unchanged children of a package can be
    ///     hard-linked from; defaults to `path`.
    ///   - expected: What must be at `path` when it is replaced (see ``ExpectedDestination``);
    ///     `nil`: whatever is there. It is compared right before the rename of a regular file
    ///     or a symbolic link (an expectation made from a link's own status is that link), and
    ///     of a package swapped in whole, once its new tree is built; a package updated in
    ///     place must be, once opened, the directory looked at, and each member it replaces
    ///     or removes must be as the wrapper last read or wrote it.
    ///   - beforeReplacing: For a regular file, called with the written file's device, inode,
    ///     size and modification time once it is written and synced, right before the rename
    ///     that puts it in place (the rename keeps all four): how a caller records which
    ///     file its save is about to leave at `path`. What it throws fails the write, with
    ///     nothing replaced.
    ///   - whileSyncing: For a regular file, called with its size and its open temporary
    ///     once its bytes are written, right before the `fsync` that makes them durable, on
    ///     the writing thread: work to do while the disk writes, and metadata to make
    ///     durable with the bytes (an extended attribute set on the descriptor, say). A file of ``writeBackAheadBytes`` or more is then
    ///     written in pieces of that size, each one's write-back started once it is written,
    ///     so that the disk is busy from the first piece on and while the work runs.
    ///   - leftOpen: When given, a regular file's write that succeeds leaves its descriptors
    ///     (the directories it opened, the file) there for the caller to close, instead of
    ///     closing them before it returns: a caller waiting to answer for the write closes
    ///     them once it has answered. A write that fails closes its own.
    /// - Returns: What was written.
    /// - Throws: ``DocumentError`` naming the operation, the path and the errno;
    ///   ``DestinationChanged`` when `expected` does not match, with nothing replaced (for
    ///   a package's member, nothing in the member's directory).
    @discardableResult
    public func write(
        _ wrapper: FileWrapper, to path: String, options: FileWrapper.WritingOptions = [],
        originalContentsPath: String? = nil, expecting expected: ExpectedDestination? = nil,
        beforeReplacing: ((_ device: UInt64, _ inode: UInt64, _ size: Int64, _ modified: FileTime) throws -> Void)? =
            nil,
        whileSyncing: ((_ size: Int64, _ temporary: FileDescriptor) -> Void)? = nil,
        leftOpen: DescriptorsLeftOpen? = nil
    ) throws -> Report {
        var session = WriteSession(policy: symlinkPolicy, swap: packageSwap, keepsContents: keepsWrittenContents)
        session.afterRename = afterRename
        session.beforePlacing = beforePlacing
        session.wholePathLookup = wholePathLookup
        // A caller that says what it expects at the destination expects a package's members too.
        session.checksMembers = expected != nil
        if wrapper.isRegularFile, leftOpen != nil { session.closedLater = [] }
        defer { session.closeAll() }
        if let confinement { try session.confine(to: confinement) }
        // A regular file whose destination is known — nothing (a document's first save),
        // or a file whose whole status the caller recorded — is not looked at before it is
        // written: the look right before the rename says whether that still holds, and
        // whatever is there otherwise is not replaced.
        var known: FileStatus?? = nil
        // Only where a symbolic link at the destination is refused anyway: a writer that
        // follows one must look before it writes to know where the file goes.
        if wrapper.isRegularFile, symlinkPolicy == .refuse || confinement != nil {
            switch expected {
            case .absent: known = .some(nil)
            case .status(let status): known = status
            default: break
            }
        }
        let location = try session.resolve(path, followingLinks: !wrapper.isSymbolicLink, knownExisting: known)
        if let expected, case .directory = wrapper.node, !expected.matches(location.existing) {
            throw DestinationChanged(path: location.path, expected: expected, found: location.existing)
        }
        switch wrapper.node {
        case .regularFile:
            try session.writeRegularFile(
                wrapper, at: location, syncDirectory: true, expecting: expected, reportingPlaced: true,
                beforeReplacing: beforeReplacing, whileSyncing: whileSyncing)
        case .symbolicLink(let destination):
            try session.writeSymbolicLink(
                wrapper, destination: destination, at: location, syncDirectory: true, expecting: expected)
        case .directory:
            let tree = try session.writeDirectory(
                wrapper, at: location, atomic: options.contains(.atomic),
                linkBase: originalContentsPath ?? location.path, syncParent: true, expecting: expected)
            session.report.placed = try? tree.status()
        }
        session.commit(updatingNames: options.contains(.withNameUpdating))
        if options.contains(.withNameUpdating) { wrapper.filename = location.name }
        session.report.path = location.path
        if let leftOpen { leftOpen.descriptors += session.handOverDescriptors() }
        return session.report
    }

    /// Writes `contents` as a regular file at `path` durably; a file the write creates
    /// gets `permissions` (default: 0666 less the process's umask).
    @discardableResult
    public func write(contents: Data, to path: String, permissions: FilePermissions? = nil) throws -> Report {
        let wrapper = FileWrapper(regularFileWithContents: contents)
        if let permissions {
            wrapper.fileAttributes = [FileAttributeKey.posixPermissions.rawValue: Int(permissions.rawValue)]
        }
        return try write(wrapper, to: path)
    }

    /// From this many bytes, a regular file written with work to do while it syncs is
    /// written in pieces of this size, each one's write-back started as soon as it is
    /// written (see ``write(_:to:options:originalContentsPath:expecting:beforeReplacing:whileSyncing:leftOpen:)``);
    /// below it the disk's part is too short to be worth the system calls. (Pieces of
    /// 128 KiB measured slower for a megabyte, 512 KiB the same.)
    public static let writeBackAheadBytes = 256 << 10
}

/// A location to write: a name in an open directory.
struct Location {
    var directory: FileDescriptor
    var directoryPath: String
    var name: String
    var existing: FileStatus?

    var path: String { directoryPath == "/" ? "/" + name : directoryPath + "/" + name }
}

/// The state of one write: descriptors to close, the report, and the sync records to
/// apply once the write has succeeded.
struct WriteSession {
    let policy: DurableWriter.SymlinkPolicy
    let swap: DurableWriter.PackageSwap
    var report = DurableWriter.Report()
    private var opened: [FileDescriptor] = []
    private var pending: [PendingSync] = []
    /// Files of a tree being built, written but not yet synced, kept open so that a
    /// write-back error reaches this writer.
    private var unsyncedFiles: [(FileDescriptor, String)] = []
    /// Set once a tree has more new files than it is worth syncing one by one: then
    /// one `syncfs` makes them all durable.
    private var syncWholeFileSystem = false
    static let fileSyncLimit = 64

    /// A sync record to apply once the whole write has succeeded.
    private struct PendingSync {
        var wrapper: FileWrapper
        var record: SyncRecord
        var name: String
        /// Directories: the changed keys this write handled (`nil`: all of them).
        var settledKeys: Set<String>?
    }

    /// The creation mask, read once (see ``stageRegularFile(_:at:)``; a mode it changes shows in the status after the sync).
    static let creationMask = CurrentProcess.fileCreationMask.rawValue
    static let newFilePermissions = FilePermissions(rawValue: 0o666 & ~creationMask)
    static let newDirectoryPermissions = FilePermissions(rawValue: 0o777 & ~creationMask)

    let keepsContents: Bool
    /// Whether an in-place update of a package looks at the members it replaces or
    /// removes first (a write given an ``ExpectedDestination``; see ``updateInPlace(_:directory:path:)``).
    var checksMembers = false
    /// See ``DurableWriter/afterRename``.
    var afterRename: (@Sendable (String) -> Void)?
    /// See ``DurableWriter/beforePlacing``.
    var beforePlacing: (@Sendable (String) -> Void)?

    init(policy: DurableWriter.SymlinkPolicy, swap: DurableWriter.PackageSwap, keepsContents: Bool = true) {
        self.policy = policy
        self.swap = swap
        self.keepsContents = keepsContents
    }

    /// Descriptors whose closing waits for the session's end: `nil` unless the caller
    /// closes them itself once the write has succeeded (`leftOpen` of
    /// ``DurableWriter/write(_:to:options:originalContentsPath:expecting:beforeReplacing:whileSyncing:leftOpen:)``).
    var closedLater: [FileDescriptor]?

    /// Closes `fd` now, or when the session ends if its caller closes them (``closedLater``).
    private mutating func closeSoon(_ fd: FileDescriptor) {
        if closedLater != nil { closedLater?.append(fd) } else { try? fd.close() }
    }

    /// The descriptors the caller closes: the directories opened and those kept for later.
    mutating func handOverDescriptors() -> [FileDescriptor] {
        guard let later = closedLater else { return [] }
        defer {
            opened = []
            closedLater = nil
        }
        return opened + later
    }

    mutating func closeAll() {
        for fd in opened { try? fd.close() }
        opened = []
        for fd in closedLater ?? [] { try? fd.close() }
        closedLater = nil
        for (fd, _) in unsyncedFiles { try? fd.close() }
        unsyncedFiles = []
    }

    /// Takes a newly written file of a tree being built; ``syncTree(_:path:)`` makes it durable.
    private mutating func deferSync(of fd: FileDescriptor, path: String) {
        if syncWholeFileSystem {
            try? fd.close()
        } else if unsyncedFiles.count < Self.fileSyncLimit {
            unsyncedFiles.append((fd, path))
        } else {
            for (open, _) in unsyncedFiles { try? open.close() }
            try? fd.close()
            unsyncedFiles = []
            syncWholeFileSystem = true
        }
    }

    /// Makes every file written into a tree durable: each synced, or the whole file system at once.
    private mutating func syncTree(_ tree: FileDescriptor, path: String) throws {
        defer {
            for (fd, _) in unsyncedFiles { try? fd.close() }
            unsyncedFiles = []
            syncWholeFileSystem = false
        }
        if syncWholeFileSystem {
            do throws(Errno) { try tree.syncFileSystem() } catch {
                throw DocumentError(operation: .sync, path: path, errno: error)
            }
        }
        for (fd, filePath) in unsyncedFiles {
            do throws(Errno) { try fd.sync() } catch {
                throw DocumentError(operation: .sync, path: filePath, errno: error)
            }
        }
    }

    mutating func commit(updatingNames: Bool) {
        for entry in pending {
            entry.wrapper.settle(entry.record, keys: entry.settledKeys, releasingContents: !keepsContents)
            if updatingNames { entry.wrapper.filename = entry.name }
        }
        pending = []
    }

    private mutating func record(
        _ wrapper: FileWrapper, _ record: SyncRecord, name: String, settledKeys: Set<String>? = nil
    ) {
        pending.append(PendingSync(wrapper: wrapper, record: record, name: name, settledKeys: settledKeys))
    }

    // MARK: Resolving the destination

    /// The directory writes are confined to (see ``DurableWriter/confinement``), and its
    /// descriptor once opened: a directory beneath it is usually reached without it.
    private var confinement: (path: String, directory: FileDescriptor?)?
    /// See ``DurableWriter/wholePathLookup``; `nil`: always through the root's descriptor.
    var wholePathLookup: WholePathLookup?

    mutating func confine(to root: String) throws {
        confinement = (root, nil)
    }

    /// The root's descriptor (see ``confine(to:)``), opened by path the first time the
    /// session needs it, and closed with the session.
    private mutating func rootDirectory() throws -> FileDescriptor {
        guard let (root, directory) = confinement else { preconditionFailure("a session not confined") }
        if let directory { return directory }
        do throws(Errno) {
            let fd = try FileDescriptor.open(root, .readOnly, options: [.directory])
            opened.append(fd)
            confinement = (root, fd)
            return fd
        } catch {
            throw DocumentError(operation: .openDirectory, path: root, errno: error)
        }
    }

    /// Opens the directory `path`. Confined: only beneath the root, through no symbolic
    /// link beneath it — by its whole path in one lookup that follows no link at all
    /// (`openat2` with `RESOLVE_NO_SYMLINKS`; the root is looked up by its path either way,
    /// so a file system mounted over it since is seen), or, when that fails, through the
    /// root's descriptor (`RESOLVE_BENEATH`), which names the failure. A link above the
    /// root (one the root's own lookup follows) turns the one lookup off for the writer.
    mutating func openDirectory(_ path: String, relativeTo base: FileDescriptor = .currentWorkingDirectory)
        throws -> FileDescriptor
    {
        guard let (root, _) = confinement else {
            do throws(Errno) {
                let fd = try FileDescriptor.open(path, relativeTo: base, .readOnly, options: [.directory])
                opened.append(fd)
                return fd
            } catch {
                throw DocumentError(operation: .openDirectory, path: path, errno: error)
            }
        }
        guard let relative = PathName.relative(path, to: root) else {
            throw DocumentError(operation: .openDirectory, path: path, errno: .crossDevice)
        }
        // The root itself: its descriptor (opened once, closed once).
        if relative == "." { return try rootDirectory() }
        var wholeFailed: Errno?
        if confinement?.directory == nil, let lookup = wholePathLookup, lookup.isUsable,
            !PathName.hasParentComponent(relative)
        {
            do throws(Errno) {
                let fd = try FileDescriptor.openWithoutSymlinks(path, options: [.directory])
                opened.append(fd)
                return fd
            } catch {
                if error == .noSystemCall { lookup.giveUp() }
                wholeFailed = error
            }
        }
        let directory = try rootDirectory()
        do throws(Errno) {
            let fd = try FileDescriptor.openBeneath(
                relative, relativeTo: directory, options: [.directory], noSymlinks: true)
            opened.append(fd)
            // A link the whole lookup refused and the lookup beneath the root did not meet: above the root.
            if wholeFailed == .tooManySymbolicLinks { wholePathLookup?.giveUp() }
            return fd
        } catch {
            throw DocumentError(operation: .openDirectory, path: path, errno: error)
        }
    }

    /// Opens the destination's directory and, by policy, follows a symbolic link at the destination.
    /// With `knownExisting`, the destination is taken to be what it says (`nil`: nothing), unlooked at.
    mutating func resolve(_ path: String, followingLinks: Bool, knownExisting: FileStatus?? = nil) throws -> Location {
        var current = path
        for _ in 0..<40 {
            let (directoryPath, name) = split(current)
            guard !name.isEmpty, name != ".", name != ".." else {
                throw DocumentError(
                    operation: .open, path: path, errno: .invalidArgument, detail: "the destination has no file name")
            }
            let directory = try openDirectory(directoryPath)
            let existing =
                if let knownExisting { knownExisting } else { try stat(name, in: directory, path: current) }
            guard let existing, existing.kind == .symbolicLink, followingLinks else {
                return Location(directory: directory, directoryPath: directoryPath, name: name, existing: existing)
            }
            if policy == .refuse || confinement != nil {
                throw DocumentError(
                    operation: .followSymbolicLink, path: current, errno: .tooManySymbolicLinks,
                    detail: "the destination is a symbolic link and the symlink policy is refuse")
            }
            let destination: String
            do throws(Errno) { destination = try directory.readSymbolicLink(name) } catch {
                throw DocumentError(operation: .readLink, path: current, errno: error)
            }
            current = destination.hasPrefix("/") ? destination : directoryPath + "/" + destination
        }
        throw DocumentError(
            operation: .followSymbolicLink, path: path, errno: .tooManySymbolicLinks,
            detail: "more than 40 symbolic links")
    }

    /// The directory and the name of `path`, on its bytes (`/` is never part of a
    /// multi-byte character): `"a/b/"` → `("a", "b")`, `"b"` → `(".", "b")`, `"/b"` → `("/", "b")`.
    private func split(_ path: String) -> (String, String) {
        let slash = UInt8(ascii: "/")
        var trimmed = path[...].utf8
        while trimmed.count > 1, trimmed.last == slash { trimmed = trimmed.dropLast() }
        guard let separator = trimmed.lastIndex(of: slash) else { return (".", String(Substring(trimmed))) }
        let directory = trimmed[..<separator]
        return (
            directory.isEmpty ? "/" : String(Substring(directory)),
            String(Substring(trimmed[trimmed.index(after: separator)...]))
        )
    }

    func stat(_ name: String, in directory: FileDescriptor, path: String) throws -> FileStatus? {
        do throws(Errno) { return try directory.statusIfPresent(of: name) } catch {
            throw DocumentError(operation: .stat, path: path, errno: error)
        }
    }

    // MARK: Regular files

    /// A regular file's bytes as the wrapper holds them: text is written from the
    /// string's own storage, with no copy made to write it.
    enum FileBytes {
        case data(Data)
        case text(String)

        var count: Int {
            switch self {
            case .data(let data): data.count
            case .text(let text): text.utf8.count
            }
        }

        func write(to fd: FileDescriptor) throws(Errno) {
            switch self {
            case .data(let data): try fd.writeAll(data)
            case .text(let text): try fd.writeAll(text.utf8)
            }
        }

        /// Writes the bytes in pieces of `piece` bytes, starting each one's write-back once it
        /// is written: the disk works on the first pieces while the next are copied.
        func write(to fd: FileDescriptor, startingWriteBackEvery piece: Int) throws(Errno) {
            func pieces(_ buffer: UnsafeRawBufferPointer) -> Result<Void, Errno> {
                Result { () throws(Errno) in
                    var offset = 0
                    while offset < buffer.count {
                        let end = min(buffer.count, offset + piece)
                        try fd.writeAll(UnsafeRawBufferPointer(rebasing: buffer[offset..<end]))
                        // Not waited for, and no error of its own: the `fsync` that follows
                        // waits for it and reports any write-back error.
                        try? fd.startWriteBack(from: Int64(offset), count: Int64(end - offset))
                        offset = end
                    }
                }
            }
            switch self {
            case .data(let data):
                try data.withUnsafeBytes { pieces($0) }.get()
            case .text(var text):
                // The string's own storage (a native string's already is contiguous).
                try text.withUTF8 { pieces(UnsafeRawBufferPointer($0)) }.get()
            }
        }
    }

    private func contents(of wrapper: FileWrapper, path: String) throws -> FileBytes {
        switch wrapper.node {
        case .regularFile(.loaded(let data)):
            return .data(data)
        case .regularFile(.text(let text)):
            return .text(text)
        case .regularFile(.onDisk(let source, let identity)):
            return .data(try DiskReader.readContents(at: source, expecting: identity))
        default:
            preconditionFailure("not a regular file wrapper")
        }
    }

    /// Creates `.<name>.autosave-XXXXXX` exclusively with `mode` (0600 unless told; no symlink following).
    private func createTemporary(
        in directory: FileDescriptor, directoryPath: String, for name: String,
        mode: FilePermissions = FilePermissions(rawValue: 0o600)
    )
        throws -> (FileDescriptor, String)
    {
        while true {
            let temporary = TemporaryName.make(for: name)
            do {
                let fd = try FileDescriptor.open(
                    temporary, relativeTo: directory, .writeOnly, options: [.exclusiveCreate, .noFollow],
                    permissions: mode)
                return (fd, temporary)
            } catch Errno.fileExists {
                continue
            } catch {
                throw DocumentError(operation: .createTemporary, path: join(directoryPath, temporary), errno: error)
            }
        }
    }

    /// Sets mode and owner: those of the file being replaced, else the wrapper's
    /// requested permissions, else the default for new files. The owner is set first
    /// because `chown` clears set-id bits.
    private func applyOwnership(
        to fd: FileDescriptor, replacing existing: FileStatus?, requested: FilePermissions?,
        defaultMode: FilePermissions,
        path: String
    ) throws {
        let current: FileStatus
        do throws(Errno) { current = try fd.status() } catch {
            throw DocumentError(operation: .stat, path: path, errno: error)
        }
        var mode = requested ?? defaultMode
        if let existing, existing.kind == current.kind {
            mode = existing.permissions
            if existing.userID != current.userID || existing.groupID != current.groupID {
                do {
                    try fd.changeOwner(user: existing.userID, group: existing.groupID)
                } catch Errno.notPermitted {
                    // Without CAP_CHOWN only the group can be kept, and only one we belong to.
                    try? fd.changeOwner(user: nil, group: existing.groupID)
                } catch {
                    throw DocumentError(operation: .changeOwner, path: path, errno: error)
                }
            }
        }
        if mode != current.permissions || mode.rawValue & 0o7000 != 0 {
            do throws(Errno) { try fd.changeMode(mode) } catch {
                throw DocumentError(operation: .changeMode, path: path, errno: error)
            }
        }
    }

    // MARK: Staging and committing

    /// A node written completely and durably under a temporary name beside its
    /// destination, waiting to be renamed into place.
    struct Staged {
        var wrapper: FileWrapper
        var location: Location
        var temporary: String
        var isTree: Bool
        var record: SyncRecord
        var bytes: Int
        /// A regular file's descriptor, when kept open for its status after the rename
        /// (``DurableWriter/Report/placed``); ``commit(_:syncDirectory:)`` or
        /// ``discard(_:)`` closes it.
        var file: FileDescriptor? = nil
        /// A tree's top directory, open (the session closes it, ``closeAll()``).
        var tree: FileDescriptor? = nil
    }

    mutating func stage(_ wrapper: FileWrapper, at location: Location, linkBase: String?) throws -> Staged {
        switch wrapper.node {
        case .regularFile: try stageRegularFile(wrapper, at: location)
        case .symbolicLink(let destination): try stageSymbolicLink(wrapper, destination: destination, at: location)
        case .directory: try stageTree(wrapper, at: location, linkBase: linkBase)
        }
    }

    /// Renames a staged node over its destination (exchanging trees), then syncs the
    /// directory. A regular file not `replacing`, and a new tree, refuse to replace
    /// anything that is there (``DestinationChanged``: nothing was expected).
    mutating func commit(_ staged: Staged, syncDirectory: Bool, replacing: Bool = true) throws {
        let location = staged.location
        let parent = location.directory
        if staged.isTree, location.existing != nil {
            var exchanged = swap == .exchange
            if exchanged {
                do throws(Errno) {
                    try parent.rename(staged.temporary, to: location.name, flags: .exchange)
                } catch let error where [.invalidArgument, .noSystemCall, .notSupported].contains(error) {
                    exchanged = false
                } catch {
                    throw DocumentError(operation: .exchange, path: location.path, errno: error)
                }
            }
            if exchanged {
                if syncDirectory { try sync(parent, path: location.directoryPath) }
                // The temporary name now holds the previous tree.
                TreeRemover.remove(staged.temporary, in: parent)
            } else {
                try swapByRenamingAside(temporary: staged.temporary, at: location)
            }
        } else {
            if staged.isTree || location.existing?.kind != .directory {
                do throws(Errno) {
                    if staged.isTree {
                        try Renaming.renameWithoutReplacing(staged.temporary, to: location.name, in: parent)
                    } else if replacing {
                        try parent.rename(staged.temporary, to: location.name, flags: [])
                        report.temporaryName = staged.temporary
                    } else {
                        // Where the flag is refused (FUSE, NFS), the plain rename after the look,
                        // as for any file: not the hard-link substitute, whose two steps
                        // (link, unlink) the watcher would see as a new file.
                        do {
                            try parent.rename(staged.temporary, to: location.name, flags: .noReplace)
                        } catch let error where Renaming.refusedFlags.contains(error) {
                            try parent.rename(staged.temporary, to: location.name, flags: [])
                        }
                        report.temporaryName = staged.temporary
                    }
                } catch .fileExists where staged.isTree || !replacing {
                    // Nothing was there at the look (a tree reaches this rename only then):
                    // another program took the name since.
                    let found = try stat(location.name, in: parent, path: location.path)
                    throw DestinationChanged(path: location.path, expected: .absent, found: found)
                } catch {
                    throw DocumentError(operation: .rename, path: location.path, errno: error)
                }
                if let file = staged.file {
                    afterRename?(location.path)
                    report.placed = try? file.status()
                }
            } else {
                throw DocumentError(
                    operation: .rename, path: location.path, errno: .isDirectory,
                    detail: "a directory is in the way")
            }
            if syncDirectory {
                try sync(parent, path: location.directoryPath, placed: staged.file == nil ? nil : report.placed)
            }
        }
        record(staged.wrapper, staged.record, name: location.name)
        report.bytesWritten += staged.bytes
        if !staged.isTree { report.filesWritten += 1 }
    }

    /// Removes a staged node that will not be committed.
    func discard(_ staged: Staged) {
        try? staged.file?.close()
        TreeRemover.remove(staged.temporary, in: staged.location.directory)
    }

    /// Writes a regular file by the recipe; with `reportingPlaced`, its status after the
    /// rename goes into the report (``DurableWriter/Report/placed``).
    mutating func writeRegularFile(
        _ wrapper: FileWrapper, at location: Location, syncDirectory: Bool,
        expecting expected: ExpectedDestination? = nil, reportingPlaced: Bool = false,
        beforeReplacing: ((UInt64, UInt64, Int64, FileTime) throws -> Void)? = nil,
        whileSyncing: ((_ size: Int64, _ temporary: FileDescriptor) -> Void)? = nil
    ) throws {
        let staged = try stageRegularFile(
            wrapper, at: location, keepingOpen: reportingPlaced, whileSyncing: whileSyncing)
        do {
            // Looked at again right before the rename: the contents took time to write and sync.
            if let expected {
                let found = try stat(location.name, in: location.directory, path: location.path)
                if !expected.matches(found) {
                    try refuseObstacle(found, at: location)
                    throw DestinationChanged(path: location.path, expected: expected, found: found)
                }
            }
            if let beforeReplacing {
                let written = staged.record.identity
                try beforeReplacing(written.device, written.inode, written.size, written.modified)
            }
            // Nothing expected there: the rename refuses to replace what appeared since the
            // look (the one compare-and-rename POSIX has, for "absent").
            try commit(staged, syncDirectory: syncDirectory, replacing: expected != .absent)
        } catch {
            // The file's descriptor is closed here, once (a failed directory sync comes after the rename).
            discard(staged)
            throw error
        }
        if let file = staged.file { closeSoon(file) }
    }

    /// A directory, or a symbolic link where links are refused, found where a regular file
    /// goes: no version of the file that another program wrote (which a caller would keep
    /// beside its own and try again), but something in the way of every write, refused as
    /// the look before the write refuses it.
    private func refuseObstacle(_ found: FileStatus?, at location: Location) throws {
        switch found?.kind {
        case .directory:
            throw DocumentError(
                operation: .rename, path: location.path, errno: .isDirectory,
                detail: "a directory is in the way of a regular file")
        case .symbolicLink where policy == .refuse || confinement != nil:
            throw DocumentError(
                operation: .followSymbolicLink, path: location.path, errno: .tooManySymbolicLinks,
                detail: "the destination is a symbolic link and the symlink policy is refuse")
        default:
            return
        }
    }

    /// Writes a symbolic link: made under a temporary name beside the destination, then
    /// renamed over it. Given `expected`, the destination is looked at right before the
    /// rename, as a regular file's is; where nothing is expected, the rename replaces
    /// nothing either (what appeared since the look is refused).
    mutating func writeSymbolicLink(
        _ wrapper: FileWrapper, destination: String, at location: Location, syncDirectory: Bool,
        expecting expected: ExpectedDestination? = nil
    )
        throws
    {
        let staged = try stageSymbolicLink(wrapper, destination: destination, at: location)
        do {
            if let expected {
                let found = try stat(location.name, in: location.directory, path: location.path)
                // An expectation made from a link's own status reads as a file's
                // (``ExpectedDestination/init(_:)``): a link found is compared as that file,
                // which only the same link (device, inode, times) can match.
                var compared = found
                if compared?.kind == .symbolicLink { compared?.kind = .regular }
                if !expected.matches(compared) {
                    if found?.kind == .directory {
                        throw DocumentError(
                            operation: .rename, path: location.path, errno: .isDirectory,
                            detail: "a directory is in the way of a symbolic link")
                    }
                    throw DestinationChanged(path: location.path, expected: expected, found: found)
                }
            }
            try commit(staged, syncDirectory: syncDirectory, replacing: expected != .absent)
        } catch {
            discard(staged)
            throw error
        }
    }

    /// Writes a directory: in place when one is there and `atomic` is not asked for, else
    /// as a new tree swapped in. Returns the descriptor of the directory now at the
    /// destination (the session closes it).
    ///
    /// Given `expected` (which the caller compared with `location.existing`), a directory
    /// updated in place must be the one looked at: it is opened again by name, and POSIX
    /// has no compare-and-open, so the opened directory's device and inode are compared
    /// with the look's, and another program's directory put there in between is refused
    /// (``DestinationChanged``) before anything in it is written. A new tree is compared
    /// once built (``replaceTree(_:at:linkBase:syncParent:expecting:)``).
    @discardableResult
    mutating func writeDirectory(
        _ wrapper: FileWrapper, at location: Location, atomic: Bool, linkBase: String?, syncParent: Bool,
        expecting expected: ExpectedDestination? = nil
    ) throws -> FileDescriptor {
        if !atomic, let existing = location.existing, existing.kind == .directory {
            beforePlacing?(location.path)
            let directory: FileDescriptor
            do throws(Errno) {
                directory = try FileDescriptor.open(
                    location.name, relativeTo: location.directory, options: [.directory, .noFollow])
            } catch {
                throw DocumentError(operation: .openDirectory, path: location.path, errno: error)
            }
            opened.append(directory)
            if let expected {
                let found: FileStatus
                do throws(Errno) { found = try directory.status() } catch {
                    throw DocumentError(operation: .stat, path: location.path, errno: error)
                }
                if found.device != existing.device || found.inode != existing.inode {
                    throw DestinationChanged(path: location.path, expected: expected, found: found)
                }
            }
            try updateInPlace(wrapper, directory: directory, path: location.path)
            afterRename?(location.path)
            return directory
        }
        let tree = try replaceTree(
            wrapper, at: location, linkBase: linkBase, syncParent: syncParent, expecting: expected)
        afterRename?(location.path)
        return tree
    }

    /// Stages `wrapper` as a new tree and swaps it in; returns the new tree's descriptor
    /// (the session closes it).
    ///
    /// Given `expected`, the destination is looked at again once the tree is built and
    /// synced, right before the exchange or rename: building it took time, and another
    /// program's package put there meanwhile is not swapped out (``DestinationChanged``,
    /// the new tree removed). A change between that look and the exchange is not caught.
    @discardableResult
    private mutating func replaceTree(
        _ wrapper: FileWrapper, at location: Location, linkBase: String?, syncParent: Bool,
        expecting expected: ExpectedDestination? = nil
    ) throws -> FileDescriptor {
        let staged = try stageTree(wrapper, at: location, linkBase: linkBase)
        do {
            beforePlacing?(location.path)
            if let expected {
                let found = try stat(location.name, in: location.directory, path: location.path)
                if !expected.matches(found) {
                    throw DestinationChanged(path: location.path, expected: expected, found: found)
                }
            }
            try commit(staged, syncDirectory: syncParent)
        } catch {
            discard(staged)
            throw error
        }
        return staged.tree!
    }

    private mutating func stageRegularFile(
        _ wrapper: FileWrapper, at location: Location, keepingOpen: Bool = false,
        whileSyncing: ((_ size: Int64, _ temporary: FileDescriptor) -> Void)? = nil
    ) throws -> Staged {
        if location.existing?.kind == .directory {
            throw DocumentError(
                operation: .rename, path: location.path, errno: .isDirectory,
                detail: "a directory is in the way of a regular file")
        }
        let data = try contents(of: wrapper, path: location.path)
        let existing = location.existing?.kind == .regular ? location.existing : nil
        // The temporary is this process's. When the file it replaces has the owner and
        // group new files get, only the mode is set: at creation when the creation mask
        // leaves it whole (the usual 0644 under umask 022), else with fchmod. The status
        // taken after the sync shows whether the group (a set-group-ID directory gives
        // its own) and the mode came out as expected; they are put right if not. A
        // temporary for another owner is created 0600 and given its owner first.
        let ownedAsNew =
            existing.map {
                $0.userID == CurrentProcess.effectiveUserID && $0.groupID == CurrentProcess.effectiveGroupID
            } ?? true
        let mode = existing?.permissions ?? wrapper.requestedPermissions ?? Self.newFilePermissions
        let modeAtCreation =
            ownedAsNew && mode.rawValue & ~0o777 == 0 && mode.rawValue & Self.creationMask == 0
        let (fd, temporary) = try createTemporary(
            in: location.directory, directoryPath: location.directoryPath, for: location.name,
            mode: modeAtCreation ? mode : FilePermissions(rawValue: 0o600))
        let temporaryPath = join(location.directoryPath, temporary)
        do {
            let identity: DiskIdentity
            do {
                defer { if !keepingOpen { try? fd.close() } }
                identity = try stageContents(
                    data, into: fd, path: temporaryPath, wrapper: wrapper, existing: existing, location: location,
                    mode: mode, ownedAsNew: ownedAsNew, modeAtCreation: modeAtCreation, whileSyncing: whileSyncing)
            } catch {
                if keepingOpen { try? fd.close() }
                throw error
            }
            return Staged(
                wrapper: wrapper, location: location, temporary: temporary, isTree: false,
                record: SyncRecord(path: location.path, identity: identity), bytes: data.count,
                file: keepingOpen ? fd : nil)
        } catch {
            try? location.directory.unlink(temporary)
            throw error
        }
    }

    /// Writes a regular file's temporary: its bytes, mode and owner, synced; its identity after the sync.
    private func stageContents(
        _ data: FileBytes, into fd: FileDescriptor, path temporaryPath: String, wrapper: FileWrapper,
        existing: FileStatus?, location: Location, mode: FilePermissions, ownedAsNew: Bool, modeAtCreation: Bool,
        whileSyncing: ((_ size: Int64, _ temporary: FileDescriptor) -> Void)?
    ) throws -> DiskIdentity {
        // A large file that is to be synced after work done meanwhile has its write-back
        // started piece by piece as it is written: the disk works on it from its first piece.
        let startsWriteBack = whileSyncing != nil && data.count >= DurableWriter.writeBackAheadBytes
        do throws(Errno) {
            if startsWriteBack {
                try data.write(to: fd, startingWriteBackEvery: DurableWriter.writeBackAheadBytes)
            } else {
                try data.write(to: fd)
            }
        } catch {
            throw DocumentError(operation: .write, path: temporaryPath, errno: error)
        }
        if ownedAsNew, !modeAtCreation {
            do throws(Errno) { try fd.changeMode(mode) } catch {
                throw DocumentError(operation: .changeMode, path: temporaryPath, errno: error)
            }
        } else if !ownedAsNew {
            try applyOwnership(
                to: fd, replacing: location.existing, requested: wrapper.requestedPermissions,
                defaultMode: Self.newFilePermissions, path: temporaryPath)
        }
        whileSyncing?(Int64(data.count), fd)
        do throws(Errno) { try fd.sync() } catch {
            throw DocumentError(operation: .sync, path: temporaryPath, errno: error)
        }
        var status: FileStatus
        do throws(Errno) { status = try fd.status() } catch {
            throw DocumentError(operation: .stat, path: temporaryPath, errno: error)
        }
        if ownedAsNew,
            modeAtCreation && status.permissions != mode
                || existing.map({ status.userID != $0.userID || status.groupID != $0.groupID }) == true
        {
            try applyOwnership(
                to: fd, replacing: existing, requested: wrapper.requestedPermissions,
                defaultMode: Self.newFilePermissions, path: temporaryPath)
            do throws(Errno) {
                try fd.sync()
                status = try fd.status()
            } catch {
                throw DocumentError(operation: .sync, path: temporaryPath, errno: error)
            }
        }
        return DiskIdentity(status)
    }

    private mutating func stageSymbolicLink(_ wrapper: FileWrapper, destination: String, at location: Location) throws
        -> Staged
    {
        if location.existing?.kind == .directory {
            throw DocumentError(
                operation: .rename, path: location.path, errno: .isDirectory,
                detail: "a directory is in the way of a symbolic link")
        }
        while true {
            let temporary = TemporaryName.make(for: location.name)
            do throws(Errno) {
                try location.directory.makeSymbolicLink(temporary, pointingTo: destination)
                let status = try location.directory.status(of: temporary)
                return Staged(
                    wrapper: wrapper, location: location, temporary: temporary, isTree: false,
                    record: SyncRecord(path: location.path, identity: DiskIdentity(status)), bytes: 0)
            } catch .fileExists {
                continue
            } catch {
                try? location.directory.unlink(temporary)
                throw DocumentError(
                    operation: .makeSymbolicLink, path: join(location.directoryPath, temporary), errno: error)
            }
        }
    }

    /// Builds a package under a temporary name beside `location`: unchanged files
    /// hard-linked from `linkBase`, the others written; every directory synced.
    private mutating func stageTree(_ wrapper: FileWrapper, at location: Location, linkBase: String?) throws -> Staged {
        let parent = location.directory
        var temporary = TemporaryName.make(for: location.name)
        while true {
            do throws(Errno) {
                try parent.makeDirectory(temporary, permissions: FilePermissions(rawValue: 0o700))
                break
            } catch .fileExists {
                temporary = TemporaryName.make(for: location.name)
            } catch {
                throw DocumentError(
                    operation: .makeDirectory, path: join(location.directoryPath, temporary), errno: error)
            }
        }
        do {
            let temporaryPath = join(location.directoryPath, temporary)
            let newTree: FileDescriptor
            do throws(Errno) {
                newTree = try FileDescriptor.open(temporary, relativeTo: parent, options: [.directory, .noFollow])
            } catch {
                throw DocumentError(operation: .openDirectory, path: temporaryPath, errno: error)
            }
            opened.append(newTree)
            var linkSource: FileDescriptor? = nil
            if let linkBase { linkSource = try? openDirectory(linkBase) }
            let before = report.bytesWritten
            try populate(
                wrapper, into: newTree, buildPath: temporaryPath, finalPath: location.path, linkSource: linkSource,
                linkBase: linkBase)
            let bytes = report.bytesWritten - before
            report.bytesWritten = before
            try syncTree(newTree, path: temporaryPath)
            try applyOwnership(
                to: newTree, replacing: location.existing, requested: wrapper.requestedPermissions,
                defaultMode: Self.newDirectoryPermissions, path: temporaryPath)
            try sync(newTree, path: temporaryPath)
            let identity: DiskIdentity
            do throws(Errno) { identity = DiskIdentity(try newTree.status()) } catch {
                throw DocumentError(operation: .stat, path: temporaryPath, errno: error)
            }
            return Staged(
                wrapper: wrapper, location: location, temporary: temporary, isTree: true,
                record: SyncRecord(path: location.path, identity: identity), bytes: bytes, tree: newTree)
        } catch {
            TreeRemover.remove(temporary, in: parent)
            throw error
        }
    }

    /// The fallback where `RENAME_EXCHANGE` is refused: the old tree is renamed to
    /// `.<name>.autosave-old-XXXXXX`, the new one to the destination. A crash between the
    /// two renames is finished by ``DurableWriter/recover(at:recursive:)``: the new tree
    /// was complete and synced before the first rename. The old tree's removal is synced
    /// too: a file system that keeps a later change to the directory without an earlier
    /// one could otherwise keep the next save's first rename and not this removal, and
    /// leave two old trees and no destination, with nothing to tell recovery which is the
    /// newer.
    private mutating func swapByRenamingAside(temporary: String, at location: Location) throws {
        let parent = location.directory
        let old = TemporaryName.make(for: location.name, old: true)
        do throws(Errno) { try Renaming.renameWithoutReplacing(location.name, to: old, in: parent) } catch {
            throw DocumentError(operation: .rename, path: location.path, errno: error)
        }
        do throws(Errno) { try Renaming.renameWithoutReplacing(temporary, to: location.name, in: parent) } catch {
            try? Renaming.renameWithoutReplacing(old, to: location.name, in: parent)
            throw DocumentError(operation: .rename, path: location.path, errno: error)
        }
        try sync(parent, path: location.directoryPath)
        TreeRemover.remove(old, in: parent)
        // The save is done: a failure here leaves the removal to the next sync.
        try? parent.sync()
    }

    /// Fills a fresh directory with `wrapper`'s children: unchanged files hard-linked from
    /// `linkSource` when they still are what the wrapper last saw there, others written.
    private mutating func populate(
        _ wrapper: FileWrapper, into directory: FileDescriptor, buildPath: String, finalPath: String,
        linkSource: FileDescriptor?, linkBase: String?
    ) throws {
        for (key, child) in wrapper.fileWrappers ?? [:] {
            let childBuildPath = join(buildPath, key)
            let childFinalPath = join(finalPath, key)
            let childLinkBase = linkBase.map { join($0, key) }
            switch child.node {
            case .regularFile:
                if let linkSource, let childLinkBase, let sync = child.syncRecord, sync.path == childLinkBase,
                    (try? linkSource.status(of: key)).map(DiskIdentity.init) == sync.identity,
                    (try? linkSource.link(key, to: key, in: directory)) != nil
                {
                    record(child, SyncRecord(path: childFinalPath, identity: sync.identity), name: key)
                    report.filesLinked += 1
                    continue
                }
                let data = try contents(of: child, path: childFinalPath)
                let fd: FileDescriptor
                do {
                    fd = try FileDescriptor.open(
                        key, relativeTo: directory, .writeOnly, options: [.exclusiveCreate, .noFollow],
                        permissions: FilePermissions(rawValue: 0o600))
                } catch {
                    throw DocumentError(operation: .createTemporary, path: childBuildPath, errno: error)
                }
                let identity: DiskIdentity
                do {
                    do throws(Errno) { try data.write(to: fd) } catch {
                        throw DocumentError(operation: .write, path: childBuildPath, errno: error)
                    }
                    let previous = try? linkSource?.status(of: key)
                    try applyOwnership(
                        to: fd, replacing: previous ?? nil, requested: child.requestedPermissions,
                        defaultMode: Self.newFilePermissions, path: childBuildPath)
                    do throws(Errno) { identity = DiskIdentity(try fd.status()) } catch {
                        throw DocumentError(operation: .stat, path: childBuildPath, errno: error)
                    }
                } catch {
                    try? fd.close()
                    throw error
                }
                deferSync(of: fd, path: childBuildPath)
                record(child, SyncRecord(path: childFinalPath, identity: identity), name: key)
                report.bytesWritten += data.count
                report.filesWritten += 1
            case .symbolicLink(let destination):
                do throws(Errno) { try directory.makeSymbolicLink(key, pointingTo: destination) } catch {
                    throw DocumentError(operation: .makeSymbolicLink, path: childBuildPath, errno: error)
                }
                if let status = try? directory.status(of: key) {
                    record(child, SyncRecord(path: childFinalPath, identity: DiskIdentity(status)), name: key)
                }
                report.filesWritten += 1
            case .directory:
                do throws(Errno) {
                    try directory.makeDirectory(key, permissions: FilePermissions(rawValue: 0o700))
                } catch {
                    throw DocumentError(operation: .makeDirectory, path: childBuildPath, errno: error)
                }
                let sub: FileDescriptor
                do throws(Errno) {
                    sub = try FileDescriptor.open(key, relativeTo: directory, options: [.directory, .noFollow])
                } catch {
                    throw DocumentError(operation: .openDirectory, path: childBuildPath, errno: error)
                }
                opened.append(sub)
                let subSource = linkSource.flatMap {
                    try? FileDescriptor.open(key, relativeTo: $0, options: [.directory, .noFollow])
                }
                if let subSource { opened.append(subSource) }
                try populate(
                    child, into: sub, buildPath: childBuildPath, finalPath: childFinalPath, linkSource: subSource,
                    linkBase: childLinkBase)
                let previous = try? linkSource?.status(of: key)
                try applyOwnership(
                    to: sub, replacing: previous ?? nil, requested: child.requestedPermissions,
                    defaultMode: Self.newDirectoryPermissions, path: childBuildPath)
                try sync(sub, path: childBuildPath)
                if let status = try? sub.status() {
                    record(
                        child,
                        SyncRecord(path: childFinalPath, identity: DiskIdentity(status)),
                        name: key)
                }
            }
        }
    }

    /// Updates an existing package directory in place: writes changed children,
    /// removes the ones no longer present, syncs the directory once if anything changed.
    ///
    /// When the wrapper was last synced at this very path and has tracked its changes
    /// since, only the changed keys and the directory children are visited, so the cost
    /// is O(changes), not O(children). Otherwise every child is checked against its sync
    /// record and the directory is listed to find what to remove.
    ///
    /// A tracked update of a write given an ``ExpectedDestination`` (``checksMembers``)
    /// first looks at every member of the directory it is to replace or
    /// remove: each must still be what was there at the last sync (or be absent where
    /// nothing was), else another program changed it and nothing in the directory is
    /// written (``DestinationChanged``). The look is per directory, before its own writes;
    /// a member changed between the look and its rename is not caught (POSIX has no
    /// compare-and-rename).
    private mutating func updateInPlace(_ wrapper: FileWrapper, directory: FileDescriptor, path: String) throws {
        let (children, changedKeys, directoryKeys, replaced) = wrapper.changeTracking
        let previous = wrapper.syncRecord
        let removals: [String]
        let candidates: [String]
        let tracked = changedKeys != nil && previous?.path == path
        var looked: [String: FileStatus?] = [:]
        // Children whose sync record says they are at their place, and which are not:
        // removed by an earlier write and put back since (the same wrapper, its record
        // from before), they are written again as new ones.
        var gone: Set<String> = []
        if tracked, let changedKeys {
            for key in changedKeys {
                guard let child = children[key], let sync = child.syncRecord, sync.path == join(path, key) else {
                    continue
                }
                // The disk held this very child at the last sync only if its removal since
                // recorded it there (``FileWrapper/removeFileWrapper(_:)``).
                if replaced[key] != sync.identity.member(isDirectory: child.isDirectory) { gone.insert(key) }
            }
            removals = changedKeys.filter { children[$0] == nil }
            candidates = Array(changedKeys.filter { children[$0] != nil }.union(directoryKeys))
            report.filesUnchanged += children.count - candidates.count
            for key in changedKeys where checksMembers {
                let childPath = join(path, key)
                // The same wrapper put back where the disk still holds it: nothing of it is
                // written (a directory is looked at below, as one kept is).
                if let child = children[key], child.syncRecord?.path == childPath, !gone.contains(key) { continue }
                let found = try stat(key, in: directory, path: childPath)
                let expected = replaced[key] ?? .absent
                guard expected.matches(found) else {
                    throw DestinationChanged(path: childPath, expected: expected, found: found)
                }
                looked[key] = .some(found)
            }
            // The directories kept since the last sync, or removed and put back, are still
            // directories: one another program replaced by a file or a link is not swapped
            // out for ours.
            for key in directoryKeys where checksMembers && !looked.keys.contains(key) {
                let childPath = join(path, key)
                guard let synced = children[key]?.syncRecord, synced.path == childPath else { continue }
                let found = try stat(key, in: directory, path: childPath)
                if found?.kind != .directory {
                    throw DestinationChanged(
                        path: childPath, expected: synced.identity.member(isDirectory: true), found: found)
                }
                looked[key] = .some(found)
            }
        } else {
            let onDisk: [DirectoryEntry]
            do throws(Errno) { onDisk = try directory.directoryEntries() } catch {
                throw DocumentError(operation: .listDirectory, path: path, errno: error)
            }
            removals = onDisk.map(\.name).filter { !TemporaryName.isTemporary($0) && children[$0] == nil }
            candidates = Array(children.keys)
            let present = Set(onDisk.map(\.name))
            gone = Set(children.keys.filter { !present.contains($0) })
        }

        // Changes a failed attempt made here are synced by this one, even where it finds
        // them done (a removal of nothing, a directory already there).
        var changed = wrapper.entriesUnsynced
        do {
            for name in removals {
                guard let status = try looked[name] ?? stat(name, in: directory, path: join(path, name)) else {
                    continue
                }
                do throws(Errno) {
                    if status.kind == .directory {
                        try TreeRemover.removeOrThrow(name, in: directory)
                    } else {
                        try directory.unlink(name)
                    }
                } catch {
                    throw DocumentError(operation: .unlink, path: join(path, name), errno: error)
                }
                report.entriesRemoved += 1
                changed = true
                if tracked { wrapper.noteMemberOnDisk(name, nil) }
            }
            for key in candidates {
                guard let child = children[key] else { continue }
                let childPath = join(path, key)
                let node = child.node
                if case .directory = node {
                } else if child.syncRecord?.path == childPath, !gone.contains(key) {
                    report.filesUnchanged += 1
                    continue
                }
                var location = Location(
                    directory: directory, directoryPath: path, name: key,
                    existing: try looked[key] ?? stat(key, in: directory, path: childPath))
                switch node {
                case .regularFile:
                    if location.existing?.kind == .directory {
                        do throws(Errno) { try TreeRemover.removeOrThrow(key, in: directory) } catch {
                            throw DocumentError(operation: .unlink, path: childPath, errno: error)
                        }
                        location.existing = nil
                        changed = true
                        // Should the write below fail, the retry finds nothing there, as expected.
                        if tracked { wrapper.noteMemberOnDisk(key, nil) }
                    }
                    try writeRegularFile(child, at: location, syncDirectory: false)
                    changed = true
                    if tracked { wrapper.noteMemberOnDisk(key, placed(child)) }
                case .symbolicLink(let destination):
                    try writeSymbolicLink(child, destination: destination, at: location, syncDirectory: false)
                    changed = true
                    if tracked { wrapper.noteMemberOnDisk(key, placed(child)) }
                case .directory:
                    if location.existing?.kind == .directory {
                        let sub: FileDescriptor
                        do throws(Errno) {
                            sub = try FileDescriptor.open(key, relativeTo: directory, options: [.directory, .noFollow])
                        } catch {
                            throw DocumentError(operation: .openDirectory, path: childPath, errno: error)
                        }
                        opened.append(sub)
                        try updateInPlace(child, directory: sub, path: childPath)
                    } else {
                        try replaceTree(child, at: location, linkBase: nil, syncParent: false)
                        changed = true
                        if tracked { wrapper.noteMemberOnDisk(key, placed(child)) }
                    }
                }
            }
        } catch {
            if changed { wrapper.entriesUnsynced = true }
            throw error
        }
        if changed {
            wrapper.entriesUnsynced = true
            try sync(directory, path: path)
            wrapper.entriesUnsynced = false
        }
        let identity = (try? directory.status()).map(DiskIdentity.init) ?? previous?.identity
        if let identity {
            record(
                wrapper, SyncRecord(path: path, identity: identity), name: PathName.lastComponent(path),
                settledKeys: tracked ? changedKeys : nil)
        }
    }

    /// What this write put on disk for `child`, as a package member's expected state.
    private func placed(_ child: FileWrapper) -> ExpectedDestination? {
        guard let entry = pending.last(where: { $0.wrapper === child }) else { return nil }
        return entry.record.identity.member(isDirectory: child.isDirectory)
    }

    // MARK: Helpers

    /// Syncs a directory; `placed` is the status of the file just renamed into it, for the error.
    func sync(_ directory: FileDescriptor, path: String, placed: FileStatus? = nil) throws {
        do throws(Errno) { try directory.sync() } catch {
            var failure = DocumentError(operation: .syncDirectory, path: path, errno: error)
            failure.placed = placed
            throw failure
        }
    }
}

func join(_ directory: String, _ name: String) -> String {
    directory == "/" ? "/" + name : directory + "/" + name
}

/// Removes a directory tree (or a single entry) beneath an open directory, never following links.
enum TreeRemover {
    /// Removes `name` in `parent`, whatever it is; errors are ignored (recovery retries).
    static func remove(_ name: String, in parent: FileDescriptor) {
        try? removeOrThrow(name, in: parent)
    }

    static func removeOrThrow(_ name: String, in parent: FileDescriptor) throws(Errno) {
        let status = try parent.status(of: name)
        guard status.kind == .directory else {
            try parent.unlink(name)
            return
        }
        let directory = try FileDescriptor.open(name, relativeTo: parent, options: [.directory, .noFollow])
        try directory.closeAfter { () throws(Errno) in
            for entry in try directory.directoryEntries() {
                if entry.kind == .directory || entry.kind == nil {
                    try removeOrThrow(entry.name, in: directory)
                } else {
                    try directory.unlink(entry.name)
                }
            }
        }
        try parent.unlink(name, directory: true)
    }
}

/// Descriptors a successful write leaves open for its caller to close (see
/// ``DurableWriter/write(_:to:options:originalContentsPath:expecting:beforeReplacing:whileSyncing:leftOpen:)``).
/// Filled by the writer, then used by one thread at a time: the caller's.
public final class DescriptorsLeftOpen: @unchecked Sendable {
    fileprivate(set) var descriptors: [FileDescriptor] = []

    public init() {}

    /// Closes every descriptor left (once).
    public func close() {
        for fd in descriptors { try? fd.close() }
        descriptors = []
    }

    deinit { close() }
}

/// Whether a writer confined to a root opens directories beneath it by their whole path in
/// one lookup (see `WriteSession.openDirectory(_:relativeTo:)`): yes until a symbolic link
/// is found above the root, or the kernel has no `openat2`.
final class WholePathLookup: Sendable {
    private let usable = Atomic<Bool>(true)

    var isUsable: Bool { usable.load(ordering: .relaxed) }

    func giveUp() { usable.store(false, ordering: .relaxed) }
}
