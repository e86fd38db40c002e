import Foundation
import Journal
import Posix
import TestSupport
import Testing

/// Directories the journal fuzz target (Fuzz/Sources/FuzzJournal) found replay trapping on.
@Suite("Fuzz finds: journal replay")
final class JournalFuzzRegressionTests {
    let directory = TemporaryDirectory("journal-fuzz")

    @Test(
        "A file named for an LSN near 2^64 is not a segment: replay goes on instead of trapping on an overflow",
        arguments: ["18446744073709551615.journal", "18446744073709551614.journal", "04611686018427387905.journal"])
    func baseNearTheTop(name: String) throws {
        let path = directory.sub(name)
        let written = try writeRecords(path, count: 3)
        // As found: a damaged header under that name made replay start at highest.next, past UInt64.max.
        try Bytes.write(Array(repeating: 0xA5, count: 40), to: path + "/" + name)
        let (journal, report, records) = try openJournal(path, pin: true)
        #expect(records == written)
        #expect(report.isClean, "\(report)")
        let lsn = try journal.append(owner: 9, payload: [1, 2, 3])
        #expect(lsn.rawValue == 4)
        #expect(journal.close() == nil)
        let (again, _, replayed) = try openJournal(path, pin: true)
        #expect(replayed == written + [Replayed(lsn: 4, owner: 9, payload: [1, 2, 3])])
        #expect(again.close() == nil)
    }

    @Test(
        "A valid segment numbered at the limit (2^62): the journal does not start rather than write a segment it would not read"
    )
    func segmentAtTheLimit() throws {
        // As found: the record appended after replay went to segment 2^62 + 1, whose name the
        // next replay does not take for a segment, and was lost.
        let path = directory.sub("limit")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        let base: UInt64 = 1 << 62
        var header = Array("ASJOURNL".utf8)
        for value in [UInt32(1), UInt32(32)] { header += withUnsafeBytes(of: value.littleEndian, Array.init) }
        header += withUnsafeBytes(of: base.littleEndian, Array.init) + [0, 0, 0, 0]
        header += withUnsafeBytes(of: CRC32C.checksum(of: header).littleEndian, Array.init)
        var body =
            withUnsafeBytes(of: base.littleEndian, Array.init) + withUnsafeBytes(of: UInt64(5).littleEndian, Array.init)
        body += [1, 2, 3]
        let length = withUnsafeBytes(of: UInt32(body.count).littleEndian, Array.init)
        let crc = CRC32C.checksum(of: body, continuing: CRC32C.checksum(of: length))
        let name = "0\(base).journal"
        #expect(name.count == 28)
        let segment = header + length + withUnsafeBytes(of: crc.littleEndian, Array.init) + body
        try Bytes.write(segment, to: path + "/" + name)

        let journal = try Journal(directory: path)
        var delivered: [Replayed] = []
        #expect(throws: JournalFailure(.open, path: path, errno: .valueTooLarge)) {
            try journal.replay { record in
                delivered.append(
                    Replayed(lsn: record.lsn.rawValue, owner: record.owner, payload: Array(record.payload)))
            }
        }
        #expect(delivered == [Replayed(lsn: base, owner: 5, payload: [1, 2, 3])])
        _ = journal.close()
        // Nothing was cut or set aside.
        #expect(try Bytes.read(path + "/" + name) == segment)
        #expect(try segmentFiles(path) == [name])
    }

    @Test(
        "A damaged file named inside a valid segment's LSNs: the records replay delivered from the valid one survive the next start"
    )
    func damagedSegmentNamedInsideAnother() throws {
        // As found (FuzzJournal, 504,179 executions in): segment 1 held LSNs 1–3, LSN 1 not
        // delivered (here: released), and a damaged file was named for LSN 2. Replay
        // delivered 2 and 3 from segment 1, but the journal took a segment's LSNs to start
        // at its name, so it counted them as the damaged file's; segment 1, with nothing
        // counted, was deleted as obsolete at start, and the next replay lost them.
        let path = directory.sub("inside")
        let (writer, _, _) = try openJournal(path)
        let first = try writer.append(owner: 5, payload: payload(0))
        var written: [Replayed] = []
        for i in 1...2 {
            let lsn = try writer.append(owner: 1, payload: payload(i))
            written.append(Replayed(lsn: lsn.rawValue, owner: 1, payload: payload(i)))
        }
        writer.flush()
        writer.release(owner: 5, through: first)
        writer.flush()
        #expect(writer.close() == nil)
        #expect(written.map(\.lsn) == [2, 3])
        #expect(try segmentFiles(path) == ["00000000000000000001.journal"])
        try Bytes.write(Array(repeating: 0x5A, count: 250), to: path + "/00000000000000000002.journal")
        let (journal, report, records) = try openJournal(path, pin: true)
        #expect(records == written)
        #expect(!report.isClean, "the damaged file is reported")
        let lsn = try journal.append(owner: 9, payload: [1, 2, 3])
        journal.flush()
        #expect(journal.close() == nil)
        #expect(try segmentFiles(path).contains("00000000000000000001.journal"))
        let (again, _, replayed) = try openJournal(path, pin: true)
        #expect(replayed == written + [Replayed(lsn: lsn.rawValue, owner: 9, payload: [1, 2, 3])])
        // Released, the records let their segment go as before.
        again.release(owner: 1, through: LSN(3))
        again.flush()
        #expect(again.close() == nil)
    }

    @Test("A release mark naming an LSN past its own does not release the records a later run writes for that owner")
    func markPastItself() throws {
        // As found (FuzzJournal, 1,032,640 executions in): a mark of owner 7 "through" an
        // LSN far ahead of the journal; after a restart the owner's next record (LSN 49)
        // was at or below it, so the next replay took it for released and lost it.
        let path = directory.sub("mark")
        let markLSN = UInt64(3)
        let far = UInt64(1) << 40
        var body =
            withUnsafeBytes(of: UInt64(1).littleEndian, Array.init)
            + withUnsafeBytes(of: UInt64(5).littleEndian, Array.init) + [0x61]
        var records = [body]
        body =
            withUnsafeBytes(of: UInt64(2).littleEndian, Array.init)
            + withUnsafeBytes(of: UInt64(6).littleEndian, Array.init) + [0x62]
        records.append(body)
        body =
            withUnsafeBytes(of: markLSN.littleEndian, Array.init)
            + withUnsafeBytes(of: UInt64.max.littleEndian, Array.init)
        body +=
            withUnsafeBytes(of: UInt64(7).littleEndian, Array.init) + withUnsafeBytes(of: far.littleEndian, Array.init)
        records.append(body)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        var header = Array("ASJOURNL".utf8)
        for value in [UInt32(1), UInt32(32)] { header += withUnsafeBytes(of: value.littleEndian, Array.init) }
        header += withUnsafeBytes(of: UInt64(1).littleEndian, Array.init) + [0, 0, 0, 0]
        header += withUnsafeBytes(of: CRC32C.checksum(of: header).littleEndian, Array.init)
        var segment = header
        for record in records {
            let length = withUnsafeBytes(of: UInt32(record.count).littleEndian, Array.init)
            let crc = CRC32C.checksum(of: record, continuing: CRC32C.checksum(of: length))
            segment += length + withUnsafeBytes(of: crc.littleEndian, Array.init) + record
        }
        try Bytes.write(segment, to: path + "/00000000000000000001.journal")

        let (journal, report, first) = try openJournal(path, pin: true)
        #expect(report.isClean, "\(report)")
        #expect(first == [Replayed(lsn: 1, owner: 5, payload: [0x61]), Replayed(lsn: 2, owner: 6, payload: [0x62])])
        let lsn = try journal.append(owner: 7, payload: [7])
        #expect(lsn.rawValue == markLSN + 1)
        journal.flush()
        #expect(journal.close() == nil)
        let (again, _, second) = try openJournal(path, pin: true)
        #expect(second == first + [Replayed(lsn: lsn.rawValue, owner: 7, payload: [7])])
        #expect(again.close() == nil)
    }

    @Test("release(owner:through:) with an LSN past the last record writes a mark that covers only what was written")
    func releasePastTheEnd() throws {
        let path = directory.sub("release")
        let (journal, _, _) = try openJournal(path)
        let first = try journal.append(owner: 7, payload: [1])
        // Another owner's record keeps the segment (and the mark in it) from being deleted.
        let kept = try journal.append(owner: 8, payload: [8])
        journal.flush()
        journal.release(owner: 7, through: LSN(UInt64(1) << 40))
        journal.flush()
        #expect(journal.close() == nil)
        let other = Replayed(lsn: kept.rawValue, owner: 8, payload: [8])
        let (reopened, _, replayed) = try openJournal(path, pin: true)
        #expect(replayed == [other], "the record before the mark is released")
        let later = try reopened.append(owner: 7, payload: [2])
        #expect(later > first)
        reopened.flush()
        #expect(reopened.close() == nil)
        let (last, _, delivered) = try openJournal(path, pin: true)
        #expect(delivered == [other, Replayed(lsn: later.rawValue, owner: 7, payload: [2])])
        #expect(last.close() == nil)
    }

    func writeRecords(_ path: String, count: Int) throws -> [Replayed] {
        let (journal, _, _) = try openJournal(path)
        var written: [Replayed] = []
        for i in 0..<count {
            let lsn = try journal.append(owner: 1, payload: payload(i))
            written.append(Replayed(lsn: lsn.rawValue, owner: 1, payload: payload(i)))
        }
        journal.flush()
        #expect(journal.close() == nil)
        return written
    }
}
