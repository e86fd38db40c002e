import Autosave
import Control
import Foundation
@preconcurrency import Glibc
import TestSupport
import Testing

/// A failed save as the operator must see it while its cause lasts.
struct ExpectedFailure: Sendable, CustomStringConvertible {
    var document: String
    /// The step that failed, as `status`, `STATUS=` and the journal's `OPERATION` name it.
    var operation: String
    var errnoName: String
    var errno: Int32
    /// The failed step's path is this directory or lies beneath it.
    var under: String
    var description: String { "\(document): \(operation) failed with \(errnoName)" }
}

/// The three places a fault must show while it lasts and stop showing once it is gone:
/// `status`, systemd's `STATUS=` (the test's notification socket, read as it comes) and
/// the journal (a private journald the daemon logs to).
final class FaultWitness {
    let rig: FaultRig
    let notices: SystemdNotices
    let journald: NamespacedJournald
    /// The daemon's process when the witness was made: recovery is without a restart.
    let pid: Int32
    /// A connection of its own, opened before any fault (with no descriptor left, the
    /// daemon accepts no new one).
    let client: ControlClient

    init(_ rig: FaultRig, _ journald: NamespacedJournald) throws {
        guard let receiver = rig.notify else { throw Failure("the rig has no notification socket") }
        self.rig = rig
        self.journald = journald
        notices = SystemdNotices(receiver)
        pid = rig.pid
        client = try rig.client()
    }

    func status() throws -> JSONValue { try client.call(["cmd": "status"]) }

    deinit { notices.stop() }

    /// How many notifications came so far: a mark for what comes after it.
    var mark: Int { notices.count }

    /// `status` names the failure (document, step, errno, a path beneath `under`) with
    /// `failing` documents failed, a `STATUS=` from the `since`-th message on says it, and
    /// the journal holds its `save-failed` entry (`ERRNO`, `ERRNO_NAME`, `OPERATION`,
    /// `PATH` the one `status` names, `DOCUMENT`, priority err). Returns that path.
    @discardableResult
    func expectReported(
        _ failure: ExpectedFailure, failing: Int = 1, since: Int, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> String {
        let status = try status()
        let last = status["last_failure"]
        #expect(status["failed"]?.intValue == failing, "failed: \(status)", sourceLocation: sourceLocation)
        #expect(last?["doc"]?.stringValue == failure.document, "\(status)", sourceLocation: sourceLocation)
        #expect(last?["operation"]?.stringValue == failure.operation, "\(status)", sourceLocation: sourceLocation)
        #expect(last?["errno"]?.stringValue == failure.errnoName, "\(status)", sourceLocation: sourceLocation)
        let path = last?["path"]?.stringValue ?? ""
        #expect(
            path == failure.under || path.hasPrefix(failure.under + "/"), "path \(path) not under \(failure.under)",
            sourceLocation: sourceLocation)
        let message = last?["message"]?.stringValue ?? ""
        #expect(
            message.contains(failure.errnoName) && message.contains(path), "\(message)", sourceLocation: sourceLocation)

        let words = "\(failing) failing, last: \(failure)"
        _ = await notices.waitFor(words, since: since, sourceLocation: sourceLocation) { $0.contains(words) }

        let entry = try await journald.waitForEntry(
            "save-failed: \(failure) at \(path)", sourceLocation: sourceLocation
        ) {
            $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed && $0["DOCUMENT"]?.stringValue == failure.document
                && $0["PATH"]?.stringValue == path
        }
        if let entry {
            #expect(entry["PRIORITY"]?.stringValue == "3", "\(entry)", sourceLocation: sourceLocation)
            #expect(entry["OPERATION"]?.stringValue == failure.operation, "\(entry)", sourceLocation: sourceLocation)
            #expect(entry["ERRNO"]?.stringValue == "\(failure.errno)", "\(entry)", sourceLocation: sourceLocation)
            #expect(entry["ERRNO_NAME"]?.stringValue == failure.errnoName, "\(entry)", sourceLocation: sourceLocation)
            #expect(entry["_PID"]?.stringValue == "\(pid)", "\(entry)", sourceLocation: sourceLocation)
            let logged = entry["MESSAGE"]?.stringValue ?? ""
            #expect(
                logged.hasPrefix("saving \(failure.document) failed: \(message); retrying in "), "\(logged)",
                sourceLocation: sourceLocation)
        }
        return path
    }

    /// Once the cause is gone: saved by the retries alone (no request, no restart), every
    /// file in `files` (relative to the root) holding its text, no temporary left; `status`
    /// without a failing or unsaved document; a `STATUS=` from the `since`-th message on
    /// without a failure and with nothing unsaved; and for each document in `saved` a last
    /// `saved` journal entry later than its last `save-failed` one, whose `BYTES_WRITTEN`
    /// is the bytes given (what the retry wrote again from memory).
    func expectRecovered(
        files: [String: String], saved: [String: Int], since: Int, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await rig.waitUntilSaved(sourceLocation: sourceLocation)
        #expect(
            rig.pid == pid && rig.process.process.isRunning, "the same process recovered",
            sourceLocation: sourceLocation)
        for (file, text) in files {
            let bytes = FileManager.default.contents(atPath: rig.root + "/" + file).map { [UInt8]($0) }
            let holds = bytes == Array(text.utf8)
            #expect(
                holds,
                "\(file) on disk: \(bytes.map { "\($0.count) bytes" } ?? "none"), not the \(text.utf8.count) of its text",
                sourceLocation: sourceLocation)
        }
        #expect(Disk.temporaries(under: rig.root).isEmpty, sourceLocation: sourceLocation)
        let status = try status()
        #expect(
            status["failed"]?.intValue == 0 && status["unsaved"]?.intValue == 0, "\(status)",
            sourceLocation: sourceLocation)
        _ = await notices.waitFor("without a failure, nothing unsaved", since: since, sourceLocation: sourceLocation) {
            !$0.contains("fail") && $0.contains(" 0 unsaved")
        }
        for (document, bytes) in saved {
            let entry = try await journald.waitFor(
                "saved \(document) after its last failure", sourceLocation: sourceLocation
            ) { (entries: [JSONValue]) -> JSONValue? in
                let failed = entries.lastIndex {
                    $0["MESSAGE_ID"]?.stringValue == MessageID.saveFailed && $0["DOCUMENT"]?.stringValue == document
                }
                let last = entries.lastIndex {
                    $0["MESSAGE_ID"]?.stringValue == MessageID.documentSaved && $0["DOCUMENT"]?.stringValue == document
                }
                guard let last, last > failed ?? -1 else { return nil }
                return entries[last]
            }
            #expect(
                entry?["BYTES_WRITTEN"]?.stringValue == "\(bytes)", "\(String(describing: entry))",
                sourceLocation: sourceLocation)
        }
    }
}

extension NamespacedJournald {
    /// Runs `command` in journald's mount namespace, the daemon's (a mount made there is
    /// the daemon's alone, and ends with the namespace).
    func inNamespace(_ command: String, _ arguments: [String]) throws -> Machine.Output {
        try Machine.run("nsenter", ["-t", "\(pid)", "-m", "--", command] + arguments)
    }
}
