import Control
import Foundation
import TestSupport
import Testing

@Suite("A package member removed by the daemon's own save", .serialized)
struct PackageMemberRemovalTests {
    @Test("remove-member, then save --wait: saved, no conflict, no conflict copy, the other members kept")
    func ownRemovalIsNoConflict() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        #expect(try daemon.ctl("create", "book.package").status == 0)
        for member in ["m0", "m1", "ch/m2"] {
            #expect(try daemon.ctl("put-member", "book.package", member, "--text", "\(member)\n").status == 0)
        }
        #expect(try daemon.ctl("save", "book.package", "--wait").status == 0)
        for round in 0..<3 {
            // Removing a member unlinks it during the save; the watcher sees that unlink.
            let member = ["m1", "ch/m2", "m0"][round]
            #expect(try daemon.ctl("put-member", "book.package", "new\(round)", "--text", "n\n").status == 0)
            #expect(try daemon.ctl("remove-member", "book.package", member).status == 0)
            let saved = try daemon.ctl("save", "book.package", "--wait")
            #expect(saved.status == 0, "round \(round): \(saved)")
            // A barrier: every change made before it has been seen by the watcher.
            #expect(try daemon.ctl("sync").status == 0)
        }
        let names = try Disk.names(in: daemon.root)
        #expect(names == ["book.package"], "no conflict copy: \(names)")
        #expect(try Disk.names(in: daemon.root + "/book.package") == ["ch", "new0", "new1", "new2"])
        let status = try JSONValue(parsing: try daemon.ctl("--json", "status").stdout)
        #expect(status["watch"]?["conflicts"]?.intValue == 0)
        #expect(await daemon.stop() == 0)
    }
}
