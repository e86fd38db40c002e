import Foundation
@preconcurrency import Glibc
import Testing

@testable import Posix

@Suite("Posix: typed system calls")
final class PosixTests {
    let path: String
    let directory: FileDescriptor

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/posix-XXXXXX").utf8CString)
        precondition(template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) } != nil)
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        directory = try FileDescriptor.open(path, options: [.directory])
    }

    deinit {
        try? directory.close()
        try? FileManager.default.removeItem(atPath: path)
    }

    @Test("Errno has names, messages and pattern matching")
    func errno() {
        #expect(Errno.noSpace.name == "ENOSPC")
        #expect(Errno.noSpace.description == "ENOSPC (No space left on device)")
        #expect(Errno(rawValue: 9999).name == "E9999")
        let error: any Error = Errno.readOnlyFileSystem
        switch error {
        case Errno.readOnlyFileSystem: break
        default: Issue.record("~= did not match")
        }
    }

    @Test("Create, write, read back, stat, exclusive create fails with EEXIST")
    func files() throws {
        let fd = try FileDescriptor.open(
            "f", relativeTo: directory, .readWrite, options: [.exclusiveCreate], permissions: .init(rawValue: 0o640))
        try fd.closeAfter { () throws(Errno) in
            try fd.writeAll(Array("hello world".utf8))
            try fd.sync()
        }
        let status = try directory.status(of: "f")
        #expect(status.kind == .regular)
        #expect(status.size == 11)
        #expect(status.permissions.rawValue & 0o700 == 0o600)

        let reader = try FileDescriptor.open("f", relativeTo: directory)
        let bytes = try reader.closeAfter { () throws(Errno) in try reader.readToEnd() }
        #expect(String(decoding: bytes, as: UTF8.self) == "hello world")

        #expect(throws: Errno.fileExists) {
            try FileDescriptor.open("f", relativeTo: directory, .writeOnly, options: [.exclusiveCreate])
        }
    }

    @Test("A path with a NUL byte is refused instead of being cut short")
    func nulByte() throws {
        try FileDescriptor.open("safe", relativeTo: directory, .writeOnly, options: [.create]).close()
        #expect(throws: Errno.invalidArgument) {
            try FileDescriptor.open("safe\u{0}/../../etc/passwd", relativeTo: directory)
        }
    }

    @Test("Large reads cross the chunk boundary intact")
    func largeRead() throws {
        let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let fd = try FileDescriptor.open("big", relativeTo: directory, .readWrite, options: [.create])
        try fd.closeAfter { () throws(Errno) in try fd.writeAll(data) }
        let reader = try FileDescriptor.open("big", relativeTo: directory)
        #expect(try reader.closeAfter { () throws(Errno) in try reader.readToEnd() } == data)
    }

    @Test(
        "readToEnd reads every byte whatever the hint: exact, too small (a file that grew after its stat), too large, none; and from an offset",
        arguments: [0, 1, 4095, 4096, 4097, 65_537])
    func readToEndHints(size: Int) throws {
        let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
        let name = "hint-\(size)"
        let fd = try FileDescriptor.open(name, relativeTo: directory, .readWrite, options: [.create])
        try fd.closeAfter { () throws(Errno) in try fd.writeAll(data) }
        for hint in [size, 0, max(0, size - 1), size / 2, size + 1, size * 3 + 10] {
            let reader = try FileDescriptor.open(name, relativeTo: directory)
            #expect(try reader.closeAfter { () throws(Errno) in try reader.readToEnd(sizeHint: hint) } == data)
        }
        if size > 0 {
            let reader = try FileDescriptor.open(name, relativeTo: directory)
            defer { try? reader.close() }
            var first = [UInt8](repeating: 0, count: 1)
            #expect(try first.withUnsafeMutableBytes { try reader.read(into: $0) } == 1)
            #expect(try reader.readToEnd(sizeHint: size) == Array(data.dropFirst()))
        }
    }

    @Test("readToEnd of a small file with its size as the hint allocates about that size, not a 64 KiB zeroed chunk")
    func readToEndSmallFileBuffer() throws {
        let data = Array(repeating: UInt8(ascii: "m"), count: 1000)
        let fd = try FileDescriptor.open("small", relativeTo: directory, .readWrite, options: [.create])
        try fd.closeAfter { () throws(Errno) in try fd.writeAll(data) }
        let reader = try FileDescriptor.open("small", relativeTo: directory)
        let bytes = try reader.closeAfter { () throws(Errno) in try reader.readToEnd(sizeHint: 1000) }
        #expect(bytes == data)
        // Package members are read one by one with their size as the hint: zero-filling
        // 64 KiB (twice) for each cost ≈ 20 ms of CPU per member in a debug build.
        #expect(bytes.capacity < 16 * 1024, "capacity \(bytes.capacity)")
    }

    @Test("rename, renameat2 exchange and no-replace, link, unlink, mkdir, symlink, listing")
    func directoryOperations() throws {
        for name in ["a", "b"] {
            let fd = try FileDescriptor.open(name, relativeTo: directory, .writeOnly, options: [.create])
            try fd.closeAfter { () throws(Errno) in try fd.writeAll(Array(name.utf8)) }
        }
        let inodeA = try directory.status(of: "a").inode
        try directory.rename("a", to: "b", flags: .exchange)
        #expect(try directory.status(of: "b").inode == inodeA)
        #expect(throws: Errno.fileExists) { try directory.rename("a", to: "b", flags: .noReplace) }

        try directory.link("b", to: "b-link")
        #expect(try directory.status(of: "b-link").inode == inodeA)
        #expect(try directory.status(of: "b").linkCount == 2)

        try directory.makeDirectory("sub")
        try directory.makeSymbolicLink("s", pointingTo: "sub")
        #expect(try directory.status(of: "s").kind == .symbolicLink)
        #expect(try directory.status(of: "s", followSymlinks: true).kind == .directory)
        #expect(try directory.readSymbolicLink("s") == "sub")

        let entries = try directory.directoryEntries().sorted { $0.name < $1.name }
        #expect(entries.map(\.name) == ["a", "b", "b-link", "s", "sub"])
        #expect(entries.first { $0.name == "sub" }?.kind == .directory)

        try directory.unlink("b-link")
        try directory.unlink("sub", directory: true)
        #expect(try directory.statusIfPresent(of: "sub") == nil)
        #expect(throws: Errno.noSuchFile) { try directory.unlink("sub") }
    }

    /// `readdir` fills a 32 KiB buffer with entries packed by their length, so in a large
    /// directory the last entry of a buffer ends a few bytes after its name. Copying the
    /// declared 256-byte `d_name` read past the buffer there: under AddressSanitizer
    /// (`scripts/sanitize address --filter PosixTests`) a heap-buffer-overflow in
    /// `directoryEntries`; here, without a sanitizer, the names must come back whole.
    @Test("A listing of thousands of entries of every name length returns each name exactly")
    func largeListing() throws {
        var expected: [String] = []
        for index in 0..<3_000 {
            // Names of 1 to 60 bytes in turn, and one of 255 (the longest allowed).
            let stem = String(index)
            let name =
                index == 1_234 ? String(repeating: "n", count: 255) : stem + String(repeating: "x", count: index % 57)
            try FileDescriptor.open(name, relativeTo: directory, .writeOnly, options: [.create]).close()
            expected.append(name)
        }
        let listed = try directory.directoryEntries()
        #expect(listed.count == expected.count)
        #expect(listed.map(\.name).sorted() == expected.sorted())
        #expect(listed.allSatisfy { $0.nameIsUTF8 && $0.kind == .regular })
    }

    @Test("openBeneath refuses paths that leave the directory")
    func beneath() throws {
        try directory.makeDirectory("inside")
        try directory.makeSymbolicLink("escape", pointingTo: "/etc")
        try FileDescriptor.openBeneath("inside", relativeTo: directory, options: [.directory]).close()
        for path in ["../x", "/etc/passwd", "inside/../../x", "escape/passwd"] {
            #expect(throws: Errno.self, "\(path)") {
                try FileDescriptor.openBeneath(path, relativeTo: directory)
            }
        }
        #expect(throws: Errno.tooManySymbolicLinks) {
            try FileDescriptor.openBeneath("escape", relativeTo: directory, noSymlinks: true)
        }
    }

    @Test("Without openat2 (ENOSYS under some seccomp filters), the component walk refuses the same paths")
    func beneathByWalking() throws {
        try directory.makeDirectory("inside")
        try directory.makeSymbolicLink("escape", pointingTo: "/etc")
        try directory.makeSymbolicLink("inside/loop", pointingTo: "..")
        try FileDescriptor.openBeneathByWalking(
            "inside", relativeTo: directory, .readOnly, options: [.pathOnly], permissions: .init(rawValue: 0)
        ).close()
        for path in ["../x", "/etc/passwd", "inside/../../x", "escape/passwd", "escape", "inside/loop/inside"] {
            #expect(throws: Errno.self, "\(path)") {
                try FileDescriptor.openBeneathByWalking(
                    path, relativeTo: directory, .readOnly, options: [.pathOnly], permissions: .init(rawValue: 0))
            }
        }
        #expect(throws: Errno.noSuchFile) {
            try FileDescriptor.openBeneathByWalking(
                "inside/absent", relativeTo: directory, .readOnly, options: [.pathOnly], permissions: .init(rawValue: 0)
            )
        }
    }

    @Test("Ownership and mode changes through a descriptor", .enabled(if: getuid() == 0))
    func ownership() throws {
        let fd = try FileDescriptor.open("o", relativeTo: directory, .writeOnly, options: [.create])
        try fd.closeAfter { () throws(Errno) in
            try fd.changeOwner(user: 65534, group: nil)
            try fd.changeMode(.init(rawValue: 0o604))
        }
        let status = try directory.status(of: "o")
        #expect(status.userID == 65534)
        #expect(status.groupID == getgid())
        #expect(status.permissions.rawValue == 0o604)
    }

    @Test("The process's umask is read without changing it")
    func umask() {
        let before = CurrentProcess.fileCreationMask
        #expect(CurrentProcess.fileCreationMask == before)
        let current = Glibc.umask(before.rawValue)
        #expect(current == before.rawValue)
        #expect(CurrentProcess.randomAlphanumerics(6).count == 6)
        #expect(CurrentProcess.randomAlphanumerics(6) != CurrentProcess.randomAlphanumerics(6))
    }
}

@Suite("PathName: path strings split without Foundation")
struct PathNameTests {
    @Test("A relative path made absolute as Foundation's file URLs make one (the store compares the two by bytes)")
    func absolute() {
        let cases: [(path: String, absolute: String)] = [
            ("./autosave-data", "/w/d/autosave-data"), ("autosave-data/", "/w/d/autosave-data"),
            ("a/./b//c", "/w/d/a/b/c"), ("../x", "/w/x"), ("../../../x", "/x"), (".", "/w/d"),
            ("/abs/./kept", "/abs/./kept"),
        ]
        for (path, absolute) in cases {
            #expect(PathName.absolute(path, cwd: "/w/d") == absolute, "\(path)")
        }
    }

    @Test("Last component, parent and extension, including the names Foundation's NSString traps on")
    func table() {
        let cases: [(path: String, parent: String, last: String)] = [
            ("", "", ""), ("x", "", "x"), ("é", "", "é"), ("a/", "", "a"), ("ab", "", "ab"),
            ("/", "/", "/"), ("//", "/", "/"), ("/a", "/", "a"), ("//é", "/", "é"), ("a/b", "a", "b"),
            ("a//b", "a", "b"), ("a/b/", "a", "b"), ("/a/b/c.txt", "/a/b", "c.txt"), ("d/x", "d", "x"),
            ("é/ü/ß.txt", "é/ü", "ß.txt"), ("./a", ".", "a"), ("..", "", ".."),
        ]
        for (path, parent, last) in cases {
            #expect(PathName.parent(path) == parent, "parent of \(path.debugDescription)")
            #expect(PathName.lastComponent(path) == last, "last component of \(path.debugDescription)")
        }
        let names: [(name: String, base: String, ext: String)] = [
            ("a.txt", "a", "txt"), ("a.tar.gz", "a.tar", "gz"), (".profile", ".profile", ""), ("a.", "a", ""),
            ("a", "a", ""), ("", "", ""), (".", ".", ""), ("..", ".", ""), ("é.tëxt", "é", "tëxt"), ("a..b", "a.", "b"),
        ]
        for (name, base, ext) in names {
            #expect(PathName.splitExtension(name) == (base, ext), "\(name.debugDescription)")
        }
        #expect(PathName.pathExtension("notes.d/a.JSON") == "JSON")
        #expect(PathName.pathExtension("notes.d/a") == "")
        #expect(PathName.pathExtension("x/.y") == "")
        let relatives: [(path: String, root: String, relative: String?)] = [
            ("/r/a/b", "/r", "a/b"), ("/r/a", "/r/", "a"), ("/r", "/r", "."), ("/r", "/r/", "."), ("/ra/b", "/r", nil),
            ("/x/a", "/r", nil), ("/a", "/", "a"), ("/", "/", "."), ("r/a", "r", "a"), ("/r/", "/r", nil),
            ("/r//", "/r", "/"), ("/é/ü/x", "/é", "ü/x"), ("/é/ü", "/é/", "ü"), ("/é", "/e\u{301}", nil),
            ("/r", "/r/a", nil), ("", "", "."), ("/a", "", "a"),
        ]
        for (path, root, relative) in relatives {
            #expect(PathName.relative(path, to: root) == relative, "\(path) under \(root)")
        }
        // Split and compared by bytes: a '/' followed by a combining mark still separates,
        // and canonically equivalent names are different names.
        #expect(PathName.components("a/\u{301}b//c").map { Array($0.utf8) } == [[97], [0xCC, 0x81, 98], [99]])
        #expect(PathName.components("a//b", omittingEmpty: false) == ["a", "", "b"])
        #expect(PathName.isWithin("x/\u{301}y", "x") && PathName.isWithin("x", "x") && !PathName.isWithin("xy", "x"))
        #expect(!PathName.isWithin("/srv/cafe\u{301}/a", "/srv/caf\u{E9}"), "canonically equal, not the same bytes")
        #expect(!PathName.starts("caf\u{E9}/a", with: "cafe\u{301}/"))
        // `..` as a component, by the general definition, over every path of up to six
        // characters from 'a', '.', '/'.
        var paths = [""]
        for _ in 1...6 {
            paths = paths.flatMap { path in ["a", ".", "/"].map { path + $0 } }
            for path in paths {
                let expected = path.split(separator: "/", omittingEmptySubsequences: false).contains("..")
                #expect(PathName.hasParentComponent(path) == expected, "\(path)")
            }
        }
    }

    @Test("Every path of up to six characters from a, é, '.', '/': parent and last component put it back together")
    func exhaustive() {
        let alphabet = ["a", "é", ".", "/"]
        var paths = [""]
        var checked = 0
        for _ in 1...6 {
            paths = paths.flatMap { prefix in alphabet.map { prefix + $0 } }
            for path in paths {
                let parent = PathName.parent(path)
                let last = PathName.lastComponent(path)
                #expect(!last.contains("/") || last == "/", "\(path.debugDescription)")
                #expect(!parent.hasSuffix("/") || parent == "/", "\(path.debugDescription)")
                // Without repeated or trailing slashes, the two halves rebuild the path.
                if !path.contains("//"), !path.hasSuffix("/"), path != "" {
                    let rebuilt = parent.isEmpty ? last : parent == "/" ? "/" + last : parent + "/" + last
                    #expect(
                        rebuilt == path,
                        "\(path.debugDescription) → \(parent.debugDescription) + \(last.debugDescription)")
                }
                let (base, ext) = PathName.splitExtension(last)
                #expect(ext.isEmpty ? (base == last || base + "." == last) : base + "." + ext == last)
                #expect(PathName.pathExtension(path) == ext, "\(path.debugDescription)")
                checked += 1
            }
        }
        #expect(checked == 4 + 16 + 64 + 256 + 1024 + 4096)
    }
}

@Suite("Grouping: items by a dense slot number, in order within each group")
struct GroupingTests {
    @Test("Each slot's items in the order given, empty slots empty, every index once")
    func groups() {
        let grouping = Grouping(slots: [2, 0, 2, 1, 0], slotCount: 4)
        #expect(grouping.starts == [0, 2, 3, 5, 5])
        #expect(Array(grouping.group(0)) == [1, 4])
        #expect(Array(grouping.group(1)) == [3])
        #expect(Array(grouping.group(2)) == [0, 2])
        #expect(grouping.group(3).isEmpty)
        #expect(grouping.members.sorted() == Array(0..<5))
        #expect(Grouping(slots: [], slotCount: 0).members.isEmpty)
    }

    @Test("Keys are numbered densely in the order first seen; a known key keeps its number")
    func numbering() {
        var numbering = DenseNumbering<String>()
        let numbers = ["b", "a", "b", "c", "a"].map { numbering.number(of: $0) }
        #expect(numbers == [0, 1, 0, 2, 1])
        #expect(numbering.keys == ["b", "a", "c"])
        #expect(numbering.existingNumber(of: "c") == 2)
        #expect(numbering.existingNumber(of: "d") == nil)
        let grouping = Grouping(slots: numbers, slotCount: numbering.keys.count)
        #expect(Array(grouping.group(0)) == [0, 2])
        #expect(Array(grouping.group(1)) == [1, 4])
    }
}
