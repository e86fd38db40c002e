import Autosave
import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// `systemd/autosaved.catalog`: an entry for every MESSAGE_ID, built by the real
/// `journalctl --update-catalog`, shown by `journalctl -x` beside a real entry.
@Suite("The journal's message catalog", .serialized)
struct CatalogTests {
    static let catalogPath = ShippedConfigurationTests.repository + "/systemd/autosaved.catalog"

    /// Every ID the daemon sends.
    static let sent = [
        MessageID.documentSaved, MessageID.saveFailed, MessageID.externalChange, MessageID.conflict,
        MessageID.watchLimit, MessageID.started, MessageID.stopping, MessageID.reloaded, MessageID.failedToStart,
        MessageID.journalReplayed, MessageID.journalFailed, MessageID.journalKept,
    ]

    /// The IDs in docs/LOGGING.md's table of message IDs.
    static func documented() throws -> [String] {
        let text = try String(
            contentsOfFile: ShippedConfigurationTests.repository + "/docs/LOGGING.md", encoding: .utf8)
        let table = text.components(separatedBy: "## Message IDs")[1].components(separatedBy: "```")[0]
        return table.split(separator: "\n").filter { $0.hasPrefix("|") }.flatMap {
            $0.matches(of: #/`([0-9a-f]{32})`/#).map { String($0.output.1) }
        }
    }

    /// The catalog entries: ID → the entry's lines.
    static func entries() throws -> [String: [String]] {
        let text = try String(contentsOfFile: catalogPath, encoding: .utf8)
        var result: [String: [String]] = [:]
        var current: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("-- ") {
                current = String(line.dropFirst(3))
                result[current!] = []
            } else if let current {
                result[current]!.append(String(line))
            }
        }
        return result
    }

    /// A directory where the real tool built the catalog database from the shipped file.
    static func built(in directory: TemporaryDirectory) throws -> String {
        let root = directory.sub("catalog-root")
        try FileManager.default.createDirectory(
            atPath: root + "/usr/lib/systemd/catalog", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: catalogPath, toPath: root + "/usr/lib/systemd/catalog/autosaved.catalog")
        let update = try Machine.run("journalctl", ["--update-catalog", "--root=\(root)"])
        #expect(update.status == 0 && update.stderr.isEmpty, "\(update)")
        return root
    }

    @Test(
        "Every MESSAGE_ID sent is random, in docs/LOGGING.md, and has an entry with a subject, text and documentation")
    func complete() throws {
        let entries = try Self.entries()
        #expect(Set(Self.sent).count == Self.sent.count)
        #expect(try Set(Self.documented()) == Set(Self.sent), "docs/LOGGING.md's table lists exactly the IDs sent")
        #expect(Set(entries.keys) == Set(Self.sent), "the catalog has exactly one entry per ID sent")
        for id in Self.sent {
            #expect(!id.hasPrefix("5b2c7d1e9f0a4c6e8d3b1a2f4e6c8a0"), "the old counter-like IDs are not sent: \(id)")
            // A random (version 4) ID, as systemd-id128 new makes.
            #expect(Array(id)[12] == "4", "\(id) is not a random ID")
            let lines = entries[id] ?? []
            for header in ["Subject: ", "Defined-By: autosaved", "Documentation: man:"] {
                #expect(lines.contains { $0.hasPrefix(header) }, "\(id) has no \(header)")
            }
            let body = lines.drop { !$0.isEmpty }.joined(separator: " ")
            #expect(body.count > 150, "\(id) explains too little: \(body)")
        }
    }

    @Test("journalctl --update-catalog builds it into a private directory and lists every entry")
    func builds() throws {
        let directory = TemporaryDirectory("catalog")
        let root = try Self.built(in: directory)
        let listed = try Machine.run("journalctl", ["--root=\(root)", "--list-catalog"]).stdout
        for id in Self.sent { #expect(listed.contains("\(id) autosaved: "), "\(id) is not in \(listed)") }
    }

    @Test(
        "journalctl -x shows the catalog's explanation beside a failed save, with the entry's fields filled in",
        .enabled(
            if: Machine.isRoot && Machine.has("unshare")
                && FileManager.default.isExecutableFile(atPath: "/lib/systemd/systemd-journald")
                && !FileManager.default.fileExists(atPath: "/run/systemd/journal/socket"),
            "needs root, unshare, systemd-journald, and no journald already running"))
    func explained() async throws {
        let directory = TemporaryDirectory("catalog")
        let root = try Self.built(in: directory)
        let journald = try await PrivateJournald()
        defer { journald.stop() }
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Autosave]\nQuietPeriod=50ms\n[Control]\nSocket=\(directory.sub("control.sock"))\n",
            to: config)
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "JOURNAL_STREAM")
        let daemon = try DaemonProcess(Machine.product("autosaved"), ["--config", config], environment: environment)
        await daemon.waitForLine(containing: "started:")
        let client = try ControlClient(socketPath: directory.sub("control.sock"))
        // A failed save: another program puts a directory where the document goes.
        try client.call(["cmd": "set", "doc": "blocked.txt", "text": "x"])
        try FileManager.default.createDirectory(
            atPath: directory.sub("root/blocked.txt"), withIntermediateDirectories: true)
        #expect(
            try client.call(["cmd": "save", "doc": "blocked.txt", "wait": true])["error"]?["code"]?.stringValue
                == "save-failed")
        try FileManager.default.removeItem(atPath: directory.sub("root/blocked.txt"))
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)

        // sd_journal_get_catalog reads /var/lib/systemd/catalog/database: in a mount
        // namespace of its own, journalctl finds the private one there.
        let script = """
            mount --bind '\(root)/var/lib/systemd/catalog' /var/lib/systemd/catalog && \
            exec journalctl -D /run/log/journal -x --no-pager MESSAGE_ID=\(MessageID.saveFailed)
            """
        var shown = ""
        for _ in 0..<50 {
            shown = try Machine.run("unshare", ["-m", "/bin/sh", "-c", script]).stdout
            if shown.contains("Subject:") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let lines = shown.split(separator: "\n").map(String.init)
        let entry = try #require(lines.firstIndex { $0.contains("saving blocked.txt failed") }, "\(shown)")
        #expect(lines.count > entry + 6, "\(shown)")
        #expect(lines[entry + 1].contains("Subject: Saving blocked.txt failed at the step \"rename\""), "\(shown)")
        #expect(shown.contains("Nothing is lost yet: the unsaved edits are still in autosaved's memory"))
        #expect(shown.contains("`autosavectl save blocked.txt --wait`"), "the document's name is filled in")
        #expect(!shown.contains("@DOCUMENT@") && !shown.contains("@OPERATION@") && !shown.contains("@PATH@"))
    }
}
