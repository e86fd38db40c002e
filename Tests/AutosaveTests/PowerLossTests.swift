import Control
import Documents
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// Self-checking contents: each version of a document or member can be told complete
/// from its bytes alone.
enum Versions {
    static func text(_ name: String, _ version: Int) -> String {
        let filler = String(
            repeating: Character(UnicodeScalar(UInt8(97 + version % 26))), count: 300 + (version * 379) % 2500)
        return "\(name) version \(version)\n\(filler)\nend \(version)\n"
    }

    /// The version `contents` holds; `nil` unless it is exactly one complete version of `name`.
    static func version(of contents: String, name: String) -> Int? {
        guard let header = contents.split(separator: "\n", maxSplits: 1).first,
            header.hasPrefix("\(name) version "), let version = Int(header.dropFirst("\(name) version ".count)),
            contents == text(name, version)
        else { return nil }
        return version
    }
}

/// What the daemon acknowledged before the cut: a `save` with `wait: true` answered
/// `ok`, or a `conflict` event naming the copy written.
struct Acknowledged {
    /// Document (or `package/member`) → the highest version acknowledged durable.
    var versions: [String: Int] = [:]
    /// Conflict copies announced, with the version of the document they hold.
    var conflictCopies: [(copy: String, document: String, version: Int)] = []
    /// Documents another program replaced durably, with the version it wrote.
    var external: [String: Int] = [:]
    /// Members whose `remove-member` was acknowledged: the edit journal keeps that edit
    /// even when the save that would have removed the file was cut.
    var removals: Set<String> = []
    var saves = 0
    /// Whether the workload ran to its end (it stops at the first request that fails).
    var completed = false
}

/// One workload the daemon runs on the power-loss mount; it stops at the first failure
/// (after the cut every operation fails with EIO).
enum Workload: String, CaseIterable, CustomStringConvertible {
    /// Regular files saved again and again, in the root and in a new subdirectory.
    case files
    /// A new package's first save (a whole tree renamed into place), then members
    /// updated in place, in a subdirectory too, and one removed.
    case package
    /// A dirty document changed by another program: the edits go to a conflict copy.
    case conflict

    var description: String { rawValue }

    static let documents = ["a.txt", "notes/b.txt", "c.md"]
    static let members = ["m0", "m1", "ch/m2"]

    func run(
        _ client: ControlClient, events: ControlClient, root: String, isCut: () -> Bool, into acks: inout Acknowledged
    ) {
        func save(_ doc: String) -> Bool {
            guard let reply = try? client.call(["cmd": "save", "doc": .string(doc), "wait": true]),
                reply["ok"] == true
            else { return false }
            acks.saves += 1
            return true
        }
        func ok(_ request: JSONValue) -> Bool { (try? client.call(request))?["ok"] == true }

        switch self {
        case .files:
            for step in 1...6 {
                let doc = Self.documents[step % Self.documents.count]
                guard ok(["cmd": "set", "doc": .string(doc), "text": .string(Versions.text(doc, step))]),
                    save(doc)
                else { return }
                acks.versions[doc] = step
            }
            acks.completed = true
        case .package:
            let doc = "book.package"
            guard ok(["cmd": "create", "doc": .string(doc)]) else { return }
            for step in 1...5 {
                let changed = step == 1 ? Self.members : [Self.members[step % Self.members.count]]
                for member in changed {
                    let name = doc + "/" + member
                    guard
                        ok([
                            "cmd": "put-member", "doc": .string(doc), "member": .string(member),
                            "text": .string(Versions.text(name, step)),
                        ])
                    else { return }
                }
                if step == 4 {
                    guard ok(["cmd": "remove-member", "doc": .string(doc), "member": "m1"]) else { return }
                    acks.removals.insert(doc + "/m1")
                }
                guard save(doc) else { return }
                for member in changed { acks.versions[doc + "/" + member] = step }
                if step == 4 { acks.versions[doc + "/m1"] = -1 }
            }
            acks.completed = true
        case .conflict:
            let doc = "c.txt"
            guard ok(["cmd": "set", "doc": .string(doc), "text": .string(Versions.text(doc, 1))]), save(doc) else {
                return
            }
            acks.versions[doc] = 1
            guard ok(["cmd": "set", "doc": .string(doc), "text": .string(Versions.text(doc, 2))]) else { return }
            // Another program saves its own version durably (temp, fsync, rename, directory fsync).
            guard (try? Self.externalSave(Versions.text(doc, 3), to: doc, in: root)) != nil else { return }
            acks.external[doc] = 3
            // The conflict event says the copy is durable; after a cut none comes.
            let deadline = ContinuousClock.now + .seconds(20)
            var announced = false
            while !announced, ContinuousClock.now < deadline, !isCut() {
                var ready = pollfd(fd: events.descriptor, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 100) == 1, let event = try? events.receive() else { continue }
                if event["event"]?.stringValue == "conflict", let copy = event["copy"]?.stringValue {
                    acks.conflictCopies.append((copy, doc, 2))
                    announced = true
                }
            }
            guard announced else { return }
            // The document now holds the other program's version; an edit on it saves as usual.
            guard ok(["cmd": "set", "doc": .string(doc), "text": .string(Versions.text(doc, 4))]), save(doc) else {
                return
            }
            acks.versions[doc] = 4
            acks.completed = true
        }
    }

    /// A save as an editor does it, under a name the daemon does not use for its own.
    static func externalSave(_ text: String, to name: String, in root: String) throws {
        let directory = try FileDescriptor.open(root, options: [.directory])
        defer { try? directory.close() }
        let incoming = name + ".incoming"
        let fd = try FileDescriptor.open(incoming, relativeTo: directory, .writeOnly, options: [.create, .truncate])
        try fd.closeAfter { () throws(Errno) in
            try fd.writeAll(Array(text.utf8))
            try fd.sync()
        }
        try directory.rename(incoming, to: name)
        try directory.sync()
    }
}

/// The built daemon on the power-loss file system: run a workload, cut the power,
/// restart on what a disk would hold, check the contract.
final class PowerLossRig {
    let directory = TemporaryDirectory("powerloss")
    var backing: String { directory.sub("backing") }
    var mountPoint: String { directory.sub("mnt") }
    var socket: String { directory.sub("run/control.sock") }
    var config: String { directory.sub("autosaved.conf") }
    /// The daemon's output in the run that was cut, for failure messages.
    var log: [String] = []
    /// Temporary files and trees the cut left for the restart's recovery.
    var temporariesAfterCut = 0
    /// Whether the restart's recovery was cut too.
    var recoveryWasCut = false
    /// With `tornSeed`: the pages of unsynced bytes the run's cut kept.
    var tornPages = 0
    /// With `reorderSeed`: the directory changes not synced the run's cut kept and dropped,
    /// and each one's fate (`kept rename /a -> /b`, …).
    var reordered = (kept: 0, dropped: 0)
    var reorderDecisions: [String] = []
    /// The power-loss model: `strict` (POSIX) or `ordered` (ext4 data=ordered-like).
    let ordering: String
    /// Given, the cut of the run tears what was not synced (the file system's `--torn`).
    let tornSeed: UInt64?
    /// Given, the cut of the run keeps a random subset of the directory changes not synced
    /// (the file system's `--reorder`; strict model only).
    let reorderSeed: UInt64?

    init(ordering: String = "strict", tornSeed: UInt64? = nil, reorderSeed: UInt64? = nil) throws {
        self.ordering = ordering
        self.tornSeed = tornSeed
        self.reorderSeed = reorderSeed

        for name in ["backing", "mnt", "run"] {
            try FileManager.default.createDirectory(atPath: directory.sub(name), withIntermediateDirectories: false)
        }
        try Disk.write(
            // LoopWriteLimit=1s: a save waited for runs on the loop after the document's first
            // (this file system's saves take longer than the default 2 ms), the first on a save thread.
            "[Store]\nRoot=\(mountPoint)\n[Autosave]\nQuietPeriod=1h\nMaxDelay=1h\nRetryInterval=10min\nMaxRetryInterval=1h\n"
                + "LoopWriteLimit=1s\n"
                + "[Control]\nSocket=\(socket)\n[Log]\nLevel=info\n",
            to: config)
    }

    /// Starts the daemon and waits until it is ready; `nil` when it is not within a
    /// minute, exits first, or the power is cut under it (`mount` says so: a daemon
    /// blocked on a file system that no longer answers is not waited for).
    func startDaemon(on mount: PowerLossMount? = nil) async throws -> DaemonProcess? {
        let daemon = try DaemonProcess(Machine.product("autosaved"), ["--config", config])
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if daemon.output.contains(where: { $0.contains("started:") }) { return daemon }
            if !daemon.process.isRunning || mount?.crashed == true { break }
            usleep(5000)
        }
        daemon.signal(SIGKILL)
        _ = Self.waitForExit(daemon)
        return nil
    }

    /// Waits (up to a minute) for the daemon to exit and returns its status (`nil`: it
    /// did not, and was killed). It blocks instead of awaiting a Dispatch queue: a full
    /// suite run may leave those queues busy.
    static func waitForExit(_ daemon: DaemonProcess) -> Int32? {
        let pid = daemon.process.processIdentifier
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if !daemon.process.isRunning { return daemon.process.terminationStatus }
            // Foundation may be late to notice (or miss) the exit in a long run: a
            // zombie is reaped here.
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            if let state = stat.split(separator: ")").last?.split(separator: " ").first, state == "Z" {
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid {
                    return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
                }
            }
            usleep(2000)
        }
        daemon.signal(SIGKILL)
        return nil
    }

    static func client(_ socket: String) throws -> ControlClient {
        let client = try ControlClient(socketPath: socket)
        // A bound on every reply: a test fails rather than hangs.
        setReceiveTimeout(client, milliseconds: 60_000)
        return client
    }

    static func setReceiveTimeout(_ client: ControlClient, milliseconds: Int) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        _ = setsockopt(client.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// A cut while `workload` runs: returns what was acknowledged, with the cut's line
    /// (`nil` when the run ended first; unmounting is the cut then).
    func cutRun(_ workload: Workload, at crash: PowerLossMount.CrashPoint?) async throws -> (
        Acknowledged, String?, [String: Int]
    ) {
        let mount = try PowerLossMount(
            backing: backing, at: mountPoint, crash: crash, ordering: ordering, tornSeed: tornSeed,
            reorderSeed: reorderSeed)
        var acks = Acknowledged()
        do {
            if let daemon = try await startDaemon(on: mount) {
                if let client = try? Self.client(socket), let events = try? Self.client(socket),
                    (try? events.call(["cmd": "subscribe", "events": ["conflict"]]))?["ok"] == true
                {
                    workload.run(client, events: events, root: mountPoint, isCut: { mount.crashed }, into: &acks)
                }
                // A power cut ends the daemon too.
                daemon.signal(SIGKILL)
                _ = Self.waitForExit(daemon)
                log = daemon.output
            }
        }
        try mount.unmount()
        tornPages = mount.torn?.pages ?? 0
        reordered = mount.reordered.map { ($0.kept, $0.dropped) } ?? (0, 0)
        reorderDecisions = mount.reorderDecisions
        let line = mount.lines.all.first { $0.hasPrefix("crashed ") }
        return (acks, line, mount.counts)
    }

    /// Restarts the daemon on what the cut left (its start-up recovery cut at `crash`
    /// too, when given), then once more cleanly, and returns the problems found.
    func restartAndCheck(_ acks: Acknowledged, recoveryCut crash: PowerLossMount.CrashPoint? = nil) async throws
        -> [String]
    {
        temporariesAfterCut = Disk.temporaries(under: backing).count
        if let crash {
            let mount = try PowerLossMount(backing: backing, at: mountPoint, crash: crash, ordering: ordering)
            defer { recoveryWasCut = mount.crashed }
            if let daemon = try await startDaemon(on: mount) {
                daemon.signal(SIGKILL)
                _ = Self.waitForExit(daemon)
            } else {
                // Cut before it was ready: it exits (or is killed) without having served.
            }
            try mount.unmount()
        }
        let mount = try PowerLossMount(backing: backing, at: mountPoint, ordering: ordering)
        var problems: [String] = []
        if let daemon = try await startDaemon() {
            daemon.signal(SIGTERM)
            let status = Self.waitForExit(daemon)
            if status != 0 {
                problems.append("the daemon exited \(status.map(String.init) ?? "not at all") after the restart")
            }
        } else {
            problems.append("the daemon did not start after the cut")
        }
        try mount.unmount()
        // The backing directory now holds what a disk would after a cut at the end of the restart.
        return problems + check(acks)
    }

    /// The contract, on the durable state in the backing directory.
    func check(_ acks: Acknowledged) -> [String] {
        var problems: [String] = []
        let temporaries = Disk.temporaries(under: backing)
        if !temporaries.isEmpty { problems.append("temporaries left: \(temporaries)") }
        func contents(_ name: String) -> String? { try? String(contentsOfFile: backing + "/" + name, encoding: .utf8) }

        for doc in Workload.documents + ["c.txt"] {
            guard let text = contents(doc) else {
                if let acked = acks.versions[doc] { problems.append("\(doc): acknowledged version \(acked) is gone") }
                continue
            }
            guard let version = Versions.version(of: text, name: doc) else {
                problems.append("\(doc): not one complete version (\(text.utf8.count) bytes)")
                continue
            }
            // After another program's durable save, the file is theirs or newer: never the conflicting edit.
            let required = max(acks.versions[doc] ?? 0, acks.external[doc] ?? 0)
            if version < required { problems.append("\(doc): holds version \(version), acknowledged \(required)") }
        }
        let package = backing + "/book.package"
        if FileManager.default.fileExists(atPath: package) {
            for member in Workload.members {
                let name = "book.package/" + member
                let acked = acks.versions[name]
                guard let text = contents(name) else {
                    if let acked, acked > 0, !acks.removals.contains(name) {
                        problems.append("\(name): acknowledged version \(acked) is gone")
                    }
                    continue
                }
                guard let version = Versions.version(of: text, name: name) else {
                    problems.append("\(name): not one complete version (\(text.utf8.count) bytes)")
                    continue
                }
                if acked == -1 { problems.append("\(name): removed in an acknowledged save, still there") }
                if let acked, version < acked {
                    problems.append("\(name): holds version \(version), acknowledged \(acked)")
                }
            }
        } else if acks.versions.keys.contains(where: { $0.hasPrefix("book.package/") }) {
            problems.append("book.package: acknowledged, gone")
        }
        for (copy, doc, version) in acks.conflictCopies {
            guard let text = contents(copy) else {
                problems.append("conflict copy \(copy): announced, gone")
                continue
            }
            if Versions.version(of: text, name: doc) != version {
                problems.append("conflict copy \(copy): does not hold version \(version) of \(doc)")
            }
        }
        // Nothing but documents, conflict copies and their directories.
        let known = Set(
            Workload.documents.map { $0.split(separator: "/").first.map(String.init)! } + [
                "c.txt", "book.package", "c.txt.incoming",
            ])
        for name in (try? Disk.names(in: backing)) ?? [] where !known.contains(name) && !name.contains("(conflict ") {
            problems.append("unexpected entry \(name)")
        }
        return problems
    }
}

@Suite(
    "Power loss: the built daemon on a file system that forgets what was not synced",
    .enabled(if: PowerLossMount.isAvailable, "needs root, /dev/fuse and Debian's python3-fusepy"), .serialized)
struct PowerLossTests {
    struct Outcome {
        var problems: [String]
        /// Whether the cut came before the run ended.
        var crashed: Bool
        var counts: [String: Int]
        var temporaries: Int
        var recoveryWasCut: Bool
        /// Whether the workload ran to its end before the cut, and the conflict copies announced.
        var completed: Bool
        var conflictCopies: Int
        /// With a torn cut: the pages of unsynced bytes it kept.
        var tornPages = 0
        /// With a reordered cut: the directory changes not synced it kept and dropped.
        var reordered = (kept: 0, dropped: 0)
    }

    /// One cut: the workload to the cut, a restart (its recovery cut too, if asked), the checks.
    func cut(
        _ workload: Workload, at crash: PowerLossMount.CrashPoint?, recoveryCut: PowerLossMount.CrashPoint? = nil,
        ordering: String = "strict", tornSeed: UInt64? = nil, reorderSeed: UInt64? = nil
    ) async throws -> Outcome {
        let rig = try PowerLossRig(ordering: ordering, tornSeed: tornSeed, reorderSeed: reorderSeed)
        let (acks, line, counts) = try await rig.cutRun(workload, at: crash)
        let problems = try await rig.restartAndCheck(acks, recoveryCut: recoveryCut)
        var described = problems.map {
            "\(workload) cut at \(crash?.description ?? "the end") (\(line ?? "unmount")): \($0)"
        }
        if !problems.isEmpty {
            described.append("acknowledged: \(acks.versions.sorted { $0.key < $1.key }), \(acks.saves) saves")
            described.append("the daemon before the cut:\n" + rig.log.suffix(20).joined(separator: "\n"))
            if reorderSeed != nil {
                described.append("directory changes not synced:\n" + rig.reorderDecisions.joined(separator: "\n"))
            }
        }
        return Outcome(
            problems: described, crashed: line != nil, counts: counts, temporaries: rig.temporariesAfterCut,
            recoveryWasCut: rig.recoveryWasCut, completed: acks.completed, conflictCopies: acks.conflictCopies.count,
            tornPages: rig.tornPages, reordered: rig.reordered)
    }

    static func environment(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }

    @Test(
        "A cut after the whole run: every acknowledged save is on disk, complete (catches a missing file or directory fsync)",
        arguments: Workload.allCases)
    func cutAtTheEnd(workload: Workload) async throws {
        let outcome = try await cut(workload, at: nil)
        #expect(outcome.problems.isEmpty, "\(outcome.problems.joined(separator: "\n"))")
        // Without a cut every request of the workload succeeds: a refused save or a missing
        // conflict copy would otherwise end the run early and leave less to check.
        #expect(outcome.completed, "the \(workload) workload stopped before its end without a cut")
        if workload == .conflict { #expect(outcome.conflictCopies == 1, "the conflict copy was announced") }
        let counts = outcome.counts
        #expect((counts["fsync"] ?? 0) > 0 && (counts["rename"] ?? 0) > 0, "the run saved: \(counts)")
    }

    @Test(
        "A cut after every fsync, directory fsync and rename of a run, in turn (POSIX's rule, and ext4 data=ordered's)",
        arguments: Workload.allCases, ["strict", "ordered"])
    func enumeratedCuts(workload: Workload, ordering: String) async throws {
        // How many of each the whole run makes.
        let counts = try await cut(workload, at: nil, ordering: ordering).counts
        var points: [PowerLossMount.CrashPoint] = []
        for kind in ["fsync", "fsyncdir", "rename"] {
            points += (1...max(1, counts[kind] ?? 0)).map { PowerLossMount.CrashPoint(kind, $0) }
        }
        var crashed = 0
        var leftovers = 0
        for point in points {
            let outcome = try await cut(workload, at: point, ordering: ordering)
            #expect(outcome.problems.isEmpty, "\(outcome.problems.joined(separator: "\n"))")
            if outcome.crashed { crashed += 1 }
            if outcome.temporaries > 0 { leftovers += 1 }
            if !outcome.problems.isEmpty { break }
        }
        print(
            "power loss, \(workload), \(ordering): \(points.count) crash points (\(counts["fsync"] ?? 0) fsync, "
                + "\(counts["fsyncdir"] ?? 0) directory fsync, \(counts["rename"] ?? 0) rename), \(crashed) reached, "
                + "\(leftovers) left temporaries for recovery")
        #expect(crashed >= points.count * 3 / 4, "most points were reached: \(crashed) of \(points.count)")
    }

    /// `AUTOSAVED_POWERLOSS_CUTS` (default 6) cuts; `AUTOSAVED_POWERLOSS_SEED` repeats a run.
    @Test("Cuts after random writes and operations (seeded; the seed is in any failure)")
    func randomCuts() async throws {
        let seed = Self.environment("AUTOSAVED_POWERLOSS_SEED").map(UInt64.init) ?? .random(in: 1...UInt64(UInt32.max))
        let cuts = Self.environment("AUTOSAVED_POWERLOSS_CUTS") ?? 6
        var generator = SeededGenerator(state: seed)
        var crashed = 0
        var failed = 0
        var torn = (cuts: 0, pages: 0)
        for _ in 0..<cuts {
            let workload = Workload.allCases.randomElement(using: &generator)!
            let point =
                Bool.random(using: &generator)
                ? PowerLossMount.CrashPoint("write", Int.random(in: 1...24, using: &generator))
                : PowerLossMount.CrashPoint("op", Int.random(in: 1...900, using: &generator))
            let ordering = Bool.random(using: &generator) ? "strict" : "ordered"
            // Half the cuts tear what was written and not synced (LazyFS's torn writes).
            let tearing =
                Bool.random(using: &generator) ? UInt64.random(in: 1...UInt64(UInt32.max), using: &generator) : nil
            let outcome = try await cut(workload, at: point, ordering: ordering, tornSeed: tearing)
            #expect(
                outcome.problems.isEmpty,
                "seed \(seed)\(tearing.map { ", torn \($0)" } ?? ""): \(outcome.problems.joined(separator: "\n"))")
            if outcome.crashed { crashed += 1 }
            if tearing != nil { torn = (torn.cuts + 1, torn.pages + outcome.tornPages) }
            if !outcome.problems.isEmpty { failed += 1 }
        }
        print(
            "power loss, random: seed \(seed), \(cuts) cuts, \(crashed) inside the run, \(failed) failed, \(torn.cuts) torn (\(torn.pages) pages of unsynced bytes kept)"
        )
    }

    @Test(
        "Reordered cuts (a random subset of the directory changes not synced reaches the disk; the strict model, half torn too), four seeds: each workload cut after a random rename and after a random operation, every acknowledged save there, complete"
    )
    func reorderedCuts() async throws {
        var dropped = 0
        var cuts = 0
        for seed in 1...4 as ClosedRange<UInt64> {
            var generator = SeededGenerator(state: seed)
            var droppedBySeed = 0
            for workload in Workload.allCases {
                // Right after a rename (its directory not synced yet), and after any operation.
                let points = [
                    PowerLossMount.CrashPoint("rename", Int.random(in: 1...6, using: &generator)),
                    PowerLossMount.CrashPoint("op", Int.random(in: 1...900, using: &generator)),
                ]
                for point in points {
                    let tearing = Bool.random(using: &generator) ? seed * 100 + UInt64(cuts) : nil
                    let reordering = seed * 1000 + UInt64(cuts)
                    let outcome = try await cut(workload, at: point, tornSeed: tearing, reorderSeed: reordering)
                    let seeds = "seed \(seed), reorder \(reordering)" + (tearing.map { ", torn \($0)" } ?? "")
                    #expect(outcome.problems.isEmpty, "\(seeds): \(outcome.problems.joined(separator: "\n"))")
                    droppedBySeed += outcome.reordered.dropped
                    cuts += 1
                }
            }
            print("power loss, reordered: seed \(seed), 6 cuts, \(droppedBySeed) directory changes not synced dropped")
            dropped += droppedBySeed
        }
        // (One seed alone may drop nothing: few changes are pending when a cut comes.)
        #expect(dropped > 0, "the \(cuts) cuts dropped no directory change")
    }

    /// One `.atomic` package run of the documents probe (a first save, then `versions`
    /// whole trees swapped in), cut at `crash`; then recovery and the checks on what a
    /// disk would hold. Returns the problems and the run's operation counts.
    func atomicRun(
        swap: String, crash: PowerLossMount.CrashPoint?, versions: Int = 4, reorderSeed: UInt64? = nil,
        reorderDropping: [String] = []
    ) throws -> (problems: [String], counts: [String: Int], crashed: Bool, dropped: Int, oldTrees: Int) {
        let directory = TemporaryDirectory("powerloss-atomic")
        let backing = directory.sub("backing")
        let mountPoint = directory.sub("mnt")
        for path in [backing, mountPoint] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        }
        let mount = try PowerLossMount(
            backing: backing, at: mountPoint, crash: crash, reorderSeed: reorderSeed, reorderDropping: reorderDropping)
        let run = try Machine.run(
            Machine.probe,
            ["loop-package", mountPoint + "/p.pkg", "--atomic", swap, "--members", "4", "--versions", "\(versions)"])
        try mount.unmount()
        let acknowledged = run.stdout.split(separator: "\n").compactMap { line in
            line.hasPrefix("saved ") ? Int(line.dropFirst("saved ".count)) : nil
        }.max()
        var problems: [String] = []
        if crash == nil, run.status != 0 { problems.append("the run failed: \(run)") }
        // Old trees renamed aside that the cut left.
        let oldTrees = ((try? Disk.names(in: backing)) ?? []).filter { $0.hasPrefix(".p.pkg.autosave-old-") }.count
        // The restart: recovery on what the cut left, itself followed by a cut at unmount.
        let again = try PowerLossMount(backing: backing, at: mountPoint)
        let recovery = try Machine.run(Machine.probe, ["recover", mountPoint])
        try again.unmount()
        if recovery.status != 0 { problems.append("recovery failed: \(recovery)") }
        let temporaries = Disk.temporaries(under: backing)
        if !temporaries.isEmpty { problems.append("temporaries left: \(temporaries)") }
        if FileManager.default.fileExists(atPath: backing + "/p.pkg") {
            let check = try Machine.run(Machine.probe, ["check-package", backing + "/p.pkg"])
            let version =
                check.status == 0
                ? Int(check.stdout.dropFirst("version ".count).trimmingCharacters(in: .newlines)) : nil
            if let version {
                if let acknowledged, version < acknowledged {
                    problems.append("p.pkg holds version \(version), acknowledged \(acknowledged)")
                }
            } else {
                problems.append("p.pkg is not one complete version: \(check.stderr)")
            }
        } else if let acknowledged {
            problems.append("p.pkg: version \(acknowledged) acknowledged, gone")
        }
        let names = (try? Disk.names(in: backing)) ?? []
        if !names.allSatisfy({ $0 == "p.pkg" }) { problems.append("unexpected entries: \(names)") }
        let decisions = mount.reorderDecisions.isEmpty ? "" : " (reordered: \(mount.reorderDecisions))"
        return (
            problems.map { "\(swap) cut at \(crash?.description ?? "the end")\(decisions): \($0)" }, mount.counts,
            mount.crashed, mount.reordered?.dropped ?? 0, oldTrees
        )
    }

    @Test(
        ".atomic package saves (the exchange refused here, so renamed aside): a cut after every rename and directory fsync",
        arguments: ["--exchange", "--rename-aside"])
    func atomicPackageCuts(swap: String) throws {
        let (problems, counts, _, _, _) = try atomicRun(swap: swap, crash: nil)
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        var points: [PowerLossMount.CrashPoint] = []
        for kind in ["rename", "fsyncdir"] {
            points += (1...max(1, counts[kind] ?? 0)).map { PowerLossMount.CrashPoint(kind, $0) }
        }
        var crashed = 0
        for point in points {
            let outcome = try atomicRun(swap: swap, crash: point)
            #expect(outcome.problems.isEmpty, "\(outcome.problems.joined(separator: "\n"))")
            if outcome.crashed { crashed += 1 }
            if !outcome.problems.isEmpty { break }
        }
        print(
            "power loss, .atomic package \(swap): \(points.count) crash points (\(counts["rename"] ?? 0) rename, "
                + "\(counts["fsyncdir"] ?? 0) directory fsync), \(crashed) reached")
        #expect(crashed == points.count)
    }

    @Test(
        ".atomic package saves on the reordering model (a random subset of the directory changes not synced reaches the disk): cut right after a rename, four seeds, the package one complete version, never older than acknowledged",
        arguments: ["--exchange", "--rename-aside"])
    func reorderedAtomicCuts(swap: String) throws {
        var dropped = 0
        var crashed = 0
        for seed in 1...4 as ClosedRange<UInt64> {
            // The whole-tree saves rename several times each: cuts spread over the run.
            let outcome = try atomicRun(
                swap: swap, crash: PowerLossMount.CrashPoint("rename", Int(seed) * 2), reorderSeed: seed)
            #expect(outcome.problems.isEmpty, "\(outcome.problems.joined(separator: "\n"))")
            dropped += outcome.dropped
            if outcome.crashed { crashed += 1 }
        }
        print("power loss, .atomic package \(swap), reordered: 4 cuts, \(crashed) reached, \(dropped) changes dropped")
        #expect(crashed == 4 && dropped > 0, "\(crashed) cuts reached, \(dropped) directory changes dropped")
    }

    @Test(
        ".atomic rename-aside: the old tree's removal is durable before the next save renames the package aside: a cut keeping that rename and dropping the earlier removal (and the new tree) leaves one old tree, which recovery puts back whole",
        arguments: ["--exchange", "--rename-aside"])
    func reorderedRemovalOfTheOldTree(swap: String) throws {
        // Two swaps: the 1st save, then p.pkg renamed aside (rename 2), the new tree in place
        // (3), the old tree removed; the 2nd swap renames p.pkg aside again (4): the cut.
        let outcome = try atomicRun(
            swap: swap, crash: PowerLossMount.CrashPoint("rename", 4), versions: 2,
            reorderDropping: ["rmdir /.p.pkg.autosave-old-", "mkdir /.p.pkg.autosave-"])
        #expect(outcome.crashed)
        #expect(outcome.oldTrees == 1, "old trees left by the cut: \(outcome.oldTrees)")
        #expect(outcome.problems.isEmpty, "\(outcome.problems.joined(separator: "\n"))")
    }

    @Test(
        "A directory another program made and never synced, a document saved in it with wait, then a cut: the directory and the acknowledged file are there"
    )
    func unsyncedDirectoryOfAnotherProgram() async throws {
        let rig = try PowerLossRig()
        let mount = try PowerLossMount(backing: rig.backing, at: rig.mountPoint)
        var reply: JSONValue?
        if let daemon = try await rig.startDaemon() {
            // mkdir(2) and nothing more: under POSIX's rule its entry in the root is not durable.
            #expect(mkdir(rig.mountPoint + "/d", 0o755) == 0)
            let client = try PowerLossRig.client(rig.socket)
            _ = try client.call(["cmd": "set", "doc": "d/x.txt", "text": "acknowledged\n"])
            reply = try client.call(["cmd": "save", "doc": "d/x.txt", "wait": true])
            daemon.signal(SIGKILL)
            _ = PowerLossRig.waitForExit(daemon)
        }
        try mount.unmount()
        #expect(reply?["ok"] == true, "\(String(describing: reply))")
        #expect((try? Disk.bytes(rig.backing + "/d/x.txt")) == Data("acknowledged\n".utf8))
    }

    @Test(
        "A directory another program made and never synced, named like one the daemon synced but in the other Unicode normalization (de\u{301} beside d\u{E9}): a document saved in it with wait, then a cut: the directory and the acknowledged file are there"
    )
    func unsyncedDirectoryInAnotherNormalization() async throws {
        let rig = try PowerLossRig()
        let mount = try PowerLossMount(backing: rig.backing, at: rig.mountPoint)
        var replies: [JSONValue] = []
        if let daemon = try await rig.startDaemon() {
            let client = try PowerLossRig.client(rig.socket)
            // The daemon makes d\u{E9} for its document and syncs the root above it.
            _ = try client.call(["cmd": "set", "doc": "d\u{E9}/x.txt", "text": "composed\n"])
            replies.append(try client.call(["cmd": "save", "doc": "d\u{E9}/x.txt", "wait": true]))
            // Another directory on Linux, equal to the first as a Swift String: made and not synced.
            #expect(mkdir(rig.mountPoint + "/de\u{301}", 0o755) == 0)
            _ = try client.call(["cmd": "set", "doc": "de\u{301}/y.txt", "text": "decomposed\n"])
            replies.append(try client.call(["cmd": "save", "doc": "de\u{301}/y.txt", "wait": true]))
            daemon.signal(SIGKILL)
            _ = PowerLossRig.waitForExit(daemon)
        }
        try mount.unmount()
        #expect(replies.count == 2 && replies.allSatisfy { $0["ok"] == true }, "\(replies)")
        #expect((try? Disk.bytes(rig.backing + "/d\u{E9}/x.txt")) == Data("composed\n".utf8))
        #expect((try? Disk.bytes(rig.backing + "/de\u{301}/y.txt")) == Data("decomposed\n".utf8))
    }

    @Test("Start-up recovery cut by a power loss of its own, then a clean start", arguments: [1, 2, 3])
    func recoveryCut(count: Int) async throws {
        // Cuts inside package saves leave temporary files and trees for the restart to
        // remove (with ext4's ordering: under POSIX's rule a temporary's name is never
        // made durable, its directory is synced only after the rename).
        var recoveriesCut = 0
        var withTemporaries = 0
        var runs = 0
        for point in [PowerLossMount.CrashPoint("fsync", 2), .init("write", 4), .init("fsync", 6)] {
            for kind in ["unlink", "rmdir", "fsyncdir"] {
                let outcome = try await cut(
                    .package, at: point, recoveryCut: PowerLossMount.CrashPoint(kind, count), ordering: "ordered")
                #expect(
                    outcome.problems.isEmpty,
                    "recovery cut at \(kind):\(count): \(outcome.problems.joined(separator: "\n"))")
                runs += 1
                if outcome.recoveryWasCut { recoveriesCut += 1 }
                if outcome.temporaries > 0 { withTemporaries += 1 }
            }
        }
        print(
            "power loss, recovery cut at its operation \(count): \(runs) runs, \(withTemporaries) with temporaries, \(recoveriesCut) recoveries cut"
        )
        #expect(withTemporaries > 0 && recoveriesCut > 0, "the cuts left work for recovery, and recovery was cut")
    }
}
