import Documents
import Foundation
import Posix
import Synchronization
import TestSupport
import Testing

@testable import Autosave

/// A directory the store made for its new documents is known whole while inotify watches
/// it: a new document there needs no look at the disk (DocumentStore+MissingDirectories.swift).
/// Anything else appearing there, or a document of it let go, ends that.
@Suite("New documents in a directory known whole", .serialized)
struct KnownDirectoryTests {
    /// The look the control socket takes at a path before a new document is made there,
    /// taken the same way (nothing at the path, or something), and counted.
    final class CountedLook: UnopenedPathCheck, Sendable {
        let root: String
        let looks = Atomic(0)
        init(root: String) { self.root = root }

        func checkUnopened(valid: String) throws -> Bool {
            looks.add(1, ordering: .relaxed)
            return (try? Disk.status(root + "/" + valid)) != nil
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
        "Made by the store's save, a directory is known whole: its next new documents need no look; another program's file there ends it, and that file is opened, not replaced",
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

        // Another program's file: reported, the directory is no longer known whole.
        try Disk.write("theirs\n", to: harness.file("made/d.txt"))
        await store.sync()
        #expect(await store.knownDirectories.isEmpty)
        try await set("made/d.txt", "mine\n", in: store, look: look)
        #expect(look.count == 2, "looked at the disk again")
        try await store.save("made/d.txt", wait: true)
        #expect(try String(contentsOfFile: harness.file("made/d.txt"), encoding: .utf8) == "mine\n")
        #expect(
            try Disk.names(in: harness.file("made")) == ["a.txt", "d.txt"],
            "the other program's file was opened and replaced, no conflict copy")
        await store.stopWatching()
    }

    @Test(
        "A document closed in a directory known whole keeps its file there: the directory is no longer known whole, and the next set of that path opens the file",
        .timeLimit(.minutes(1)))
    func documentClosed() async throws {
        let (harness, store, look) = try await watchedStore()

        try await set("kept/a.txt", "saved\n", in: store, look: look)
        try await store.save("kept/a.txt", wait: true)
        await store.sync()
        #expect(await store.knownDirectories == ["kept"])
        try await store.close("kept/a.txt")
        #expect(await store.knownDirectories.isEmpty, "a document let go: its file stays")

        let before = look.count
        try await set("kept/a.txt", "again\n", in: store, look: look)
        #expect(look.count == before + 1, "looked at the disk")
        try await store.save("kept/a.txt", wait: true)
        #expect(try Disk.names(in: harness.file("kept")) == ["a.txt"], "no conflict copy")
        await store.stopWatching()
    }

    @Test(
        "A directory made by another program where the store found none is not known whole when something else is in it",
        .timeLimit(.minutes(1)))
    func madeByAnotherProgram() async throws {
        let (harness, store, look) = try await watchedStore()

        try await set("theirs/a.txt", "a\n", in: store, look: look)
        try FileManager.default.createDirectory(
            atPath: harness.file("theirs/sub"), withIntermediateDirectories: true)
        await store.sync()
        #expect(await store.knownDirectories.isEmpty, "a directory in it is not the store's")
        let before = look.count
        try await set("theirs/b.txt", "b\n", in: store, look: look)
        #expect(look.count == before + 1, "looked at the disk")
        await store.stopWatching()
    }
}
