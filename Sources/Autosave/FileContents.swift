import Foundation
import Posix

/// A file's bytes, read with the package's own reader.
///
/// Not Foundation's `Data(contentsOf:)`: on Linux (swift-foundation's `readBytesFromFile`,
/// Swift 6 toolchain here) it allocates a 4 KiB buffer for a file whose size is 0 and
/// never frees it, so every read of an empty file leaked 4 KiB — the watcher reads a
/// file another program changed, and an emptied file is a common change. LeakSanitizer
/// found it at the daemon's exit; `FileContentsTests` shows it.
enum FileContents {
    /// The bytes of the regular file at `path` (following symbolic links), or `nil` when
    /// it cannot be opened or read (a directory, a missing file, no permission), or is no
    /// regular file: opened without blocking, so that a FIFO another program put there
    /// does not hold the store's thread until something writes to it.
    /// With `limit`, a larger file is not read (`nil`).
    static func read(_ path: String, limit: Int64 = .max) -> Data? {
        guard let file = try? FileDescriptor.open(path, options: [.nonBlocking]) else { return nil }
        return file.closeAfter { () -> Data? in
            guard let status = try? file.status(), status.kind == .regular, status.size <= limit else { return nil }
            guard let bytes = try? file.readToEnd(sizeHint: Int(status.size)) else { return nil }
            return Data(bytes)
        }
    }
}
