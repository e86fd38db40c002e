import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

@testable import Documents

/// Saves on a file system that refuses `renameat2`'s flags, as FUSE, NFS, CIFS and
/// GlusterFS do: the power-loss FUSE passthrough, here without cuts.
@Suite(
    "renameat2 fallbacks where the file system refuses the flags",
    .enabled(if: PowerLossMount.isAvailable, "needs root, /dev/fuse and Debian's python3-fusepy"), .serialized)
final class RenameFallbackTests {
    let directory = TemporaryDirectory("fallback")
    let mount: PowerLossMount
    var root: String { mount.path }

    init() throws {
        try FileManager.default.createDirectory(atPath: directory.sub("backing"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: directory.sub("mnt"), withIntermediateDirectories: false)
        mount = try PowerLossMount(backing: directory.sub("backing"), at: directory.sub("mnt"), cutAtUnmount: false)
    }

    deinit { try? mount.unmount() }

    static func package(_ version: Int) -> FileWrapper {
        FileWrapper(directoryWithFileWrappers: [
            "manifest": FileWrapper(regularFileWithContents: Data("\(version)\n".utf8)),
            "a": FileWrapper(regularFileWithContents: Data("a\(version)".utf8)),
            "sub": FileWrapper(directoryWithFileWrappers: [
                "b": FileWrapper(regularFileWithContents: Data("b\(version)".utf8))
            ]),
        ])
    }

    func expectPackage(_ path: String, version: Int, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try Disk.bytes(path + "/manifest") == Data("\(version)\n".utf8), sourceLocation: sourceLocation)
        #expect(try Disk.bytes(path + "/a") == Data("a\(version)".utf8), sourceLocation: sourceLocation)
        #expect(try Disk.bytes(path + "/sub/b") == Data("b\(version)".utf8), sourceLocation: sourceLocation)
    }

    @Test("The mount refuses RENAME_NOREPLACE and RENAME_EXCHANGE with EINVAL, as NFS and CIFS do")
    func refusesFlags() throws {
        let fd = try FileDescriptor.open(root, options: [.directory])
        defer { try? fd.close() }
        try fd.makeDirectory("x")
        try fd.makeDirectory("y")
        #expect(throws: Errno.invalidArgument) { try fd.rename("x", to: "z", flags: .noReplace) }
        #expect(throws: Errno.invalidArgument) { try fd.rename("x", to: "y", flags: .exchange) }
    }

    @Test(
        "A new package's first save, in-place updates and .atomic swaps (exchange and rename-aside) all succeed",
        arguments: [DurableWriter.PackageSwap.exchange, .renameAside])
    func packageSaves(swap: DurableWriter.PackageSwap) throws {
        let writer = DurableWriter(packageSwap: swap)
        let path = root + "/p.pkg"
        // The first save of a new package renames a whole tree into place without replacing anything.
        let wrapper = Self.package(1)
        try writer.write(wrapper, to: path)
        try expectPackage(path, version: 1)
        // In place.
        wrapper.removeFileWrapper(wrapper.fileWrappers!["a"]!)
        wrapper.addRegularFile(withContents: Data("a2".utf8), preferredFilename: "a")
        let inPlace = try writer.write(wrapper, to: path)
        #expect(inPlace.filesWritten == 1)
        #expect(try Disk.bytes(path + "/a") == Data("a2".utf8))
        // Whole trees swapped in, several times (each leaves the old tree aside, then removes it).
        for version in 3...5 {
            let inode = try Disk.inode(path)
            try writer.write(Self.package(version), to: path, options: .atomic)
            try expectPackage(path, version: version)
            #expect(try Disk.inode(path) != inode, "a new tree took the name")
        }
        #expect(Disk.temporaries(under: root).isEmpty)
        #expect(try Disk.names(in: root) == ["p.pkg"])
    }

    @Test("A regular file replaced by a package with .atomic, and the package's files written in place")
    func fileReplacedByPackage() throws {
        let path = root + "/doc"
        try DurableWriter().write(contents: Data("plain".utf8), to: path)
        try DurableWriter().write(contents: Data("plain again".utf8), to: path)
        try DurableWriter().write(Self.package(1), to: path, options: .atomic)
        try expectPackage(path, version: 1)
        #expect(Disk.temporaries(under: root).isEmpty)
    }

    @Test(
        "Without RENAME_NOREPLACE nothing in the way is replaced: EEXIST, both sides intact",
        arguments: ["the mount", "a local disk"])
    func noReplaceKeepsItsGuarantee(where place: String) throws {
        let base = place == "the mount" ? root : directory.sub("local")
        if place != "the mount" {
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: false)
        }
        let fd = try FileDescriptor.open(base, options: [.directory])
        defer { try? fd.close() }
        try fd.makeDirectory("tree")
        try Disk.write("in the tree", to: base + "/tree/member")
        try fd.makeDirectory("full")
        try Disk.write("theirs", to: base + "/full/member")
        try Disk.write("their file", to: base + "/file")
        try Disk.write("mine", to: base + "/mine")

        #expect(throws: Errno.fileExists) { try Renaming.renameWithoutReplacing("tree", to: "full", in: fd) }
        #expect(throws: Errno.fileExists) { try Renaming.renameWithoutReplacing("tree", to: "file", in: fd) }
        #expect(throws: Errno.fileExists) { try Renaming.renameWithoutReplacing("mine", to: "file", in: fd) }
        #expect(throws: Errno.fileExists) { try Renaming.renameWithoutReplacing("mine", to: "full", in: fd) }
        #expect(try Disk.bytes(base + "/full/member") == Data("theirs".utf8))
        #expect(try Disk.bytes(base + "/file") == Data("their file".utf8))
        #expect(try Disk.bytes(base + "/mine") == Data("mine".utf8))
        #expect(try Disk.bytes(base + "/tree/member") == Data("in the tree".utf8))

        // To a free name: moved, one name left.
        let inode = try Disk.inode(base + "/mine")
        try Renaming.renameWithoutReplacing("mine", to: "moved", in: fd)
        try Renaming.renameWithoutReplacing("tree", to: "moved-tree", in: fd)
        #expect(try Disk.names(in: base) == ["file", "full", "moved", "moved-tree"])
        #expect(try Disk.status(base + "/moved").inode == inode)
        #expect(try Disk.status(base + "/moved").linkCount == 1)
        #expect(try Disk.bytes(base + "/moved-tree/member") == Data("in the tree".utf8))
    }

    @Test("Recovery finishes a rename-aside swap cut between its renames, on the mount")
    func recoveryFinishesSwap() throws {
        let path = root + "/p.pkg"
        try DurableWriter().write(Self.package(1), to: path)
        try DurableWriter().write(Self.package(2), to: root + "/.p.pkg.autosave-abc123")
        let fd = try FileDescriptor.open(root, options: [.directory])
        defer { try? fd.close() }
        try fd.rename("p.pkg", to: ".p.pkg.autosave-old-def456")

        let report = try DurableWriter.recover(at: root)
        #expect(report.restored == [path])
        try expectPackage(path, version: 2)
        #expect(Disk.temporaries(under: root).isEmpty)

        // With no new tree, the old one is put back.
        try fd.rename("p.pkg", to: ".p.pkg.autosave-old-ghi789")
        try DurableWriter.recover(at: root)
        try expectPackage(path, version: 2)
        #expect(try Disk.names(in: root) == ["p.pkg"])
    }
}
