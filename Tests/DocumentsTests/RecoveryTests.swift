import Documents
import Foundation
import Posix
import TestSupport
import Testing

@Suite("Recovery resolves every leftover of an interrupted write")
struct RecoveryTests {
    let directory = TemporaryDirectory("recovery")

    @Test("Leftover temp files, links and trees are removed; documents are untouched")
    func removesTemporaries() throws {
        try Disk.write("doc", to: directory.sub("doc.txt"))
        try Disk.write("half", to: directory.sub(".doc.txt.autosave-Ab12Cd"))
        #expect(symlink("x", directory.sub(".link.autosave-ZZZZZZ")) == 0)
        try FileManager.default.createDirectory(
            atPath: directory.sub("pkg.pkg/.member.autosave-000000"), withIntermediateDirectories: true)
        try Disk.write("m", to: directory.sub("pkg.pkg/member"))
        try FileManager.default.createDirectory(
            atPath: directory.sub(".pkg.pkg.autosave-qwerty/inner"), withIntermediateDirectories: true)
        // Names that only look similar are documents, not temporaries.
        try Disk.write("user", to: directory.sub(".hidden.autosave-notes"))
        try Disk.write("user", to: directory.sub("x.autosave-abcdef"))

        let report = try DurableWriter.recover(at: directory.path)

        #expect(report.removed.count == 4)
        #expect(report.restored.isEmpty)
        #expect(Disk.temporaries(under: directory.path).isEmpty)
        #expect(
            try Disk.names(in: directory.path) == [".hidden.autosave-notes", "doc.txt", "pkg.pkg", "x.autosave-abcdef"])
        #expect(try Disk.names(in: directory.sub("pkg.pkg")) == ["member"])
    }

    @Test("A swap cut between its renames is finished with the complete new tree")
    func finishesInterruptedSwap() throws {
        // State after the fallback's first rename: the old tree aside, the new one complete.
        try FileManager.default.createDirectory(
            atPath: directory.sub(".doc.pkg.autosave-old-AAAAAA"), withIntermediateDirectories: true)
        try Disk.write("old", to: directory.sub(".doc.pkg.autosave-old-AAAAAA/member"))
        try FileManager.default.createDirectory(
            atPath: directory.sub(".doc.pkg.autosave-BBBBBB"), withIntermediateDirectories: true)
        try Disk.write("new", to: directory.sub(".doc.pkg.autosave-BBBBBB/member"))

        let report = try DurableWriter.recover(at: directory.path)

        #expect(report.restored == [directory.sub("doc.pkg")])
        #expect(try Disk.names(in: directory.path) == ["doc.pkg"])
        #expect(try Disk.bytes(directory.sub("doc.pkg/member")) == Data("new".utf8))
    }

    @Test("A swap cut before a new tree existed puts the old tree back")
    func undoesSwapWithoutNewTree() throws {
        try FileManager.default.createDirectory(
            atPath: directory.sub(".doc.pkg.autosave-old-AAAAAA"), withIntermediateDirectories: true)
        try Disk.write("old", to: directory.sub(".doc.pkg.autosave-old-AAAAAA/member"))

        let report = try DurableWriter.recover(at: directory.path)

        #expect(report.restored == [directory.sub("doc.pkg")])
        #expect(try Disk.bytes(directory.sub("doc.pkg/member")) == Data("old".utf8))
        #expect(try Disk.names(in: directory.path) == ["doc.pkg"])
    }

    @Test("An old tree whose destination exists was already replaced: it is removed")
    func removesReplacedOldTree() throws {
        try FileManager.default.createDirectory(atPath: directory.sub("doc.pkg"), withIntermediateDirectories: true)
        try Disk.write("current", to: directory.sub("doc.pkg/member"))
        try FileManager.default.createDirectory(
            atPath: directory.sub(".doc.pkg.autosave-old-AAAAAA"), withIntermediateDirectories: true)

        let report = try DurableWriter.recover(at: directory.path)

        #expect(report.restored.isEmpty)
        #expect(try Disk.names(in: directory.path) == ["doc.pkg"])
        #expect(try Disk.bytes(directory.sub("doc.pkg/member")) == Data("current".utf8))
    }

    @Test("Recovery of a directory that does not exist names it")
    func missingDirectory() {
        #expect {
            try DurableWriter.recover(at: directory.sub("absent"))
        } throws: { error in
            (error as? DocumentError)?.operation == .openDirectory && (error as? DocumentError)?.errno == .noSuchFile
        }
    }
}

@Suite(
    "The save recipe, as the kernel sees it", .enabled(if: Machine.has("strace"), "needs strace"),
    // ThreadSanitizer's runtime unlinks a file of its own (/tmp/tsan.rodata.PID) and
    // AddressSanitizer's makes calls of its own: the trace would not be the writer's alone.
    .enabled(if: Machine.isUnsanitized, "the sanitizer runtime's own system calls would be in the trace"))
struct StraceTests {
    let directory = TemporaryDirectory("strace")

    @Test("Exclusive create of the temp, write, fsync of the temp, rename over the target, fsync of the directory")
    func order() throws {
        let target = directory.sub("doc.txt")
        try Disk.write("old", to: target)
        // The old file's mode (0666 less the umask, which leaves it whole): set at creation.
        let oldMode = ", 0" + String(try Disk.status(target).permissions.rawValue, radix: 8) + ") = "
        let log = directory.sub("trace.log")
        let result = try Machine.run(
            "strace",
            [
                "-f", "-qq", "-o", log, "-e",
                "trace=openat,write,fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat",
                Machine.probe, "write", target, "--size", "4096",
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)

        func index(_ predicate: (String) -> Bool) -> Int? { lines.firstIndex(where: predicate) }
        func fd(of line: String) -> String? { line.split(separator: "=").last?.trimmingCharacters(in: .whitespaces) }

        let directoryOpen = try #require(
            index {
                $0.contains("openat(AT_FDCWD, \"\(directory.path)\"") && $0.contains("O_DIRECTORY")
            })
        let directoryFD = try #require(fd(of: lines[directoryOpen]))
        let create = try #require(
            index {
                $0.contains("openat(\(directoryFD), \".doc.txt.autosave-") && $0.contains("O_CREAT")
                    && $0.contains("O_EXCL")
                    && $0.contains("O_NOFOLLOW") && $0.contains(oldMode)
            })
        let tempFD = try #require(fd(of: lines[create]))
        let write = try #require(index { $0.contains("write(\(tempFD), ") && $0.hasSuffix("= 4096") })
        let fileSync = try #require(index { $0.contains("fsync(\(tempFD))") })
        let rename = try #require(
            index {
                $0.contains("rename") && $0.contains(".doc.txt.autosave-") && $0.contains("\"doc.txt\")")
            })
        let directorySync = try #require(index { $0.contains("fsync(\(directoryFD))") })

        #expect(directoryOpen < create)
        #expect(create < write)
        #expect(write < fileSync)
        #expect(fileSync < rename)
        #expect(rename < directorySync)
        #expect(!lines.contains { $0.contains("unlink") }, "a successful save unlinks nothing")
        #expect(try Disk.bytes(target).count == 4096)
    }
}
