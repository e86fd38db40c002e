import Foundation
import Posix
import TestSupport
import Testing

@testable import Journal

@Suite("Journal: the label kept beside the segments")
struct JournalLabelTests {
    @Test(
        "A label written is read back by the next open, replaced whole, and never taken for a segment; a directory's segments are found before opening it and removed once released"
    )
    func label() throws {
        let directory = TemporaryDirectory("journal-label")
        let path = directory.sub("j")
        #expect(!Journal.hasSegments(in: path), "no directory: nothing left")
        do {
            let (journal, _, _) = try openJournal(path)
            #expect(try journal.readLabel() == nil)
            try journal.writeLabel("device 1\ninode 2\nroot /a\nb")
            var log = JournalOwnerLog()
            _ = try journal.append(owner: 7, payload: payload(1), log: &log)
            journal.flush()
            #expect(journal.close() == nil)
        }
        #expect(Journal.hasSegments(in: path))
        do {
            let (journal, report, records) = try openJournal(path)
            #expect(report.isClean, "\(report)")
            #expect(records.count == 1)
            #expect(try journal.readLabel() == "device 1\ninode 2\nroot /a\nb")
            try journal.writeLabel("x")
            #expect(try journal.readLabel() == "x")
            #expect(try Disk.names(in: path).filter { $0.contains("label") } == ["label"], "no temporary left")
            #expect(journal.close(removingSegments: true) == nil)
        }
        #expect(!Journal.hasSegments(in: path))
        #expect(try Disk.names(in: path) == ["label"])
        let (journal, report, records) = try openJournal(path)
        #expect(records.isEmpty && report.isClean, "\(report)")
        #expect(try journal.readLabel() == "x")
        _ = journal.close()
    }
}
