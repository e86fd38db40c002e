import Foundation
import Journal
import Posix
import TestSupport
import Testing

/// A segment's space is reserved when it is made (`fallocate`): the file is the segment's
/// full size from the start, zeros past the records. A clean close gives the space back; a
/// crash leaves it, and replay takes the zeros for the end of the records.
@Suite("Journal segments with reserved space")
final class ReservedSpaceTests {
    let directory = TemporaryDirectory("journal-reserved")
    static let first = "00000000000000000001.journal"
    static let record = 100 + 24
    static let segmentSize = 64 << 10

    var options: JournalOptions { JournalOptions(segmentSize: Self.segmentSize) }

    /// The segment files as a crash would leave them: copied while the journal is open
    /// (what `write(2)` put in the page cache, which a killed process leaves behind).
    func copySegments(from source: String, to destination: String) throws {
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
        for name in try segmentFiles(source) {
            try Bytes.write(try Bytes.read(source + "/" + name), to: destination + "/" + name)
        }
    }

    @Test("A new segment is its full size at once; a clean close cuts it back to its records")
    func reservedThenGivenBack() throws {
        let path = directory.sub("sizes")
        let (journal, _, _) = try openJournal(path, options: options)
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(Self.segmentSize))
        for i in 0..<5 { _ = try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(Self.segmentSize))
        #expect(journal.statistics.bytes == 32 + 5 * Self.record, "statistics count records, not reserved space")
        #expect(journal.close() == nil)
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(32 + 5 * Self.record))
    }

    @Test("After a crash the zeros are the end: every record delivered, nothing reported, the space given back")
    func crashLeavesZeros() throws {
        let path = directory.sub("live")
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        for i in 0..<7 {
            try record(journal, owner: UInt64(i % 2 + 1), i, into: &written)
            if i % 3 == 2 { journal.flush() }
        }
        journal.flush()
        let crashed = directory.sub("crashed")
        try copySegments(from: path, to: crashed)
        journal.close()
        #expect(try Bytes.read(crashed + "/" + Self.first).count == Self.segmentSize)

        let (again, report, records) = try openJournal(crashed, options: options, pin: true)
        #expect(records == written)
        #expect(report.isClean, "\(report)")
        #expect(report.bytes == 32 + 7 * Self.record, "the report counts records, not reserved space")
        let next = try again.append(owner: 9, payload: payload(99))
        #expect(next == LSN(8))
        again.flush()
        #expect(again.close() == nil)
        // The crashed segment keeps its records and gives its reserved space back (a restart
        // while its records stay pinned must not keep a whole segment's size each time); the
        // new record is in a segment of its own.
        #expect(try Disk.status(crashed + "/" + Self.first).size == Int64(32 + 7 * Self.record))
        let (third, report3, records3) = try openJournal(crashed, options: options)
        #expect(records3 == written + [Replayed(lsn: 8, owner: 9, payload: payload(99))])
        #expect(report3.isClean, "\(report3)")
        third.close()
    }

    @Test("A byte that is not zero inside the reserved space is damage: reported and cut, the records before it kept")
    func nonZeroInsideReservedSpace() throws {
        let path = directory.sub("stray")
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        for i in 0..<4 {
            try record(journal, owner: 1, i, into: &written)
        }
        journal.flush()
        let damaged = directory.sub("damaged")
        try copySegments(from: path, to: damaged)
        journal.close()
        var bytes = try Bytes.read(damaged + "/" + Self.first)
        let end = 32 + 4 * Self.record
        bytes[end + 5000] = 0x5A
        try Bytes.write(bytes, to: damaged + "/" + Self.first)

        let (again, report, records) = try openJournal(damaged, options: options, pin: true)
        #expect(records == written)
        #expect(
            report.problems == [
                JournalProblem(kind: .tornTail(bytesDropped: Self.segmentSize - end), segment: Self.first, offset: end)
            ], "\(report)")
        #expect(try Disk.status(damaged + "/" + Self.first).size == Int64(end), "the tail is cut off")
        again.close()
    }

    @Test("A segment made just before a crash, only its header written, is gone on with right after its header")
    func headerOnlySegmentIsReused() throws {
        let path = directory.sub("header-only")
        let (journal, _, _) = try openJournal(path, options: options)
        let crashed = directory.sub("header-only-crashed")
        try copySegments(from: path, to: crashed)
        journal.close()
        #expect(try Bytes.read(crashed + "/" + Self.first).count == Self.segmentSize)

        let (again, report, records) = try openJournal(crashed, options: options)
        #expect(records.isEmpty && report.isClean, "\(report)")
        #expect(try again.append(owner: 3, payload: payload(3)) == LSN(1))
        again.flush()
        #expect(again.close() == nil)
        #expect(try segmentFiles(crashed) == [Self.first])
        #expect(try Disk.status(crashed + "/" + Self.first).size == Int64(32 + Self.record))
        let (third, report3, records3) = try openJournal(crashed, options: options)
        #expect(records3 == [Replayed(lsn: 1, owner: 3, payload: payload(3))])
        #expect(report3.isClean, "\(report3)")
        third.close()
    }

    @Test("A segment whose header never reached the disk before the power went (all zeros) is cut, not reported as bad")
    func reservedSegmentWithoutHeader() throws {
        let path = directory.sub("no-header")
        var written: [Replayed] = []
        do {
            let (journal, _, _) = try openJournal(path, options: options)
            for i in 0..<6 {
                try record(journal, owner: 1, i, into: &written)
            }
            #expect(journal.close() == nil)
        }
        let victim = "00000000000000000007.journal"
        try Bytes.write([UInt8](repeating: 0, count: Self.segmentSize), to: path + "/" + victim)
        let (journal, report, records) = try openJournal(path, options: options)
        #expect(records == written)
        #expect(
            report.problems
                == [JournalProblem(kind: .tornTail(bytesDropped: Self.segmentSize), segment: victim, offset: 0)],
            "\(report)")
        #expect(try journal.append(owner: 1, payload: [1]) == LSN(7))
        journal.close()
    }

    @Test("On tmpfs nothing is reserved: the segment is as long as its records", .enabled(if: Self.hasShm))
    func notOnTmpfs() throws {
        var template = Array("/dev/shm/journal-tmpfs-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!).map { String(cString: $0) } }
        let shm = try #require(made)
        let path = shm + "/journal"
        defer { try? FileManager.default.removeItem(atPath: shm) }
        let (journal, _, _) = try openJournal(path, options: options)
        #expect(try Disk.status(path + "/" + Self.first).size == 32)
        _ = try journal.append(owner: 1, payload: payload(1))
        journal.flush()
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(32 + Self.record))
        #expect(journal.close() == nil)
    }

    static let hasShm =
        (try? FileDescriptor.open("/dev/shm", options: [.directory]))
        .map { fd in
            fd.closeAfter { (try? fd.fileSystemType()) == 0x0102_1994 }
        } ?? false

    @Test("Where the file system cannot reserve space, segments grow as they are written")
    func withoutFallocate() throws {
        let path = directory.sub("no-fallocate")
        // Stands for a file system without fallocate(2) (such as ext3 or some FUSE file
        // systems), which this machine's disks are not: the real writes and syncs, with
        // the reservation refused as such a file system refuses it.
        let refusing = JournalIO(
            write: { fd, bytes throws(Errno) in try fd.writeAll(bytes) },
            dataSync: { fd throws(Errno) in try fd.dataSync() },
            allocate: { _, _ throws(Errno) in throw Errno.notSupported })
        let options = JournalOptions(segmentSize: Self.segmentSize, io: refusing)
        let (journal, _, _) = try openJournal(path, options: options)
        #expect(try Disk.status(path + "/" + Self.first).size == 32)
        for i in 0..<3 { _ = try journal.append(owner: 1, payload: payload(i)) }
        journal.flush()
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(32 + 3 * Self.record))
        let copy = directory.sub("no-fallocate-crashed")
        try copySegments(from: path, to: copy)
        journal.close()
        let (again, report, records) = try openJournal(copy, options: options)
        #expect(records.map(\.lsn) == [1, 2, 3])
        #expect(report.isClean, "\(report)")
        again.close()
    }

    /// Whether segments in the temporary directory are mapped: ext4 and XFS (as here and
    /// on CI); elsewhere every batch goes through `write(2)`, which the tests above cover.
    static let mapsSegments =
        (try? FileDescriptor.open(NSTemporaryDirectory(), options: [.directory]))
        .map { fd in
            fd.closeAfter { [0xEF53, 0x5846_5342].contains((try? fd.fileSystemType()) ?? 0) }
        } ?? false

    /// Appends the record of `seed` (``payload(_:size:)``) for `owner` and keeps what replay
    /// should give back for it in `written`.
    @discardableResult
    func record(_ journal: Journal, owner: UInt64, _ seed: Int, size: Int = 100, into written: inout [Replayed]) throws
        -> LSN
    {
        let lsn = try journal.append(owner: owner, payload: payload(seed, size: size))
        written.append(Replayed(lsn: lsn.rawValue, owner: owner, payload: payload(seed, size: size)))
        return lsn
    }

    /// Copies the segments of the open `journal` (what a crash leaves), closes it, and
    /// expects both the copy and the closed journal to replay exactly `written`, cleanly.
    func expectEveryRecord(
        _ written: [Replayed], afterCrashOf journal: Journal, at path: String, copy name: String,
        options: JournalOptions
    ) throws {
        let crashed = directory.sub(name)
        try copySegments(from: path, to: crashed)
        #expect(journal.close() == nil)
        for copy in [crashed, path] {
            let (again, report, records) = try openJournal(copy, options: options)
            #expect(records == written, "\(copy)")
            #expect(report.isClean, "\(report)")
            again.close()
        }
    }

    @Test(
        "Batches are copied into the segment's mapped reserved space: a copy taken while the journal is open (what a killed process leaves) holds every record",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func mappedBatches() throws {
        let path = directory.sub("mapped")
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        for i in 0..<20 {
            try record(journal, owner: UInt64(i % 3 + 1), i, into: &written)
            if i % 4 == 3 { journal.flush() }
        }
        let figures = journal.statistics
        #expect(figures.writes == 5 && figures.mappedWrites == 5, "\(figures)")
        #expect(figures.writtenThrough == LSN(20))
        let crashed = directory.sub("mapped-crashed")
        try copySegments(from: path, to: crashed)
        #expect(journal.close() == nil)
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(32 + 20 * Self.record))
        for copy in [crashed, path] {
            let (again, report, records) = try openJournal(copy, options: options)
            #expect(records == written, "\(copy)")
            #expect(report.isClean, "\(report)")
            again.close()
        }
    }

    @Test(
        "Pages of records a sync released from the mapping keep them: a crash copy after more records holds every one",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func releasedPagesKeepTheirRecords() throws {
        let path = directory.sub("released")
        let options = JournalOptions(mode: .always, segmentSize: Self.segmentSize)
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        func append(_ seeds: Range<Int>) throws {
            for seed in seeds {
                try record(journal, owner: 7, seed, into: &written)
                if seed % 5 == 4 { journal.flush() }
            }
            journal.flush()
        }
        // 60 records fill three pages; their sync releases the two whole ones.
        try append(0..<60)
        #expect(eventually { journal.statistics.durableThrough == LSN(60) })
        try append(60..<100)
        #expect(eventually { journal.statistics.durableThrough == LSN(100) })
        #expect(journal.statistics.mappedWrites == journal.statistics.writes)
        try expectEveryRecord(written, afterCrashOf: journal, at: path, copy: "released-crashed", options: options)
    }

    @Test(
        "In periodic mode the sync thread faults in the pages ahead of the records; a crash copy holds every record and ends in zeros",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func pagesPreparedAhead() throws {
        let path = directory.sub("prepared")
        let options = JournalOptions(mode: .periodic(.seconds(3600)), segmentSize: 4 << 20)
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        // 1,000-byte payloads, 10 a batch: 1 MiB passes the first prepared stretch.
        for seed in 0..<1_000 {
            try record(journal, owner: 3, seed, size: 1_000, into: &written)
            if seed % 10 == 9 { journal.flush() }
        }
        #expect(eventually { journal.statistics.preparedBytes > 0 }, "\(journal.statistics)")
        // The first batch, before anything was prepared, reaches over three new pages and
        // goes in with write(2); batches within prepared pages are stored.
        #expect(journal.statistics.mappedWrites >= 1 && journal.statistics.mappedWrites < journal.statistics.writes)
        try expectEveryRecord(written, afterCrashOf: journal, at: path, copy: "prepared-crashed", options: options)
    }

    @Test(
        "In periodic mode pages are prepared ahead while the caller makes every sync itself (durable requests): a caller's sync hands a pending preparation to the thread",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func pagesPreparedWhileTheCallerSyncs() throws {
        let path = directory.sub("prepared-caller")
        let options = JournalOptions(mode: .periodic(.seconds(3600)))
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        // As the event loop answers requests that ask for durability: a batch flushed, a
        // waiter for its last record, the sync made on the caller's thread. 2 MB of
        // records, four times the stretch prepared at a time.
        for batch in 0..<200 {
            var last = LSN.zero
            for i in 0..<10 {
                let seed = batch * 10 + i
                last = try record(journal, owner: 5, seed, size: 1_000, into: &written)
            }
            journal.flush()
            journal.whenDurable(last) { _ in }
            // Not while the thread is busy (preparing): then the thread syncs.
            if !journal.syncOnCaller(ifLastSyncTookAtMost: .seconds(60)) {
                #expect(eventually { journal.statistics.durableThrough >= last })
            }
        }
        // Each sync writes the prepared pages back; what matters is that preparing goes on.
        #expect(eventually { journal.statistics.preparedBytes >= 1 << 20 }, "\(journal.statistics)")
        #expect(journal.statistics.durableThrough == LSN(2_000))
        try expectEveryRecord(
            written, afterCrashOf: journal, at: path, copy: "prepared-caller-crashed", options: options)
    }

    @Test(
        "A batch reaching over pages not prepared goes in with write(2) in place, between stored ones; a crash copy holds every record",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func batchOverUnpreparedPages() throws {
        let path = directory.sub("unprepared")
        // Mode=always prepares nothing: which batches are stored depends on the pages alone.
        let options = JournalOptions(mode: .always, segmentSize: 4 << 20)
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        func batch(_ seeds: Range<Int>, size: Int) throws {
            for seed in seeds {
                try record(journal, owner: 2, seed, size: size, into: &written)
            }
            journal.flush()
        }
        try batch(0..<3, size: 100)  // within the header's page: stored
        try batch(3..<4, size: 1 << 20)  // a megabyte: 256 new pages, write(2)
        try batch(4..<5, size: 100)  // on the megabyte's last page, and perhaps one more: stored
        try batch(5..<6, size: 20_000)  // five new pages: write(2)
        for seed in 6..<40 { try batch(seed..<seed + 1, size: 100) }  // one record a flush: stored
        let figures = journal.statistics
        #expect(figures.writes == 38 && figures.mappedWrites == 36, "\(figures)")
        #expect(eventually { journal.statistics.durableThrough == LSN(40) })
        try expectEveryRecord(written, afterCrashOf: journal, at: path, copy: "unprepared-crashed", options: options)
    }

    @Test(
        "In periodic mode batches of 200 KiB prepare no pages ahead (each would reach past them) and go in with write(2)",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func largeBatchesPrepareNothing() throws {
        let path = directory.sub("large-batches")
        let options = JournalOptions(mode: .periodic(.seconds(3600)))
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        var last = LSN.zero
        for batch in 0..<10 {
            for i in 0..<200 {
                let seed = batch * 200 + i
                last = try record(journal, owner: 4, seed, size: 1_000, into: &written)
            }
            journal.flush()
        }
        // The sync thread has run (a preparation asked for would have been made by now).
        journal.requestSync(through: last)
        #expect(eventually { journal.statistics.durableThrough == last })
        let figures = journal.statistics
        #expect(figures.preparedBytes == 0 && figures.mappedWrites == 0 && figures.writes == 10, "\(figures)")
        try expectEveryRecord(written, afterCrashOf: journal, at: path, copy: "large-batches-crashed", options: options)
    }

    @Test(
        "A failed fdatasync of a mapped segment: its records are written again to a new segment, the failed one cut back to what was durable and let go; a crash copy holds every record",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func failedSyncOfAMappedSegment() throws {
        let path = directory.sub("mapped-failure")
        let disk = FaultyDisk(mapsSegments: true)
        let reports = Reports()
        let options = JournalOptions(mode: .always, io: disk.io)
        let (journal, _, _) = try openJournal(path, options: options, reports: reports)
        var written: [Replayed] = []
        func batch(_ seeds: Range<Int>) throws {
            for seed in seeds {
                try record(journal, owner: 6, seed, into: &written)
            }
            journal.flush()
        }
        try batch(0..<10)
        #expect(eventually { reports.durable == LSN(10) })
        disk.counts.withLock { $0.failingSyncs = 1 }
        try batch(10..<15)
        #expect(eventually { reports.durable == LSN(15) })
        #expect(reports.failures.map(\.notDurable) == [LSN(11)...LSN(15)])
        #expect(journal.segmentNames == [Self.first, "00000000000000000011.journal"])
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(32 + 10 * Self.record))
        try batch(15..<25)
        #expect(eventually { reports.durable == LSN(25) })
        // The two batches before the failure were stored in the mapping; the segment the
        // rewrite made is written with write(2) (its space was not reserved and mapped).
        #expect(journal.statistics.mappedWrites == 2, "\(journal.statistics)")
        try expectEveryRecord(
            written, afterCrashOf: journal, at: path, copy: "mapped-failure-crashed", options: options)
    }

    @Test(
        "A batch reaching past the mapped space is written with write(2) right after the mapped records; the next segment is mapped again",
        .enabled(if: Self.mapsSegments, "segments are mapped on ext4 and XFS only"))
    func batchPastTheMapping() throws {
        let path = directory.sub("past")
        let options = JournalOptions(segmentSize: 4096)
        let (journal, _, _) = try openJournal(path, options: options)
        var written: [Replayed] = []
        // 20 records a batch (2,480 bytes): the first fits in the 4,096 mapped bytes, the
        // second does not (the segment grows to 4,992), the third starts a new segment.
        for batch in 0..<3 {
            for i in 0..<20 {
                let seed = batch * 20 + i
                try record(journal, owner: 1, seed, into: &written)
            }
            journal.flush()
        }
        let figures = journal.statistics
        #expect(figures.writes == 3 && figures.mappedWrites == 2, "\(figures)")
        #expect(try Disk.status(path + "/" + Self.first).size == Int64(32 + 40 * Self.record))
        try expectEveryRecord(written, afterCrashOf: journal, at: path, copy: "past-crashed", options: options)
    }
}
