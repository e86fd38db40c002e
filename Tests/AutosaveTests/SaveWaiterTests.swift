import Documents
import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

extension DocumentStore {
    /// How many callers of `save(_:wait:)` wait for the document's edits (internal state,
    /// read so a test knows its caller is waiting before it acts).
    func waitingSaves(_ path: String) -> Int { entries[path]?.waiters.count ?? 0 }
    /// Room the document's list of waiting callers holds.
    func waitersRoom(_ path: String) -> Int { entries[path]?.waiters.capacity ?? 0 }
    /// Whether the document is due for a save and waits for a save slot: its deadline
    /// has passed, and the scheduler has looked and found every slot taken.
    func isQueuedForSave(_ path: String) -> Bool {
        guard let entry = entries[path], entry.isDirty, entry.savingToken == nil, let deadline = entry.deadline,
            entry.queuedAt != nil
        else { return false }
        return deadline <= .now && sleepTarget == Self.allSlotsTaken
    }
}

/// A caller of `save(wait: true)` (`autosavectl save --wait`, `close`) waits for a save of
/// the edits made before it. When those edits go another way before their save — revert,
/// another program's version taking the file, the file removed and the document closed —
/// the caller is told so, with `conflict`, instead of waiting forever.
@Suite("Callers waiting for a save", .serialized, .timeLimit(.minutes(1)))
struct SaveWaiterTests {
    /// A store with one save slot, held by a gated document's save, and `t.txt` on disk
    /// and open with an unsaved edit whose `save(wait: true)` is queued behind it.
    struct Setup {
        let harness: StoreHarness
        let gate: Gate
        let waiter: Task<Void, any Error>
    }

    func setUp(configure: @escaping (inout Configuration) -> Void = { _ in }) async throws -> Setup {
        let slot = try await HeldSaveSlot(quiet: .seconds(3600), configure: configure)
        let (harness, gate, store) = (slot.harness, slot.gate, slot.harness.store)
        try Disk.write("on disk\n", to: harness.file("t.txt"))
        try await store.open("t.txt")
        try await store.apply(.setText("unsaved\n"), to: "t.txt")
        // Watching starts once the files are written and open: a watcher that saw them
        // being written could open one half-written and then rightly call the rest of
        // the write a change by another program.
        try await store.startWatching()
        let waiter = Task { try await store.save("t.txt", wait: true) }
        while await store.waitingSaves("t.txt") == 0 {
            try Task.checkCancellation()  // the time limit ends the test instead of a hang
            await Task.yield()
        }
        return Setup(harness: harness, gate: gate, waiter: waiter)
    }

    /// The waiter's error (`nil` if its save succeeded). A waiter that has not answered
    /// within 30 s is recorded as an issue, so a missing answer fails the test instead of
    /// hanging the run.
    func outcome(_ setup: Setup) async -> StoreError? {
        enum Answer: Sendable {
            case saved
            case failed(StoreError?)
            case none
        }
        let (answers, answer) = AsyncStream<Answer>.makeStream()
        let waiter = setup.waiter
        Task {
            do {
                try await waiter.value
                answer.yield(.saved)
            } catch {
                answer.yield(.failed(error as? StoreError))
            }
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(30))
            answer.yield(.none)
        }
        defer { timeout.cancel() }
        for await first in answers {
            switch first {
            case .saved: return nil
            case .failed(let error): return error
            case .none:
                Issue.record("the caller waiting for the save got no answer in 30 s")
                return nil
            }
        }
        return nil
    }

    @Test(
        "Waiting callers, once told, leave no memory behind in their document: a document that ever had one holds no more than one that never had"
    )
    func waitersLeaveNothing() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        let store = harness.store
        for n in 0..<3 {
            try await store.apply(.setText("edit \(n)\n"), to: "w.txt", create: true)
            try await store.save("w.txt", wait: true)
            #expect(await store.waitingSaves("w.txt") == 0)
            #expect(await store.waitersRoom("w.txt") == 0, "the emptied list's buffer is let go")
        }
        #expect(try harness.text(onDisk: "w.txt") == "edit 2\n")
    }

    @Test("revert: the waiting save answers conflict, the edits were discarded")
    func revert() async throws {
        let setup = try await setUp()
        let store = setup.harness.store
        let info = try await store.revert("t.txt")
        #expect(info.state == .clean)
        let error = await outcome(setup)
        #expect(error?.code == "conflict")
        #expect(error?.description == "t.txt: the edits were discarded by revert before they were saved")
        #expect(await store.waitingSaves("t.txt") == 0)
        setup.gate.open(waiting: 1)
        #expect(try setup.harness.text(onDisk: "t.txt") == "on disk\n")
    }

    @Test("revert of a document that was never saved is refused with not-found, and its edits stay")
    func revertWithoutFile() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600), maxDelay: .seconds(3600))
        let store = harness.store
        try await store.apply(.setText("only in memory"), to: "new.txt", create: true)
        await #expect {
            try await store.revert("new.txt")
        } throws: { error in
            (error as? StoreError)?.code == "not-found"
                && "\(error)"
                    == "new.txt: no file on disk to revert to (the document has not been saved yet, or another program removed its file)"
        }
        #expect(try await store.read("new.txt") == .text("only in memory"))
        #expect(try await store.info("new.txt").savedChangeCount == 0, "still unsaved, still open")
    }

    @Test("Another program's version takes the file (Keep=disk): the waiting save answers conflict naming the copy")
    func conflictCopy() async throws {
        let setup = try await setUp()
        let store = setup.harness.store
        try Disk.write("theirs\n", to: setup.harness.file("t.txt.new"))
        try FileDescriptor.currentWorkingDirectory.rename(
            setup.harness.file("t.txt.new"), to: setup.harness.file("t.txt"))
        await store.sync()
        let error = await outcome(setup)
        #expect(error?.code == "conflict")
        let message = error?.description ?? ""
        #expect(message.hasPrefix("t.txt: another program changed the file; the edits were saved as t (conflict "))
        let copy = try #require(try Disk.names(in: setup.harness.root).first { $0.hasPrefix("t (conflict ") })
        #expect(message.contains(copy))
        #expect(try setup.harness.text(onDisk: copy) == "unsaved\n", "the edits are in the copy the message names")
        #expect(try setup.harness.text(onDisk: "t.txt") == "theirs\n")
        setup.gate.open(waiting: 1)
    }

    @Test("The file removed with WhenRemoved=close: the waiting save answers conflict, the document is closed")
    func removedAndClosed() async throws {
        let setup = try await setUp { $0.whenRemoved = .close }
        let store = setup.harness.store
        try FileDescriptor.currentWorkingDirectory.unlink(setup.harness.file("t.txt"))
        await store.sync()
        let error = await outcome(setup)
        #expect(error?.code == "conflict")
        #expect(error?.description.contains("another program removed the file") == true)
        #expect(await store.isOpen("t.txt") == false)
        setup.gate.open(waiting: 1)
    }

    @Test("Renamed by another program while its save waits for a slot: saved under the new name, the waiter answered")
    func renamedWhileQueued() async throws {
        let setup = try await setUp()
        let store = setup.harness.store
        while await !store.isQueuedForSave("t.txt") {
            try Task.checkCancellation()
            await Task.yield()
        }
        try FileDescriptor.currentWorkingDirectory.rename(setup.harness.file("t.txt"), to: setup.harness.file("u.txt"))
        await store.sync()
        #expect(await store.isOpen("u.txt"))
        #expect(await store.isOpen("t.txt") == false)
        setup.gate.open(waiting: 1)
        #expect(await outcome(setup) == nil, "saved")
        #expect(try setup.harness.text(onDisk: "u.txt") == "unsaved\n")
        #expect(try await store.info("u.txt").state == .clean)
    }
}
