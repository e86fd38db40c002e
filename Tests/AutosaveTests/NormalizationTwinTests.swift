import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// Package members whose names differ only in Unicode normalization: Linux keeps them
/// apart, a file wrapper's children (keyed by String) cannot.
@Suite("Members whose names differ only in Unicode normalization", .serialized)
struct NormalizationTwinTests {
    static let composed = "caf\u{E9}.txt"
    static let decomposed = "cafe\u{301}.txt"

    @Test(
        "A package holding such twins is not opened, and says which; one that comes to hold them while open keeps both files untouched: its save writes the edit, or fails naming the pair"
    )
    func twins() async throws {
        let rig = try JournalRig()
        for package in ["p.package", "q.package"] {
            try FileManager.default.createDirectory(atPath: rig.root + "/" + package, withIntermediateDirectories: true)
        }
        try Disk.write("composed\n", to: rig.root + "/p.package/" + Self.composed)
        try Disk.write("decomposed\n", to: rig.root + "/p.package/" + Self.decomposed)
        try Disk.write("q\n", to: rig.root + "/q.package/" + Self.composed)
        let daemon = try await rig.start()
        #expect(
            daemon.output.contains {
                $0.contains("not opened: p.package") && $0.contains("differ only in Unicode normalization")
                    && $0.contains(#"caf\u{E9}.txt"#) && $0.contains(#"cafe\u{301}.txt"#)
            }, "\(daemon.output)")
        let client = try rig.client()
        let get = try client.call(["cmd": "get", "doc": "p.package", "members": true])
        #expect(get["error"]?["code"] == "io-error", "\(get)")
        #expect(get["error"]?["message"]?.stringValue?.contains("differ only in Unicode normalization") == true)
        let put = try client.call(
            ["cmd": "put-member", "doc": "p.package", "member": .string(Self.composed), "text": "over\n"])
        #expect(put["ok"] == false, "\(put)")
        #expect(try Disk.bytes(rig.root + "/p.package/" + Self.composed) == Data("composed\n".utf8))
        #expect(try Disk.bytes(rig.root + "/p.package/" + Self.decomposed) == Data("decomposed\n".utf8))

        // q.package is open; another program adds the twin of its member.
        #expect(try rig.members("q.package") == [Self.composed: "q\n"])
        try Disk.write("twin\n", to: rig.root + "/q.package/" + Self.decomposed)
        await daemon.waitForLine(containing: "q.package was changed by another program but cannot be read")
        try rig.ok(["cmd": "put-member", "doc": "q.package", "member": "x.txt", "text": "x\n"], on: client)
        // The save writes the edit in place, or — when it reads the package's directory
        // again — fails naming the pair (the edit stays in memory, retried): never one
        // twin written over or removed for the other.
        let save = try client.call(["cmd": "save", "doc": "q.package", "wait": true])
        if save["ok"] == true {
            #expect(try Disk.bytes(rig.root + "/q.package/x.txt") == Data("x\n".utf8))
        } else {
            #expect(save["error"]?["code"] == "save-failed", "\(save)")
            #expect(
                save["error"]?["message"]?.stringValue?.contains("differ only in Unicode normalization") == true,
                "\(save)")
            #expect(try rig.members("q.package")["x.txt"] == "x\n", "the edit is kept")
        }
        #expect(try Disk.bytes(rig.root + "/q.package/" + Self.composed) == Data("q\n".utf8))
        #expect(try Disk.bytes(rig.root + "/q.package/" + Self.decomposed) == Data("twin\n".utf8))
        rig.kill()
    }
}
