import Posix

/// A failed system call of the journal: what was done, to which file, and the error.
public struct JournalFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The operation that failed, named after its system call.
    public enum Operation: String, Sendable, Hashable {
        case open
        case lock = "flock"
        case list = "readdir"
        case read
        case write
        case fdatasync
        case fsyncDirectory = "fsync"
        case truncate = "ftruncate"
        case rename
        case unlink
    }

    public var operation: Operation
    /// The file's path: the journal directory joined with the segment's name.
    public var path: String
    public var errno: Errno
    /// The records that were not proven durable when this happened. They are never
    /// reported durable until the journal has written them again to a new segment and
    /// synced it (after an `fdatasync` error the kernel may have dropped the pages, so
    /// syncing the same file again proves nothing).
    public var notDurable: ClosedRange<LSN>?

    public init(_ operation: Operation, path: String, errno: Errno, notDurable: ClosedRange<LSN>? = nil) {
        self.operation = operation
        self.path = path
        self.errno = errno
        self.notDurable = notDurable
    }

    public var description: String {
        var text = "\(operation.rawValue) \(path): \(errno)"
        if let range = notDurable {
            text += "; records \(range.lowerBound)…\(range.upperBound) not durable"
        }
        return text
    }
}

/// A payload longer than ``JournalOptions/maxPayloadSize``; nothing was appended.
public struct JournalRecordTooLarge: Error, Sendable, Hashable, CustomStringConvertible {
    public var size: Int
    public var limit: Int

    public var description: String { "journal record of \(size) bytes exceeds the limit of \(limit)" }
}
