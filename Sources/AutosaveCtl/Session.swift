import Control
import Dispatch
import Foundation
import Logging

/// Writes a line to standard output at once (events must not wait in a buffer).
func say(_ text: String) {
    writeOut(Data((text + "\n").utf8))
}

/// Writes to standard output; a write that fails (a full disk, a closed pipe) is dropped
/// rather than stopping the process (`FileHandle.write(_:)` traps on any error).
func writeOut(_ data: Data) { try? FileHandle.standardOutput.write(contentsOf: data) }

/// Writes to standard error, as ``writeOut(_:)`` does to standard output.
func writeErr(_ data: Data) { try? FileHandle.standardError.write(contentsOf: data) }

/// One conversation with the daemon: a request, its events, its reply, printed.
final class Session {
    let client: ControlClient
    let json: Bool
    let subcommand: String
    /// `list --names`: only the documents' paths, one per line.
    var namesOnly = false
    private let standardErrorIsTerminal = isatty(2) == 1

    init(client: ControlClient, json: Bool, subcommand: String) {
        self.client = client
        self.json = json
        self.subcommand = subcommand
    }

    func run(_ request: JSONValue) -> Int32 {
        let id: JSONValue
        do { id = try client.send(request) } catch {
            // The daemon may have refused the connection with an error line before closing it.
            if let line = try? client.receive(), let code = line["error"]?["code"]?.stringValue {
                let message = line["error"]?["message"]?.stringValue ?? ""
                writeErr(Data("autosavectl: \(code): \(message)\n".utf8))
                return CommandLineTool.ExitCode.refused
            }
            writeErr(Data("autosavectl: \(error)\n".utf8))
            return CommandLineTool.ExitCode.unavailable
        }
        // Ctrl-C: an export is cancelled in the daemon (which answers "cancelled");
        // anything else just stops waiting.
        signal(SIGINT, SIG_IGN)
        let interrupts = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        let client = client
        let subcommand = subcommand
        interrupts.setEventHandler {
            if subcommand == "export" {
                _ = try? client.send(["cmd": "cancel", "target": id])
            } else {
                writeErr(Data("\n".utf8))
                exit(
                    subcommand == "subscribe" ? CommandLineTool.ExitCode.success : CommandLineTool.ExitCode.interrupted)
            }
        }
        interrupts.resume()
        defer { interrupts.cancel() }

        var progressShown = false
        while true {
            let line: JSONValue
            do { line = try client.receive() } catch {
                writeErr(Data("autosavectl: \(error)\n".utf8))
                return CommandLineTool.ExitCode.unavailable
            }
            if let event = line["event"]?.stringValue {
                if event == "export-progress" {
                    progress(line)
                    progressShown = true
                } else {
                    printEvent(line)
                }
                continue
            }
            if line["id"] != nil && line["id"] != id { continue }
            if progressShown && standardErrorIsTerminal { writeErr(Data("\n".utf8)) }
            if line["ok"]?.boolValue == true {
                if subcommand == "subscribe" {
                    if !json { writeErr(Data("subscribed; Ctrl-C to stop\n".utf8)) }
                    continue
                }
                output(line)
                return CommandLineTool.ExitCode.success
            }
            let code = line["error"]?["code"]?.stringValue ?? "error"
            let message = (line["error"]?["message"]?.stringValue ?? line.serialized(pretty: false))
                .escapingControlCharacters
            if json { say(line.serialized()) }
            writeErr(Data("autosavectl: \(code): \(message)\n".utf8))
            return code == "cancelled" ? CommandLineTool.ExitCode.interrupted : CommandLineTool.ExitCode.refused
        }
    }

    private func progress(_ line: JSONValue) {
        let phase = line["phase"]?.stringValue ?? ""
        let completed = line["completed"]?.intValue ?? 0
        let total = line["total"]?.intValue ?? 0
        let verb = phase == "committing" ? "putting in place" : "writing"
        let text = "export: \(verb) \(completed)/\(total)"
        writeErr(Data((standardErrorIsTerminal ? "\r\u{1B}[K" + text : text + "\n").utf8))
    }

    private func printEvent(_ line: JSONValue) {
        if json {
            say(line.serialized(pretty: false))
        } else {
            let doc = (line["doc"]?.stringValue ?? "?").escapingControlCharacters
            switch line["event"]?.stringValue {
            case "saved":
                let bytes = line["bytes"]?.intValue ?? 0
                let ms = line["duration_ms"]?.doubleValue ?? 0
                say("saved \(doc) (\(bytes) bytes, \(String(format: "%.1f", ms)) ms)")
            case "save-failed":
                say("save-failed \(doc): \((line["message"]?.stringValue ?? "").escapingControlCharacters)")
            case "conflict":
                let copy = (line["copy"]?.stringValue ?? "?").escapingControlCharacters
                if line["copy_holds"]?.stringValue == "disk" {
                    say("conflict \(doc): the edits were kept; the other program's version was saved as \(copy)")
                } else {
                    say("conflict \(doc): the other program's version was kept; the edits were saved as \(copy)")
                }
            case "renamed":
                say("renamed \(doc) to \((line["to"]?.stringValue ?? "?").escapingControlCharacters)")
            case "changed-on-disk", "recreated", "closed":
                say("\(line["event"]?.stringValue ?? "") \(doc)")
            default:
                say(line.serialized(pretty: false))
            }
        }
    }

    // MARK: Human-readable replies

    private func output(_ reply: JSONValue) {
        if json {
            say(reply.serialized())
            return
        }
        switch subcommand {
        case "status":
            printStatus(reply)
        case "list":
            let documents = reply["documents"]?.arrayValue ?? []
            if namesOnly {
                for document in documents { say((document["doc"]?.stringValue ?? "").escapingControlCharacters) }
                return
            }
            if documents.isEmpty {
                say("no open documents")
                return
            }
            say("STATE      CHANGES  SAVED    DOCUMENT")
            for document in documents {
                let state = (document["state"]?.stringValue ?? "").padding(toLength: 10, withPad: " ", startingAt: 0)
                let changes = String(document["changes"]?.intValue ?? 0).padding(
                    toLength: 8, withPad: " ", startingAt: 0)
                let saved = String(document["saved_changes"]?.intValue ?? 0).padding(
                    toLength: 8, withPad: " ", startingAt: 0)
                say("\(state) \(changes) \(saved) \((document["doc"]?.stringValue ?? "").escapingControlCharacters)")
            }
        case "get":
            if let text = reply["text"]?.stringValue {
                writeOut(Data(text.utf8))
            } else if let encoded = reply["base64"]?.stringValue, let data = Data(base64Encoded: encoded) {
                writeOut(data)
            } else if let members = reply["members"]?.arrayValue {
                for member in members { say((member.stringValue ?? "").escapingControlCharacters) }
            } else if let value = reply["value"] {
                say(value.serialized())
            }
        case "save" where reply["unsaved"] != nil:
            let unsaved = reply["unsaved"]?.intValue ?? 0
            say(
                unsaved == 0
                    ? "every document is saved"
                    : unsaved == 1
                        ? "1 document still has unsaved edits" : "\(unsaved) documents still have unsaved edits")
        case "close":
            say("closed \((reply["doc"]?.stringValue ?? "").escapingControlCharacters)")
        case "export":
            for path in reply["paths"]?.arrayValue ?? [] { say((path.stringValue ?? "").escapingControlCharacters) }
        case "reload":
            say(reply["message"]?.stringValue ?? "reloaded")
        case "sync":
            say("synced")
        case "metrics":
            writeOut(Data((reply["text"]?.stringValue ?? "").utf8))
        default:
            if let document = reply["document"] { printDocument(document) }
        }
    }

    private func printDocument(_ document: JSONValue) {
        let path = (document["doc"]?.stringValue ?? "").escapingControlCharacters
        let state = document["state"]?.stringValue ?? ""
        let changes = document["changes"]?.intValue ?? 0
        let saved = document["saved_changes"]?.intValue ?? 0
        var line = "\(path): \(state), \(changes) \(changes == 1 ? "change" : "changes"), \(saved) on disk"
        if let failure = document["failure"], let message = failure["message"]?.stringValue {
            line += "\n  last save failed: \(message.escapingControlCharacters)"
        }
        say(line)
    }

    /// Bytes as MiB with one decimal.
    static func mebibytes(_ bytes: Int) -> String {
        let tenths = (bytes * 10 + (1 << 19)) >> 20
        return "\(tenths / 10).\(tenths % 10) MiB"
    }

    private func printStatus(_ reply: JSONValue) {
        let int = { (key: String) in reply[key]?.intValue ?? 0 }
        say(
            "autosaved \(reply["version"]?.stringValue ?? "?"), up \(int("uptime_seconds")) s, root \(reply["root"]?.stringValue ?? "?")"
        )
        say(
            "documents: \(int("documents")), unsaved: \(int("unsaved")), saving: \(int("saving")), failed: \(int("failed")), saves: \(int("saves"))"
        )
        if let memory = reply["memory"], !memory.isNull {
            let mib = { (key: String) in Self.mebibytes(memory[key]?.intValue ?? 0) }
            say(
                "memory: \(mib("resident_bytes")) resident, \(mib("allocated_bytes")) allocated, \(mib("allocator_free_bytes")) free in the allocator"
            )
        }
        if let ring = reply["io_uring"], let state = ring["state"]?.stringValue {
            let count = { (key: String) in ring[key]?.intValue ?? 0 }
            let clients = "clients: \(int("connections"))"
            switch state {
            case "in-use":
                say(
                    "\(clients); reads and replies through io_uring: \(count("receives")) reads in \(count("receive_batches")) batches, \(count("sends")) sends in \(count("send_batches"))"
                )
            case "unavailable":
                say(
                    "\(clients); io_uring unavailable (\(ring["error"]?.stringValue ?? "?")): a system call for each read and reply"
                )
            case "failed":
                say(
                    "\(clients); io_uring failed and was given up: a system call for each read and reply until a reload"
                )
            default:
                say("\(clients); io_uring off (IOUring=no): a system call for each read and reply")
            }
        }
        if let last = reply["last_save"], !last.isNull {
            say(
                "last save: \((last["doc"]?.stringValue ?? "").escapingControlCharacters) at \(last["at"]?.stringValue ?? "")"
            )
        } else {
            say("last save: none")
        }
        if let failure = reply["last_failure"], !failure.isNull {
            say(
                "last failure: \((failure["message"]?.stringValue ?? "").escapingControlCharacters) (retry at \(failure["retry_at"]?.stringValue ?? "?"))"
            )
        } else {
            say("last failure: none")
        }
        if let watch = reply["watch"], !watch.isNull {
            let count = { (key: String) in watch[key]?.intValue ?? 0 }
            let watched = count("watched_directories")
            var line = "watching: \(watched) \(watched == 1 ? "directory" : "directories")"
            if count("polled_directories") > 0 {
                line += ", \(count("polled_directories")) polled (past fs.inotify.max_user_watches)"
            }
            line +=
                "; other programs' changes: \(count("reloads")) read again, \(count("conflicts")) conflicts, \(count("overflows")) overflows"
            say(line)
        } else {
            say("watching: off")
        }
        if let journal = reply["journal"], let mode = journal["mode"]?.stringValue {
            if mode == "off" {
                say("edit journal: off (unsaved edits live only in memory)")
            } else {
                let count = { (key: String) in journal[key]?.intValue ?? 0 }
                var line =
                    "edit journal: \(mode), \(count("bytes")) bytes in \(count("segments")) segment\(count("segments") == 1 ? "" : "s"), \(count("unsaved_records")) records not yet saved"
                if let failure = journal["failure"]?.stringValue {
                    line += "; FAILING: \(failure.escapingControlCharacters)"
                }
                say(line)
                if let replay = journal["last_replay"], !replay.isNull {
                    let conflicts = replay["conflicts"]?.arrayValue?.count ?? 0
                    let recreated = replay["recreated"]?.arrayValue?.count ?? 0
                    say(
                        "last start-up replayed \(replay["edits"]?.intValue ?? 0) edits to \(replay["documents"]?.intValue ?? 0) documents"
                            + (conflicts == 0
                                ? "" : "; \(conflicts) changed while the daemon was down (conflict copies kept)")
                            + (recreated == 0 ? "" : "; \(recreated) removed while the daemon was down (written again)")
                            + ((replay["unapplied"]?.arrayValue?.isEmpty ?? true)
                                ? "" : "; some could not be replayed (autosavectl --json status lists them)"))
                }
            }
        }
    }
}
