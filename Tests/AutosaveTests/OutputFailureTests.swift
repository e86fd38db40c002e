import Foundation
import TestSupport
import Testing

/// autosavectl whose standard output or error cannot be written (a full disk: /dev/full)
/// ends with its usual exit status instead of being stopped by a trap.
@Suite("autosavectl on an unwritable output", .serialized)
struct OutputFailureTests {
    /// Runs autosavectl with both outputs on /dev/full; how it ended.
    func run(_ daemon: RunningDaemon, _ arguments: [String]) throws -> (
        reason: Process.TerminationReason, status: Int32
    ) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Machine.product("autosavectl"))
        process.arguments = ["--socket", daemon.socket] + arguments
        let full = try FileHandle(forWritingTo: URL(fileURLWithPath: "/dev/full"))
        process.standardOutput = full
        process.standardError = full
        try process.run()
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus)
    }

    @Test("get, list, status and a refused request with output to /dev/full exit with a status, not a signal")
    func fullOutput() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        #expect(try daemon.ctl("set", "a.txt", "--text", "hello\n").status == 0)
        for (arguments, expected) in [
            (["get", "a.txt"], Int32(0)), (["list"], 0), (["status"], 0), (["get", "missing.txt"], 1),
        ] {
            let outcome = try run(daemon, arguments)
            #expect(outcome.reason == .exit, "\(arguments): stopped by signal \(outcome.status)")
            #expect(outcome.status == expected, "\(arguments)")
        }
        #expect(await daemon.stop() == 0)
    }
}
