import Foundation
import Posix
import TestSupport
import Testing

@testable import Journal

@Suite("Journal: pins")
struct JournalPinTests {
    let directory = TemporaryDirectory("journal-pins")
    var path: String { directory.sub("journal") }

    @Test(
        "A pin held for long does not let the pins released behind it pile up; the oldest segment stays while it is held"
    )
    func heapStaysBounded() throws {
        let (journal, _, _) = try openJournal(path, options: JournalOptions(segmentSize: 4096))
        var held = JournalOwnerLog()
        try journal.append(owner: 1, payload: [1, 2, 3], log: &held)
        var busy = JournalOwnerLog()
        for i in 0..<5000 {
            let lsn = try journal.append(owner: 2, payload: [UInt8(i & 0xFF)], log: &busy)
            journal.release(owner: 2, through: lsn, log: &busy)
            if i % 100 == 99 { journal.flush() }
        }
        journal.flush()
        let (pins, heap) = journal.state.withLock { ($0.pins.count, $0.pinHeap.count) }
        #expect(pins == 1)
        #expect(heap <= 2 * pins + 1024, "\(heap) entries in the heap for \(pins) pin")
        #expect(journal.statistics.segments > 2)
        #expect(journal.pinningOwners() == [1])
        #expect(journal.statistics.segmentsDeleted == 0, "owner 1's record keeps the oldest segment")
        journal.release(owner: 1, through: held.last, log: &held)
        journal.flush()
        #expect(eventually { journal.statistics.segments == 1 }, "\(journal.statistics.segments) left")
        #expect(journal.state.withLock { $0.oldestPin() } == nil)
        journal.close()
    }
}
