import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// Trees the FileWrapper fuzz target (Fuzz/Sources/FuzzFileWrapper) found read wrongly.
@Suite("Fuzz finds: FileWrapper over generated trees")
struct FileWrapperFuzzRegressionTests {
    let directory = TemporaryDirectory("wrapper-fuzz")

    @Test("A link whose destination is not UTF-8 is refused, not read as another destination (FuzzFileWrapper)")
    func linkDestinationNotUTF8() throws {
        let package = directory.sub("tree.package")
        try FileManager.default.createDirectory(atPath: package, withIntermediateDirectories: false)
        try Disk.write("x", to: package + "/n3")
        // As found: a destination with the byte 0xFC, which a String cannot hold.
        let destination: [UInt8] = [98, 7, 0xFC, 98, 3, 4, 108, 105, 110, 107, 0]
        let made = destination.withUnsafeBufferPointer { d in
            d.withMemoryRebound(to: CChar.self) { symlink($0.baseAddress!, package + "/s") }
        }
        #expect(made == 0)
        // Read before as "b\u{7}\u{FFFD}b…", and written back so by a save: another link.
        #expect(throws: DocumentError.self) {
            _ = try FileWrapper(url: URL(fileURLWithPath: package), options: [.immediate])
        }
        #expect(throws: Errno.illegalByteSequence) {
            _ = try FileDescriptor.currentWorkingDirectory.readSymbolicLink(package + "/s")
        }
    }

    @Test("A name that is not UTF-8 is refused, not read as the file whose name its String spells (FuzzFileWrapper)")
    func nameNotUTF8() throws {
        let package = directory.sub("names.package")
        try FileManager.default.createDirectory(atPath: package, withIntermediateDirectories: false)
        // As found: a directory named by nine 0xBF bytes beside a file named by nine U+FFFD,
        // which is what the directory's name decodes to: read as one entry, the directory was lost.
        try Disk.write("kept", to: package + "/" + String(repeating: "\u{FFFD}", count: 9))
        let bad = Array(package.utf8) + [UInt8(ascii: "/")] + Array(repeating: 0xBF, count: 9) + [0]
        let made = bad.withUnsafeBufferPointer {
            $0.withMemoryRebound(to: CChar.self) { mkdir($0.baseAddress!, 0o755) }
        }
        #expect(made == 0)
        #expect(throws: DocumentError.self) {
            _ = try FileWrapper(url: URL(fileURLWithPath: package), options: [.immediate])
        }
        let fd = try FileDescriptor.open(package, options: [.directory])
        let entries = try fd.closeAfter { () throws(Errno) -> [DirectoryEntry] in try fd.directoryEntries() }
        #expect(entries.filter { !$0.nameIsUTF8 }.count == 1)
    }
}
