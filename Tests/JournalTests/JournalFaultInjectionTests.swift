import Foundation
import Journal
import TestSupport
import Testing

/// The real `fdatasync` of a real process made to fail with libfiu (`fiu-run -x` preloads
/// wrappers around libc's I/O calls; `fiu-ctrl` turns a failure point on and off in the
/// running process).
@Suite("Journal under libfiu", .enabled(if: Machine.has("fiu-run") && Machine.has("fiu-ctrl")))
final class JournalFaultInjectionTests {
    let directory = TemporaryDirectory("journal-fiu")

    /// The probe under `fiu-run -x`, spoken to line by line.
    final class Probe {
        let process = Process()
        let input = Pipe()
        let output = Pipe()
        var buffer = ""

        init(_ arguments: [String], failing: String? = nil) throws {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            var command = ["fiu-run", "-x"]
            if let failing { command += ["-c", "enable name=\(failing),failinfo=5"] }
            process.arguments = command + [Machine.product("JournalProbe")] + arguments
            process.standardInput = input
            process.standardOutput = output
            process.standardError = output
            try process.run()
        }

        func line() -> String {
            while !buffer.contains("\n") {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                buffer += String(decoding: chunk, as: UTF8.self)
            }
            guard let end = buffer.firstIndex(of: "\n") else {
                defer { buffer = "" }
                return buffer
            }
            defer { buffer = String(buffer[buffer.index(after: end)...]) }
            return String(buffer[..<end])
        }

        func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

        func control(_ command: String) throws {
            let result = try Machine.run("fiu-ctrl", ["-c", command, String(process.processIdentifier)])
            #expect(result.status == 0, "\(result)")
        }

        deinit {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
        }
    }

    @Test("An fdatasync failing with EIO is reported; the records become durable only by the rewrite")
    func failingFdatasync() throws {
        let path = directory.sub("j")
        let probe = try Probe(["sync-failure", path])
        #expect(probe.line() == "ready")
        try probe.control("enable name=posix/io/sync/fdatasync,failinfo=5")
        probe.send("append")
        #expect(probe.line() == "failed fdatasync EIO 1 5 durable 0")
        try probe.control("disable name=posix/io/sync/fdatasync")
        probe.send("wait")
        #expect(probe.line() == "durable 5 rewrites 1")
        probe.send("close")
        #expect(probe.line() == "closed")
        probe.process.waitUntilExit()
        let (journal, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == [1, 2, 3, 4, 5])
        #expect(report.isClean, "\(report)")
        journal.close()
    }

    @Test("When no fdatasync succeeds, the journal refuses to start and says why")
    func failingFromTheStart() throws {
        let path = directory.sub("k")
        let probe = try Probe(["sync-failure", path], failing: "posix/io/sync/fdatasync")
        let line = probe.line()
        #expect(line.hasPrefix("journal-probe: fdatasync \(path)/00000000000000000001.journal: EIO"), "\(line)")
        probe.process.waitUntilExit()
        #expect(probe.process.terminationStatus == 64)
    }
}
