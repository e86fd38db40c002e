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

    @Test(
        "A segment a release made obsolete stays until the records appended before the release are durable: a save's new base record stands in for the old one, and a crash before it is synced would leave the edits after it with none"
    )
    func obsoleteSegmentWaitsForTheNewBase() throws {
        let (journal, _, _) = try openJournal(
            path, options: JournalOptions(mode: .periodic(.seconds(3600)), segmentSize: 4096))
        // The document's base in the first segment, with records of another document
        // (released at once) filling it.
        var log = JournalOwnerLog()
        let base = try journal.append(owner: 1, payload: payload(1), log: &log)
        var other = JournalOwnerLog()
        for i in 0..<60 {
            let lsn = try journal.append(owner: 2, payload: payload(i), log: &other)
            journal.release(owner: 2, through: lsn, log: &other)
        }
        journal.flush()
        // A save starts, covering the base; an edit made while it runs, in the second
        // segment; all durable.
        log.checkpoint()
        let edit = try journal.append(owner: 1, payload: payload(6), log: &log)
        journal.flush()
        journal.requestSync(through: edit)
        #expect(eventually { journal.statistics.durableThrough >= edit })
        #expect(journal.statistics.segments == 2)
        // The save is done: its new base is appended, the records it covers released.
        let newBase = try journal.append(owner: 1, payload: payload(2), log: &log)
        journal.release(owner: 1, through: base, log: &log)
        journal.flush()
        #expect(journal.settled())
        #expect(journal.statistics.durableThrough < newBase)
        #expect(
            journal.statistics.segmentsDeleted == 0, "the old base's segment stays while the new base is not durable")
        #expect(try segmentFiles(path).count == 2)
        journal.requestSync(through: newBase)
        #expect(eventually { journal.statistics.segmentsDeleted == 1 }, "and goes once it is")
        journal.close()
    }
}
