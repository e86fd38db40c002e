import Documents
import Foundation
import Posix

/// Where a document's saving stands.
public enum SaveState: Sendable, Equatable {
    /// On disk as in memory.
    case clean
    /// Edited, a save not yet due.
    case dirty
    /// Edited, a save due at this time.
    case scheduled(Date)
    /// A save is being written.
    case saving
    /// The last save failed; the edits are kept in memory and the save is retried.
    // Boxed: a failure is rare and large, and every description carries a state.
    indirect case failed(SaveFailure)

    /// The state's name: `clean`, `dirty`, `scheduled`, `saving` or `failed`.
    public var name: String { staticName.description }

    /// ``name`` as static text (written into replies without making a string).
    var staticName: StaticString {
        switch self {
        case .clean: "clean"
        case .dirty: "dirty"
        case .scheduled: "scheduled"
        case .saving: "saving"
        case .failed: "failed"
        }
    }
}

/// What went wrong with a save, and when it is retried.
public struct SaveFailure: Sendable, Equatable, CustomStringConvertible {
    /// The document.
    public var document: String
    /// The failed step (`write`, `fsync`, `rename`, `create temporary file`, …, or `encode`).
    public var operation: String
    /// The file the step was working on.
    public var path: String
    /// The error number, when the failure was a system call's.
    public var errno: Errno?
    public var message: String
    /// Failed attempts in a row.
    public var attempts: Int
    public var failedAt: Date
    public var retryAt: Date

    public var description: String { "saving \(document) failed: \(message)" }
}

/// A document's state as the store reports it.
public struct DocumentInfo: Sendable, Equatable {
    public var path: String
    public var contentType: UTType
    public var state: SaveState
    /// Edits applied since the document was opened.
    public var changeCount: UInt64
    /// The edit count the file on disk reflects.
    public var savedChangeCount: UInt64
    public var lastSaved: Date?
    public var saves: Int
}

/// A document's description after an edit, without its path (the caller has it): what
/// an edit's reply tells.
struct EditOutcome {
    var contentType: UTType
    var state: SaveState
    var changeCount: UInt64
    var savedChangeCount: UInt64
    var lastSaved: Date?
    var saves: Int

    /// The whole description.
    func info(path: String) -> DocumentInfo {
        DocumentInfo(
            path: path, contentType: contentType, state: state, changeCount: changeCount,
            savedChangeCount: savedChangeCount, lastSaved: lastSaved, saves: saves)
    }
}

/// Asked about a document the store does not hold yet, before an edit opens or creates
/// it: throws to refuse it; returns `false` when it found nothing at the path (the store
/// then creates the document without looking for it on disk again).
protocol UnopenedPathCheck {
    /// `valid`: a path ``DocumentPath/validate(_:)`` returned.
    func checkUnopened(valid: String) throws -> Bool
    /// Whether the directory `directory` (relative to the root, not the root itself) is
    /// not there: its look finds nothing at one of its components. `false` when it is
    /// there, or when that cannot be told.
    func directoryIsMissing(_ directory: String) -> Bool
}

/// The store's counters, for `status`.
public struct StoreStatus: Sendable, Equatable {
    public var documents: Int
    public var unsaved: Int
    public var saving: Int
    public var failed: Int
    public var saves: Int
    public var lastSave: (document: String, at: Date)?
    public var lastFailure: SaveFailure?
    public var startedAt: Date
    /// Since when the store root has been gone (removed or moved away while running), or
    /// `nil` while it is there.
    public var rootGoneSince: Date? = nil
    /// Directories with no inotify watch because `fs.inotify.max_user_watches` is reached
    /// (polled instead).
    public var unwatchedDirectories: Int = 0

    public static func == (a: StoreStatus, b: StoreStatus) -> Bool {
        a.documents == b.documents && a.unsaved == b.unsaved && a.saving == b.saving && a.failed == b.failed
            && a.saves == b.saves && a.lastSave?.document == b.lastSave?.document && a.lastSave?.at == b.lastSave?.at
            && a.lastFailure == b.lastFailure && a.startedAt == b.startedAt && a.rootGoneSince == b.rootGoneSince
            && a.unwatchedDirectories == b.unwatchedDirectories
    }
}

/// The watcher's state and what it caused since start.
public struct WatchSummary: Sendable, Equatable {
    /// Directories with an inotify watch.
    public var watchedDirectories: Int
    /// Directories polled instead: past `fs.inotify.max_user_watches`, or by choice (below).
    public var polledDirectories: Int
    /// `[Watch] Mode=`.
    public var mode: WatchMode
    /// Of the polled directories, those polled by choice: `Mode=poll`, or with `Mode=auto` on
    /// a shared file system whose other hosts' changes inotify cannot see.
    public var polledByChoice: Int
    /// The directories (root-relative, `""` for the root) polled because the watch limit
    /// left them without a watch.
    public var unwatched: [String] = []
    /// Documents read again after another program changed them.
    public var reloads: Int
    public var conflicts: Int
    public var overflows: Int
}

/// The ignore rules in force, for `status`.
public struct IgnoreSummary: Sendable, Equatable {
    /// Patterns in force: the defaults, `Ignore=` and every ignore file's.
    public var patterns: Int
    /// The directories (relative to the root, `""` for the root) with an ignore file.
    public var files: [String]
    /// Paths under the root that the scans and the watcher found ignored (an ignored
    /// directory counts once, whatever it holds).
    public var ignoredPaths: Int
}

/// Something that happened in the store, for subscribers and logs.
public enum StoreEvent: Sendable, Equatable {
    case saved(document: String, bytes: Int, duration: Duration)
    case saveFailed(SaveFailure)
    case opened(document: String)
    case closed(document: String)
    /// Another program changed the file of a document with no unsaved edits: it was read again.
    case changedOnDisk(document: String)
    /// Another program changed the file of a document with unsaved edits: both versions
    /// are on disk, one under the document's name and the other at `copy` (relative to the
    /// root); `copyHolds` says which (`[Conflicts] Keep=`).
    case conflict(document: String, copy: String, copyHolds: ConflictVersion)
    /// Another program removed the file of a document: it was written again from memory.
    case recreated(document: String)
    /// Another program renamed the file of a document: the document follows it.
    case renamed(document: String, to: String)
}

/// Why the store refused a request. Each case has a stable code for the control protocol.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound(String)
    /// Something inside an open document is missing: a member, a JSON pointer's target.
    case notFoundInside(String, message: String)
    /// `revert` of an open document that has no file on disk (never saved, or removed).
    case noFileToRevertTo(String)
    case alreadyExists(String)
    case invalidPath(String, reason: String)
    case invalidDocument(String, message: String)
    case unsupported(String, message: String)
    case saveFailed(SaveFailure)
    case refusedWhileSaveFails(SaveFailure)
    /// A save waited for will not come: the edits were discarded (revert), replaced by
    /// another program's version (saved as a conflict copy), or the document was closed.
    case superseded(String, message: String)
    case shuttingDown
    /// The edit journal cannot write its records (the failure): edits are refused until it can.
    case journalFailing(String)
    /// An edit whose journal record would be `bytes` long, over the `limit` a record may be.
    case tooLargeForJournal(bytes: Int, limit: Int)
    case io(DocumentError)

    /// The kebab-case code the control protocol uses.
    public var code: String {
        switch self {
        case .notFound, .notFoundInside, .noFileToRevertTo: "not-found"
        case .alreadyExists: "already-exists"
        case .invalidPath: "invalid-path"
        case .invalidDocument: "bad-request"
        case .unsupported: "unsupported"
        case .saveFailed, .refusedWhileSaveFails: "save-failed"
        case .superseded: "conflict"
        case .shuttingDown: "shutting-down"
        case .io, .journalFailing: "io-error"
        case .tooLargeForJournal: "too-large"
        }
    }

    public var description: String {
        switch self {
        case .notFound(let path): "no document '\(path)'"
        case .notFoundInside(let path, let message): "\(path): \(message)"
        case .noFileToRevertTo(let path):
            "\(path): no file on disk to revert to (the document has not been saved yet, or another program removed its file)"
        case .alreadyExists(let path): "'\(path)' already exists"
        case .invalidPath(let path, let reason): "invalid document path '\(path)': \(reason)"
        case .invalidDocument(let path, let message): "\(path): \(message)"
        case .unsupported(let path, let message): "\(path): \(message)"
        case .saveFailed(let failure): failure.description
        case .refusedWhileSaveFails(let failure):
            "edits to \(failure.document) are refused while its saves fail (RefuseEditsWhenSaveFails=yes): \(failure.message)"
        case .superseded(let path, let message): "\(path): \(message)"
        case .shuttingDown: "the daemon is shutting down and accepts no edits"
        case .io(let error): error.description
        case .journalFailing(let failure):
            "the edit journal cannot write its records (\(failure)); edits are refused until it can, and nothing was changed"
        case .tooLargeForJournal(let bytes, let limit):
            "the edit's journal record would be \(bytes) bytes, over the \(limit) a record may hold: the edit could not be protected from a crash before its save, so it was refused and nothing was changed (send it in parts, or set [Journal] Mode=off)"
        }
    }
}

/// Document paths relative to the store root.
enum DocumentPath {
    /// The longest document path, in bytes: with the root's and a package member's, well
    /// within what the kernel takes as one path (4,096 bytes).
    static let maxBytes = 2048

    /// The normalised form of `path`, or why it is not acceptable: it must be relative,
    /// without `.`, `..` or empty components, without NUL bytes or the writer's
    /// temporary names.
    static func validate(_ path: String) throws(StoreError) -> String {
        if isPlainlyValid(path) { return path }
        // Looked at byte by byte: to Swift a `/` followed by a combining mark is one
        // `Character` (neither "/" nor a separator), to the kernel it separates two names.
        let slash = UInt8(ascii: "/")
        let dot = UInt8(ascii: ".")
        var bytes = Array(path.utf8)[...]
        while bytes.count >= 2, bytes[bytes.startIndex] == dot, bytes[bytes.startIndex + 1] == slash {
            bytes = bytes.dropFirst(2)
        }
        while bytes.last == slash { bytes = bytes.dropLast() }
        if bytes.isEmpty { throw .invalidPath(path, reason: "the path is empty") }
        if bytes.count > maxBytes {
            throw .invalidPath(
                String(decoding: bytes.prefix(64), as: UTF8.self) + "…",
                reason: "the path is \(bytes.count) bytes long, over the \(maxBytes) a document's may be")
        }
        if bytes.contains(0) { throw .invalidPath(path, reason: "the path contains a NUL byte") }
        if bytes.first == slash { throw .invalidPath(path, reason: "the path must be relative to the store root") }
        for bytes in bytes.split(separator: slash, omittingEmptySubsequences: false) {
            let component = String(decoding: bytes, as: UTF8.self)
            if bytes.isEmpty { throw .invalidPath(path, reason: "the path has an empty component") }
            if bytes.elementsEqual([dot]) || bytes.elementsEqual([dot, dot]) {
                throw .invalidPath(path, reason: "'\(component)' components are not allowed")
            }
            if TemporaryName.isTemporary(component) {
                throw .invalidPath(path, reason: "'\(component)' is a name the writer uses for temporary files")
            }
            if bytes.count > 255 { throw .invalidPath(path, reason: "a component is longer than 255 bytes") }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension DocumentPath {
    /// One pass over the bytes for the common case: relative, no empty components, no
    /// component starting with `.` (which rules out `.`, `..` and the writer's
    /// temporary names), no NUL, components of at most 255 bytes. A path that fails this
    /// quick look is checked in detail (and may still be valid).
    static func isPlainlyValid(_ path: String) -> Bool {
        var utf8 = path.utf8
        if let fast = utf8.withContiguousStorageIfAvailable(isPlainlyValid) { return fast }
        utf8 = String(path).utf8
        return Array(utf8).withUnsafeBufferPointer(isPlainlyValid)
    }

    private static func isPlainlyValid(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        if bytes.count > maxBytes { return false }
        var componentLength = 0
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "/"):
                if componentLength == 0 { return false }
                componentLength = 0
            case 0:
                return false
            case UInt8(ascii: "."):
                if componentLength == 0 { return false }
                componentLength += 1
            default:
                componentLength += 1
            }
            if componentLength > 255 { return false }
        }
        return componentLength > 0
    }
}

extension Fingerprint {
    /// What a save must find at the file's place before it replaces it.
    var expectedDestination: ExpectedDestination {
        isDirectory
            ? .directory(device: device, inode: inode)
            : .status(
                FileStatus(
                    kind: .regular, permissions: permissions, userID: userID, groupID: groupID, size: size,
                    device: device, inode: inode, linkCount: 1, modified: modified, changed: changed))
    }

    /// The same bytes, whatever the metadata says (a `touch`, a `chmod`, a copy of the same contents).
    func sameContents(as other: Fingerprint) -> Bool {
        !isDirectory && !other.isDirectory && size == other.size && contentHash != nil
            && contentHash == other.contentHash
    }
}

/// What the store knew of a document's file when it closed it (see ``DocumentStore/recentlyClosed``).
struct ClosedDocument {
    var fingerprint: Fingerprint?
    /// A package's wrapper as last read or saved (its members' contents), `nil` for a regular file.
    var saved: FileWrapper?
    var isPackage: Bool
    var generation: Int
}

/// What identifies a document's file on disk: where it is, its size and modification
/// time, and a hash of its bytes (regular files only). Recorded at load and after each
/// save, so that a later look at the disk can tell the daemon's own writes from others'.
public struct Fingerprint: Sendable, Hashable {
    public var device: UInt64
    public var inode: UInt64
    public var size: Int64
    public var modified: FileTime
    /// The inode's change time: a rename, link, chmod or chown changes it even when the
    /// modification time is kept.
    public var changed: FileTime
    /// The mode and owner: a save gives them to the file it puts in place without looking
    /// at the file it replaces first (``ExpectedDestination/status(_:)``).
    public var permissions: FilePermissions
    public var userID: UInt32
    public var groupID: UInt32
    public var isDirectory: Bool
    /// A hash of the bytes (``StableHash``, the same in every run: the edit journal keeps
    /// it to recognise a file after a restart); `nil` for packages.
    public var contentHash: UInt64?

    init(_ status: FileStatus, contents: Data?) {
        self.init(status, contentHash: contents.map(StableHash.of))
    }

    /// The fingerprint of a regular file (`contentHash` given) or a package (`nil`) whose bytes were hashed already.
    init(_ status: FileStatus, contentHash: UInt64?) {
        device = status.device
        inode = status.inode
        size = status.size
        modified = status.modified
        changed = status.changed
        permissions = status.permissions
        userID = status.userID
        groupID = status.groupID
        isDirectory = status.kind == .directory
        self.contentHash = contentHash
    }
}

/// xxHash64 (seed 0) of a file's bytes: fast, well mixed, and the same in every run and
/// on every machine (Swift's `Hasher` is seeded per process).
public enum StableHash {
    public static func of(_ data: Data) -> UInt64 { data.withUnsafeBytes { of($0) } }

    public static func of(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        let p1: UInt64 = 0x9E37_79B1_85EB_CA87
        let p2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
        let p3: UInt64 = 0x1656_67B1_9E37_79F9
        let p4: UInt64 = 0x85EB_CA77_C2B2_AE63
        let p5: UInt64 = 0x27D4_EB2F_1656_67C5
        @inline(__always) func rotl(_ x: UInt64, _ r: UInt64) -> UInt64 { (x << r) | (x >> (64 - r)) }
        @inline(__always) func round(_ acc: UInt64, _ lane: UInt64) -> UInt64 { rotl(acc &+ lane &* p2, 31) &* p1 }
        @inline(__always) func word(_ at: Int) -> UInt64 {
            UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self))
        }
        let count = bytes.count
        var index = 0
        var hash: UInt64
        if count >= 32 {
            var v1 = p1 &+ p2
            var v2 = p2
            var v3: UInt64 = 0
            var v4 = 0 &- p1
            while index + 32 <= count {
                v1 = round(v1, word(index))
                v2 = round(v2, word(index + 8))
                v3 = round(v3, word(index + 16))
                v4 = round(v4, word(index + 24))
                index += 32
            }
            hash = rotl(v1, 1) &+ rotl(v2, 7) &+ rotl(v3, 12) &+ rotl(v4, 18)
            for lane in [v1, v2, v3, v4] { hash = (hash ^ round(0, lane)) &* p1 &+ p4 }
        } else {
            hash = p5
        }
        hash &+= UInt64(count)
        while index + 8 <= count {
            hash ^= round(0, word(index))
            hash = rotl(hash, 27) &* p1 &+ p4
            index += 8
        }
        if index + 4 <= count {
            hash ^= UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self))) &* p1
            hash = rotl(hash, 23) &* p2 &+ p3
            index += 4
        }
        while index < count {
            hash ^= UInt64(bytes[index]) &* p5
            hash = rotl(hash, 11) &* p1
            index += 1
        }
        hash ^= hash >> 33
        hash &*= p2
        hash ^= hash >> 29
        hash &*= p3
        hash ^= hash >> 32
        return hash
    }
}
