import Autosave
import Control
import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// The built daemon under `fiu-run -x` (libfiu's POSIX wrappers preloaded, its control
/// pipe at `<directory>/fiu-<pid>`), with faults switched on and off while it runs.
final class FaultRig {
    let directory = TemporaryDirectory("faults")
    var root: String
    var socket: String { directory.sub("run/control.sock") }
    var config: String { directory.sub("autosaved.conf") }
    var process: DaemonProcess!
    var pid: Int32 { process.process.processIdentifier }
    /// systemd's notification socket, played by the test: `STATUS=` lines arrive here.
    /// Only for tests that read it: a full queue (`net.unix.max_dgram_qlen`) blocks the
    /// daemon's `sd_notify`, as an unresponsive systemd would.
    let notify: NotifyReceiver?

    /// How the daemon is started (kept for ``restart()``).
    private var program = ""
    private var arguments: [String] = []
    private var environment: [String: String] = [:]

    /// - Parameters:
    ///   - root: the store root (default: a directory in the rig's temporary directory).
    ///   - underFaultInjection: whether the daemon runs under `fiu-run -x`.
    ///   - journal: `[Journal] Mode=`; by default `off` under libfiu, whose faults hit every
    ///     write and sync of the process, the journal's too (the journal's own faults are
    ///     tested with it on).
    ///   - settings: configuration lines appended (sections other than those written here).
    ///   - prefix: a command line the daemon is started under (`setpriv …`, `unshare …`).
    ///   - journald: a private journald the daemon logs to (in its mount namespace).
    ///   - extraEnvironment: variables added to the daemon's environment.
    ///   - start: `false` to start it later with ``start()`` (after preparing the directory).
    init(
        root: String? = nil, underFaultInjection: Bool = true, notifying: Bool = false, journal: String? = nil,
        settings: String = "", prefix: [String] = [], journald: NamespacedJournald? = nil,
        extraEnvironment: [String: String] = [:], start: Bool = true
    ) async throws {
        self.root = root ?? directory.sub("root")
        notify = notifying ? try NotifyReceiver(in: directory) : nil
        try FileManager.default.createDirectory(atPath: directory.sub("run"), withIntermediateDirectories: true)
        try Disk.write(
            "[Store]\nRoot=\(self.root)\n[Autosave]\nQuietPeriod=1h\nMaxDelay=1h\nRetryInterval=200ms\n"
                + "MaxRetryInterval=400ms\n[Control]\nSocket=\(socket)\n"
                // The journal outside the root: a root on a full or read-only file system tests the saves.
                + "[Journal]\nMode=\(journal ?? (underFaultInjection ? "off" : "periodic"))\n"
                + "Directory=\(directory.sub("journal"))\n" + settings,
            to: config)
        let daemon = Machine.product("autosaved")
        var command =
            underFaultInjection
            ? ["/usr/bin/fiu-run", "-x", "-f", directory.sub("fiu"), daemon, "--config", config]
            : [daemon, "--config", config]
        command = (journald?.prefix ?? []) + prefix + command
        program = command[0]
        arguments = Array(command.dropFirst())
        environment = ProcessInfo.processInfo.environment
        if let notify { environment["NOTIFY_SOCKET"] = notify.path } else { environment["NOTIFY_SOCKET"] = nil }
        environment.removeValue(forKey: "WATCHDOG_USEC")
        environment.removeValue(forKey: "WATCHDOG_PID")
        // Logging to journald: stderr is a pipe, not the journal's stream.
        environment.removeValue(forKey: "JOURNAL_STREAM")
        environment.merge(extraEnvironment) { $1 }
        if start { try await self.start() }
    }

    /// Starts the daemon (again, after it exited or was killed) and waits until it is ready.
    func start(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        process = try DaemonProcess(program, arguments, environment: environment)
        await process.waitForLine(containing: "started:", sourceLocation: sourceLocation)
    }

    /// Runs a libfiu control command (`enable name=…,failinfo=…`, `disable name=…`) in the daemon.
    func fiu(_ command: String) throws {
        let result = try Machine.run("fiu-ctrl", ["-c", command, "-f", directory.sub("fiu"), "\(pid)"])
        guard result.status == 0, !result.stderr.contains("Error") else { throw Failure("fiu-ctrl: \(result)") }
    }

    /// A client whose every reply is awaited for at most a minute (a test fails rather than hangs).
    func client() throws -> ControlClient { try PowerLossRig.client(socket) }

    func call(_ request: JSONValue) throws -> JSONValue { try client().call(request) }

    func status() throws -> JSONValue { try call(["cmd": "status"]) }

    /// Waits (up to a minute) until no document is unsaved, with no save request: the retries alone.
    func waitUntilSaved(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let status = try status()
            if status["unsaved"]?.intValue == 0, status["failed"]?.intValue == 0 { return }
            usleep(50_000)
        }
        Issue.record("still unsaved after a minute: \(try status())", sourceLocation: sourceLocation)
    }

    func stop() async -> Int32 {
        process.signal(SIGTERM)
        return PowerLossRig.waitForExit(process) ?? -1
    }

    deinit {
        if process?.process.isRunning == true { process.signal(SIGKILL) }
    }
}

/// What one injected fault must leave: the old file whole, the edits in memory, the cause
/// in `status`, `STATUS=` and the journal, and, once the fault is gone, a retry that saves
/// without a restart.
struct InjectedFault: Sendable, CustomStringConvertible {
    var point: String
    var errno: Int32
    var errnoName: String
    var operation: String
    var description: String { "\(point) \(errnoName)" }
}

@Suite(
    "Injected faults: the built daemon under libfiu, and real full, read-only and descriptor-starved file systems",
    .serialized)
struct FaultInjectionTests {
    static let text1 = String(repeating: "old line\n", count: 2000)
    static let text2 = String(repeating: "new line, longer\n", count: 3000)

    static let faults = [
        InjectedFault(point: "posix/io/sync/fsync", errno: EIO, errnoName: "EIO", operation: "fsync"),
        InjectedFault(point: "posix/io/rw/write", errno: EIO, errnoName: "EIO", operation: "write"),
        InjectedFault(point: "posix/io/rw/write", errno: ENOSPC, errnoName: "ENOSPC", operation: "write"),
    ]

    static var hasLibfiu: Bool { Machine.has("fiu-run") && Machine.has("fiu-ctrl") }

    /// Appends `count` lines to `document`, each acknowledged; returns the text they make after `text`.
    static func appendAcknowledged(
        _ client: ControlClient, _ document: String, to text: String, count: Int, tag: String
    ) throws -> String {
        var text = text
        for n in 0..<count {
            let line = "\(tag) \(n)\n"
            let reply = try client.call(["cmd": "append", "doc": .string(document), "text": .string(line)])
            #expect(reply["ok"] == true, "\(reply)")
            text += line
        }
        return text
    }

    @Test(
        "A fault by name: the old file whole, the edits kept; the cause in status, STATUS= and the journal; saved with no restart once it is gone",
        .enabled(if: Self.hasLibfiu && NamespacedJournald.isAvailable, "needs fiu-utils, root, journald and unshare"),
        arguments: Self.faults)
    func byName(fault: InjectedFault) async throws {
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(notifying: true, journald: journald)
        let witness = try FaultWitness(rig, journald)
        let client = try rig.client()
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text1)])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])["ok"] == true)
        let events = try rig.client()
        _ = try events.call(["cmd": "subscribe", "events": ["saved", "save-failed"]])

        let before = witness.mark
        try rig.fiu("enable name=\(fault.point),failinfo=\(fault.errno)")
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text2)])["ok"] == true)
        let failed = try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])
        #expect(failed["error"]?["code"]?.stringValue == "save-failed", "\(failed)")
        let message = failed["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains(fault.operation) && message.contains(fault.errnoName), "\(message)")
        // More edits while the fault lasts, each acknowledged.
        let text = try Self.appendAcknowledged(client, "doc.txt", to: Self.text2, count: 3, tag: "during the fault")
        // Nothing lost: the old file whole, no temporary, the edits in memory.
        #expect(try String(contentsOfFile: rig.root + "/doc.txt", encoding: .utf8) == Self.text1)
        #expect(Disk.temporaries(under: rig.root).isEmpty)
        #expect(try client.call(["cmd": "get", "doc": "doc.txt"])["text"]?.stringValue == text)
        // The cause, in status, STATUS= and the journal.
        let path = try await witness.expectReported(
            ExpectedFailure(
                document: "doc.txt", operation: fault.operation, errnoName: fault.errnoName, errno: fault.errno,
                under: rig.root),
            since: before)
        // The file the failed step wrote is a temporary, and it is gone: never synced again,
        // renamed into place or otherwise trusted.
        #expect(TemporaryName.isTemporary(PathName.lastComponent(path)), "\(path)")
        #expect(!FileManager.default.fileExists(atPath: path), "\(path) left behind")
        // Retries keep failing while the fault lasts (at least one more attempt), then
        // succeed once it is gone, with no request.
        while try events.receive()["event"]?.stringValue != "save-failed" {}
        let gone = witness.mark
        try rig.fiu("disable name=\(fault.point)")
        // The retry wrote the whole file again from memory (after an fsync error the kernel
        // may have dropped the dirty pages): `BYTES_WRITTEN` is the whole text.
        try await witness.expectRecovered(
            files: ["doc.txt": text], saved: ["doc.txt": text.utf8.count], since: gone)
        var saved: JSONValue?
        while saved == nil {
            let event = try events.receive()
            if event["event"]?.stringValue == "saved" { saved = event }
        }
        #expect(saved?["bytes"]?.intValue == text.utf8.count, "\(String(describing: saved))")
        #expect(try rig.status()["last_failure"] != nil, "the last failure stays on record")
        #expect(await rig.stop() == 0)
    }

    @Test(
        "fsyncgate: one fsync fails (EIO, once): the save fails though a second fsync would succeed; the retry writes a new file",
        .enabled(if: Self.hasLibfiu && NamespacedJournald.isAvailable, "needs fiu-utils, root, journald and unshare"))
    func fsyncFailsOnce() async throws {
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(notifying: true, journald: journald)
        let witness = try FaultWitness(rig, journald)
        let client = try rig.client()
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text1)])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])["ok"] == true)
        // The first save's STATUS= has come before the mark: a STATUS= after it is later than the failure.
        _ = await witness.notices.waitFor("after the first save") {
            $0.contains(" 0 unsaved") && $0.contains("(doc.txt)")
        }
        // Only the next fsync fails. A writer that synced the same file again would be told
        // all is well, while the kernel may have dropped the pages the failed sync left.
        try rig.fiu("enable name=posix/io/sync/fsync,failinfo=5,onetime")
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text2)])["ok"] == true)
        let gone = witness.mark
        let failed = try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])
        #expect(failed["error"]?["code"]?.stringValue == "save-failed", "\(failed)")
        #expect(failed["error"]?["message"]?.stringValue?.contains("fsync") == true, "\(failed)")
        let entry = try await journald.waitForEntry("the failed fsync") {
            $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed && $0["DOCUMENT"]?.stringValue == "doc.txt"
        }
        #expect(entry?["OPERATION"]?.stringValue == "fsync" && entry?["ERRNO_NAME"]?.stringValue == "EIO")
        let path = entry?["PATH"]?.stringValue ?? ""
        #expect(TemporaryName.isTemporary(PathName.lastComponent(path)), "\(path)")
        #expect(!FileManager.default.fileExists(atPath: path), "the file whose sync failed, \(path), left behind")
        // The retry (the fault spent) writes all of the text again into a new file.
        try await witness.expectRecovered(
            files: ["doc.txt": Self.text2], saved: ["doc.txt": Self.text2.utf8.count], since: gone)
        let failures = try journald.entries().filter { $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed }
        #expect(failures.count == 1, "\(failures)")
        #expect(await rig.stop() == 0)
    }

    @Test(
        "A package member's fsync fails: named in status, STATUS= and the journal; the member written again from memory once the fault is gone",
        .enabled(if: Self.hasLibfiu && NamespacedJournald.isAvailable, "needs fiu-utils, root, journald and unshare"))
    func packageMemberSync() async throws {
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(notifying: true, journald: journald)
        let witness = try FaultWitness(rig, journald)
        #expect(try rig.call(["cmd": "create", "doc": "book.package"])["ok"] == true)
        for member in ["a.txt", "ch/b.txt"] {
            _ = try rig.call([
                "cmd": "put-member", "doc": "book.package", "member": .string(member), "text": .string(Self.text1),
            ])
        }
        #expect(try rig.call(["cmd": "save", "doc": "book.package", "wait": true])["ok"] == true)
        let before = witness.mark
        try rig.fiu("enable name=posix/io/sync/fsync,failinfo=5")
        _ = try rig.call([
            "cmd": "put-member", "doc": "book.package", "member": "ch/b.txt", "text": .string(Self.text2),
        ])
        let failed = try rig.call(["cmd": "save", "doc": "book.package", "wait": true])
        #expect(failed["error"]?["code"]?.stringValue == "save-failed")
        #expect(try String(contentsOfFile: rig.root + "/book.package/ch/b.txt", encoding: .utf8) == Self.text1)
        try await witness.expectReported(
            ExpectedFailure(
                document: "book.package", operation: "fsync", errnoName: "EIO", errno: EIO,
                under: rig.root + "/book.package"),
            since: before)
        let gone = witness.mark
        try rig.fiu("disable name=posix/io/sync/fsync")
        // Only the changed member is written again, all of it.
        try await witness.expectRecovered(
            files: ["book.package/ch/b.txt": Self.text2, "book.package/a.txt": Self.text1],
            saved: ["book.package": Self.text2.utf8.count], since: gone)
        #expect(await rig.stop() == 0)
    }

    @Test(
        "Faults at random (fsync EIO 30 %, write ENOSPC 20 %) over 3 documents: every save answered, every failure logged, nothing lost",
        .enabled(if: Self.hasLibfiu && NamespacedJournald.isAvailable, "needs fiu-utils, root, journald and unshare"))
    func random() async throws {
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(notifying: true, journald: journald)
        let witness = try FaultWitness(rig, journald)
        let before = witness.mark
        try rig.fiu("enable_random name=posix/io/sync/fsync,probability=0.3,failinfo=5")
        try rig.fiu("enable_random name=posix/io/rw/write,probability=0.2,failinfo=28")
        var latest: [String: String] = [:]
        var failedReplies: [(document: String, message: String)] = []
        var successes = 0
        let client = try rig.client()
        for round in 0..<30 {
            let doc = ["a.txt", "b.txt", "dir/c.txt"][round % 3]
            let text = "\(doc) round \(round)\n" + String(repeating: "x", count: 100 * round)
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
            latest[doc] = text
            let reply = try client.call(["cmd": "save", "doc": .string(doc), "wait": true])
            if reply["ok"] == true {
                successes += 1
                #expect(try String(contentsOfFile: rig.root + "/" + doc, encoding: .utf8) == text)
            } else {
                #expect(reply["error"]?["code"]?.stringValue == "save-failed", "\(reply)")
                failedReplies.append((doc, reply["error"]?["message"]?.stringValue ?? ""))
            }
        }
        // With these odds, 30 saves without a failure (or without a success) would come once
        // in tens of millions of runs: none means the faults were not injected.
        let randomFailures = failedReplies.count
        #expect(randomFailures > 0 && successes > 0, "random faults: \(randomFailures) failed, \(successes) succeeded")
        // Then one failure that lasts until the fault is lifted: a random one is retried
        // within 200 ms, and all of them can be over between two STATUS= updates (at most
        // one each 250 ms), which once left STATUS= nothing to name. Every retry of this
        // one fails too, each time updating STATUS=.
        try rig.fiu("enable name=posix/io/sync/fsync,failinfo=5")
        let lasting = "a.txt failing until the fault is lifted\n"
        #expect(try client.call(["cmd": "set", "doc": "a.txt", "text": .string(lasting)])["ok"] == true)
        latest["a.txt"] = lasting
        let lastingReply = try client.call(["cmd": "save", "doc": "a.txt", "wait": true])
        #expect(lastingReply["error"]?["code"]?.stringValue == "save-failed", "\(lastingReply)")
        failedReplies.append(("a.txt", lastingReply["error"]?["message"]?.stringValue ?? ""))
        // Whatever failure status holds is an injected one, beneath the root.
        let status = try rig.status()
        if let last = status["last_failure"], last != .null {
            #expect(["EIO", "ENOSPC"].contains(last["errno"]?.stringValue ?? ""), "\(status)")
            #expect(["write", "fsync", "fsync directory"].contains(last["operation"]?.stringValue ?? ""), "\(status)")
            #expect(last["path"]?.stringValue?.hasPrefix(rig.root) == true, "\(status)")
        }
        #expect(status["last_failure"] != .null, "\(status)")
        // STATUS= named one, with its cause.
        _ = await witness.notices.waitFor("naming an injected failure", since: before) {
            $0.contains(" failing, last: ") && ($0.contains("failed with EIO") || $0.contains("failed with ENOSPC"))
        }
        // Every failed save is in the journal, with the cause its reply gave.
        let logged = try await journald.waitFor("for every failed save") { entries in
            let matched = failedReplies.map { reply in
                entries.first {
                    $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed
                        && $0["DOCUMENT"]?.stringValue == reply.document
                        && ($0["MESSAGE"]?.stringValue ?? "").hasPrefix(reply.message + "; retrying in ")
                }
            }
            return matched.allSatisfy { $0 != nil } ? matched.compactMap { $0 } : nil
        }
        #expect(logged?.count == failedReplies.count, "\(failedReplies)")
        for (entry, reply) in zip(logged ?? [], failedReplies) {
            let name = entry["ERRNO_NAME"]?.stringValue ?? ""
            #expect(["EIO", "ENOSPC"].contains(name) && reply.message.contains(name), "\(entry)")
            #expect(entry["ERRNO"]?.stringValue == (name == "EIO" ? "\(EIO)" : "\(ENOSPC)"), "\(entry)")
        }
        let gone = witness.mark
        try rig.fiu("disable name=posix/io/sync/fsync")
        try rig.fiu("disable name=posix/io/rw/write")
        try await witness.expectRecovered(files: latest, saved: latest.mapValues { $0.utf8.count }, since: gone)
        print(
            "injected faults, random: 30 saves, \(successes) succeeded, \(randomFailures) failed and were retried;"
                + " then one failed until the fault was lifted"
        )
        #expect(await rig.stop() == 0)
    }

    /// The lowest descriptor number free in the process: with its soft limit there, it can open nothing.
    static func lowestFreeDescriptor(_ pid: Int32) throws -> Int {
        let open = Set(try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").compactMap { Int($0) })
        var free = 0
        while open.contains(free) { free += 1 }
        return free
    }

    @Test(
        "EMFILE: with no descriptor left, saves fail and say so in status, STATUS= and the journal; once the limit is raised, they succeed",
        .enabled(
            if: Machine.has("prlimit") && NamespacedJournald.isAvailable, "needs prlimit, root, journald and unshare"))
    func outOfDescriptors() async throws {
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(underFaultInjection: false, notifying: true, journald: journald)
        let witness = try FaultWitness(rig, journald)
        // Connections opened first take descriptors (the witness's too), and stay open: none
        // closes during the fault. Once the daemon's descriptors have settled, its limit is
        // set to its lowest free descriptor number: it can open nothing, not even a socket.
        let client = try rig.client()
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text1)])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])["ok"] == true)
        var limit = -1
        try await FaultInjectionMoreTests.waitUntil("the daemon's descriptors settled") {
            let free = try Self.lowestFreeDescriptor(rig.pid)
            defer { limit = free }
            return free == limit
        }
        let before = witness.mark
        var result = try Machine.run("prlimit", ["--pid", "\(rig.pid)", "--nofile=\(limit):4096"])
        #expect(result.status == 0, "\(result)")
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text2)])["ok"] == true)
        let failed = try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])
        #expect(failed["error"]?["code"]?.stringValue == "save-failed", "\(failed)")
        #expect(failed["error"]?["message"]?.stringValue?.contains("EMFILE") == true, "\(failed)")
        let text = try Self.appendAcknowledged(client, "doc.txt", to: Self.text2, count: 3, tag: "out of descriptors")
        #expect(try String(contentsOfFile: rig.root + "/doc.txt", encoding: .utf8) == Self.text1)
        try await witness.expectReported(
            ExpectedFailure(
                document: "doc.txt", operation: "open directory", errnoName: "EMFILE", errno: EMFILE, under: rig.root),
            since: before)
        #expect(try Self.lowestFreeDescriptor(rig.pid) >= limit, "a descriptor was freed while the fault lasted")
        let gone = witness.mark
        result = try Machine.run("prlimit", ["--pid", "\(rig.pid)", "--nofile=4096:4096"])
        #expect(result.status == 0)
        try await witness.expectRecovered(files: ["doc.txt": text], saved: ["doc.txt": text.utf8.count], since: gone)
        #expect(await rig.stop() == 0)
    }

    @Test(
        "A real full disk (1 MiB tmpfs), then a read-only bind mount over the root, under the running daemon: reported in status, STATUS= and the journal; saved once freed, remounted rw",
        .enabled(if: NamespacedJournald.isAvailable, "needs root (mounts), journald and unshare"))
    func realFullAndReadOnly() async throws {
        let scratch = TemporaryDirectory("faults-mounts")
        let small = scratch.sub("small")
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: false)
        let tmpfs = try Mount(tmpfsOfSize: "1m", at: small)
        defer { withExtendedLifetime(tmpfs) {} }
        try FileManager.default.createDirectory(atPath: small + "/root", withIntermediateDirectories: false)
        // The journald's mount namespace, the daemon's, is made after the tmpfs: it has it too.
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(
            root: small + "/root", underFaultInjection: false, notifying: true, journald: journald)
        let witness = try FaultWitness(rig, journald)
        let client = try rig.client()
        #expect(try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text1)])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])["ok"] == true)

        // ENOSPC: the file system filled (the same one in both namespaces).
        var before = witness.mark
        try Disk.fill(small)
        _ = try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text2)])
        let full = try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])
        #expect(full["error"]?["message"]?.stringValue?.contains("ENOSPC") == true, "\(full)")
        var text = try Self.appendAcknowledged(client, "doc.txt", to: Self.text2, count: 3, tag: "disk full")
        #expect(try String(contentsOfFile: rig.root + "/doc.txt", encoding: .utf8) == Self.text1)
        try await witness.expectReported(
            ExpectedFailure(
                document: "doc.txt", operation: "write", errnoName: "ENOSPC", errno: ENOSPC, under: rig.root),
            since: before)
        var gone = witness.mark
        try FileManager.default.removeItem(atPath: small + "/filler")
        try await witness.expectRecovered(files: ["doc.txt": text], saved: ["doc.txt": text.utf8.count], since: gone)

        // EROFS: a read-only bind mount over the root, in the daemon's mount namespace (its
        // own: the host's mounts are untouched), then remounted read-write.
        let bind = try journald.inNamespace("mount", ["--bind", "-o", "ro", rig.root, rig.root])
        #expect(bind.status == 0, "\(bind)")
        before = witness.mark
        let saved = text
        _ = try client.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text1 + "again\n")])
        let readOnly = try client.call(["cmd": "save", "doc": "doc.txt", "wait": true])
        #expect(readOnly["error"]?["message"]?.stringValue?.contains("EROFS") == true, "\(readOnly)")
        text = try Self.appendAcknowledged(client, "doc.txt", to: Self.text1 + "again\n", count: 3, tag: "read-only")
        #expect(try String(contentsOfFile: rig.root + "/doc.txt", encoding: .utf8) == saved)
        try await witness.expectReported(
            ExpectedFailure(
                document: "doc.txt", operation: "create temporary file", errnoName: "EROFS", errno: EROFS,
                under: rig.root),
            since: before)
        gone = witness.mark
        let remount = try journald.inNamespace("mount", ["-o", "remount,bind,rw", rig.root])
        #expect(remount.status == 0, "\(remount)")
        try await witness.expectRecovered(files: ["doc.txt": text], saved: ["doc.txt": text.utf8.count], since: gone)
        #expect(await rig.stop() == 0)
    }

    @Test(
        "The directory's fsync fails after the rename: the file in place is the daemon's own, retried, no conflict",
        .enabled(if: PowerLossMount.isAvailable, "needs root, /dev/fuse and Debian's python3-fusepy"))
    func directorySyncFailsAfterRename() async throws {
        let scratch = TemporaryDirectory("faults-fuse")
        for name in ["backing", "mnt"] {
            try FileManager.default.createDirectory(atPath: scratch.sub(name), withIntermediateDirectories: false)
        }
        // The daemon's start-up syncs no directory here; the first save syncs one, the second save's fails.
        let mount = try PowerLossMount(
            backing: scratch.sub("backing"), at: scratch.sub("mnt"), cutAtUnmount: false,
            failing: [PowerLossMount.CrashPoint("fsyncdir", 2)])
        defer { try? mount.unmount() }
        let rig = try await FaultRig(root: scratch.sub("mnt"), underFaultInjection: false)
        #expect(try rig.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text1)])["ok"] == true)
        #expect(try rig.call(["cmd": "save", "doc": "doc.txt", "wait": true])["ok"] == true)
        #expect(try rig.call(["cmd": "set", "doc": "doc.txt", "text": .string(Self.text2)])["ok"] == true)
        let failed = try rig.call(["cmd": "save", "doc": "doc.txt", "wait": true])
        #expect(failed["error"]?["code"]?.stringValue == "save-failed", "\(failed)")
        #expect(failed["error"]?["message"]?.stringValue?.contains("fsync directory") == true, "\(failed)")
        // Printed by the file system before it fails the call, but read from its pipe by a
        // thread of this process: it may come in a moment after the reply.
        #expect(mount.lines.first(containing: "failed fsyncdir 2", within: .seconds(10)) != nil)
        // The new file is in place but not durable; the retry writes and syncs it again.
        try await rig.waitUntilSaved()
        #expect(try String(contentsOfFile: rig.root + "/doc.txt", encoding: .utf8) == Self.text2)
        let status = try rig.status()
        #expect(status["watch"]?["conflicts"]?.intValue == 0, "\(status)")
        #expect(try Disk.names(in: rig.root) == ["doc.txt"], "no conflict copy")
        #expect(await rig.stop() == 0)
    }

    @Test("Log lines that cannot be written (stderr on a full device) do not stop the daemon")
    func fullStandardError() async throws {
        let directory = TemporaryDirectory("faults-stderr")
        let config = directory.sub("autosaved.conf")
        let socket = directory.sub("control.sock")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Autosave]\nQuietPeriod=1h\nMaxDelay=1h\n[Control]\nSocket=\(socket)\n",
            to: config)
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: Machine.product("autosaved"))
        daemon.arguments = ["--config", config]
        daemon.standardError = FileHandle(forWritingAtPath: "/dev/full")
        daemon.standardOutput = FileHandle(forWritingAtPath: "/dev/full")
        try daemon.run()
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        // Its log says when it is ready, but that goes nowhere: wait for the socket to answer.
        var client: ControlClient?
        let deadline = ContinuousClock.now + .seconds(60)
        while client == nil, daemon.isRunning, ContinuousClock.now < deadline {
            client = try? ControlClient(socketPath: socket)
            if client == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let connected = try #require(client, "the daemon answers")
        #expect(try connected.call(["cmd": "set", "doc": "a.txt", "text": "logged nowhere\n"])["ok"] == true)
        #expect(try connected.call(["cmd": "save", "doc": "a.txt", "wait": true])["ok"] == true)
        #expect(try String(contentsOfFile: directory.sub("root/a.txt"), encoding: .utf8) == "logged nowhere\n")
        kill(daemon.processIdentifier, SIGTERM)
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
    }
}
