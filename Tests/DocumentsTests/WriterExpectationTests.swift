import Foundation
import Posix
import TestSupport
import Testing

@testable import Documents

@Suite("DurableWriter: a write told what to expect replaces nothing another program put there, on every path")
struct WriterExpectationTests {
    let directory = TemporaryDirectory("expectation")

    /// A package of `a.txt` and `b.txt` (and `sub/c.txt` with `sub`), written, then read back
    /// as a caller holds one.
    func package(_ name: String, sub: Bool = false) throws -> (path: String, wrapper: FileWrapper) {
        let path = directory.sub(name)
        var members = [
            "a.txt": FileWrapper(regularFileWithContents: Data("a1".utf8)),
            "b.txt": FileWrapper(regularFileWithContents: Data("b1".utf8)),
        ]
        if sub {
            members["sub"] = FileWrapper(directoryWithFileWrappers: [
                "c.txt": FileWrapper(regularFileWithContents: Data("c1".utf8))
            ])
        }
        try DurableWriter().write(FileWrapper(directoryWithFileWrappers: members), to: path)
        return (path, try FileWrapper(url: URL(fileURLWithPath: path), options: .immediate))
    }

    /// Another program's directory, holding `theirs.txt`, made beside the packages: to be
    /// put in a package's place.
    func theirDirectory(_ name: String) throws -> String {
        let theirs = directory.sub(name)
        try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: false)
        try Disk.write("theirs", to: theirs + "/theirs.txt")
        return theirs
    }

    /// A writer whose package write sees another program move the package at `path` aside
    /// and put `theirs` in its place, right before the package is put in place or opened.
    func writer(swapping path: String, for theirs: String, swap: DurableWriter.PackageSwap = .exchange)
        -> DurableWriter
    {
        var writer = DurableWriter(symlinkPolicy: .refuse, packageSwap: swap)
        writer.beforePlacing = { destination in
            guard destination == path else { return }
            _ = rename(path, path + ".aside")
            _ = rename(theirs, path)
        }
        return writer
    }

    /// Whether `path` is still another program's directory of `theirDirectory(_:)`, with that inode.
    func isTheirs(_ path: String, inode: UInt64) throws -> Bool {
        try Disk.inode(path) == inode && Disk.names(in: path) == ["theirs.txt"]
            && Disk.bytes(path + "/theirs.txt") == Data("theirs".utf8)
    }

    @Test(
        "An atomic package write whose package another program replaced while the new tree was built: theirs is not swapped out, the error names it",
        arguments: [DurableWriter.PackageSwap.exchange, .renameAside])
    func atomicReplacedWhileBuilding(swap: DurableWriter.PackageSwap) throws {
        let (path, wrapper) = try package(swap == .exchange ? "exchange.package" : "aside.package")
        wrapper.removeFileWrapper(try #require(wrapper.fileWrappers?["a.txt"]))
        wrapper.addRegularFile(withContents: Data("a2".utf8), preferredFilename: "a.txt")
        let expected = ExpectedDestination(try Disk.status(path))
        let theirs = try theirDirectory(swap == .exchange ? "theirs-exchange" : "theirs-aside")
        let inode = try Disk.inode(theirs)
        do {
            try writer(swapping: path, for: theirs, swap: swap).write(
                wrapper, to: path, options: .atomic, expecting: expected)
            Issue.record("the new tree was swapped in over another program's package")
        } catch let error as DestinationChanged {
            #expect(error.path == path, "\(error)")
        }
        #expect(try isTheirs(path, inode: inode))
        #expect(try Disk.bytes(path + ".aside/a.txt") == Data("a1".utf8), "the package moved aside is as it was")
        #expect(Disk.temporaries(under: directory.path).isEmpty, "the new tree is removed")
    }

    @Test(
        "A package updated in place, swapped for another program's directory between the look and the open: nothing in theirs is written or removed, the error names it",
        arguments: ["read back", "new wrapper"])
    func inPlaceSwappedBeforeOpen(wrapperKind: String) throws {
        let name = wrapperKind.replacingOccurrences(of: " ", with: "-")
        let (path, readBack) = try package(name + ".package")
        var wrapper = readBack
        if wrapperKind == "new wrapper" {
            // Never written here: the update lists the directory and removes what it does not hold.
            wrapper = FileWrapper(directoryWithFileWrappers: [
                "a.txt": FileWrapper(regularFileWithContents: Data("a2".utf8))
            ])
        }
        wrapper.addRegularFile(withContents: Data("new".utf8), preferredFilename: "new.txt")
        let expected = ExpectedDestination(try Disk.status(path))
        let theirs = try theirDirectory("theirs-" + name)
        let inode = try Disk.inode(theirs)
        do {
            try writer(swapping: path, for: theirs).write(wrapper, to: path, expecting: expected)
            Issue.record("the package was updated in another program's directory")
        } catch let error as DestinationChanged {
            #expect(error.path == path, "\(error)")
            #expect(error.found?.inode == inode, "\(error)")
        }
        #expect(try isTheirs(path, inode: inode))
        #expect(try Disk.names(in: path + ".aside") == ["a.txt", "b.txt"])
        #expect(try Disk.bytes(path + ".aside/a.txt") == Data("a1".utf8))
    }

    @Test(
        "A symbolic link written over another program's file, where nothing or the link last written was expected: their file stays, the error names it",
        arguments: ["nothing", "its own link"])
    func linkOverTheirFile(expecting: String) throws {
        let path = directory.sub("link-" + expecting.replacingOccurrences(of: " ", with: "-"))
        let writer = DurableWriter()
        let expected: ExpectedDestination
        if expecting == "nothing" {
            expected = .absent
        } else {
            try writer.write(FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "one")), to: path)
            expected = ExpectedDestination(try Disk.status(path))
        }
        // Another program saves its file there by rename.
        try Disk.write("theirs", to: path + ".new")
        #expect(rename(path + ".new", path) == 0)
        let inode = try Disk.inode(path)
        do {
            try writer.write(
                FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "two")), to: path,
                expecting: expected)
            Issue.record("the link replaced another program's file")
        } catch let error as DestinationChanged {
            #expect(error.path == path, "\(error)")
        }
        #expect(try Disk.status(path).kind == .regular && Disk.inode(path) == inode)
        #expect(try Disk.bytes(path) == Data("theirs".utf8))
        #expect(Disk.temporaries(under: directory.path).isEmpty, "the temporary link is removed")
    }

    @Test("A symbolic link expected as last written, and still that link, is replaced")
    func linkAsExpected() throws {
        let path = directory.sub("link-unchanged")
        let writer = DurableWriter()
        try writer.write(FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "one")), to: path)
        try writer.write(
            FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "two")), to: path,
            expecting: ExpectedDestination(try Disk.status(path)))
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: path) == "two")
    }

    @Test(
        "A directory of a package removed from the wrapper and put back, which another program replaced by a file: their file is not swapped out, the error names it"
    )
    func directoryPutBackReplacedByTheirFile() throws {
        let (path, wrapper) = try package("put-back.package", sub: true)
        let sub = try #require(wrapper.fileWrappers?["sub"])
        wrapper.removeFileWrapper(sub)
        wrapper.addFileWrapper(sub)
        try FileManager.default.removeItem(atPath: path + "/sub")
        try Disk.write("theirs", to: path + "/sub")
        let inode = try Disk.inode(path + "/sub")
        do {
            try DurableWriter(symlinkPolicy: .refuse).write(
                wrapper, to: path, expecting: ExpectedDestination(try Disk.status(path)))
            Issue.record("the directory put back replaced another program's file")
        } catch let error as DestinationChanged {
            #expect(error.path == path + "/sub", "\(error)")
        }
        #expect(try Disk.inode(path + "/sub") == inode)
        #expect(try Disk.bytes(path + "/sub") == Data("theirs".utf8))
        #expect(Disk.temporaries(under: directory.path).isEmpty, "the new tree is removed")
    }

    @Test("A directory of a package removed from the wrapper and put back, unchanged on disk: the save goes through")
    func directoryPutBackUnchanged() throws {
        let (path, wrapper) = try package("put-back-unchanged.package", sub: true)
        let inode = try Disk.inode(path + "/sub")
        let sub = try #require(wrapper.fileWrappers?["sub"])
        wrapper.removeFileWrapper(sub)
        wrapper.addFileWrapper(sub)
        wrapper.removeFileWrapper(try #require(wrapper.fileWrappers?["a.txt"]))
        wrapper.addRegularFile(withContents: Data("a2".utf8), preferredFilename: "a.txt")
        try DurableWriter(symlinkPolicy: .refuse).write(
            wrapper, to: path, expecting: ExpectedDestination(try Disk.status(path)))
        #expect(try Disk.bytes(path + "/a.txt") == Data("a2".utf8))
        #expect(try Disk.inode(path + "/sub") == inode)
        #expect(try Disk.bytes(path + "/sub/c.txt") == Data("c1".utf8))
    }

    @Test(
        "A new package whose name another program takes right before it is put in place: theirs stays, and the error is DestinationChanged (a conflict, as for a new file), not a failed rename"
    )
    func newPackageNameTakenBeforePlacing() throws {
        let path = directory.sub("taken.package")
        let theirs = try theirDirectory("theirs-taken")
        let inode = try Disk.inode(theirs)
        var writer = DurableWriter(symlinkPolicy: .refuse)
        writer.beforePlacing = { destination in
            guard destination == path else { return }
            _ = rename(theirs, path)
        }
        let wrapper = FileWrapper(directoryWithFileWrappers: [
            "a.txt": FileWrapper(regularFileWithContents: Data("mine".utf8))
        ])
        do {
            try writer.write(wrapper, to: path)
            Issue.record("written over another program's directory")
        } catch let error as DestinationChanged {
            #expect(error.path == path, "\(error)")
            #expect(error.expected == .absent, "\(error)")
        }
        #expect(try isTheirs(path, inode: inode))
        #expect(Disk.temporaries(under: directory.path).isEmpty, "the new tree is removed")
    }
}

@Suite("DurableWriter: a member removed by a write and the same wrapper put back is written again")
struct PutBackAfterRemovalTests {
    let directory = TemporaryDirectory("put-back")

    @Test(
        "A file or a directory removed from a package, the package written, the same wrapper put back and written: it is on disk again, with and without an expectation",
        arguments: ["a.txt", "sub"], [true, false])
    func putBackAfterItsRemovalWasWritten(member: String, expecting: Bool) throws {
        let path = directory.sub("p-\(member)-\(expecting).package")
        try DurableWriter().write(
            FileWrapper(directoryWithFileWrappers: [
                "a.txt": FileWrapper(regularFileWithContents: Data("a1".utf8)),
                "sub": FileWrapper(directoryWithFileWrappers: [
                    "c.txt": FileWrapper(regularFileWithContents: Data("c1".utf8))
                ]),
            ]), to: path)
        let wrapper = try FileWrapper(url: URL(fileURLWithPath: path), options: .immediate)
        let writer = DurableWriter(symlinkPolicy: .refuse)
        func write() throws {
            try writer.write(wrapper, to: path, expecting: expecting ? ExpectedDestination(try Disk.status(path)) : nil)
        }
        let child = try #require(wrapper.fileWrappers?[member])
        wrapper.removeFileWrapper(child)
        try write()
        #expect(try Disk.names(in: path) == ["a.txt", "sub"].filter { $0 != member })
        wrapper.addFileWrapper(child)
        try write()
        #expect(try Disk.names(in: path) == ["a.txt", "sub"], "the member put back is on disk")
        if member == "sub" {
            #expect(try Disk.bytes(path + "/sub/c.txt") == Data("c1".utf8))
        } else {
            #expect(try Disk.bytes(path + "/a.txt") == Data("a1".utf8))
        }
        // Written once more with nothing changed: nothing to do, nothing refused.
        try write()
        #expect(try Disk.names(in: path) == ["a.txt", "sub"])
    }

}
