import Autosave
import Documents
import Foundation
import Posix
import TestSupport
import Testing

/// A save compares the file with what the store last read or wrote right before it
/// replaces it: another program's version is never overwritten, even when no inotify
/// event has been read (here the store does not watch at all, as a watcher whose
/// events are still queued).
@Suite("A save never replaces what it has not seen", .serialized, .timeLimit(.minutes(2)))
struct UnseenChangeTests {
    func sh(_ script: String, in harness: StoreHarness) throws {
        let result = try Machine.run("/bin/sh", ["-c", "cd '\(harness.root)' && " + script])
        #expect(result.status == 0, "\(script): \(result.stderr)")
    }

    /// The conflict copies of `name` in the root.
    func copies(_ harness: StoreHarness, of base: String) throws -> [String] {
        try Disk.names(in: harness.root).filter { $0.hasPrefix(base + " (conflict ") }
    }

    func expectConflict(_ harness: StoreHarness, _ path: String) async throws {
        do {
            try await harness.store.save(path, wait: true)
            Issue.record("the save replaced another program's version of \(path)")
        } catch let error as StoreError {
            #expect(error.code == "conflict", "\(error)")
        }
        await harness.next { if case .conflict(path, _, .memory) = $0 { return true } else { return false } }
    }

    @Test(
        "Another program's version — renamed over, rewritten in place with its old mtime, created where a new document goes — is kept, the edits go to a conflict copy"
    )
    func unseenChanges() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try Disk.write("one\n", to: harness.file("renamed.txt"))
        try Disk.write("one\n", to: harness.file("inplace.txt"))
        for name in ["renamed.txt", "inplace.txt"] {
            try await harness.store.open(name)
            try await harness.store.apply(.setText("mine\n"), to: name)
        }
        try await harness.store.apply(.setText("mine\n"), to: "new.txt", create: true)

        try sh("printf 'theirs\\n' > .x && mv .x renamed.txt", in: harness)
        // Same size, same modification time: only the change time tells.
        try sh("printf 'ONE\\n' > inplace.txt && touch -d @0 inplace.txt", in: harness)
        try Disk.write("theirs, new\n", to: harness.file("new.txt"))

        for (name, theirs) in [("renamed", "theirs\n"), ("inplace", "ONE\n"), ("new", "theirs, new\n")] {
            try await expectConflict(harness, name + ".txt")
            #expect(try harness.text(onDisk: name + ".txt") == theirs, "\(name): the other program's version stays")
            let copy = try #require(try copies(harness, of: name).first, "\(name): no conflict copy")
            #expect(try harness.text(onDisk: copy) == "mine\n", "\(name): the edits are in the copy")
            #expect(try await harness.store.info(name + ".txt").state == .clean)
        }
    }

    @Test("The same bytes with other metadata (touch, chmod) are no conflict: the save goes ahead")
    func metadataOnly() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try Disk.write("one\n", to: harness.file("a.txt"))
        try await harness.store.open("a.txt")
        try await harness.store.apply(.setText("mine\n"), to: "a.txt")
        try sh("touch -d @1000 a.txt && chmod 640 a.txt", in: harness)
        try await harness.store.save("a.txt", wait: true)
        #expect(try harness.text(onDisk: "a.txt") == "mine\n")
        #expect(try copies(harness, of: "a").isEmpty)
        #expect(try Disk.status(harness.file("a.txt")).permissions.rawValue == 0o640, "the mode is kept")
    }

    @Test("A package replaced as a whole by another program is kept; the edits go to a conflict copy")
    func package() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(atPath: harness.file("p.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("p.package/a.txt"))
        try await harness.store.open("p.package")
        try await harness.store.apply(.putMember("b.txt", Data("mine\n".utf8)), to: "p.package")
        try sh("mkdir .n && printf 'theirs\\n' > .n/a.txt && rm -r p.package && mv .n p.package", in: harness)
        try await expectConflict(harness, "p.package")
        #expect(try Disk.names(in: harness.file("p.package")) == ["a.txt"])
        #expect(try harness.text(onDisk: "p.package/a.txt") == "theirs\n")
        let copy = try #require(try copies(harness, of: "p").first)
        #expect(try harness.text(onDisk: copy + "/b.txt") == "mine\n")
    }

    @Test(
        "A package's member changed by another program — renamed over, rewritten in place — is kept, and so is the rest of their package; the edits go to a conflict copy",
        arguments: ["renamed over", "in place"])
    func packageMember(change: String) async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(atPath: harness.file("p.package"), withIntermediateDirectories: true)
        try Disk.write("one\n", to: harness.file("p.package/a.txt"))
        try Disk.write("bee\n", to: harness.file("p.package/b.txt"))
        try await harness.store.open("p.package")
        try await harness.store.apply(.putMember("a.txt", Data("mine\n".utf8)), to: "p.package")
        try await harness.store.apply(.putMember("b.txt", Data("mine too\n".utf8)), to: "p.package")
        if change == "renamed over" {
            try sh("printf 'theirs\\n' > p.package/.x && mv p.package/.x p.package/a.txt", in: harness)
        } else {
            // Same size, same modification time: only the contents and change time differ.
            try sh("printf 'ONE\\n' > p.package/a.txt && touch -d @0 p.package/a.txt", in: harness)
        }
        let theirs = change == "renamed over" ? "theirs\n" : "ONE\n"
        try await expectConflict(harness, "p.package")
        #expect(try harness.text(onDisk: "p.package/a.txt") == theirs)
        #expect(try harness.text(onDisk: "p.package/b.txt") == "bee\n", "their package is left whole")
        let copy = try #require(try copies(harness, of: "p").first)
        #expect(try harness.text(onDisk: copy + "/a.txt") == "mine\n")
        #expect(try harness.text(onDisk: copy + "/b.txt") == "mine too\n")
    }
}
