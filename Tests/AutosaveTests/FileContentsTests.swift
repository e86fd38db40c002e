import Foundation
import Posix
import TestSupport
import Testing

@testable import Autosave

/// The store's reads of whole files (the watcher's check of a changed file, a base for
/// the journal) go through `FileContents`, not Foundation's
/// `Data(contentsOf:)`, which leaks a 4 KiB buffer on every read of an empty file.
@Suite("Reading whole files: the bytes, and no leak on empty files")
struct FileContentsTests {
    let directory = TemporaryDirectory("file-contents")

    @Test("Empty, small and large files read as their bytes; a directory or a missing file as nil")
    func bytes() throws {
        let sizes = [0, 1, 4095, 4096, 4097, 200_000]
        for size in sizes {
            let path = directory.sub("f\(size)")
            let bytes = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            try bytes.write(to: URL(fileURLWithPath: path))
            #expect(FileContents.read(path) == bytes, "a file of \(size) bytes")
        }
        try FileManager.default.createSymbolicLink(atPath: directory.sub("link"), withDestinationPath: "f4096")
        #expect(FileContents.read(directory.sub("link"))?.count == 4096)
        try FileManager.default.createDirectory(atPath: directory.sub("dir"), withIntermediateDirectories: false)
        #expect(FileContents.read(directory.sub("dir")) == nil)
        #expect(FileContents.read(directory.sub("missing")) == nil)
    }

    /// glibc's count of bytes in use, before and after 5,000 reads of an empty file: the
    /// leak was 4 KiB a read (20 MB here). Not under a sanitizer, whose allocator glibc's
    /// count does not see.
    @Test("Reading an empty file again and again keeps no memory", .enabled(if: Machine.isUnsanitized))
    func emptyFileLeaksNothing() throws {
        let path = directory.sub("empty")
        try Data().write(to: URL(fileURLWithPath: path))
        func growth(_ read: () -> Data?) -> Int {
            let before = Allocator.usage().used
            for _ in 0..<5000 { _ = read() }
            return Allocator.usage().used - before
        }
        _ = growth { FileContents.read(path) }  // once, so that lazily made state is there
        let ours = growth { FileContents.read(path) }
        #expect(ours < 1 << 20, "5,000 reads of an empty file kept \(ours) bytes")
        // For the record, what Foundation's reader keeps on this toolchain (not asserted: a
        // fixed toolchain keeps nothing).
        let foundation = growth { try? Data(contentsOf: URL(fileURLWithPath: path)) }
        print("FileContentsTests: 5,000 reads of an empty file kept \(ours) bytes; Foundation's \(foundation)")
    }
}
