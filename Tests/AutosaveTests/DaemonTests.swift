import Autosave
import Foundation
@preconcurrency import Glibc
import Logging
import Posix
import TestSupport
import Testing

/// A running daemon process (the built `autosaved`, or `AutosaveProbe`) whose output
/// lines can be waited for.
final class DaemonProcess: Sendable {
    final class Lines: Sendable {
        let value = Lock<[String]>([])
    }

    let process: Process
    private let lines = Lines()
    private let arrivals: AsyncStream<Void>.Continuation
    private let arrived: AsyncStream<Void>

    init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws {
        try Machine.checkDescriptors()
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        (arrived, arrivals) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        // A thread per pipe with blocking reads, not `readabilityHandler`: Foundation's
        // dispatch source for it can outlive the descriptor, and once the number is reused
        // (this process opens and closes many), libdispatch's event loop crashes on it.
        for pipe in [out, err] {
            let handle = pipe.fileHandleForReading
            let reader = Thread { [lines, arrivals] in
                var pending = Data()
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty {
                        // Closed here, not left to the handle's deinit: see `Machine.readToEnd`.
                        try? handle.close()
                        arrivals.yield()
                        return
                    }
                    pending.append(chunk)
                    var found: [String] = []
                    while let newline = pending.firstIndex(of: 10) {
                        found.append(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                        pending.removeSubrange(pending.startIndex...newline)
                    }
                    lines.value.withLock { $0 += found }
                    arrivals.yield()
                }
            }
            reader.name = "daemon-output"
            reader.start()
        }
        try process.run()
    }

    var output: [String] { lines.value.withLock { $0 } }

    /// Waits for an output line containing `text`; a test failure after `timeout`.
    @discardableResult
    func waitForLine(
        containing text: String, within timeout: Duration = .seconds(60),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> String? {
        let deadline = ContinuousClock.now + timeout
        var iterator = arrived.makeAsyncIterator()
        while true {
            if let line = output.first(where: { $0.contains(text) }) { return line }
            if ContinuousClock.now >= deadline
                || (!process.isRunning && output.allSatisfy { !$0.contains(text) } && ContinuousClock.now >= deadline)
            {
                break
            }
            let waiter = Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                arrivals.yield()
            }
            _ = await iterator.next()
            waiter.cancel()
        }
        Issue.record(
            "no line containing '\(text)' within \(timeout); output:\n\(output.joined(separator: "\n"))\n\(state)",
            sourceLocation: sourceLocation)
        return nil
    }

    /// What the process is doing, for a failure's message: whether it runs, and each of its
    /// threads' name, scheduler state and the kernel function it waits in (`wchan`), or how
    /// it ended.
    var state: String {
        guard process.isRunning else {
            return
                "the process ended: \(process.terminationReason == .exit ? "exit" : "signal") \(process.terminationStatus)"
        }
        let pid = process.processIdentifier
        let command =
            (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8))?
            .replacingOccurrences(of: "\0", with: " ") ?? "?"
        var text = "the process \(pid) runs: \(command)"
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for task in tasks.sorted() {
            func read(_ name: String) -> String {
                ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/\(name)", encoding: .utf8)) ?? "?")
                    .trimmingCharacters(in: .whitespacesAndNewlines)
            }
            let stat = read("stat")
            let state = stat.split(separator: ")").last?.split(separator: " ").first.map(String.init) ?? "?"
            text += "\n  thread \(task) \(read("comm")): state \(state), waiting in \(read("wchan"))"
        }
        return text
    }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for the process to exit and returns its status.
    func exitStatus() async -> Int32 {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.process.waitUntilExit()
                continuation.resume(returning: self.process.terminationStatus)
            }
        }
    }
}

@Suite("The test harness's daemon process")
struct DaemonProcessTests {
    @Test("A process that prints nothing is described by its threads' states, and one that ended by how")
    func describesItsState() async throws {
        let sleeper = try DaemonProcess("/bin/sleep", ["30"])
        // Until the child has become /bin/sleep and sleeps (under load that takes a while).
        let deadline = ContinuousClock.now + .seconds(20)
        var running = sleeper.state
        while !running.contains("sleep: state S"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
            running = sleeper.state
        }
        #expect(running.contains("runs: /bin/sleep 30"), "\(running)")
        #expect(running.contains("thread \(sleeper.process.processIdentifier) sleep: state S"), "\(running)")
        sleeper.signal(SIGKILL)
        _ = await sleeper.exitStatus()
        #expect(sleeper.state == "the process ended: signal 9", "\(sleeper.state)")
    }
}

@Suite("The autosaved daemon", .serialized)
struct DaemonTests {
    let directory = TemporaryDirectory("daemon")
    let daemon = Machine.product("autosaved")
    let probe = Machine.product("AutosaveProbe")

    func config(_ body: String) throws -> String {
        let path = directory.sub("autosaved.conf")
        // A private socket: the default one may belong to a daemon running on this machine.
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Control]\nSocket=\(directory.sub("control.sock"))\n" + body,
            to: path)
        return path
    }

    @Test(
        "Bad configuration files: a message with file and line, exit 78, nothing touched",
        arguments: [
            ("[Autosave]\nQuietPeriod=never\n", "autosaved.conf:2: QuietPeriod=never: 'never' is not a time span"),
            (
                "[Autosave]\nMaxConcurrentSaves=lots\n",
                "autosaved.conf:2: MaxConcurrentSaves=lots: expected a whole number"
            ),
            ("[Autosave]\nQuietPeriode=2s\n", "autosaved.conf:2: unknown key QuietPeriode= in section [Autosave]"),
            ("[Stroe]\nRoot=/x\n", "autosaved.conf:1: unknown section [Stroe]"),
            ("Root=/x\n", "autosaved.conf:1: Root= is outside any section"),
            ("[Autosave]\nthis is not a setting\n", "autosaved.conf:2: expected Key=value"),
            ("[Log]\nLevel=loud\n", "autosaved.conf:2: Level=loud: expected one of"),
        ])
    func badConfiguration(text: String, message: String) throws {
        let path = directory.sub("autosaved.conf")
        try Disk.write(text, to: path)
        let before = try Disk.names(in: directory.path)
        let result = try Machine.run(daemon, ["--config", path])
        #expect(result.status == 78)
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(try Disk.names(in: directory.path) == before, "nothing else was created")
    }

    @Test("A bad drop-in is reported with its own file and line")
    func badDropIn() throws {
        let path = try config("")
        try FileManager.default.createDirectory(atPath: path + ".d", withIntermediateDirectories: false)
        try Disk.write("\n[Autosave]\nMaxDelay=1 fortnight\n", to: path + ".d/50-local.conf")
        let result = try Machine.run(daemon, ["--config", path])
        #expect(result.status == 78)
        #expect(
            result.stderr.contains(
                "autosaved.conf.d/50-local.conf:3: MaxDelay=1 fortnight: unknown time unit 'fortnight'"))
    }

    @Test("A missing --config file, and usage errors")
    func usage() throws {
        let missing = try Machine.run(daemon, ["--config", directory.sub("absent.conf")])
        #expect(missing.status == 78)
        #expect(missing.stderr.contains("absent.conf: cannot be read"))
        let unknown = try Machine.run(daemon, ["--frobnicate"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("unknown argument '--frobnicate'"))
        let help = try Machine.run(daemon, ["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("USAGE: autosaved"))
    }

    @Test("--check-config prints the effective configuration and touches nothing")
    func checkConfig() throws {
        let path = try config("[Autosave]\nQuietPeriod=750ms\n")
        let result = try Machine.run(daemon, ["--config", path, "--check-config"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("QuietPeriod=750ms"))
        #expect(result.stdout.contains("Root=\(directory.sub("root"))"))
        #expect(result.stdout.contains("MaxDelay=30s"))
        #expect(!FileManager.default.fileExists(atPath: directory.sub("root")))
    }

    @Test(
        "A relative Root= (the embedded default's ./autosave-data) is the directory under the working directory: its files open, read, save, and the journal is beside it"
    )
    func relativeRoot() async throws {
        let work = directory.sub("work")
        try FileManager.default.createDirectory(atPath: work + "/autosave-data", withIntermediateDirectories: true)
        try Disk.write("hello\n", to: work + "/autosave-data/x.txt")
        let path = directory.sub("relative.conf")
        let socket = directory.sub("control.sock")
        try Disk.write("[Store]\nRoot=./autosave-data\n[Control]\nSocket=\(socket)\n", to: path)
        let process = try DaemonProcess("/bin/sh", ["-c", "cd '\(work)' && exec '\(daemon)' --config '\(path)'"])
        await process.waitForLine(containing: "started:")
        // Under the working directory, absolute (the daemon's own spelling of it).
        let root = PathName.absolute("autosave-data", cwd: work)
        #expect(process.output.contains { $0.contains("started: 1 document under \(root)") }, "\(process.output)")
        let ctl = Machine.product("autosavectl")
        let get = try Machine.run(ctl, ["--socket", socket, "get", "x.txt"])
        #expect(get.status == 0 && get.stdout == "hello\n", "\(get)")
        let set = try Machine.run(ctl, ["--socket", socket, "set", "x.txt", "--text", "bye\n"])
        #expect(set.status == 0, "\(set)")
        let save = try Machine.run(ctl, ["--socket", socket, "save", "x.txt", "--wait"])
        #expect(save.status == 0, "\(save)")
        #expect(try Disk.bytes(work + "/autosave-data/x.txt") == Data("bye\n".utf8))
        #expect(FileManager.default.fileExists(atPath: work + "/autosave-data.journal"))
        #expect(try Machine.run(ctl, ["--socket", socket, "status", "--json"]).stdout.contains(root))
        process.signal(SIGTERM)
        #expect(await process.exitStatus() == 0)
    }

    @Test(
        "Standard error a pipe whose reader is gone: log lines are lost, never the daemon; edits are saved and SIGTERM exits 0"
    )
    func standardErrorReaderGone() async throws {
        let path = try config("")
        let socket = directory.sub("control.sock")
        let done = directory.sub("reader-gone")
        // The reader takes one byte of the first line and exits; `done` says it has.
        let process = try DaemonProcess(
            "/bin/bash",
            ["-c", "exec \"$0\" --config \"$1\" 2> >(head -c 1 > /dev/null; touch \"$2\")", daemon, path, done])
        try await FaultInjectionMoreTests.waitUntil("the reader of standard error to exit") {
            FileManager.default.fileExists(atPath: done)
        }
        let ctl = Machine.product("autosavectl")
        try await FaultInjectionMoreTests.waitUntil("the daemon to answer") {
            try Machine.run(ctl, ["--socket", socket, "status"]).status == 0
        }
        // Each logs a line (the save's after its reply), which meets the closed pipe.
        for round in 0..<3 {
            #expect(try Machine.run(ctl, ["--socket", socket, "set", "a.txt", "--text", "\(round)\n"]).status == 0)
            #expect(try Machine.run(ctl, ["--socket", socket, "save", "a.txt", "--wait"]).status == 0)
        }
        #expect(try Machine.run(ctl, ["--socket", socket, "status"]).status == 0, "still running")
        #expect(try Disk.bytes(directory.sub("root/a.txt")) == Data("2\n".utf8))
        #expect(try Machine.run(ctl, ["--socket", socket, "set", "b.txt", "--text", "at the stop\n"]).status == 0)
        process.signal(SIGTERM)
        #expect(await process.exitStatus() == 0)
        #expect(try Disk.bytes(directory.sub("root/b.txt")) == Data("at the stop\n".utf8))
    }

    @Test("SIGTERM with 1,000 dirty documents: every one is on disk, complete, before exit 0")
    func sigtermFlushes() async throws {
        let path = try config("[Autosave]\nQuietPeriod=1h\nMaxDelay=1h\n")
        let process = try DaemonProcess(probe, ["dirty", "1000", "--config", path])
        await process.waitForLine(containing: "ready 1000")
        #expect(
            !FileManager.default.fileExists(atPath: directory.sub("root/dirty")), "nothing was saved before the signal")
        process.signal(SIGTERM)
        #expect(await process.exitStatus() == 0)
        for i in 0..<1000 {
            let text = try String(contentsOfFile: directory.sub("root/dirty/doc\(i).txt"), encoding: .utf8)
            #expect(text.hasPrefix("doc \(i) version 1\n") && text.hasSuffix("\nend 1\n"))
        }
        #expect(Disk.temporaries(under: directory.sub("root")).isEmpty)
        #expect(process.output.contains { $0.contains("stopped: 1000 documents saved at shutdown") })
    }

    @Test("SIGHUP reloads the configuration; a bad new file is reported and the old one kept")
    func reload() async throws {
        let path = try config("[Log]\nLevel=info\n")
        let process = try DaemonProcess(daemon, ["--config", path])
        await process.waitForLine(containing: "started:")
        try Disk.write("[Autosave]\nQuietPeriod=sometime\n", to: path)
        process.signal(SIGHUP)
        await process.waitForLine(
            containing: "reload refused, keeping the running configuration: \(path):2: QuietPeriod=sometime")
        _ = try config("[Autosave]\nQuietPeriod=5s\n")
        process.signal(SIGHUP)
        await process.waitForLine(containing: "configuration reloaded from \(path)")
        process.signal(SIGTERM)
        #expect(await process.exitStatus() == 0)
    }

    @Test("SIGKILL during saves or during start-up recovery never leaves a torn document")
    func killed() async throws {
        let path = try config("[Autosave]\nQuietPeriod=10ms\nMaxDelay=50ms\n")
        let documents = 8
        for round in 0..<25 {
            let saver = try DaemonProcess(probe, ["save-loop", "\(documents)", "--config", path])
            await saver.waitForLine(containing: "ready")
            usleep(UInt32.random(in: 0...20_000))
            saver.signal(SIGKILL)
            _ = await saver.exitStatus()

            // A daemon killed at a random moment of its start-up (recovery, opening).
            let starter = try DaemonProcess(daemon, ["--config", path])
            usleep(UInt32.random(in: 0...15_000))
            starter.signal(SIGKILL)
            _ = await starter.exitStatus()

            for i in 0..<documents {
                let file = directory.sub("root/loop/doc\(i).txt")
                // Every document was saved durably before "ready": a missing one is a lost save.
                guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                    Issue.record("round \(round): \(file) is missing")
                    continue
                }
                let header = text.split(separator: "\n").first ?? ""
                let version = header.split(separator: " ").last.map(String.init) ?? "?"
                #expect(
                    header.hasPrefix("doc \(i) version ") && text.hasSuffix("\nend \(version)\n"),
                    "round \(round): \(file) is torn")
            }
        }
        // A clean start recovers whatever is left; then no temporary remains.
        let final = try DaemonProcess(daemon, ["--config", path])
        await final.waitForLine(containing: "started: \(documents) documents")
        final.signal(SIGTERM)
        #expect(await final.exitStatus() == 0)
        #expect(Disk.temporaries(under: directory.sub("root")).isEmpty)
    }
}
