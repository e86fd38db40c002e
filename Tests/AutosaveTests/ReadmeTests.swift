import Autosave
import Control
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// A clone of this repository's committed tree, made once per test run and shared by
/// the tests that build it the way a new user or a packager does (its release build is
/// then made once); removed when the test process exits.
enum CleanClone {
    static let path: String = {
        let directory = TemporaryDirectory("clone")
        let path = directory.path
        // Kept for the whole run: removed at exit, not when this value goes away.
        directoryForRemoval.withLock { $0 = path }
        _ = Unmanaged.passRetained(directory)
        atexit {
            if let path = CleanClone.directoryForRemoval.withLock({ $0 }) {
                try? FileManager.default.removeItem(atPath: path)
            }
        }
        let result = try? Machine.run(
            "git", ["clone", "-q", ShippedConfigurationTests.repository, path + "/autosaved"])
        precondition(result?.status == 0, "git clone failed: \(result.map(String.init(describing:)) ?? "")")
        return path + "/autosaved"
    }()

    static let directoryForRemoval = Lock<String?>(nil)
}

/// What a new user does first: the README's lines, as printed.
@Suite("README: scripts/run, then the examples in another terminal", .serialized)
struct ReadmeTests {
    static var repository: String { ShippedConfigurationTests.repository }

    /// The README's example lines that follow `scripts/run` (the block that starts with
    /// `autosavectl set`), without their comments.
    static func exampleLines() throws -> [String] {
        let readme = try String(contentsOfFile: repository + "/README.md", encoding: .utf8)
        let blocks = readme.components(separatedBy: "```sh\n").dropFirst().map {
            $0.components(separatedBy: "```")[0]
        }
        let block = try #require(blocks.first { $0.hasPrefix("autosavectl set") }, "no example block in README.md")
        return block.split(separator: "\n").map { line in
            let code = line.range(of: "  #").map { line[..<$0.lowerBound] } ?? line[...]
            return code.trimmingCharacters(in: .whitespaces)
        }.filter { !$0.isEmpty }
    }

    @Test("--version on both binaries prints the one version")
    func version() throws {
        let daemon = try Machine.run(Machine.product("autosaved"), ["--version"])
        let ctl = try Machine.run(Machine.product("autosavectl"), ["--version"])
        #expect(daemon.status == 0 && ctl.status == 0)
        #expect(daemon.stdout == "autosaved \(AutosaveVersion.current)\n")
        #expect(ctl.stdout == "autosavectl \(AutosaveVersion.current)\n")
        #expect(try Machine.run(Machine.product("autosavectl"), ["--help"]).stdout.contains("--version"))
    }

    @Test(
        "On a clean clone, scripts/run builds both binaries, puts autosavectl on PATH, and the README's examples work as printed",
        .enabled(if: Machine.has("git"), "needs git to clone the repository"),
        .timeLimit(.minutes(10)))
    func firstLines() async throws {
        let directory = TemporaryDirectory("readme")
        let clone = CleanClone.path
        // A user of their own: a home with ~/.local/bin on PATH, private runtime and state directories.
        let home = directory.sub("home")
        try FileManager.default.createDirectory(atPath: home + "/.local/bin", withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        for key in [
            "NOTIFY_SOCKET", "JOURNAL_STREAM", "LISTEN_FDS", "LISTEN_PID", "RUNTIME_DIRECTORY", "STATE_DIRECTORY",
        ] {
            environment.removeValue(forKey: key)
        }
        environment["HOME"] = home
        environment["XDG_RUNTIME_DIR"] = directory.sub("runtime")
        environment["XDG_STATE_HOME"] = directory.sub("state")
        environment["PATH"] = "\(home)/.local/bin:/opt/swift/usr/bin:" + (environment["PATH"] ?? "/usr/bin:/bin")
        try FileManager.default.createDirectory(atPath: directory.sub("runtime"), withIntermediateDirectories: true)

        let run = try DaemonProcess("/bin/bash", [clone + "/scripts/run"], environment: environment)
        defer {
            run.signal(SIGKILL)
            run.process.waitUntilExit()
        }
        try #require(await run.waitForLine(containing: "started:", within: .seconds(540)) != nil)
        let link = try FileManager.default.destinationOfSymbolicLink(atPath: home + "/.local/bin/autosavectl")
        #expect(
            (link as NSString).standardizingPath
                == (clone + "/.build/release/autosavectl" as NSString).standardizingPath)

        // Another terminal: the same user, a shell of its own.
        var outputs: [String: Machine.Output] = [:]
        for line in try Self.exampleLines() where !line.contains("autosavectl subscribe") {
            let result = try Shell.run(line, environment: environment, in: home)
            #expect(result.status == 0, "\(line)\n\(result)")
            outputs[line] = result
        }
        #expect(outputs["autosavectl get notes/todo.txt"]?.stdout == "buy milk, eggs\n")
        #expect(outputs["autosavectl status"]?.stdout.contains("documents: 1, unsaved: 0") == true)
        let root = directory.sub("state/autosaved")
        #expect(try Disk.bytes(root + "/notes/todo.txt") == Data("buy milk, eggs\n".utf8))

        // subscribe runs until Ctrl-C: it says it is subscribed, then stops at SIGINT with 0.
        let subscriber = try DaemonProcess(
            "/bin/bash", ["-c", "exec autosavectl subscribe"], environment: environment)
        try #require(await subscriber.waitForLine(containing: "subscribed; Ctrl-C to stop") != nil)
        subscriber.signal(SIGINT)
        #expect(await subscriber.exitStatus() == 0)

        run.signal(SIGTERM)
        #expect(await run.exitStatus() == 0)
    }
}
