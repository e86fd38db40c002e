import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// A journal a run left, met by a start with another configuration: `[Journal] Mode=off`,
/// or another `Root=`.
@Suite("A journal left by a run, started with the journal off or on another root", .serialized)
struct JournalLeftOverTests {
    @Test(
        "Killed with edits only in the journal, started with Mode=off: the edits are replayed and saved before READY, the journal emptied; a later run with it on replays nothing of them over the newer file"
    )
    func modeOffReplaysWhatWasLeft() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "acked\n"])
        try rig.ok(["cmd": "create", "doc": "p.package"])
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "one\n"])
        rig.kill()

        try rig.configure("Mode=off\n")
        let daemon = try await rig.start()
        #expect(
            daemon.output.contains { $0.contains("Mode=off: the journal a run with it on left") }, "\(daemon.output)")
        // Saved before the daemon served anything.
        #expect(try Disk.bytes(rig.root + "/a.txt") == Data("acked\n".utf8))
        #expect(try Disk.bytes(rig.root + "/p.package/m.txt") == Data("one\n".utf8))
        #expect(try rig.text("a.txt") == "acked\n")
        #expect(rig.segments.isEmpty, "\(rig.segments)")
        #expect(try rig.status()["journal"]?["mode"]?.stringValue == "off")
        // Edited and saved with no journal.
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "later\n"])
        #expect(rig.stop() == 0)

        try rig.configure("")
        let again = try await rig.start()
        #expect(again.output.contains { $0.contains("replayed 0 edits to 0 documents") }, "\(again.output)")
        #expect(try rig.text("a.txt") == "later\n")
        #expect(try Disk.names(in: rig.root).sorted() == ["a.txt", "p.package"], "no conflict copy")
        #expect(rig.stop() == 0)
    }

    @Test(
        "Two roots whose names differ only in Unicode normalization are two roots: the journal of one is not replayed onto the other"
    )
    func rootsInTwoNormalizations() async throws {
        let directory = TemporaryDirectory("journal-nfc")
        defer { withExtendedLifetime(directory) {} }
        let first = try JournalRig(root: directory.sub("Caf\u{E9}"))
        try FileManager.default.createDirectory(atPath: first.root, withIntermediateDirectories: true)
        try await first.start()
        try first.ok(["cmd": "set", "doc": "a.txt", "text": "of the first root\n"])
        first.kill()
        let other = try JournalRig(root: directory.sub("Cafe\u{301}"), journal: first.journal)
        try FileManager.default.createDirectory(atPath: other.root, withIntermediateDirectories: true)
        let refused = try Machine.run("timeout", ["60", Machine.product("autosaved"), "--config", other.config])
        #expect(refused.status == 78, "\(refused)")
        #expect(try Disk.names(in: other.root).isEmpty, "nothing of the first root's documents made here")
    }

    @Test(
        "Killed with edits only in the journal, started on another root with the same journal: refused (exit 78, both roots named), nothing made in the other root; back on its root the edits are replayed, a root moved with Root= is the same root, and once saved the other root starts"
    )
    func anotherRootRefused() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "of the first root\n"])
        rig.kill()

        let other = try JournalRig(journal: rig.journal)
        try FileManager.default.createDirectory(atPath: other.root, withIntermediateDirectories: true)
        // Run to its end (refused), or stopped after a minute.
        let refused = try Machine.run("timeout", ["60", Machine.product("autosaved"), "--config", other.config])
        #expect(refused.status == 78, "\(refused)")
        #expect(refused.stderr.contains(rig.root) && refused.stderr.contains("Root=\(other.root)"), "\(refused)")
        #expect(refused.stderr.contains("not replayed onto another root's files"), "\(refused)")
        #expect(try Disk.names(in: other.root).isEmpty, "nothing of the first root's documents made here")

        // The first root, moved, and Root= with it: the same directory.
        let moved = rig.directory.sub("moved-root")
        #expect(rename(rig.root, moved) == 0)
        let movedRig = try JournalRig(root: moved, journal: rig.journal)
        try await movedRig.start()
        #expect(try movedRig.text("a.txt") == "of the first root\n")
        #expect(movedRig.stop() == 0)
        #expect(try Disk.bytes(moved + "/a.txt") == Data("of the first root\n".utf8))

        // Nothing left unsaved: the other root starts with the journal, which is its own now.
        try await other.start()
        #expect(try other.status()["journal"]?["mode"]?.stringValue == "periodic")
        try other.ok(["cmd": "set", "doc": "b.txt", "text": "of the other root\n"])
        other.kill()
        let back = try Machine.run("timeout", ["60", Machine.product("autosaved"), "--config", movedRig.config])
        #expect(back.status == 78, "\(back)")
        #expect(back.stderr.contains("Root=\(moved)") && back.stderr.contains(other.root), "\(back)")
    }
}
