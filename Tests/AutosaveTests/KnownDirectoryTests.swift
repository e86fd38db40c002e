import Documents
import Foundation
import Posix
import Synchronization
import TestSupport
import Testing

@testable import Autosave

/// A directory the store has listed is known while inotify watches it: a new document
/// there needs no look at the disk, unless its name is one of those in the directory that
/// are not the store's (DocumentStore+MissingDirectories.swift). Anything else appearing
/// there, or a document of it let go, adds its name; something leaving ends it. Known,
/// missing, or holding open documents, a directory is told from another by its name's
/// bytes, as the file system tells them apart.
@Suite("New documents in a known directory", .serialized)
struct KnownDirectoryTests {
    /// The look the control socket takes at a path before a new document is made there,
    /// taken the same way (nothing at the path, or something; a symbolic link refused), and
    /// counted.
    final class CountedLook: UnopenedPathCheck, Sendable {
        struct LinkRefused: Error {}
        let root: String
        let looks = Atomic(0)
        init(root: String) { self.root = root }

        func checkUnopened(valid: String) throws -> Bool {
            looks.add(1, ordering: .relaxed)
            guard
                let status = try? FileDescriptor.currentWorkingDirectory.status(
                    of: root + "/" + valid, followSymlinks: false)
            else { return false }
            if status.kind == .symbolicLink { throw LinkRefused() }
            return true
        }

        func directoryIsMissing(_ directory: String) -> Bool {
            (try? Disk.status(root + "/" + directory)) == nil
        }

        var count: Int { looks.load(ordering: .relaxed) }
    }

    /// A store watching its root, edits held an hour, and the look it is given counted.
    func watchedStore(openNewFiles: Bool = true) async throws -> (StoreHarness, DocumentStore, CountedLook) {
        let harness = await StoreHarness(
            quiet: .seconds(3600), maxDelay: .seconds(3600), configure: { $0.openNewFiles = openNewFiles })
        try await harness.store.startWatching()
        return (harness, harness.store, CountedLook(root: harness.root))
    }

    func set(_ path: String, _ text: String, in store: DocumentStore, look: CountedLook) async throws {
        _ = try await store.apply(.setText(text), named: path, create: true, unopened: look)
    }

    @Test(
        "Made by the store's save, a directory is known: its next new documents need no look; another program's file there takes its name, and that file is opened, not replaced",
        .timeLimit(.minutes(1)))
    func madeBySave() async throws {
        // New files are opened only when a client names them: the `set` of the other
        // program's file below is what opens it.
        let (harness, store, look) = try await watchedStore(openNewFiles: false)

        try await set("made/a.txt", "a\n", in: store, look: look)
        #expect(look.count == 1, "the first new document looks")
        try await set("made/b.txt", "b\n", in: store, look: look)
        #expect(look.count == 1, "the directory is remembered missing: no look")
        try await store.save("made/a.txt", wait: true)
        await store.sync()
        #expect(await store.knownDirectories == ["made"], "made by the save, listed, all the store's own")

        try await set("made/c.txt", "c\n", in: store, look: look)
        #expect(look.count == 1, "known whole: no look")

        // Another program's file: reported, its name is no longer free there.
        try Disk.write("theirs\n", to: harness.file("made/d.txt"))
        await store.sync()
        #expect(await store.knownDirectories == ["made"])
        #expect(await store.namesInTheWay["made"] == ["d.txt"])
        try await set("made/d.txt", "mine\n", in: store, look: look)
        #expect(look.count == 2, "looked at the disk again")
        try await set("made/e.txt", "e\n", in: store, look: look)
        #expect(look.count == 2, "another name there: no look")
        try await store.save("made/d.txt", wait: true)
        #expect(try String(contentsOfFile: harness.file("made/d.txt"), encoding: .utf8) == "mine\n")
        #expect(
            try Disk.names(in: harness.file("made")) == ["a.txt", "d.txt"],
            "the other program's file was opened and replaced, no conflict copy")
        await store.stopWatching()
    }

    @Test(
        "A document closed in a known directory keeps its file there: its name is no longer free, and the next set of that path opens the file",
        .timeLimit(.minutes(1)))
    func documentClosed() async throws {
        let (harness, store, look) = try await watchedStore()

        try await set("kept/a.txt", "saved\n", in: store, look: look)
        try await store.save("kept/a.txt", wait: true)
        await store.sync()
        #expect(await store.knownDirectories == ["kept"])
        try await store.close("kept/a.txt")
        #expect(await store.knownDirectories == ["kept"])
        #expect(await store.namesInTheWay["kept"] == ["a.txt"], "a document let go: its file stays")

        let before = look.count
        try await set("kept/a.txt", "again\n", in: store, look: look)
        #expect(look.count == before + 1, "looked at the disk")
        try await set("kept/b.txt", "b\n", in: store, look: look)
        #expect(look.count == before + 1, "another name: no look")
        try await store.save("kept/a.txt", wait: true)
        try await store.save("kept/b.txt", wait: true)
        #expect(try Disk.names(in: harness.file("kept")) == ["a.txt", "b.txt"], "no conflict copy")
        #expect(try String(contentsOfFile: harness.file("kept/a.txt"), encoding: .utf8) == "again\n")
        await store.stopWatching()
    }

    @Test(
        "A directory made by another program where the store found none is known with what else is in it",
        .timeLimit(.minutes(1)))
    func madeByAnotherProgram() async throws {
        let (harness, store, look) = try await watchedStore()

        try await set("theirs/a.txt", "a\n", in: store, look: look)
        try FileManager.default.createDirectory(
            atPath: harness.file("theirs/sub"), withIntermediateDirectories: true)
        await store.sync()
        #expect(await store.knownDirectories == ["theirs"])
        #expect(await store.namesInTheWay["theirs"] == ["sub"], "a directory in it is not the store's")
        let before = look.count
        try await set("theirs/b.txt", "b\n", in: store, look: look)
        #expect(look.count == before, "a free name: no look")
        await #expect(throws: StoreError.self, "the directory's name is looked at, and refused") {
            try await set("theirs/sub", "x\n", in: store, look: look)
        }
        #expect(look.count == before + 1)
        await store.stopWatching()
    }

    @Test(
        "A directory that is there is listed at its first new document's look: the next new documents there need no look, except at the names in it that are not the store's",
        .timeLimit(.minutes(1)))
    func listedAtFirstLook() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        let store = harness.store
        try FileManager.default.createDirectory(atPath: harness.file("notes/sub"), withIntermediateDirectories: true)
        try Disk.write("a\n", to: harness.file("notes/a.txt"))
        try Disk.write("swap", to: harness.file("notes/.a.txt.swp"))
        try FileManager.default.createSymbolicLink(
            atPath: harness.file("notes/link"), withDestinationPath: "/etc/passwd")
        try Disk.write("r\n", to: harness.file("r.txt"))
        await store.openAll()
        try await store.startWatching()
        let look = CountedLook(root: harness.root)

        try await set("notes/n1.txt", "1\n", in: store, look: look)
        #expect(look.count == 1, "the first new document looks")
        #expect(await store.knownDirectories == ["notes"], "and the directory is listed")
        #expect(await store.namesInTheWay["notes"] == [".a.txt.swp", "link", "sub"])
        try await set("notes/n2.txt", "2\n", in: store, look: look)
        #expect(look.count == 1, "known: no look")
        await #expect(throws: CountedLook.LinkRefused.self, "a link is looked at, and refused") {
            try await set("notes/link", "x\n", in: store, look: look)
        }
        #expect(look.count == 2)
        do {
            try await set("notes/.a.txt.swp", "x\n", in: store, look: look)
            Issue.record("an ignored name was not refused")
        } catch {
            #expect("\(error)".contains("it is ignored: it matches '.*.swp'"), "\(error)")
        }

        // The root, likewise.
        try await set("r2.txt", "r2\n", in: store, look: look)
        try await set("r3.txt", "r3\n", in: store, look: look)
        #expect(look.count == 4, "one look in the root, then none")
        #expect(await store.knownDirectories == ["", "notes"])
        #expect(await store.namesInTheWay[""] == ["notes"], "the directory's name in the root is not free")

        // Another program's file in the known directory: reported, its name taken (and the
        // file opened: OpenNewFiles=yes).
        try Disk.write("theirs\n", to: harness.file("notes/t.txt"))
        await store.sync()
        #expect(await store.namesInTheWay["notes"] == [".a.txt.swp", "link", "sub", "t.txt"])
        _ = try await store.apply(.append("mine\n"), named: "notes/t.txt", create: true, unopened: look)
        #expect(look.count == 4, "open already")
        try await store.save("notes/t.txt", wait: true)
        #expect(try String(contentsOfFile: harness.file("notes/t.txt"), encoding: .utf8) == "theirs\nmine\n")

        // Made beneath a known directory: the name on its way is taken in each known
        // directory above it.
        try FileManager.default.createDirectory(
            atPath: harness.file("notes/fresh/deep"), withIntermediateDirectories: true)
        try Disk.write("x\n", to: harness.file("notes/fresh/deep/x.txt"))
        await store.sync()
        #expect(await store.namesInTheWay[""] == ["notes"])
        let afterFresh = await store.namesInTheWay["notes"]
        #expect(afterFresh == [".a.txt.swp", "fresh", "link", "sub", "t.txt"], "\(String(describing: afterFresh))")

        // Something leaving ends it: the next new document looks, and the directory is listed again.
        try FileManager.default.removeItem(atPath: harness.file("notes/sub"))
        await store.sync()
        #expect(await store.knownDirectories.isEmpty, "the directory and those above it")
        #expect(await store.namesInTheWay.isEmpty)
        try await set("notes/n3.txt", "3\n", in: store, look: look)
        #expect(look.count == 5)
        #expect(await store.knownDirectories == ["notes"])
        #expect(await store.namesInTheWay["notes"] == [".a.txt.swp", "fresh", "link"], "t.txt is a document now")
        // A rename there ends it too.
        try FileManager.default.moveItem(atPath: harness.file("notes/.a.txt.swp"), toPath: harness.file("notes/swap"))
        await store.sync()
        #expect(await store.knownDirectories.isEmpty)
        try await set("notes/n4.txt", "4\n", in: store, look: look)
        #expect(look.count == 6)
        let afterRename = await store.namesInTheWay["notes"]
        #expect(afterRename == ["fresh", "link"], "swap is a document now: \(String(describing: afterRename))")
        try await store.saveAll(wait: true)
        #expect(
            try Disk.names(in: harness.file("notes")) == [
                "a.txt", "fresh", "link", "n1.txt", "n2.txt", "n3.txt", "n4.txt", "swap", "t.txt",
            ],
            "no conflict copy")
        await store.stopWatching()
    }

    @Test(
        "A directory with more names not the store's than a known directory may hold is not known, and is listed again only after as many looks as it had names",
        .timeLimit(.minutes(1)))
    func crowded() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        let store = harness.store
        try FileManager.default.createDirectory(atPath: harness.file("crowded"), withIntermediateDirectories: true)
        let names = DocumentStore.namesInTheWayLimit + 1
        for index in 0..<names {
            try FileManager.default.createSymbolicLink(
                atPath: harness.file("crowded/link\(index)"), withDestinationPath: "nowhere")
        }
        await store.openAll()
        try await store.startWatching()
        let look = CountedLook(root: harness.root)
        for index in 0..<10 { try await set("crowded/n\(index).txt", "\(index)\n", in: store, look: look) }
        #expect(look.count == 10, "every new document looks")
        #expect(await store.knownDirectories.isEmpty)
        let looks = await store.directoryLooks["crowded"]
        #expect(
            looks?.since == 9 && looks?.before == names, "listed once, at the first look: \(String(describing: looks))")
        await store.stopWatching()
    }

    // Two directories whose names differ only in Unicode normalization are two
    // directories on Linux (their bytes differ), though Swift's `String` takes them for one.
    static let composed = "d\u{E9}"
    static let decomposed = "de\u{301}"

    /// A store watching its root, edits held an hour, new files opened only when named,
    /// with `setUp` done on disk before it watches (nothing of it reported).
    func storeInTwoNormalizations(_ setUp: (StoreHarness) throws -> Void) async throws -> (
        StoreHarness, DocumentStore, CountedLook
    ) {
        let harness = await StoreHarness(
            quiet: .seconds(3600), maxDelay: .seconds(3600), configure: { $0.openNewFiles = false })
        try setUp(harness)
        #expect(Self.composed == Self.decomposed && !Self.composed.utf8.elementsEqual(Self.decomposed.utf8))
        try await harness.store.startWatching()
        return (harness, harness.store, CountedLook(root: harness.root))
    }

    @Test(
        "A known directory is not another directory whose name differs only in Unicode normalization: another program's file there is looked at, opened and edited, not taken for nothing",
        .timeLimit(.minutes(1)))
    func knownInAnotherNormalization() async throws {
        let (harness, store, look) = try await storeInTwoNormalizations { harness in
            for directory in [Self.composed, Self.decomposed] {
                try FileManager.default.createDirectory(
                    atPath: harness.file(directory), withIntermediateDirectories: true)
            }
            try Disk.write("theirs\n", to: harness.file(Self.decomposed + "/a.txt"))
        }
        #expect(try Disk.names(in: harness.root).count == 2, "two directories")
        try await set(Self.composed + "/n.txt", "n\n", in: store, look: look)
        #expect(look.count == 1)
        #expect(await store.knownDirectories == [PathKey(Self.composed)], "listed at the first look")

        _ = try await store.apply(.append("mine\n"), named: Self.decomposed + "/a.txt", create: true, unopened: look)
        #expect(look.count == 2, "the other directory is not known: looked at the disk")
        #expect(try await store.read(Self.decomposed + "/a.txt") == .text("theirs\nmine\n"), "the file was opened")
        try await store.save(Self.decomposed + "/a.txt", wait: true)
        #expect(
            try String(contentsOfFile: harness.file(Self.decomposed + "/a.txt"), encoding: .utf8) == "theirs\nmine\n")
        #expect(try Disk.names(in: harness.file(Self.decomposed)) == ["a.txt"], "no conflict copy")
        await store.stopWatching()
    }

    @Test(
        "A directory remembered as missing is not another directory whose name differs only in Unicode normalization: another program's file there is looked at, opened and edited, not taken for nothing",
        .timeLimit(.minutes(1)))
    func missingInAnotherNormalization() async throws {
        let (harness, store, look) = try await storeInTwoNormalizations { harness in
            try FileManager.default.createDirectory(
                atPath: harness.file(Self.decomposed), withIntermediateDirectories: true)
            try Disk.write("theirs\n", to: harness.file(Self.decomposed + "/a.txt"))
        }
        try await set(Self.composed + "/n.txt", "n\n", in: store, look: look)
        #expect(look.count == 1, "the composed directory is not there: remembered missing")

        _ = try await store.apply(.append("mine\n"), named: Self.decomposed + "/a.txt", create: true, unopened: look)
        #expect(look.count == 2, "the decomposed directory is not the missing one: looked at the disk")
        #expect(try await store.read(Self.decomposed + "/a.txt") == .text("theirs\nmine\n"), "the file was opened")
        try await store.save(Self.decomposed + "/a.txt", wait: true)
        #expect(
            try String(contentsOfFile: harness.file(Self.decomposed + "/a.txt"), encoding: .utf8) == "theirs\nmine\n")
        #expect(try Disk.names(in: harness.file(Self.decomposed)) == ["a.txt"], "no conflict copy")
        await store.stopWatching()
    }

    @Test(
        "The directory of open documents is not another directory whose name differs only in Unicode normalization: a new document below a file of that name is refused, and a new document of that name is made",
        .timeLimit(.minutes(1)))
    func documentsDirectoryInAnotherNormalization() async throws {
        let (harness, store, look) = try await storeInTwoNormalizations { harness in
            try Disk.write("theirs\n", to: harness.file(Self.composed))
        }
        try await set(Self.decomposed + "/a.txt", "a\n", in: store, look: look)

        // Another program's file where the new document needs a directory: its saves
        // could never be written.
        do {
            try await set(Self.composed + "/x.txt", "x\n", in: store, look: look)
            Issue.record("a document below a file was taken")
            await #expect(throws: (any Error).self, "its save fails") {
                try await store.save(Self.composed + "/x.txt", wait: true)
            }
        } catch {
            #expect("\(error)".contains("'\(Self.composed)' is not a directory"), "\(error)")
        }

        // A document named as the directory of open documents in another normalization.
        try await set("more/" + Self.decomposed + "/a.txt", "a\n", in: store, look: look)
        try await store.create("more/" + Self.composed)
        try await store.saveAll(wait: true)
        #expect(try Disk.names(in: harness.file("more")).count == 2, "a file and a directory")
        #expect(try Disk.status(harness.file("more/" + Self.composed)).kind == .regular)
        await store.stopWatching()
    }
}
