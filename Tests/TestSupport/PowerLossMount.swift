import Foundation
@preconcurrency import Glibc
import Posix

/// Output lines of a child process, with waiting for one to arrive.
public final class ProcessLines: Sendable {
    private let state = Lock<(lines: [String], ended: Bool)>(([], false))
    private let arrival = NSCondition()

    public init() {}

    /// Starts a thread that reads `handle` line by line until end of file.
    public func follow(_ handle: FileHandle, name: String) {
        let thread = Thread { [self] in
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty {
                    // Closed here, not left to the handle's deinit: see `Machine.readToEnd`.
                    try? handle.close()
                    break
                }
                pending.append(chunk)
                var found: [String] = []
                while let newline = pending.firstIndex(of: 10) {
                    found.append(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending.removeSubrange(pending.startIndex...newline)
                }
                arrival.lock()
                state.withLock { $0.lines += found }
                arrival.broadcast()
                arrival.unlock()
            }
            arrival.lock()
            state.withLock { $0.ended = true }
            arrival.broadcast()
            arrival.unlock()
        }
        thread.name = name
        thread.start()
    }

    public var all: [String] { state.withLock { $0.lines } }

    /// Waits up to `timeout` for the end of the output; whether it came.
    @discardableResult
    public func waitForEnd(within timeout: Duration) -> Bool {
        _ = first(containing: "\u{0}", within: timeout)
        return state.withLock { $0.ended }
    }

    /// The first line containing `text`, waiting up to `timeout` (`nil`: none came, or the output ended).
    public func first(containing text: String, within timeout: Duration) -> String? {
        let deadline =
            Date() + TimeInterval(timeout.components.seconds) + 1e-18 * Double(timeout.components.attoseconds)
        arrival.lock()
        defer { arrival.unlock() }
        while true {
            let (lines, ended) = state.withLock { ($0.lines, $0.ended) }
            if let line = lines.first(where: { $0.contains(text) }) { return line }
            if ended || Date() >= deadline { return nil }
            _ = arrival.wait(until: min(deadline, Date() + 0.5))
        }
    }
}

/// The power-loss file system (`Tests/Tools/powerloss_fs.py`) mounted over a backing
/// directory for one test: a FUSE passthrough that knows what a disk would hold after
/// a power cut, plays one on request, and on unmount rebuilds the backing directory
/// from that durable state alone. Like NFS, CIFS and many FUSE file systems, it refuses
/// `renameat2`'s flags (`EINVAL`).
public final class PowerLossMount {
    public let backing: String
    public let path: String
    public let lines = ProcessLines()
    /// What the file system wrote on standard error.
    public let errors = ProcessLines()
    private let process: Process
    private var mounted = true

    /// The Debian interpreter that sees `python3-fusepy` (the first `python3` on PATH may not).
    public static let python = "/usr/bin/python3"
    public static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Tools/powerloss_fs.py").path

    /// Whether FUSE mounts can be made here: root, `/dev/fuse`, and fusepy for `/usr/bin/python3`.
    public static let isAvailable: Bool = {
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0, access(python, X_OK) == 0 else { return false }
        return (try? Machine.run(python, ["-c", "import fusepy"]).status) == 0
    }()

    /// How a cut is chosen: after the `count`-th operation of `kind` (`write`, `fsync`,
    /// `fsyncdir`, `rename`, `create`, `mkdir`, `unlink`, `op`, …).
    public struct CrashPoint: Sendable, Hashable, CustomStringConvertible {
        public var kind: String
        public var count: Int
        public init(_ kind: String, _ count: Int) {
            self.kind = kind
            self.count = count
        }
        public var description: String { "\(kind):\(count)" }
    }

    /// Mounts the file system at `path` over `backing` (both existing directories) and
    /// waits until it serves requests.
    ///
    /// - Parameters:
    ///   - crash: where to cut the power, if anywhere.
    ///   - ordering: `strict` (POSIX: a file's data once it is fsynced, a directory's
    ///     entries once it is fsynced) or `ordered` (an idealised ext4 `data=ordered`).
    ///   - cutAtUnmount: whether unmounting is a power cut too (else the live tree stays).
    ///   - failures: operations that fail with EIO and do nothing (the `count`-th of `kind`).
    ///   - tornSeed: given, what was written and not made durable may reach the disk in part
    ///     at the cut: each file whose bytes differ from its durable state gets a random mix
    ///     of the two, page by page, drawn from this seed (`--torn`).
    ///   - reorderSeed: given (with `strict` only), the directory changes not made durable by
    ///     an fsync of their directory reach the disk or not at the cut, each at random, drawn
    ///     from this seed: a later rename may be there without an earlier one (`--reorder`).
    ///   - reorderDropping: given, the same model without chance: the changes whose
    ///     `OP PATH` contains one of these texts are dropped, the others kept (`--reorder-drop`).
    public init(
        backing: String, at path: String, crash: CrashPoint? = nil, ordering: String = "strict",
        cutAtUnmount: Bool = true, failing failures: [CrashPoint] = [], tornSeed: UInt64? = nil,
        reorderSeed: UInt64? = nil, reorderDropping: [String] = []
    ) throws {
        self.backing = backing
        self.path = path
        try Machine.checkDescriptors()
        process = Process()
        process.executableURL = URL(fileURLWithPath: Self.python)
        var arguments = [
            Self.script, backing, path, "--ordering", ordering, "--on-exit", cutAtUnmount ? "cut" : "keep",
        ]
        if let crash { arguments += ["--crash-after", crash.description] }
        for failure in failures { arguments += ["--fail", failure.description] }
        if let tornSeed { arguments += ["--torn", String(tornSeed)] }
        if let reorderSeed { arguments += ["--reorder", String(reorderSeed)] }
        for text in reorderDropping { arguments += ["--reorder-drop", text] }
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        lines.follow(out.fileHandleForReading, name: "powerloss-fs")
        errors.follow(err.fileHandleForReading, name: "powerloss-fs-errors")
        try process.run()
        guard lines.first(containing: "ready", within: .seconds(30)) != nil else {
            _ = try? Machine.run("umount", ["-l", path])
            process.terminate()
            process.waitUntilExit()
            throw Failure(
                "the power-loss file system did not come up at \(path): \(errors.all.joined(separator: "\n"))")
        }
    }

    /// The file system's process.
    public var processIdentifier: Int32 { process.processIdentifier }

    /// Whether the cut has happened.
    public var crashed: Bool { lines.all.contains { $0.hasPrefix("crashed ") } }

    /// Waits up to `timeout` for the cut.
    public func waitForCrash(within timeout: Duration) -> Bool {
        lines.first(containing: "crashed ", within: timeout) != nil
    }

    /// With `tornSeed`, after the cut's unmount: the files given a mix of their durable and
    /// live bytes, and the pages of those mixes taken from the live bytes.
    public var torn: (files: Int, pages: Int)? {
        guard let line = lines.all.last(where: { $0.hasPrefix("torn ") }) else { return nil }
        let numbers = line.split(separator: " ").dropFirst().compactMap { Int($0.split(separator: "=").last ?? "") }
        return numbers.count == 2 ? (numbers[0], numbers[1]) : nil
    }

    /// With `reorderSeed`, after the cut's unmount: the directories that had changes not
    /// synced, and of those changes the ones the cut kept and dropped.
    public var reordered: (directories: Int, kept: Int, dropped: Int)? {
        guard let line = lines.all.last(where: { $0.hasPrefix("reordered ") }) else { return nil }
        let numbers = line.split(separator: " ").dropFirst().compactMap { Int($0.split(separator: "=").last ?? "") }
        return numbers.count == 3 ? (numbers[0], numbers[1], numbers[2]) : nil
    }

    /// With `reorderSeed`, after the cut's unmount: each directory change not synced, in the
    /// order made, as `kept OP PATH`, `dropped OP PATH` or `dropped-needed OP PATH` (chosen,
    /// but what it needs was dropped).
    public var reorderDecisions: [String] {
        lines.all.filter { $0.hasPrefix("reorder ") }.map { String($0.dropFirst("reorder ".count)) }
    }

    /// Cuts the power at the next operation.
    public func cutNow() { kill(process.processIdentifier, SIGUSR1) }

    /// The operation counts of the run, from the line printed at exit.
    public var counts: [String: Int] {
        guard let line = lines.all.last(where: { $0.hasPrefix("counts ") }) else { return [:] }
        var counts: [String: Int] = [:]
        for field in line.dropFirst("counts ".count).split(separator: " ") {
            let parts = field.split(separator: "=")
            if parts.count == 2, let n = Int(parts[1]) { counts[String(parts[0])] = n }
        }
        return counts
    }

    /// Unmounts (every process using the mount must have ended), waits for the file
    /// system to exit, and, after a cut, for the backing directory to hold the durable state.
    ///
    /// Everything here has a deadline: a file system that hangs (in `umount`, or after it
    /// without exiting) is detached with a lazy unmount and killed, and `unmount` throws
    /// saying so, instead of hanging the test run. `timeout` bounds the wait for the file
    /// system to exit after the unmount (it rebuilds the backing directory then), and
    /// `umount` gets at most 10 s of it.
    public func unmount(within timeout: Duration = .seconds(60)) throws {
        guard mounted else { return }
        mounted = false
        // umount itself can block on a file system that no longer answers: 10 s at most
        // (less when the whole deadline is shorter).
        let umountSeconds = max(1, min(10, timeout.components.seconds))
        func umount(_ arguments: [String]) throws -> Machine.Output {
            try Machine.run("/usr/bin/timeout", ["-s", "KILL", "\(umountSeconds)", "umount"] + arguments)
        }
        var result = try umount([path])
        for _ in 0..<100 where result.status != 0 && result.stderr.contains("busy") {
            // A process that just exited may still be releasing its files.
            usleep(50_000)
            result = try umount([path])
        }
        var hung: String?
        if result.status == 124 || result.status == 137 {
            hung = "umount \(path) did not return within \(umountSeconds) s"
        }
        if result.status != 0 { _ = try? umount(["-l", path]) }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
        if process.isRunning {
            hung = (hung.map { $0 + "; " } ?? "") + "the file system did not exit within \(timeout) of the unmount"
            _ = try? umount(["-l", path])
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        lines.waitForEnd(within: .seconds(30))
        errors.waitForEnd(within: .seconds(30))
        if let hung {
            throw Failure(
                "the power-loss file system at \(path) hung: \(hung); detached (umount -l) and killed (SIGKILL); "
                    + "the backing directory \(backing) may not hold the durable state. Its last output: "
                    + (lines.all.suffix(5) + errors.all.suffix(20)).joined(separator: "\n"))
        }
        guard result.status == 0, process.terminationStatus == 0 else {
            throw Failure(
                "unmounting \(path): \(result.stderr); the file system exited \(process.terminationStatus): "
                    + errors.all.joined(separator: "\n"))
        }
    }

    deinit {
        if mounted {
            _ = try? Machine.run("/usr/bin/timeout", ["-s", "KILL", "10", "umount", "-l", path])
            let deadline = ContinuousClock.now + .seconds(30)
            while process.isRunning && ContinuousClock.now < deadline { usleep(20_000) }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
    }
}
