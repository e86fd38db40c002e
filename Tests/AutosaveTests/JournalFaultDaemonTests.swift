import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// The built daemon with its edit journal on, under `fiu-run -x`: libfiu's faults hit the
/// journal's syncs as much as the saves'.
@Suite("The edit journal in the daemon under libfiu's random faults", .serialized)
struct JournalFaultDaemonTests {
    static var hasLibfiu: Bool { Machine.has("fiu-run") && Machine.has("fiu-ctrl") }

    @Test(
        "Random faults (fdatasync EIO 15 %, fsync EIO 30 %, write ENOSPC 20 %) with the journal on: every acknowledged edit is there after SIGKILL and a start without faults, no refused one is",
        .enabled(if: Self.hasLibfiu, "needs fiu-utils"),
        arguments: ["periodic", "always"])
    func randomFaults(mode: String) async throws {
        let rig = try await FaultRig(journal: mode, settings: "[Journal]\nSyncInterval=5ms\n")
        let docs = ["a.txt", "b.txt", "d/c.txt"]
        let client = try rig.client()
        var model: [String: String] = [:]
        for doc in docs {
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": "start\n"])["ok"] == true)
            #expect(try client.call(["cmd": "save", "doc": .string(doc), "wait": true])["ok"] == true)
            model[doc] = "start\n"
        }
        try rig.fiu("enable_random name=posix/io/sync/fdatasync,probability=0.15,failinfo=5")
        try rig.fiu("enable_random name=posix/io/sync/fsync,probability=0.3,failinfo=5")
        try rig.fiu("enable_random name=posix/io/rw/write,probability=0.2,failinfo=28")
        var acknowledged = 0
        var refused = 0
        var savesFailed = 0
        for round in 0..<80 {
            let doc = docs[round % docs.count]
            let line = "\(doc) round \(round)\n"
            let reply = try client.call(["cmd": "append", "doc": .string(doc), "text": .string(line)])
            if reply["ok"] == true {
                model[doc]! += line
                acknowledged += 1
            } else {
                // Refused while the journal cannot write: nothing was changed.
                #expect(reply["error"]?["code"] == "io-error", "\(reply)")
                #expect(
                    reply["error"]?["message"]?.stringValue?.contains("the edit journal cannot write its records")
                        == true,
                    "\(reply)")
                refused += 1
            }
            if round % 10 == 9 {
                let save = try client.call(["cmd": "save", "doc": .string(doc), "wait": true])
                if save["ok"] != true { savesFailed += 1 }
            }
        }
        for doc in docs {
            #expect(try client.call(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue == model[doc], "\(doc)")
        }
        let journalFailed = rig.process.output.contains { $0.contains("the edit journal failed: ") }
        print(
            "journal Mode=\(mode) under random faults: \(acknowledged) appends acknowledged, \(refused) refused, \(savesFailed) of 8 saves failed; the journal's failure logged: \(journalFailed)"
        )
        // Mode=always syncs for every reply: 80 syncs without a failure, at these odds, would
        // come once in 500,000 runs. (Mode=periodic syncs every 5 ms only when there is
        // something to sync: most runs fail some, not every one.)
        if mode == "always" { #expect(journalFailed, "no journal failure was logged") }
        #expect(acknowledged > 0)

        rig.process.signal(SIGKILL)
        _ = PowerLossRig.waitForExit(rig.process)
        // Started again under fiu-run, with no fault enabled.
        try await rig.start()
        let replay = try rig.status()["journal"]?["last_replay"]
        #expect(replay?["unapplied"] == [], "\(String(describing: replay))")
        for doc in docs {
            #expect(try rig.call(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue == model[doc], "\(doc)")
        }
        #expect(await rig.stop() == 0)
        for doc in docs {
            #expect(try String(contentsOfFile: rig.root + "/" + doc, encoding: .utf8) == model[doc], "\(doc) on disk")
        }
    }
}
