import Foundation
@preconcurrency import Glibc
import Journal
import TestSupport
import Testing

/// A child process appends records, printing the last LSN of each batch once it is
/// acknowledged (written, in periodic mode), and is killed with SIGKILL at random moments.
/// Every acknowledged record must come back, with its payload, without a gap.
@Suite("Journal under SIGKILL", .serialized)
final class JournalCrashTests {
    let directory = TemporaryDirectory("journal-crash")
    static let kills = 25

    /// Runs the probe until it has acknowledged a random number of batches, kills it, and
    /// returns the lines it printed: "ready COUNT LAST", then acknowledged LSNs.
    func runAndKill(_ path: String, mode: String) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Machine.product("JournalProbe"))
        process.arguments = ["append", path, "--mode", mode, "--batch", String(Int.random(in: 1...20))]
        let out = Pipe()
        process.standardOutput = out
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let reader = out.fileHandleForReading
        var text = ""
        let wanted = Int.random(in: 1...300)
        while text.split(separator: "\n").count < wanted + 1 {
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        kill(process.processIdentifier, SIGKILL)
        text += String(decoding: reader.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try reader.close()
        let complaint = String(decoding: Machine.readToEnd(errors), as: UTF8.self)
        #expect(complaint.isEmpty, "the probe said: \(complaint)")
        // A line cut by the kill is not an acknowledgement.
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lines.removeLast()
        return lines
    }

    @Test("Every acknowledged record survives SIGKILL", arguments: ["periodic", "always"])
    func acknowledgedRecordsSurvive(mode: String) throws {
        let path = directory.sub("j-\(mode)")
        var acknowledged: UInt64 = 0
        for _ in 0..<Self.kills {
            let lines = try runAndKill(path, mode: mode)
            let ready = try #require(lines.first, "the probe failed to start")
            let fields = ready.split(separator: " ")
            #expect(fields.first == "ready", "\(ready)")
            let count = UInt64(fields[1])!
            let last = UInt64(fields[2])!
            #expect(count == last, "replay delivered 1…\(last) without a gap, payloads checked")
            #expect(last >= acknowledged, "acknowledged through \(acknowledged), replayed through \(last)")
            acknowledged = lines.dropFirst().compactMap { UInt64($0) }.max() ?? last
            if count != last || last < acknowledged && lines.count == 1 { break }
        }
        let (journal, report, records) = try openJournal(path)
        #expect(UInt64(records.count) >= acknowledged)
        #expect(records.last.map { $0.lsn >= acknowledged } ?? (acknowledged == 0))
        #expect(report.problems.allSatisfy { if case .tornTail = $0.kind { true } else { false } }, "\(report)")
        journal.close()
    }
}
