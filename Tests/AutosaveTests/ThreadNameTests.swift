import Control
import Foundation
import TestSupport
import Testing

/// The built daemon's own threads carry their names where the kernel shows them (`top -H`,
/// `ps -L`, `perf`), instead of the name of the Dispatch worker that created them.
@Suite("The daemon's thread names")
struct ThreadNameTests {
    @Test("The loop, the journal's sync thread, the watcher, the memory trimmer and the save threads are named")
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
    }
}
