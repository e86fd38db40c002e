import Autosave
import Control
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// systemd-journald in a mount namespace of its own: a tmpfs on `/run` there holds its
/// sockets, and its `/run/log/journal` is a directory of the test's, read with
/// `journalctl -D`. The host's `/run` is untouched, so it runs beside any other journald
/// (another test's, or the machine's). A daemon started under ``prefix`` logs to it.
final class NamespacedJournald {
    let directory = TemporaryDirectory("journald")
    private let process: DaemonProcess
    var pid: Int32 { process.process.processIdentifier }

    init() async throws {
        let logs = directory.sub("log")
        try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: false)
        let script =
            "mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p /run/systemd/journal /run/log/journal"
            + " && mount --bind '\(logs)' /run/log/journal && exec /lib/systemd/systemd-journald"
        // unshare and sh exec: the process is journald itself.
        process = try DaemonProcess("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/sh", "-c", script])
        let pid = process.process.processIdentifier
        let socket = "/proc/\(pid)/root/run/systemd/journal/socket"
        // Until the shell has mounted the namespace's own /run and exec'd journald, the
        // path through /proc/PID/root is the host's /run, where a journald of the host's
        // may have its socket: ready means journald runs as that process and its socket is there.
        func ready() -> Bool {
            let program = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) ?? ""
            return program.hasSuffix("/systemd-journald") && FileManager.default.fileExists(atPath: socket)
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while !ready(), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        guard ready() else {
            throw Failure("journald did not start: \(process.output)")
        }
    }

    static var isAvailable: Bool {
        Machine.isRoot && Machine.has("unshare") && Machine.has("nsenter") && Machine.has("journalctl")
            && FileManager.default.isExecutableFile(atPath: "/lib/systemd/systemd-journald")
    }

    /// Puts the program that follows in journald's mount namespace (nsenter execs it: same PID).
    var prefix: [String] { ["/usr/bin/nsenter", "-t", "\(pid)", "-m", "--"] }

    /// The entries autosaved sent, as journalctl's JSON objects (every field a string).
    func entries() throws -> [JSONValue] {
        let output = try Machine.run(
            "journalctl", ["-D", directory.sub("log"), "-o", "json", "--no-pager", "SYSLOG_IDENTIFIER=autosaved"])
        return output.stdout.split(separator: "\n").compactMap { try? JSONValue(parsing: String($0)) }
    }

    /// Waits (up to 20 s) for an entry `predicate` accepts, and returns it.
    func waitForEntry(
        _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ predicate: (JSONValue) -> Bool
    ) async throws -> JSONValue? {
        try await waitFor(what, sourceLocation: sourceLocation) { $0.first(where: predicate) }
    }

    /// Waits (up to 20 s) until `find` makes something of all the entries (in the order
    /// journald holds them), and returns it.
    func waitFor<Found>(
        _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ find: ([JSONValue]) -> Found?
    ) async throws -> Found? {
        let deadline = ContinuousClock.now + .seconds(20)
        var seen: [JSONValue] = []
        while ContinuousClock.now < deadline {
            seen = try entries()
            if let entry = find(seen) { return entry }
            try await Task.sleep(for: .milliseconds(100))
        }
        let messages = seen.map { $0["MESSAGE"]?.stringValue ?? "?" }.joined(separator: "\n")
        Issue.record(
            Comment(rawValue: "no journal entry \(what); the journal holds:\n\(messages)"),
            sourceLocation: sourceLocation)
        return nil
    }

    deinit {
        process.signal(SIGTERM)
        process.process.waitUntilExit()
    }
}

/// Everything the daemon sends to systemd's socket, read as it comes by a thread of its
/// own: a queue left full (`net.unix.max_dgram_qlen`, 10) blocks the daemon's `sd_notify`,
/// which a real systemd never lets happen. ``waitFor(_:since:_:)`` looks at what came.
final class SystemdNotices: @unchecked Sendable {
    // @unchecked: the receiver is read by the thread only; the messages are under a lock.
    private let receiver: NotifyReceiver
    private let messages = Lock<[[String: String]]>([])
    private let stopped = Lock(false)

    init(_ receiver: NotifyReceiver) {
        self.receiver = receiver
        let thread = Thread { [self] in
            while !self.stopped.withLock({ $0 }) {
                if let message = self.receiver.receive(timeout: .milliseconds(100)) {
                    self.messages.withLock { $0.append(message) }
                }
            }
        }
        thread.name = "notify-reader"
        thread.start()
    }

    /// Whether any `STATUS=` so far contained `text`.
    func messages(containing text: String) -> Bool {
        messages.withLock { $0.contains { $0["STATUS"]?.contains(text) == true } }
    }

    /// How many messages came so far (a mark for ``waitFor(_:since:_:)``).
    var count: Int { messages.withLock { $0.count } }

    func stop() { stopped.withLock { $0 = true } }

    /// The first `STATUS=` text from the `since`-th message on that `predicate` accepts,
    /// waiting up to 30 s; a test issue and `nil` if none comes.
    func waitFor(
        _ what: String, since: Int = 0, sourceLocation: SourceLocation = #_sourceLocation,
        _ predicate: (String) -> Bool
    ) async -> String? {
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let found = messages.withLock { all in
                all.dropFirst(since).compactMap { $0["STATUS"] }.first(where: predicate)
            }
            if let found { return found }
            if ContinuousClock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        let seen = messages.withLock { $0.dropFirst(since).compactMap { $0["STATUS"] } }
        Issue.record(
            Comment(rawValue: "no STATUS= \(what); came: \(seen.suffix(5))"), sourceLocation: sourceLocation)
        return nil
    }
}

/// Faults libfiu cannot make, and faults the machine makes for real: short counts and
/// EINTR from `read`/`write` on files (an LD_PRELOAD interposer, `Tests/Tools/shortio.c`),
/// EACCES for an unprivileged daemon, the store root removed while running, and the
/// inotify watch limit reached (in a user namespace of the daemon's own). Each checks
/// what was acknowledged is on disk, the cause in `status`, in `STATUS=` and in the
/// journal (a private journald), and recovery without a restart once the cause is gone.
@Suite("Injected faults, more: short I/O and EINTR, EACCES, the root removed, the watch limit", .serialized)
struct FaultInjectionMoreTests {
    /// Text that does not repeat (a lost or doubled chunk shows): numbered lines of varying length.
    static func text(_ seed: Int, lines: Int) -> String {
        var state = UInt64(truncatingIfNeeded: seed) &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        var out = ""
        for line in 0..<lines {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let width = Int(state >> 58)
            let letter = Character(UnicodeScalar(UInt8(97 + Int(state >> 59) % 26)))
            out += "\(seed).\(line) \(String(repeating: letter, count: width))\n"
        }
        return out
    }

    /// Whether the file at `path` holds exactly `text`'s bytes.
    static func holds(_ path: String, _ text: String) -> Bool {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) } == Array(text.utf8)
    }

    /// CPU time (user + system) the process has used, in seconds.
    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14 and stime 15.
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The inotify watches the process holds (`inotify wd:` lines of its descriptors' fdinfo).
    static func inotifyWatches(_ pid: Int32) -> Int {
        let fdinfo = "/proc/\(pid)/fdinfo"
        var count = 0
        for fd in (try? FileManager.default.contentsOfDirectory(atPath: fdinfo)) ?? [] {
            guard let text = try? String(contentsOfFile: fdinfo + "/" + fd, encoding: .utf8) else { continue }
            count += text.split(separator: "\n").filter { $0.hasPrefix("inotify wd:") }.count
        }
        return count
    }

    static func waitUntil(
        _ what: String, within timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: () throws -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
    }

    /// SIGTERM, and exit status 0 required; the daemon's last lines otherwise.
    static func stop(_ rig: FaultRig, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let pid = rig.pid
        rig.process.signal(SIGTERM)
        let deadline = ContinuousClock.now + .seconds(60)
        while rig.process.process.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let status = rig.process.process.isRunning ? -1 : rig.process.process.terminationStatus
        if status != 0 {
            var threads = ""
            for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? [] {
                let wchan = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/wchan", encoding: .utf8)) ?? "?"
                let comm = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)) ?? "?"
                threads += "\(task) \(comm.dropLast()) \(wchan)\n"
            }
            let lines = rig.process.output.suffix(30).joined(separator: "\n")
            Issue.record(
                Comment(rawValue: "exit status \(status); threads:\n\(threads)last lines:\n\(lines)"),
                sourceLocation: sourceLocation)
        }
    }

    // MARK: Short counts and EINTR

    /// `Tests/Tools/shortio.c`, compiled for this run.
    static func buildInterposer(in directory: TemporaryDirectory) throws -> String {
        let source = ShippedConfigurationTests.repository + "/Tests/Tools/shortio.c"
        let library = directory.sub("shortio.so")
        let result = try Machine.run(
            "cc", ["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", library, source, "-ldl"])
        guard result.status == 0 else { throw Failure("cc: \(result)") }
        return library
    }

    @Test(
        "Short counts and EINTR from read/write/pread/pwrite on files: every byte saved, read, journalled and replayed exactly",
        .enabled(if: NamespacedJournald.isAvailable && Machine.has("cc"), "needs root, journald, unshare and cc"))
    func shortAndInterrupted() async throws {
        let journald = try await NamespacedJournald()
        let scratch = TemporaryDirectory("shortio")
        let library = try Self.buildInterposer(in: scratch)
        let report = scratch.sub("counts")
        // Printed with the counts; AUTOSAVED_SHORTIO_SEED replays one (the draws are shared by
        // the daemon's threads, so the same seed gives the same faults only in the same order).
        let seed =
            ProcessInfo.processInfo.environment["AUTOSAVED_SHORTIO_SEED"].flatMap(Int.init)
            ?? Int.random(in: 1...1_000_000)
        let rig = try await FaultRig(
            underFaultInjection: false, notifying: true, journal: "always", journald: journald,
            extraEnvironment: [
                "LD_PRELOAD": library, "SHORTIO_SHORT": "0.3", "SHORTIO_EINTR": "0.2", "SHORTIO_SEED": "\(seed)",
                "SHORTIO_REPORT": report,
            ], start: false)
        // A file already there, read at start-up.
        let outside = Self.text(1, lines: 6000)
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: true)
        try Disk.write(outside, to: rig.root + "/outside.txt")
        try await rig.start()
        let notices = SystemdNotices(try #require(rig.notify))
        defer { notices.stop() }
        let client = try rig.client()
        #expect(try client.call(["cmd": "get", "doc": "outside.txt"])["text"]?.stringValue == outside)

        // Saves of three documents, up to ≈ 600 KB, each compared byte for byte.
        var expected: [String: String] = [:]
        for round in 0..<9 {
            let doc = ["a.txt", "dir/b.md", "big.txt"][round % 3]
            let text = Self.text(100 + round, lines: round % 3 == 2 ? 15_000 : 40 + 70 * round)
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
            let saved = try client.call(["cmd": "save", "doc": .string(doc), "wait": true])
            #expect(saved["ok"] == true, "\(saved)")
            #expect(Self.holds(rig.root + "/" + doc, text), "\(doc) after round \(round)")
            expected[doc] = text
        }
        // Appends, and a package's members.
        var log = "log\n"
        #expect(try client.call(["cmd": "set", "doc": "log.txt", "text": .string(log)])["ok"] == true)
        for line in 0..<40 {
            let piece = Self.text(500 + line, lines: 3)
            log += piece
            #expect(try client.call(["cmd": "append", "doc": "log.txt", "text": .string(piece)])["ok"] == true)
        }
        #expect(try client.call(["cmd": "save", "doc": "log.txt", "wait": true])["ok"] == true)
        #expect(Self.holds(rig.root + "/log.txt", log))
        #expect(try client.call(["cmd": "create", "doc": "book.package"])["ok"] == true)
        let members = ["a.txt": Self.text(700, lines: 900), "ch/b.txt": Self.text(701, lines: 2500)]
        for (member, text) in members {
            _ = try client.call([
                "cmd": "put-member", "doc": "book.package", "member": .string(member), "text": .string(text),
            ])
        }
        #expect(try client.call(["cmd": "save", "doc": "book.package", "wait": true])["ok"] == true)
        for (member, text) in members {
            #expect(Self.holds(rig.root + "/book.package/" + member, text), "\(member)")
        }

        // Another program rewrites a file: the watcher's read and the reload see every byte.
        let rewritten = Self.text(2, lines: 9000)
        try Disk.write(rewritten, to: rig.root + "/outside.txt")
        _ = try client.call(["cmd": "sync"])
        try await Self.waitUntil("the rewritten file read again") {
            try client.call(["cmd": "get", "doc": "outside.txt"])["text"]?.stringValue == rewritten
        }

        // An edit only the journal holds (an hour's quiet period), the daemon killed and
        // started again: replayed through short reads, then saved through short writes.
        let unsaved = Self.text(3, lines: 3000)
        #expect(try client.call(["cmd": "set", "doc": "unsaved.txt", "text": .string(unsaved)])["ok"] == true)
        let status = try rig.status()
        #expect(status["failed"]?.intValue == 0 && status["last_failure"] == .null, "\(status)")
        let firstPID = rig.pid
        rig.process.signal(SIGKILL)
        _ = await rig.process.exitStatus()
        try await rig.start()
        #expect(rig.pid != firstPID)
        let again = try rig.client()
        #expect(try again.call(["cmd": "get", "doc": "unsaved.txt"])["text"]?.stringValue == unsaved)
        #expect(try again.call(["cmd": "save", "doc": "unsaved.txt", "wait": true])["ok"] == true)
        #expect(Self.holds(rig.root + "/unsaved.txt", unsaved))
        for (doc, text) in expected {
            #expect(try again.call(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue == text, "\(doc)")
        }

        // No failure anywhere: not in status, not in STATUS=, not in the journal; the
        // journal's saved entries count every byte.
        let after = try rig.status()
        #expect(after["failed"]?.intValue == 0 && after["last_failure"] == .null, "\(after)")
        let settled = notices.count
        _ = try again.call(["cmd": "save-all", "wait": true])
        _ = await notices.waitFor("with nothing unsaved and no failure", since: settled) {
            $0.contains(" 0 unsaved") && !$0.contains("fail")
        }
        #expect(!notices.messages(containing: "fail"), "no STATUS= ever named a failure")
        let big = try await journald.waitForEntry("saved unsaved.txt") {
            $0["MESSAGE_ID"]?.stringValue == MessageID.documentSaved && $0["DOCUMENT"]?.stringValue == "unsaved.txt"
        }
        #expect(big?["BYTES_WRITTEN"]?.stringValue == "\(unsaved.utf8.count)")
        let entries = try journald.entries()
        #expect(!entries.contains { $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed })
        let savedBig = entries.filter {
            $0["MESSAGE_ID"]?.stringValue == MessageID.documentSaved && $0["DOCUMENT"]?.stringValue == "big.txt"
        }
        #expect(savedBig.count == 3, "\(savedBig.count) saves of big.txt logged")
        #expect(savedBig.last?["BYTES_WRITTEN"]?.stringValue == "\(expected["big.txt"]!.utf8.count)")
        try await Self.stop(rig)
        #expect(Disk.temporaries(under: rig.root).isEmpty)

        // The faults were there, of every kind (each process wrote its own counts).
        var numbers: [String: Int] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: scratch.path) where name.hasPrefix("counts.") {
            let counts = try String(contentsOfFile: scratch.sub(name), encoding: .utf8)
            for pair in counts.split(whereSeparator: { $0 == " " || $0 == "\n" }) {
                let parts = pair.split(separator: "=")
                if parts.count == 2 { numbers[String(parts[0]), default: 0] += Int(parts[1]) ?? 0 }
            }
        }
        let counts = numbers.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        print("short I/O and EINTR (seed \(seed)), both daemons: \(counts)")
        for key in ["write_short", "write_eintr", "read_short", "read_eintr"] {
            #expect((numbers[key] ?? 0) > 0, "\(key) in \(counts)")
        }
    }

    // MARK: EACCES

    @Test(
        "EACCES: the daemon unprivileged over a directory it cannot write: named, the others saved; after chmod, saved",
        .enabled(if: NamespacedJournald.isAvailable && Machine.has("setpriv"), "needs root, journald and setpriv"))
    func unwritableDirectory() async throws {
        let journald = try await NamespacedJournald()
        let nobody: UInt32 = 65534
        let rig = try await FaultRig(
            underFaultInjection: false, notifying: true, settings: "[Watch]\nPollInterval=200ms\n",
            prefix: ["/usr/bin/setpriv", "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups"],
            journald: journald, start: false)
        try FileManager.default.createDirectory(atPath: rig.root + "/locked", withIntermediateDirectories: true)
        // Everything the daemon uses belongs to nobody; systemd's socket takes its datagrams.
        #expect(chmod(rig.directory.path, 0o755) == 0)
        #expect(try Machine.run("chown", ["-R", "\(nobody):\(nobody)", rig.directory.path]).status == 0)
        if let notify = rig.notify { #expect(chmod(notify.path, 0o777) == 0) }
        try await rig.start()
        let notices = SystemdNotices(try #require(rig.notify))
        defer { notices.stop() }
        let uid = try String(contentsOfFile: "/proc/\(rig.pid)/status", encoding: .utf8)
            .split(separator: "\n").first { $0.hasPrefix("Uid:") }
        #expect(
            uid?.split(separator: "\t").dropFirst().allSatisfy { $0 == "65534" } == true, "\(String(describing: uid))")

        let old = Self.text(10, lines: 500)
        let client = try rig.client()
        for (doc, text) in ["locked/old.txt": old, "free.txt": "free 1\n"] {
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
            #expect(try client.call(["cmd": "save", "doc": .string(doc), "wait": true])["ok"] == true)
        }
        #expect(chmod(rig.root + "/locked", 0o555) == 0)
        let edits = [
            "locked/old.txt": Self.text(11, lines: 700), "locked/new.txt": "new\n", "locked/sub/deep.txt": "deep\n",
        ]
        let operations = [
            "locked/old.txt": "create temporary file", "locked/new.txt": "create temporary file",
            "locked/sub/deep.txt": "mkdir",
        ]
        for (doc, text) in edits.sorted(by: { $0.key < $1.key }) {
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
            let failed = try client.call(["cmd": "save", "doc": .string(doc), "wait": true])
            #expect(failed["error"]?["code"]?.stringValue == "save-failed", "\(doc): \(failed)")
            let message = failed["error"]?["message"]?.stringValue ?? ""
            #expect(message.contains("EACCES") && message.contains(operations[doc]!), "\(doc): \(message)")
        }
        // The other directories are not affected.
        #expect(try client.call(["cmd": "set", "doc": "free.txt", "text": "free 2\n"])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "free.txt", "wait": true])["ok"] == true)
        #expect(Self.holds(rig.root + "/free.txt", "free 2\n"))
        // Nothing lost: the old file whole, no new file, no temporary, the edits in memory.
        #expect(Self.holds(rig.root + "/locked/old.txt", old))
        #expect(try Disk.names(in: rig.root + "/locked") == ["old.txt"])
        for (doc, text) in edits {
            #expect(try client.call(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue == text, "\(doc)")
        }
        // The cause, in status, STATUS= and the journal.
        let status = try rig.status()
        #expect(status["failed"]?.intValue == 3, "\(status)")
        #expect(status["last_failure"]?["errno"]?.stringValue == "EACCES", "\(status)")
        let failing = await notices.waitFor("with 3 failing") { $0.contains("3 failing") }
        #expect(failing?.contains("failed with EACCES") == true, "\(String(describing: failing))")
        for (doc, operation) in operations {
            let entry = try await journald.waitForEntry("save-failed for \(doc)") {
                $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed && $0["DOCUMENT"]?.stringValue == doc
            }
            #expect(entry?["ERRNO"]?.stringValue == "\(EACCES)" && entry?["ERRNO_NAME"]?.stringValue == "EACCES")
            #expect(entry?["OPERATION"]?.stringValue == operation, "\(String(describing: entry))")
            #expect(entry?["_UID"]?.stringValue == "65534")
        }

        // The operator fixes the mode: the retries save everything, no restart, no request.
        let pid = rig.pid
        let fixed = notices.count
        #expect(chmod(rig.root + "/locked", 0o755) == 0)
        try await rig.waitUntilSaved()
        #expect(rig.pid == pid && rig.process.process.isRunning)
        for (doc, text) in edits { #expect(Self.holds(rig.root + "/" + doc, text), "\(doc)") }
        #expect(Disk.temporaries(under: rig.root).isEmpty)
        _ = await notices.waitFor("without a failure", since: fixed) { !$0.contains("fail") }
        try await Self.stop(rig)
    }

    // MARK: The root removed

    @Test(
        "The store root removed (rm -rf) while running: no crash, no busy loop, edits kept and named; saved back once it is made again",
        .enabled(if: NamespacedJournald.isAvailable, "needs root, journald and unshare"),
        arguments: ["recreate-unsaved", "recreate"])
    func rootRemoved(whenRemoved: String) async throws {
        let journald = try await NamespacedJournald()
        let rig = try await FaultRig(
            underFaultInjection: false, notifying: true,
            settings: "[Watch]\nPollInterval=200ms\n[Conflicts]\nWhenRemoved=\(whenRemoved)\n", journald: journald)
        let notices = SystemdNotices(try #require(rig.notify))
        defer { notices.stop() }
        let client = try rig.client()
        let clean = ["a.txt": Self.text(20, lines: 300), "dir/b.txt": Self.text(21, lines: 200)]
        let dirty = ["c.txt": Self.text(22, lines: 400), "dir/d.txt": Self.text(23, lines: 100)]
        for (doc, text) in clean {
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
            #expect(try client.call(["cmd": "save", "doc": .string(doc), "wait": true])["ok"] == true)
        }
        for (doc, text) in dirty {
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
        }
        try await Self.waitUntil("the root and dir watched") { Self.inotifyWatches(rig.pid) == 2 }

        // rm -rf with the daemon stopped (SIGSTOP) meanwhile, as a fast rm on a busy machine:
        // running, it could answer a file's removal by writing it again (the WhenRemoved=
        // policy) before rm reaches the directory, and rm would fail with ENOTEMPTY. The
        // events wait in inotify's queue.
        rig.process.signal(SIGSTOP)
        let removal = try Machine.run("rm", ["-rf", rig.root])
        rig.process.signal(SIGCONT)
        #expect(removal.status == 0 && !FileManager.default.fileExists(atPath: rig.root), "rm -rf: \(removal)")
        try await Self.waitUntil("status says the root is gone") { try rig.status()["root_gone_since"] != .null }
        // The watcher holds no watch on the removed directories (IN_DELETE_SELF, then IN_IGNORED).
        #expect(Self.inotifyWatches(rig.pid) == 0)
        #expect(try rig.status()["watch"]?["watched_directories"]?.intValue == 0)

        let events = try rig.client()
        _ = try events.call(["cmd": "subscribe", "events": ["save-failed", "saved"]])
        for doc in dirty.keys {
            let failed = try client.call(["cmd": "save", "doc": .string(doc), "wait": true])
            #expect(failed["error"]?["code"]?.stringValue == "save-failed", "\(failed)")
            #expect(failed["error"]?["message"]?.stringValue?.contains("the store root is gone") == true, "\(failed)")
        }
        let status = try rig.status()
        #expect(status["last_failure"]?["errno"]?.stringValue == "ENOENT", "\(status)")
        #expect(status["last_failure"]?["path"]?.stringValue == rig.root, "\(status)")
        for (doc, text) in dirty {
            #expect(try client.call(["cmd": "get", "doc": .string(doc)])["text"]?.stringValue == text, "\(doc)")
        }
        // Two seconds without the root: it is not made again, the daemon does not spin,
        // and the retries back off.
        let cpuBefore = Self.cpuSeconds(rig.pid)
        let quietEnd = ContinuousClock.now + .seconds(2)
        var failures = 0
        while ContinuousClock.now < quietEnd {
            if let event = try? events.receive(), event["event"]?.stringValue == "save-failed" { failures += 1 }
            if ContinuousClock.now >= quietEnd { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        let cpu = Self.cpuSeconds(rig.pid) - cpuBefore
        print(
            "root removed (\(whenRemoved)): over 2 s without it: \(String(format: "%.2f", cpu)) s of CPU, \(failures) save attempts"
        )
        #expect(cpu < 0.5, "CPU time while the root is gone: \(cpu) s")
        #expect(failures < 40, "\(failures) save attempts in 2 s")
        #expect(!FileManager.default.fileExists(atPath: rig.root), "the daemon does not make the root")
        #expect(rig.process.process.isRunning)
        _ = await notices.waitFor("naming the missing root") { $0.contains("the store root is gone") }
        let logged = try await journald.waitForEntry("the root is gone") {
            $0["MESSAGE_ID"]?.stringValue == MessageID.externalChange
                && ($0["MESSAGE"]?.stringValue ?? "").contains("is gone")
        }
        #expect(logged?["PRIORITY"]?.stringValue == "3" && logged?["PATH"]?.stringValue == rig.root)
        let failedEntry = try await journald.waitForEntry("a save failed for the root") {
            $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed && $0["PATH"]?.stringValue == rig.root
        }
        #expect(failedEntry?["ERRNO_NAME"]?.stringValue == "ENOENT")

        // The operator makes the directory again: everything unsaved is saved, without a request.
        let pid = rig.pid
        let back = notices.count
        try FileManager.default.createDirectory(atPath: rig.root, withIntermediateDirectories: false)
        try await rig.waitUntilSaved()
        #expect(rig.pid == pid)
        for (doc, text) in dirty { #expect(Self.holds(rig.root + "/" + doc, text), "\(doc)") }
        for (doc, text) in clean {
            if whenRemoved == "recreate" {
                #expect(Self.holds(rig.root + "/" + doc, text), "\(doc) written back")
            } else {
                // Removed with the root and without unsaved edits: closed, as any removed file.
                #expect(!FileManager.default.fileExists(atPath: rig.root + "/" + doc), "\(doc)")
                #expect(
                    try client.call(["cmd": "get", "doc": .string(doc)])["error"]?["code"]?.stringValue == "not-found")
            }
        }
        #expect(try rig.status()["root_gone_since"] == .null)
        _ = await notices.waitFor("without the root or a failure", since: back) {
            !$0.contains("gone") && !$0.contains("fail")
        }
        _ = try await journald.waitForEntry("the root is back") {
            ($0["MESSAGE"]?.stringValue ?? "").contains("is back") && $0["PRIORITY"]?.stringValue == "5"
        }
        // The new root is watched: another program's file in it is opened.
        try await Self.waitUntil("the new root and dir watched") { Self.inotifyWatches(rig.pid) == 2 }
        try Disk.write("from outside\n", to: rig.root + "/dir/e.txt")
        _ = try client.call(["cmd": "sync"])
        #expect(try client.call(["cmd": "get", "doc": "dir/e.txt"])["text"]?.stringValue == "from outside\n")
        // Requests are checked beneath the new root, not the removed one: a link in it is
        // refused, and a file there that no document holds yet is read, not taken for none.
        try FileManager.default.createSymbolicLink(atPath: rig.root + "/evil", withDestinationPath: "/etc")
        let linked = try client.call(["cmd": "set", "doc": "evil/x.txt", "text": "no"])
        #expect(linked["error"]?["code"]?.stringValue == "invalid-path", "\(linked)")
        #expect(!FileManager.default.fileExists(atPath: "/etc/x.txt"))
        // Put in place whole (written beside the root, renamed in): a file written in place
        // may be read by the watcher between its creation and its write, as any program's.
        try Disk.write("already here\n", to: rig.directory.sub("here.txt"))
        try FileManager.default.moveItem(atPath: rig.directory.sub("here.txt"), toPath: rig.root + "/here.txt")
        #expect(try client.call(["cmd": "append", "doc": "here.txt", "text": "and more\n"])["ok"] == true)
        #expect(try client.call(["cmd": "get", "doc": "here.txt"])["text"]?.stringValue == "already here\nand more\n")
        #expect(Disk.temporaries(under: rig.root).isEmpty)
        try await Self.stop(rig)
    }

    // MARK: The inotify watch limit

    @Test(
        "The inotify watch limit (4 in the daemon's own user namespace): the unwatched directories named and polled; watched once the limit rises",
        .enabled(if: NamespacedJournald.isAvailable, "needs root, journald and unshare"))
    func watchLimit() async throws {
        let journald = try await NamespacedJournald()
        // fs.inotify.max_user_watches is per user namespace (ucounts): the daemon's own,
        // set to 4, leaves the machine's limit and everyone else's watches alone.
        let rig = try await FaultRig(
            underFaultInjection: false, notifying: true, settings: "[Watch]\nPollInterval=200ms\n",
            prefix: [
                "/usr/bin/unshare", "-U", "-r", "--", "/bin/sh", "-c",
                "echo 4 > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\"",
            ], journald: journald, start: false)
        let directories = (0..<10).map { "d\($0)" }
        for directory in directories {
            try FileManager.default.createDirectory(
                atPath: rig.root + "/" + directory, withIntermediateDirectories: true)
            try Disk.write("\(directory) 1\n", to: rig.root + "/\(directory)/f.txt")
        }
        let machineLimit = try String(contentsOfFile: "/proc/sys/fs/inotify/max_user_watches", encoding: .utf8)
        try await rig.start()
        let notices = SystemdNotices(try #require(rig.notify))
        defer { notices.stop() }
        let client = try rig.client()
        #expect(Self.inotifyWatches(rig.pid) == 4)
        let watch = try rig.status()["watch"]
        let unwatched = watch?["unwatched"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(
            watch?["watched_directories"]?.intValue == 4 && watch?["polled_directories"]?.intValue == 7,
            "\(String(describing: watch))")
        #expect(unwatched.count == 7 && Set(unwatched).isSubset(of: Set(directories)), "\(unwatched)")
        #expect(try String(contentsOfFile: "/proc/sys/fs/inotify/max_user_watches", encoding: .utf8) == machineLimit)
        // Named in the log (stderr and the journal) and in STATUS=.
        let entry = try await journald.waitForEntry("the watch limit") {
            $0["MESSAGE_ID"]?.stringValue == MessageID.watchLimit
        }
        #expect(entry?["PRIORITY"]?.stringValue == "3")
        let message = entry?["MESSAGE"]?.stringValue ?? ""
        for directory in unwatched { #expect(message.contains(rig.root + "/" + directory), "\(message)") }
        #expect(message.contains("7 directories"), "\(message)")
        _ = await notices.waitFor("naming the polled directories") {
            $0.contains("7 directories polled, past the inotify watch limit")
        }

        // Changes in unwatched directories are seen: by the poll alone, and at once by `sync`.
        let first = unwatched[0]
        try Disk.write("\(first) 2\n", to: rig.root + "/\(first)/f.txt")
        try await Self.waitUntil("the poll sees \(first)/f.txt") {
            try client.call(["cmd": "get", "doc": .string("\(first)/f.txt")])["text"]?.stringValue == "\(first) 2\n"
        }
        let second = unwatched[1]
        try Disk.write("\(second) 2\n", to: rig.root + "/\(second)/f.txt")
        try FileManager.default.createDirectory(atPath: rig.root + "/\(second)/new", withIntermediateDirectories: false)
        try Disk.write("new\n", to: rig.root + "/\(second)/new/g.txt")
        _ = try client.call(["cmd": "sync"])
        #expect(
            try client.call(["cmd": "get", "doc": .string("\(second)/f.txt")])["text"]?.stringValue == "\(second) 2\n")
        #expect(try client.call(["cmd": "get", "doc": .string("\(second)/new/g.txt")])["text"]?.stringValue == "new\n")

        // Watches become available (the namespace's limit raised): every directory is watched, no restart.
        let raised = notices.count
        let raise = try Machine.run(
            "nsenter",
            ["-t", "\(rig.pid)", "-U", "--", "/bin/sh", "-c", "echo 1000 > /proc/sys/user/max_inotify_watches"])
        #expect(raise.status == 0, "\(raise)")
        try await Self.waitUntil("every directory watched") {
            try rig.status()["watch"]?["unwatched"]?.arrayValue?.isEmpty == true
        }
        let now = try rig.status()["watch"]
        #expect(
            now?["watched_directories"]?.intValue == 12 && now?["polled_directories"]?.intValue == 0,
            "\(String(describing: now))")
        #expect(Self.inotifyWatches(rig.pid) == 12)
        let again = try await journald.waitForEntry("watched again") {
            ($0["MESSAGE"]?.stringValue ?? "").contains("inotify watches are available again")
                && $0["PRIORITY"]?.stringValue == "5"
        }
        #expect(again?["MESSAGE"]?.stringValue?.contains("every directory") == true)
        _ = await notices.waitFor("without polled directories", since: raised) { !$0.contains("polled") }
        try Disk.write("\(first) 3\n", to: rig.root + "/\(first)/f.txt")
        try await Self.waitUntil("inotify sees \(first)/f.txt") {
            try client.call(["cmd": "get", "doc": .string("\(first)/f.txt")])["text"]?.stringValue == "\(first) 3\n"
        }
        try await Self.stop(rig)
    }
}
