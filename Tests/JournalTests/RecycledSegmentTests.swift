import Foundation
import Journal
import Posix
import TestSupport
import Testing

/// Obsolete segments are kept under a spare name and made the next segments: the file, its
/// blocks and its cached pages are reused, and its earlier records lie past the new ones
/// until written over. Replay must deliver exactly the new records, and still tell a torn
/// or damaged record from the end.
@Suite("Journal segments recycled")
final class RecycledSegmentTests {
    let directory = TemporaryDirectory("journal-recycled")
    static let segmentSize = 64 << 10
    /// 100-byte payloads: 124 bytes a record.
    static let record = 124

    /// `mapped: false` takes the `write(2)` path through a fault-free `FaultyDisk`: the
    /// journal maps segments only with the system's own I/O, and this file system (ext4)
    /// would always be mapped otherwise; nothing is injected.
    func options(mapped: Bool = true) -> JournalOptions {
        JournalOptions(
            mode: .always, segmentSize: Self.segmentSize, recycleWithin: 1 << 20,
            io: mapped ? .system : FaultyDisk(mapsSegments: false).io)
    }

    /// What ``recycledSegment(_:mapped:)`` leaves: an open journal whose last segment was
    /// made from a spare and holds three records.
    struct Recycled {
        var journal: Journal
        /// Owner 2's records, in order: in the segment before the recycled one, then the
        /// three in it.
        var written: [Replayed]
        var name: String
        /// The recycled file's bytes as they were while it was a spare.
        var before: [UInt8]
        var inodesBefore: Set<UInt64>
    }

    /// Owner 1 fills four segments, all released: the full ones become spares. Owner 2's
    /// records (one flush each) then fill the current segment and go on into one made from
    /// a spare, three records into it.
    func recycledSegment(_ path: String, mapped: Bool = true) throws -> Recycled {
        let (journal, _, _) = try openJournal(path, options: options(mapped: mapped))
        var last = LSN.zero
        for i in 0..<(Self.segmentSize / Self.record * 3 + 100) {
            last = try journal.append(owner: 1, payload: payload(i))
            if i % 10 == 9 { journal.flush() }
        }
        journal.flush()
        #expect(journal.statistics.segments == 4)
        let inodes = Set(try segmentFiles(path).map { try Disk.inode(path + "/" + $0) })
        journal.release(owner: 1, through: last)
        journal.flush()
        #expect(eventually { journal.statistics.spareSegments == 3 }, "\(journal.statistics)")
        let spares = try Disk.names(in: path).filter { $0.hasPrefix(".spare-") }
        #expect(spares.count == 3, "\(spares)")
        var before: [UInt64: [UInt8]] = [:]
        for spare in spares {
            let inode = try Disk.inode(path + "/" + spare)
            #expect(inodes.contains(inode), "a spare is the file of an obsolete segment")
            before[inode] = try Bytes.read(path + "/" + spare)
        }

        var written: [Replayed] = []
        var seed = 10_000
        func add() throws {
            let lsn = try journal.append(owner: 2, payload: payload(seed))
            written.append(Replayed(lsn: lsn.rawValue, owner: 2, payload: payload(seed)))
            seed += 1
            journal.flush()
        }
        while journal.statistics.segmentsRecycled == 0 { try add() }
        try add()
        try add()
        #expect(journal.statistics.segmentsRecycled == 1)
        #expect(journal.statistics.spareSegments == 2)
        let name = try #require(try segmentFiles(path).last)
        #expect(name == SegmentFormatName.of(LSN(written[written.count - 3].lsn)))
        let inode = try Disk.inode(path + "/" + name)
        let old = try #require(before[inode], "the new segment is one of the spares' files")
        return Recycled(journal: journal, written: written, name: name, before: old, inodesBefore: inodes)
    }

    /// A recycled segment made in `name` (``recycledSegment(_:mapped:)``), and crash copies
    /// of its directory, one per suffix; the journal is closed after.
    func crashCopies(_ name: String, _ suffixes: [String]) throws -> (Recycled, [String]) {
        let path = directory.sub(name)
        let recycled = try recycledSegment(path)
        let copies = suffixes.map { directory.sub("\(name)-\($0)") }
        for copy in copies { try crashCopy(path, copy) }
        recycled.journal.close()
        return (recycled, copies)
    }

    /// The segment files as a crash leaves them (spares are not segments: replay deletes them).
    func crashCopy(_ source: String, _ destination: String) throws {
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: false)
        for name in try segmentFiles(source) {
            try Bytes.write(try Bytes.read(source + "/" + name), to: destination + "/" + name)
        }
    }

    @Test(
        "A released full segment is kept as a spare and made the next segment: the same file, no new one; a clean close deletes the spares"
    )
    func spareBecomesNextSegment() throws {
        let path = directory.sub("reuse")
        let recycled = try recycledSegment(path)
        let journal = recycled.journal
        #expect(try Disk.status(path + "/" + recycled.name).size >= Int64(Self.segmentSize))
        // Owner 2 fills the recycled segment: the next ones come from the other two spares.
        let more = Self.segmentSize / Self.record * 2 + 50
        for i in 0..<more {
            _ = try journal.append(owner: 2, payload: payload(i))
            if i % 10 == 9 { journal.flush() }
        }
        journal.flush()
        #expect(journal.statistics.segmentsRecycled == 3)
        #expect(journal.statistics.spareSegments == 0)
        let inodes = Set(try segmentFiles(path).map { try Disk.inode(path + "/" + $0) })
        #expect(inodes == recycled.inodesBefore, "every segment file is one of the four the run began with")
        #expect(journal.close() == nil)
        #expect(try Disk.names(in: path).filter { $0.hasPrefix(".spare-") }.isEmpty)
        let (again, report, records) = try openJournal(path, options: options())
        #expect(records.count == recycled.written.count + more)
        #expect(Array(records.prefix(recycled.written.count)) == recycled.written)
        #expect(report.isClean, "\(report)")
        again.close()
    }

    @Test(
        "After a crash, replay of a recycled segment delivers exactly its new records: the earlier records past them are never delivered, nothing is reported",
        arguments: [true, false])
    func crashInRecycledSegment(mapped: Bool) throws {
        let path = directory.sub("crash-\(mapped)")
        let recycled = try recycledSegment(path, mapped: mapped)
        let crashed = directory.sub("crash-\(mapped)-copy")
        try crashCopy(path, crashed)
        recycled.journal.close()
        let bytes = try Bytes.read(crashed + "/" + recycled.name)
        let end = 32 + 3 * Self.record
        #expect(bytes[end..<(end + 4)].allSatisfy { $0 == 0 }, "a zero record length after the records")
        #expect(bytes[(end + 4)...].contains { $0 != 0 }, "the earlier records are still there past it")
        #expect(bytes.count >= Self.segmentSize)

        let (again, report, records) = try openJournal(crashed, options: options(mapped: mapped), pin: true)
        #expect(records == recycled.written)
        #expect(report.isClean, "\(report)")
        #expect(try Disk.status(crashed + "/" + recycled.name).size == Int64(end), "given back as the run starts")
        again.close()
    }

    @Test(
        "In a recycled segment a torn last record is cut as a torn tail, and a zero length with a later record beyond it is damage"
    )
    func damageInRecycledSegment() throws {
        let (recycled, copies) = try crashCopies("damage", ["torn", "zeroed"])
        let (torn, zeroed) = (copies[0], copies[1])
        let third = 32 + 2 * Self.record

        var bytes = try Bytes.read(torn + "/" + recycled.name)
        bytes[third + 60] ^= 0x10
        try Bytes.write(bytes, to: torn + "/" + recycled.name)
        let (a, reportA, recordsA) = try openJournal(torn, options: options(), pin: true)
        #expect(recordsA == Array(recycled.written.dropLast()))
        #expect(reportA.problems.count == 1, "\(reportA)")
        if case .tornTail = reportA.problems.first?.kind {} else { Issue.record("\(reportA)") }
        #expect(reportA.problems.first?.offset == third)
        a.close()

        bytes = try Bytes.read(zeroed + "/" + recycled.name)
        let second = 32 + Self.record
        for i in 0..<4 { bytes[second + i] = 0 }
        try Bytes.write(bytes, to: zeroed + "/" + recycled.name)
        let size = bytes.count
        let (b, reportB, recordsB) = try openJournal(zeroed, options: options(), pin: true)
        #expect(recordsB == Array(recycled.written.dropLast(2)))
        #expect(
            reportB.problems == [
                JournalProblem(
                    kind: .badRecord(.badLength(0), skippedOwners: [2]), segment: recycled.name, offset: second)
            ], "\(reportB)")
        #expect(try Disk.status(zeroed + "/" + recycled.name).size == Int64(size), "kept whole for inspection")
        b.close()
    }

    @Test(
        "A recycled segment whose new header never reached the disk (its old header, or zeros, then its old records) is cut as a segment cut in its header, not reported as bad"
    )
    func recycledHeaderNotOnDisk() throws {
        let (recycled, copies) = try crashCopies("header", ["old", "zeros"])
        let (old, zeros) = (copies[0], copies[1])
        let base = LSN(recycled.written[recycled.written.count - 3].lsn)
        try Bytes.write(recycled.before, to: old + "/" + recycled.name)
        var zeroed = recycled.before
        for i in 0..<32 { zeroed[i] = 0 }
        try Bytes.write(zeroed, to: zeros + "/" + recycled.name)
        for crashed in [old, zeros] {
            let (journal, report, records) = try openJournal(crashed, options: options(), pin: true)
            #expect(records == Array(recycled.written.dropLast(3)), "nothing of the recycled segment was synced")
            #expect(
                report.problems == [
                    JournalProblem(
                        kind: .tornTail(bytesDropped: recycled.before.count), segment: recycled.name, offset: 0)
                ], "\(report)")
            #expect(try journal.append(owner: 3, payload: [1]) == base)
            journal.close()
        }
    }

    @Test(
        "Two spares are kept, more only while records and spares stay within recycleWithin; past it an obsolete segment is deleted; 0 deletes every one"
    )
    func withinLimit() throws {
        for (limit, spares) in [(1, 2), (3 * Self.segmentSize + 1024, 2), (4 * Self.segmentSize, 3), (0, 0)] {
            let path = directory.sub("limit-\(limit)")
            let options = JournalOptions(mode: .always, segmentSize: Self.segmentSize, recycleWithin: limit)
            let (journal, _, _) = try openJournal(path, options: options)
            var last = LSN.zero
            for i in 0..<(Self.segmentSize / Self.record * 3 + 100) {
                last = try journal.append(owner: 1, payload: payload(i))
                if i % 10 == 9 { journal.flush() }
            }
            journal.flush()
            journal.release(owner: 1, through: last)
            journal.flush()
            // Three full segments released (a little over the segment size each), the
            // current one holding about 12 KiB. The sync thread takes the segments off its
            // list first and counts the spares once their new names are synced.
            #expect(
                eventually { journal.statistics.segments == 1 && journal.statistics.spareSegments == spares },
                "limit \(limit): \(journal.statistics.segments) segments, \(journal.statistics.spareSegments) spares")
            #expect(try Disk.names(in: path).filter { $0.hasPrefix(".spare-") }.count == spares)
            journal.close()
        }
    }

    @Test("Spares a killed run left are deleted at the next start")
    func leftoverSparesDeleted() throws {
        let path = directory.sub("leftover")
        let recycled = try recycledSegment(path)
        let crashed = directory.sub("leftover-copy")
        try crashCopy(path, crashed)
        for spare in try Disk.names(in: path).filter({ $0.hasPrefix(".spare-") }) {
            try Bytes.write(try Bytes.read(path + "/" + spare), to: crashed + "/" + spare)
        }
        recycled.journal.close()
        #expect(try Disk.names(in: crashed).filter { $0.hasPrefix(".spare-") }.count == 2)
        let (journal, report, records) = try openJournal(crashed, options: options(), pin: true)
        #expect(records == recycled.written)
        #expect(report.isClean, "\(report)")
        #expect(try Disk.names(in: crashed).filter { $0.hasPrefix(".spare-") }.isEmpty)
        journal.close()
    }
}

/// A segment's file name, as the journal gives it: its base LSN in 20 digits.
enum SegmentFormatName {
    static func of(_ base: LSN) -> String {
        let digits = String(base.rawValue)
        return String(repeating: "0", count: 20 - digits.count) + digits + ".journal"
    }
}
