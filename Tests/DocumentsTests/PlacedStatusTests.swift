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

    @Test(
        "A package's is that of the directory the write left, in place or swapped in, with or without interference",
        arguments: [false, true])
    func package(atomic: Bool) throws {
        let path = directory.sub(atomic ? "atomic.package" : "in-place.package")
        let options: FileWrapper.WritingOptions = atomic ? [.atomic] : []
        func package(_ text: String) -> FileWrapper {
            FileWrapper(directoryWithFileWrappers: ["a.txt": FileWrapper(regularFileWithContents: Data(text.utf8))])
        }
        try DurableWriter().write(package("one"), to: path, options: options)
        let plain = try #require(try DurableWriter().write(package("two"), to: path, options: options).placed)
        let now = try Disk.status(path)
        #expect(plain.kind == .directory)
        #expect(plain.device == now.device && plain.inode == now.inode)
        #expect(plain.modified == now.modified && plain.changed == now.changed)

        // Another program moves the package aside and puts its own directory there, in
        // the moment after this write is done with it.
        let theirs = directory.sub(atomic ? "theirs-atomic" : "theirs-in-place")
        try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: false)
        var writer = DurableWriter()
        writer.afterRename = { destination in
            _ = rename(destination, destination + ".aside")
            _ = rename(theirs, destination)
        }
        let placed = try #require(try writer.write(package("three"), to: path, options: options).placed)
        let found = try Disk.status(path)
        let written = try Disk.status(path + ".aside")
        #expect(try Disk.bytes(path + ".aside/a.txt") == Data("three".utf8))
        // Recorded as this write's, their directory would be updated in place by the next
        // save, unseen; by its own descriptor it is the directory this write left.
        #expect(placed.inode == written.inode)
        #expect(placed.inode != found.inode)
    }
}
