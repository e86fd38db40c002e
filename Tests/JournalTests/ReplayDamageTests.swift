import Foundation
import Journal
import Posix
import TestSupport
import Testing

/// Journals damaged the ways crashes and disks damage them: each gives a report naming the
/// segment and offset, and nothing wrong is delivered.
@Suite("Journal replay of damaged segments")
final class ReplayDamageTests {
    let directory = TemporaryDirectory("journal-damage")
    static let first = "00000000000000000001.journal"
    static let record = 100 + 24

    /// Writes `count` records of 100 bytes (owner = index % 4 + 1) and closes.
    func writeRecords(_ path: String, count: Int, segmentSize: Int = 16 << 20, perFlush: Int = 1) throws -> [Replayed] {
        let (journal, _, _) = try openJournal(path, options: JournalOptions(segmentSize: segmentSize))
        var written: [Replayed] = []
        for i in 0..<count {
            let owner = UInt64(i % 4 + 1)
            let lsn = try journal.append(owner: owner, payload: payload(i))
            written.append(Replayed(lsn: lsn.rawValue, owner: owner, payload: payload(i)))
            if i % perFlush == perFlush - 1 { journal.flush() }
        }
        #expect(journal.close() == nil)
        return written
    }

    @Test("The last record cut at every byte offset: a torn tail is reported and cut, the records before it delivered")
    func tornTailAtEveryOffset() throws {
        let original = directory.sub("original")
        let written = try writeRecords(original, count: 5)
        let bytes = try Bytes.read(original + "/" + Self.first)
        let lastStart = 32 + 4 * Self.record
        #expect(bytes.count == lastStart + Self.record)
        for cut in 0..<Self.record {
            let path = directory.sub("cut-\(cut)")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            try Bytes.write(Array(bytes[..<(lastStart + cut)]), to: path + "/" + Self.first)
            let (journal, report, records) = try openJournal(path, pin: true)
            #expect(records == Array(written[..<4]), "cut at \(cut)")
            if cut == 0 {
                #expect(report.problems.isEmpty, "\(report)")
            } else {
                #expect(
                    report.problems
                        == [JournalProblem(kind: .tornTail(bytesDropped: cut), segment: Self.first, offset: lastStart)],
                    "cut at \(cut): \(report)")
            }
            #expect(try Disk.status(path + "/" + Self.first).size == Int64(lastStart), "the tail is cut off")
            #expect(try journal.append(owner: 9, payload: [1]) == LSN(5))
            journal.close()
            let (again, report2, records2) = try openJournal(path)
            #expect(records2.count == 5 && report2.problems.isEmpty, "cut at \(cut), reopened: \(report2)")
            again.close()
        }
    }

    @Test("A last record with a bad checksum and nothing after it is a torn tail")
    func checksumFailureAtTheEnd() throws {
        let path = directory.sub("crc")
        let written = try writeRecords(path, count: 5)
        var bytes = try Bytes.read(path + "/" + Self.first)
        bytes[bytes.count - 1] ^= 0x01
        try Bytes.write(bytes, to: path + "/" + Self.first)
        let (journal, report, records) = try openJournal(path)
        #expect(records == Array(written[..<4]))
        #expect(report.problems.map(\.kind) == [.tornTail(bytesDropped: Self.record)])
        journal.close()
    }

    @Test(
        "A bit flipped in a middle record: replay stops there, names segment and offset and the owners skipped",
        arguments: [30, 2])
    func bitFlipInTheMiddle(at byte: Int) throws {
        let path = directory.sub("flip-\(byte)")
        let written = try writeRecords(path, count: 10)
        let file = path + "/" + Self.first
        var bytes = try Bytes.read(file)
        let fifth = 32 + 4 * Self.record
        bytes[fifth + byte] ^= byte == 2 ? 0x80 : 0x04  // byte 2: inside the length field
        try Bytes.write(bytes, to: file)
        let (journal, report, records) = try openJournal(path, pin: true)
        #expect(records == Array(written[..<4]), "nothing after the bad record is delivered")
        #expect(report.problems.count == 1, "\(report)")
        let problem = try #require(report.problems.first)
        #expect(problem.segment == Self.first)
        #expect(problem.offset == fifth)
        guard case .badRecord(let defect, let owners) = problem.kind else {
            Issue.record("expected a bad record, got \(problem)")
            return
        }
        #expect(defect == (byte == 2 ? .truncated : .checksumMismatch))
        #expect(owners == [1, 2, 3, 4], "the owners of records 6…10")
        #expect(!report.isClean)
        #expect(try Disk.status(file).size == Int64(bytes.count), "a damaged middle is not cut")
        #expect(try journal.append(owner: 1, payload: [0]) == LSN(11), "numbers after every LSN seen")
        journal.close()
        // Replayed again (its first records were pinned, never released), and when nothing
        // pins it, set aside rather than deleted, and never read again.
        let (again, report2, records2) = try openJournal(path)
        #expect(records2.map(\.lsn) == [1, 2, 3, 4, 11], "\(report2)")
        #expect(try Disk.names(in: path).contains(Self.first + ".damaged"))
        again.close()
        let (third, report3, records3) = try openJournal(path)
        #expect(records3.isEmpty && report3.isClean, "\(report3)")
        third.close()
    }

    /// Three or more segments of about eight records each.
    func writeSegments(_ path: String) throws -> (records: [Replayed], segments: [String]) {
        let records = try writeRecords(path, count: 40, segmentSize: 1024, perFlush: 2)
        let segments = try segmentFiles(path)
        #expect(segments.count >= 4)
        return (records, segments)
    }

    func base(_ name: String) -> UInt64 { UInt64(name.prefix(20))! }

    @Test("A segment of zeros: reported as a bad header, the others delivered, the gap reported")
    func segmentOfZeros() throws {
        let path = directory.sub("zeros")
        let (written, segments) = try writeSegments(path)
        let victim = segments[1]
        let size = try Bytes.read(path + "/" + victim).count
        try Bytes.write([UInt8](repeating: 0, count: size), to: path + "/" + victim)
        let (journal, report, records) = try openJournal(path)
        let lost = base(victim)...(base(segments[2]) - 1)
        #expect(records == written.filter { !lost.contains($0.lsn) })
        #expect(
            report.problems == [
                JournalProblem(kind: .badHeader(.zeros), segment: victim, offset: 0),
                JournalProblem(
                    kind: .missingRecords(LSN(lost.lowerBound)...LSN(lost.upperBound)), segment: segments[2], offset: 0),
            ], "\(report)")
        journal.close()
    }

    @Test("A last segment of zeros (made and reserved, then the power went before a sync) is cut as a torn tail")
    func lastSegmentOfZeros() throws {
        let path = directory.sub("zeros-last")
        let (written, segments) = try writeSegments(path)
        let victim = segments[segments.count - 1]
        try Bytes.write([UInt8](repeating: 0, count: 4096), to: path + "/" + victim)
        let (journal, report, records) = try openJournal(path)
        #expect(records == written.filter { $0.lsn < base(victim) })
        #expect(
            report.problems == [JournalProblem(kind: .tornTail(bytesDropped: 4096), segment: victim, offset: 0)])
        // Numbering goes on after the last record.
        #expect(try journal.append(owner: 1, payload: [1]).rawValue == base(victim))
        journal.close()
    }

    @Test("A missing middle segment is reported with the LSNs it held")
    func missingSegment() throws {
        let path = directory.sub("missing")
        let (written, segments) = try writeSegments(path)
        try FileManager.default.removeItem(atPath: path + "/" + segments[2])
        let (journal, report, records) = try openJournal(path)
        let lost = base(segments[2])...(base(segments[3]) - 1)
        #expect(records == written.filter { !lost.contains($0.lsn) })
        #expect(
            report.problems == [
                JournalProblem(
                    kind: .missingRecords(LSN(lost.lowerBound)...LSN(lost.upperBound)), segment: segments[3], offset: 0)
            ], "\(report)")
        #expect(report.description.contains(segments[3]))
        journal.close()
    }

    @Test("A bad record in a segment that is not the last stops that segment only")
    func badRecordInAnEarlierSegment() throws {
        let path = directory.sub("early")
        let (written, segments) = try writeSegments(path)
        let file = path + "/" + segments[0]
        var bytes = try Bytes.read(file)
        let third = 32 + 2 * Self.record
        bytes[third + 40] ^= 0xFF
        try Bytes.write(bytes, to: file)
        let (journal, report, records) = try openJournal(path)
        let lost = UInt64(3)...(base(segments[1]) - 1)
        #expect(records == written.filter { !lost.contains($0.lsn) })
        #expect(report.problems.count == 1)
        #expect(report.problems.first?.segment == segments[0])
        #expect(report.problems.first?.offset == third)
        journal.close()
    }

    @Test("A torn segment header of the last segment (a crash right after creating it) is dropped")
    func tornHeader() throws {
        let path = directory.sub("torn-header")
        let written = try writeRecords(path, count: 3)
        try Bytes.write(Array("ASJOU".utf8), to: path + "/00000000000000000004.journal")
        let (journal, report, records) = try openJournal(path)
        #expect(records == written)
        #expect(report.problems.map(\.kind) == [.tornTail(bytesDropped: 5)])
        #expect(try journal.append(owner: 1, payload: [1]) == LSN(4))
        journal.close()
    }
}

/// Segments as a rewrite after a failure leaves them: the old segment still holds (part
/// of) the records the next one holds again.
@Suite("Journal replay of rewritten segments")
final class ReplayOverlapTests {
    let directory = TemporaryDirectory("journal-overlap")

    static func header(base: UInt64) -> [UInt8] {
        var bytes = Array("ASJOURNL".utf8)
        for value in [UInt32(1), UInt32(32)] { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        withUnsafeBytes(of: base.littleEndian) { bytes += $0 }
        withUnsafeBytes(of: UInt32(0)) { bytes += $0 }
        withUnsafeBytes(of: CRC32C.checksum(of: bytes).littleEndian) { bytes += $0 }
        return bytes
    }

    /// One segment of 15 records, and a second one (base 11) holding records 11…15 again.
    func overlapping(_ path: String) throws -> [Replayed] {
        let (journal, _, _) = try openJournal(path)
        var written: [Replayed] = []
        for i in 0..<15 {
            let lsn = try journal.append(owner: 7, payload: payload(i))
            written.append(Replayed(lsn: lsn.rawValue, owner: 7, payload: payload(i)))
        }
        journal.flush()
        #expect(journal.close() == nil)
        let old = try Bytes.read(path + "/00000000000000000001.journal")
        let tail = old[(32 + 10 * 124)...]
        try Bytes.write(Self.header(base: 11) + tail, to: path + "/00000000000000000011.journal")
        return written
    }

    @Test("Records present in two segments are delivered once")
    func duplicatesOnce() throws {
        let path = directory.sub("dup")
        let written = try overlapping(path)
        let (journal, report, records) = try openJournal(path)
        #expect(records == written)
        #expect(report.problems.isEmpty, "\(report)")
        #expect(try journal.append(owner: 7, payload: [0]) == LSN(16))
        journal.close()
    }

    @Test("A damaged tail that the next segment rewrote is superseded, not damage")
    func supersededTail() throws {
        let path = directory.sub("superseded")
        let written = try overlapping(path)
        let file = path + "/00000000000000000001.journal"
        var old = try Bytes.read(file)
        old[32 + 12 * 124 + 50] ^= 0x10
        try Bytes.write(old, to: file)
        let (journal, report, records) = try openJournal(path)
        #expect(records == written)
        #expect(
            report.problems == [
                JournalProblem(
                    kind: .supersededTail(bytes: 3 * 124), segment: "00000000000000000001.journal",
                    offset: 32 + 12 * 124)
            ], "\(report)")
        #expect(report.isClean)
        journal.close()
    }
}
