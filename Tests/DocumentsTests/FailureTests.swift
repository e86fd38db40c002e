import Documents
import Foundation
import Posix
import TestSupport
import Testing

/// Saves that fail on a real full or read-only file system. Each test mounts its own
/// file system (root only) and unmounts it whatever happens.
@Suite("Failed saves lose nothing", .enabled(if: Machine.isRoot, "mounting needs root"), .serialized)
struct FailureTests {
    let directory = TemporaryDirectory("failures")

    @Test("ENOSPC: the old file stays byte-identical, no temp is left, the error names write, the temp path and ENOSPC")
    func fullDisk() throws {
        let mountPoint = directory.sub("small")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        let mount = try Mount(tmpfsOfSize: "1m", at: mountPoint)
        defer { withExtendedLifetime(mount) {} }

        let path = mountPoint + "/doc.txt"
        let original = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0) })
        try DurableWriter().write(contents: original, to: path)
        try Disk.fill(mountPoint)

        #expect {
            try DurableWriter().write(contents: Data(repeating: 0x41, count: 64 * 1024), to: path)
        } throws: { error in
            guard let error = error as? DocumentError else { return false }
            return error.operation == .write && error.errno == .noSpace
                && error.path.hasPrefix(mountPoint + "/.doc.txt.autosave-")
                && "\(error)".contains("ENOSPC")
        }
        #expect(try Disk.bytes(path) == original)
        #expect(Disk.temporaries(under: mountPoint).isEmpty)

        // Once space is freed the same save succeeds.
        try FileManager.default.removeItem(atPath: mountPoint + "/filler")
        try DurableWriter().write(contents: Data(repeating: 0x41, count: 64 * 1024), to: path)
        #expect(try Disk.bytes(path).count == 64 * 1024)
    }

    @Test("ENOSPC during an atomic package save leaves the old package whole and no temporary tree")
    func fullDiskPackage() throws {
        let mountPoint = directory.sub("small")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        let mount = try Mount(tmpfsOfSize: "1m", at: mountPoint)
        defer { withExtendedLifetime(mount) {} }

        let path = mountPoint + "/doc.pkg"
        let wrapper = FileWrapper(directoryWithFileWrappers: [
            "a": FileWrapper(regularFileWithContents: Data("A".utf8)),
            "b": FileWrapper(regularFileWithContents: Data("B".utf8)),
        ])
        try DurableWriter().write(wrapper, to: path, options: .atomic)
        try Disk.fill(mountPoint)

        wrapper.addRegularFile(withContents: Data(repeating: 1, count: 256 * 1024), preferredFilename: "big")
        for options: FileWrapper.WritingOptions in [.atomic, []] {
            #expect {
                try DurableWriter().write(wrapper, to: path, options: options)
            } throws: { error in
                (error as? DocumentError)?.errno == .noSpace
            }
            #expect(try Disk.names(in: path) == ["a", "b"])
            #expect(try Disk.bytes(path + "/a") == Data("A".utf8))
            #expect(Disk.temporaries(under: mountPoint).isEmpty)
        }

        // Once space is freed, the same wrapper saves in place with no other help.
        try FileManager.default.removeItem(atPath: mountPoint + "/filler")
        let report = try DurableWriter().write(wrapper, to: path)
        #expect(report.filesWritten == 1)
        #expect(try Disk.names(in: path) == ["a", "b", "big"])
    }

    @Test("EROFS: a read-only file system refuses the temp; the old file is untouched and the error says so")
    func readOnly() throws {
        let source = directory.sub("source")
        let mountPoint = directory.sub("ro")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        try Disk.write("keep me", to: source + "/doc.txt")
        let mount = try Mount(readOnlyBindOf: source, at: mountPoint)
        defer { withExtendedLifetime(mount) {} }

        let path = mountPoint + "/doc.txt"
        #expect {
            try DurableWriter().write(contents: Data("lost?".utf8), to: path)
        } throws: { error in
            guard let error = error as? DocumentError else { return false }
            return error.operation == .createTemporary && error.errno == .readOnlyFileSystem
                && error.path.hasPrefix(mountPoint + "/.doc.txt.autosave-") && "\(error)".contains("EROFS")
        }
        #expect(try Disk.bytes(path) == Data("keep me".utf8))
        #expect(Disk.temporaries(under: source).isEmpty)
    }

    @Test(
        "EACCES: an unwritable directory is reported with the operation and path",
        .enabled(if: Machine.has("setpriv")))
    func permissionDenied() throws {
        // Root ignores modes; the probe runs as nobody (setpriv) to meet a real EACCES.
        let locked = directory.sub("locked")
        try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: false)
        #expect(chmod(directory.path, 0o755) == 0)
        try Disk.write("mine", to: locked + "/doc.txt")
        #expect(chmod(locked, 0o755) == 0)
        let result = try Machine.run(
            "setpriv",
            ["--reuid=65534", "--regid=65534", "--clear-groups", Machine.probe, "write", locked + "/doc.txt"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("create temporary file '\(locked)/.doc.txt.autosave-"))
        #expect(result.stderr.contains("EACCES"))
        #expect(try Disk.bytes(locked + "/doc.txt") == Data("mine".utf8))
    }
}
