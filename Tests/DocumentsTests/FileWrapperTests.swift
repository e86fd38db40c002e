import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

@Suite("FileWrapper has Apple's semantics")
struct FileWrapperTests {
    let directory = TemporaryDirectory("wrapper")

    @Test("Kinds and contents")
    func kinds() {
        let file = FileWrapper(regularFileWithContents: Data("x".utf8))
        #expect(file.isRegularFile && !file.isDirectory && !file.isSymbolicLink)
        #expect(file.regularFileContents == Data("x".utf8))
        #expect(file.fileWrappers == nil)
        #expect(file.symbolicLinkDestinationURL == nil)

        let link = FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "/etc/hostname"))
        #expect(link.isSymbolicLink)
        #expect(link.symbolicLinkDestinationURL?.path == "/etc/hostname")
        #expect(link.regularFileContents == nil)

        let folder = FileWrapper(directoryWithFileWrappers: ["f": file])
        #expect(folder.isDirectory)
        #expect(folder.fileWrappers?["f"] === file)
        #expect(file.filename == "f")
        #expect(file.preferredFilename == "f")
    }

    @Test(
        "Text held as a string is the file Data of its UTF-8 makes: written, read back, and as a package member; released to disk once written"
    )
    func text() throws {
        let text = "naïve ✓\n" + String(repeating: "line of text\n", count: 40_000)
        let file = FileWrapper(regularFileWithText: text)
        #expect(file.isRegularFile && file.contentsCount == text.utf8.count)
        #expect(try file.withContents { Data($0) } == Data(text.utf8))
        let path = directory.sub("text.txt")
        let writer = DurableWriter(keepsWrittenContents: false)
        let report = try writer.write(file, to: path)
        #expect(report.bytesWritten == text.utf8.count)
        #expect(try Disk.bytes(path) == Data(text.utf8))
        // Written and not kept: read back from the file on access, checked against it.
        #expect(!file.isContentsLoaded && file.contentsCount == nil)
        #expect(file.regularFileContents == Data(text.utf8))

        let package = FileWrapper(directoryWithFileWrappers: ["m.txt": FileWrapper(regularFileWithText: "member é\n")])
        try writer.write(package, to: directory.sub("p.package"), options: .atomic)
        #expect(try Disk.bytes(directory.sub("p.package/m.txt")) == Data("member é\n".utf8))

        // Data asked for is made once from the string.
        let kept = FileWrapper(regularFileWithText: "abc")
        #expect(kept.regularFileContents == Data("abc".utf8) && kept.regularFileContents == Data("abc".utf8))
    }

    @Test("A taken name is made unique the way Apple does, and the key used is returned")
    func uniqueKeys() {
        let folder = FileWrapper(directoryWithFileWrappers: [:])
        #expect(folder.addRegularFile(withContents: Data("1".utf8), preferredFilename: "a.txt") == "a.txt")
        #expect(folder.addRegularFile(withContents: Data("2".utf8), preferredFilename: "a.txt") == "2__#$!@%!#__a.txt")
        #expect(folder.addRegularFile(withContents: Data("3".utf8), preferredFilename: "a.txt") == "3__#$!@%!#__a.txt")

        let child = folder.fileWrappers!["2__#$!@%!#__a.txt"]!
        #expect(child.preferredFilename == "a.txt")
        #expect(child.filename == "2__#$!@%!#__a.txt")
        #expect(folder.keyForChildFileWrapper(child) == "2__#$!@%!#__a.txt")

        folder.removeFileWrapper(child)
        #expect(folder.keyForChildFileWrapper(child) == nil)
        #expect(folder.fileWrappers?.count == 2)
        // Removing something that is not a child does nothing.
        folder.removeFileWrapper(FileWrapper(regularFileWithContents: Data()))
        #expect(folder.fileWrappers?.count == 2)
    }

    @Test("Reading is lazy unless .immediate, and a lazily read file that changed is not passed off as the old one")
    func lazyReading() throws {
        let path = directory.sub("pkg")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        try Disk.write("one", to: path + "/one.txt")
        try Disk.write("two", to: path + "/two.txt")

        let lazy = try FileWrapper(url: URL(fileURLWithPath: path))
        #expect(lazy.filename == "pkg")
        #expect(lazy.fileWrappers?["one.txt"]?.isContentsLoaded == false)
        #expect(lazy.fileWrappers?["one.txt"]?.regularFileContents == Data("one".utf8))
        #expect(lazy.fileWrappers?["one.txt"]?.isContentsLoaded == true)

        let immediate = try FileWrapper(url: URL(fileURLWithPath: path), options: .immediate)
        #expect(immediate.fileWrappers?["two.txt"]?.isContentsLoaded == true)

        // Another program replaces two.txt before the lazy wrapper read it.
        try DurableWriter().write(contents: Data("TWO, changed".utf8), to: path + "/two.txt")
        #expect(lazy.fileWrappers?["two.txt"]?.regularFileContents == nil)
        try lazy.read(from: URL(fileURLWithPath: path))
        #expect(lazy.fileWrappers?["two.txt"]?.regularFileContents == Data("TWO, changed".utf8))
    }

    @Test("Reading a missing file names the path and ENOENT")
    func readingMissing() {
        let path = directory.sub("absent")
        #expect {
            _ = try FileWrapper(url: URL(fileURLWithPath: path))
        } throws: { error in
            (error as? DocumentError)?.errno == .noSuchFile && (error as? DocumentError)?.path == path
        }
    }

    @Test("fileAttributes describe the node after a read; posixPermissions set the mode of a new file")
    func attributes() throws {
        let path = directory.sub("f.txt")
        try Disk.write("hello", to: path)
        #expect(chmod(path, 0o640) == 0)
        let wrapper = try FileWrapper(url: URL(fileURLWithPath: path))
        let attributes = wrapper.fileAttributes
        #expect(attributes[FileAttributeKey.posixPermissions.rawValue] as? Int == 0o640)
        #expect(attributes[FileAttributeKey.size.rawValue] as? Int == 5)
        #expect(attributes[FileAttributeKey.type.rawValue] as? String == FileAttributeType.typeRegular.rawValue)
        #expect(attributes[FileAttributeKey.modificationDate.rawValue] is Date)

        let fresh = FileWrapper(regularFileWithContents: Data("x".utf8))
        fresh.fileAttributes = [FileAttributeKey.posixPermissions.rawValue: 0o600]
        try fresh.write(to: directory.url.appendingPathComponent("fresh"), originalContentsURL: nil)
        #expect(try Disk.status(directory.sub("fresh")).permissions.rawValue == 0o600)
    }

    @Test(".withNameUpdating sets the written names")
    func nameUpdating() throws {
        let file = FileWrapper(regularFileWithContents: Data("x".utf8))
        try file.write(to: directory.url.appendingPathComponent("named.txt"), options: .withNameUpdating)
        #expect(file.filename == "named.txt")
        let other = FileWrapper(regularFileWithContents: Data("y".utf8))
        try other.write(to: directory.url.appendingPathComponent("kept.txt"))
        #expect(other.filename == nil)
    }

    @Test("matchesContents(of:) compares kind, bytes, link destinations and children")
    func matching() throws {
        let path = directory.sub("p")
        let wrapper = FileWrapper(directoryWithFileWrappers: [
            "a": FileWrapper(regularFileWithContents: Data("A".utf8)),
            "l": FileWrapper(symbolicLinkWithDestinationURL: URL(fileURLWithPath: "a")),
        ])
        try wrapper.write(to: URL(fileURLWithPath: path))
        #expect(wrapper.matchesContents(of: URL(fileURLWithPath: path)))

        let copy = FileWrapper(regularFileWithContents: Data("A".utf8))
        #expect(copy.matchesContents(of: URL(fileURLWithPath: path + "/a")))
        #expect(
            !FileWrapper(regularFileWithContents: Data("B".utf8)).matchesContents(of: URL(fileURLWithPath: path + "/a"))
        )

        try Disk.write("extra", to: path + "/extra")
        #expect(!wrapper.matchesContents(of: URL(fileURLWithPath: path)))
        #expect(!wrapper.matchesContents(of: URL(fileURLWithPath: directory.sub("absent"))))
    }

    @Test("The writer's temporaries are never read as package members")
    func temporariesHidden() throws {
        let path = directory.sub("p")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        try Disk.write("m", to: path + "/member")
        try Disk.write("half", to: path + "/.member.autosave-abcDEF")
        let wrapper = try FileWrapper(url: URL(fileURLWithPath: path))
        #expect(wrapper.fileWrappers.map { Array($0.keys) } == ["member"])
    }

    @Test("Read beneath a root: through a linked directory or from outside is refused; beneath it, as usual")
    func readBeneathRoot() throws {
        let root = directory.sub("root")
        let outside = directory.sub("outside")
        for path in [root + "/d", outside] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        try Disk.write("secret", to: outside + "/secret.txt")
        try Disk.write("mine", to: root + "/d/mine.txt")
        #expect(symlink(outside, root + "/link") == 0)

        // Unconfined, a linked directory leads outside.
        #expect(
            try FileWrapper(url: URL(fileURLWithPath: root + "/link/secret.txt")).regularFileContents
                == Data("secret".utf8))
        for path in [root + "/link/secret.txt", outside + "/secret.txt", root + "/../outside/secret.txt"] {
            #expect {
                try FileWrapper(url: URL(fileURLWithPath: path), beneath: root)
            } throws: { error in
                (error as? DocumentError)?.operation == .openDirectory
            }
        }
        let mine = try FileWrapper(url: URL(fileURLWithPath: root + "/d/mine.txt"), beneath: root + "/")
        #expect(mine.regularFileContents == Data("mine".utf8))
        let tree = try FileWrapper(url: URL(fileURLWithPath: root + "/d"), beneath: root)
        #expect(tree.fileWrappers?["mine.txt"]?.regularFileContents == Data("mine".utf8))
    }

    @Test(
        "Two names in a directory that differ only in Unicode normalization are refused, naming both, not read as one file under the other's name",
        arguments: [true, false])
    func normalizationTwins(immediate: Bool) throws {
        let package = directory.sub("twins-\(immediate).package")
        try FileManager.default.createDirectory(atPath: package + "/d", withIntermediateDirectories: true)
        // "café.txt" precomposed (U+00E9) and decomposed (e, U+0301): equal Strings, two files.
        try Disk.write("composed", to: package + "/d/caf\u{E9}.txt")
        try Disk.write("decomposed", to: package + "/d/cafe\u{301}.txt")
        #expect(try Disk.names(in: package + "/d").count == 2)
        #expect {
            try FileWrapper(url: URL(fileURLWithPath: package), options: immediate ? [.immediate] : [])
        } throws: { error in
            let message = "\(error)"
            return (error as? DocumentError)?.operation == .listDirectory
                && message.contains("caf\\u{E9}.txt") && message.contains("cafe\\u{301}.txt")
                && message.contains("differ only in Unicode normalization")
        }
        // One of them renamed: both read, each under its own name.
        #expect(rename(package + "/d/cafe\u{301}.txt", package + "/d/cafe2.txt") == 0)
        let tree = try FileWrapper(url: URL(fileURLWithPath: package), options: [.immediate])
        let d = tree.fileWrappers?["d"]?.fileWrappers
        #expect(d?["caf\u{E9}.txt"]?.regularFileContents == Data("composed".utf8))
        #expect(d?["cafe2.txt"]?.regularFileContents == Data("decomposed".utf8))
    }
}

@Suite("UTType")
struct UTTypeTests {
    @Test("Conformance chains of the common types")
    func conformance() {
        #expect(UTType.utf8PlainText.conforms(to: .plainText))
        #expect(UTType.utf8PlainText.conforms(to: .text))
        #expect(UTType.utf8PlainText.conforms(to: .data))
        #expect(UTType.utf8PlainText.conforms(to: .item))
        #expect(UTType.package.conforms(to: .directory))
        #expect(!UTType.package.conforms(to: .data))
        #expect(UTType.json.conforms(to: .text))
        #expect(!UTType.json.conforms(to: .plainText))
        #expect(UTType.json.isSubtype(of: .data))
        #expect(UTType.data.isSupertype(of: .png))
        #expect(!UTType.data.isSubtype(of: .data))
        #expect(UTType.markdown.supertypes.contains(.plainText))
    }

    @Test("Filename extensions and MIME types")
    func tags() {
        #expect(UTType(filenameExtension: "json") == .json)
        #expect(UTType(filenameExtension: "JSON") == .json)
        #expect(UTType(filenameExtension: "txt") == .plainText)
        #expect(UTType(filenameExtension: "md") == .markdown)
        #expect(UTType.json.preferredFilenameExtension == "json")
        #expect(UTType.jpeg.tags["public.filename-extension"] == ["jpeg", "jpg"])
        #expect(UTType(mimeType: "application/json") == .json)
        #expect(UTType.png.preferredMIMEType == "image/png")
        #expect(UTType("public.json") == .json)
        #expect(UTType("com.example.never-declared") == nil)
        #expect(UTType(filenameExtension: "") == nil)
    }

    @Test("An undeclared extension gives a dynamic type conforming to the requested supertype")
    func dynamic() throws {
        let type = try #require(UTType(filenameExtension: "zzqx"))
        #expect(type.isDynamic)
        #expect(!type.isDeclared)
        #expect(type.conforms(to: .data))
        #expect(type.preferredFilenameExtension == "zzqx")
        #expect(UTType(filenameExtension: "json", conformingTo: .image)?.isDynamic == true)
    }

    @Test("Declaring custom and package types")
    func declaring() {
        let notes = UTType.declare(
            "com.example.test-notes", conformingTo: [.package], filenameExtensions: ["testnotes"],
            description: "Test notes")
        #expect(notes.conforms(to: .package))
        #expect(notes.conforms(to: .directory))
        #expect(notes.isDeclared)
        #expect(UTType(filenameExtension: "testnotes", conformingTo: .package) == notes)
        // As on Apple platforms, the default supertype is public.data, which a package is not.
        #expect(UTType(filenameExtension: "testnotes")?.isDynamic == true)
        #expect(notes.localizedDescription == "Test notes")

        let exported = UTType(exportedAs: "com.example.exported-thing", conformingTo: .json)
        #expect(exported.conforms(to: .text))
        #expect(UTType("com.example.exported-thing") == exported)
        let imported = UTType(importedAs: "org.example.imported-thing")
        #expect(imported.conforms(to: .data))
    }
}
