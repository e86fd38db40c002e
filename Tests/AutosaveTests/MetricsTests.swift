import Autosave
import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// `autosavectl metrics` and `[Metrics] TextfileDirectory=`, judged by Debian's promtool.
@Suite("Metrics in the Prometheus text format", .serialized)
struct MetricsTests {
    let directory = TemporaryDirectory("metrics")

    /// The value of the sample `name` (with its labels) in `text`.
    static func value(_ text: String, _ name: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap {
            Double($0.split(separator: " ").last ?? "")
        }
    }

    /// promtool's verdict on `text`: its exit status and what it said.
    static func promtool(_ text: String) throws -> Machine.Output {
        try Shell.execute("promtool", ["check", "metrics"], input: text)
    }

    @Test(
        "After a save and a failed save: the counters, the histogram and the gauges are right and promtool check metrics accepts the text and the textfile",
        .enabled(if: Machine.has("promtool"), "needs promtool (Debian's prometheus package)"))
    func promtoolAccepts() async throws {
        let config = directory.sub("autosaved.conf")
        let textfiles = directory.sub("textfile")
        try FileManager.default.createDirectory(atPath: textfiles, withIntermediateDirectories: true)
        try Disk.write(
            """
            [Store]
            Root=\(directory.sub("root"))
            [Autosave]
            # Saved when asked only: a save on its own could put a file where the test
            # is about to put a directory in its way.
            QuietPeriod=1h
            MaxDelay=1h
            RetryInterval=1h
            MaxRetryInterval=1h
            [Control]
            Socket=\(directory.sub("control.sock"))
            [Metrics]
            TextfileDirectory=\(textfiles)
            Interval=1s

            """, to: config)
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "NOTIFY_SOCKET")
        let daemon = try DaemonProcess(Machine.product("autosaved"), ["--config", config], environment: environment)
        defer {
            daemon.signal(SIGKILL)
            daemon.process.waitUntilExit()
        }
        try #require(await daemon.waitForLine(containing: "started:") != nil)
        let client = try ControlClient(socketPath: directory.sub("control.sock"))
        try client.call(["cmd": "set", "doc": "notes/ok.txt", "text": "saved"])
        #expect(try client.call(["cmd": "save", "doc": "notes/ok.txt", "wait": true])["ok"]?.boolValue == true)
        // Refused edits are no edits: neither counted nor applied.
        let refused = try client.call(["cmd": "replace", "doc": "notes/ok.txt", "offset": 99, "length": 0, "text": "y"])
        #expect(refused["error"]?["code"]?.stringValue == "bad-request", "\(refused)")
        // A failed save: another program puts a directory where the document goes.
        try client.call(["cmd": "set", "doc": "notes/blocked.txt", "text": "x"])
        try FileManager.default.createDirectory(
            atPath: directory.sub("root/notes/blocked.txt"), withIntermediateDirectories: true)
        #expect(
            try client.call(["cmd": "save", "doc": "notes/blocked.txt", "wait": true])["error"]?["code"]?.stringValue
                == "save-failed")
        // The directory's own events handled before the two readings are compared.
        try client.call(["cmd": "sync"])

        let printed = try Machine.run(
            Machine.product("autosavectl"), ["--socket", directory.sub("control.sock"), "metrics"])
        #expect(printed.status == 0, "\(printed)")
        let text = printed.stdout
        let verdict = try Self.promtool(text)
        #expect(verdict.status == 0 && verdict.stdout.isEmpty && verdict.stderr.isEmpty, "\(verdict)\n\(text)")
        #expect(Self.value(text, "autosaved_saves_total") == 1, "\(text)")
        #expect(Self.value(text, "autosaved_save_failures_total{errno=\"EISDIR\"}") == 1, "\(text)")
        #expect(Self.value(text, "autosaved_bytes_written_total") == 5)
        #expect(Self.value(text, "autosaved_save_duration_seconds_count") == 1)
        #expect(Self.value(text, "autosaved_save_duration_seconds_bucket{le=\"+Inf\"}") == 1)
        let status = try client.call(["cmd": "status"])
        #expect(Self.value(text, "autosaved_documents") == status["documents"]?.doubleValue, "as status says")
        #expect(Self.value(text, "autosaved_documents_in_state{state=\"failing\"}") == 1)
        #expect(Self.value(text, "autosaved_documents_in_state{state=\"unsaved\"}") == 1)
        #expect(Self.value(text, "autosaved_watched_directories").map { $0 >= 2 } == true, "root and notes/")
        #expect(text.contains("autosaved_build_info{version=\"\(AutosaveVersion.current)\"} 1"))
        #expect(Self.value(text, "autosaved_edits_total{command=\"set\"}") == 2, "two sets: \(text)")
        #expect(Self.value(text, "autosaved_edits_total{command=\"append\"}") == 0)
        #expect(Self.value(text, "autosaved_edits_total{command=\"replace\"}") == 0, "the refused replace: \(text)")
        #expect(Self.value(text, "autosaved_edit_to_durable_seconds_count") == 1, "one edit made durable")
        #expect(Self.value(text, "autosaved_edit_to_durable_seconds_bucket{le=\"+Inf\"}") == 1)
        #expect(Self.value(text, "autosaved_connections") == 2, "the test's client and autosavectl's")
        // BusyPoll= (50 µs): the loop polled after its replies before it slept (whether work
        // came meanwhile — the next request, or the watcher's report of a save — depends on
        // timing); no poll ran on past 50 µs by much.
        let caught = Self.value(text, "autosaved_busy_polls_total{result=\"work\"}")
        let ranOut = Self.value(text, "autosaved_busy_polls_total{result=\"ran-out\"}")
        let polling = Self.value(text, "autosaved_busy_poll_seconds_total")
        #expect(caught != nil && ranOut != nil && caught! + ranOut! >= 1, "\(text)")
        #expect(
            (polling ?? 0) > 0 && (polling ?? 1) <= ((caught ?? 0) + (ranOut ?? 0)) * 0.01,
            "\(polling ?? -1) s of polling in \((caught ?? 0) + (ranOut ?? 0)) polls")

        // The textfile: written every second, always whole; wait for one written after the failure.
        let file = textfiles + "/autosaved.prom"
        var written = ""
        for _ in 0..<300 {
            written = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            if Self.value(written, "autosaved_save_failures_total{errno=\"EISDIR\"}") == 1 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(Self.value(written, "autosaved_saves_total") == 1, "\(written)")
        let fileVerdict = try Self.promtool(written)
        #expect(fileVerdict.status == 0 && fileVerdict.stdout.isEmpty, "\(fileVerdict)")
        #expect(try Disk.names(in: textfiles) == ["autosaved.prom"], "no temporary left beside it")

        try FileManager.default.removeItem(atPath: directory.sub("root/notes/blocked.txt"))
        try client.call(["cmd": "save", "doc": "notes/blocked.txt", "wait": true])
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }
}
