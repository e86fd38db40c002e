import Autosave
import Foundation
import Testing

/// A new document cannot be a file where open documents need a directory, and the
/// check follows documents as they open, close and move.
@Suite("New documents and the directories of open ones")
struct ClashTests {
    func refusedAsDirectory(_ harness: StoreHarness, _ path: String) async -> Bool {
        do {
            try await harness.store.apply(.setText("x"), to: path, create: true)
            return false
        } catch {
            return error.code == "invalid-path" && error.description.contains("the directory of open documents")
        }
    }

    @Test("notes is refused while notes/a/b.txt is open and unsaved, and again allowed once it is closed")
    func directories() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try await harness.store.apply(.setText("b\n"), to: "notes/a/b.txt", create: true)
        try await harness.store.apply(.setText("c\n"), to: "notes/c.txt", create: true)
        #expect(await refusedAsDirectory(harness, "notes"))
        #expect(await refusedAsDirectory(harness, "notes/a"))
        try await harness.store.close("notes/a/b.txt")
        await #expect(throws: StoreError.self, "notes is a directory on disk now") {
            try await harness.store.apply(.setText("x"), to: "notes", create: true)
        }
        // notes/a is a directory on disk now (the close saved b.txt): a file cannot be made there.
        try FileManager.default.removeItem(atPath: harness.file("notes/a"))
        try await harness.store.apply(.setText("a\n"), to: "notes/a", create: true)
        try await harness.store.close("notes/c.txt")
        try FileManager.default.removeItem(atPath: harness.file("notes/c.txt"))
        #expect(await harness.store.list().map(\.path) == ["notes/a"])
    }

    @Test(
        "A directory or a link put where a document's file goes: its save fails naming it, and no conflict copy is made",
        arguments: ["directory", "link"], [false, true])
    func obstacleAtTheFile(kind: String, saved: Bool) async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try await harness.store.apply(.setText("x"), to: "blocked.txt", create: true)
        if saved {
            try await harness.store.save("blocked.txt", wait: true)
            try await harness.store.apply(.setText("y"), to: "blocked.txt")
            try FileManager.default.removeItem(atPath: harness.file("blocked.txt"))
        }
        if kind == "directory" {
            try FileManager.default.createDirectory(
                atPath: harness.file("blocked.txt"), withIntermediateDirectories: false)
        } else {
            try FileManager.default.createSymbolicLink(atPath: harness.file("blocked.txt"), withDestinationPath: "x")
        }
        // Not waited for: a save that took the obstacle for another program's version would
        // keep a conflict copy and try again, on and on, and never answer.
        try await harness.store.save("blocked.txt", wait: false)
        var failure: SaveFailure?
        let deadline = ContinuousClock.now + .seconds(20)
        while failure == nil, ContinuousClock.now < deadline {
            if case .failed(let found) = try await harness.store.info("blocked.txt").state { failure = found }
            try await Task.sleep(for: .milliseconds(20))
        }
        let message = try #require(failure, "the save never failed").message
        #expect(message.contains(kind == "directory" ? "a directory is in the way" : "symbolic link"), "\(message)")
        let names = try FileManager.default.contentsOfDirectory(atPath: harness.root)
        #expect(!names.contains { $0.contains("conflict") }, "\(names)")
        #expect(try await harness.store.info("blocked.txt").state != .clean, "the edits stay unsaved")
    }
}
