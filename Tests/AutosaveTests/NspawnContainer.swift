import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// The host's tree booted under `systemd-nspawn` (`--volatile=yes`, with `arguments`
/// added), driven from the host through `nsenter` into its PID 1. Killed, whole, on deinit.
final class NspawnContainer {
    let process: DaemonProcess
    /// The container's PID 1 as the host sees it.
    let leader: String

    /// Boots the container and waits until its systemd says it is running (or degraded).
    init(namePrefix: String, _ arguments: [String]) async throws {
        let name = namePrefix + CurrentProcess.randomAlphanumerics(6).lowercased()
        process = try DaemonProcess(
            "/usr/bin/systemd-nspawn",
            ["-D", "/", "--volatile=yes", "-b", "--register=no", "--keep-unit", "--console=pipe", "-M", name]
                + arguments)
        // nspawn's child once it has become systemd (nspawn first forks an intermediate
        // child that goes away).
        var found: String?
        for _ in 0..<600 where found == nil {
            let children = try Machine.run("pgrep", ["-P", "\(process.process.processIdentifier)"]).stdout
            found = children.split(separator: "\n").map(String.init).first { pid in
                (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) == "systemd\n"
            }
            if found == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        guard let found else {
            process.signal(SIGKILL)
            process.process.waitUntilExit()
            throw Failure("the container did not start: \(process.output)")
        }
        leader = found
        try await waitUntil("the container to boot", attempts: 900) {
            let state = try inside("systemctl", "is-system-running").stdout
            return state.contains("running") || state.contains("degraded")
        }
    }

    /// Kills the container's PID 1, which takes every process of its PID namespace with it
    /// (its systemd and what that started: a daemon, a `redis-server`), then waits for
    /// nspawn, which exits once its child is gone. Killing nspawn alone would leave the
    /// container's processes running, handed over to the host's PID 1.
    deinit {
        if let pid = pid_t(leader) { kill(pid, SIGKILL) }
        for _ in 0..<200 where process.process.isRunning { usleep(50_000) }
        if process.process.isRunning { process.signal(SIGKILL) }
        process.process.waitUntilExit()
    }

    var output: [String] { process.output }

    /// Runs a command inside the container.
    @discardableResult
    func inside(_ arguments: String...) throws -> Machine.Output { try inside(arguments) }

    @discardableResult
    func inside(_ arguments: [String]) throws -> Machine.Output {
        try Machine.run("nsenter", ["-t", leader, "-a"] + arguments)
    }

    /// Polls `condition` every 100 ms, `attempts` times; a test issue if it never holds.
    func waitUntil(_ what: String, attempts: Int = 300, _ condition: () throws -> Bool) async throws {
        for _ in 0..<attempts {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("timed out waiting for \(what)")
    }
}

/// systemd-journald started for a test on the host's `/run/systemd/journal` (PID 1 is not
/// systemd here); ``stop()`` ends it and removes what it made.
final class PrivateJournald {
    private let process: DaemonProcess

    /// Starts journald and waits for its socket.
    init() async throws {
        try FileManager.default.createDirectory(atPath: "/run/systemd/journal", withIntermediateDirectories: true)
        process = try DaemonProcess("/lib/systemd/systemd-journald", [])
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: "/run/systemd/journal/socket") {
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    func stop() {
        process.signal(SIGTERM)
        process.process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: "/run/systemd/journal")
        try? FileManager.default.removeItem(atPath: "/run/log/journal")
    }
}
