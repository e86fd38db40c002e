import Posix

/// A failed file operation: which operation, on which path, and the `errno` it got.
///
/// Every error that ``DurableWriter``, ``FileWrapper`` and ``DocumentExporter`` throw
/// for a file-system failure is one of these, so a caller can always say *what* failed.
public struct DocumentError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The step that failed.
    public enum Operation: String, Hashable, Sendable {
        case openDirectory = "open directory"
        case listDirectory = "list directory"
        case stat
        case open
        case read
        case readLink = "read symbolic link"
        case createTemporary = "create temporary file"
        case write
        case changeMode = "chmod"
        case changeOwner = "chown"
        case sync = "fsync"
        case syncDirectory = "fsync directory"
        case rename
        case exchange = "rename exchange"
        case link
        case unlink
        case makeDirectory = "mkdir"
        case makeSymbolicLink = "symlink"
        case followSymbolicLink = "follow symbolic link"
        case encode
        case export
    }

    public var operation: Operation
    public var path: String
    public var errno: Errno
    /// More words when the errno alone would mislead.
    public var detail: String?
    /// For a directory's sync that failed after a regular file was renamed into it: that
    /// file's status, from its own descriptor (the file in place is the write's, not yet
    /// durable; a status by path could be another program's file that replaced it since).
    public var placed: FileStatus?

    public init(operation: Operation, path: String, errno: Errno, detail: String? = nil) {
        self.operation = operation
        self.path = path
        self.errno = errno
        self.detail = detail
    }

    public var description: String {
        var text = "\(operation.rawValue) '\(path)' failed: \(errno.name) (\(errno.message))"
        if let detail { text += ": \(detail)" }
        return text
    }
}
