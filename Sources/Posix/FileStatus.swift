import Glibc

/// The kind of a file-system node.
public enum FileKind: Hashable, Sendable {
    case regular, directory, symbolicLink, other

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFLNK: self = .symbolicLink
        default: self = .other
        }
    }

    init?(directoryEntryType type: UInt8) {
        switch Int(type) {
        case Int(DT_REG): self = .regular
        case Int(DT_DIR): self = .directory
        case Int(DT_LNK): self = .symbolicLink
        case Int(DT_UNKNOWN): return nil
        default: self = .other
        }
    }
}

/// Permission bits of a file (`0o644`), including set-id and sticky bits.
public struct FilePermissions: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: mode_t
    public init(rawValue: mode_t) { self.rawValue = rawValue & 0o7777 }
    public var description: String { "0" + String(rawValue, radix: 8) }
}

/// A point in time as the kernel stores it for files.
public struct FileTime: Hashable, Sendable, Comparable {
    public var seconds: Int
    public var nanoseconds: Int32

    public init(seconds: Int, nanoseconds: Int32) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    public static func < (a: FileTime, b: FileTime) -> Bool {
        (a.seconds, a.nanoseconds) < (b.seconds, b.nanoseconds)
    }

    /// Seconds since 1970 as a floating-point value.
    public var timeIntervalSince1970: Double { Double(seconds) + Double(nanoseconds) / 1e9 }
}

/// What `stat` says about a file.
public struct FileStatus: Hashable, Sendable {
    public var kind: FileKind
    public var permissions: FilePermissions
    public var userID: UInt32
    public var groupID: UInt32
    public var size: Int64
    public var device: UInt64
    public var inode: UInt64
    public var linkCount: UInt64
    public var modified: FileTime
    public var changed: FileTime

    public init(
        kind: FileKind, permissions: FilePermissions, userID: UInt32, groupID: UInt32, size: Int64, device: UInt64,
        inode: UInt64, linkCount: UInt64, modified: FileTime, changed: FileTime
    ) {
        self.kind = kind
        self.permissions = permissions
        self.userID = userID
        self.groupID = groupID
        self.size = size
        self.device = device
        self.inode = inode
        self.linkCount = linkCount
        self.modified = modified
        self.changed = changed
    }

    init(_ s: stat) {
        kind = FileKind(mode: s.st_mode)
        permissions = FilePermissions(rawValue: s.st_mode)
        userID = s.st_uid
        groupID = s.st_gid
        size = Int64(s.st_size)
        device = UInt64(s.st_dev)
        inode = UInt64(s.st_ino)
        linkCount = UInt64(s.st_nlink)
        modified = FileTime(seconds: s.st_mtim.tv_sec, nanoseconds: Int32(s.st_mtim.tv_nsec))
        changed = FileTime(seconds: s.st_ctim.tv_sec, nanoseconds: Int32(s.st_ctim.tv_nsec))
    }
}
