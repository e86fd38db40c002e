import Foundation
import Posix

/// A representation of a file-system node — a regular file, a directory or a symbolic
/// link — held in memory, with Apple's `FileWrapper` API.
///
/// A wrapper remembers where and as what it was last read or written (its *sync
/// record*). Regular-file contents never change after creation (replace the child
/// instead, as on Apple platforms), so a child whose sync record names the place it is
/// being written to is known unchanged: incremental package saves skip it and
/// `.atomic` saves hard-link it. That is what makes package saves cost O(changed).
///
/// Thread safety: every property is guarded by a lock, so a wrapper may be handed to a
/// background save; as with Apple's class, don't mutate a tree while it is being written.
public final class FileWrapper: @unchecked Sendable {
    // MARK: Options

    /// Options for reading a wrapper from disk.
    public struct ReadingOptions: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Read every regular file's contents now instead of on first access.
        public static let immediate = ReadingOptions(rawValue: 1 << 0)
        /// Accepted for compatibility; contents are always read, never mapped.
        public static let withoutMapping = ReadingOptions(rawValue: 1 << 1)
    }

    /// Options for writing a wrapper to disk.
    public struct WritingOptions: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Build a directory beside the destination and swap it in whole. Regular files
        /// are always replaced atomically, with or without this option.
        public static let atomic = WritingOptions(rawValue: 1 << 0)
        /// Set `filename` of the wrapper and its children to the names written.
        public static let withNameUpdating = WritingOptions(rawValue: 1 << 1)
    }

    // MARK: State

    enum Contents {
        case loaded(Data)
        /// Text, kept as the string it was given as: a save writes the string's own
        /// UTF-8 bytes, and `Data` of it is made only when asked for.
        case text(String)
        /// Not read yet: `path` with `identity` is read on first access.
        case onDisk(path: String, identity: DiskIdentity)

        var isOnDisk: Bool {
            if case .onDisk = self { return true }
            return false
        }
    }

    enum Node {
        case regularFile(Contents)
        case directory([String: FileWrapper])
        case symbolicLink(String)
    }

    struct State {
        var node: Node
        var filename: String?
        var preferredFilename: String?
        /// Attributes set by the program; they win over what was read from disk.
        var explicitAttributes: [String: any Sendable]?
        /// What `stat` said when the node was read.
        var diskStatus: FileStatus?
        var sync: SyncRecord?
        /// Directories: the keys added or removed since the last sync, or `nil` when
        /// unknown (never synced). With it, an in-place save visits only these keys
        /// and the directory children, not every child.
        var changedKeys: Set<String>?
        /// Directories: the keys whose child is a directory.
        var directoryKeys: Set<String> = []
        /// Directories: for each changed key whose child was on disk at the last sync
        /// (read from there, or written there), what that child was; a changed key not
        /// here had nothing on disk. An in-place save replaces or removes a member only
        /// while it is still that (see ``WriteSession``'s in-place update).
        var replacedOnDisk: [String: ExpectedDestination] = [:]
        /// Directories: an in-place save changed entries here (removed, renamed into place)
        /// and failed before it synced the directory: the next one syncs it whatever it
        /// finds to do, since those changes are done and not yet durable.
        var entriesUnsynced = false
    }

    let state: Lock<State>

    init(node: Node, preferredFilename: String? = nil) {
        var initial = State(node: node, preferredFilename: preferredFilename)
        if case .directory(let children) = node {
            initial.directoryKeys = Set(children.filter { $0.value.isDirectory }.keys)
        }
        state = Lock(initial)
    }

    // MARK: Creating

    /// A regular-file wrapper holding `contents`.
    public convenience init(regularFileWithContents contents: Data) {
        self.init(node: .regularFile(.loaded(contents)))
    }

    /// A regular-file wrapper holding `text` in UTF-8: the same file as
    /// `init(regularFileWithContents: Data(text.utf8))`, without that copy of the text. A
    /// save writes the string's own bytes (a document of a hundred megabytes needs no
    /// second hundred to be saved); ``regularFileContents`` makes the `Data` when asked.
    /// An addition to Apple's API.
    public convenience init(regularFileWithText text: String) {
        self.init(node: .regularFile(.text(text)))
    }

    /// A directory wrapper whose children are `childrenByPreferredName`; each child's
    /// preferred filename and filename become its key.
    public convenience init(directoryWithFileWrappers childrenByPreferredName: [String: FileWrapper]) {
        for (key, child) in childrenByPreferredName {
            child.state.withLock {
                if $0.preferredFilename == nil { $0.preferredFilename = key }
                $0.filename = key
            }
        }
        self.init(node: .directory(childrenByPreferredName))
    }

    /// A symbolic-link wrapper pointing at `url`; a relative file URL stays a relative link.
    public convenience init(symbolicLinkWithDestinationURL url: URL) {
        self.init(node: .symbolicLink(url.isFileURL ? url.relativePath : url.relativeString))
    }

    /// Reads the node at `url`: lazily (contents on first access) unless `.immediate`.
    public convenience init(url: URL, options: ReadingOptions = []) throws {
        try self.init(url: url, options: options, beneath: nil)
    }

    /// Reads the node at `url`, which must lie beneath `root`: its directory is opened
    /// beneath `root` through no symbolic link (`openat2` with `RESOLVE_BENEATH |
    /// RESOLVE_NO_SYMLINKS`), so a directory swapped for a link after a caller's checks
    /// cannot make it read elsewhere. (Contents read later are checked against the
    /// identity of the file read here.)
    public convenience init(url: URL, options: ReadingOptions = [], beneath root: String?) throws {
        let path = url.path
        let node = try DiskReader.readNode(at: path, immediate: options.contains(.immediate), beneath: root)
        self.init(node: node.node)
        state.withLock {
            $0.filename = PathName.lastComponent(path)
            $0.preferredFilename = $0.filename
            $0.diskStatus = node.status
            $0.explicitAttributes = nil
            $0.sync = node.sync
            $0.changedKeys = []
        }
    }

    /// Re-reads the wrapper's node from `url`, replacing what it held.
    public func read(from url: URL, options: ReadingOptions = []) throws {
        let path = url.path
        let node = try DiskReader.readNode(at: path, immediate: options.contains(.immediate))
        state.withLock {
            $0.node = node.node
            $0.filename = PathName.lastComponent(path)
            $0.diskStatus = node.status
            $0.explicitAttributes = nil
            $0.sync = node.sync
            $0.changedKeys = []
            $0.replacedOnDisk = [:]
            if case .directory(let children) = node.node {
                $0.directoryKeys = Set(children.filter { $0.value.isDirectory }.keys)
            }
        }
    }

    // MARK: Kind

    public var isRegularFile: Bool {
        state.withLock { if case .regularFile = $0.node { true } else { false } }
    }

    public var isDirectory: Bool {
        state.withLock { if case .directory = $0.node { true } else { false } }
    }

    public var isSymbolicLink: Bool {
        state.withLock { if case .symbolicLink = $0.node { true } else { false } }
    }

    // MARK: Names and attributes

    /// The name of the node on disk, or the key under which its parent holds it.
    public var filename: String? {
        get { state.withLock { $0.filename } }
        set { state.withLock { $0.filename = newValue } }
    }

    /// The name a parent uses as this wrapper's key when it is added; a parent that
    /// already has a child by that name gives it a unique key instead.
    public var preferredFilename: String? {
        get { state.withLock { $0.preferredFilename } }
        set { state.withLock { $0.preferredFilename = newValue } }
    }

    /// File attributes keyed by `FileAttributeKey` raw values: after a read, the node's
    /// permissions, size, owner, modification date and inode; before a write, a
    /// `.posixPermissions` value sets the mode of a file the write creates.
    public var fileAttributes: [String: Any] {
        get {
            state.withLock { state in
                if let explicit = state.explicitAttributes { return explicit.mapValues { $0 as Any } }
                guard let status = state.diskStatus else { return [:] }
                return DiskReader.attributes(of: status).mapValues { $0 as Any }
            }
        }
        set {
            let sendable = newValue.compactMapValues(FileWrapper.sendableAttribute)
            state.withLock { $0.explicitAttributes = sendable }
        }
    }

    private static func sendableAttribute(_ value: Any) -> (any Sendable)? {
        switch value {
        case let v as Int: v
        case let v as NSNumber: v.intValue
        case let v as Date: v
        case let v as String: v
        case let v as UInt64: v
        default: nil
        }
    }

    // MARK: Regular files

    /// The contents of a regular-file wrapper (read now if the wrapper was read lazily);
    /// `nil` for other kinds or when a lazily read file can no longer be read.
    public var regularFileContents: Data? { try? contents() }

    /// A regular file's contents, read now if they were read lazily, with the reason when
    /// they cannot be had: the `DocumentError` of the read (no permission, the file
    /// replaced since it was listed …), where ``regularFileContents`` says only `nil`.
    /// Not in Apple's API.
    public func contents() throws -> Data {
        let pending: (String, DiskIdentity)? = state.withLock {
            guard case .regularFile(let contents) = $0.node else { return nil }
            if case .onDisk(let path, let identity) = contents { return (path, identity) }
            return nil
        }
        if let (path, identity) = pending {
            let data = try DiskReader.readContents(at: path, expecting: identity)
            state.withLock { $0.node = .regularFile(.loaded(data)) }
            return data
        }
        let (loaded, name): (Data?, String?) = state.withLock {
            if case .regularFile(.loaded(let data)) = $0.node { return (data, $0.filename) }
            if case .regularFile(.text(let text)) = $0.node {
                // Made once, and kept: whoever asks for `Data` holds it anyway.
                let data = Data(text.utf8)
                $0.node = .regularFile(.loaded(data))
                return (data, $0.filename)
            }
            return (nil, $0.filename)
        }
        guard let loaded else {
            throw DocumentError(
                operation: .read, path: name ?? "", errno: .invalidArgument, detail: "not a regular-file wrapper")
        }
        return loaded
    }

    /// Calls `body` with a regular file's bytes (read now if they were read lazily) without
    /// making `Data` of text the wrapper holds as a string. Not in Apple's API.
    public func withContents<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        let text: String? = state.withLock {
            if case .regularFile(.text(let text)) = $0.node { return text }
            return nil
        }
        guard var text else { return try contents().withUnsafeBytes(body) }
        return try text.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
    }

    /// The size of a regular file's contents in memory (`nil` for other kinds, and for a
    /// file read lazily and not accessed yet). Not in Apple's API.
    public var contentsCount: Int? {
        state.withLock {
            switch $0.node {
            case .regularFile(.loaded(let data)): data.count
            case .regularFile(.text(let text)): text.utf8.count
            default: nil
            }
        }
    }

    /// Whether a regular file's contents are in memory (`false` until a lazily read one is accessed).
    public var isContentsLoaded: Bool {
        state.withLock {
            if case .regularFile(.onDisk) = $0.node { return false }
            return true
        }
    }

    /// Drops regular-file bytes that are the same as the file last read or written
    /// (and, for a directory, its children's), so the wrapper holds no copy of what is on
    /// disk; they are read again, checked against that file, on the next access. Bytes
    /// not yet written are kept. An addition to Apple's API, for programs that hold many
    /// documents.
    public func releaseContents() {
        let children: [FileWrapper] = state.withLock { state in
            switch state.node {
            case .regularFile(.loaded), .regularFile(.text):
                // Contents never change after creation, so loaded bytes with a sync record
                // are the bytes of the file that record describes.
                if let sync = state.sync {
                    state.node = .regularFile(.onDisk(path: sync.path, identity: sync.identity))
                }
                return []
            case .directory(let children):
                return Array(children.values)
            default:
                return []
            }
        }
        for child in children { child.releaseContents() }
    }

    /// The file or directory this wrapper was last read from or written to was renamed
    /// from `old` to `new` (full paths) as it was, by another program say: its record of
    /// where it was synced, and its children's, name the new place, so that the next
    /// in-place save of a package still knows each member for what it read or wrote
    /// there. An addition to Apple's API.
    public func fileWasMoved(from old: String, to new: String) {
        func moved(_ path: String) -> String? {
            guard PathName.isWithin(path, old) else { return nil }
            return new + String(Substring(path.utf8.dropFirst(old.utf8.count)))
        }
        let children: [FileWrapper] = state.withLock { state in
            if let path = state.sync?.path, let now = moved(path) { state.sync?.path = now }
            switch state.node {
            case .regularFile(.onDisk(let path, let identity)):
                if let now = moved(path) { state.node = .regularFile(.onDisk(path: now, identity: identity)) }
                return []
            case .directory(let children):
                return Array(children.values)
            default:
                return []
            }
        }
        for child in children { child.fileWasMoved(from: old, to: new) }
    }

    /// A copy of the tree: the same children, names, attributes and sync records, with
    /// contents shared (they never change). Changing the copy leaves this wrapper as it
    /// is — for writing a document elsewhere without touching the wrapper its own saves
    /// build on. An addition to Apple's API.
    public func copy() -> FileWrapper {
        let snapshot = state.withLock { $0 }
        var copied = snapshot
        if case .directory(let children) = snapshot.node {
            copied.node = .directory(children.mapValues { $0.copy() })
        }
        let wrapper = FileWrapper(node: copied.node)
        wrapper.state.withLock { $0 = copied }
        return wrapper
    }

    // MARK: Symbolic links

    /// The destination of a symbolic-link wrapper, as a file URL; `nil` for other kinds.
    public var symbolicLinkDestinationURL: URL? {
        state.withLock {
            guard case .symbolicLink(let destination) = $0.node else { return nil }
            return URL(fileURLWithPath: destination)
        }
    }

    // MARK: Directories

    /// The children of a directory wrapper by key; `nil` for other kinds.
    public var fileWrappers: [String: FileWrapper]? {
        state.withLock {
            guard case .directory(let children) = $0.node else { return nil }
            return children
        }
    }

    /// Adds `child` under its preferred filename, or under a unique variant of it when
    /// that key is taken (`2__#$!@%!#__name`, as Apple does), and returns the key used.
    ///
    /// - Precondition: this is a directory wrapper and `child` has a preferred filename.
    @discardableResult
    public func addFileWrapper(_ child: FileWrapper) -> String {
        guard let preferred = child.preferredFilename, !preferred.isEmpty else {
            preconditionFailure("addFileWrapper: the child file wrapper has no preferredFilename")
        }
        let key: String = state.withLock { state in
            guard case .directory(var children) = state.node else {
                preconditionFailure("addFileWrapper: called on a file wrapper that is not a directory")
            }
            let key = Self.uniqueKey(for: preferred, in: children)
            children[key] = child
            state.node = .directory(children)
            state.changedKeys?.insert(key)
            if child.isDirectory { state.directoryKeys.insert(key) }
            return key
        }
        child.filename = key
        return key
    }

    /// Creates a regular-file wrapper with `contents`, adds it, and returns its key.
    @discardableResult
    public func addRegularFile(withContents contents: Data, preferredFilename: String) -> String {
        let child = FileWrapper(regularFileWithContents: contents)
        child.preferredFilename = preferredFilename
        return addFileWrapper(child)
    }

    /// Removes `child` from this directory wrapper; nothing happens if it is not a child.
    public func removeFileWrapper(_ child: FileWrapper) {
        let (childSync, childIsDirectory) = child.state.withLock { state -> (SyncRecord?, Bool) in
            if case .directory = state.node { return (state.sync, true) }
            return (state.sync, false)
        }
        state.withLock { state in
            guard case .directory(var children) = state.node,
                let key = children.first(where: { $0.value === child })?.key
            else { return }
            children.removeValue(forKey: key)
            state.node = .directory(children)
            // The child the disk held at the last sync: the first one removed since.
            if state.changedKeys != nil, state.replacedOnDisk[key] == nil, let directory = state.sync?.path,
                let childSync, childSync.path == join(directory, key)
            {
                state.replacedOnDisk[key] = childSync.identity.member(isDirectory: childIsDirectory)
            }
            state.changedKeys?.insert(key)
            state.directoryKeys.remove(key)
        }
    }

    /// The key under which this directory wrapper holds `child`, or `nil`.
    public func keyForChildFileWrapper(_ child: FileWrapper) -> String? {
        state.withLock { state in
            guard case .directory(let children) = state.node else { return nil }
            return children.first(where: { $0.value === child })?.key
        }
    }

    static func uniqueKey(for preferred: String, in children: [String: FileWrapper]) -> String {
        if children[preferred] == nil { return preferred }
        var counter = 2
        while children["\(counter)__#$!@%!#__\(preferred)"] != nil { counter += 1 }
        return "\(counter)__#$!@%!#__\(preferred)"
    }

    // MARK: Writing and comparing

    /// Writes the wrapper to `url` through ``DurableWriter`` (following a symbolic link
    /// at the destination). A regular file is always replaced atomically and durably.
    /// A directory that exists is updated in place — only changed children are
    /// written — unless `.atomic` asks for a new directory swapped in whole; unchanged
    /// children are hard-linked from `originalContentsURL` (or the destination) then.
    public func write(to url: URL, options: WritingOptions = [], originalContentsURL: URL? = nil) throws {
        _ = try DurableWriter().write(
            self, to: url.path, options: options, originalContentsPath: originalContentsURL?.path)
    }

    /// Whether the node at `url` holds what this wrapper holds: the same kind, the same
    /// bytes, the same link destination, and for directories the same children.
    public func matchesContents(of url: URL) -> Bool {
        DiskReader.matches(self, path: url.path)
    }
}

// MARK: Sync records

/// What identifies a file's contents on disk without reading them.
struct DiskIdentity: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modified: FileTime

    init(_ status: FileStatus) {
        device = status.device
        inode = status.inode
        size = status.size
        modified = status.modified
    }

    /// This identity as a package member's expected state.
    func member(isDirectory: Bool) -> ExpectedDestination {
        .member(device: device, inode: inode, size: size, modified: modified, isDirectory: isDirectory)
    }
}

/// Where a wrapper was last read from or written to, and what was there.
struct SyncRecord: Sendable {
    var path: String
    var identity: DiskIdentity
}

extension FileWrapper {
    var syncRecord: SyncRecord? {
        get { state.withLock { $0.sync } }
        set { state.withLock { $0.sync = newValue } }
    }

    var node: Node { state.withLock { $0.node } }

    /// A directory's children with what an in-place save needs to know about them.
    var changeTracking:
        (
            children: [String: FileWrapper], changed: Set<String>?, directories: Set<String>,
            replaced: [String: ExpectedDestination]
        )
    {
        state.withLock { state in
            guard case .directory(let children) = state.node else { return ([:], nil, [], [:]) }
            return (children, state.changedKeys, state.directoryKeys, state.replacedOnDisk)
        }
    }

    /// Whether an in-place save left changes to this directory's entries unsynced.
    var entriesUnsynced: Bool {
        get { state.withLock { $0.entriesUnsynced } }
        set { state.withLock { $0.entriesUnsynced = newValue } }
    }

    /// A changed key of this directory that an in-place save replaced or removed
    /// (`now`: what it put there; `nil`: nothing) before the save as a whole completed:
    /// the next attempt expects that (``State/replacedOnDisk``), not what was there before.
    func noteMemberOnDisk(_ key: String, _ now: ExpectedDestination?) {
        state.withLock { state in
            guard state.changedKeys?.contains(key) == true else { return }
            state.replacedOnDisk[key] = now
        }
    }

    /// Applies a completed write: the new sync record, and for directories, the keys
    /// now settled (`nil`: every key, after a full pass).
    func settle(_ record: SyncRecord, keys: Set<String>?, releasingContents: Bool = false) {
        state.withLock { state in
            state.sync = record
            if releasingContents, case .regularFile(let contents) = state.node, !contents.isOnDisk {
                state.node = .regularFile(.onDisk(path: record.path, identity: record.identity))
            }
            guard case .directory = state.node else { return }
            if let keys, let changed = state.changedKeys {
                state.changedKeys = changed.subtracting(keys)
                for key in keys { state.replacedOnDisk.removeValue(forKey: key) }
            } else {
                state.changedKeys = []
                state.replacedOnDisk = [:]
            }
        }
    }

    /// The `.posixPermissions` attribute, if any.
    var requestedPermissions: FilePermissions? {
        state.withLock { state in
            if let explicit = state.explicitAttributes {
                return (explicit[FileAttributeKey.posixPermissions.rawValue] as? Int).map {
                    FilePermissions(rawValue: mode_t($0))
                }
            }
            return state.diskStatus?.permissions
        }
    }
}
