import Control
import Documents
import Foundation
@preconcurrency import Glibc
import Journal
import Logging
import Posix
import TestSupport
import Testing

@testable import Autosave

/// The built daemon with its edit journal: started, edited through the socket, killed,
/// started again on what it left.
final class JournalRig {
    let directory: TemporaryDirectory
    let root: String
    let journal: String
    var socket: String { directory.sub("control.sock") }
    var config: String { directory.sub("autosaved.conf") }
    var daemon: DaemonProcess?

    /// - Parameters:
    ///   - settings: lines added to the configuration (a long quiet period by default:
    ///     only the journal holds the edits).
    init(_ settings: String = "", root: String? = nil, journal: String? = nil) throws {
        directory = TemporaryDirectory("journal-daemon")
        self.root = root ?? directory.sub("root")
        self.journal = journal ?? directory.sub("journal")
        try configure(settings)
    }

    func configure(_ settings: String) throws {
        try Disk.write(
            "[Store]\nRoot=\(root)\n[Autosave]\nQuietPeriod=1h\nMaxDelay=1h\nRetryInterval=100ms\nMaxRetryInterval=200ms\n"
                + "[Control]\nSocket=\(socket)\n[Journal]\nDirectory=\(journal)\n" + settings, to: config)
    }

    /// Starts the daemon and waits until it is ready; `environment` changes this process's
    /// for it (`nil` removes a variable).
    @discardableResult
    func start(environment changes: [String: String?] = [:], sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> DaemonProcess
    {
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = nil
        for (name, value) in changes { environment[name] = value }
        let process = try DaemonProcess(Machine.product("autosaved"), ["--config", config], environment: environment)
        daemon = process
        await process.waitForLine(containing: "started:", sourceLocation: sourceLocation)
        return process
    }

    /// Starts the daemon on `mount` and waits until it is ready; `false` when the power was
    /// cut before it was (the start's own renames and unlinks can be where the cut comes):
    /// it is killed then. Throws when it exits, or is not ready within a minute, uncut.
    func start(unlessCut mount: PowerLossMount) throws -> Bool {
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = nil
        let process = try DaemonProcess(Machine.product("autosaved"), ["--config", config], environment: environment)
        daemon = process
        let deadline = ContinuousClock.now + .seconds(60)
        func ready() -> Bool { process.output.contains { $0.contains("started:") } }
        while !ready(), process.process.isRunning, !mount.crashed, ContinuousClock.now < deadline { usleep(5000) }
        if ready() { return true }
        kill()
        guard mount.crashed else {
            throw Failure("the daemon did not start: " + process.output.suffix(8).joined(separator: " | "))
        }
        return false
    }

    func kill() {
        guard let daemon else { return }
        daemon.signal(SIGKILL)
        _ = PowerLossRig.waitForExit(daemon)
        self.daemon = nil
    }

    func stop() -> Int32? {
        guard let daemon else { return nil }
        daemon.signal(SIGTERM)
        defer { self.daemon = nil }
        return PowerLossRig.waitForExit(daemon)
    }

    func client() throws -> ControlClient { try PowerLossRig.client(socket) }

    /// A request that must succeed; its reply.
    @discardableResult
    func ok(_ request: JSONValue, on client: ControlClient? = nil, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> JSONValue
    {
        let reply = try (client ?? self.client()).call(request)
        #expect(
            reply["ok"] == true, "\(request["cmd"] ?? "?") \(request["doc"] ?? "") → \(reply)",
            sourceLocation: sourceLocation)
        return reply
    }

    func text(_ doc: String) throws -> String? { try ok(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue }

    func json(_ doc: String) throws -> JSONValue? {
        guard let text = try text(doc) else { return nil }
        return try JSONValue(parsing: Array(text.utf8))
    }

    func members(_ doc: String) throws -> [String: String] {
        let list = try ok(["cmd": "get", "doc": .string(doc), "members": true])["members"]?.arrayValue ?? []
        var members: [String: String] = [:]
        for name in list.compactMap(\.stringValue) {
            members[name] = try ok(["cmd": "get", "doc": .string(doc), "member": .string(name)])["text"]?.stringValue
        }
        return members
    }

    func status() throws -> JSONValue { try ok(["cmd": "status"]) }

    var segments: [String] { ((try? Disk.names(in: journal)) ?? []).filter { $0.hasSuffix(".journal") }.sorted() }

    deinit { kill() }
}

@Suite("The edit journal in the daemon: crashes, power loss, damage, changes while down", .serialized)
struct JournalDaemonTests {
    /// Every kind of edit, applied to text, JSON and package documents.
    static func editEverything(_ rig: JournalRig, _ client: ControlClient) throws {
        // Plain edits last: `create` writes the journal at once, a plain edit only with the
        // loop's pass (what a test of that write needs to end on).
        try rig.ok(["cmd": "create", "doc": "empty.md"], on: client)
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try rig.ok(["cmd": "set", "doc": "c.txt", "text": "acked edit 1\n"], on: client)
        try rig.ok(["cmd": "append", "doc": "c.txt", "text": "acked edit 2\n"], on: client)
        try rig.ok(["cmd": "set", "doc": "d/j.json", "json": ["a": 1, "b": ["x", "y"]]], on: client)
        try rig.ok(["cmd": "patch", "doc": "d/j.json", "patch": ["b": .null, "c": true]], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m1.txt", "text": "one\n"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "ch/m2.txt", "text": "two\n"], on: client)
        try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "m1.txt"], on: client)
        try rig.ok(["cmd": "replace", "doc": "c.txt", "offset": 0, "length": 5, "text": "ACKED"], on: client)
    }

    static func checkEverything(_ rig: JournalRig, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try rig.text("c.txt") == "ACKED edit 1\nacked edit 2\n", sourceLocation: sourceLocation)
        #expect(try rig.json("d/j.json") == ["a": 1, "c": true], sourceLocation: sourceLocation)
        #expect(try rig.members("p.package") == ["ch/m2.txt": "two\n"], sourceLocation: sourceLocation)
        #expect(try rig.text("empty.md") == "", sourceLocation: sourceLocation)
    }

    @Test(
        "SIGKILL within the quiet period loses no acknowledged edit: set, append, replace, patch, create, put-member and remove-member come back, replayed before READY and then saved"
    )
    func killedWithinQuietPeriod() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try Self.editEverything(rig, try rig.client())
        #expect(
            !FileManager.default.fileExists(atPath: rig.root + "/c.txt"), "nothing was saved: only the journal has it")
        rig.kill()

        let daemon = try await rig.start()
        #expect(daemon.output.contains { $0.contains("replayed 8 edits to 4 documents from the journal in") })
        try Self.checkEverything(rig)
        let replay = try rig.status()["journal"]?["last_replay"]
        #expect(replay?["edits"]?.intValue == 8 && replay?["documents"]?.intValue == 4)
        #expect(replay?["unapplied"] == [] && replay?["problems"] == [] && replay?["conflicts"] == [])
        // Replayed documents are saved at once, and their records released.
        let deadline = ContinuousClock.now + .seconds(30)
        while try rig.status()["unsaved"]?.intValue != 0, ContinuousClock.now < deadline { usleep(20_000) }
        #expect(try Disk.bytes(rig.root + "/c.txt") == Data("ACKED edit 1\nacked edit 2\n".utf8))
        #expect(try rig.status()["journal"]?["unsaved_records"]?.intValue == 0)

        // Killed again with nothing left in the journal: the next start replays nothing.
        rig.kill()
        let again = try await rig.start()
        #expect(again.output.contains { $0.contains("replayed 0 edits to 0 documents") })
        try Self.checkEverything(rig)
        #expect(rig.stop() == 0)
    }

    @Test(
        "A save's release of its records reaches the journal's file before the next reply: killed then, the journal gives back none of them"
    )
    func releaseWrittenBeforeNextReply() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "r.txt", "text": ""], on: client)
        for index in 0..<5 {
            try rig.ok(["cmd": "append", "doc": "r.txt", "text": .string("line \(index)\n")], on: client)
        }
        try rig.ok(["cmd": "save", "doc": "r.txt", "wait": true], on: client)
        // The save's reply goes out before the journal's mark of the release is written
        // (one write(2) less before it); the mark is written in the same pass, so any
        // later reply comes after it.
        try rig.ok(["cmd": "list"], on: client)
        rig.kill()
        // The journal's own replay applies its marks: the released records are not delivered.
        let journal = try Journal(directory: rig.journal)
        var delivered = 0
        let report = try journal.replay { _ in delivered += 1 }
        #expect(report.isClean, "\(report)")
        #expect(delivered == 0, "\(delivered) released records were given back")
        _ = journal.close()
    }

    @Test("Edits made while a save is written, killed right after: the next start has every one of them")
    func killedAfterSaves() async throws {
        let rig = try JournalRig("[Autosave]\nQuietPeriod=0\nMaxDelay=0\n")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "log.txt", "text": ""], on: client)
        var expected = ""
        // Saved after every edit (QuietPeriod=0): most edits land while a save runs. On
        // until several saves have finished, each with edits made during it.
        var round = 0
        while round < 20_000 {
            let line = "line \(round)\n"
            try rig.ok(["cmd": "append", "doc": "log.txt", "text": .string(line)], on: client)
            expected += line
            round += 1
            if round % 50 == 0, try rig.status()["saves"]?.intValue ?? 0 >= 5 { break }
        }
        #expect(try rig.status()["saves"]?.intValue ?? 0 >= 5)
        rig.kill()
        try await rig.start()
        #expect(try rig.text("log.txt") == expected)
        #expect(rig.stop() == 0)
    }

    @Test("Mode=off: no journal; \"durable\": true is refused with bad-request and changes nothing")
    func off() async throws {
        let rig = try JournalRig("[Journal]\nMode=off\n")
        try await rig.start()
        let reply = try rig.client().call(["cmd": "set", "doc": "n.txt", "text": "x", "durable": true])
        #expect(reply["ok"] == false && reply["error"]?["code"] == "bad-request")
        #expect(reply["error"]?["message"]?.stringValue?.contains("Mode=off") == true)
        #expect(try rig.client().call(["cmd": "get", "doc": "n.txt"])["error"]?["code"] == "not-found")
        #expect(try rig.status()["journal"] == ["mode": "off"])
        #expect(!FileManager.default.fileExists(atPath: rig.journal))
        #expect(rig.stop() == 0)
    }

    @Test("\"durable\": true waits for the sync: the journal's durable LSN covers the edit when the reply comes")
    func durableRequest() async throws {
        let rig = try JournalRig("[Journal]\nSyncInterval=1h\n")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "not synced yet"], on: client)
        let before = try rig.status()["journal"]
        #expect(before?["durable_lsn"]?.intValue ?? 0 < before?["written_lsn"]?.intValue ?? 0)
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "!", "durable": true], on: client)
        let after = try rig.status()["journal"]
        #expect(after?["durable_lsn"] == after?["written_lsn"])
        #expect(rig.stop() == 0)
    }

    @Test(
        "\"durable\": true on a save with wait: the reply, sent the moment the file is in place, comes once the records written before it are synced"
    )
    func durableSaveWait() async throws {
        let rig = try JournalRig("[Journal]\nSyncInterval=1h\n")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "b.txt", "text": "to be saved"], on: client)
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "only in the journal"], on: client)
        let written = try rig.status()["journal"]?["written_lsn"]?.intValue ?? 0
        try rig.ok(["cmd": "save", "doc": "b.txt", "wait": true, "durable": true], on: client)
        let after = try rig.status()["journal"]
        #expect(after?["durable_lsn"]?.intValue ?? 0 >= written, "\(String(describing: after))")
        #expect(rig.stop() == 0)
    }

    @Test(
        "A reload keeps what the running journal was opened with (Mode=, SyncInterval=), says so, and status tells the running mode"
    )
    func reloadKeepsJournalSettings() async throws {
        let rig = try JournalRig("[Journal]\nSyncInterval=1h\n")
        let daemon = try await rig.start()
        try rig.configure("[Journal]\nMode=always\nSyncInterval=1s\n[Store]\nPackageExtensions=pkg\n")
        let reply = try rig.client().call(["cmd": "reload"])
        #expect(reply["ok"] == true)
        for key in ["[Journal] Mode=", "[Journal] SyncInterval=", "[Store] PackageExtensions="] {
            #expect(
                await daemon.waitForLine(
                    containing: "\(key) changed; the running value is kept until the daemon is restarted") != nil)
        }
        // Still periodic, syncing once an hour: an edit is answered before its record is synced.
        #expect(try rig.status()["journal"]?["mode"] == "periodic")
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "after the reload"])
        let journal = try rig.status()["journal"]
        #expect(journal?["durable_lsn"]?.intValue ?? 0 < journal?["written_lsn"]?.intValue ?? 0)
        #expect(rig.stop() == 0)
    }

    @Test(
        "The file of an older save put back while the daemon was down, its mark copied with it (cp -a): not taken for the save's own — both versions kept, the conflict reported"
    )
    func olderSavePutBack() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        let older = rig.directory.sub("older.txt")
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "one\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true], on: client)
        #expect(try Machine.run("cp", ["-a", rig.root + "/a.txt", older]).status == 0)
        #expect((try? FileDescriptor.currentWorkingDirectory.attribute("user.autosaved.save", of: older)) != nil)
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "two\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true], on: client)
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "three\n"], on: client)
        rig.kill()
        #expect(try Machine.run("cp", ["-a", older, rig.root + "/a.txt"]).status == 0)

        try await rig.start()
        #expect(try rig.text("a.txt") == "one\n")
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == ["a.txt"])
        let copies = try Disk.names(in: rig.root).filter { $0.contains("(conflict ") }
        #expect(try copies.map { try Disk.bytes(rig.root + "/" + $0) } == [Data("one\ntwo\nthree\n".utf8)])
        #expect(rig.stop() == 0)
    }

    @Test(
        "Another document's saved file, its mark copied with it (cp -a), put in place of a document with journalled edits while the daemon was down: not taken for that document's save — both versions kept, the conflict reported"
    )
    func markOfAnotherDocument() async throws {
        let rig = try JournalRig()
        try await rig.start()
        // b.txt's edits are left in the journal; a.txt is saved, its records released, its
        // file marked.
        try rig.ok(["cmd": "set", "doc": "b.txt", "text": "b\n"])
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "a\n"])
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        rig.kill()
        // The next run replays b.txt (the same journal: records were left).
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "c.txt", "text": "c\n"])
        try rig.ok(["cmd": "append", "doc": "c.txt", "text": "more\n"])
        rig.kill()
        #expect(try Machine.run("cp", ["-a", rig.root + "/a.txt", rig.root + "/c.txt"]).status == 0)

        try await rig.start()
        #expect(try rig.text("c.txt") == "a\n", "the file's version is kept")
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == ["c.txt"])
        let copies = try Disk.names(in: rig.root).filter { $0.contains("(conflict ") }
        #expect(try copies.map { try Disk.bytes(rig.root + "/" + $0) } == [Data("c\nmore\n".utf8)])
        #expect(rig.stop() == 0)
    }

    @Test(
        "Changed while the daemon was down: both versions are kept and the conflict is reported, never a blind replay")
    func changedWhileDown() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "base\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true], on: client)
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "journalled edit\n"], on: client)
        try rig.ok(["cmd": "set", "doc": "b.txt", "text": "whole\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "b.txt", "wait": true], on: client)
        try rig.ok(["cmd": "append", "doc": "b.txt", "text": "more\n"], on: client)
        rig.kill()
        // Another program replaces a.txt by rename, and rewrites b.txt in place.
        try Disk.write("theirs\n", to: rig.root + "/a.new")
        #expect(rename(rig.root + "/a.new", rig.root + "/a.txt") == 0)
        try Disk.write("their b\n", to: rig.root + "/b.txt")

        let daemon = try await rig.start()
        #expect(try rig.text("a.txt") == "theirs\n")
        #expect(try rig.text("b.txt") == "their b\n")
        let names = try Disk.names(in: rig.root)
        let copies = names.filter { $0.contains("(conflict ") }
        #expect(copies.count == 2, "\(names)")
        let contents = Set(try copies.map { String(decoding: try Disk.bytes(rig.root + "/" + $0), as: UTF8.self) })
        #expect(contents == ["base\njournalled edit\n", "whole\nmore\n"])
        let replay = try rig.status()["journal"]?["last_replay"]
        #expect(replay?["conflicts"] == ["a.txt", "b.txt"])
        #expect(daemon.output.contains { $0.contains("changed by another program while it had unsaved edits") })
        #expect(rig.stop() == 0)
    }

    @Test(
        "Changed while down, a JSON document whose edits begin with a set of the whole value: the conflict copy holds the set and the patch after it"
    )
    func changedWhileDownJSON() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "j.json", "json": ["v": 0]], on: client)
        try rig.ok(["cmd": "save", "doc": "j.json", "wait": true], on: client)
        try rig.ok(["cmd": "set", "doc": "j.json", "json": ["v": 1, "w": "x"]], on: client)
        try rig.ok(["cmd": "patch", "doc": "j.json", "patch": ["w": .null, "z": true]], on: client)
        rig.kill()
        try Disk.write("{\"theirs\": true}\n", to: rig.root + "/j.json")
        try await rig.start()
        #expect(try rig.json("j.json") == ["theirs": true])
        let copies = try Disk.names(in: rig.root).filter { $0.hasPrefix("j (conflict ") }
        let copy = try #require(copies.first, "no conflict copy")
        #expect(try JSONValue(parsing: Array(try Disk.bytes(rig.root + "/" + copy))) == ["v": 1, "z": true])
        let unapplied = try rig.status()["journal"]?["last_replay"]?["unapplied"]?.arrayValue ?? []
        #expect(unapplied.isEmpty, "\(unapplied)")
        #expect(rig.stop() == 0)
    }

    @Test(
        "Changed while down twice, with Keep=memory and the save of the edits failing in between: the edits made after the first start are in the second start's version",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func changedWhileDownTwice() async throws {
        let rig = try JournalRig("[Conflicts]\nKeep=memory\n")
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "base\n"])
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "before the first kill\n"])
        rig.kill()
        try Disk.write("theirs\n", to: rig.root + "/a.txt")
        // Immutable: the save of the edits under the name fails (EPERM) and is retried.
        let file = rig.root + "/a.txt"
        #expect(try Machine.run("chattr", ["+i", file]).status == 0)
        defer { _ = try? Machine.run("chattr", ["-i", file]) }
        try await rig.start()
        #expect(try rig.text("a.txt") == "base\nbefore the first kill\n")
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "after the first start\n"])
        rig.kill()
        #expect(try Machine.run("chattr", ["-i", file]).status == 0)
        try await rig.start()
        #expect(try rig.text("a.txt") == "base\nbefore the first kill\nafter the first start\n")
        let unapplied = try rig.status()["journal"]?["last_replay"]?["unapplied"]?.arrayValue ?? []
        #expect(unapplied.isEmpty, "\(unapplied)")
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(file) == Data("base\nbefore the first kill\nafter the first start\n".utf8))
    }

    @Test(
        "Keep=memory, a large document replaced by another program while the daemon runs, the edits' save failing: the edits made before and after survive a crash",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func conflictWhileRunningThenKilled() async throws {
        let rig = try JournalRig("[Conflicts]\nKeep=memory\n")
        try await rig.start()
        // Over 64 KiB: no base carries its bytes, and appends give no whole version.
        let big = String(repeating: "0123456789abcde\n", count: 8192)
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": .string(big)])
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "A\n"])
        let file = rig.root + "/a.txt"
        // Another program's version, made immutable at once (the conflict waits 50 ms for
        // the file to settle): the save of the edits under the name fails, and is retried.
        let replace = try Machine.run("sh", ["-c", "printf 'theirs\\n' > \"$1\" && chattr +i \"$1\"", "sh", file])
        #expect(replace.status == 0, "\(replace)")
        defer { _ = try? Machine.run("chattr", ["-i", file]) }
        try await FaultInjectionMoreTests.waitUntil("the conflict copy of theirs") {
            ((try? Disk.names(in: rig.root)) ?? []).contains { $0.hasPrefix("a (conflict") }
        }
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "B\n"])
        rig.kill()
        #expect(try Machine.run("chattr", ["-i", file]).status == 0)
        try await rig.start()
        #expect(try rig.text("a.txt") == big + "A\nB\n")
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(file) == Data((big + "A\nB\n").utf8))
    }

    @Test(
        "The journal's record of a save that failed at its rename is released with the document's edits: a revert leaves nothing for the next start to report",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func recordOfAFailedSave() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "1\n"])
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "2\n"])
        // Immutable: the save writes its file and its record, and fails at the rename (EPERM).
        let file = rig.root + "/a.txt"
        #expect(try Machine.run("chattr", ["+i", file]).status == 0)
        defer { _ = try? Machine.run("chattr", ["-i", file]) }
        let failed = try rig.client().call(["cmd": "save", "doc": "a.txt", "wait": true])
        #expect(failed["ok"] != true, "\(failed)")
        try rig.ok(["cmd": "revert", "doc": "a.txt"])
        #expect(try Machine.run("chattr", ["-i", file]).status == 0)
        #expect(rig.stop() == 0)
        try Disk.write("theirs\n", to: file)
        try await rig.start()
        #expect(try rig.text("a.txt") == "theirs\n")
        let replay = try rig.status()["journal"]?["last_replay"]
        #expect(replay?["unapplied"]?.arrayValue?.isEmpty ?? true, "\(replay ?? "")")
        #expect(replay?["conflicts"]?.arrayValue?.isEmpty ?? true, "\(replay ?? "")")
        #expect(rig.stop() == 0)
    }

    @Test(
        "A package saved in place past some of its journalled edits (a member of a later edit on disk, the save's record lost): replay takes every edit, the clash with the later member is no reason to stop"
    )
    func packageSavedPastItsEdits() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "keep.txt", "text": "kept\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "a", "text": "a file\n"], on: client)
        try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "a"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "a/b", "text": "inside\n"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "z", "text": "last\n"], on: client)
        rig.kill()
        // What a save that wrote a/b and was cut before z (or before its record) leaves.
        try FileManager.default.createDirectory(atPath: rig.root + "/p.package/a", withIntermediateDirectories: false)
        try Disk.write("inside\n", to: rig.root + "/p.package/a/b")
        try await rig.start()
        #expect(try rig.members("p.package") == ["keep.txt": "kept\n", "a/b": "inside\n", "z": "last\n"])
        let unapplied = try rig.status()["journal"]?["last_replay"]?["unapplied"]?.arrayValue ?? []
        #expect(unapplied.isEmpty, "\(unapplied)")
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/p.package/z") == Data("last\n".utf8))
    }

    @Test(
        "A package's members changed by another program while the daemon was down, members the journalled edits put or remove: both versions kept, the conflict reported, never a blind replay",
        arguments: ["disk", "memory"])
    func packageMembersChangedWhileDown(keep: String) async throws {
        let rig = try JournalRig("[Conflicts]\nKeep=\(keep)\n")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        for (member, text) in [("m.txt", "saved m\n"), ("k.txt", "saved k\n"), ("u.txt", "saved u\n")] {
            try rig.ok(
                ["cmd": "put-member", "doc": "p.package", "member": .string(member), "text": .string(text)], on: client)
        }
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true], on: client)
        // Journalled only: m.txt put, k.txt removed, n.txt new; u.txt not touched.
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "mine\n"], on: client)
        try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "k.txt"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "n.txt", "text": "new\n"], on: client)
        rig.kill()
        // Another program rewrites m.txt and k.txt (the one the edits remove), and u.txt.
        try Disk.write("their m\n", to: rig.root + "/p.package/m.txt")
        try Disk.write("their k\n", to: rig.root + "/p.package/k.txt")
        try Disk.write("their u\n", to: rig.root + "/p.package/u.txt")

        let daemon = try await rig.start()
        let theirs = ["m.txt": "their m\n", "k.txt": "their k\n", "u.txt": "their u\n"]
        let mine = ["m.txt": "mine\n", "n.txt": "new\n", "u.txt": "their u\n"]
        let copies = try Disk.names(in: rig.root).filter { $0.contains("(conflict ") }
        let names = try Disk.names(in: rig.root)
        let copy = try #require(copies.first, "no conflict copy: \(names)")
        #expect(copies.count == 1)
        func onDisk(_ package: String) throws -> [String: String] {
            var members: [String: String] = [:]
            for name in try Disk.names(in: rig.root + "/" + package) {
                members[name] = String(decoding: try Disk.bytes(rig.root + "/" + package + "/" + name), as: UTF8.self)
            }
            return members
        }
        // Keep=disk: the package keeps their version, the copy has the edits; memory: the reverse.
        #expect(try rig.members("p.package") == (keep == "disk" ? theirs : mine))
        #expect(try onDisk(copy) == (keep == "disk" ? mine : theirs))
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == ["p.package"])
        #expect(
            daemon.output.contains { $0.contains("another program changed 'k.txt', 'm.txt' while the daemon was down") }
        )
        #expect(rig.stop() == 0)
        #expect(try onDisk("p.package") == (keep == "disk" ? theirs : mine))
    }

    @Test(
        "A package removed by another program while the daemon was down, with journalled edits: by WhenRemoved=, written again holding the members the edits put, and said so — or closed, the edits discarded and named",
        arguments: ["recreate-unsaved", "recreate", "close"])
    func packageRemovedWhileDown(policy: String) async throws {
        let rig = try JournalRig("[Conflicts]\nWhenRemoved=\(policy)\n")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        for (member, text) in [("kept.txt", "saved\n"), ("edited.txt", "saved\n")] {
            try rig.ok(
                ["cmd": "put-member", "doc": "p.package", "member": .string(member), "text": .string(text)], on: client)
        }
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "edited.txt", "text": "mine\n"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "d/new.txt", "text": "new\n"], on: client)
        rig.kill()
        try FileManager.default.removeItem(atPath: rig.root + "/p.package")

        let daemon = try await rig.start()
        let replay = try rig.status()["journal"]?["last_replay"]
        let missing = try rig.client().call(["cmd": "get", "doc": "p.package"])
        if policy == "close" {
            #expect(missing["error"]?["code"] == "not-found", "\(missing)")
            #expect(replay?["recreated"] == [], "\(String(describing: replay))")
            let unapplied = replay?["unapplied"]?.arrayValue?.compactMap(\.stringValue) ?? []
            #expect(unapplied.count == 1 && unapplied[0].hasPrefix("p.package: "), "\(unapplied)")
            #expect(unapplied.first?.contains("WhenRemoved=close discarded its 2 journalled edit(s)") == true)
            #expect(rig.stop() == 0)
            #expect(!FileManager.default.fileExists(atPath: rig.root + "/p.package"), "not written again")
            // Nothing of it is left to replay at the next start.
            try await rig.start()
            #expect(try rig.status()["journal"]?["last_replay"]?["unapplied"] == [])
            #expect(rig.stop() == 0)
            #expect(!FileManager.default.fileExists(atPath: rig.root + "/p.package"))
            return
        }
        // Written again with what the journal has: the members the edits put, not the one
        // only the removed directory held.
        let mine = ["edited.txt": "mine\n", "d/new.txt": "new\n"]
        #expect(try rig.members("p.package") == mine)
        #expect(replay?["recreated"] == ["p.package"], "\(String(describing: replay))")
        #expect(replay?["conflicts"] == [] && replay?["unapplied"] == [], "\(String(describing: replay))")
        #expect(
            daemon.output.contains {
                $0.contains(
                    "p.package was removed by another program while the daemon was down; writing it again from its 2 journalled edit(s) (WhenRemoved=\(policy)): it holds only the 2 member(s) they put ('d/new.txt', 'edited.txt'); the members no edit touched were removed with it"
                )
            })
        #expect(
            daemon.output.contains {
                $0.contains("1 removed while the daemon was down (written again from the journal)")
            })
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/p.package/edited.txt") == Data("mine\n".utf8))
        #expect(try Disk.bytes(rig.root + "/p.package/d/new.txt") == Data("new\n".utf8))
        #expect(!FileManager.default.fileExists(atPath: rig.root + "/p.package/kept.txt"))
    }

    @Test(
        "A package replaced by a FIFO while the daemon was down is no removal: not said to be written again, its edits kept in memory"
    )
    func packageReplacedByAFIFOWhileDown() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "a.txt", "text": "a\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "b.txt", "text": "b\n"], on: client)
        rig.kill()
        try FileManager.default.removeItem(atPath: rig.root + "/p.package")
        #expect(mkfifo(rig.root + "/p.package", 0o644) == 0)
        let daemon = try await rig.start()
        #expect(try rig.status()["journal"]?["last_replay"]?["recreated"] == [])
        #expect(!daemon.output.contains { $0.contains("was removed by another program while the daemon was down") })
        #expect(try rig.members("p.package")["b.txt"] == "b\n", "the edit is kept")
        rig.kill()
    }

    @Test(
        "A new package never saved, killed: the next start makes it, with no word of a removal",
    )
    func newPackageIsNoRemoval() async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "one\n"], on: client)
        rig.kill()
        #expect(!FileManager.default.fileExists(atPath: rig.root + "/p.package"))
        let daemon = try await rig.start()
        #expect(try rig.members("p.package") == ["m.txt": "one\n"])
        #expect(try rig.status()["journal"]?["last_replay"]?["recreated"] == [])
        #expect(!daemon.output.contains { $0.contains("removed by another program") })
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/p.package/m.txt") == Data("one\n".utf8))
    }

    @Test(
        "A file removed by another program while the daemon was down, with journalled edits: by WhenRemoved=, written again and said so, or closed with the edits discarded and named",
        arguments: ["recreate-unsaved", "close"])
    func fileRemovedWhileDown(policy: String) async throws {
        let rig = try JournalRig("[Conflicts]\nWhenRemoved=\(policy)\n")
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "hello\n"])
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "x\n"])
        rig.kill()
        #expect(unlink(rig.root + "/a.txt") == 0)
        let daemon = try await rig.start()
        let replay = try rig.status()["journal"]?["last_replay"]
        if policy == "close" {
            #expect(try rig.client().call(["cmd": "get", "doc": "a.txt"])["error"]?["code"] == "not-found")
            let unapplied = replay?["unapplied"]?.arrayValue?.compactMap(\.stringValue) ?? []
            #expect(unapplied.count == 1 && unapplied[0].contains("WhenRemoved=close discarded its"), "\(unapplied)")
            #expect(rig.stop() == 0)
            #expect(!FileManager.default.fileExists(atPath: rig.root + "/a.txt"))
            return
        }
        #expect(try rig.text("a.txt") == "hello\nx\n")
        #expect(replay?["recreated"] == ["a.txt"], "\(String(describing: replay))")
        #expect(
            daemon.output.contains {
                $0.contains(
                    "a.txt was removed by another program while the daemon was down; writing it again from its journalled edits (WhenRemoved=recreate-unsaved)"
                )
            })
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/a.txt") == Data("hello\nx\n".utf8))
    }

    @Test(
        "A package saved, edited again and killed, its member on disk any version its own saves can leave (the saved one, one a save cut short or whose record was lost wrote, none after a removal): replayed, no conflict; a version none of its edits made: the conflict",
        arguments: [("one\n", false), ("two\n", false), ("three\n", false), (nil, false), ("five\n", true)]
            as [(String?, Bool)])
    func packageMemberVersionsOfItsOwn(version: String?, conflict: Bool) async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "one\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "two\n"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "three\n"], on: client)
        try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "m.txt"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m.txt", "text": "four\n"], on: client)
        rig.kill()
        let member = rig.root + "/p.package/m.txt"
        if let version { try Disk.write(version, to: member) } else { #expect(unlink(member) == 0) }
        try await rig.start()
        let conflicts = try rig.status()["journal"]?["last_replay"]?["conflicts"]?.arrayValue ?? []
        #expect(conflicts == (conflict ? ["p.package"] : []))
        #expect(try rig.members("p.package") == ["m.txt": conflict ? "five\n" : "four\n"])
        #expect(rig.stop() == 0)
    }

    @Test(
        "A package member larger than 16 MiB that only the disk holds, edited twice, or removed and its directory's name made a member, then killed: its first edit journals no version before it, and replay does not check it — no false conflict",
        arguments: ["edited twice", "removed, its directory a file"])
    func packageMemberTooLargeToCheck(edits: String) async throws {
        let rig = try JournalRig()
        try FileManager.default.createDirectory(atPath: rig.root + "/p.package/d", withIntermediateDirectories: true)
        try Data(repeating: UInt8(ascii: "B"), count: 17 << 20).write(
            to: URL(fileURLWithPath: rig.root + "/p.package/d/big.txt"))
        try await rig.start()
        let client = try rig.client()
        if edits == "edited twice" {
            try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "d/big.txt", "text": "x\n"], on: client)
            try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "d/big.txt", "text": "y\n"], on: client)
        } else {
            try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "d/big.txt"], on: client)
            try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "d", "text": "y\n"], on: client)
        }
        rig.kill()
        try await rig.start()
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"]?.arrayValue ?? [] == [])
        #expect(try rig.members("p.package") == [edits == "edited twice" ? "d/big.txt" : "d": "y\n"])
        #expect(rig.stop() == 0)
    }

    @Test(
        "Another program puts something where a journalled member goes — a directory with its own file at the member's name, a file at its directory's name, a file inside a directory the edits made a member — while the daemon is down: a conflict, their files kept; the package's own directory there is no conflict",
        arguments: ["directory at the member", "file at its directory", "file inside", "own directory"])
    func packageMemberPlaceTaken(by change: String) async throws {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "keep.txt", "text": "kept\n"], on: client)
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "e/f.txt", "text": "f\n"], on: client)
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true], on: client)
        let package = rig.root + "/p.package"
        switch change {
        case "directory at the member":
            try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "n.txt", "text": "mine\n"], on: client)
            rig.kill()
            try FileManager.default.createDirectory(atPath: package + "/n.txt", withIntermediateDirectories: false)
            try Disk.write("theirs\n", to: package + "/n.txt/theirs.txt")
        case "file at its directory":
            try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "x/y.txt", "text": "mine\n"], on: client)
            rig.kill()
            try Disk.write("theirs\n", to: package + "/x")
        case "file inside", "own directory":
            try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "e/f.txt"], on: client)
            try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "e", "text": "now a file\n"], on: client)
            rig.kill()
            if change == "file inside" { try Disk.write("theirs\n", to: package + "/e/g.txt") }
        default: Issue.record("no such case")
        }
        try await rig.start()
        let conflicts = try rig.status()["journal"]?["last_replay"]?["conflicts"]?.arrayValue ?? []
        let theirs = try Disk.names(in: rig.root).contains { $0.contains("(conflict ") }
        if change == "own directory" {
            #expect(conflicts.isEmpty && !theirs)
            #expect(try rig.members("p.package") == ["keep.txt": "kept\n", "e": "now a file\n"])
        } else {
            #expect(conflicts == ["p.package"])
            #expect(theirs, "a conflict copy")
            let kept =
                change == "directory at the member"
                ? "/n.txt/theirs.txt" : change == "file at its directory" ? "/x" : "/e/g.txt"
            #expect(try Disk.bytes(package + kept) == Data("theirs\n".utf8), "their file is kept")
        }
        #expect(rig.stop() == 0)
    }

    @Test(
        "Changed while down, and the conflict copy cannot be written (its name too long): the other program's version is never replaced — each retried save finds it unexpected and tries the copy again",
        arguments: ["file", "package"])
    func conflictCopyUnwritableAtReplay(kind: String) async throws {
        let rig = try JournalRig("[Autosave]\nRetryInterval=100ms\nMaxRetryInterval=100ms\n")
        // A name whose conflict copy, "<name> (conflict <time>).<ext>", passes 255 bytes.
        let doc = String(repeating: "n", count: 236) + (kind == "file" ? ".txt" : ".package")
        try await rig.start()
        let client = try rig.client()
        let changed: String
        if kind == "file" {
            try rig.ok(["cmd": "set", "doc": .string(doc), "text": "orig\n"], on: client)
            try rig.ok(["cmd": "save", "doc": .string(doc), "wait": true], on: client)
            try rig.ok(["cmd": "append", "doc": .string(doc), "text": "mine\n"], on: client)
            changed = rig.root + "/" + doc
        } else {
            try rig.ok(["cmd": "create", "doc": .string(doc)], on: client)
            try rig.ok(["cmd": "put-member", "doc": .string(doc), "member": "m.txt", "text": "orig\n"], on: client)
            try rig.ok(["cmd": "save", "doc": .string(doc), "wait": true], on: client)
            try rig.ok(["cmd": "put-member", "doc": .string(doc), "member": "m.txt", "text": "mine\n"], on: client)
            changed = rig.root + "/" + doc + "/m.txt"
        }
        rig.kill()
        try Disk.write("THEIRS\n", to: changed)
        try await rig.start()
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == [.string(doc)])
        // Until the save has been tried three times more (each would have replaced their file).
        var attempts = 0
        let deadline = ContinuousClock.now + .seconds(30)
        while attempts < 4, ContinuousClock.now < deadline {
            let list = try rig.ok(["cmd": "list"])["documents"]?.arrayValue ?? []
            attempts = list.first { $0["doc"]?.stringValue == doc }?["failure"]?["attempts"]?.intValue ?? 0
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(attempts >= 4, "the save is retried and fails")
        #expect(try Disk.bytes(changed) == Data("THEIRS\n".utf8), "their version is kept")
        rig.kill()
    }

    @Test(
        "WhenRemoved=recreate: a document whose file another program removed, edited, killed before it is written again: the next start has its text and the edit",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func recreatedThenEdited() async throws {
        let rig = try JournalRig("[Conflicts]\nWhenRemoved=recreate\n")
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "hello\n"])
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        // Removed while the daemon is stopped, and the root made immutable before it goes on:
        // the save that writes the document again fails (EPERM) and is retried.
        let daemon = try #require(rig.daemon)
        daemon.signal(SIGSTOP)
        #expect(unlink(rig.root + "/a.txt") == 0)
        #expect(try Machine.run("chattr", ["+i", rig.root]).status == 0)
        defer { _ = try? Machine.run("chattr", ["-i", rig.root]) }
        daemon.signal(SIGCONT)
        // The removal seen: the document is to be written again.
        try rig.ok(["cmd": "sync"])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "x\n"])
        #expect(try rig.status()["saves"] == 1, "the document is not written again yet")
        rig.kill()
        #expect(try Machine.run("chattr", ["-i", rig.root]).status == 0)
        try await rig.start()
        #expect(try rig.text("a.txt") == "hello\nx\n")
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/a.txt") == Data("hello\nx\n".utf8))
    }

    @Test(
        "An acknowledged edit to a path an ignore file written while the daemon was down now matches: replayed and saved, then the document is closed"
    )
    func ignoredWhileDown() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "drafts/plan.txt", "text": "acknowledged\n"])
        rig.kill()
        try Disk.write("drafts/\n", to: rig.root + "/.autosavedignore")
        let daemon = try await rig.start()
        await daemon.waitForLine(containing: "drafts/plan.txt is ignored now; its journalled edits were replayed")
        let replay = try rig.status()["journal"]?["last_replay"]
        #expect(replay?["edits"] == 1, "\(String(describing: replay))")
        #expect(replay?["unapplied"] == [], "\(String(describing: replay))")
        try await FaultInjectionMoreTests.waitUntil("the replayed edit saved and the document closed") {
            (try? Disk.bytes(rig.root + "/drafts/plan.txt")) == Data("acknowledged\n".utf8)
                && (try? rig.client().call(["cmd": "get", "doc": "drafts/plan.txt"]))?["error"]?["code"]
                    == "invalid-path"
        }
        #expect(rig.stop() == 0)
    }

    @Test(
        "A replay cut short by a missing segment, the replayed document's save failing, an edit, a second crash: the second start has the replayed text and the edit",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func shortReplayThenEdited() async throws {
        try await Self.shortReplayThenEdited(savedAndRemoved: false)
    }

    @Test(
        "A replay cut short by a missing segment, of a document whose file was removed while down: the edits after that start survive the next crash",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func shortReplayOfARemovedFileThenEdited() async throws {
        try await Self.shortReplayThenEdited(savedAndRemoved: true)
    }

    /// 150 appends of 4 KiB over three segments, the middle one lost with the daemon
    /// killed (and with `savedAndRemoved`, the document saved before them and its file
    /// removed while down); the replayed document cannot be saved; an edit, a second
    /// kill: the second start has the replayed text and the edit.
    static func shortReplayThenEdited(savedAndRemoved: Bool) async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        let client = try rig.client()
        let chunk = String(repeating: "a", count: 4095) + "\n"
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": ""], on: client)
        if savedAndRemoved { try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true], on: client) }
        for _ in 0..<150 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk)], on: client) }
        rig.kill()
        let segments = rig.segments
        #expect(segments.count == 3, "\(segments)")
        try FileManager.default.removeItem(atPath: rig.journal + "/" + segments[1])
        if savedAndRemoved { try FileManager.default.removeItem(atPath: rig.root + "/a.txt") }
        // The root immutable: the replayed document's save fails (EPERM) and waits for its retry.
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: true)
        #expect(try Machine.run("chattr", ["+i", rig.root]).status == 0)
        defer { _ = try? Machine.run("chattr", ["-i", rig.root]) }
        try await rig.start()
        let replayed = try rig.text("a.txt") ?? ""
        let chunks = replayed.utf8.count / chunk.utf8.count
        #expect(replayed == String(repeating: chunk, count: chunks) && chunks > 0 && chunks < 100, "\(chunks) chunks")
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "after the first start\n"])
        rig.kill()
        #expect(try Machine.run("chattr", ["-i", rig.root]).status == 0)
        try await rig.start()
        #expect(try rig.text("a.txt") == replayed + "after the first start\n")
        #expect(rig.stop() == 0)
    }

    @Test("A save that fails at shutdown leaves its edits in the journal; the next start replays and saves them")
    func failedShutdownSave() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "sub/a.txt", "text": "kept through a failed shutdown\n"])
        // The document's directory cannot be made: every save fails.
        try Disk.write("a file where the directory goes\n", to: rig.root + "/sub")
        let daemon = rig.daemon!
        #expect(rig.stop() == 1)
        #expect(daemon.output.contains { $0.contains("NOT SAVED at shutdown") })
        #expect(daemon.output.contains { $0.contains("kept in the edit journal") && $0.contains("sub/a.txt") })
        #expect(unlink(rig.root + "/sub") == 0)
        try await rig.start()
        #expect(try rig.text("sub/a.txt") == "kept through a failed shutdown\n")
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/sub/a.txt") == Data("kept through a failed shutdown\n".utf8))
    }

    @Test(
        "An edit whose record would pass the journal's limit (256 MiB, with MaxRequestSize=1G) is refused with too-large naming the sizes and changes nothing: not the document, not the journal; the edits before it survive a crash"
    )
    func editTooLargeForAJournalRecord() async throws {
        let rig = try JournalRig("[Control]\nMaxRequestSize=1G\n")
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "acked\n"])
        let written = try rig.status()["journal"]?["written_lsn"]
        let raw = try ControlSocketTests.Raw(rig.socket)
        let text = String(repeating: "x", count: (256 << 20) + 1)
        for request in [
            #"{"cmd":"set","doc":"a.txt","text":""#, #"{"cmd":"append","doc":"a.txt","durable":true,"text":""#,
            #"{"cmd":"set","doc":"new.txt","text":""#,
        ] {
            try raw.send(request + text + "\"}\n")
            let reply = try raw.line()
            #expect(reply?["error"]?["code"] == "too-large", "\(request) → \(String(describing: reply))")
            let message = reply?["error"]?["message"]?.stringValue ?? ""
            #expect(message.contains("over the 268435456 a record may hold") && message.contains("nothing was changed"))
        }
        #expect(try rig.text("a.txt") == "acked\n")
        #expect(try rig.client().call(["cmd": "get", "doc": "new.txt"])["error"]?["code"] == "not-found")
        #expect(try rig.status()["journal"]?["written_lsn"] == written, "no record of the refused edits")
        #expect(try rig.status()["unsaved"] == 1)
        rig.kill()
        try await rig.start()
        #expect(try rig.text("a.txt") == "acked\n")
        #expect(rig.stop() == 0)
    }

    /// A rig whose root and journal are on a tmpfs of 1 MiB (mounted while `held` lives).
    static func rigOnASmallDisk(_ name: String) throws -> (
        small: String, rig: JournalRig, held: (Mount, TemporaryDirectory)
    ) {
        let scratch = TemporaryDirectory(name)
        let small = scratch.sub("small")
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: false)
        let tmpfs = try Mount(tmpfsOfSize: "1m", at: small)
        let rig = try JournalRig(root: small + "/root", journal: small + "/journal")
        return (small, rig, (tmpfs, scratch))
    }

    @Test(
        "The journal's disk full: the edit in flight is not acknowledged until its record is written, new edits are refused naming the journal, and all recovers without a restart",
        .enabled(if: Machine.isRoot, "mounting needs root"))
    func journalDiskFull() async throws {
        let (small, rig, held) = try Self.rigOnASmallDisk("journal-full")
        defer { withExtendedLifetime(held) {} }
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "before\n"], on: client)
        try Disk.fill(small)
        PowerLossRig.setReceiveTimeout(client, milliseconds: 1500)
        // Large enough to need new pages of the full tmpfs (a small record could fit in the segment's last page).
        let large = String(repeating: "while full\n", count: 8192)
        _ = try client.send(["id": 99, "cmd": "set", "doc": "a.txt", "text": .string(large)])
        #expect(throws: (any Error).self, "no reply while its record cannot be written") { try client.receive() }
        let refused = try rig.client().call(["cmd": "append", "doc": "a.txt", "text": "refused\n"])
        #expect(refused["error"]?["code"] == "io-error", "\(refused)")
        #expect(refused["error"]?["message"]?.stringValue?.contains("edit journal") == true)
        #expect(refused["error"]?["message"]?.stringValue?.contains("ENOSPC") == true)
        #expect(try rig.status()["journal"]?["failure"]?.stringValue?.contains("ENOSPC") == true)
        try FileManager.default.removeItem(atPath: small + "/filler")
        // The journal writes the record again (its retries back off to 5 s); then the reply comes.
        PowerLossRig.setReceiveTimeout(client, milliseconds: 30_000)
        let late = try client.receive()
        #expect(late["id"] == 99 && late["ok"] == true, "\(late)")
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "after\n"])
        rig.kill()
        try await rig.start()
        #expect(try rig.text("a.txt") == large + "after\n")
        #expect(rig.stop() == 0)
    }

    @Test(
        "The journal's disk full: an edit's reply queued behind replies a client was not reading is not sent when it reads, until the edit's record is written",
        .enabled(if: Machine.isRoot, "mounting needs root"))
    func journalDiskFullWithAClientNotReading() async throws {
        let (small, rig, held) = try Self.rigOnASmallDisk("journal-full-reader")
        defer { withExtendedLifetime(held) {} }
        try await rig.start()
        let other = try rig.client()
        let page = String(repeating: "g", count: 16 << 10)
        try rig.ok(["cmd": "set", "doc": "g.txt", "text": .string(page)], on: other)
        try Disk.fill(small)
        // 2 MiB of replies the client does not read yet: the daemon's writes to it block,
        // and what it queues for the client waits for the socket, not for a pass of the loop.
        let slow = try rig.client()
        let gets = 128
        for index in 0..<gets { _ = try slow.send(["id": .number(String(index)), "cmd": "get", "doc": "g.txt"]) }
        // Answered after the pass that queued those replies.
        try rig.ok(["cmd": "status"], on: other)
        // Large enough to need new pages of the full tmpfs: its record cannot be written.
        let large = String(repeating: "while full\n", count: 8192)
        _ = try slow.send(["id": 999, "cmd": "set", "doc": "a.txt", "text": .string(large)])
        var failing = false
        for _ in 0..<1000 where !failing {
            failing = try rig.ok(["cmd": "status"], on: other)["journal"]?["failure"]?.stringValue != nil
        }
        #expect(failing, "the journal's write failed")
        // The client reads now: whatever comes, the edit's reply is not among it.
        PowerLossRig.setReceiveTimeout(slow, milliseconds: 1500)
        var answered = 0
        while let reply = try? slow.receive() {
            #expect(reply["id"] != 999, "the edit was acknowledged while its record was not written: \(reply)")
            if reply["id"] == 999 { break }
            answered += 1
        }
        #expect(answered < gets, "the replies queued with the edit's wait for its record too")
        try FileManager.default.removeItem(atPath: small + "/filler")
        // The journal writes the record again (its retries back off to 5 s); then the rest comes, in order.
        PowerLossRig.setReceiveTimeout(slow, milliseconds: 30_000)
        while answered < gets {
            let reply = try slow.receive()
            #expect(reply["id"] == .number(String(answered)) && reply["text"]?.stringValue == page)
            answered += 1
        }
        let late = try slow.receive()
        #expect(late["id"] == 999 && late["ok"] == true, "\(late)")
        rig.kill()
        try await rig.start()
        #expect(try rig.text("a.txt") == large)
        #expect(rig.stop() == 0)
    }

    @Test(
        "The journal's disk full: of the replies of the pass whose write failed, only the edit's waits — another client's request read in the same pass is answered",
        .enabled(if: Machine.isRoot, "mounting needs root"))
    func journalDiskFullOtherRepliesOfThePass() async throws {
        let (small, rig, held) = try Self.rigOnASmallDisk("journal-full-pass")
        defer { withExtendedLifetime(held) {} }
        let daemon = try await rig.start()
        let editor = try rig.client()
        let reader = try rig.client()
        try rig.ok(["cmd": "set", "doc": "b.txt", "text": "kept\n"], on: reader)
        try Disk.fill(small)
        PowerLossRig.setReceiveTimeout(editor, milliseconds: 1500)
        PowerLossRig.setReceiveTimeout(reader, milliseconds: 10_000)
        // Both requests wait in their sockets while the daemon is stopped, so that the loop
        // reads them in one pass: the edit's record (large enough to need new pages of the
        // full tmpfs) fails to be written right before that pass's replies go out.
        let large = String(repeating: "while full\n", count: 8192)
        daemon.signal(SIGSTOP)
        _ = try editor.send(["id": 1, "cmd": "set", "doc": "a.txt", "text": .string(large)])
        _ = try reader.send(["id": 2, "cmd": "get", "doc": "b.txt"])
        daemon.signal(SIGCONT)
        let answer = try reader.receive()
        #expect(answer["id"] == 2 && answer["text"] == "kept\n", "\(answer)")
        #expect(throws: (any Error).self, "no reply to the edit while its record cannot be written") {
            try editor.receive()
        }
        #expect(try rig.status()["journal"]?["failure"]?.stringValue?.contains("ENOSPC") == true)
        try FileManager.default.removeItem(atPath: small + "/filler")
        PowerLossRig.setReceiveTimeout(editor, milliseconds: 30_000)
        let late = try editor.receive()
        #expect(late["id"] == 1 && late["ok"] == true, "\(late)")
        rig.kill()
        try await rig.start()
        #expect(try rig.text("a.txt") == large)
        #expect(rig.stop() == 0)
    }

    @Test(
        "The journal's disk full: revert is refused like an edit, naming the journal, and changes nothing; once space is back it works and a crash keeps it",
        .enabled(if: Machine.isRoot, "mounting needs root"))
    func journalDiskFullRevert() async throws {
        let (small, rig, held) = try Self.rigOnASmallDisk("journal-full-revert")
        defer { withExtendedLifetime(held) {} }
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: true)
        try Disk.write("on disk\n", to: rig.root + "/a.txt")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "edited\n"], on: client)
        try Disk.fill(small)
        let editor = try rig.client()
        PowerLossRig.setReceiveTimeout(editor, milliseconds: 30_000)
        let large = String(repeating: "while full\n", count: 8192)
        _ = try editor.send(["id": 1, "cmd": "set", "doc": "b.txt", "text": .string(large)])
        var failing = false
        for _ in 0..<1000 where !failing {
            failing = try rig.ok(["cmd": "status"], on: client)["journal"]?["failure"]?.stringValue != nil
        }
        #expect(failing, "the journal's write failed")
        let refused = try client.call(["cmd": "revert", "doc": "a.txt"])
        #expect(refused["error"]?["code"] == "io-error", "\(refused)")
        #expect(refused["error"]?["message"]?.stringValue?.contains("edit journal") == true, "\(refused)")
        #expect(try rig.text("a.txt") == "edited\n")
        try FileManager.default.removeItem(atPath: small + "/filler")
        let late = try editor.receive()
        #expect(late["id"] == 1 && late["ok"] == true, "\(late)")
        try rig.ok(["cmd": "revert", "doc": "a.txt"], on: client)
        #expect(try rig.text("a.txt") == "on disk\n")
        rig.kill()
        try await rig.start()
        #expect(try rig.text("a.txt") == "on disk\n", "the revert's mark was written before its reply")
        #expect(try rig.text("b.txt") == large)
        #expect(rig.stop() == 0)
    }

    @Test(
        "A durable save releases its records; past MaxSize= the documents pinning the oldest segment are saved and it is deleted"
    )
    func truncation() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        let client = try rig.client()
        let chunk = String(repeating: "x", count: 4000) + "\n"
        for index in 0..<6 { try rig.ok(["cmd": "set", "doc": .string("doc\(index).txt"), "text": ""], on: client) }
        for round in 0..<600 {
            try rig.ok(["cmd": "append", "doc": .string("doc\(round % 6).txt"), "text": .string(chunk)], on: client)
        }
        // 2.4 MB of edits with a quiet period of an hour: the size limit makes the saves,
        // and the segments they free are deleted.
        let deadline = ContinuousClock.now + .seconds(30)
        var status = try rig.status()
        while status["journal"]?["bytes"]?.intValue ?? .max > (1 << 20) + (256 << 10), ContinuousClock.now < deadline {
            usleep(20_000)
            status = try rig.status()
        }
        #expect(status["saves"]?.intValue ?? 0 >= 1)
        #expect(status["journal"]?["bytes"]?.intValue ?? .max <= (1 << 20) + (256 << 10))
        // Of the segments the saves freed, some are kept to be reused: two, and more while
        // the records and they stay within MaxSize= (four segments' worth).
        while status["journal"]?["spare_segments"]?.intValue ?? 0 < 2, ContinuousClock.now < deadline {
            usleep(20_000)
            status = try rig.status()
        }
        let spares = status["journal"]?["spare_segments"]?.intValue ?? 0
        let records = status["journal"]?["bytes"]?.intValue ?? 0
        #expect(
            spares >= 2 && (spares == 2 || records + spares * (256 << 10) <= (1 << 20) + spares * 8192), "\(status)")
        #expect(try Disk.names(in: rig.journal).filter { $0.hasPrefix(".spare-") }.count == spares)
        rig.kill()
        try await rig.start()
        for index in 0..<6 { #expect(try rig.text("doc\(index).txt") == String(repeating: chunk, count: 100)) }
        #expect(rig.stop() == 0)
    }
    @Test(
        "A saved document another program renamed, then edited past MaxSize=: compaction saves it under its new name and the journal shrinks back"
    )
    func compactionOfARenamedDocument() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": ""], on: client)
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true], on: client)
        #expect(rename(rig.root + "/a.txt", rig.root + "/b.txt") == 0)
        let followed = ContinuousClock.now + .seconds(10)
        while try rig.ok(["cmd": "list"], on: client)["documents"]?.arrayValue?.first?["doc"] != "b.txt",
            ContinuousClock.now < followed
        {
            usleep(10_000)
        }
        let chunk = String(repeating: "x", count: 4000) + "\n"
        for _ in 0..<400 { try rig.ok(["cmd": "append", "doc": "b.txt", "text": .string(chunk)], on: client) }
        // 1.6 MB of edits of one document with a quiet period of an hour: only the size limit saves it.
        let deadline = ContinuousClock.now + .seconds(20)
        var status = try rig.status()
        while status["journal"]?["bytes"]?.intValue ?? .max > (1 << 20) + (256 << 10), ContinuousClock.now < deadline {
            usleep(20_000)
            status = try rig.status()
        }
        #expect(status["journal"]?["bytes"]?.intValue ?? .max <= (1 << 20) + (256 << 10), "\(status)")
        #expect(try Disk.bytes(rig.root + "/b.txt").count >= 1 << 20, "saved under its new name")
        #expect(rig.stop() == 0)
        #expect(try Disk.bytes(rig.root + "/b.txt") == Data(String(repeating: chunk, count: 400).utf8))
    }

    @Test(
        "Past MaxSize= with thousands of documents pinning the oldest segments: a few rounds of saves, not a look at all of them after every save"
    )
    func compactionRounds() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        let client = try rig.client()
        let documents = 2000
        let text = String(repeating: "y", count: 1500)
        for index in 0..<documents {
            try rig.ok(["cmd": "set", "doc": .string("many/d\(index).txt"), "text": .string(text)], on: client)
        }
        // 3 MB of edits to 2,000 documents with a quiet period of an hour: only the size
        // limit makes saves.
        let deadline = ContinuousClock.now + .seconds(60)
        var status = try rig.status()
        while status["journal"]?["bytes"]?.intValue ?? .max > (1 << 20), ContinuousClock.now < deadline {
            usleep(20_000)
            status = try rig.status()
        }
        #expect(status["journal"]?["bytes"]?.intValue ?? .max <= 1 << 20, "the journal is back under MaxSize=")
        let saves = status["saves"]?.intValue ?? 0
        let rounds = rig.daemon?.output.filter { $0.contains("past MaxSize=") }.count ?? 0
        // Each round saves the documents of the oldest segments at once; a look at every
        // pinning document after each save made one such line (and an O(documents) walk) per save.
        #expect(saves >= 100, "the size limit made the saves: \(saves)")
        #expect(rounds >= 1 && rounds <= 20, "\(rounds) rounds of compaction for \(saves) saves")
        rig.kill()
        try await rig.start()
        for index in stride(from: 0, to: documents, by: 97) { #expect(try rig.text("many/d\(index).txt") == text) }
        #expect(rig.stop() == 0)
    }
}

/// The journal on the power-loss file system (Tests/Tools/powerloss_fs.py): a cut keeps
/// only what was synced — file data once fsynced, directory entries once the directory
/// is — and the daemon is started again on what is left.
@Suite(
    "The edit journal under simulated power loss",
    .enabled(if: PowerLossMount.isAvailable, "needs root, /dev/fuse and Debian's python3-fusepy"), .serialized)
struct JournalPowerLossTests {
    struct Run {
        /// Lines acknowledged, with when.
        var acknowledged: [(line: String, at: ContinuousClock.Instant)] = []
        /// When the first request went unanswered (the cut).
        var cutAt: ContinuousClock.Instant?
        var found: String?
        var problems: [String] = []
    }

    static func line(_ index: Int) -> String { "edit \(index) " + String(repeating: "·", count: index % 40) + "\n" }

    /// Appends lines to one document, one request at a time, until the cut after the
    /// `cut`-th fsync; then starts the daemon again on the durable state and reads it.
    /// A scratch directory (kept for as long as the returned value is) with the empty
    /// directories `names` in it: the power-loss file system's backing and mount point, and
    /// whatever else a test keeps beside them.
    static func scratch(_ names: String...) throws -> (TemporaryDirectory, [String]) {
        let directory = TemporaryDirectory("journal-powerloss")
        let paths = names.map { directory.sub($0) }
        for path in paths { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false) }
        return (directory, paths)
    }

    func run(mode: String, cut: Int, pace: Duration = .zero, loopWriteLimit: String = "2ms") async throws -> Run {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        let rig = try JournalRig(
            "[Journal]\nMode=\(mode)\nSyncInterval=100ms\n[Autosave]\nLoopWriteLimit=\(loopWriteLimit)\n",
            root: mountPoint + "/root",
            journal: mountPoint + "/journal")
        var run = Run()
        do {
            let mount = try PowerLossMount(
                backing: backing, at: mountPoint, crash: PowerLossMount.CrashPoint("fsync", cut))
            try await rig.start()
            let client = try rig.client()
            // After the cut, nothing more is acknowledged: the journal's writes and syncs fail.
            PowerLossRig.setReceiveTimeout(client, milliseconds: 1500)
            _ = try? client.call(["cmd": "set", "doc": "log.txt", "text": ""])
            for index in 0..<400 {
                let line = Self.line(index)
                let sent = ContinuousClock.now
                let reply = try? client.call(["cmd": "append", "doc": "log.txt", "text": .string(line)])
                guard reply?["ok"] == true else {
                    run.cutAt = sent
                    break
                }
                if index == 0 { _ = try? client.call(["cmd": "save", "doc": "log.txt", "wait": true]) }
                run.acknowledged.append((line, ContinuousClock.now))
                if pace > .zero { try await Task.sleep(for: pace) }
            }
            rig.kill()
            if !mount.crashed { run.problems.append("the cut after fsync \(cut) never came") }
            try mount.unmount()
        }
        // Power back: the daemon replays what the journal kept.
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        run.found = try rig.text("log.txt")
        let daemon = rig.daemon
        let status = rig.stop()
        if status != 0 {
            let said = (daemon?.output ?? []).suffix(8).joined(separator: " | ")
            run.problems.append(
                "the daemon did not stop cleanly after the restart (exit \(status.map(String.init) ?? "none within a minute")): \(said)"
            )
        }
        try mount.unmount()
        return run
    }

    @Test(
        "Mode=periodic: an edit made while a save runs, acknowledged as durable, survives a power cut right after that save (the file names the save's record: its mark)"
    )
    func durableEditDuringASave() async throws {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        // Synced only when asked: what the cut keeps is exactly what was made durable.
        let rig = try JournalRig(
            "[Journal]\nSyncInterval=1h\n", root: mountPoint + "/root", journal: mountPoint + "/journal")
        // Over 64 KiB: the journal's base records name the file without its bytes.
        let big = String(repeating: "0123456789abcde\n", count: 8192)
        do {
            let mount = try PowerLossMount(backing: backing, at: mountPoint)
            try await rig.start()
            let client = try rig.client()
            try rig.ok(["cmd": "set", "doc": "big.txt", "text": .string(big)], on: client)
            try rig.ok(["cmd": "save", "doc": "big.txt", "wait": true], on: client)
            try rig.ok(["cmd": "append", "doc": "big.txt", "text": "A\n"], on: client)
            // A save of A, and B made while it runs (the save took its snapshot first).
            try rig.ok(["cmd": "save", "doc": "big.txt"], on: client)
            try rig.ok(["cmd": "append", "doc": "big.txt", "text": "B\n", "durable": true], on: client)
            try await FaultInjectionMoreTests.waitUntil("the save of A done") {
                (try? rig.status()["saves"]?.intValue) == 2
            }
            rig.kill()
            try mount.unmount()  // the power cut: everything not synced is gone
        }
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        #expect(try rig.text("big.txt") == big + "A\nB\n")
        #expect(rig.stop() == 0)
        try mount.unmount()
    }

    /// A document edited with a durable `set` and an `append` no sync covers, saved with
    /// `wait`, then a power cut: the journal keeps the set, the file holds the append.
    /// Returns the journal's syncs counted just before and after the save.
    func saveAheadOfTheSyncs(_ rig: JournalRig, backing: String, mountPoint: String) async throws -> (Int?, Int?) {
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "1\n", "durable": true])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "2\n"])
        let before = try rig.status()["journal"]?["syncs"]?.intValue
        // Nobody edits it while it saves; the append is in no synced record.
        try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
        let after = try rig.status()["journal"]?["syncs"]?.intValue
        rig.kill()
        try mount.unmount()  // the power cut
        return (before, after)
    }

    @Test(
        "Mode=periodic: a save of edits no sync had covered yet, and a power cut right after it: the file is the journal's version, not another program's (no conflict, nothing put back), and the save did not wait for the journal"
    )
    func savedAheadOfTheSyncs() async throws {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        // Synced only when asked; a conflict would put the journal's version under the name.
        let rig = try JournalRig(
            "[Conflicts]\nKeep=memory\n[Journal]\nSyncInterval=1h\n", root: mountPoint + "/root",
            journal: mountPoint + "/journal")
        let (before, after) = try await saveAheadOfTheSyncs(rig, backing: backing, mountPoint: mountPoint)
        // The file names the save's record itself (its mark, durable with its bytes): the
        // save's rename waited for no sync of the journal.
        #expect(
            before != nil && before == after, "journal syncs before the save \(before as Any), after \(after as Any)")
        #expect(
            (try? FileDescriptor.currentWorkingDirectory.attribute("user.autosaved.save", of: backing + "/root/a.txt"))??
                .count == 49)
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        #expect(try rig.text("a.txt") == "1\n2\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: mountPoint + "/root") == ["a.txt"])
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == [])
        #expect(rig.stop() == 0)
        try mount.unmount()
    }

    @Test(
        "A mark written before a power cut names an owner number and LSNs the next run gives again (to another document): that document's file replaced by the marked one (mv) is not taken for its save — both versions kept, the conflict reported"
    )
    func markOfAnEarlierRun() async throws {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        let rig = try JournalRig(
            "[Journal]\nSyncInterval=1h\n", root: mountPoint + "/root", journal: mountPoint + "/journal")
        do {
            let mount = try PowerLossMount(backing: backing, at: mountPoint)
            try await rig.start()
            // b.txt's records durable; a.txt's not, its save marked and renamed durably.
            try rig.ok(["cmd": "set", "doc": "b.txt", "text": "b\n", "durable": true])
            try rig.ok(["cmd": "set", "doc": "a.txt", "text": "a\n"])
            for line in 1...4 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string("a\(line)\n")]) }
            try rig.ok(["cmd": "save", "doc": "a.txt", "wait": true])
            rig.kill()
            try mount.unmount()  // the power cut: the journal keeps b.txt's records only
        }
        do {
            // The next run: owners and LSNs go on from what the journal kept, so c.txt gets
            // a.txt's owner number and LSNs a.txt's lost records had.
            let mount = try PowerLossMount(backing: backing, at: mountPoint)
            try await rig.start()
            try rig.ok(["cmd": "set", "doc": "c.txt", "text": "c\n"])
            try rig.ok(["cmd": "append", "doc": "c.txt", "text": "more\n", "durable": true])
            rig.kill()
            try mount.unmount()
        }
        #expect(rename(backing + "/root/a.txt", backing + "/root/c.txt") == 0)
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        #expect(try rig.text("c.txt") == "a\na1\na2\na3\na4\n", "the file's version is kept")
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == ["c.txt"])
        let copies = try Disk.names(in: mountPoint + "/root").filter { $0.contains("(conflict ") }
        #expect(try copies.map { try Disk.bytes(mountPoint + "/root/" + $0) } == [Data("c\nmore\n".utf8)])
        #expect(rig.stop() == 0)
        try mount.unmount()
    }

    @Test(
        "A save's mark on a file another program rewrote in place while the daemon was down (the attribute kept, the bytes not) is not believed: both versions kept, the conflict reported"
    )
    func markOfAFileRewrittenInPlace() async throws {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        let rig = try JournalRig(
            "[Journal]\nSyncInterval=1h\n", root: mountPoint + "/root", journal: mountPoint + "/journal")
        _ = try await saveAheadOfTheSyncs(rig, backing: backing, mountPoint: mountPoint)
        // The same size, other bytes; open(2) and write(2) keep the file's attributes.
        let file = backing + "/root/a.txt"
        let fd = open(file, O_WRONLY)
        #expect(fd >= 0 && write(fd, "X\nY\n", 4) == 4)
        close(fd)
        #expect((try? FileDescriptor.currentWorkingDirectory.attribute("user.autosaved.save", of: file))??.count == 49)
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        #expect(try rig.text("a.txt") == "X\nY\n")
        #expect(try rig.status()["journal"]?["last_replay"]?["conflicts"] == ["a.txt"])
        let copies = try Disk.names(in: mountPoint + "/root").filter { $0.contains("(conflict ") }
        #expect(copies.count == 1)
        // The version the durable records give: the set, without the append the cut took.
        #expect(try copies.map { try Disk.bytes(mountPoint + "/root/" + $0) } == [Data("1\n".utf8)])
        #expect(rig.stop() == 0)
        try mount.unmount()
    }

    @Test(
        "A package's save that failed after removing a member, retried: the retry syncs the removal, which a power cut then does not undo",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func packageRemovalOfAFailedSave() async throws {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        let rig = try JournalRig(
            "[Journal]\nSyncInterval=1h\n", root: mountPoint + "/root",
            journal: mountPoint + "/journal")
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        try rig.ok(["cmd": "create", "doc": "p.package"])
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "x", "text": "x\n"])
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "ch/a", "text": "a\n"])
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true])
        try rig.ok(["cmd": "remove-member", "doc": "p.package", "member": "x"])
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "ch/y", "text": "y\n"])
        // ch immutable (on the backing file system, under the passthrough): the save removes
        // x, then fails to write ch/y.
        let chapter = backing + "/root/p.package/ch"
        #expect(try Machine.run("chattr", ["+i", chapter]).status == 0)
        let failed = try rig.client().call(["cmd": "save", "doc": "p.package", "wait": true])
        #expect(try Machine.run("chattr", ["-i", chapter]).status == 0)
        #expect(failed["ok"] != true, "\(failed)")
        try rig.ok(["cmd": "save", "doc": "p.package", "wait": true])
        rig.kill()
        try mount.unmount()  // the power cut
        #expect(try Disk.names(in: backing + "/root/p.package") == ["ch"])
        #expect(try Disk.names(in: chapter) == ["a", "y"])
    }

    @Test(
        "Records a killed daemon left unsynced are synced by the next start before it builds on them: a durable edit after that start survives a power cut",
        .enabled(if: Machine.isRoot, "chattr +i needs root"))
    func unsyncedRecordsOfAKilledDaemon() async throws {
        let (directory, made) = try Self.scratch("backing", "mnt", "root")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint, root) = (made[0], made[1], made[2])
        // The journal alone on the power-loss file system, synced only when asked.
        let rig = try JournalRig("[Journal]\nSyncInterval=1h\n", root: root, journal: mountPoint + "/journal")
        let mount = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "1\n"])
        for line in 2...5 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string("\(line)\n")]) }
        rig.kill()
        // The replayed document cannot be saved: the journal alone keeps its edits.
        #expect(try Machine.run("chattr", ["+i", root]).status == 0)
        defer { _ = try? Machine.run("chattr", ["-i", root]) }
        try await rig.start()
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "6\n", "durable": true])
        rig.kill()
        try mount.unmount()  // the power cut
        #expect(try Machine.run("chattr", ["-i", root]).status == 0)
        let again = try PowerLossMount(backing: backing, at: mountPoint)
        try await rig.start()
        #expect(try rig.text("a.txt") == "1\n2\n3\n4\n5\n6\n")
        #expect(rig.stop() == 0)
        try again.unmount()
    }

    /// `LoopWriteLimit=0`: the journal's thread makes every sync; `1s`: the loop makes them
    /// (this file system's syncs take longer than the default 2 ms).
    @Test(
        "Mode=always: after a cut at any sync, every acknowledged edit is present, in order, and nothing half-applied",
        arguments: ["0", "1s"])
    func always(loopWriteLimit: String) async throws {
        var cuts = 0
        // (The first fsync is the start's, of the journal's label naming the root.)
        for cut in [3, 4, 6, 9, 14, 22] {
            let run = try await run(mode: "always", cut: cut, loopWriteLimit: loopWriteLimit)
            #expect(run.problems.isEmpty, "cut after fsync \(cut): \(run.problems)")
            let acknowledged = run.acknowledged.map(\.line).joined()
            let found = run.found ?? ""
            // The request in flight at the cut may be there too, whole.
            let inFlight = acknowledged + Self.line(run.acknowledged.count)
            #expect(
                found == acknowledged || found == inFlight,
                "cut after fsync \(cut): \(run.acknowledged.count) acknowledged, found \(found.split(separator: "\n").count) lines"
            )
            // The cut came while edits were being made: an edit went unanswered.
            if run.cutAt != nil { cuts += 1 }
        }
        #expect(cuts == 6, "runs cut in the middle of the edits: \(cuts) of 6")
    }

    /// A line of ``tornWrites(seed:)``: about 2 KB, so that the records written since the
    /// journal's last sync span pages.
    static func tornLine(_ round: Int, _ index: Int) -> String {
        "round \(round) edit \(index) " + String(repeating: "abcdefghij", count: 200 + index % 7) + "\n"
    }

    /// Two power cuts in a row on the power-loss file system with `--torn`: at each, the
    /// bytes written and not synced (the journal's records since its last sync, a save's
    /// file not synced yet) reach the disk in part — each 4 KiB page that differs from the
    /// durable state taken from either, at random, the file's length either. Replay must
    /// tell a record whose page never arrived from the records after it that did, and
    /// stop there.
    @Test(
        "Torn writes at a power cut (unsynced pages reach the disk in part, at random): with Mode=periodic and every 25th append durable, each restart holds exactly a prefix of the acknowledged appends, no shorter than the last durable one (with Mode=always, every one), nothing out of order or half-applied; edits go on after the first restart and a second cut keeps that too",
        arguments: ["periodic", "always"], [1, 2, 3, 4] as [UInt64])
    func tornWrites(mode: String, seed: UInt64) async throws {
        let (tornPages, _) = try await cutRounds(mode: mode, seed: seed, reordered: false)
        #expect(tornPages > 0, "\(mode) seed \(seed): the cuts tore nothing")
    }

    /// ``tornWrites(mode:seed:)`` on the file system's reordering model too: at each cut the
    /// directory changes the journal made and did not sync yet (a segment renamed into
    /// place or recycled from a spare, released segments deleted or renamed to spares)
    /// reach the disk each on its own, at random, and the cut comes right after such a change
    /// (in a start too: the cut may leave nothing acknowledged in a round).
    @Test(
        "Reordered directory changes at a power cut (each change not synced reaches the disk or not, at random; unsynced pages torn too), four seeds: the same checks as the torn writes — exactly a prefix of the acknowledged appends, no shorter than the last durable one, nothing out of order or half-applied, across two cuts",
        arguments: ["periodic", "always"])
    func reorderedWrites(mode: String) async throws {
        var dropped = 0
        for seed in 1...4 as ClosedRange<UInt64> {
            dropped += try await cutRounds(mode: mode, seed: seed, reordered: true).dropped
        }
        #expect(dropped > 0, "\(mode): the cuts dropped no directory change")
    }

    /// Two cuts in a row, then a clean start (see ``tornWrites(mode:seed:)``); `reordered`:
    /// the cuts come right after the journal's renames and unlinks, on the reordering model.
    /// Returns the pages the cuts tore and the directory changes they dropped.
    func cutRounds(mode: String, seed: UInt64, reordered: Bool) async throws -> (tornPages: Int, dropped: Int) {
        let (directory, made) = try Self.scratch("backing", "mnt")
        defer { withExtendedLifetime(directory) {} }
        let (backing, mountPoint) = (made[0], made[1])
        // Synced only for a durable request: what is not durable is what the cut tears.
        // MaxSize=1M: segments of 256 KiB, so that runs roll over to new segments and
        // delete released ones.
        let rig = try JournalRig(
            "[Journal]\nMode=\(mode)\nSyncInterval=1h\nMaxSize=1M\n[Autosave]\nQuietPeriod=300ms\n",
            root: mountPoint + "/root",
            journal: mountPoint + "/journal")
        var survived = ""  // the document after the cuts so far
        var tornPages = 0
        var dropped = 0  // directory changes not synced the cuts dropped (reordered)
        for round in 0...2 {
            // The cut: right after a write of the journal's, amid the appends (or at the end);
            // reordered, right after one of its renames (the label's, a segment's) or, in
            // the second round of odd seeds, unlinks (a start's, housekeeping's).
            let cut =
                reordered
                ? PowerLossMount.CrashPoint(
                    round == 0 || seed % 2 == 0 ? "rename" : "unlink", 1 + Int((seed + UInt64(round)) % 3))
                : PowerLossMount.CrashPoint("write", 60 + Int((seed * 137 + UInt64(round) * 53) % 500))
            let mount = try PowerLossMount(
                backing: backing, at: mountPoint, crash: round < 2 ? cut : nil,
                tornSeed: round < 2 ? seed * 10 + UInt64(round) : nil,
                reorderSeed: round < 2 && reordered ? seed * 10 + UInt64(round) : nil)
            // Reordered, the cut may come inside the start: nothing is acknowledged in the round then.
            var started = true
            if reordered && round < 2 { started = try rig.start(unlessCut: mount) } else { try await rig.start() }
            let client = started ? try rig.client() : nil
            if let client {
                PowerLossRig.setReceiveTimeout(client, milliseconds: 1500)
                if reordered {
                    // A cut inside the first start may have left no document (then it is made
                    // here); a cut may have come already (then these fail, and the check after
                    // the cut sees the document).
                    let reply = try? client.call(["cmd": "get", "doc": "log.txt"])
                    if reply?["ok"] == true {
                        #expect(reply?["text"]?.stringValue == survived, "round \(round): changed across a restart")
                    } else if reply?["error"]?["code"] == "not-found" {
                        #expect(survived == "", "round \(round): the document is gone")
                        _ = try? client.call(["cmd": "set", "doc": "log.txt", "text": "", "durable": true])
                    }
                } else if round > 0 {
                    #expect(
                        try rig.text("log.txt") ?? "" == survived,
                        "round \(round): the document changed across a restart")
                } else {
                    try rig.ok(["cmd": "set", "doc": "log.txt", "text": "", "durable": true], on: client)
                }
            }
            if round == 2 {
                #expect(rig.stop() == 0)
                try mount.unmount()
                break
            }
            var acknowledged: [String] = []
            var durable = 0  // how many of them a durable reply covers
            for index in 0..<600 {
                guard let client else { break }
                let line = Self.tornLine(round, index)
                let asDurable = index % 25 == 24
                let request: JSONValue = [
                    "cmd": "append", "doc": "log.txt", "text": .string(line), "durable": .bool(asDurable),
                ]
                guard (try? client.call(request))?["ok"] == true else { break }
                acknowledged.append(line)
                if asDurable || mode == "always" { durable = acknowledged.count }
            }
            rig.kill()
            try mount.unmount()
            // (Reordered, a cut counted from the start may not come: the unmount is the cut then.)
            #expect(reordered || mount.crashed, "round \(round): the cut after \(cut) came amid the appends")
            tornPages += mount.torn?.pages ?? 0
            dropped += mount.reordered?.dropped ?? 0
            // In a failure message: the cut, and with reordering what it kept of the directory changes.
            let at =
                "\(mode) seed \(seed) round \(round), cut after \(cut)"
                + (reordered ? " (\(mount.reorderDecisions.joined(separator: "; ")))" : "")
            if reordered { print("power loss, reordered journal: \(at)") }
            // The append in flight at the cut may be there, whole.
            let last = Self.tornLine(round, acknowledged.count)

            // Power back: what is there is the earlier rounds' text and a prefix of this one's.
            let check = try PowerLossMount(backing: backing, at: mountPoint)
            try await rig.start()
            // Reordered, a cut inside the first start may leave no document at all.
            let found =
                reordered
                ? (try rig.client().call(["cmd": "get", "doc": "log.txt"]))["text"]?.stringValue ?? ""
                : try rig.text("log.txt") ?? ""
            #expect(rig.stop() == 0)
            try check.unmount(within: .seconds(120))
            try #require(
                found.hasPrefix(survived), "\(at): the earlier rounds' text was lost")
            let added = found.dropFirst(survived.count).split(separator: "\n", omittingEmptySubsequences: false)
            let lines = added.dropLast().map { String($0) + "\n" }
            #expect(added.last == "", "\(at): a line cut in half")
            #expect(
                lines.elementsEqual((acknowledged + [last]).prefix(lines.count)),
                "\(at): not a prefix of the acknowledged appends")
            #expect(
                lines.count >= durable,
                "\(at): \(lines.count) lines, \(durable) acknowledged as durable")
            survived = found
        }
        return (tornPages, dropped)
    }

    @Test(
        "Mode=periodic: after a cut, at most SyncInterval= of acknowledged edits is missing, and what is there is a prefix"
    )
    func periodic() async throws {
        for cut in [5, 8] {
            let run = try await run(mode: "periodic", cut: cut, pace: .milliseconds(5))
            #expect(run.problems.isEmpty, "cut after fsync \(cut): \(run.problems)")
            let lines = run.acknowledged.map(\.line)
            let found = run.found ?? ""
            let count = found.split(separator: "\n", omittingEmptySubsequences: true).count
            #expect(
                found == (lines + [Self.line(lines.count)]).prefix(count).joined(),
                "cut after fsync \(cut): not a prefix")
            // Everything acknowledged well before the cut (a sync interval and slack) survived.
            if let cutAt = run.cutAt {
                let old = run.acknowledged.filter { $0.at < cutAt - .milliseconds(600) }.count
                #expect(count >= old, "cut after fsync \(cut): \(old) edits older than the interval, \(count) found")
            }
        }
    }
}

/// Damaged journals: what the daemon starts with, and what it says.
@Suite("Bad journals: torn, flipped, zeroed and missing segments", .serialized)
struct BadJournalTests {
    /// The records of a segment file: offset and length of each (header included in `length`).
    static func records(_ path: String) throws -> [(offset: Int, length: Int)] {
        let data = [UInt8](try Disk.bytes(path))
        var found: [(Int, Int)] = []
        var offset = 32
        while offset + 8 <= data.count {
            let length =
                Int(data[offset]) | Int(data[offset + 1]) << 8 | Int(data[offset + 2]) << 16
                | Int(data[offset + 3]) << 24
            guard length >= 16, offset + 8 + length <= data.count else { break }
            found.append((offset, 8 + length))
            offset += 8 + length
        }
        return found
    }

    /// A journal left by a killed daemon: `b.txt` set, then `a.txt` set and appended to five times.
    static func damagedRig() async throws -> (JournalRig, pristine: String) {
        let rig = try JournalRig()
        try await rig.start()
        let client = try rig.client()
        try rig.ok(["cmd": "set", "doc": "b.txt", "text": "b\n"], on: client)
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "0\n"], on: client)
        for index in 1...5 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string("\(index)\n")], on: client) }
        rig.kill()
        let pristine = rig.directory.sub("pristine")
        _ = try Machine.run("cp", ["-a", rig.journal, pristine])
        return (rig, pristine)
    }

    /// Puts the pristine journal back, empties the root, applies `damage` to the segment.
    static func restore(_ rig: JournalRig, from pristine: String, damage: (String) throws -> Void) throws {
        _ = try Machine.run("rm", ["-rf", rig.journal, rig.root])
        _ = try Machine.run("cp", ["-a", pristine, rig.journal])
        try damage(rig.journal + "/" + rig.segments[0])
    }

    static func truncate(_ path: String, to size: Int) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: UInt64(size))
        try handle.close()
    }

    func text(_ rig: JournalRig, _ doc: String) throws -> String? {
        try rig.client().call(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue
    }

    @Test(
        "The last record cut at every byte offset: the daemon starts with every whole record, the cut is reported as a torn tail, the cut edit is not applied"
    )
    func tornAtEveryOffset() async throws {
        let (rig, pristine) = try await Self.damagedRig()
        let segment = pristine + "/" + rig.segments[0]
        let last = try Self.records(segment).last!
        for cut in 0..<last.length {
            try Self.restore(rig, from: pristine) { try Self.truncate($0, to: last.offset + cut) }
            try await rig.start()
            #expect(try text(rig, "a.txt") == "0\n1\n2\n3\n4\n", "cut at byte \(cut) of the last record")
            #expect(try text(rig, "b.txt") == "b\n")
            let problems = try rig.status()["journal"]?["last_replay"]?["problems"]?.arrayValue ?? []
            if cut > 0 {
                #expect(
                    problems.contains { $0.stringValue?.contains("torn tail at offset \(last.offset)") == true },
                    "cut at byte \(cut): \(problems)")
            }
            rig.kill()
        }
    }

    @Test(
        "A bit flipped in a middle record: replay stops there for that segment, names it and the documents affected, and applies nothing wrong"
    )
    func flippedBit() async throws {
        let (rig, pristine) = try await Self.damagedRig()
        let records = try Self.records(pristine + "/" + rig.segments[0])
        // Records: b's base and set, a's base, set and five appends; flip a bit in a's second append.
        let target = records[5]
        try Self.restore(rig, from: pristine) { path in
            var data = [UInt8](try Disk.bytes(path))
            data[target.offset + target.length - 2] ^= 0x10
            try Data(data).write(to: URL(fileURLWithPath: path))
        }
        let daemon = try await rig.start()
        #expect(try text(rig, "a.txt") == "0\n1\n")
        #expect(try text(rig, "b.txt") == "b\n")
        let problems = try rig.status()["journal"]?["last_replay"]?["problems"]?.arrayValue ?? []
        #expect(
            problems.contains {
                $0.stringValue?.contains("bad record at offset \(target.offset)") == true
                    && $0.stringValue?.contains("documents affected: a.txt") == true
            }, "\(problems)")
        #expect(daemon.output.contains { $0.contains("bad record at offset \(target.offset)") })
        rig.kill()
    }

    @Test(
        "A last segment of zeros: not replayed, reported as a torn tail (what a power cut right after making it leaves); the daemon starts with the files as they are"
    )
    func zeros() async throws {
        let (rig, pristine) = try await Self.damagedRig()
        try Self.restore(rig, from: pristine) { path in
            let size = try Disk.bytes(path).count
            try Data(count: size).write(to: URL(fileURLWithPath: path))
        }
        try await rig.start()
        #expect(try rig.client().call(["cmd": "get", "doc": "a.txt"])["error"]?["code"] == "not-found")
        let problems = try rig.status()["journal"]?["last_replay"]?["problems"]?.arrayValue ?? []
        #expect(problems.contains { $0.stringValue?.contains("torn tail at offset 0") == true }, "\(problems)")
        rig.kill()
    }

    @Test(
        "A missing segment: reported; the document whose records it held gets only the edits before the gap, and is named; the rest is replayed"
    )
    func missingSegment() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        let client = try rig.client()
        let chunk = String(repeating: "a", count: 4095) + "\n"
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": ""], on: client)
        // 256 KiB segments (an eighth of MaxSize=): three of them.
        for _ in 0..<150 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk)], on: client) }
        try rig.ok(["cmd": "set", "doc": "b.txt", "text": "in the last segment\n"], on: client)
        rig.kill()
        let segments = rig.segments
        #expect(segments.count == 3, "\(segments)")
        try FileManager.default.removeItem(atPath: rig.journal + "/" + segments[1])
        try await rig.start()
        #expect(try text(rig, "b.txt") == "in the last segment\n")
        let a = try text(rig, "a.txt") ?? ""
        let chunks = a.utf8.count / chunk.utf8.count
        #expect(a == String(repeating: chunk, count: chunks) && chunks > 0 && chunks < 100, "\(chunks) chunks")
        let replay = try rig.status()["journal"]?["last_replay"]
        let problems = replay?["problems"]?.arrayValue ?? []
        #expect(problems.contains { $0.stringValue?.contains("missing") == true }, "\(problems)")
        let unapplied = replay?["unapplied"]?.arrayValue ?? []
        #expect(unapplied.count == 1 && unapplied[0].stringValue?.hasPrefix("a.txt: ") == true, "\(unapplied)")
        rig.kill()
    }

    @Test(
        "A missing segment and a set after it: the set gives the whole document, so it and the edits after it are replayed and nothing is reported lost; a document with no set after its gap still stops there"
    )
    func missingSegmentBridgedBySet() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        let client = try rig.client()
        let chunk = String(repeating: "a", count: 4095) + "\n"
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": ""], on: client)
        try rig.ok(["cmd": "set", "doc": "c.txt", "text": "c\n"], on: client)
        // 256 KiB segments (an eighth of MaxSize=): three of them, the middle one removed below.
        for _ in 0..<75 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk)], on: client) }
        // In the middle segment.
        for _ in 0..<2 { try rig.ok(["cmd": "append", "doc": "c.txt", "text": .string(chunk)], on: client) }
        for _ in 0..<75 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk)], on: client) }
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "after the gap\n"], on: client)
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "and more\n"], on: client)
        try rig.ok(["cmd": "append", "doc": "c.txt", "text": "after the gap\n"], on: client)
        rig.kill()
        let segments = rig.segments
        #expect(segments.count == 3, "\(segments)")
        let lost = try Self.records(rig.journal + "/" + segments[1]).count
        try FileManager.default.removeItem(atPath: rig.journal + "/" + segments[1])
        try await rig.start()
        #expect(try text(rig, "a.txt") == "after the gap\nand more\n", "\(lost) records lost with the segment")
        let replay = try rig.status()["journal"]?["last_replay"]
        let unapplied = replay?["unapplied"]?.arrayValue ?? []
        #expect(!unapplied.contains { $0.stringValue?.hasPrefix("a.txt: ") == true }, "\(unapplied)")
        // c.txt's appends after its gap have no whole edit before them: not replayed, and named.
        let c = try text(rig, "c.txt") ?? ""
        #expect(c.hasPrefix("c\n") && !c.contains("after the gap"), "\(c.utf8.count) bytes")
        #expect(unapplied.contains { $0.stringValue?.hasPrefix("c.txt: ") == true }, "\(unapplied)")
        rig.kill()
    }

    @Test(
        "A package whose replay a missing segment cut short, edited, and killed again before it could be saved: the next replay keeps both the edits replayed the first time and the edit made since",
        .enabled(if: Machine.isRoot, "an immutable root (chattr +i) needs root")
    )
    func packageCutShortEditedAndKilledAgain() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try await rig.start()
        var client = try rig.client()
        let chunk = String(repeating: "a", count: 4095) + "\n"
        func put(_ member: String) throws {
            try rig.ok(
                ["cmd": "put-member", "doc": "p.package", "member": .string(member), "text": .string(member + "\n")],
                on: client)
        }
        try rig.ok(["cmd": "create", "doc": "p.package"], on: client)
        try put("first.txt")
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": ""], on: client)
        // 256 KiB segments (an eighth of MaxSize=): the package's edits in each of three,
        // the middle one removed below.
        for _ in 0..<70 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk)], on: client) }
        try put("lost.txt")
        for _ in 0..<70 { try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk)], on: client) }
        try put("after the gap.txt")
        rig.kill()
        let segments = rig.segments
        #expect(segments.count == 3, "\(segments)")
        try FileManager.default.removeItem(atPath: rig.journal + "/" + segments[1])
        // No save can be made (an immutable root): the replayed package lives in memory and
        // in the journal only when it is edited and the daemon killed again.
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: true)
        let immutable = try Machine.run("/usr/bin/chattr", ["+i", rig.root])
        try #require(immutable.status == 0, "chattr +i: \(immutable.stderr)")
        defer { _ = try? Machine.run("/usr/bin/chattr", ["-i", rig.root]) }
        try await rig.start()
        #expect(try rig.members("p.package") == ["first.txt": "first.txt\n"])
        client = try rig.client()
        try put("later.txt")
        rig.kill()
        try Machine.run("/usr/bin/chattr", ["-i", rig.root])
        try await rig.start()
        #expect(try rig.members("p.package") == ["first.txt": "first.txt\n", "later.txt": "later.txt\n"])
        let unapplied = try rig.status()["journal"]?["last_replay"]?["unapplied"]?.arrayValue ?? []
        // The gap is the first run's: this replay finds every edit made since.
        #expect(!unapplied.contains { $0.stringValue?.hasPrefix("p.package: ") == true }, "\(unapplied)")
        rig.kill()
    }

    @Test(
        "A new package whose first edit is lost: its replay applies nothing, and a later replay still passes over the lost changes to the edit made since",
        .enabled(if: Machine.isRoot, "an immutable root (chattr +i) needs root")
    )
    func packageFirstEditLost() async throws {
        let rig = try JournalRig()
        try await rig.start()
        rig.kill()
        // A new package's base (change 0), its first edit lost, its second journalled.
        let journal = try Journal(directory: rig.journal)
        try journal.replay { _ in }
        var bytes: [UInt8] = []
        JournalEntry.base(path: "p.package", file: nil, token: 0, contents: nil).encode(into: &bytes)
        _ = try journal.append(owner: 1, payload: bytes)
        JournalEntry.edit(token: 2, .putMember("m2.txt", Data("m2\n".utf8))).encode(into: &bytes)
        _ = try journal.append(owner: 1, payload: bytes)
        #expect(journal.close() == nil)
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: true)
        let immutable = try Machine.run("/usr/bin/chattr", ["+i", rig.root])
        try #require(immutable.status == 0, "chattr +i: \(immutable.stderr)")
        defer { _ = try? Machine.run("/usr/bin/chattr", ["-i", rig.root]) }
        try await rig.start()
        #expect(try rig.members("p.package") == [:])
        try rig.ok(["cmd": "put-member", "doc": "p.package", "member": "m3.txt", "text": "m3\n"])
        rig.kill()
        try Machine.run("/usr/bin/chattr", ["-i", rig.root])
        try await rig.start()
        #expect(try rig.members("p.package") == ["m3.txt": "m3\n"])
        let unapplied = try rig.status()["journal"]?["last_replay"]?["unapplied"]?.arrayValue ?? []
        #expect(!unapplied.contains { $0.stringValue?.hasPrefix("p.package: ") == true }, "\(unapplied)")
        rig.kill()
    }

    @Test(
        "A record that cannot be decoded after decodable ones of its document: reported, nothing of that document applied, and no record of it left pinning its segment"
    )
    func undecodableAfterDecodable() async throws {
        let rig = try JournalRig()
        try await rig.start()
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": "one\n"])
        try rig.ok(["cmd": "append", "doc": "a.txt", "text": "two\n"])
        rig.kill()
        // After a.txt's base and edits, a record of the same document the daemon cannot decode.
        let journal = try Journal(directory: rig.journal)
        var owner: UInt64 = 0
        var records = 0
        try journal.replay { record in
            owner = record.owner
            records += 1
            journal.noteReplayed(owner: record.owner, lsn: record.lsn)
        }
        #expect(records == 3)
        try journal.append(owner: owner, payload: [0xEE, 0xEE, 0xEE])
        #expect(journal.close() == nil)
        try await rig.start()
        let status = try rig.status()["journal"]
        let unapplied = status?["last_replay"]?["unapplied"]?.arrayValue ?? []
        #expect(unapplied.contains { $0.stringValue?.hasPrefix("a.txt: ") == true }, "\(unapplied)")
        #expect(try rig.client().call(["cmd": "get", "doc": "a.txt"])["error"]?["code"] == "not-found")
        #expect(status?["unsaved_records"]?.intValue == 0, "\(status ?? .null)")
        rig.kill()
    }

    @Test(
        "A missing segment and the file changed while the daemon was down: the conflict copy holds the edits up to the gap, none after it, and the gap is reported"
    )
    func missingSegmentAndChangedWhileDown() async throws {
        let rig = try JournalRig("[Journal]\nMaxSize=1M\n")
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: true)
        try Disk.write("on disk\n", to: rig.root + "/a.txt")
        try await rig.start()
        let client = try rig.client()
        // Each append numbered, so that a copy with a gap in it shows.
        func chunk(_ index: Int) -> String {
            String(format: "%04d", index) + String(repeating: "a", count: 4091) + "\n"
        }
        try rig.ok(["cmd": "set", "doc": "a.txt", "text": ""], on: client)
        for index in 1...150 {
            try rig.ok(["cmd": "append", "doc": "a.txt", "text": .string(chunk(index))], on: client)
        }
        rig.kill()
        let segments = rig.segments
        #expect(segments.count == 3, "\(segments)")
        try FileManager.default.removeItem(atPath: rig.journal + "/" + segments[1])
        try Disk.write("theirs, while down\n", to: rig.root + "/a.txt")
        try await rig.start()
        #expect(
            String(decoding: try Disk.bytes(rig.root + "/a.txt"), as: UTF8.self) == "theirs, while down\n",
            "the other program's version stays")
        let copies = try Disk.names(in: rig.root).filter { $0.hasPrefix("a (conflict ") }
        let copy = try #require(copies.first, "no conflict copy")
        let text = String(decoding: try Disk.bytes(rig.root + "/" + copy), as: UTF8.self)
        let count = text.utf8.count / 4096
        #expect(count > 0 && count < 100, "\(count) appends in the copy")
        #expect(
            text == (0..<count).map { chunk($0 + 1) }.joined(),
            "the appends 1...\(count), in order, and nothing after a gap")
        let unapplied = try rig.status()["journal"]?["last_replay"]?["unapplied"]?.arrayValue ?? []
        #expect(
            unapplied.contains {
                $0.stringValue?.hasPrefix("a.txt: ") == true && $0.stringValue?.contains("not replayed") == true
            },
            "\(unapplied)")
        rig.kill()
    }
}

/// A library user's own document type, whose edits are the engine's ``DocumentEdit``s.
struct Tally: AutosaveDocument {
    static let type = UTType.declare("com.example.tally", conformingTo: [.data], filenameExtensions: ["tally"])
    static var readableContentTypes: [UTType] { [type] }
    var marks: [String] = []

    init(configuration: ReadConfiguration) throws {
        let text = String(decoding: configuration.file.regularFileContents ?? Data(), as: UTF8.self)
        marks = text.split(separator: "\n").map(String.init)
    }

    func fileWrapper(configuration: WriteConfiguration) throws -> FileWrapper {
        FileWrapper(regularFileWithContents: Data(marks.map { $0 + "\n" }.joined().utf8))
    }

    mutating func apply(_ edit: DocumentEdit, existingFile: FileWrapper?) throws {
        guard case .append(let mark) = edit else {
            throw DocumentContentError(.unsupported, "a tally only takes appended marks")
        }
        marks.append(mark)
    }
}

@Suite("The edit journal for programs embedding the engine")
struct EmbeddedJournalTests {
    static func store(_ directory: TemporaryDirectory, log: CapturedLog) -> DocumentStore {
        var configuration = Configuration(environment: [:])
        configuration.root = directory.sub("root")
        configuration.journalDirectorySetting = directory.sub("journal")
        configuration.quietPeriod = .seconds(3600)
        configuration.maxDelay = .seconds(3600)
        try? FileManager.default.createDirectory(atPath: configuration.root, withIntermediateDirectories: true)
        var registry = DocumentTypeRegistry()
        registry.register(Tally.self, contentType: Tally.type, filenameExtensions: ["tally"])
        return DocumentStore(configuration: configuration, registry: registry, log: Logger(level: .info, handler: log))
    }

    @Test(
        "A registered type's edits through apply(_:to:) are journalled and replayed by the next store; modify(_:as:_:) is reported as unjournalled"
    )
    func embedded() async throws {
        let directory = TemporaryDirectory("journal-embedded")
        let log = CapturedLog()
        let first = Self.store(directory, log: log)
        await first.openAll()
        try await first.openJournal()
        try Disk.write("", to: directory.sub("root/count.tally"))
        for mark in ["a", "b", "c"] { try await first.apply(.append(mark), to: "count.tally") }
        try Disk.write("x\n", to: directory.sub("root/other.tally"))
        try await first.modify("other.tally", as: Tally.self) { $0.marks.append("unjournalled") }
        let summary = try #require(await first.journalSummary)
        #expect(summary.unjournalledEdits == 1 && summary.unjournalledTypes == ["Tally"])
        #expect(log.all.contains { $0.message.contains("Tally documents through modify(_:as:_:) are not journalled") })
        // Stopped without saving, as a crash would: the journal's records are all that holds the marks.
        #expect(await first.closeJournal().failure == nil)
        #expect(try Disk.bytes(directory.sub("root/count.tally")).isEmpty)

        let second = Self.store(directory, log: CapturedLog())
        await second.openAll()
        let replayed = try #require(try await second.openJournal())
        #expect(replayed.edits == 3 && replayed.documents == 1)
        #expect(try await second.document("count.tally", as: Tally.self).marks == ["a", "b", "c"])
        #expect(try await second.document("other.tally", as: Tally.self).marks == ["x"])
        _ = await second.closeJournal()
    }
}

@Suite("Replay of long chains: an edit that gives the whole document supersedes the edits before it")
struct SupersedingReplayTests {
    /// A store as ``EmbeddedJournalTests`` makes one: nothing saved within the test.
    static func store(_ directory: TemporaryDirectory) -> DocumentStore {
        EmbeddedJournalTests.store(directory, log: CapturedLog())
    }

    static func text(_ store: DocumentStore, _ path: String) async throws -> String {
        try await store.document(path, as: PlainTextDocument.self).text
    }

    @Test("Sets, appends and patches replay to what they made, and every edit counts as replayed")
    func setsAmongEdits() async throws {
        let directory = TemporaryDirectory("journal-superseding")
        let first = Self.store(directory)
        await first.openAll()
        try await first.openJournal()
        let text: [DocumentEdit] = [
            .setText("one"), .append(" two"), .setText("three"), .append(" four"), .append(" five"),
        ]
        for edit in text { _ = try await first.apply(edit, to: "a.txt", create: true) }
        let json: [DocumentEdit] = [
            .setJSON(#"{"a":1}"#), .mergePatch(#"{"b":2}"#), .setJSON(#"{"c":3}"#), .mergePatch(#"{"d":4}"#),
        ]
        for edit in json { _ = try await first.apply(edit, to: "j.json", create: true) }
        for mark in ["x", "ÿé→"] { _ = try await first.apply(.append(mark), to: "b.txt", create: true) }
        #expect(await first.closeJournal().failure == nil)

        let second = Self.store(directory)
        await second.openAll()
        let replayed = try #require(try await second.openJournal())
        #expect(replayed.edits == 11 && replayed.documents == 3 && replayed.unapplied.isEmpty)
        #expect(try await Self.text(second, "a.txt") == "three four five")
        #expect(
            try await second.document("j.json", as: JSONDocument.self).value == JSONValue(parsing: #"{"c":3,"d":4}"#))
        #expect(try await Self.text(second, "b.txt") == "xÿé→")
        _ = await second.closeJournal()
    }

    @Test(
        "A superseding edit refused on replay: the edits are applied one by one, and the document keeps what came before the refused one"
    )
    func refusedSupersedingEdit() async throws {
        let directory = TemporaryDirectory("journal-superseding-refused")
        let first = Self.store(directory)
        await first.openAll()
        try await first.openJournal()
        for edit: DocumentEdit in [.setJSON(#"{"a":1}"#), .mergePatch(#"{"b":2}"#)] {
            _ = try await first.apply(edit, to: "j.json", create: true)
        }
        #expect(await first.closeJournal().failure == nil)

        // Two more edits written as the store writes them (JournalEntry's encoding: kind 2,
        // the change count, the edit's kind, a u32 length and the bytes): a set whose JSON
        // the document refuses (no request could journal it), then a patch.
        let journal = try Journal(directory: directory.sub("journal"))
        var owner: UInt64 = 0
        var records = 0
        var token: UInt64 = 0
        try journal.replay { record in
            owner = record.owner
            records += 1
            // An edit's change count follows its kind byte.
            let bytes = Array(record.payload)
            token = (1...8).reduce(0) { $0 | UInt64(bytes[$1]) << (8 * ($1 - 1)) }
            journal.noteReplayed(owner: record.owner, lsn: record.lsn)
        }
        #expect(records == 3)  // the base and the two edits
        func edit(_ token: UInt64, kind: UInt8, _ text: String) -> [UInt8] {
            var bytes: [UInt8] = [2]
            withUnsafeBytes(of: token.littleEndian) { bytes += $0 }
            bytes.append(kind)
            withUnsafeBytes(of: UInt32(text.utf8.count).littleEndian) { bytes += $0 }
            return bytes + Array(text.utf8)
        }
        try journal.append(owner: owner, payload: edit(token + 1, kind: 4, "{not json"))
        try journal.append(owner: owner, payload: edit(token + 2, kind: 5, #"{"c":3}"#))
        #expect(journal.close() == nil)

        let second = Self.store(directory)
        await second.openAll()
        let replayed = try #require(try await second.openJournal())
        #expect(replayed.edits == 2)
        #expect(
            replayed.unapplied.count == 1 && replayed.unapplied[0].contains("was refused on replay"),
            "\(replayed.unapplied)")
        #expect(
            try await second.document("j.json", as: JSONDocument.self).value == JSONValue(parsing: #"{"a":1,"b":2}"#))
        _ = await second.closeJournal()
    }
}
