import Foundation
import Posix
import TestSupport
import Testing

@testable import Journal

@Suite("Journal: appending, group commit, rollover, release")
final class JournalTests {
    let directory = TemporaryDirectory("journal")
    var path: String { directory.sub("j") }

    @Test("CRC-32C matches the standard check value and chains")
    func checksum() {
        #expect(CRC32C.checksum(of: Array("123456789".utf8)) == 0xE306_9283)
        let all = payload(1, size: 1000)
        let split = CRC32C.checksum(of: all[300...], continuing: CRC32C.checksum(of: all[..<300]))
        #expect(split == CRC32C.checksum(of: all))
    }

    @Test(
        "The CPU's CRC-32C instruction and the tables agree on every length and split, across the three-lane stripes of 768 bytes"
    )
    func hardwareChecksum() {
        #expect(HardwareCRC32C.isAvailable, "this machine's CPU has SSE4.2: the journal should use it")
        guard HardwareCRC32C.isAvailable else { return }
        var generator = SystemRandomNumberGenerator()
        let stripes = [767, 768, 769, 775, 1024, 1040, 1535, 1536, 1537, 2304, 4096, 16_384 + 5]
        for length in Array(0..<300) + stripes + (0..<40).map({ _ in Int.random(in: 300...6000) }) {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            bytes.withUnsafeBytes { all in
                let crc = UInt32.random(in: 0...UInt32.max, using: &generator)
                #expect(
                    HardwareCRC32C.checksum(of: all, continuing: crc) == CRC32C.tableChecksum(of: all, continuing: crc))
                let cut = length / 3
                let first = UnsafeRawBufferPointer(rebasing: all[..<cut])
                let rest = UnsafeRawBufferPointer(rebasing: all[cut...])
                #expect(
                    HardwareCRC32C.checksum(of: rest, continuing: HardwareCRC32C.checksum(of: first))
                        == CRC32C.tableChecksum(of: all))
                // A record's checksum: a length word, then the body.
                let word = UInt32.random(in: 0...UInt32.max, using: &generator)
                let chained = withUnsafeBytes(of: word.littleEndian) {
                    CRC32C.tableChecksum(of: all, continuing: CRC32C.tableChecksum(of: $0))
                }
                #expect(HardwareCRC32C.checksum(word: word, thenOf: all) == chained)
                #expect(CRC32C.checksum(word: word, thenOf: all) == chained)
            }
        }
        #expect(CRC32C.tableChecksum(of: UnsafeRawBufferPointer(start: nil, count: 0)) == 0)
    }

    @Test("Records come back after reopening, with their LSNs, owners and payloads; numbering goes on")
    func roundTrip() throws {
        var written: [Replayed] = []
        do {
            let (journal, report, records) = try openJournal(path)
            #expect(records.isEmpty)
            #expect(report.isClean)
            for i in 0..<200 {
                let data = payload(i, size: i % 37 == 0 ? 0 : 1 + i % 300)
                let lsn = try journal.append(owner: UInt64(i % 5), payload: data)
                written.append(Replayed(lsn: lsn.rawValue, owner: UInt64(i % 5), payload: data))
                if i % 10 == 9 { journal.flush() }
            }
            #expect(journal.close() == nil)
            #expect(journal.statistics.durableThrough == LSN(200))
        }
        let (journal, report, records) = try openJournal(path)
        #expect(records == written)
        #expect(report.records == 200)
        #expect(report.isClean, "\(report)")
        #expect(try journal.append(owner: 1, payload: [1, 2, 3]) == LSN(201))
        journal.close()
    }

    @Test("A second journal on the same directory is refused")
    func locked() throws {
        let (journal, _, _) = try openJournal(path)
        #expect(throws: JournalFailure.self) { _ = try Journal(directory: path) }
        journal.close()
        let (again, _, _) = try openJournal(path)
        again.close()
    }

    @Test("A payload over the limit is refused and nothing is appended")
    func tooLarge() throws {
        let (journal, _, _) = try openJournal(path, options: JournalOptions(maxPayloadSize: 10))
        #expect(throws: JournalRecordTooLarge.self) { try journal.append(owner: 1, payload: payload(0, size: 11)) }
        #expect(try journal.append(owner: 1, payload: payload(0, size: 10)) == LSN(1))
        journal.close()
    }

    @Test(
        "Records encoded straight into the batch come back as those appended from a payload do; a size bound over the limit is refused and nothing is appended"
    )
    func encodedInPlace() throws {
        var written: [Replayed] = []
        do {
            let (journal, _, _) = try openJournal(path, options: JournalOptions(maxPayloadSize: 300))
            var log = JournalOwnerLog()
            for i in 0..<50 {
                let bytes = payload(i, size: i * 7 % 301)
                if i % 3 == 0 {
                    let lsn = try journal.append(owner: 4, payload: bytes, log: &log)
                    written.append(Replayed(lsn: lsn.rawValue, owner: 4, payload: bytes))
                } else {
                    let (lsn, size) = try journal.append(owner: 4, log: &log, sizeBound: bytes.count + i % 2) {
                        $0.append(contentsOf: bytes)
                    }
                    #expect(size == bytes.count)
                    written.append(Replayed(lsn: lsn.rawValue, owner: 4, payload: bytes))
                }
                if i % 4 == 3 { journal.flush() }
            }
            var called = false
            #expect(throws: JournalRecordTooLarge.self) {
                try journal.append(owner: 4, log: &log, sizeBound: 301) { _ in called = true }
            }
            #expect(!called, "nothing is encoded past the limit")
            #expect(journal.statistics.lastLSN == LSN(50))
            #expect(log.count == 50)
            #expect(journal.close() == nil)
        }
        let (journal, report, records) = try openJournal(path)
        #expect(records == written)
        #expect(report.isClean, "\(report)")
        journal.close()
    }

    @Test("Group commit: one write per flush; the loop writes while a sync runs; one fdatasync covers many batches")
    func groupCommit() throws {
        let disk = FaultyDisk()
        let reports = Reports()
        let (journal, _, _) = try openJournal(
            path, options: JournalOptions(mode: .always, io: disk.io), reports: reports)
        let before = disk.counts.withLock { $0 }
        disk.counts.withLock { $0.gateClosed = true }
        let passes = 40
        for pass in 0..<passes {
            for i in 0..<10 { try journal.append(owner: UInt64(i), payload: payload(pass * 10 + i)) }
            journal.flush()
            if pass == 0 {
                // The first batch's sync is under way (and held): the next batches are
                // written meanwhile.
                #expect(eventually { disk.counts.withLock { $0.syncsInFlight } == 1 })
            }
        }
        #expect(reports.durable == .zero)
        disk.counts.withLock { $0.gateClosed = false }
        #expect(eventually { reports.durable == LSN(UInt64(passes * 10)) })
        let after = disk.counts.withLock { $0 }
        let batchWrites = Array(after.writes[before.writes.count...])
        #expect(batchWrites.count == passes, "one write(2) per flush")
        #expect(batchWrites.allSatisfy { $0 == 10 * (100 + 24) }, "each write holds the whole batch")
        #expect(after.writesDuringSync == passes - 1, "the loop never waits for the sync")
        let syncs = after.syncs - before.syncs
        #expect(syncs == 2, "the first batch's sync, then one for the \(passes - 1) written during it")
        let figures = journal.statistics
        #expect(figures.syncs == syncs)
        #expect(figures.mode == "always")
        #expect(figures.writes == passes)
        #expect(figures.bytesWritten == passes * 10 * 124)
        #expect(figures.lastSync != nil)
        #expect(figures.lastSyncDuration != nil)
        #expect(figures.unreleasedRecords == passes * 10)
        #expect(figures.segments == 1)
        #expect(figures.bytes == 32 + passes * 10 * 124)
        journal.close()
    }

    @Test("Always mode reports durability without being asked; periodic mode once per interval")
    func modes() throws {
        for mode in [JournalOptions.SyncMode.always, .periodic(.milliseconds(200))] {
            let reports = Reports()
            let (journal, _, _) = try openJournal(
                directory.sub("mode-\(mode)"), options: JournalOptions(mode: mode), reports: reports)
            let lsn = try journal.append(owner: 1, payload: payload(1))
            #expect(journal.flush() == lsn)
            #expect(eventually { reports.durable == lsn }, "\(mode)")
            #expect(journal.statistics.durableThrough == lsn)
            journal.close()
        }
    }

    @Test("Periodic mode with a long interval: whenDurable asks for an early sync and is answered")
    func earlySync() throws {
        let reports = Reports()
        let (journal, _, _) = try openJournal(
            path, options: JournalOptions(mode: .periodic(.seconds(3600))), reports: reports)
        let first = try journal.append(owner: 1, payload: payload(1))
        journal.flush()
        #expect(journal.settled(), "the sync thread settles")
        #expect(reports.durable == .zero, "nothing syncs before the interval unless asked")
        let answered = Lock<[JournalFailure?]>([])
        let lsn = try journal.append(owner: 1, payload: payload(2))
        journal.whenDurable(lsn) { failure in answered.withLock { $0.append(failure) } }
        journal.flush()
        #expect(eventually { answered.withLock { $0.count } == 1 })
        #expect(answered.withLock { $0 } == [nil])
        #expect(reports.durable >= lsn && lsn > first)
        journal.whenDurable(first) { failure in answered.withLock { $0.append(failure) } }
        #expect(answered.withLock { $0.count } == 2, "an LSN already durable is answered at once")
        journal.close()
    }

    @Test("Periodic mode with a long interval syncs early once unsyncedBytesLimit bytes wait, and again for the next")
    func syncAfterBytes() throws {
        let reports = Reports()
        // Records of 124 bytes (100 of payload), ten per flush: 1,240 bytes a batch.
        let options = JournalOptions(mode: .periodic(.seconds(3600)), unsyncedBytesLimit: 10_000)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        func batch(_ n: Int) throws -> LSN {
            var last = LSN.zero
            for i in 0..<10 { last = try journal.append(owner: 1, payload: payload(n * 10 + i)) }
            journal.flush()
            return last
        }
        for n in 0..<8 { _ = try batch(n) }
        #expect(journal.settled(), "the sync thread settles")
        #expect(reports.durable == .zero, "9,920 bytes wait: below the limit, nothing syncs before the interval")
        #expect(journal.statistics.syncs == 0)
        let crossing = try batch(8)
        #expect(eventually { reports.durable == crossing }, "11,160 bytes: synced without waiting for the hour")
        #expect(journal.statistics.syncs == 1)
        // Counted again from the sync: eight more batches stay below the limit, the ninth crosses it.
        for n in 9..<17 { _ = try batch(n) }
        #expect(journal.settled(), "the sync thread settles")
        #expect(reports.durable == crossing)
        let second = try batch(17)
        #expect(eventually { reports.durable == second })
        #expect(journal.statistics.syncs == 2)
        journal.close()
    }

    @Test("Rollover: segments named by their first LSN; replay reads them all in order")
    func rollover() throws {
        var written: [Replayed] = []
        do {
            let (journal, _, _) = try openJournal(path, options: JournalOptions(segmentSize: 4096))
            for i in 0..<1000 {
                let lsn = try journal.append(owner: UInt64(i % 3), payload: payload(i))
                written.append(Replayed(lsn: lsn.rawValue, owner: UInt64(i % 3), payload: payload(i)))
                if i % 10 == 9 { journal.flush() }
            }
            #expect(journal.close() == nil)
        }
        let files = try segmentFiles(path)
        #expect(files.count > 20)
        #expect(files.first == "00000000000000000001.journal")
        #expect(files.allSatisfy { $0.count == 28 })
        let (journal, report, records) = try openJournal(path, options: JournalOptions(segmentSize: 4096))
        #expect(records == written)
        #expect(report.segments == files.count)
        #expect(report.isClean, "\(report)")
        journal.close()
    }

    @Test("Released segments are deleted oldest first; a pinned one keeps the rest; replay skips released records")
    func releaseDeletesSegments() throws {
        let options = JournalOptions(segmentSize: 2048)
        do {
            let (journal, _, _) = try openJournal(path, options: options)
            // Owner 2 has one record in the first segment; owner 1 fills the next ones.
            let pin = try journal.append(owner: 2, payload: payload(0))
            var lastOfOne = LSN.zero
            for i in 1...200 {
                lastOfOne = try journal.append(owner: 1, payload: payload(i))
                if i % 5 == 0 { journal.flush() }
            }
            let keep = try journal.append(owner: 3, payload: payload(999))
            journal.flush()
            let segments = journal.statistics.segments
            #expect(segments > 5)
            #expect(journal.pinningOwners() == [1, 2])
            journal.release(owner: 1, through: lastOfOne)
            journal.flush()
            #expect(journal.settled(), "the sync thread settles")
            #expect(journal.statistics.segments == segments, "owner 2 still pins the oldest segment")
            #expect(journal.pinningOwners() == [2])
            #expect(journal.statistics.unreleasedRecords == 2)
            journal.release(owner: 2, through: pin)
            journal.flush()
            #expect(eventually { journal.statistics.segments <= 2 }, "\(journal.statistics.segments) left")
            #expect(eventually { (try? segmentFiles(self.path).count) == journal.statistics.segments })
            #expect(journal.statistics.segmentsDeleted >= segments - 2)
            #expect(journal.statistics.unreleasedRecords == 1)
            _ = keep
            journal.close()
        }
        let (journal, report, records) = try openJournal(path, options: options)
        #expect(records.map(\.owner) == [3], "released records are not delivered again: \(report)")
        #expect(report.isClean, "\(report)")
        journal.close()
    }

    @Test("Records released before the flush that writes them: counted out at once, the rest pinned and replayed")
    func releaseBeforeFlush() throws {
        do {
            let (journal, _, _) = try openJournal(path)
            var five = JournalOwnerLog()
            let first = try journal.append(owner: 5, payload: payload(1), log: &five)
            // A save starting: its release will be through what the log holds now.
            five.checkpoint()
            let second = try journal.append(owner: 5, payload: payload(2), log: &five)
            try journal.append(owner: 6, payload: payload(3))
            journal.release(owner: 5, through: first, log: &five)
            #expect(journal.statistics.unreleasedRecords == 2)
            #expect(five.count == 1 && five.first == second)
            // Not written yet: nothing pins a segment.
            #expect(journal.pinningOwners().isEmpty)
            journal.flush()
            #expect(journal.pinningOwners() == [5, 6])
            journal.release(owner: 6, through: journal.statistics.lastLSN)
            #expect(journal.pinningOwners() == [5])
            #expect(journal.statistics.unreleasedRecords == 1)
            journal.close()
        }
        let (journal, report, records) = try openJournal(path)
        #expect(records.map(\.owner) == [5] && records.map { Array($0.payload) } == [payload(2)], "\(report)")
        journal.close()
    }

    @Test(
        "A release through fewer than all of an owner's records, at no checkpoint: the mark is written, the records stay counted and pinned until a release covers them"
    )
    func partialReleaseWithoutCheckpoint() throws {
        let options = JournalOptions(segmentSize: 2048)
        do {
            let (journal, _, _) = try openJournal(path, options: options)
            var log = JournalOwnerLog()
            let first = try journal.append(owner: 5, payload: payload(0), log: &log)
            for i in 1...60 {
                try journal.append(owner: 5, payload: payload(i), log: &log)
                if i % 5 == 0 { journal.flush() }
            }
            journal.flush()
            #expect(journal.statistics.segments > 2)
            journal.release(owner: 5, through: first, log: &log)
            journal.flush()
            #expect(log.count == 61 && log.first == first)
            #expect(journal.statistics.unreleasedRecords == 61)
            #expect(journal.pinningOwners() == [5])
            #expect(journal.settled(), "the sync thread settles")
            #expect(journal.statistics.segmentsDeleted == 0, "the oldest record is still counted as pinning")
            journal.release(owner: 5, through: log.last, log: &log)
            journal.flush()
            #expect(log.isEmpty && log.first == nil)
            #expect(journal.statistics.unreleasedRecords == 0)
            #expect(eventually { journal.statistics.segments == 1 }, "\(journal.statistics.segments) left")
            journal.close()
        }
        let (journal, report, records) = try openJournal(path, options: options)
        #expect(records.isEmpty, "\(report)")
        journal.close()
    }

    @Test(
        "A save's release through its checkpoint: the segments before the records appended since go, theirs stay and replay"
    )
    func checkpointReleaseKeepsLaterRecords() throws {
        let options = JournalOptions(segmentSize: 2048)
        var kept: [[UInt8]] = []
        do {
            let (journal, _, _) = try openJournal(path, options: options)
            var log = JournalOwnerLog()
            for i in 0..<60 {
                try journal.append(owner: 1, payload: payload(i), log: &log)
                if i % 5 == 4 { journal.flush() }
            }
            let covered = log.last
            log.checkpoint()
            journal.flush()
            let before = journal.statistics.segments
            for i in 60..<120 {
                try journal.append(owner: 1, payload: payload(i), log: &log)
                kept.append(payload(i))
                if i % 5 == 4 { journal.flush() }
            }
            journal.flush()
            #expect(journal.statistics.segments > before)
            journal.release(owner: 1, through: covered, log: &log)
            journal.flush()
            #expect(log.count == 60 && journal.statistics.unreleasedRecords == 60)
            #expect(eventually { journal.statistics.segmentsDeleted >= before - 1 }, "\(journal.statistics)")
            journal.close()
        }
        let (journal, report, records) = try openJournal(path, options: options)
        #expect(records.map { Array($0.payload) } == kept, "\(report)")
        journal.close()
    }

    @Test("A record appended unattached pins nothing until adopted; adopted, it is released with the owner's log")
    func unattachedRecords() throws {
        let options = JournalOptions(segmentSize: 2048)
        let (journal, _, _) = try openJournal(path, options: options)
        var log = JournalOwnerLog()
        try journal.append(owner: 1, payload: payload(0), log: &log)
        log.checkpoint()
        let saving = try journal.appendUnattached(owner: 1, payload: payload(1))
        #expect(journal.statistics.unreleasedRecords == 1)
        let after = try journal.append(owner: 1, payload: payload(2), log: &log)
        journal.adopt(saving, owner: 1, into: &log)
        #expect(journal.statistics.unreleasedRecords == 3 && log.count == 3)
        // The release a save does: through what it covered; what came after stays, the oldest of it pinned.
        journal.release(owner: 1, through: LSN(saving.rawValue - 1), log: &log)
        #expect(log.count == 2 && log.first == saving && log.last == after)
        #expect(journal.statistics.unreleasedRecords == 2)
        journal.flush()
        #expect(journal.pinningOwners() == [1])
        journal.release(owner: 1, through: after, log: &log)
        #expect(log.isEmpty && journal.statistics.unreleasedRecords == 0)
        journal.flush()
        #expect(journal.pinningOwners().isEmpty)
        journal.close()
    }

    @Test("Replayed records stay pinned through noteReplayed until released; then their segments go")
    func replayPins() throws {
        let options = JournalOptions(segmentSize: 2048)
        do {
            let (journal, _, _) = try openJournal(path, options: options)
            for i in 0..<100 {
                try journal.append(owner: UInt64(1 + i % 2), payload: payload(i))
                if i % 5 == 4 { journal.flush() }
            }
            journal.close()
        }
        let before = try segmentFiles(path).count
        var last: [UInt64: LSN] = [:]
        do {
            let (journal, _, records) = try openJournal(path, options: options, pin: true)
            for record in records { last[record.owner] = LSN(record.lsn) }
            #expect(records.count == 100)
            #expect(try segmentFiles(path).count == before + 1, "pinned segments stay, a fresh one is added")
            #expect(journal.pinningOwners() == [1, 2])
            #expect(journal.statistics.unreleasedRecords == 100)
            journal.release(owner: 1, through: last[1]!)
            journal.release(owner: 2, through: last[2]!)
            journal.flush()
            #expect(eventually { journal.statistics.segments == 1 })
            journal.close()
        }
        let (journal, _, records) = try openJournal(path, options: options)
        #expect(records.isEmpty)
        journal.close()
        // Without pinning, replayed segments are obsolete at once.
        let (unpinned, _, _) = try openJournal(path, options: options)
        #expect(unpinned.statistics.segments == 1)
        unpinned.close()
    }
}
