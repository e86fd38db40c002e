import Autosave
import Control
import Foundation
import TestSupport
import Testing

@Suite("A package member removed by the daemon's own save", .serialized)
struct PackageMemberRemovalTests {
    @Test("remove-member, then save --wait: saved, no conflict, no conflict copy, the other members kept")
    func ownRemovalIsNoConflict() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        #expect(try daemon.ctl("create", "book.package").status == 0)
        for member in ["m0", "m1", "ch/m2"] {
            #expect(try daemon.ctl("put-member", "book.package", member, "--text", "\(member)\n").status == 0)
        }
        #expect(try daemon.ctl("save", "book.package", "--wait").status == 0)
        for round in 0..<3 {
            // Removing a member unlinks it during the save; the watcher sees that unlink.
            let member = ["m1", "ch/m2", "m0"][round]
            #expect(try daemon.ctl("put-member", "book.package", "new\(round)", "--text", "n\n").status == 0)
            #expect(try daemon.ctl("remove-member", "book.package", member).status == 0)
            let saved = try daemon.ctl("save", "book.package", "--wait")
            #expect(saved.status == 0, "round \(round): \(saved)")
            // A barrier: every change made before it has been seen by the watcher.
            #expect(try daemon.ctl("sync").status == 0)
        }
        let names = try Disk.names(in: daemon.root)
        #expect(names == ["book.package"], "no conflict copy: \(names)")
        #expect(try Disk.names(in: daemon.root + "/book.package") == ["ch", "new0", "new1", "new2"])
        let status = try JSONValue(parsing: try daemon.ctl("--json", "status").stdout)
        #expect(status["watch"]?["conflicts"]?.intValue == 0)
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A member x/y removed, then a member x put (and the other way round): saved as the last edits left them, x's bytes kept on disk and in memory",
        arguments: [true, false])
    func fileAndDirectoryUnderOneName(fileLast: Bool) async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        #expect(try daemon.ctl("create", "book.package").status == 0)
        // The first state: x/y a member (x a directory), or x a member (a file).
        if fileLast {
            #expect(try daemon.ctl("put-member", "book.package", "x/y", "--text", "inner\n").status == 0)
        } else {
            #expect(try daemon.ctl("put-member", "book.package", "x", "--text", "file\n").status == 0)
        }
        #expect(try daemon.ctl("save", "book.package", "--wait").status == 0)
        if fileLast {
            #expect(try daemon.ctl("remove-member", "book.package", "x/y").status == 0)
            #expect(try daemon.ctl("put-member", "book.package", "x", "--text", "file\n").status == 0)
        } else {
            #expect(try daemon.ctl("remove-member", "book.package", "x").status == 0)
            #expect(try daemon.ctl("put-member", "book.package", "x/y", "--text", "inner\n").status == 0)
        }
        let saved = try daemon.ctl("save", "book.package", "--wait")
        #expect(saved.status == 0, "\(saved)")
        let package = daemon.root + "/book.package"
        if fileLast {
            #expect(try Disk.bytes(package + "/x") == Data("file\n".utf8))
            #expect(try daemon.ctl("get", "book.package", "--member", "x").stdout == "file\n")
        } else {
            #expect(try Disk.bytes(package + "/x/y") == Data("inner\n".utf8))
            #expect(try daemon.ctl("get", "book.package", "--member", "x/y").stdout == "inner\n")
        }
        #expect(await daemon.stop() == 0)
    }
}

@Suite("Package member names in two Unicode normalizations", .serialized)
struct PackageNormalizationTests {
    static let composed = "\u{E9}"
    static let decomposed = "e\u{301}"

    @Test(
        "A member named as another member, or as its directory, in another Unicode normalization is refused; the other member is kept, in memory and on disk",
        arguments: [
            (composed + "/a", decomposed), (decomposed, composed + "/a"), (composed, decomposed),
            (composed + "/a", decomposed + "/b"), ("d/" + decomposed + "/x/a", "d/" + composed + "/x/b"),
        ])
    func twoNormalizations(first: String, second: String) async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(atPath: harness.file("p.package"), withIntermediateDirectories: true)
        try await harness.store.open("p.package")
        try await harness.store.apply(.putMember(first, Data("first\n".utf8)), to: "p.package")
        do {
            try await harness.store.apply(.putMember(second, Data("second\n".utf8)), to: "p.package")
            Issue.record("\(Array(second.unicodeScalars)) was taken beside \(Array(first.unicodeScalars))")
        } catch {
            #expect(error.code == "bad-request", "\(error)")
        }
        if !second.contains("/") {
            await #expect(throws: StoreError.self, "a removal names the member by its bytes") {
                try await harness.store.apply(.removeMember(second), to: "p.package")
            }
        }
        try await harness.store.save("p.package", wait: true)
        #expect(try await harness.store.read("p.package", .member(first)) == .data(Data("first\n".utf8)))
        #expect(try Disk.bytes(harness.file("p.package/" + first)) == Data("first\n".utf8))
        #expect(try await harness.store.read("p.package", .members) == .members([first]))
    }

    @Test(
        "A member removed and not saved yet, put again under another normalization of its name: refused until the removal is saved, then saved under the client's spelling"
    )
    func removedThenPutInAnotherNormalization() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(atPath: harness.file("p.package"), withIntermediateDirectories: true)
        try Disk.write("first\n", to: harness.file("p.package/" + Self.composed))
        let store = harness.store
        try await store.open("p.package")
        try await store.apply(.removeMember(Self.composed), to: "p.package")
        do {
            try await store.apply(.putMember(Self.decomposed, Data("second\n".utf8)), to: "p.package")
            Issue.record("taken while the removal of the other spelling waits for its save")
        } catch {
            #expect(error.code == "bad-request", "\(error)")
        }
        try await store.save("p.package", wait: true)
        try await store.apply(.putMember(Self.decomposed, Data("second\n".utf8)), to: "p.package")
        try await store.save("p.package", wait: true)
        #expect(try Disk.names(in: harness.file("p.package")).map { Array($0.utf8) } == [Array(Self.decomposed.utf8)])
        #expect(try await store.read("p.package", .member(Self.decomposed)) == .data(Data("second\n".utf8)))
    }

    @Test(
        "A directory left in the package with no member in it (on disk when the package was opened, or emptied by remove-member) keeps its spelling: a member under it in another Unicode normalization is refused, a file with its very name takes its place"
    )
    func emptyDirectoryInAnotherNormalization() async throws {
        let composed = Self.composed
        let decomposed = Self.decomposed
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(
            atPath: harness.file("p.package/" + composed), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            atPath: harness.file("p.package/" + decomposed + "x"), withIntermediateDirectories: true)
        try Disk.write("m\n", to: harness.file("p.package/" + decomposed + "x/m"))
        let store = harness.store
        try await store.open("p.package")
        // Emptied: the directory stays on disk.
        try await store.apply(.removeMember(decomposed + "x/m"), to: "p.package")
        try await store.save("p.package", wait: true)
        for (directory, other) in [(composed, decomposed), (decomposed + "x", composed + "x")] {
            #expect(FileManager.default.fileExists(atPath: harness.file("p.package/" + directory)))
            do {
                try await store.apply(.putMember(other + "/b", Data("b\n".utf8)), to: "p.package")
                Issue.record(
                    "\(Array(other.unicodeScalars)) was taken beside the directory \(Array(directory.unicodeScalars))")
            } catch {
                #expect(error.code == "bad-request", "\(error)")
                #expect("\(error)".contains("normalization"), "\(error)")
            }
        }
        try await store.save("p.package", wait: true)
        #expect(try await store.read("p.package", .members) == .members([]))
        // The same bytes: a member in it, or a file in its place.
        try await store.apply(.putMember(composed + "/b", Data("b\n".utf8)), to: "p.package")
        try await store.apply(.putMember(decomposed + "x", Data("file\n".utf8)), to: "p.package")
        try await store.save("p.package", wait: true)
        #expect(try Disk.bytes(harness.file("p.package/" + composed + "/b")) == Data("b\n".utf8))
        #expect(try Disk.bytes(harness.file("p.package/" + decomposed + "x")) == Data("file\n".utf8))
        #expect(try await store.read("p.package", .members) == .members([composed + "/b", decomposed + "x"].sorted()))
    }
}

@Suite("A package removed or moved away while nobody watches", .serialized)
struct PackageGoneUnwatchedTests {
    @Test(
        "With no watcher, another program removes or moves the package away; its next save finds the directory gone and writes it again from memory (WhenRemoved=recreate-unsaved): the unsaved member is saved, members whose bytes were only on disk are forgotten, and the member list is what is on disk",
        arguments: [false, true])
    func packageGone(moved: Bool) async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(atPath: harness.file("p.package/d"), withIntermediateDirectories: true)
        try Disk.write("only on disk\n", to: harness.file("p.package/d/m.txt"))
        let store = harness.store
        try await store.open("p.package")
        try await store.apply(.putMember("n.txt", Data("saved\n".utf8)), to: "p.package")
        try await store.save("p.package", wait: true)
        if moved {
            #expect(rename(harness.file("p.package"), harness.file("elsewhere")) == 0)
        } else {
            try FileManager.default.removeItem(atPath: harness.file("p.package"))
        }
        try await store.apply(.putMember("o.txt", Data("unsaved\n".utf8)), to: "p.package")
        try await store.save("p.package", wait: true)
        #expect(try Disk.bytes(harness.file("p.package/o.txt")) == Data("unsaved\n".utf8))
        guard case .members(let members) = try await store.read("p.package", .members) else {
            Issue.record("no member list")
            return
        }
        #expect(!members.contains("d/m.txt"), "its bytes were only on disk")
        #expect(members.contains("o.txt"))
        for member in members {
            #expect(
                try await store.read("p.package", .member(member))
                    == .data(try Disk.bytes(harness.file("p.package/" + member))), "\(member)")
        }
        #expect(try await store.info("p.package").state == .clean)
        if moved {
            #expect(try Disk.bytes(harness.file("elsewhere/d/m.txt")) == Data("only on disk\n".utf8))
        }
    }

    @Test(
        "With no watcher, the store root moved away: the package's save fails and waits — nothing forgotten, nothing closed — and once the root is back the edits are saved into the package, no conflict copy"
    )
    func rootGone() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        try FileManager.default.createDirectory(atPath: harness.file("p.package/d"), withIntermediateDirectories: true)
        try Disk.write("on disk\n", to: harness.file("p.package/d/m.txt"))
        let store = harness.store
        try await store.open("p.package")
        try await store.apply(.putMember("n.txt", Data("unsaved\n".utf8)), to: "p.package")
        #expect(rename(harness.root, harness.root + "-away") == 0)
        await #expect(throws: StoreError.self) { try await store.save("p.package", wait: true) }
        #expect(rename(harness.root + "-away", harness.root) == 0)
        try await store.save("p.package", wait: true)
        #expect(try Disk.names(in: harness.root) == ["p.package"], "no conflict copy")
        #expect(try Disk.bytes(harness.file("p.package/n.txt")) == Data("unsaved\n".utf8))
        #expect(try await store.read("p.package", .members) == .members(["d/m.txt", "n.txt"]))
        #expect(try await store.read("p.package", .member("d/m.txt")) == .data(Data("on disk\n".utf8)))
    }
}
