import Glibc
import Synchronization

/// Facts about the running process.
public enum CurrentProcess {
    public static var userID: UInt32 { system_getuid() }
    public static var groupID: UInt32 { system_getgid() }
    public static var processID: Int32 { system_getpid() }
    /// The effective user and group, as they were when first asked for (the daemon
    /// never changes them): who owns the files the process creates (in a directory
    /// without the set-group-ID bit).
    public static let effectiveUserID: UInt32 = system_geteuid()
    public static let effectiveGroupID: UInt32 = system_getegid()

    /// The file-mode creation mask, read from `/proc/self/status` so that reading it
    /// never changes it (calling `umask` to read it would race with other threads).
    public static var fileCreationMask: FilePermissions {
        guard let fd = try? FileDescriptor.open("/proc/self/status"),
            let bytes = try? fd.closeAfter({ () throws(Errno) -> [UInt8] in try fd.readToEnd() })
        else { return FilePermissions(rawValue: 0o022) }
        let text = String(decoding: bytes, as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("Umask:") {
            let digits = line.dropFirst("Umask:".count).trimmingPrefix(while: { $0 == " " || $0 == "\t" })
            if let value = mode_t(digits, radix: 8) { return FilePermissions(rawValue: value) }
        }
        return FilePermissions(rawValue: 0o022)
    }

    /// `CLOCK_MONOTONIC` in microseconds (what systemd's `MONOTONIC_USEC=` wants).
    public static var monotonicMicroseconds: UInt64 { system_monotonic_usec() }

    /// `count` random characters from `[A-Za-z0-9]`, unpredictable to other processes:
    /// a counter hashed (SipHash, Swift's randomly seeded `Hasher`) with a key drawn
    /// once from the kernel's generator. The kernel is asked once per process, not once
    /// per name: every save makes a temporary name.
    public static func randomAlphanumerics(_ count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var bytes = [UInt8]()
        bytes.reserveCapacity(count)
        while bytes.count < count {
            var hasher = Hasher()
            hasher.combine(nameKey.0)
            hasher.combine(nameKey.1)
            hasher.combine(nameCounter.add(1, ordering: .relaxed).oldValue)
            var word = UInt64(truncatingIfNeeded: hasher.finalize())
            // Ten characters of 62 from each 64-bit word (62^10 < 2^60).
            for _ in 0..<min(10, count - bytes.count) {
                bytes.append(alphabet[Int(word % 62)])
                word /= 62
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The key of ``randomAlphanumerics(_:)``: from `getrandom`, or where that fails,
    /// from the system's generator Swift's `random` uses.
    private static let nameKey: (UInt64, UInt64) = {
        var key: (UInt64, UInt64) = (0, 0)
        let filled = withUnsafeMutableBytes(of: &key) { system_getrandom($0.baseAddress!, $0.count) }
        if filled != MemoryLayout.size(ofValue: key) {
            key = (UInt64.random(in: .min ... .max), .random(in: .min ... .max))
        }
        return key
    }()
    private static let nameCounter = Atomic<UInt64>(0)
}
