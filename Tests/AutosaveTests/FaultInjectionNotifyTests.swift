import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// systemd's notification socket at an abstract address (`NOTIFY_SOCKET=@name`, as in
/// some containers): the daemon's own sender (one socket kept for every message, so that
/// `STATUS=` still goes out with no descriptor left) reaches it as `sd_notify` does.
@Suite("Injected faults: notifications to an abstract socket address")
struct FaultInjectionNotifyTests {
    /// A datagram socket bound to the abstract name `name` (no file).
    static func abstractReceiver(_ name: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = [0] + Array(name.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else {
            close(fd)
            throw Failure("bind @\(name): \(errno)")
        }
        return fd
    }

    /// The next datagram's `KEY=value` lines, or `nil` after `milliseconds`.
    static func receive(_ fd: Int32, within milliseconds: Int32) -> [String: String]? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, milliseconds) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        var message: [String: String] = [:]
        for line in String(decoding: buffer[..<n], as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            message[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        return message
    }

    @Test("READY=1 and STATUS= reach an abstract NOTIFY_SOCKET")
    func abstractAddress() async throws {
        let name = "autosaved-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = try Self.abstractReceiver(name)
        defer { close(fd) }
        let rig = try await FaultRig(underFaultInjection: false, extraEnvironment: ["NOTIFY_SOCKET": "@" + name])
        var ready: [String: String]?
        let deadline = ContinuousClock.now + .seconds(20)
        while ready == nil, ContinuousClock.now < deadline {
            if let message = Self.receive(fd, within: 100), message["READY"] == "1" { ready = message }
        }
        #expect(ready?["STATUS"]?.contains("0 unsaved") == true, "\(String(describing: ready))")
        #expect(try rig.call(["cmd": "set", "doc": "a.txt", "text": "a\n"])["ok"] == true)
        #expect(try rig.call(["cmd": "save", "doc": "a.txt", "wait": true])["ok"] == true)
        var saved: [String: String]?
        while saved == nil, ContinuousClock.now < deadline {
            if let message = Self.receive(fd, within: 100), message["STATUS"]?.contains("(a.txt)") == true {
                saved = message
            }
        }
        #expect(saved != nil, "a STATUS= naming the last save")
        // Read while it stops: a full queue would block its sd_notify of STOPPING=1.
        rig.process.signal(SIGTERM)
        var stopping = false
        while !stopping, ContinuousClock.now < deadline {
            if let message = Self.receive(fd, within: 100), message["STOPPING"] == "1" { stopping = true }
        }
        #expect(stopping)
        #expect(await rig.process.exitStatus() == 0)
    }
}
