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
