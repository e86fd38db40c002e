import Autosave
import Control
import Documents
import Foundation
import Logging
import Posix
import TestSupport
import Testing

@Suite("Built-in document types through the store")
struct DocumentTypeTests {
    @Test("Plain text: set, append, replace a UTF-8 range; a range that splits a character is refused")
    func text() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        let store = harness.store
        try await store.apply(.setText("héllo"), to: "t.txt", create: true)
        try await store.apply(.append(" world"), to: "t.txt")
        try await store.apply(.replace(offset: 0, length: 3, with: "HÉ"), to: "t.txt")
        #expect(try await store.read("t.txt") == .text("HÉllo world"))
        await #expect {
            try await store.apply(.replace(offset: 2, length: 1, with: "x"), to: "t.txt")
        } throws: { error in
            (error as? StoreError)?.code == "bad-request" && "\(error)".contains("splits a UTF-8 character")
        }
        await #expect {
            try await store.apply(.replace(offset: 100, length: 1, with: "x"), to: "t.txt")
        } throws: { error in "\(error)".contains("outside the text") }
        for (offset, length) in [(Int.max, 1), (1, Int.max), (Int.min, -1), (-1, 1), (0, -1), (Int.max, Int.max)] {
            await #expect {
                try await store.apply(.replace(offset: offset, length: length, with: "x"), to: "t.txt")
            } throws: { error in
                (error as? StoreError)?.code == "bad-request"
                    && "\(error)".contains("offset \(offset) and length \(length) are outside the text")
            }
        }
        await #expect {
            try await store.apply(.mergePatch("{}"), to: "t.txt")
        } throws: { error in (error as? StoreError)?.code == "unsupported" }
        try await store.save("t.txt", wait: true)
        #expect(try harness.text(onDisk: "t.txt") == "HÉllo world")
    }

    @Test("A file that is not UTF-8 is refused as text with the offset of the first bad byte")
    func invalidUTF8() async throws {
        let harness = await StoreHarness()
        try Data([0x61, 0x62, 0xFF, 0x63]).write(to: URL(fileURLWithPath: harness.file("bad.txt")))
        await #expect {
            try await harness.store.open("bad.txt")
        } throws: { error in "\(error)".contains("offset 2") }
    }

    @Test("JSON: invalid text is refused with the parser's position; merge patch; get by pointer")
    func json() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        let store = harness.store
        await #expect {
            try await store.apply(.setJSON("{\n  \"a\": 1,\n  \"b\": tru\n}"), to: "c.json", create: true)
        } throws: { error in
            (error as? StoreError)?.code == "bad-request" && "\(error)".contains("line 3, column 8")
        }
        try await store.apply(
            .setJSON(
                #"{"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"}, "tags": ["example", "sample"], "content": "This will be unchanged"}"#
            ), to: "c.json", create: true)
        // The example of RFC 7396 section 3.
        try await store.apply(
            .mergePatch(
                #"{"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": null}, "tags": ["example"]}"#
            ), to: "c.json")
        let expected = try JSONValue(
            parsing:
                #"{"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"], "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"}"#
        )
        guard case .text(let text) = try await store.read("c.json") else {
            Issue.record("no text")
            return
        }
        #expect(try JSONValue(parsing: text) == expected)
        #expect(try await store.read("c.json", .jsonPointer("/author/givenName")) == .json(.string("John")))
        #expect(try await store.read("c.json", .jsonPointer("/tags/0")) == .json(.string("example")))
        await #expect {
            try await store.read("c.json", .jsonPointer("/tags/5"))
        } throws: { error in (error as? StoreError)?.code == "not-found" && "\(error)".contains("past the end") }
        try await store.save("c.json", wait: true)
        #expect(try JSONValue(parsing: try harness.text(onDisk: "c.json")) == expected)
    }

    @Test("A new JSON document starts as an empty object")
    func newJSON() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        try await harness.store.create("new.json")
        try await harness.store.apply(.mergePatch(#"{"a": 1}"#), to: "new.json")
        #expect(try await harness.store.read("new.json", .jsonPointer("/a")) == .json(.number("1")))
        await #expect(throws: StoreError.alreadyExists("new.json")) { try await harness.store.create("new.json") }
    }

    @Test("Packages: put, remove and read members; untouched members stay on disk, unloaded and unwritten")
    func package() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        let root = harness.root
        try FileManager.default.createDirectory(
            atPath: root + "/book.package/chapters", withIntermediateDirectories: true)
        for i in 1...3 { try Disk.write("chapter \(i)\n", to: root + "/book.package/chapters/\(i).txt") }
        try Disk.write("{}", to: root + "/book.package/meta.json")
        let inodeBefore = try Disk.inode(root + "/book.package/chapters/1.txt")
        let store = harness.store
        try await store.open("book.package")
        #expect(
            try await store.read("book.package", .members)
                == .members(["chapters/1.txt", "chapters/2.txt", "chapters/3.txt", "meta.json"]))

        try await store.apply(.putMember("chapters/2.txt", Data("chapter two, revised\n".utf8)), to: "book.package")
        try await store.apply(.putMember("appendix/a.txt", Data("new\n".utf8)), to: "book.package")
        try await store.apply(.removeMember("meta.json"), to: "book.package")
        let document = try await store.document("book.package", as: PackageDocument.self)
        #expect(!document.isLoaded("chapters/1.txt"))
        #expect(try await store.read("book.package", .member("chapters/3.txt")) == .data(Data("chapter 3\n".utf8)))
        try await store.save("book.package", wait: true)

        #expect(
            try Disk.inode(root + "/book.package/chapters/1.txt") == inodeBefore, "an untouched member is not rewritten"
        )
        #expect(try Disk.bytes(root + "/book.package/chapters/2.txt") == Data("chapter two, revised\n".utf8))
        #expect(try Disk.bytes(root + "/book.package/appendix/a.txt") == Data("new\n".utf8))
        #expect(!FileManager.default.fileExists(atPath: root + "/book.package/meta.json"))
        #expect(
            !(try await store.document("book.package", as: PackageDocument.self)).isLoaded("chapters/2.txt"),
            "saved bytes are not kept twice")
        #expect(
            try await store.read("book.package", .member("chapters/2.txt"))
                == .data(Data("chapter two, revised\n".utf8)))

        await #expect {
            try await store.apply(.putMember("../escape", Data()), to: "book.package")
        } throws: { error in (error as? StoreError)?.code == "bad-request" }
        await #expect {
            try await store.apply(.removeMember("nope"), to: "book.package")
        } throws: { error in (error as? StoreError)?.code == "not-found" }
    }

    @Test(
        "A file inside a package is the package's member, never a document of its own: opening, creating or setting one is refused"
    )
    func insidePackage() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        let root = harness.root
        try FileManager.default.createDirectory(atPath: root + "/d/book.package/ch", withIntermediateDirectories: true)
        try Disk.write("one\n", to: root + "/d/book.package/ch/1.txt")
        let store = harness.store
        try await store.open("d/book.package")
        let attempts: [(String, @Sendable (DocumentStore) async throws -> Void)] = [
            ("open d/book.package/ch/1.txt", { try await $0.open("d/book.package/ch/1.txt") }),
            (
                "set d/book.package/ch/1.txt",
                { try await $0.apply(.setText("x"), to: "d/book.package/ch/1.txt", create: true) }
            ),
            ("create d/book.package/new.txt", { try await $0.create("d/book.package/new.txt") }),
            (
                "set d/book.package/ch/2.txt",
                { try await $0.apply(.setText("x"), to: "d/book.package/ch/2.txt", create: true) }
            ),
            (
                "set x.package/y.txt (no package open)",
                { try await $0.apply(.setText("x"), to: "x.package/y.txt", create: true) }
            ),
        ]
        for (name, attempt) in attempts {
            await #expect("\(name)") {
                try await attempt(store)
            } throws: { error in
                (error as? StoreError)?.code == "invalid-path" && "\(error)".contains("inside the package document")
            }
        }
        #expect(await store.list().map(\.path) == ["d/book.package"])
        try await store.saveAll(wait: true)
        #expect(try Disk.names(in: root + "/d/book.package/ch") == ["1.txt"])
        #expect(try harness.text(onDisk: "d/book.package/ch/1.txt") == "one\n")
        #expect(!FileManager.default.fileExists(atPath: root + "/x.package"))
        // A directory that merely holds documents is no package: its files are documents.
        try await store.apply(.setText("fine"), to: "d/notes.txt", create: true)
    }

    @Test("Raw data documents hold bytes as they are")
    func data() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        let bytes = Data([0, 1, 2, 0xFF, 0xFE])
        try await harness.store.apply(.setData(bytes), to: "blob.bin", create: true)
        try await harness.store.save("blob.bin", wait: true)
        #expect(try Disk.bytes(harness.file("blob.bin")) == bytes)
        #expect(try await harness.store.read("blob.bin") == .data(bytes))
    }

    @Test("Paths that leave the root or use the writer's temporary names are refused")
    func paths() async throws {
        let harness = await StoreHarness()
        for path in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "nul\u{0}byte", ".doc.txt.autosave-Ab12Cd"] {
            await #expect(throws: StoreError.self, "\(path)") {
                try await harness.store.apply(.setText("x"), to: path, create: true)
            }
        }
        #expect(await harness.store.status().documents == 0)
    }

    @Test("A library user's own FileDocument type, registered by content type and extension")
    func customType() async throws {
        struct Counter: AutosaveDocument {
            static let type = UTType.declare(
                "com.example.counter", conformingTo: [.data], filenameExtensions: ["count"])
            static var readableContentTypes: [UTType] { [type] }
            var value: Int
            init(configuration: ReadConfiguration) throws {
                value = Int(String(decoding: configuration.file.regularFileContents ?? Data(), as: UTF8.self)) ?? 0
            }
            func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
                FileWrapper(regularFileWithContents: Data("\(value)".utf8))
            }
        }
        var registry = DocumentTypeRegistry()
        registry.register(Counter.self, contentType: Counter.type, filenameExtensions: ["count"])
        let harness = await StoreHarness(quiet: .seconds(3600), registry: registry)
        try Disk.write("41", to: harness.file("visits.count"))
        let value = try await harness.store.modify("visits.count", as: Counter.self) { counter in
            counter.value += 1
            return counter.value
        }
        #expect(value == 42)
        try await harness.store.save("visits.count", wait: true)
        #expect(try harness.text(onDisk: "visits.count") == "42")
        // The protocol's generic set replaces it by reading bytes as the file.
        try await harness.store.apply(.setData(Data("7".utf8)), to: "visits.count")
        #expect(try await harness.store.read("visits.count") == .data(Data("7".utf8)))
    }
}

@Suite("Fingerprints")
struct FingerprintTests {
    @Test("Recorded at load and after each save: device, inode, size, modification time and a content hash")
    func recorded() async throws {
        let harness = await StoreHarness(quiet: .seconds(3600))
        try Disk.write("same bytes\n", to: harness.file("a.txt"))
        try await harness.store.open("a.txt")
        let loaded = try #require(try await harness.store.fingerprint("a.txt"))
        let status = try Disk.status(harness.file("a.txt"))
        #expect(loaded.inode == status.inode && loaded.size == 11 && loaded.modified == status.modified)

        try await harness.store.apply(.setText("same bytes\n"), to: "b.txt", create: true)
        #expect(try await harness.store.fingerprint("b.txt") == nil, "never saved")
        try await harness.store.save("b.txt", wait: true)
        let saved = try #require(try await harness.store.fingerprint("b.txt"))
        #expect(saved.inode == (try Disk.inode(harness.file("b.txt"))))
        #expect(saved.contentHash == loaded.contentHash, "the same bytes hash the same")

        try await harness.store.apply(.append("more"), to: "b.txt")
        try await harness.store.save("b.txt", wait: true)
        let resaved = try #require(try await harness.store.fingerprint("b.txt"))
        #expect(resaved.contentHash != saved.contentHash)
        #expect(resaved.inode != saved.inode, "a save replaces the file")
    }
}
