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
}
