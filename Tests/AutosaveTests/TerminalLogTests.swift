import Control
import Foundation
@preconcurrency import Glibc
import Logging
import TestSupport
import Testing

/// The daemon's log lines on a terminal (a real pseudo-terminal from util-linux's
/// `script`), and on a pipe.
@Suite("Log lines on a terminal", .serialized)
struct TerminalLogTests {
    let directory = TemporaryDirectory("terminal")

    /// The daemon started under `script`, so that its standard error is a pseudo-terminal;
    /// what it writes there comes back on script's standard output.
    func daemonOnTerminal(_ extra: [String: String]) throws -> DaemonProcess {
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Autosave]\nQuietPeriod=50ms\n[Control]\nSocket=\(directory.sub("control.sock"))\n",
            to: config)
        var environment = ProcessInfo.processInfo.environment
        for key in ["NOTIFY_SOCKET", "JOURNAL_STREAM", "NO_COLOR"] { environment.removeValue(forKey: key) }
        environment["TERM"] = "xterm-256color"
        environment.merge(extra) { $1 }
        return try DaemonProcess(
            "/usr/bin/script",
            ["-qfec", "exec '\(Machine.product("autosaved"))' --config '\(config)'", "/dev/null"],
            environment: environment)
    }

    /// Stops the daemon running under `script` with SIGTERM, as Ctrl-C would.
    func stop(_ terminal: DaemonProcess) async throws {
        let children = try Machine.run("pgrep", ["-P", "\(terminal.process.processIdentifier)"]).stdout
        for child in children.split(separator: "\n") { kill(pid_t(child)!, SIGTERM) }
        #expect(await terminal.exitStatus() == 0)
    }

    static let escape = "\u{1B}["

    /// The line without its colours and the terminal's carriage return.
    static func plain(_ line: String) -> String {
        line.replacing(#/\x1B\[[0-9;]*m/#, with: "").replacingOccurrences(of: "\r", with: "")
    }

    @Test(
        "On a terminal: time, level word, message, the fields in words; coloured",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs util-linux's script"))
    func coloured() async throws {
        let terminal = try daemonOnTerminal([:])
        let started = try #require(await terminal.waitForLine(containing: "started:"))
        #expect(started.contains(Self.escape), "coloured on a terminal: \(started.debugDescription)")
        #expect(
            Self.plain(started).wholeMatch(of: #/\d\d:\d\d:\d\d\.\d{3} notice started: 0 documents under .*/#) != nil)
        #expect(!started.contains("<5>") && !started.contains("root="), "\(started.debugDescription)")

        let client = try ControlClient(socketPath: directory.sub("control.sock"))
        try client.call(["cmd": "set", "doc": "notes/todo.txt", "text": "milk\n"])
        try client.call(["cmd": "save", "doc": "notes/todo.txt", "wait": true])
        let saved = try #require(await terminal.waitForLine(containing: "saved notes/todo.txt"))
        #expect(
            Self.plain(saved).wholeMatch(
                of: #/\d\d:\d\d:\d\d\.\d{3} info  saved notes/todo.txt \(5 bytes, \d+\.\d ms\)/#)
                != nil, "\(saved.debugDescription)")
        try await stop(terminal)
    }

    @Test(
        "On a terminal with NO_COLOR set: the same lines without a single escape",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs util-linux's script"))
    func noColour() async throws {
        let terminal = try daemonOnTerminal(["NO_COLOR": "1"])
        let started = try #require(await terminal.waitForLine(containing: "started:"))
        let client = try ControlClient(socketPath: directory.sub("control.sock"))
        try client.call(["cmd": "set", "doc": "a.txt", "text": "x"])
        try client.call(["cmd": "save", "doc": "a.txt", "wait": true])
        let saved = try #require(await terminal.waitForLine(containing: "saved a.txt"))
        for line in [started, saved] {
            #expect(!line.contains("\u{1B}"), "\(line.debugDescription)")
            #expect(
                line.wholeMatch(of: #/\d\d:\d\d:\d\d\.\d{3} [a-z]+ +[a-z].*\r?/#) != nil, "\(line.debugDescription)")
        }
        // Under a second in milliseconds, else in seconds (a slow machine, a sanitizer).
        #expect(
            Self.plain(saved).contains(#/ info  saved a.txt \(1 byte, (\d+\.\d ms|\d+\.\d\d s)\)$/#),
            "\(saved.debugDescription)")
        try await stop(terminal)
    }

    @Test("Fields the message already says, the message ID and the content type stay out of a terminal line")
    func fields() {
        let line = TerminalLogHandler.line(
            level: .error,
            message:
                "saving a.txt failed: create temporary file '/r/.a.txt.autosave-X' failed: EROFS (Read-only file system)",
            metadata: [
                "document": "a.txt", "operation": "create temporary file", "path": "/r/.a.txt.autosave-X",
                "errno": "30", "errno_name": "EROFS", "message_id": "x", "content_type": "public.plain-text",
            ], at: Date(), colour: false)
        #expect(
            line.hasSuffix(
                " error saving a.txt failed: create temporary file '/r/.a.txt.autosave-X' failed: EROFS (Read-only file system)"
            ))
        let plain = TerminalLogHandler.line(
            level: .warning, message: "renamed", metadata: ["old_document": "a.txt"], at: Date(), colour: false)
        #expect(plain.hasSuffix(" warn  renamed (old_document=a.txt)"))
    }

    @Test(
        "A line on a pipe: priority prefix, fields sorted, spaces quoted, controls escaped, empty fields and the message ID left out"
    )
    func pipeLine() {
        let line = StderrLogHandler.line(
            level: .info, message: "saved notes/a\nb.txt",
            metadata: [
                "document": "notes/a\nb.txt", "bytes_written": "42", "message_id": "0123", "errno": "",
                "detail": "two words", "name": "caf\u{E9}\u{1B}[31m",
            ])
        #expect(
            String(decoding: line, as: UTF8.self)
                == "<6>saved notes/a\\nb.txt bytes_written=42 detail=\"two words\" document=notes/a\\nb.txt name=caf\u{E9}\\u{1B}[31m\n"
        )
        #expect(StderrLogHandler.line(level: .error, message: "plain", metadata: [:]) == Array("<3>plain\n".utf8))
    }
}
