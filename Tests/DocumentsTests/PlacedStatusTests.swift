import Foundation
import Posix
import TestSupport
import Testing

@testable import Documents

@Suite("DurableWriter: the status of the file a write put in place")
struct PlacedStatusTests {
    let directory = TemporaryDirectory("placed")

    @Test("Without interference, the report's status is that of the file at the destination")
    func plain() throws {
        let path = directory.sub("a.txt")
        try DurableWriter().write(contents: Data("one".utf8), to: path)
        let report = try DurableWriter().write(contents: Data("second".utf8), to: path)
        let placed = try #require(report.placed)
        let now = try Disk.status(path)
        #expect(placed.device == now.device && placed.inode == now.inode)
        #expect(placed.size == 6 && now.size == 6)
        #expect(placed.modified == now.modified)
        // Taken after the rename, which changes the change time.
        #expect(placed.changed == now.changed)
    }

    @Test("It is the written file's, even when another program replaces it right after the rename")
    func replacedAfterRename() throws {
        let path = directory.sub("b.txt")
        try DurableWriter().write(contents: Data("one".utf8), to: path)
        let other = directory.sub("other.tmp")
        let theirs = Data("another program's version".utf8)
        var writer = DurableWriter()
        writer.afterRename = { destination in
            // Another program saving by rename, in the moment after this write's rename.
            try? theirs.write(to: URL(fileURLWithPath: other))
            _ = rename(other, destination)
        }
        let report = try writer.write(FileWrapper(regularFileWithContents: Data("two".utf8)), to: path)
        let placed = try #require(report.placed)
        let now = try Disk.status(path)
        #expect(try Disk.bytes(path) == theirs)
        // What a caller records as its own is its file, not theirs: their change stays
        // theirs (a fingerprint of it would let the next save overwrite it unseen).
        #expect(placed.size == 3)
        #expect(placed.inode != now.inode)
        #expect(now.size == Int64(theirs.count))
    }
}
