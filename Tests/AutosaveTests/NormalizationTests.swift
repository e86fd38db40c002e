import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// Two documents whose names differ only in Unicode normalization (`caf\u{E9}.txt` and
/// `cafe\u{301}.txt`) are two files on Linux, and both can be open (another program made
/// both). Swift's `String` takes them for one name; what the store and the watcher keep
/// by path is keyed by the names' bytes (``PathKey``), and each test here fails where
/// that was a `String`.
@Suite("Names in two Unicode normalizations", .serialized)
struct NormalizationTests {
    static let composed = "caf\u{E9}.txt"
    static let decomposed = "cafe\u{301}.txt"
    let base = WatcherTests()

    /// Both documents open, each with an unsaved edit.
    func bothOpen(_ harness: StoreHarness) async throws {
        #expect(Self.composed == Self.decomposed && !Self.composed.utf8.elementsEqual(Self.decomposed.utf8))
        try await base.openEdited(harness, Self.composed, onDisk: "composed\n", .setText("composed 2\n"))
        try await base.openEdited(harness, Self.decomposed, onDisk: "decomposed\n", .setText("decomposed 2\n"))
        #expect(try Disk.names(in: harness.root).count == 2)
    }

    @Test(
        "Another program writes a document's file during its save, and the document named alike in the other normalization finishes its own save meanwhile: the write is still looked at once the first save is done",
        .timeLimit(.minutes(1)))
    func changeDuringSaveInAnotherNormalization() async throws {
        let harness = try await base.harness()
        let store = harness.store
        try await bothOpen(harness)
        let theirs = harness.file(Self.decomposed)
        await store.afterFirstRename(of: theirs) {
            // A file of their own put in its place (another inode): the store's save is in place already.
            let outside = harness.root + "-theirs"
            try Disk.write("theirs\n", to: outside)
            guard rename(outside, theirs) == 0 else { throw Errno(rawValue: errno) }
            await store.cookieBarrier()
            try await store.save(Self.composed, wait: true)
        }
        try await store.save(Self.decomposed, wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        #expect(try await store.read(Self.decomposed) == .text("theirs\n"), "read again from the disk")
        #expect(try await store.read(Self.composed) == .text("composed 2\n"))
        #expect(try harness.text(onDisk: Self.composed) == "composed 2\n")
    }

    @Test(
        "Another program renames a document's file during its save, and the document named alike in the other normalization finishes its own save meanwhile: the renamed document follows its file, with the edit made during the save",
        .timeLimit(.minutes(1)))
    func renameDuringSaveInAnotherNormalization() async throws {
        let harness = try await base.harness { $0.whenRemoved = .close }
        let store = harness.store
        try await bothOpen(harness)
        await store.afterFirstRename(of: harness.file(Self.decomposed)) {
            try await store.apply(.append("more\n"), to: Self.decomposed)
            guard rename(harness.file(Self.decomposed), harness.file("moved.txt")) == 0 else {
                throw Errno(rawValue: errno)
            }
            await store.cookieBarrier()
            try await store.save(Self.composed, wait: true)
        }
        try await store.save(Self.decomposed, wait: true)
        await store.setAfterRename(nil)
        await store.sync()
        #expect(try await store.read("moved.txt") == .text("decomposed 2\nmore\n"), "followed its file")
        await #expect(throws: StoreError.self, "no document left at the old name") {
            try await store.info(Self.decomposed)
        }
        try await store.saveAll(wait: true)
        #expect(try harness.text(onDisk: "moved.txt") == "decomposed 2\nmore\n")
        #expect(try harness.text(onDisk: Self.composed) == "composed 2\n")
        #expect(!FileManager.default.fileExists(atPath: harness.file(Self.decomposed)), "not written again")
        #expect(try Disk.names(in: harness.root).count == 2)
    }

    @Test(
        "A save asked for with wait while the document named alike in the other normalization has a conflict waiting for another program's writes to settle: saved at once, not held back with that conflict and forgotten",
        .timeLimit(.minutes(1)))
    func saveWhileAConflictInAnotherNormalizationSettles() async throws {
        let harness = try await base.harness()
        let store = harness.store
        try await bothOpen(harness)
        // Another program writes the composed document's file again and again for a
        // second: its conflict waits for the writes to settle all that time.
        let theirs = harness.file(Self.composed)
        let writer = Task.detached {
            for index in 0..<50 {
                try? Disk.write("theirs \(index)\n", to: theirs)
                usleep(20_000)
            }
        }
        let settling = ContinuousClock.now + .seconds(5)
        while await store.settlingConflicts[PathKey(Self.composed)]?.lookPending != true,
            ContinuousClock.now < settling
        {
            await store.cookieBarrier()
        }
        #expect(await store.settlingConflicts[PathKey(Self.composed)]?.lookPending == true)
        #expect(await store.settlingConflicts[PathKey(Self.decomposed)] == nil)
        let saved = Task { try await store.save(Self.decomposed, wait: true) }
        let deadline = ContinuousClock.now + .seconds(5)
        while (try? harness.text(onDisk: Self.decomposed)) != "decomposed 2\n", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try harness.text(onDisk: Self.decomposed) == "decomposed 2\n", "saved while the other conflict settled")
        // (Without wait, a save asked for again answers the first if it was held back.)
        try await store.save(Self.decomposed, wait: false)
        try await saved.value
        await writer.value
    }

    @Test(
        "Two directories named alike in two normalizations when the watcher starts: both are watched, and another program's writes in either are read",
        .timeLimit(.minutes(1)))
    func bothDirectoriesWatched() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        let directories = ["d\u{E9}", "de\u{301}"]
        for directory in directories {
            try FileManager.default.createDirectory(atPath: harness.file(directory), withIntermediateDirectories: true)
            try Disk.write("one\n", to: harness.file(directory + "/a.txt"))
        }
        _ = await harness.store.openAll()
        try await harness.store.startWatching()
        for directory in directories { try Disk.write("two\n", to: harness.file(directory + "/a.txt")) }
        await harness.store.sync()
        for directory in directories {
            #expect(try await harness.store.read(directory + "/a.txt") == .text("two\n"), "\(directory.unicodeScalars)")
        }
        await harness.store.stopWatching()
    }

    @Test(
        "A file the rules ignore and an open document named alike in the other normalization: another program removing the document's file closes it (WhenRemoved=close)",
        .timeLimit(.minutes(1)))
    func removalBesideAnIgnoredName() async throws {
        let harness = try await base.harness {
            $0.whenRemoved = .close
            $0.ignore = [Self.composed]
        }
        let store = harness.store
        try Disk.write("ignored\n", to: harness.file(Self.composed))
        try Disk.write("document\n", to: harness.file(Self.decomposed))
        await store.sync()
        #expect(try await store.read(Self.decomposed) == .text("document\n"))
        await #expect(throws: StoreError.self, "ignored") { try await store.info(Self.composed) }
        #expect(unlink(harness.file(Self.decomposed)) == 0)
        await store.sync()
        await #expect(throws: StoreError.self, "closed") { try await store.info(Self.decomposed) }
    }

    @Test(
        "A subscription to one document's events does not send those of the document named alike in the other normalization"
    )
    func subscriptionInAnotherNormalization() {
        let all: Set<String> = ["saved", "closed", "renamed"]
        let saved = StoreEvent.saved(document: Self.decomposed, bytes: 1, duration: .zero)
        #expect(!ControlSession.isWanted(saved, kinds: all, documents: [PathKey(Self.composed)]))
        #expect(ControlSession.isWanted(saved, kinds: all, documents: [PathKey(Self.decomposed)]))
        #expect(
            !ControlSession.isWanted(
                .closed(document: Self.composed), kinds: all, documents: [PathKey(Self.decomposed)]))
    }
}
