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
