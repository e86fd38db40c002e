import Autosave
import Documents
import Foundation
import Logging
import Posix
import TestSupport
import Testing

/// A document whose serialisation waits at a gate the test opens, and says when it got there.
struct GatedDocument: AutosaveDocument {
    static let type = UTType.declare(
        "org.autosaved.test.gated", conformingTo: [.plainText], filenameExtensions: ["gated"])
    static var readableContentTypes: [UTType] { [type] }

    var text: String
    let gate: Gate?

    init(configuration: ReadConfiguration) throws {
        text = String(decoding: configuration.file.regularFileContents ?? Data(), as: UTF8.self)
        gate = Gate.current
    }

    func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        gate?.pass()
        return FileWrapper(regularFileWithContents: Data(text.utf8))
    }

    mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        guard case .setText(let new) = edit else { throw DocumentContentError(.unsupported, "set only") }
        text = new
    }
}

/// Blocks savers until opened; counts who arrived.
final class Gate: Sendable {
    /// The gate new gated documents get (set by the test that creates them).
    nonisolated(unsafe) static var current: Gate?

    private let state = Lock((arrived: 0, open: false))
    private let semaphore = DispatchSemaphore(value: 0)
    private let arrivals: AsyncStream<Int>.Continuation
    let arrived: AsyncStream<Int>

    init() {
        (arrived, arrivals) = AsyncStream<Int>.makeStream()
    }

    func pass() {
        let (count, open) = state.withLock {
            $0.arrived += 1
            return ($0.arrived, $0.open)
        }
        arrivals.yield(count)
        if !open { semaphore.wait() }
    }

    var arrivedCount: Int { state.withLock { $0.arrived } }

    /// Lets one waiting saver through.
    func release() { semaphore.signal() }

    /// Lets every saver through from now on.
    func open(waiting: Int) {
        state.withLock { $0.open = true }
        for _ in 0..<waiting { semaphore.signal() }
    }
}

/// A store with one save slot, held by the save of a gated document (`slot.gated`) until
/// the gate opens: whatever else comes due waits for the slot.
struct HeldSaveSlot {
    let harness: StoreHarness
    let gate: Gate

    init(
        quiet: Duration, maxDelay: Duration = .seconds(3600),
        configure: @escaping (inout Configuration) -> Void = { _ in }
    ) async throws {
        var registry = DocumentTypeRegistry()
        registry.register(GatedDocument.self, contentType: GatedDocument.type, filenameExtensions: ["gated"])
        gate = Gate()
        Gate.current = gate
        defer { Gate.current = nil }
        harness = await StoreHarness(
            quiet: quiet, maxDelay: maxDelay, concurrentSaves: 1, registry: registry, configure: configure)
        let store = harness.store
        try Disk.write("", to: harness.file("slot.gated"))
        try await store.open("slot.gated")
        try await store.apply(.setText("holds the slot"), to: "slot.gated")
        try await store.save("slot.gated", wait: false)
        var arrivals = gate.arrived.makeAsyncIterator()
        _ = await arrivals.next()
    }
}

@Suite("The autosave scheduler", .serialized)
struct SchedulerTests {
    @Test("A burst of 1,000 edits inside the quiet period produces exactly one save, with all of them")
    func burst() async throws {
        let harness = await StoreHarness(quiet: .seconds(1))
        for i in 0..<1000 {
            try await harness.store.apply(.append("line \(i)\n"), to: "burst.txt", create: true)
        }
        await harness.nextSave(of: "burst.txt")
        let info = try await harness.store.info("burst.txt")
        #expect(info.state == .clean, "the one save held every edit")
        #expect(info.saves == 1)
        #expect(await harness.saves(of: "burst.txt") == 1)
        let lines = try harness.text(onDisk: "burst.txt").split(separator: "\n")
        #expect(lines.count == 1000)
        #expect(lines.last == "line 999")
    }

    @Test("Edits every 100 ms for 10 s with MaxDelay=3s are saved periodically, not once at the end")
    func maxDelay() async throws {
        let harness = await StoreHarness(quiet: .seconds(2), maxDelay: .seconds(3))
        let start = ContinuousClock.now
        var edits = 0
        while ContinuousClock.now - start < .seconds(10) {
            edits += 1
            try await harness.store.apply(.setText("edit \(edits)\n"), to: "steady.txt", create: true)
            try await Task.sleep(for: .milliseconds(100))
        }
        let savesDuringEdits = await harness.saves(of: "steady.txt")
        #expect((2...5).contains(savesDuringEdits), "\(savesDuringEdits) saves while editing for 10 s")
        // The last edits are saved once the quiet period passes.
        while try await harness.store.info("steady.txt").state != .clean { await harness.nextSave(of: "steady.txt") }
        #expect(try harness.text(onDisk: "steady.txt") == "edit \(edits)\n")
    }

    @Test("An edit made while a save is in flight does not wait, stays dirty, and is on disk after the next save")
    func editDuringSave() async throws {
        var registry = DocumentTypeRegistry()
        registry.register(GatedDocument.self, contentType: GatedDocument.type, filenameExtensions: ["gated"])
        let gate = Gate()
        Gate.current = gate
        defer { Gate.current = nil }
        let harness = await StoreHarness(quiet: .milliseconds(50), registry: registry)
        try Disk.write("v0", to: harness.file("doc.gated"))
        try await harness.store.open("doc.gated")

        try await harness.store.apply(.setText("v1"), to: "doc.gated")
        var arrivals = gate.arrived.makeAsyncIterator()
        _ = await arrivals.next()
        #expect(try await harness.store.info("doc.gated").state == .saving)

        let info = try await harness.store.apply(.setText("v2"), to: "doc.gated")
        #expect(info.changeCount == 2)
        #expect(info.savedChangeCount == 0)
        #expect(try harness.text(onDisk: "doc.gated") == "v0")

        gate.open(waiting: 1)
        await harness.nextSave(of: "doc.gated")
        #expect(try await harness.store.info("doc.gated").savedChangeCount == 1)
        await harness.nextSave(of: "doc.gated")
        #expect(try harness.text(onDisk: "doc.gated") == "v2")
        #expect(try await harness.store.info("doc.gated").state == .clean)
    }

    @Test("At most MaxConcurrentSaves saves run at once")
    func concurrencyCap() async throws {
        var registry = DocumentTypeRegistry()
        registry.register(GatedDocument.self, contentType: GatedDocument.type, filenameExtensions: ["gated"])
        let gate = Gate()
        Gate.current = gate
        defer { Gate.current = nil }
        let harness = await StoreHarness(quiet: .milliseconds(10), concurrentSaves: 1, registry: registry)
        for name in ["a", "b"] {
            try Disk.write("", to: harness.file("\(name).gated"))
            try await harness.store.open("\(name).gated")
            try await harness.store.apply(.setText(name), to: "\(name).gated")
        }
        var arrivals = gate.arrived.makeAsyncIterator()
        _ = await arrivals.next()
        // Looked at once the other document's save is due too (its quiet period is over):
        // queued for the one slot — or, were the limit broken, started as well.
        let deadline = ContinuousClock.now + .seconds(30)
        while gate.arrivedCount == 1, await !harness.store.isQueuedForSave("a.gated"),
            await !harness.store.isQueuedForSave("b.gated")
        {
            try #require(ContinuousClock.now < deadline, "the second save never became due")
            try await Task.sleep(for: .milliseconds(1))
        }
        let status = await harness.store.status()
        #expect(status.saving == 1)
        #expect(status.unsaved == 2)
        #expect(gate.arrivedCount == 1, "the second save waits for a slot")
        gate.release()
        _ = await arrivals.next()
        gate.open(waiting: 1)
        await harness.next { if case .saved = $0 { true } else { false } }
        await harness.next { if case .saved = $0 { true } else { false } }
        #expect(try harness.text(onDisk: "a.gated") == "a")
        #expect(try harness.text(onDisk: "b.gated") == "b")
    }

    @Test("save(wait:) returns once the edits are on disk")
    func explicitSave() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        try await harness.store.apply(.setText("now\n"), to: "notes/today.txt", create: true)
        #expect(!FileManager.default.fileExists(atPath: harness.file("notes/today.txt")))
        try await harness.store.save("notes/today.txt", wait: true)
        #expect(try harness.text(onDisk: "notes/today.txt") == "now\n")
        #expect(try await harness.store.info("notes/today.txt").state == .clean)

        for i in 0..<20 { try await harness.store.apply(.setText("doc \(i)"), to: "many/\(i).txt", create: true) }
        try await harness.store.saveAll(wait: true)
        for i in 0..<20 { #expect(try harness.text(onDisk: "many/\(i).txt") == "doc \(i)") }
        #expect(await harness.store.status().unsaved == 0)
    }
}

@Suite("Failed saves", .serialized, .enabled(if: Machine.isRoot, "mounting needs root"))
struct SaveFailureTests {
    /// A root holding `doc.txt` ("old"), bind-mounted on itself so the test can make it
    /// read-only and writable again; returned writable, with the directory that holds it.
    func bindMountedRoot(_ label: String) throws -> (outer: TemporaryDirectory, root: String, mount: Mount) {
        let outer = TemporaryDirectory(label)
        let root = outer.sub("root")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        try Disk.write("old\n", to: root + "/doc.txt")
        let mount = try Mount(readOnlyBindOf: root, at: root)
        try mount.makeWritable()
        return (outer, root, mount)
    }
    @Test("A read-only file system: failed with operation and errno, edits kept, saved by itself once writable")
    func readOnlyRecovers() async throws {
        let (outer, root, mount) = try bindMountedRoot("ro-store")
        defer { withExtendedLifetime(outer) {} }
        let harness = await StoreHarness(root: root, quiet: .milliseconds(50), retry: .milliseconds(200))
        try await harness.store.open("doc.txt")
        try mount.makeReadOnly()

        try await harness.store.apply(.setText("new\n"), to: "doc.txt")
        let failure = try #require(await harness.nextFailure(of: "doc.txt"))
        #expect(failure.operation == "create temporary file")
        #expect(failure.errno == .readOnlyFileSystem)
        #expect(failure.path.hasPrefix(root + "/.doc.txt.autosave-"))
        #expect(failure.message.contains("EROFS"))
        guard case .failed(let reported) = try await harness.store.info("doc.txt").state else {
            Issue.record("the document is not reported failed")
            return
        }
        #expect(reported.operation == failure.operation)
        #expect(await harness.store.status().lastFailure?.errno == .readOnlyFileSystem)
        #expect(try await harness.store.read("doc.txt") == .text("new\n"), "the edit is kept in memory")
        #expect(try harness.text(onDisk: "doc.txt") == "old\n", "the file on disk is untouched")

        // Retries back off exponentially while the cause remains.
        let second = try #require(await harness.nextFailure(of: "doc.txt"))
        #expect(second.attempts == 2)
        #expect(
            second.retryAt.timeIntervalSince(second.failedAt) > failure.retryAt.timeIntervalSince(failure.failedAt)
                * 1.5)

        try mount.makeWritable()
        await harness.nextSave(of: "doc.txt")
        #expect(try harness.text(onDisk: "doc.txt") == "new\n")
        #expect(try await harness.store.info("doc.txt").state == .clean)
        #expect(Disk.temporaries(under: root).isEmpty)
    }

    @Test("A full disk, then space freed: the save succeeds with no request from anyone")
    func fullDiskRecovers() async throws {
        let outer = TemporaryDirectory("full-store")
        let root = outer.sub("root")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        let mount = try Mount(tmpfsOfSize: "1m", at: root)
        defer { withExtendedLifetime(mount) {} }
        let harness = await StoreHarness(root: root, quiet: .milliseconds(50), retry: .milliseconds(200))
        try await harness.store.apply(.setText("small\n"), to: "doc.txt", create: true)
        await harness.nextSave(of: "doc.txt")
        try Disk.fill(root)

        let big = String(repeating: "x", count: 256 * 1024)
        try await harness.store.apply(.setText(big), to: "doc.txt")
        let failure = try #require(await harness.nextFailure(of: "doc.txt"))
        #expect(failure.errno == .noSpace)
        #expect(failure.operation == "write")
        #expect(try harness.text(onDisk: "doc.txt") == "small\n")

        try FileManager.default.removeItem(atPath: root + "/filler")
        await harness.nextSave(of: "doc.txt")
        #expect(try harness.text(onDisk: "doc.txt") == big)
    }

    @Test("RefuseEditsWhenSaveFails=yes refuses edits while saves fail, and accepts them again after")
    func refuseEdits() async throws {
        let (outer, root, mount) = try bindMountedRoot("refuse-store")
        defer { withExtendedLifetime(outer) {} }
        let harness = await StoreHarness(
            root: root, quiet: .milliseconds(50), retry: .milliseconds(200), refuseEditsWhenSaveFails: true)
        try await harness.store.open("doc.txt")
        try mount.makeReadOnly()
        try await harness.store.apply(.setText("new\n"), to: "doc.txt")
        _ = await harness.nextFailure(of: "doc.txt")
        await #expect {
            try await harness.store.apply(.setText("newer\n"), to: "doc.txt")
        } throws: { error in
            guard case .refusedWhileSaveFails(let failure) = error as? StoreError else { return false }
            return failure.errno == .readOnlyFileSystem && (error as? StoreError)?.code == "save-failed"
        }
        try mount.makeWritable()
        await harness.nextSave(of: "doc.txt")
        try await harness.store.apply(.setText("newer\n"), to: "doc.txt")
        try await harness.store.save("doc.txt", wait: true)
        #expect(try harness.text(onDisk: "doc.txt") == "newer\n")
    }
}
