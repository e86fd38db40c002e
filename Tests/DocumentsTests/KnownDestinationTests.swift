import Foundation
import Posix
import TestSupport
import Testing

@testable import Documents

@Suite("DurableWriter: a destination known to the caller")
struct KnownDestinationTests {
    let directory = TemporaryDirectory("known")
    // The writes given what to expect refuse symbolic links: only such a writer skips the
    // look before the write (one that follows links must look to know where to write).

    @Test("A file's recorded status gives the new file its mode; the file is replaced")
    func recordedStatus() throws {
        let path = directory.sub("a.txt")
        try DurableWriter().write(contents: Data("one".utf8), to: path)
        #expect(chmod(path, 0o640) == 0)
        let recorded = try Disk.status(path)
        let report = try DurableWriter(symlinkPolicy: .refuse).write(
            FileWrapper(regularFileWithContents: Data("two".utf8)), to: path, expecting: .status(recorded))
        #expect(try Disk.bytes(path) == Data("two".utf8))
        #expect(try Disk.status(path).permissions.rawValue == 0o640)
        #expect(report.placed?.permissions.rawValue == 0o640)
    }

    @Test("A file changed since its status was recorded (a chmod: only the change time says so) is not replaced")
    func changedSinceRecorded() throws {
        let path = directory.sub("b.txt")
        try DurableWriter().write(contents: Data("one".utf8), to: path)
        let recorded = try Disk.status(path)
        #expect(chmod(path, 0o600) == 0)
        #expect(throws: DestinationChanged.self) {
            try DurableWriter(symlinkPolicy: .refuse).write(
                FileWrapper(regularFileWithContents: Data("two".utf8)), to: path, expecting: .status(recorded))
        }
        #expect(try Disk.bytes(path) == Data("one".utf8))
        #expect(try Disk.status(path).permissions.rawValue == 0o600)
        #expect(try leftovers().isEmpty, "the temporary is removed")
    }

    @Test("Nothing expected, another program's file there: not replaced")
    func absentButFile() throws {
        let path = directory.sub("new.txt")
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: DestinationChanged.self) {
            try DurableWriter(confinedTo: directory.path).write(
                FileWrapper(regularFileWithContents: Data("mine".utf8)), to: path, expecting: .absent)
        }
        #expect(try Disk.bytes(path) == Data("theirs".utf8))
        #expect(try leftovers().isEmpty, "the temporary is removed")
    }

    @Test(
        "A directory or a symbolic link in the way, however the destination is known, is an error naming it, as it is when looked at first",
        arguments: ["directory", "link"], [false, true])
    func obstacle(kind: String, known: Bool) throws {
        let path = directory.sub("\(kind)-\(known)")
        let writer = DurableWriter(symlinkPolicy: .refuse, confinedTo: directory.path)
        try writer.write(contents: Data("one".utf8), to: path)
        let recorded = try Disk.status(path)
        try FileManager.default.removeItem(atPath: path)
        if kind == "directory" {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        } else {
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "elsewhere")
        }
        let before = try FileDescriptor.currentWorkingDirectory.status(of: path)
        do {
            try writer.write(
                FileWrapper(regularFileWithContents: Data("mine".utf8)), to: path,
                expecting: known ? .status(recorded) : .absent)
            Issue.record("the write went through")
        } catch let error as DocumentError {
            #expect(error.errno == (kind == "directory" ? .isDirectory : .tooManySymbolicLinks), "\(error)")
        }
        let after = try FileDescriptor.currentWorkingDirectory.status(of: path)
        #expect(after.inode == before.inode && after.kind == before.kind)
        #expect(try leftovers().isEmpty, "the temporary is removed")
    }

    private func leftovers() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter(TemporaryName.isTemporary)
    }
}

@Suite("DurableWriter: a package's members changed by another program are not replaced")
struct PackageMemberChangeTests {
    let directory = TemporaryDirectory("members")

    /// A package of `a.txt`, `b.txt` and `sub/c.txt`, written, then read back as the store holds one.
    func package(_ name: String) throws -> (path: String, wrapper: FileWrapper) {
        let path = directory.sub(name)
        let built = FileWrapper(directoryWithFileWrappers: [
            "a.txt": FileWrapper(regularFileWithContents: Data("a1".utf8)),
            "b.txt": FileWrapper(regularFileWithContents: Data("b1".utf8)),
            "sub": FileWrapper(directoryWithFileWrappers: [
                "c.txt": FileWrapper(regularFileWithContents: Data("c1".utf8))
            ]),
        ])
        try DurableWriter().write(built, to: path)
        return (path, try FileWrapper(url: URL(fileURLWithPath: path), options: .immediate))
    }

    func replace(_ key: String, in directory: FileWrapper, with text: String) {
        if let old = directory.fileWrappers?[key] { directory.removeFileWrapper(old) }
        directory.addRegularFile(withContents: Data(text.utf8), preferredFilename: key)
    }

    /// Adds a member `name` whose bytes cannot be read (read lazily from a file removed
    /// since): its write fails, after the members written before it.
    func addUnreadable(_ name: String, to wrapper: FileWrapper) throws -> FileWrapper {
        let gone = directory.sub("gone-" + name)
        try Data("lazy".utf8).write(to: URL(fileURLWithPath: gone))
        let unreadable = try FileWrapper(url: URL(fileURLWithPath: gone))
        #expect(unlink(gone) == 0)
        unreadable.preferredFilename = name
        wrapper.addFileWrapper(unreadable)
        return unreadable
    }

    func writeInPlace(_ wrapper: FileWrapper, to path: String) throws {
        try DurableWriter(symlinkPolicy: .refuse).write(
            wrapper, to: path, expecting: ExpectedDestination(try Disk.status(path)))
    }

    @Test(
        "A member rewritten in place, renamed over, removed or created by another program before the save: nothing in its directory is written, the error names it",
        arguments: ["in place", "renamed over", "removed", "created"])
    func changedBeforeTheSave(change: String) throws {
        let (path, wrapper) = try package(change.replacingOccurrences(of: " ", with: "-"))
        replace("a.txt", in: wrapper, with: "a2")
        replace("b.txt", in: wrapper, with: "b2")
        replace("new.txt", in: wrapper, with: "n2")
        let theirs: String
        switch change {
        case "in place":
            // Same size; only the inode's times and contents differ.
            let fd = try FileDescriptor.open(path + "/a.txt", .writeOnly)
            try fd.writeAll(Array("AA".utf8))
            try fd.close()
            theirs = "a.txt"
        case "renamed over":
            try Data("theirs".utf8).write(to: URL(fileURLWithPath: path + "/.x"))
            #expect(rename(path + "/.x", path + "/a.txt") == 0)
            theirs = "a.txt"
        case "removed":
            #expect(unlink(path + "/a.txt") == 0)
            theirs = "a.txt"
        default:
            try Data("theirs".utf8).write(to: URL(fileURLWithPath: path + "/new.txt"))
            theirs = "new.txt"
        }
        let before = try Disk.names(in: path).sorted()
        let contents = before.map { try? Disk.bytes(path + "/" + $0) }
        do {
            try writeInPlace(wrapper, to: path)
            Issue.record("\(change): the save replaced another program's member")
        } catch let error as DestinationChanged {
            #expect(error.path == path + "/" + theirs, "\(error)")
        }
        #expect(try Disk.names(in: path).sorted() == before, "nothing added or removed")
        #expect(before.map { try? Disk.bytes(path + "/" + $0) } == contents, "nothing rewritten")
    }

    @Test("A member removed from the package while another program changed it is not removed")
    func removalOfAChangedMember() throws {
        let (path, wrapper) = try package("removal")
        wrapper.removeFileWrapper(try #require(wrapper.fileWrappers?["b.txt"]))
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: path + "/.x"))
        #expect(rename(path + "/.x", path + "/b.txt") == 0)
        #expect(throws: DestinationChanged.self) { try writeInPlace(wrapper, to: path) }
        #expect(try Disk.bytes(path + "/b.txt") == Data("theirs".utf8))
    }

    @Test("A member of a directory inside the package, changed by another program, is not replaced")
    func nestedMember() throws {
        let (path, wrapper) = try package("nested")
        let sub = try #require(wrapper.fileWrappers?["sub"])
        replace("c.txt", in: sub, with: "c2")
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: path + "/sub/.x"))
        #expect(rename(path + "/sub/.x", path + "/sub/c.txt") == 0)
        #expect(throws: DestinationChanged.self) { try writeInPlace(wrapper, to: path) }
        #expect(try Disk.bytes(path + "/sub/c.txt") == Data("theirs".utf8))
    }

    @Test(
        "Members the package's own saves wrote, removed or put back are expected as they left them: edits, a save, more edits and a save go through; so does a retry after a failed save"
    )
    func ownSavesAreExpected() throws {
        let (path, wrapper) = try package("own")
        replace("a.txt", in: wrapper, with: "a2")
        wrapper.removeFileWrapper(try #require(wrapper.fileWrappers?["b.txt"]))
        try writeInPlace(wrapper, to: path)
        replace("a.txt", in: wrapper, with: "a3")
        replace("b.txt", in: wrapper, with: "b3")
        try writeInPlace(wrapper, to: path)
        #expect(try Disk.bytes(path + "/a.txt") == Data("a3".utf8))
        #expect(try Disk.bytes(path + "/b.txt") == Data("b3".utf8))

        // A save that replaced a member and then failed (a later member's bytes could not
        // be read): the retry expects the member it wrote, not the one before. The order
        // of the two writes follows the keys' hashes, so names are tried until the
        // replaced one came first.
        var exercised = false
        for attempt in 0..<40 where !exercised {
            let name = "m\(attempt).txt"
            replace(name, in: wrapper, with: "before")
            try writeInPlace(wrapper, to: path)
            replace(name, in: wrapper, with: "after")
            let unreadable = try addUnreadable("u\(attempt)", to: wrapper)
            #expect(throws: (any Error).self) { try writeInPlace(wrapper, to: path) }
            wrapper.removeFileWrapper(unreadable)
            exercised = try Disk.bytes(path + "/" + name) == Data("after".utf8)
            try writeInPlace(wrapper, to: path)
            #expect(try Disk.bytes(path + "/" + name) == Data("after".utf8))
        }
        #expect(exercised, "no attempt replaced the member before the failure")
    }

    @Test("A directory of the package replaced by another program's file: not swapped out, nothing written beside it")
    func directoryReplacedByTheirFile() throws {
        let (path, wrapper) = try package("their-file")
        replace("a.txt", in: wrapper, with: "a2")
        try FileManager.default.removeItem(atPath: path + "/sub")
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: path + "/sub"))
        #expect(throws: DestinationChanged.self) { try writeInPlace(wrapper, to: path) }
        #expect(try Disk.bytes(path + "/sub") == Data("theirs".utf8))
        #expect(try Disk.bytes(path + "/a.txt") == Data("a1".utf8))
    }

    @Test(
        "A directory member made a file whose write fails after the directory is removed: the retry expects nothing there"
    )
    func directoryToFileFailing() throws {
        let (path, wrapper) = try package("dir-to-file")
        wrapper.removeFileWrapper(try #require(wrapper.fileWrappers?["sub"]))
        let unreadable = try addUnreadable("sub", to: wrapper)
        #expect(throws: (any Error).self) { try writeInPlace(wrapper, to: path) }
        #expect(!FileManager.default.fileExists(atPath: path + "/sub"), "the directory went before the write failed")
        wrapper.removeFileWrapper(unreadable)
        replace("sub", in: wrapper, with: "now a file")
        try writeInPlace(wrapper, to: path)
        #expect(try Disk.bytes(path + "/sub") == Data("now a file".utf8))
    }
}
