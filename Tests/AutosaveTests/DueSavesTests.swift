import Documents
import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

extension DocumentStore {
    /// How many deadlines the scheduler's heap holds, and whether the scheduler waits for a
    /// save slot (its timer disarmed) rather than for a deadline.
    var dueState: (inHeap: Int, waitingForSlot: Bool) { (heap.count, sleepTarget == Self.allSlotsTaken) }
}

/// Documents due for a save beyond the free save slots wait in the scheduler's heap, in
/// deadline order, until a save finishes: the loop's work is per save started, not per
/// document due, and its timer does not fire again and again while every slot is taken.
@Suite("Saves due beyond the free slots", .serialized, .timeLimit(.minutes(1)))
struct DueSavesTests {
    @Test("200 documents due while the one slot is taken wait in the heap, the timer off; each is saved once, in order")
    func dueWaitForSlot() async throws {
        let slot = try await HeldSaveSlot(quiet: .milliseconds(20))
        let (harness, gate, store) = (slot.harness, slot.gate, slot.harness.store)
        let names = (0..<200).map { String(format: "due-%03d.txt", $0) }
        for (i, name) in names.enumerated() {
            try await store.apply(.setText("document \(i)\n"), to: name, create: true)
        }
        // Once the last one's quiet period is over, every one is due.
        while await !store.isQueuedForSave(names.last!) {
            try Task.checkCancellation()  // the time limit ends the test instead of a hang
            try await Task.sleep(for: .milliseconds(1))
        }
        // The scheduler looked at the heap when the first became due (its timer was set for
        // that deadline), found no slot and waits for one.
        let deadline = ContinuousClock.now + .seconds(10)
        while await !store.dueState.waitingForSlot, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(1))
        }
        let (inHeap, waiting) = await store.dueState
        #expect(inHeap >= names.count, "every due document left in the heap, none taken off to wait elsewhere")
        #expect(waiting, "no timer set for a deadline already past while the slot is taken")
        #expect(gate.arrivedCount == 1)

        gate.open(waiting: 1)
        var order: [String] = []
        while order.count < names.count {
            guard
                case .saved(let document, _, _)? = await harness.next(where: { event in
                    if case .saved(let document, _, _) = event { return document.hasPrefix("due-") }
                    return false
                })
            else { break }
            order.append(document)
        }
        #expect(order.count == names.count)
        let firstOutOfOrder = order.indices.first { order[$0] != names[$0] }
        #expect(firstOutOfOrder == nil, "saved in the order they became due: \(order.prefix(8)) …")
        for (i, name) in names.enumerated() where i % 20 == 0 {
            #expect(try harness.text(onDisk: name) == "document \(i)\n")
        }
        let status = await store.status()
        #expect(status.unsaved == 0)
        #expect(await store.dueState.inHeap == 0)
    }
}
