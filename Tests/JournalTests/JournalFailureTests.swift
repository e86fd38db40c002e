import Foundation
import Journal
import Posix
import TestSupport
import Testing

/// Failed writes and syncs, injected through the journal's I/O hooks: reported with the
/// operation, path and errno; the records are not claimed durable until written again to
/// a new segment and synced there.
@Suite("Journal write and sync failures")
final class JournalFailureTests {
    let directory = TemporaryDirectory("journal-failure")
    var path: String { directory.sub("j") }

    @Test("A failing fdatasync is reported; nothing is claimed durable until the records are rewritten and synced")
    func failingSync() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let options = JournalOptions(mode: .always, retryDelay: .milliseconds(20), io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        disk.counts.withLock { $0.failingSyncs = 3 }
        let answered = Lock<[JournalFailure?]>([])
        var last = LSN.zero
        for i in 0..<5 { last = try journal.append(owner: 1, payload: payload(i)) }
        journal.whenDurable(last) { failure in answered.withLock { $0.append(failure) } }
        #expect(journal.flush() == last, "written to the page cache")
        #expect(eventually { reports.failures.count >= 1 })
        let failure = try #require(reports.failures.first)
        #expect(failure.operation == .fdatasync)
        #expect(failure.errno == .ioError)
        #expect(failure.path == path + "/00000000000000000001.journal")
        #expect(failure.notDurable == LSN(1)...LSN(5))
        #expect(failure.description.contains("fdatasync"))
        #expect(eventually { answered.withLock { $0.count } == 1 })
        #expect(answered.withLock { $0.first } == .some(failure), "the waiter is told, not answered durable")
        // Two more attempts fail (the rewrite's own fdatasync), then the third succeeds.
        #expect(eventually { reports.durable == last })
        #expect(reports.failures.count == 3)
        #expect(reports.seen.withLock { $0.durableCalls.allSatisfy { $0 == last } })
        let figures = journal.statistics
        #expect(figures.rewrites == 1)
        #expect(figures.syncFailures == 3)
        #expect(figures.failure == nil)
        #expect(figures.durableThrough == last)
        // The journal goes on in the rewritten segment.
        let more = try journal.append(owner: 2, payload: payload(9))
        journal.flush()
        #expect(eventually { reports.durable == more })
        #expect(journal.close() == nil)
        let (again, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == [1, 2, 3, 4, 5, 6])
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test("After a failed sync mid-segment, the durable part stays and the rest goes to a new segment")
    func failingSyncAfterDurableRecords() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let options = JournalOptions(mode: .always, io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        for i in 0..<10 { try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(eventually { reports.durable == LSN(10) })
        disk.counts.withLock { $0.failingSyncs = 1 }
        for i in 10..<15 { try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(eventually { reports.durable == LSN(15) })
        #expect(reports.failures.map(\.notDurable) == [LSN(11)...LSN(15)])
        #expect(journal.segmentNames == ["00000000000000000001.journal", "00000000000000000011.journal"])
        #expect(try Disk.status(path + "/00000000000000000001.journal").size == Int64(32 + 10 * 124))
        #expect(journal.close() == nil)
        let (again, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == Array(1...15))
        #expect(records.map(\.payload) == (0..<15).map { payload($0) })
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test("A failed sync across rollovers: segments holding nothing durable go, one new segment holds their records")
    func failingSyncAcrossRollovers() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let options = JournalOptions(mode: .always, segmentSize: 1024, io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        for i in 0..<4 { try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(eventually { reports.durable == LSN(4) })
        // Hold the next sync while batches roll over into new segments, then fail it.
        disk.counts.withLock { $0.gateClosed = true }
        for i in 4..<40 {
            try journal.append(owner: UInt64(1 + i % 2), payload: payload(i))
            journal.flush()
            if i == 4 { #expect(eventually { disk.counts.withLock { $0.syncsInFlight } == 1 }) }
        }
        let rolled = journal.segmentNames
        #expect(rolled.count >= 4)
        disk.counts.withLock { c in
            c.failingSyncs = 1
            c.gateClosed = false
        }
        #expect(eventually { reports.durable == LSN(40) })
        #expect(reports.failures.first?.notDurable == LSN(5)...LSN(40))
        #expect(journal.segmentNames == ["00000000000000000001.journal", "00000000000000000005.journal"])
        #expect(try segmentFiles(path) == journal.segmentNames, "the rolled segments are gone from the disk")
        #expect(journal.pinningOwners() == [1])
        #expect(journal.statistics.unreleasedRecords == 40)
        #expect(journal.close() == nil)
        let (again, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == Array(1...40))
        #expect(records.map(\.payload) == (0..<40).map { payload($0) })
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test("A failing write (ENOSPC) is reported; the batch is written again to a new segment")
    func failingWrite() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let options = JournalOptions(mode: .periodic(.milliseconds(50)), io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        for i in 0..<3 { try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(eventually { reports.durable == LSN(3) })
        disk.counts.withLock { $0.failingWrites = 1 }
        for i in 3..<6 { try journal.append(owner: 1, payload: payload(i)) }
        #expect(journal.flush() == LSN(3), "the failed batch is not reported written")
        #expect(reports.failures.map(\.operation) == [.write])
        #expect(reports.failures.first?.errno == .noSpace)
        #expect(reports.failures.first?.notDurable == LSN(4)...LSN(6))
        #expect(eventually { reports.durable == LSN(6) })
        #expect(journal.statistics.writtenThrough == LSN(6))
        journal.close()
        let (again, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == Array(1...6))
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test("Early syncs at unsyncedBytesLimit reuse synced batches' buffers; a failed one rewrites every record intact")
    func failingEarlySyncWithReusedBuffers() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        // Batches of five 124-byte records (620 bytes): a sync every fifth batch, with no
        // interval to wait for. Each batch after the first syncs is written from a buffer
        // a synced batch had.
        let options = JournalOptions(
            mode: .periodic(.seconds(3600)), unsyncedBytesLimit: 3_000, retryDelay: .milliseconds(10), io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        var last = LSN.zero
        for batch in 0..<60 {
            if batch == 30 { disk.counts.withLock { $0.failingSyncs = 1 } }
            for i in 0..<5 { last = try journal.append(owner: UInt64(batch % 7), payload: payload(batch * 5 + i)) }
            journal.flush()
            if batch % 5 == 4 {
                // Each fifth batch crosses the limit: its sync comes before the next batch,
                // so that the next ones go into buffers the synced ones gave back.
                let through = last
                #expect(eventually { reports.durable >= through || !reports.failures.isEmpty })
            }
        }
        let answered = Lock<[JournalFailure?]>([])
        journal.whenDurable(last) { failure in answered.withLock { $0.append(failure) } }
        #expect(eventually { reports.durable == last })
        #expect(reports.failures.map(\.operation) == [.fdatasync], "the one injected failure")
        #expect(journal.statistics.rewrites == 1)
        #expect(journal.statistics.syncs >= 6, "an early sync at each of the six crossings before the failure")
        #expect(journal.close() == nil)
        let (again, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == Array(1...300))
        #expect(records.map(\.payload) == (0..<300).map { payload($0) }, "every record's bytes, rewritten or not")
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test("Records appended while a rewrite is retried are written and synced once it succeeds, unflushed")
    func appendedDuringRecovery() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let options = JournalOptions(mode: .periodic(.seconds(3600)), retryDelay: .milliseconds(10), io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        disk.counts.withLock { $0.failingSyncs = 1_000_000 }
        for i in 0..<3 { try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        journal.requestSync(through: LSN(3))
        // The first sync fails, and so does each retry of the rewrite: the journal is recovering.
        #expect(eventually { reports.failures.count >= 2 })
        // The next retry is held in its fdatasync: it has taken the records to rewrite.
        disk.counts.withLock { c in
            c.gateClosed = true
            c.failingSyncs = 0
        }
        #expect(eventually { disk.counts.withLock { $0.syncsInFlight } == 1 })
        for i in 3..<6 { try journal.append(owner: 2, payload: payload(i)) }
        #expect(journal.flush() < LSN(6), "nothing is written while the journal is recovering")
        let answered = Lock<[JournalFailure?]>([])
        journal.whenDurable(LSN(6)) { failure in answered.withLock { $0.append(failure) } }
        disk.counts.withLock { $0.gateClosed = false }
        // The caller never flushes again: the journal writes the batch itself after the rewrite.
        #expect(eventually { reports.durable == LSN(6) })
        #expect(eventually { answered.withLock { $0.last } == .some(nil) }, "the handler is answered with success")
        #expect(journal.statistics.writtenThrough == LSN(6))
        #expect(journal.close() == nil)
        let (again, report, records) = try openJournal(path)
        #expect(records.map(\.lsn) == Array(1...6))
        #expect(records.map(\.payload) == (0..<6).map { payload($0) })
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test("While syncs keep failing, close says which records are not durable")
    func closeWhileFailing() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let options = JournalOptions(mode: .always, retryDelay: .milliseconds(10), io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        disk.counts.withLock { $0.failingSyncs = 1_000_000 }
        for i in 0..<4 { try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(eventually { reports.failures.count >= 3 })
        #expect(journal.statistics.durableThrough == .zero)
        #expect(journal.statistics.failure?.notDurable == LSN(1)...LSN(4))
        let failure = journal.close()
        #expect(failure?.notDurable == LSN(1)...LSN(4))
        #expect(reports.durable == .zero)
        // What was written reaches the next start all the same (the page cache kept it).
        let (again, _, records) = try openJournal(path)
        #expect(records.map(\.lsn) == [1, 2, 3, 4])
        again.close()
    }
}
