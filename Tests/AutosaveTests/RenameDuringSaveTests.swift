import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// Another program renames a document's file while the document's save is being
/// written: the document follows its file once the save is done, with the edits made
/// meanwhile — not a removal (whose `WhenRemoved=` policy would close the document or
/// write it again at the old name) plus a new file.
@Suite("Renames by other programs during a save")
struct RenameDuringSaveTests {
    let base = WatcherTests()

    func rename(_ harness: StoreHarness, _ from: String, _ to: String) throws {
        guard Foundation.rename(harness.file(from), harness.file(to)) == 0 else {
            throw Errno(rawValue: errno)
        }
    }

    @Test("WhenRemoved=close: the file renamed during the save; the document follows it with the edit made meanwhile")
    func renamedDuringSave() async throws {
        let harness = try await base.harness { $0.whenRemoved = .close }
        let store = harness.store
        try await base.openEdited(harness, "a.txt", onDisk: "one\n", .setText("two\n"))
        await store.afterFirstRename(of: harness.file("a.txt")) {
            try await store.apply(.append("three\n"), to: "a.txt")
            try rename(harness, "a.txt", "b.txt")
        }
        try await store.save("a.txt", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        await #expect(throws: StoreError.notFound("a.txt")) { try await store.info("a.txt") }
        #expect(try await store.read("b.txt") == .text("two\nthree\n"))
        try await store.save("b.txt", wait: true)
        #expect(try harness.text(onDisk: "b.txt") == "two\nthree\n")
        #expect(!FileManager.default.fileExists(atPath: harness.file("a.txt")))
    }

    @Test(
        "WhenRemoved=recreate: the file renamed twice during the save; the document follows it to the last name, and nothing is written at the first"
    )
    func renamedTwiceDuringSave() async throws {
        let harness = try await base.harness { $0.whenRemoved = .recreate }
        let store = harness.store
        try await base.openEdited(harness, "a.txt", onDisk: "one\n", .setText("two\n"))
        await store.afterFirstRename(of: harness.file("a.txt")) {
            try await store.apply(.append("three\n"), to: "a.txt")
            try rename(harness, "a.txt", "b.txt")
            await store.cookieBarrier()
            try rename(harness, "b.txt", "c.txt")
        }
        try await store.save("a.txt", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        try await store.save("c.txt", wait: true)
        await store.sync()
        #expect(try harness.text(onDisk: "c.txt") == "two\nthree\n")
        #expect(try Disk.names(in: harness.root).sorted() == ["c.txt"])
        await #expect(throws: StoreError.self) { try await store.info("a.txt") }
        await #expect(throws: StoreError.self) { try await store.info("b.txt") }
    }

    @Test(
        "WhenRemoved=close: the file renamed and renamed back during the save; the document keeps its name and the edit"
    )
    func renamedBackDuringSave() async throws {
        let harness = try await base.harness { $0.whenRemoved = .close }
        let store = harness.store
        try await base.openEdited(harness, "a.txt", onDisk: "one\n", .setText("two\n"))
        await store.afterFirstRename(of: harness.file("a.txt")) {
            try await store.apply(.append("three\n"), to: "a.txt")
            try rename(harness, "a.txt", "b.txt")
            await store.cookieBarrier()
            try rename(harness, "b.txt", "a.txt")
        }
        try await store.save("a.txt", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        #expect(try await store.read("a.txt") == .text("two\nthree\n"))
        try await store.save("a.txt", wait: true)
        #expect(try harness.text(onDisk: "a.txt") == "two\nthree\n")
        #expect(try Disk.names(in: harness.root).sorted() == ["a.txt"])
        await #expect(throws: StoreError.self) { try await store.info("b.txt") }
    }

    @Test(
        "WhenRemoved=recreate: the directory holding the file renamed during the save; the document follows it, and the old directory is not made again"
    )
    func directoryRenamedDuringSave() async throws {
        let harness = try await base.harness { $0.whenRemoved = .recreate }
        let store = harness.store
        try FileManager.default.createDirectory(atPath: harness.file("d"), withIntermediateDirectories: true)
        try await base.openEdited(harness, "d/a.txt", onDisk: "one\n", .setText("two\n"))
        await store.afterFirstRename(of: harness.file("d/a.txt")) {
            try await store.apply(.append("three\n"), to: "d/a.txt")
            try rename(harness, "d", "e")
        }
        // The save's file went with its directory before the directories above it were
        // synced: it fails (and is retried where the document follows it), or succeeds.
        _ = try? await store.save("d/a.txt", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        try await store.save("e/a.txt", wait: true)
        await store.sync()
        #expect(try harness.text(onDisk: "e/a.txt") == "two\nthree\n")
        #expect(try Disk.names(in: harness.root).sorted() == ["e"])
        await #expect(throws: StoreError.self) { try await store.info("d/a.txt") }
    }

    @Test(
        "WhenRemoved=close: during a's save another program swaps the files (a → x, b → a): a follows to x, and b, with its unsaved edit, takes the name a"
    )
    func swapOntoTheSavedName() async throws {
        let harness = try await base.harness { $0.whenRemoved = .close }
        let store = harness.store
        try Disk.write("a\n", to: harness.file("a.txt"))
        try Disk.write("b\n", to: harness.file("b.txt"))
        await store.sync()
        try await store.open("a.txt")
        try await store.open("b.txt")
        try await store.apply(.setText("a saved\n"), to: "a.txt")
        try await store.apply(.setText("b unsaved\n"), to: "b.txt")
        await store.afterFirstRename(of: harness.file("a.txt")) {
            try rename(harness, "a.txt", "x.txt")
            try rename(harness, "b.txt", "a.txt")
        }
        try await store.save("a.txt", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        #expect(try await store.read("x.txt") == .text("a saved\n"))
        #expect(try await store.read("a.txt") == .text("b unsaved\n"))
        await #expect(throws: StoreError.self) { try await store.info("b.txt") }
        try await store.save("a.txt", wait: true)
        #expect(try harness.text(onDisk: "x.txt") == "a saved\n")
        #expect(try harness.text(onDisk: "a.txt") == "b unsaved\n")
        #expect(try Disk.names(in: harness.root).sorted() == ["a.txt", "x.txt"])
    }

    @Test(
        "WhenRemoved=recreate: a file renamed into a package during its save is a move out: written again at its name")
    func renamedIntoAPackageDuringSave() async throws {
        let harness = try await base.harness { $0.whenRemoved = .recreate }
        let store = harness.store
        try FileManager.default.createDirectory(atPath: harness.file("book.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("book.package/1.txt"))
        try Disk.write("a\n", to: harness.file("a.txt"))
        await store.sync()
        try await store.open("a.txt")
        try await store.open("book.package")
        try await store.apply(.setText("mine\n"), to: "a.txt")
        await store.afterFirstRename(of: harness.file("a.txt")) {
            try rename(harness, "a.txt", "b.txt")
            await store.cookieBarrier()
            try rename(harness, "b.txt", "book.package/b.txt")
        }
        try await store.save("a.txt", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        await #expect(throws: StoreError.self) { try await store.info("b.txt") }
        await #expect(throws: StoreError.self) { try await store.info("book.package/b.txt") }
        try await store.save("a.txt", wait: true)
        #expect(try harness.text(onDisk: "a.txt") == "mine\n")
        #expect(try await store.read("book.package", .members) == .members(["1.txt", "b.txt"]))
    }

    @Test("WhenRemoved=close: a package renamed during its save follows with the member put meanwhile")
    func packageRenamedDuringSave() async throws {
        let harness = try await base.harness { $0.whenRemoved = .close }
        let store = harness.store
        try FileManager.default.createDirectory(atPath: harness.file("book.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("book.package/1.txt"))
        await store.sync()
        try await store.open("book.package")
        try await store.apply(.putMember("1.txt", Data("mine\n".utf8)), to: "book.package")
        await store.afterFirstRename(of: harness.file("book.package")) {
            try await store.apply(.putMember("2.txt", Data("two\n".utf8)), to: "book.package")
            try rename(harness, "book.package", "novel.package")
        }
        try await store.save("book.package", wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        await #expect(throws: StoreError.self) { try await store.info("book.package") }
        try await store.save("novel.package", wait: true)
        #expect(try harness.text(onDisk: "novel.package/1.txt") == "mine\n")
        #expect(try harness.text(onDisk: "novel.package/2.txt") == "two\n")
        #expect(try Disk.names(in: harness.root).sorted() == ["novel.package"])
    }
}
