import Documents
import Foundation
import Posix
import TestSupport
import Testing

@Suite("DurableWriter: regular files, ownership, symbolic links")
struct DurableWriterFileTests {
    let directory = TemporaryDirectory("writer")

    @Test("A new file gets 0666 less the umask; replacing keeps the old file's mode")
    func modes() throws {
        let path = directory.sub("new.txt")
        try DurableWriter().write(contents: Data("one".utf8), to: path)
        let umask = CurrentProcess.fileCreationMask.rawValue
        #expect(try Disk.status(path).permissions.rawValue == 0o666 & ~umask)

        _ = chmod(path, 0o640)
        try DurableWriter().write(contents: Data("two".utf8), to: path)
        #expect(try Disk.status(path).permissions.rawValue == 0o640)
        #expect(try Disk.bytes(path) == Data("two".utf8))
        #expect(Disk.temporaries(under: directory.path).isEmpty)
    }

    @Test("A requested mode applies to a file the write creates")
    func requestedMode() throws {
        let path = directory.sub("secret")
        try DurableWriter().write(contents: Data("s".utf8), to: path, permissions: FilePermissions(rawValue: 0o600))
        #expect(try Disk.status(path).permissions.rawValue == 0o600)
    }

    @Test(
        "A 0600 file owned by another user keeps its mode and owner after a save",
        .enabled(if: Machine.isRoot, "changing a file's owner needs root"))
    func ownerAndModeSurvive() throws {
        let path = directory.sub("theirs.txt")
        try Disk.write("original", to: path)
        #expect(chown(path, 65534, 65534) == 0)
        #expect(chmod(path, 0o600) == 0)
        let inodeBefore = try Disk.inode(path)

        try DurableWriter().write(contents: Data("replaced".utf8), to: path)

        let status = try Disk.status(path)
        #expect(status.userID == 65534)
        #expect(status.groupID == 65534)
        #expect(status.permissions.rawValue == 0o600)
        #expect(status.inode != inodeBefore, "the file was replaced, not rewritten in place")
        #expect(try Disk.bytes(path) == Data("replaced".utf8))
    }

    @Test("Set-id bits survive the owner change of a save", .enabled(if: Machine.isRoot))
    func setIDBitsSurvive() throws {
        let path = directory.sub("tool")
        try Disk.write("#!/bin/sh\n", to: path)
        #expect(chown(path, 65534, 65534) == 0)
        #expect(chmod(path, 0o4755) == 0)
        try DurableWriter().write(contents: Data("#!/bin/sh\necho\n".utf8), to: path)
        #expect(try Disk.status(path).permissions.rawValue == 0o4755)
    }

    @Test(
        "In a set-group-ID directory, a file of the writer's own group keeps that group and its mode",
        .enabled(if: Machine.isRoot, "giving a directory another group needs root"))
    func setGroupIDDirectory() throws {
        // New files in the directory get its group (65534); the file being replaced has
        // the writer's own group, which the save must keep.
        let shared = directory.sub("shared")
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        #expect(chown(shared, 0, 65534) == 0)
        #expect(chmod(shared, 0o2775) == 0)
        let path = shared + "/mine.txt"
        try Disk.write("original", to: path)
        #expect(chown(path, getuid(), getegid()) == 0)
        #expect(chmod(path, 0o640) == 0)
        try Disk.write("probe", to: shared + "/probe")
        #expect(try Disk.status(shared + "/probe").groupID == 65534, "the directory gives new files its group")

        try DurableWriter().write(contents: Data("replaced".utf8), to: path)

        let status = try Disk.status(path)
        #expect(status.groupID == getegid())
        #expect(status.userID == getuid())
        #expect(status.permissions.rawValue == 0o640)
        #expect(try Disk.bytes(path) == Data("replaced".utf8))
        #expect(Disk.temporaries(under: shared).isEmpty)
    }

    @Test("With the follow policy, a symbolic link stays a link and its target is replaced")
    func followPolicy() throws {
        try FileManager.default.createDirectory(atPath: directory.sub("real"), withIntermediateDirectories: true)
        let target = directory.sub("real/target.txt")
        try Disk.write("old", to: target)
        let link = directory.sub("link.txt")
        #expect(symlink("real/target.txt", link) == 0)

        let report = try DurableWriter(symlinkPolicy: .follow).write(contents: Data("new".utf8), to: link)

        #expect(try Disk.status(link).kind == .symbolicLink)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == "real/target.txt")
        #expect(try Disk.bytes(target) == Data("new".utf8))
        #expect(report.path == directory.path + "/real/target.txt")
        #expect(Disk.temporaries(under: directory.path).isEmpty)
    }

    @Test("With the refuse policy, a symbolic link is refused and left as it was")
    func refusePolicy() throws {
        let target = directory.sub("target.txt")
        try Disk.write("old", to: target)
        let link = directory.sub("link.txt")
        #expect(symlink("target.txt", link) == 0)

        #expect {
            try DurableWriter(symlinkPolicy: .refuse).write(contents: Data("new".utf8), to: link)
        } throws: { error in
            guard let error = error as? DocumentError else { return false }
            return error.operation == .followSymbolicLink && error.path == link
                && "\(error)".contains("symlink policy is refuse")
        }
        #expect(try Disk.status(link).kind == .symbolicLink)
        #expect(try Disk.bytes(target) == Data("old".utf8))
        #expect(Disk.temporaries(under: directory.path).isEmpty)
    }

    @Test(
        "Confined beneath a root: a directory that is a link out, a destination outside, a link at the destination are refused; nothing outside is written"
    )
    func confinedBeneathRoot() throws {
        let root = directory.sub("root")
        let outside = directory.sub("outside")
        for path in [root, outside] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        #expect(symlink(outside, root + "/link") == 0)
        #expect(symlink(outside + "/target.txt", root + "/file-link.txt") == 0)
        let writer = DurableWriter()
        let beneathRoot = DurableWriter(confinedTo: root)

        // Unconfined, the writer goes where the link leads (what a swapped directory would do).
        try writer.write(contents: Data("followed".utf8), to: root + "/link/unconfined.txt")
        #expect(try Disk.names(in: outside) == ["unconfined.txt"])

        let refused: [(String, DocumentError.Operation)] = [
            (root + "/link/x.txt", .openDirectory),  // a directory component that is a link
            (outside + "/x.txt", .openDirectory),  // a destination outside the root
            (root + "/../outside/x.txt", .openDirectory),  // `..` out of the root
            (root + "/file-link.txt", .followSymbolicLink),  // a link at the destination
        ]
        for (path, operation) in refused {
            #expect {
                try beneathRoot.write(FileWrapper(regularFileWithContents: Data("x".utf8)), to: path)
            } throws: { error in
                (error as? DocumentError)?.operation == operation
            }
        }
        #expect(try Disk.names(in: outside) == ["unconfined.txt"], "nothing more outside")

        // Beneath the root without links, files and packages are written as usual.
        try FileManager.default.createDirectory(atPath: root + "/d", withIntermediateDirectories: true)
        try beneathRoot.write(FileWrapper(regularFileWithContents: Data("in".utf8)), to: root + "/d/x.txt")
        let package = FileWrapper(directoryWithFileWrappers: [
            "ch": FileWrapper(directoryWithFileWrappers: [
                "1.txt": FileWrapper(regularFileWithContents: Data("one".utf8))
            ])
        ])
        try DurableWriter(confinedTo: root + "/").write(
            package, to: root + "/p.package", originalContentsPath: root + "/p.package")
        #expect(try Disk.bytes(root + "/d/x.txt") == Data("in".utf8))
        #expect(try Disk.bytes(root + "/p.package/ch/1.txt") == Data("one".utf8))

        // A writer confined by configuration: its prepared writes (exports) too.
        let confined = DurableWriter(symlinkPolicy: .refuse, confinedTo: root)
        #expect(throws: DocumentError.self) {
            try confined.prepare(FileWrapper(regularFileWithContents: Data("x".utf8)), to: root + "/link/prepared.txt")
        }
        #expect(throws: DocumentError.self) {
            try confined.write(FileWrapper(regularFileWithContents: Data("x".utf8)), to: root + "/link/written.txt")
        }
        #expect(try Disk.names(in: outside) == ["unconfined.txt"], "nothing more outside")
        let prepared = try confined.prepare(FileWrapper(regularFileWithContents: Data("p".utf8)), to: root + "/d/p.txt")
        try prepared.commit()
        #expect(try Disk.bytes(root + "/d/p.txt") == Data("p".utf8))
    }

    @Test(
        "Confined beneath a root reached through a symbolic link (as /var/run leads to /run): writes beneath it go through, a link beneath it is still refused"
    )
    func rootThroughALink() throws {
        let real = directory.sub("real")
        let outside = directory.sub("outside")
        for path in [real + "/d", outside] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        #expect(symlink(real, directory.sub("via")) == 0)
        #expect(symlink(outside, real + "/out") == 0)
        let root = directory.sub("via")
        let writer = DurableWriter(symlinkPolicy: .refuse, confinedTo: root)
        // The directory's whole path goes through the link above the root: opened through
        // the root's descriptor instead, every time.
        for round in 1...3 {
            try writer.write(FileWrapper(regularFileWithContents: Data("\(round)".utf8)), to: root + "/d/x.txt")
            #expect(try Disk.bytes(real + "/d/x.txt") == Data("\(round)".utf8))
        }
        try writer.write(FileWrapper(regularFileWithContents: Data("top".utf8)), to: root + "/top.txt")
        #expect(try Disk.bytes(real + "/top.txt") == Data("top".utf8))
        #expect {
            try writer.write(FileWrapper(regularFileWithContents: Data("x".utf8)), to: root + "/out/x.txt")
        } throws: { error in
            (error as? DocumentError)?.operation == .openDirectory
        }
        #expect(try Disk.names(in: outside).isEmpty, "nothing written through the link beneath the root")
        // The same beneath the root's real path, where the one lookup serves.
        let direct = DurableWriter(symlinkPolicy: .refuse, confinedTo: real)
        try direct.write(FileWrapper(regularFileWithContents: Data("direct".utf8)), to: real + "/d/x.txt")
        #expect(try Disk.bytes(real + "/d/x.txt") == Data("direct".utf8))
        #expect(throws: DocumentError.self) {
            try direct.write(FileWrapper(regularFileWithContents: Data("x".utf8)), to: real + "/out/x.txt")
        }
        #expect(try Disk.names(in: outside).isEmpty)
        #expect(Disk.temporaries(under: real).isEmpty)
    }

    @Test("A dangling link is followed to create its target; a link loop is an error")
    func danglingAndLoops() throws {
        let link = directory.sub("dangling")
        #expect(symlink("created.txt", link) == 0)
        try DurableWriter().write(contents: Data("x".utf8), to: link)
        #expect(try Disk.bytes(directory.sub("created.txt")) == Data("x".utf8))
        #expect(try Disk.status(link).kind == .symbolicLink)

        #expect(symlink("loop-b", directory.sub("loop-a")) == 0)
        #expect(symlink("loop-a", directory.sub("loop-b")) == 0)
        #expect(throws: DocumentError.self) {
            try DurableWriter().write(contents: Data("x".utf8), to: directory.sub("loop-a"))
        }
    }

    @Test("A directory in the way of a file is an error that names it")
    func directoryInTheWay() throws {
        let path = directory.sub("dir")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect {
            try DurableWriter().write(contents: Data("x".utf8), to: path)
        } throws: { error in
            (error as? DocumentError)?.errno == .isDirectory && (error as? DocumentError)?.path == path
        }
    }

    @Test("A missing parent directory is reported as such")
    func missingParent() throws {
        let path = directory.sub("nowhere/file.txt")
        #expect {
            try DurableWriter().write(contents: Data("x".utf8), to: path)
        } throws: { error in
            let e = error as? DocumentError
            return e?.operation == .openDirectory && e?.errno == .noSuchFile
        }
    }

    @Test(
        "Work given to run while a file's bytes are synced runs once, with the file's size, when the temporary holds every byte (a large one written in pieces, data or text) and the destination is not yet replaced",
        arguments: [10, DurableWriter.writeBackAheadBytes + 10, 3 * DurableWriter.writeBackAheadBytes + 1],
        [false, true])
    func workWhileSyncing(size: Int, asText: Bool) throws {
        let place = directory.sub("syncing-\(size)-\(asText)")
        try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: false)
        let path = place + "/file.txt"
        try Disk.write("old", to: path)
        // Printable, and different at every offset within a piece and from piece to piece.
        let bytes = Data((0..<size).map { UInt8(ascii: "a") + UInt8(($0 / 7 + $0 % 13) % 26) })
        let wrapper =
            asText
            ? FileWrapper(regularFileWithText: String(decoding: bytes, as: UTF8.self))
            : FileWrapper(regularFileWithContents: bytes)
        var seen: [(size: Int64, temporary: Data?, destination: Data?)] = []
        try DurableWriter().write(
            wrapper, to: path,
            whileSyncing: { written, _ in
                let temporary = Disk.temporaries(under: place).first.flatMap { try? Disk.bytes(place + "/" + $0) }
                seen.append((written, temporary, try? Disk.bytes(path)))
            })
        #expect(seen.count == 1)
        #expect(seen.first?.size == Int64(size))
        #expect(seen.first?.temporary == bytes)
        #expect(seen.first?.destination == Data("old".utf8))
        #expect(try Disk.bytes(path) == bytes)
        #expect(Disk.temporaries(under: place).isEmpty)
    }
}

@Suite("DurableWriter: packages")
struct DurableWriterPackageTests {
    let directory = TemporaryDirectory("packages")

    func package(_ members: [String: String]) -> FileWrapper {
        FileWrapper(
            directoryWithFileWrappers: members.mapValues { FileWrapper(regularFileWithContents: Data($0.utf8)) })
    }

    @Test("An incremental save writes only changed members, unlinks removed ones, keeps the package directory")
    func incremental() throws {
        let path = directory.sub("doc.pkg")
        let wrapper = package(["a": "A", "b": "B", "c": "C"])
        try DurableWriter().write(wrapper, to: path)
        let packageInode = try Disk.inode(path)
        let inodeA = try Disk.inode(path + "/a")

        wrapper.removeFileWrapper(wrapper.fileWrappers!["b"]!)
        wrapper.removeFileWrapper(wrapper.fileWrappers!["c"]!)
        wrapper.addRegularFile(withContents: Data("C2".utf8), preferredFilename: "c")
        wrapper.addRegularFile(withContents: Data("D".utf8), preferredFilename: "d")
        let report = try DurableWriter().write(wrapper, to: path)

        #expect(report.filesWritten == 2)
        #expect(report.entriesRemoved == 1)
        #expect(report.filesUnchanged == 1)
        #expect(try Disk.inode(path) == packageInode)
        #expect(try Disk.inode(path + "/a") == inodeA)
        #expect(try Disk.names(in: path) == ["a", "c", "d"])
        #expect(try Disk.bytes(path + "/c") == Data("C2".utf8))
    }

    @Test("An atomic save swaps in a new tree with unchanged members hard-linked")
    func atomic() throws {
        let path = directory.sub("doc.pkg")
        let wrapper = package(["a": "A", "b": "B"])
        try DurableWriter().write(wrapper, to: path, options: .atomic)
        let packageInode = try Disk.inode(path)
        let inodeA = try Disk.inode(path + "/a")

        wrapper.removeFileWrapper(wrapper.fileWrappers!["b"]!)
        wrapper.addRegularFile(withContents: Data("B2".utf8), preferredFilename: "b")
        let report = try DurableWriter().write(wrapper, to: path, options: .atomic)

        #expect(report.filesLinked == 1)
        #expect(report.filesWritten == 1)
        #expect(try Disk.inode(path) != packageInode, "a new directory was swapped in")
        #expect(try Disk.inode(path + "/a") == inodeA, "the unchanged member is the same file, linked")
        #expect(try Disk.status(path + "/a").linkCount == 1, "the old tree is gone")
        #expect(try Disk.bytes(path + "/b") == Data("B2".utf8))
        #expect(try Disk.names(in: directory.path) == ["doc.pkg"])
    }

    @Test("The rename-aside swap gives the same result as the exchange and leaves nothing aside")
    func renameAside() throws {
        let path = directory.sub("doc.pkg")
        let writer = DurableWriter(packageSwap: .renameAside)
        let wrapper = package(["a": "A", "b": "B"])
        try writer.write(wrapper, to: path, options: .atomic)
        let inodeA = try Disk.inode(path + "/a")
        wrapper.removeFileWrapper(wrapper.fileWrappers!["b"]!)
        let report = try writer.write(wrapper, to: path, options: .atomic)
        #expect(report.filesLinked == 1)
        #expect(try Disk.names(in: path) == ["a"])
        #expect(try Disk.inode(path + "/a") == inodeA)
        #expect(try Disk.names(in: directory.path) == ["doc.pkg"])
    }

    @Test("Nested directories and symbolic links inside a package round-trip")
    func nested() throws {
        let path = directory.sub("nested.pkg")
        let inner = package(["deep.txt": "deep"])
        let wrapper = FileWrapper(directoryWithFileWrappers: [
            "inner": inner,
            "top.txt": FileWrapper(regularFileWithContents: Data("top".utf8)),
            "link": FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "top.txt")),
        ])
        try DurableWriter().write(wrapper, to: path)
        #expect(try Disk.bytes(path + "/inner/deep.txt") == Data("deep".utf8))
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: path + "/link") == "top.txt")
        #expect(wrapper.matchesContents(of: URL(fileURLWithPath: path)))

        inner.addRegularFile(withContents: Data("new".utf8), preferredFilename: "new.txt")
        let report = try DurableWriter().write(wrapper, to: path)
        #expect(report.filesWritten == 1)
        #expect(try Disk.names(in: path + "/inner") == ["deep.txt", "new.txt"])

        let reread = try FileWrapper(url: URL(fileURLWithPath: path), options: .immediate)
        #expect(reread.fileWrappers?["inner"]?.fileWrappers?["new.txt"]?.regularFileContents == Data("new".utf8))
        #expect(reread.fileWrappers?["link"]?.symbolicLinkDestinationURL?.path.hasSuffix("top.txt") == true)
    }

    @Test("Writing a package to a new place hard-links unchanged members from originalContentsURL")
    func saveAsLinks() throws {
        let original = directory.sub("original.pkg")
        let wrapper = package(["a": "A", "b": "B"])
        try DurableWriter().write(wrapper, to: original)
        let copy = directory.url.appendingPathComponent("copy.pkg")
        try wrapper.write(to: copy, options: [], originalContentsURL: URL(fileURLWithPath: original))
        #expect(try Disk.inode(copy.path + "/a") == Disk.inode(original + "/a"))
        #expect(try Disk.bytes(copy.path + "/b") == Data("B".utf8))
    }

    @Test("A package replaces a regular file, and a file replaces a package, atomically")
    func kindChanges() throws {
        let path = directory.sub("thing")
        try Disk.write("a file", to: path)
        try DurableWriter().write(package(["x": "X"]), to: path)
        #expect(try Disk.status(path).kind == .directory)
        try DurableWriter().write(package(["y": "Y"]), to: path, options: .atomic)
        #expect(try Disk.names(in: path) == ["y"])
        #expect(try Disk.names(in: directory.path) == ["thing"])
    }
}

@Suite("DurableWriter: change tracking of in-place package saves")
struct ChangeTrackingTests {
    let directory = TemporaryDirectory("tracking")

    @Test("A member another program added is kept by an in-place save of a wrapper that never saw it")
    func foreignMemberKept() throws {
        let path = directory.sub("doc.pkg")
        let wrapper = FileWrapper(directoryWithFileWrappers: ["a": FileWrapper(regularFileWithContents: Data("A".utf8))]
        )
        try DurableWriter().write(wrapper, to: path)
        try Disk.write("theirs", to: path + "/foreign")
        wrapper.addRegularFile(withContents: Data("B".utf8), preferredFilename: "b")
        let report = try DurableWriter().write(wrapper, to: path)
        #expect(report.filesWritten == 1)
        #expect(try Disk.names(in: path) == ["a", "b", "foreign"])
    }

    @Test("A fresh wrapper written over a package replaces its contents: extra members are removed")
    func freshWrapperReplaces() throws {
        let path = directory.sub("doc.pkg")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        try Disk.write("old", to: path + "/old")
        try Disk.write("same", to: path + "/same")
        let wrapper = FileWrapper(directoryWithFileWrappers: [
            "same": FileWrapper(regularFileWithContents: Data("new".utf8))
        ])
        let report = try DurableWriter().write(wrapper, to: path)
        #expect(report.entriesRemoved == 1)
        #expect(try Disk.names(in: path) == ["same"])
        #expect(try Disk.bytes(path + "/same") == Data("new".utf8))
    }

    @Test("Removing a member and adding another under the same key rewrites it; once settled nothing is rewritten")
    func replaceSameKeyAndRetry() throws {
        let path = directory.sub("doc.pkg")
        let wrapper = FileWrapper(directoryWithFileWrappers: ["a": FileWrapper(regularFileWithContents: Data("A".utf8))]
        )
        try DurableWriter().write(wrapper, to: path)
        wrapper.removeFileWrapper(wrapper.fileWrappers!["a"]!)
        wrapper.addRegularFile(withContents: Data("A2".utf8), preferredFilename: "a")
        wrapper.addRegularFile(withContents: Data("C".utf8), preferredFilename: "c")
        // Another program left a directory where the new member goes: the member replaces it.
        try FileManager.default.createDirectory(atPath: path + "/c/inner", withIntermediateDirectories: true)
        let report = try DurableWriter().write(wrapper, to: path)
        #expect(report.filesWritten == 2)
        #expect(try Disk.bytes(path + "/a") == Data("A2".utf8))
        #expect(try Disk.bytes(path + "/c") == Data("C".utf8))
        let again = try DurableWriter().write(wrapper, to: path)
        #expect(again.filesWritten == 0, "nothing is rewritten once settled")
    }
}

@Suite("DurableWriter: written contents")
struct WrittenContentsTests {
    let directory = TemporaryDirectory("contents")

    @Test("keepsWrittenContents: false leaves the wrapper lazy: its bytes come back from the file written")
    func released() throws {
        let path = directory.sub("doc.txt")
        let wrapper = FileWrapper(regularFileWithContents: Data("hello".utf8))
        try DurableWriter(keepsWrittenContents: false).write(wrapper, to: path)
        #expect(!wrapper.isContentsLoaded)
        #expect(wrapper.regularFileContents == Data("hello".utf8))

        let kept = FileWrapper(regularFileWithContents: Data("kept".utf8))
        try DurableWriter().write(kept, to: directory.sub("kept.txt"))
        #expect(kept.isContentsLoaded)
    }
}
