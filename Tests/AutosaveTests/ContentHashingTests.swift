import Control
import Documents
import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// The hash of a file's bytes that fingerprints and the journal's `saving` records carry.
@Suite("The content hash of a save")
struct ContentHashingTests {
    /// Bytes 0…255 repeated 4,096 times, then "xyz": 1,048,579 bytes.
    static let megabyte = Data((0..<(256 * 4096)).map { UInt8(truncatingIfNeeded: $0) } + Array("xyz".utf8))

    @Test("StableHash is xxHash64 with seed 0: the values any other implementation gives")
    func xxHash64() {
        // From the python `xxhash` package: xxhash.xxh64(bytes, seed=0).intdigest().
        #expect(StableHash.of(Data()) == 0xEF46_DB37_51D8_E999)
        #expect(StableHash.of(Data("abc".utf8)) == 0x44BC_2CF5_AD77_0999)
        #expect(StableHash.of(Self.megabyte) == 0x4529_1252_403C_9B64)
    }

    @Test(
        "The hash of a regular file's bytes, held as data or as text, computed once when the writer asks or when read",
        arguments: [0, 1, 4096, DurableWriter.writeBackAheadBytes - 1, DurableWriter.writeBackAheadBytes, 1 << 20]
    )
    func hashOfTheBytes(size: Int) throws {
        let bytes = Self.megabyte.prefix(size)
        let expected = StableHash.of(Data(bytes))
        #expect(try #require(ContentHashing(FileWrapper(regularFileWithContents: Data(bytes)))).value == expected)
        let computed = try #require(ContentHashing(FileWrapper(regularFileWithContents: Data(bytes))))
        _ = computed.value
        #expect(computed.value == expected)
        // Text held as a string: hashed from the string's own bytes.
        let text = String(repeating: "x", count: size)
        #expect(
            try #require(ContentHashing(FileWrapper(regularFileWithText: text))).value
                == StableHash.of(Data(text.utf8)))
        #expect(ContentHashing(FileWrapper(directoryWithFileWrappers: [:])) == nil)
    }

    @Test(
        "A save names the file it puts in place, size and hash of its bytes, small and large: in its mark, or where the file system keeps no extended attributes (a ramfs), in its journal record",
        arguments: [false, true])
    func savingRecords(unmarked: Bool) async throws {
        let scratch = TemporaryDirectory("content-hash")
        let root = scratch.sub("root")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        var ramfs: Mount?
        if unmarked {
            guard Machine.isRoot else { return }  // mounting needs root
            ramfs = try Mount(ramfsAt: root)
        }
        defer { withExtendedLifetime((ramfs, scratch)) {} }
        let rig = try JournalRig(root: root)
        try await rig.start()
        let pieces = DurableWriter.writeBackAheadBytes / 16 * 2
        let large = String(repeating: "0123456789abcdef", count: pieces) + "end\n"
        for (doc, text) in [("small.txt", "a small document\n"), ("large.txt", large)] {
            try rig.ok(["cmd": "set", "doc": .string(doc), "text": .string(text)])
            try rig.ok(["cmd": "save", "doc": .string(doc), "wait": true])
        }
        rig.kill()
        var saved: [String: FileIdentity] = [:]
        for segment in rig.segments {
            let bytes = [UInt8](try Disk.bytes(rig.journal + "/" + segment))
            var offset = 32
            while offset + 8 <= bytes.count {
                let length = (0..<4).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
                guard length >= 16, offset + 8 + length <= bytes.count else { break }
                let payload = bytes[(offset + 24)..<(offset + 8 + length)]
                if case .saving(let path, _, let file)? = try? JournalEntry(decoding: payload) { saved[path] = file }
                offset += 8 + length
            }
        }
        for doc in ["small.txt", "large.txt"] {
            let contents = try Disk.bytes(rig.root + "/" + doc)
            let identity = FileIdentity(size: Int64(contents.count), hash: StableHash.of(contents))
            let attribute = try FileDescriptor.currentWorkingDirectory.attribute(
                SaveMark.attributeName, of: rig.root + "/" + doc)
            if unmarked {
                #expect(attribute == nil)
                #expect(saved[doc] == identity, "\(doc)")
            } else {
                #expect(attribute.flatMap(SaveMark.init)?.file == identity, "\(doc)")
                #expect(saved[doc] == nil, "\(doc): a marked save writes no record")
            }
        }
    }
}
