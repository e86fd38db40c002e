import CSystemd
import Glibc
import Posix

/// Messages to the service manager through `sd_notify`: readiness, status text,
/// reloading, stopping, watchdog pings.
public struct Notifier: Sendable {
    /// What `sd_notify` said.
    public enum Outcome: Sendable, Equatable {
        /// The message was sent.
        case sent
        /// `NOTIFY_SOCKET` is not set: not running under systemd (or not `Type=notify`).
        case notUnderSystemd
        /// Sending failed with this error.
        case failed(Errno)
    }

    public init() {}

    /// Sends `KEY=value` assignments, one per line, in order.
    @discardableResult
    public func notify(_ assignments: [(String, String)]) -> Outcome {
        let message = assignments.map { "\($0.0)=\($0.1)" }.joined(separator: "\n")
        guard let address = getenv("NOTIFY_SOCKET").map({ String(cString: $0) }), !address.isEmpty else {
            return .notUnderSystemd
        }
        if address.hasPrefix("/") || address.hasPrefix("@") {
            return NotificationSocket.shared.send(Array(message.utf8), to: address)
        }
        // Other kinds of address (`vsock:…`): libsystemd's own way, a socket per message.
        let result = message.withCString { sd_notify(0, $0) }
        if result > 0 { return .sent }
        if result == 0 { return .notUnderSystemd }
        return .failed(Errno(rawValue: -result))
    }

    /// `READY=1` with the current status text.
    @discardableResult
    public func ready(status: String) -> Outcome { notify([("READY", "1"), ("STATUS", status)]) }

    @discardableResult
    public func status(_ text: String) -> Outcome { notify([("STATUS", text)]) }

    /// `RELOADING=1` with `MONOTONIC_USEC=` (systemd 253's reload protocol; older ones ignore it).
    @discardableResult
    public func reloading() -> Outcome {
        notify([("RELOADING", "1"), ("MONOTONIC_USEC", "\(CurrentProcess.monotonicMicroseconds)")])
    }

    @discardableResult
    public func stopping(status: String) -> Outcome { notify([("STOPPING", "1"), ("STATUS", status)]) }

    /// Asks for more time to stop: the stop timeout is extended by `microseconds` from now.
    @discardableResult
    public func extendTimeout(microseconds: UInt64, status: String) -> Outcome {
        notify([("EXTEND_TIMEOUT_USEC", "\(microseconds)"), ("STATUS", status)])
    }

    /// `ERRNO=` and a status before a fatal exit.
    @discardableResult
    public func fatal(errno: Int32, status: String) -> Outcome { notify([("ERRNO", "\(errno)"), ("STATUS", status)]) }

    @discardableResult
    public func watchdogPing() -> Outcome { notify([("WATCHDOG", "1")]) }

    /// The watchdog interval systemd expects pings within, when it is enabled for this
    /// process (`WATCHDOG_USEC` set and `WATCHDOG_PID` unset or this process).
    public static func watchdogInterval() -> Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(usec))
    }
}

/// The socket messages to systemd go out on, made at the first message and kept.
/// `sd_notify` makes a socket for each message, which fails with EMFILE once the
/// process has no descriptor left — when `STATUS=` has the most to say (every save
/// failing with EMFILE). Each message is sent to the address in `NOTIFY_SOCKET` (a path,
/// or an abstract name after `@`), as `sd_notify` does: a manager that made its socket
/// again is still reached.
final class NotificationSocket: Sendable {
    static let shared = NotificationSocket()

    /// The socket, -1 until one is made.
    private let descriptor = Lock<Int32>(-1)

    private func socketDescriptor() -> Result<Int32, Errno> {
        descriptor.withLock { fd in
            if fd < 0 {
                fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                if fd < 0 { return .failure(Errno(rawValue: errno)) }
            }
            return .success(fd)
        }
    }

    func send(_ message: [UInt8], to path: String) -> Notifier.Outcome {
        var name = Array(path.utf8)
        let abstract = name.first == UInt8(ascii: "@")
        if abstract { name[0] = 0 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        // A path is NUL-terminated (the zeroed byte after it); an abstract name is not.
        guard name.count < MemoryLayout.size(ofValue: address.sun_path) else { return .failed(.nameTooLong) }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.count + (abstract ? 0 : 1))
        let fd: Int32
        switch socketDescriptor() {
        case .success(let made): fd = made
        case .failure(let error): return .failed(error)
        }
        while true {
            let sent = message.withUnsafeBytes { bytes in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, length)
                    }
                }
            }
            if sent >= 0 { return .sent }
            if errno != EINTR { return .failed(Errno(rawValue: errno)) }
        }
    }
}

/// Sockets systemd passed to this process (socket activation).
public enum ListenSockets {
    /// The passed socket named `name` (`FileDescriptorName=` of the socket unit), else
    /// the first one; `nil` when none was passed. The environment variables are unset.
    public static func socket(named name: String) -> FileDescriptor? {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = nil
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return nil }
        var chosen = 0
        if let names {
            for index in 0..<Int(count) {
                if let entry = names[index] {
                    if String(cString: entry) == name { chosen = index }
                    free(entry)
                }
            }
            free(names)
        }
        return FileDescriptor(rawValue: SD_LISTEN_FDS_START + Int32(chosen))
    }
}
