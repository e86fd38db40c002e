import Control
import Foundation
import TestSupport
import Testing

/// The built daemon's own threads carry their names where the kernel shows them (`top -H`,
/// `ps -L`, `perf`), instead of the name of the Dispatch worker that created them.
@Suite("The daemon's thread names")
struct ThreadNameTests {
    @Test("The daemon's threads are named where the kernel shows them; the save threads run as background work")
    func named() async throws {
        let rig = try JournalRig()
        let daemon = try await rig.start()
        let client = try rig.client()
        for i in 0..<200 {
            try rig.ok(["cmd": "set", "doc": .string("doc\(i).txt"), "text": .string("document \(i)\n")], on: client)
        }
        // Saves nobody waits for run on the save threads.
        let saved = try rig.ok(["cmd": "save-all", "wait": true], on: client)
        #expect(saved["unsaved"] == 0)
        let pid = daemon.process.processIdentifier
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        let names = Set(
            tasks.compactMap { try? String(contentsOfFile: "/proc/\(pid)/task/\($0)/comm", encoding: .utf8) }
                .map { $0.trimmingCharacters(in: .newlines) })
        for name in ["autosaved-loop", "journal-sync", "autosaved-watch", "memory-trim", "save-1"] {
            #expect(names.contains(name), "\(name) among \(names.sorted())")
        }
        // Saves are background work: a save thread woken by its disk does not preempt the
        // loop serving requests (`SCHED_BATCH`); the loop and the journal's sync thread are
        // scheduled as usual.
        var policies: [String: Set<Int>] = [:]
        for task in tasks {
            guard let comm = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8),
                let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { continue }
            // After the name: field 3 (state) onwards; field 41 is the scheduling policy.
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            let name = comm.trimmingCharacters(in: .newlines)
            let kind = name.hasPrefix("save-") ? "save" : name
            policies[kind, default: []].insert(Int(fields[38]) ?? -1)
        }
        let batch = 3  // SCHED_BATCH
        #expect(policies["save"] == [batch], "\(policies)")
        #expect(policies["autosaved-loop"] == [0], "\(policies)")
        #expect(policies["journal-sync"] == [0], "\(policies)")
    }
}
