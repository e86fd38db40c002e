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
    func runAndKill(_ path: String, mode: String, _ extra: [String] = []) throws -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Machine.product("JournalProbe"))
        process.arguments = ["append", path, "--mode", mode, "--batch", String(Int.random(in: 1...20))] + extra
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

    /// Segments of 16 KiB, each batch its own owner, all but the last four batches released:
    /// segments go obsolete within a run and the next ones are made from their files, whose
    /// earlier records lie past the new ones when the kill comes.
    @Test(
        "Every acknowledged record that is not released survives SIGKILL while segments are recycled",
        arguments: ["periodic", "always"])
    func acknowledgedRecordsSurviveRecycling(mode: String) throws {
        let path = directory.sub("recycled-\(mode)")
        let keep = 4
        var acknowledged: UInt64 = 0
        // The batches acknowledged last and not released when the probe was killed: the
        // last keep - 1 (one more batch may have been written, releasing the oldest of the
        // last keep, before its line was printed).
        var unreleased: [ClosedRange<UInt64>] = []
        // The first LSN of the oldest batch that may be unreleased at the kill.
        var floor: UInt64?
        var recycled = 0
        for _ in 0..<Self.kills {
            let lines = try runAndKill(
                path, mode: mode, ["--keep", String(keep), "--segment-size", "16384", "--interval-ms", "20"])
            let ready = try #require(lines.first, "the probe failed to start")
            let fields = ready.split(separator: " ")
            #expect(fields.first == "ready", "\(ready)")
            let last = UInt64(fields[2])!
            let delivered = fields.dropFirst(3).map { field in
                let ends = field.split(separator: "-").map { UInt64($0)! }
                return ends[0]...ends[1]
            }
            #expect(last >= acknowledged, "acknowledged through \(acknowledged), replayed through \(last)")
            for batch in unreleased {
                #expect(delivered.contains(batch), "batch \(batch) acknowledged and not released: \(ready)")
            }
            // Nothing released comes back: no record older than the oldest batch left unreleased.
            if let floor {
                #expect(delivered.allSatisfy { $0.lowerBound >= floor }, "released records delivered: \(ready)")
            }
            let acks = lines.dropFirst().map { $0.split(separator: " ").map { UInt64($0)! } }
            acknowledged = acks.last?[0] ?? last
            unreleased = acks.suffix(keep - 1).map { $0[2]...$0[0] }
            floor = acks.count >= keep ? acks[acks.count - keep][2] : nil
            recycled += Int(acks.last?[1] ?? 0)
        }
        #expect(recycled > 0, "the runs recycled segments")
        let (journal, report, records) = try openJournal(path)
        #expect(records.last.map { $0.lsn >= acknowledged } ?? (acknowledged == 0))
        #expect(report.problems.allSatisfy { if case .tornTail = $0.kind { true } else { false } }, "\(report)")
        journal.close()
    }
}
