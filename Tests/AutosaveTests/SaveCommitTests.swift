import Foundation
import Journal
import Posix
import Synchronization
import TestSupport
import Testing

@testable import Autosave
@testable import Documents

/// The journal's syncs, wrapped: each may be made to take longer (`delay`) or to wait
/// until released (`hold`). Every sync is still the system's own `fdatasync`.
final class HeldJournalSyncs: Sendable {
    private let state = Mutex<(held: Bool, delay: Duration, failing: Int)>((false, .zero, 0))
    private let released = DispatchSemaphore(value: 0)

    var io: JournalIO {
        JournalIO(
            write: JournalIO.system.write,
            dataSync: { [self] fd throws(Errno) in
                let (held, delay) = state.withLock { ($0.held, $0.delay) }
                if held { released.wait() }
                if delay > .zero { Thread.sleep(forTimeInterval: Double(delay.microseconds) / 1e6) }
                let fails = state.withLock { state in
                    defer { state.failing = max(0, state.failing - 1) }
                    return state.failing > 0
                }
                // An injected failure: the disk's error, the file left as it was.
                if fails { throw Errno.ioError }
                try fd.dataSync()
            })
    }

    func delay(_ delay: Duration) { state.withLock { $0.delay = delay } }

    func hold() { state.withLock { $0.held = true } }

    /// The next `count` syncs fail with EIO.
    func fail(next count: Int) { state.withLock { $0.failing = count } }

    /// Lets every held sync go, and every later one.
    func release() {
        state.withLock { $0.held = false }
        // More than the journal's one sync thread and the loop could ever hold.
        for _ in 0..<4 { released.signal() }
    }
}

extension DocumentStore {
    func setJournalIO(_ io: JournalIO) { journalIO = io }
    var openedJournal: Journal? { journal }

    /// Returns once every record journalled so far is durable.
    func journalSynced() async {
        guard let journal else { return }
        let last = journal.flush()
        await withCheckedContinuation { done in journal.whenDurable(last) { _ in done.resume() } }
    }
}

/// On a file system that keeps extended attributes, a save marks its file with its
/// journal record's gist (``SaveMark``) and never waits for the journal before its rename.
/// On one that keeps none (a ramfs here), with `Mode=periodic`, a save's journal record
/// (the file it puts in place) is durable before its rename exactly when the document was
/// edited during the save or the edits it holds are not durable yet (see ``SaveCommit``);
/// with `always`, for every save.
@Suite(
    "A save's journal record and its rename", .serialized,
    .enabled(if: Machine.isRoot, "a root that keeps no extended attributes is a ramfs, and mounting needs root"))
struct SaveCommitTests {
    /// A store on a gated document with a journal synced only when asked (and through
    /// `syncs`); with `unmarked`, its root on a ramfs, which keeps no extended attributes
    /// (the journal beside it, on the harness's own file system).
    static func harness(_ syncs: HeldJournalSyncs, mode: JournalMode = .periodic, unmarked: Bool = true) async throws
        -> (StoreHarness, Gate)
    {
        var registry = DocumentTypeRegistry()
        registry.register(GatedDocument.self, contentType: GatedDocument.type, filenameExtensions: ["gated"])
        let gate = Gate()
        Gate.current = gate
        defer { Gate.current = nil }
        let ramfs = TemporaryDirectory("save-commit-ramfs")
        let root = ramfs.sub("root")
        var mount: Mount?
        if unmarked {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
            mount = try Mount(ramfsAt: root)
        }
        // The journal beside the root, in the harness's directory.
        let harness = await StoreHarness(
            root: unmarked ? root : nil, quiet: .seconds(3600), maxDelay: .seconds(3600), registry: registry
        ) {
            $0.journalMode = mode
            $0.journalSyncInterval = .seconds(3600)
            // Every sync on the journal's own thread, every save on a save thread: the event
            // loop neither syncs when it is about to sleep nor saves a document a client
            // waits for itself. A sync `HeldJournalSyncs` holds on the loop would stop the
            // loop, and with it the save the test waits for, and the test would hang.
            $0.loopWriteLimit = .zero
        }
        // Unmounted before its directory goes.
        harness.held = [mount as Any, ramfs]
        await harness.store.setJournalIO(syncs.io)
        try Disk.write("first\n", to: harness.file("doc.gated"))
        try await harness.store.open("doc.gated")
        try await harness.store.openJournal()
        return (harness, gate)
    }

    /// The journal's figures when `file` is renamed into place, taken on the save's thread: the last
    /// record appended (`written`) and how far it is durable.
    static func atRename(of file: String, _ store: DocumentStore) async -> AsyncStream<
        (written: UInt64, durable: UInt64)
    > {
        let journal = await store.openedJournal!
        let (stream, continuation) = AsyncStream<(written: UInt64, durable: UInt64)>.makeStream()
        await store.setAfterRename { path in
            guard path == file else { return }
            let figures = journal.statistics
            continuation.yield((figures.lastLSN.rawValue, figures.durableThrough.rawValue))
        }
        return stream
    }

    static func expectDurable(
        _ figures: (written: UInt64, durable: UInt64), sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(
            figures.durable >= figures.written,
            "renamed with the journal written through \(figures.written) but durable only through \(figures.durable)",
            sourceLocation: sourceLocation)
    }

    /// A saves the gated document, B is made while the save waits at the gate (its record
    /// not yet appended), `meanwhile` runs, and the gate opens: the journal's figures at
    /// the rename.
    static func renameOfASaveEditedMeanwhile(
        _ syncs: HeldJournalSyncs, unmarked: Bool = true, meanwhile: () -> Void,
        after: (StoreHarness) -> Void = { _ in }
    ) async throws -> (written: UInt64, durable: UInt64) {
        let (harness, gate) = try await Self.harness(syncs, unmarked: unmarked)
        let store = harness.store
        try await store.apply(.setText("A\n"), to: "doc.gated")
        var renames = await Self.atRename(of: harness.file("doc.gated"), store).makeAsyncIterator()
        try await store.save("doc.gated", wait: false)
        var arrivals = gate.arrived.makeAsyncIterator()
        _ = await arrivals.next()
        try await store.apply(.setText("B\n"), to: "doc.gated")
        meanwhile()
        gate.open(waiting: 1)
        let figures = try #require(await renames.next())
        after(harness)
        #expect(await store.closeJournal().failure == nil)
        return figures
    }

    @Test("Mode=periodic: a document edited during its save has the save's record durable before the rename")
    func editedDuringTheSave() async throws {
        let syncs = HeldJournalSyncs()
        let figures = try await Self.renameOfASaveEditedMeanwhile(syncs) {
            // Every sync from here on takes longer than the file's own: a rename that does
            // not wait for the record comes before it is durable.
            syncs.delay(.milliseconds(300))
        }
        Self.expectDurable(figures)
    }

    @Test(
        "Mode=periodic: when the sync of the record of a save edited meanwhile fails, the rename waits for the journal to write it again"
    )
    func recordSyncFails() async throws {
        let syncs = HeldJournalSyncs()
        let figures = try await Self.renameOfASaveEditedMeanwhile(syncs) {
            // The sync the record asks for fails, once the save waits for it; the journal's
            // recovery writes it again (and syncs it, as slowly).
            syncs.delay(.milliseconds(300))
            syncs.fail(next: 1)
        }
        Self.expectDurable(figures)
    }

    @Test(
        "A journal whose syncs keep failing lets a save of edits it holds go ahead, after a second: the save is what makes them durable"
    )
    func journalKeepsFailing() async throws {
        let syncs = HeldJournalSyncs()
        let (harness, gate) = try await Self.harness(syncs)
        gate.open(waiting: 0)
        let store = harness.store
        try await store.apply(.setText("A\n"), to: "doc.gated")
        syncs.fail(next: .max)
        // Not failed as a sync that never answers is (after 10 s).
        try await store.save("doc.gated", wait: true)
        #expect(try harness.text(onDisk: "doc.gated") == "A\n")
        syncs.fail(next: 0)
        _ = await store.closeJournal()
    }

    @Test("Mode=periodic: a save its document is not edited during renames without waiting for the journal's sync")
    func notEditedDuringTheSave() async throws {
        let syncs = HeldJournalSyncs()
        // A failed expectation must not leave a sync held.
        defer { syncs.release() }
        let (harness, gate) = try await Self.harness(syncs)
        gate.open(waiting: 0)
        let store = harness.store
        try await store.apply(.setText("A\n"), to: "doc.gated")
        // As a periodic sync would have (the quiet period is longer than SyncInterval=).
        await store.journalSynced()
        var renames = await Self.atRename(of: harness.file("doc.gated"), store).makeAsyncIterator()
        // No journal sync ends until the save has: a save waiting for one would fail (after 10 s).
        syncs.hold()
        try await store.save("doc.gated", wait: true)
        let figures = try #require(await renames.next())
        #expect(figures.durable < figures.written, "the save's record was synced before the rename")
        #expect(try harness.text(onDisk: "doc.gated") == "A\n")
        syncs.release()
        #expect(await store.closeJournal().failure == nil)
    }

    @Test("Mode=periodic: a save of edits not yet durable has its record, and them, durable before the rename")
    func editsNotYetDurable() async throws {
        let syncs = HeldJournalSyncs()
        let (harness, gate) = try await Self.harness(syncs)
        gate.open(waiting: 0)
        let store = harness.store
        try await store.apply(.setText("A\n"), to: "doc.gated")
        var renames = await Self.atRename(of: harness.file("doc.gated"), store).makeAsyncIterator()
        syncs.delay(.milliseconds(300))
        try await store.save("doc.gated", wait: true)
        let figures = try #require(await renames.next())
        Self.expectDurable(figures)
        #expect(await store.closeJournal().failure == nil)
    }

    @Test("Mode=always: every save's record is durable before its rename")
    func always() async throws {
        let syncs = HeldJournalSyncs()
        let (harness, gate) = try await Self.harness(syncs, mode: .always)
        gate.open(waiting: 0)
        let store = harness.store
        try await store.apply(.setText("A\n"), to: "doc.gated")
        var renames = await Self.atRename(of: harness.file("doc.gated"), store).makeAsyncIterator()
        syncs.delay(.milliseconds(300))
        try await store.save("doc.gated", wait: true)
        let figures = try #require(await renames.next())
        Self.expectDurable(figures)
        #expect(await store.closeJournal().failure == nil)
    }
}

/// On a file system that keeps extended attributes: no save waits for the journal before
/// its rename, in any of the cases where one without them does (``SaveCommitTests``); the
/// file carries its record's gist instead.
// A rename that never comes (a save that waited for a held sync, and failed) is a failure within a minute.
@Suite("A save's mark on its file, and its rename", .serialized, .timeLimit(.minutes(1)))
struct SaveMarkTests {
    /// The mark on the harness's document: the document's last record before the save
    /// (`preceding`, when given), the change count the file holds, its size.
    static func expectMarked(
        _ harness: StoreHarness, preceding: UInt64?, token: UInt64, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let bytes = try? FileDescriptor.currentWorkingDirectory.attribute(
            SaveMark.attributeName, of: harness.file("doc.gated"))
        let mark = (bytes ?? nil).flatMap(SaveMark.init)
        #expect(mark != nil, "the file's mark", sourceLocation: sourceLocation)
        if let preceding { #expect(mark?.lsn == preceding, sourceLocation: sourceLocation) }
        #expect(mark?.token == token, sourceLocation: sourceLocation)
        #expect(
            mark?.file.size == Int64((try? Disk.bytes(harness.file("doc.gated")))?.count ?? -1),
            sourceLocation: sourceLocation)
    }

    @Test("Mode=periodic: a document edited during its save renames without waiting for the journal, its file marked")
    func editedDuringTheSave() async throws {
        let syncs = HeldJournalSyncs()
        // A failed expectation must not leave a sync held.
        defer { syncs.release() }
        var marked = false
        let figures = try await SaveCommitTests.renameOfASaveEditedMeanwhile(
            syncs, unmarked: false,
            meanwhile: {
                // No journal sync ends until the save has renamed.
                syncs.hold()
            },
            after: { harness in
                marked = true
                // A set to "A" (change 1) saved; B (change 2) was journalled before the save's record.
                let written = (try? Disk.bytes(harness.file("doc.gated"))).map { String(decoding: $0, as: UTF8.self) }
                #expect(written == "A\n")
                SaveMarkTests.expectMarked(harness, preceding: nil, token: 1)
                syncs.release()
            })
        #expect(marked)
        #expect(figures.durable < figures.written, "the rename waited for the journal's sync")
    }

    @Test(
        "A save of edits not yet durable (Mode=periodic), and every save (Mode=always): renamed without waiting for the journal, the file naming the save's record",
        arguments: [JournalMode.periodic, .always])
    func editsNotYetDurable(mode: JournalMode) async throws {
        let syncs = HeldJournalSyncs()
        // A failed expectation must not leave a sync held.
        defer { syncs.release() }
        let (harness, gate) = try await SaveCommitTests.harness(syncs, mode: mode, unmarked: false)
        gate.open(waiting: 0)
        let store = harness.store
        // Its record written, not synced.
        try await store.apply(.setText("A\n"), to: "doc.gated")
        var renames = await SaveCommitTests.atRename(of: harness.file("doc.gated"), store).makeAsyncIterator()
        // No journal sync ends until the save has: a save waiting for one would fail (after 10 s).
        syncs.hold()
        try await store.save("doc.gated", wait: true)
        let figures = try #require(await renames.next())
        // (With `always` the set's record was synced before the hold.)
        if mode == .periodic { #expect(figures.durable < figures.written, "the rename waited for the journal's sync") }
        // No record written for the save: the last record is the set's, which the mark names.
        Self.expectMarked(harness, preceding: figures.written, token: 1)
        syncs.release()
        #expect(await store.closeJournal().failure == nil)
    }
}
