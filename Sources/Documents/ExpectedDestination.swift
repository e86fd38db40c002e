import Posix

/// What a write expects to find at its destination just before it replaces it: the
/// file exactly as the caller last read or wrote it, or nothing. A writer given one
/// compares it with the destination right before the rename that replaces it (after
/// the new contents are written and synced), and throws ``DestinationChanged``
/// instead of replacing a file it has not seen — another program's version, whether
/// or not anyone was told of the change. (A change in the instants between that look
/// and the rename is not caught: POSIX has no compare-and-rename.)
public enum ExpectedDestination: Sendable, Hashable, CustomStringConvertible {
    /// Nothing is there yet (a document never saved).
    case absent
    /// A regular file with this identity: device, inode, size, modification and change time.
    case file(device: UInt64, inode: UInt64, size: Int64, modified: FileTime, changed: FileTime)
    /// A directory (a package) with this device and inode; its members are compared one by one by whoever tracks them.
    case directory(device: UInt64, inode: UInt64)
    /// A regular file with this status, compared as ``file(device:inode:size:modified:changed:)``
    /// is. Its mode and owner are known too, so a writer given it takes them from here for
    /// the new file instead of looking at the destination before it writes; the look
    /// right before the rename confirms them (a `chmod` or `chown` changes the change time).
    case status(FileStatus)
    /// A package's member as the package's wrapper last read or wrote it: a file or link
    /// with this device, inode, size and modification time, or a directory with this
    /// device and inode (`size` and `modified` are not compared). (A member's change time
    /// is not recorded.)
    case member(device: UInt64, inode: UInt64, size: Int64, modified: FileTime, isDirectory: Bool)

    /// What `status` describes.
    public init(_ status: FileStatus) {
        if status.kind == .directory {
            self = .directory(device: status.device, inode: status.inode)
        } else {
            self = .file(
                device: status.device, inode: status.inode, size: status.size, modified: status.modified,
                changed: status.changed)
        }
    }

    /// Whether `found` (`nil`: nothing there) is what was expected.
    public func matches(_ found: FileStatus?) -> Bool {
        switch self {
        case .absent:
            return found == nil
        case .file(let device, let inode, let size, let modified, let changed):
            guard let found else { return false }
            return found.kind == .regular && found.device == device && found.inode == inode && found.size == size
                && found.modified == modified && found.changed == changed
        case .directory(let device, let inode):
            guard let found else { return false }
            return found.kind == .directory && found.device == device && found.inode == inode
        case .status(let status):
            return ExpectedDestination(status).matches(found)
        case .member(let device, let inode, let size, let modified, let isDirectory):
            guard let found, found.device == device, found.inode == inode else { return false }
            if isDirectory { return found.kind == .directory }
            return found.kind != .directory && found.size == size && found.modified == modified
        }
    }

    public var description: String {
        switch self {
        case .absent: "no file"
        case .file(_, let inode, let size, let modified, _):
            "inode \(inode), \(size) bytes, modified \(modified.seconds).\(modified.nanoseconds)"
        case .directory(_, let inode): "directory inode \(inode)"
        case .status(let status): ExpectedDestination(status).description
        case .member(_, let inode, _, _, true): "directory inode \(inode)"
        case .member(_, let inode, let size, let modified, false):
            "inode \(inode), \(size) bytes, modified \(modified.seconds).\(modified.nanoseconds)"
        }
    }
}

/// A write found its destination other than expected (``ExpectedDestination``) and
/// replaced nothing: another program changed, replaced or created the file.
public struct DestinationChanged: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var expected: ExpectedDestination
    /// What is there now (`nil`: nothing).
    public var found: FileStatus?

    public var description: String {
        let now =
            found.map {
                "inode \($0.inode), \($0.size) bytes, modified \($0.modified.seconds).\($0.modified.nanoseconds)"
            }
            ?? "no file"
        return
            "'\(path)' changed since it was last read or written (expected \(expected), found \(now)); it was not replaced"
    }
}
