import Glibc

/// Facts about the running process.
public enum CurrentProcess {
    public static var userID: UInt32 { system_getuid() }
    public static var groupID: UInt32 { system_getgid() }
    public static var processID: Int32 { system_getpid() }

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

    /// `count` random characters from `[A-Za-z0-9]`, from the kernel's generator.
    public static func randomAlphanumerics(_ count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var bytes = [UInt8](repeating: 0, count: count)
        let filled = bytes.withUnsafeMutableBytes { system_getrandom($0.baseAddress!, count) }
        if filled != count {
            for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
        }
        return String(decoding: bytes.map { alphabet[Int($0) % alphabet.count] }, as: UTF8.self)
    }
}
