import Control
import Foundation
@preconcurrency import Glibc
import Logging
import Posix
import TestSupport
import Testing

@testable import Autosave

/// The built autosaved on a temporary root, with the built autosavectl and raw clients.
final class RunningDaemon {
    let directory = TemporaryDirectory("control")
    let process: DaemonProcess
    var root: String { directory.sub("root") }
    var socket: String { directory.sub("run/control.sock") }

    init(_ extra: String = "", quiet: String = "200ms") async throws {
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Autosave]\nQuietPeriod=\(quiet)\nMaxDelay=1h\n[Control]\nSocket=\(directory.sub("run/control.sock"))\n"
                + extra,
            to: config)
        process = try DaemonProcess(Machine.product("autosaved"), ["--config", config])
        await process.waitForLine(containing: "started:")
    }

    func stop() async -> Int32 {
        process.signal(SIGTERM)
        return await process.exitStatus()
    }

    /// A test that ended before ``stop()`` (an error thrown) leaves no daemon running.
    deinit { if process.process.isRunning { process.signal(SIGKILL) } }

    /// Runs the built autosavectl against this daemon.
    @discardableResult
    func ctl(_ arguments: String..., stdin: String? = nil) throws -> Machine.Output {
        try ctl(arguments, stdin: stdin)
    }

    func ctl(_ arguments: [String], stdin: String? = nil) throws -> Machine.Output {
        try Machine.checkDescriptors()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Machine.product("autosavectl"))
        process.arguments = ["--socket", socket] + arguments
        let out = Pipe()
        let err = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let o = Machine.readToEnd(out)
        let e = Machine.readToEnd(err)
        process.waitUntilExit()
        return Machine.Output(
            status: process.terminationStatus, stdout: String(decoding: o, as: UTF8.self),
            stderr: String(decoding: e, as: UTF8.self))
    }

    func client() throws -> ControlClient { try ControlClient(socketPath: socket) }

    func onDisk(_ path: String) throws -> String { try String(contentsOfFile: root + "/" + path, encoding: .utf8) }
}

@Suite("autosavectl against the built daemon", .serialized)
struct ControlEndToEndTests {
    @Test("Every command, with save --wait followed by reading the file from disk")
    func everyCommand() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        var r = try daemon.ctl("set", "notes/todo.txt", "--text", "buy milk\n")
        #expect(r.status == 0 && r.stdout.contains("notes/todo.txt: scheduled"), "\(r)")
        r = try daemon.ctl("append", "notes/todo.txt", stdin: "buy eggs\n")
        #expect(r.status == 0)
        r = try daemon.ctl("replace", "notes/todo.txt", "--offset", "4", "--length", "4", "--text", "oat milk")
        #expect(r.status == 0)
        r = try daemon.ctl("save", "notes/todo.txt", "--wait")
        #expect(r.status == 0 && r.stdout.contains("clean"))
        #expect(try daemon.onDisk("notes/todo.txt") == "buy oat milk\nbuy eggs\n")
        r = try daemon.ctl("get", "notes/todo.txt")
        #expect(r.stdout == "buy oat milk\nbuy eggs\n")

        r = try daemon.ctl("set", "conf.json", "--text", #"{"a": 1}"#)
        #expect(r.status == 0)
        r = try daemon.ctl("patch", "conf.json", "--patch", #"{"b": {"c": [1, 2]}}"#)
        #expect(r.status == 0)
        r = try daemon.ctl("get", "conf.json", "--pointer", "/b/c/1")
        #expect(r.stdout == "2\n")
        r = try daemon.ctl("set", "conf.json", "--text", "{oops")
        #expect(r.status == 1 && r.stderr.contains("bad-request") && r.stderr.contains("line 1, column 2"))

        r = try daemon.ctl("create", "book.package")
        #expect(r.status == 0 && r.stdout == "book.package: scheduled, 1 change, 0 on disk\n", "\(r)")
        r = try daemon.ctl("put-member", "book.package", "ch/1.txt", "--text", "one\n")
        #expect(r.status == 0 && r.stdout == "book.package: scheduled, 2 changes, 0 on disk\n", "\(r)")
        r = try daemon.ctl("put-member", "book.package", "ch/2.txt", stdin: "two\n")
        #expect(r.status == 0)
        r = try daemon.ctl("remove-member", "book.package", "ch/2.txt")
        #expect(r.status == 0)
        r = try daemon.ctl("get", "book.package", "--members")
        #expect(r.stdout == "ch/1.txt\n")
        r = try daemon.ctl("get", "book.package", "--member", "ch/1.txt")
        #expect(r.stdout == "one\n")

        r = try daemon.ctl("save", "--all", "--wait")
        #expect(r.status == 0 && r.stdout.contains("every document is saved"))
        #expect(try daemon.onDisk("book.package/ch/1.txt") == "one\n")
        #expect(
            try JSONValue(parsing: try daemon.onDisk("conf.json"))
                == (try JSONValue(parsing: #"{"a":1,"b":{"c":[1,2]}}"#)))

        r = try daemon.ctl("status")
        #expect(r.status == 0 && r.stdout.contains("documents: 3, unsaved: 0"))
        r = try daemon.ctl("--json", "status")
        let status = try JSONValue(parsing: r.stdout)
        #expect(status["documents"]?.intValue == 3)
        #expect(status["last_save"]?["doc"] != nil)
        #expect(status["watch"]?["watched_directories"]?.intValue ?? 0 >= 3, "the root, notes, book.package")
        #expect(status["watch"]?["polled_directories"]?.intValue == 0)
        r = try daemon.ctl("list")
        #expect(r.stdout.contains("clean") && r.stdout.contains("book.package"))

        try Disk.write("changed behind the daemon's back\n", to: daemon.root + "/notes/todo.txt")
        r = try daemon.ctl("append", "notes/todo.txt", "--text", "unsaved\n")
        r = try daemon.ctl("revert", "notes/todo.txt")
        #expect(r.status == 0)
        #expect(try daemon.ctl("get", "notes/todo.txt").stdout == "changed behind the daemon's back\n")

        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: false)
        r = try daemon.ctl("export", "notes/todo.txt", "conf.json", "book.package", "--to", "out")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("export: putting in place 3/3"))
        #expect(try Disk.names(in: daemon.root + "/out") == ["book.package", "conf.json", "todo.txt"])
        #expect(try daemon.onDisk("out/book.package/ch/1.txt") == "one\n")

        r = try daemon.ctl("close", "notes/todo.txt")
        #expect(r.status == 0)
        r = try daemon.ctl("open", "notes/todo.txt")
        #expect(r.status == 0)
        r = try daemon.ctl("reload")
        #expect(r.status == 0 && r.stdout.contains("configuration reloaded"))
        #expect(await daemon.stop() == 0)
    }

    @Test("Usage errors exit 64, refusals 1, an unreachable daemon 69; --help everywhere")
    func exitCodes() async throws {
        let daemon = try await RunningDaemon()
        #expect(try daemon.ctl("get", "absent.txt").status == 1)
        #expect(try daemon.ctl("frobnicate").status == 64)
        #expect(try daemon.ctl("replace", "a.txt", "--offset", "x", "--length", "1", "--text", "y").status == 64)
        #expect(try daemon.ctl("set").status == 64)
        let both = try daemon.ctl("set", "a.txt", "--text", "x", "--file", "/etc/hostname")
        #expect(both.status == 64 && both.stderr.contains("give --text or --file, not both"), "\(both)")
        let patchBoth = try daemon.ctl("patch", "a.json", "--patch", "{}", "--file", "/etc/hostname")
        #expect(patchBoth.status == 64 && patchBoth.stderr.contains("not both"), "\(patchBoth)")
        let missing = try daemon.ctl("set", "a.txt", "--file", daemon.directory.sub("no-such-file"))
        #expect(missing.status == 64 && missing.stderr.contains("ENOENT"), "\(missing)")
        #expect(try daemon.ctl("get", "a.txt").status == 1, "nothing was sent")
        for command in ControlProtocol.commands where !["save-all", "cancel"].contains(command) {
            let help = try daemon.ctl(command, "--help")
            #expect(
                help.status == 0 && help.stdout.contains("OVERVIEW:") && help.stdout.contains("USAGE:")
                    && help.stdout.contains("OPTIONS:"), "\(command)")
        }
        let unreachable = try Machine.run(
            Machine.product("autosavectl"), ["--socket", daemon.directory.sub("nothing.sock"), "status"])
        #expect(unreachable.status == 69)
        #expect(unreachable.stderr.contains("is autosaved running?"))
        #expect(await daemon.stop() == 0)
    }

    @Test("subscribe prints save events as they happen")
    func subscribe() async throws {
        let daemon = try await RunningDaemon(quiet: "50ms")
        let subscriber = try DaemonProcess(
            Machine.product("autosavectl"), ["--socket", daemon.socket, "subscribe", "watched.txt"])
        await subscriber.waitForLine(containing: "subscribed")
        // other.txt is saved first, and its event would be sent before watched.txt's: once
        // watched.txt's arrives, an event of other.txt let through would be there already.
        try daemon.ctl("set", "other.txt", "--text", "x")
        try daemon.ctl("save", "other.txt", "--wait")
        try daemon.ctl("set", "watched.txt", "--text", "hello")
        let line = await subscriber.waitForLine(containing: "saved watched.txt")
        #expect(line?.contains("(5 bytes") == true)
        #expect(!subscriber.output.contains { $0.contains("other.txt") })
        subscriber.signal(SIGINT)
        #expect(await subscriber.exitStatus() == 0)
        #expect(await daemon.stop() == 0)
    }
}

@Suite("The control socket against raw and hostile clients", .serialized)
struct ControlSocketTests {
    /// A raw client speaking bytes.
    final class Raw {
        let fd: FileDescriptor
        init(_ path: String) throws {
            fd = try FileDescriptor.unixSocket()
            try fd.connect(toPath: path)
            // A reply that never comes fails the test (the read says EAGAIN) instead of hanging it.
            var timeout = timeval(tv_sec: 30, tv_usec: 0)
            setsockopt(fd.rawValue, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        deinit { try? fd.close() }
        func send(_ text: String) throws { try fd.writeAll(Array(text.utf8)) }
        func line() throws -> JSONValue? {
            var bytes: [UInt8] = []
            var byte: UInt8 = 0
            while true {
                let n = try withUnsafeMutableBytes(of: &byte) { try fd.read(into: $0) }
                if n == 0 { return nil }
                if byte == 10 { return try JSONValue(parsing: bytes) }
                bytes.append(byte)
            }
        }
        func code() throws -> String? { try line()?["error"]?["code"]?.stringValue }
        /// Sets `doc` to `megabytes` MiB of `character`, a mebibyte a request: a document
        /// whose save takes tens of milliseconds.
        /// Asks `status` until it counts a save running (at most 10,000 times); whether it did.
        func sawSaveRunning() throws -> Bool {
            for _ in 0..<10_000 {
                try send(#"{"cmd":"status"}"# + "\n")
                if let saving = try line()?["saving"]?.intValue, saving > 0 { return true }
            }
            return false
        }

        func fill(_ doc: String, megabytes: Int, of character: Character) throws {
            let chunk = String(repeating: character, count: 1 << 20)
            for index in 0..<megabytes {
                try send(#"{"cmd":"\#(index == 0 ? "set" : "append")","doc":"\#(doc)","text":"\#(chunk)"}"# + "\n")
                #expect(try line()?["ok"] == true)
            }
        }
    }

    @Test(
        "A client that pipelines requests and shuts its side down gets every reply, then end of file; SIGTERM with idle and subscribed clients exits 0 and ends them",
        .timeLimit(.minutes(1)))
    func halfCloseAndShutdown() async throws {
        let daemon = try await RunningDaemon()
        let pipelined = try Raw(daemon.socket)
        // Three requests in one write, then the write side shut down, as `socat` does.
        try pipelined.send(
            #"{"id":1,"cmd":"set","doc":"a.txt","text":"one"}"# + "\n"
                + #"{"id":2,"cmd":"append","doc":"a.txt","text":" two"}"# + "\n"
                + #"{"id":3,"cmd":"get","doc":"a.txt"}"# + "\n")
        try pipelined.fd.shutdownWriting()
        #expect(try pipelined.line()?["id"] == 1)
        #expect(try pipelined.line()?["id"] == 2)
        #expect(try pipelined.line()?["text"]?.stringValue == "one two")
        #expect(try pipelined.line() == nil, "then end of file")
        let idle = try Raw(daemon.socket)
        let subscribed = try Raw(daemon.socket)
        try subscribed.send(#"{"id":1,"cmd":"subscribe"}"# + "\n")
        #expect(try subscribed.line()?["ok"] == true)
        #expect(await daemon.stop() == 0, "connected clients do not hold the daemon up")
        #expect(try idle.line() == nil, "an idle client sees end of file")
        while try subscribed.line() != nil {}  // events sent before the end, then end of file
        #expect(try daemon.onDisk("a.txt") == "one two", "the edits were saved at shutdown")
    }

    @Test(
        "Many clients whose requests arrive in pieces, interleaved: each connection's pieces are joined, and each gets its own replies",
        .timeLimit(.minutes(1)))
    func interleavedPieces() async throws {
        let daemon = try await RunningDaemon()
        // All connections are read into one buffer of the loop's: what one leaves
        // unfinished must be kept with that connection, not mixed with the next one's.
        let clients = try (0..<20).map { _ in try Raw(daemon.socket) }
        let requests = clients.indices.map { index in
            #"{"id":\#(index),"cmd":"set","doc":"p/c\#(index).txt","text":"text of client \#(index) \#(String(repeating: "x", count: index * 37))"}"#
                + "\n" + #"{"id":"g\#(index)","cmd":"get","doc":"p/c\#(index).txt"}"# + "\n"
        }
        // Every request cut in three, sent round-robin: first pieces, then second, then third.
        let pieces = requests.map { request -> [String] in
            let bytes = Array(request.utf8)
            let cuts = [bytes.count / 3, 2 * bytes.count / 3]
            return [
                String(decoding: bytes[..<cuts[0]], as: UTF8.self),
                String(decoding: bytes[cuts[0]..<cuts[1]], as: UTF8.self),
                String(decoding: bytes[cuts[1]...], as: UTF8.self),
            ]
        }
        // After each round, another client's round trip: its reply comes from a pass that
        // read whatever the others had sent before it, so every piece is read on its own.
        let witness = try Raw(daemon.socket)
        for part in 0..<3 {
            for (index, client) in clients.enumerated() { try client.send(pieces[index][part]) }
            try witness.send(#"{"id":"w\#(part)","cmd":"list"}"# + "\n")
            #expect(try witness.line()?["id"]?.stringValue == "w\(part)")
        }
        for (index, client) in clients.enumerated() {
            let edit = try #require(try client.line())
            #expect(edit["id"] == .number(String(index)))
            #expect(edit["document"]?["doc"]?.stringValue == "p/c\(index).txt")
            let read = try #require(try client.line())
            #expect(read["id"]?.stringValue == "g\(index)")
            #expect(
                read["text"]?.stringValue == "text of client \(index) " + String(repeating: "x", count: index * 37))
        }
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "One connection editing several documents in turn: every reply names its own document, type and counts, and echoes its id",
        .timeLimit(.minutes(1)))
    func editsAcrossDocuments() async throws {
        let daemon = try await RunningDaemon()
        let raw = try Raw(daemon.socket)
        // Each reply: (id, doc, changes) expected, or an error code (creating a document
        // counts as its first change). The connection keeps
        // the last document it edited: switching documents, a path written another way,
        // another type, a refused path and a refused edit in between must not confuse it.
        let steps: [(request: String, id: JSONValue?, doc: String?, changes: Int?, error: String?)] = [
            (#"{"id":1,"cmd":"set","doc":"a.txt","text":"a"}"#, .number("1"), "a.txt", 2, nil),
            (#"{"id":"s-2","cmd":"append","doc":"a.txt","text":"b"}"#, .string("s-2"), "a.txt", 3, nil),
            (#"{"id":3,"cmd":"set","doc":"./a.txt","text":"c"}"#, .number("3"), "a.txt", 4, nil),
            (#"{"id":null,"cmd":"set","doc":"b.json","text":"{\"k\":1}"}"#, .null, "b.json", 2, nil),
            (#"{"id":true,"cmd":"set","doc":"b.json","text":"{oops"}"#, .bool(true), nil, nil, "bad-request"),
            (#"{"id":-6,"cmd":"set","doc":"../x.txt","text":"x"}"#, .number("-6"), nil, nil, "invalid-path"),
            (#"{"id":7,"cmd":"append","doc":"a.txt","text":"d"}"#, .number("7"), "a.txt", 5, nil),
            (#"{"cmd":"set","doc":"b.json","text":"[2]"}"#, nil, "b.json", 3, nil),
            (#"{"id":9,"cmd":"append","doc":"missing.txt","text":"m"}"#, .number("9"), nil, nil, "not-found"),
            (#"{"id":10,"cmd":"set","doc":"d\/e.txt","text":"e"}"#, .number("10"), "d/e.txt", 2, nil),
            (#"{"id":11,"cmd":"set","doc":"a.txt","text":"f"}"#, .number("11"), "a.txt", 6, nil),
            // A name the reply must escape, made and then edited as an open document.
            (#"{"id":12,"cmd":"set","doc":"q\"uote\\d.txt","text":"q"}"#, .number("12"), #"q"uote\d.txt"#, 2, nil),
            (#"{"id":13,"cmd":"append","doc":"q\"uote\\d.txt","text":"r"}"#, .number("13"), #"q"uote\d.txt"#, 3, nil),
        ]
        try raw.send(steps.map { $0.request + "\n" }.joined())
        var types: [String: String] = [:]
        for step in steps {
            let reply = try #require(try raw.line(), "a reply to \(step.request)")
            #expect(reply["id"] == step.id, "\(step.request)")
            if let code = step.error {
                #expect(reply["error"]?["code"]?.stringValue == code, "\(step.request)")
                continue
            }
            let document = try #require(reply["document"], "\(step.request)")
            #expect(document["doc"]?.stringValue == step.doc, "\(step.request)")
            #expect(document["changes"] == .number(String(step.changes!)), "\(step.request)")
            types[step.doc!] = document["type"]?.stringValue
        }
        // The types in the replies are the documents' own, as `list` gives them.
        try raw.send(#"{"cmd":"list"}"# + "\n")
        let listed = try #require(try raw.line()?["documents"]?.arrayValue)
        #expect(listed.count == 4)
        for entry in listed {
            let doc = try #require(entry["doc"]?.stringValue)
            #expect(types[doc] == entry["type"]?.stringValue, "\(doc)")
        }
        #expect(types["a.txt"] != types["b.json"])
        #expect(await daemon.stop() == 0)
        #expect(try daemon.onDisk("a.txt") == "f")
        #expect(try daemon.onDisk("b.json").contains("2"))
    }

    @Test(
        "A client that half-closes while its connection waits for a durable save gets every reply, then end of file",
        .timeLimit(.minutes(1)))
    func halfCloseWhileWaiting() async throws {
        let daemon = try await RunningDaemon()
        let other = try Raw(daemon.socket)
        let chunk = String(repeating: "y", count: 1 << 20)
        for index in 0..<8 {
            let command = index == 0 ? "set" : "append"
            try other.send(#"{"cmd":"\#(command)","doc":"big.txt","text":"\#(chunk)"}"# + "\n")
            #expect(try other.line()?["ok"] == true)
        }
        let raw = try Raw(daemon.socket)
        try raw.send(#"{"id":0,"cmd":"save","doc":"big.txt","wait":true}"# + "\n")
        // Once another client's reply is back, the loop has read the save request (replies
        // go out at the end of the pass that read them) and handed it to the connection's
        // task, which writes 8 MB durably: what follows, and the end of the client's side,
        // arrive while the connection is not read, and must still be seen afterwards.
        try other.send(#"{"id":"o","cmd":"set","doc":"o.txt","text":"o"}"# + "\n")
        #expect(try other.line()?["id"]?.stringValue == "o")
        try raw.send(
            #"{"id":1,"cmd":"set","doc":"h.txt","text":"half"}"# + "\n" + #"{"id":2,"cmd":"get","doc":"h.txt"}"# + "\n")
        try raw.fd.shutdownWriting()
        #expect(try raw.line()?["id"] == 0)
        #expect(try raw.line()?["id"] == 1)
        #expect(try raw.line()?["text"]?.stringValue == "half")
        #expect(try raw.line() == nil, "then end of file")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "Pipelined requests that are answered at once and requests that wait (save --wait, sync, status) are answered in order",
        .timeLimit(.minutes(1)))
    func pipelinedOrder() async throws {
        let daemon = try await RunningDaemon()
        let raw = try Raw(daemon.socket)
        let requests = [
            #"{"id":1,"cmd":"set","doc":"o.txt","text":"a"}"#,
            #"{"id":2,"cmd":"save","doc":"o.txt","wait":true}"#,
            #"{"id":3,"cmd":"append","doc":"o.txt","text":"b"}"#,
            #"{"id":4,"cmd":"sync"}"#,
            #"{"id":5,"cmd":"append","doc":"o.txt","text":"c"}"#,
            #"{"id":6,"cmd":"get","doc":"o.txt"}"#,
            #"{"id":7,"cmd":"set","doc":"../x.txt","text":"no"}"#,
            #"{"id":8,"cmd":"status"}"#,
            #"{"id":9,"cmd":"list"}"#,
        ]
        // Every request in one write, and again one byte at a time.
        for chunked in [false, true] {
            let text = requests.joined(separator: "\n") + "\n"
            if chunked {
                for byte in text.utf8 { try raw.fd.writeAll([byte]) }
            } else {
                try raw.send(text)
            }
            var replies: [JSONValue] = []
            for _ in requests { replies.append(try #require(try raw.line())) }
            #expect(replies.map { $0["id"]?.intValue } == Array(1...9), "replies in request order")
            #expect(replies[1]["document"]?["state"]?.stringValue == "clean", "save --wait answered once durable")
            #expect(replies[5]["text"]?.stringValue == "abc")
            #expect(replies[6]["error"]?["code"]?.stringValue == "invalid-path")
            #expect(replies[7]["ok"] == true && replies[8]["documents"]?.arrayValue?.count == 1)
        }
        // The durable save wrote "a"; the autosave after it may have written "abc" since.
        #expect(["a", "abc"].contains(try daemon.onDisk("o.txt")))
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A save --wait is answered with the document as the save left it: clean, or due again when an edit came while it was written",
        .timeLimit(.minutes(1)))
    func waitedSaveReplyDescribesTheDocument() async throws {
        let daemon = try await RunningDaemon()
        let raw = try Raw(daemon.socket)
        let other = try Raw(daemon.socket)
        // Nothing else edits it: the reply tells the save that answers it.
        try raw.send(#"{"id":1,"cmd":"set","doc":"small.txt","text":"one"}"# + "\n")
        #expect(try raw.line()?["ok"] == true)
        try raw.send(#"{"id":2,"cmd":"save","doc":"small.txt","wait":true}"# + "\n")
        let clean = try #require(try raw.line()?["document"])
        #expect(clean["state"]?.stringValue == "clean" && clean["saved_changes"] == clean["changes"])
        #expect(clean["saves"] == 1 && clean["last_saved"]?.stringValue != nil && clean["save_at"] == nil)
        #expect(try daemon.onDisk("small.txt") == "one")
        // An edit from another client while the save is written: the save covers the
        // edits before it, and its reply says the next save is due.
        try raw.fill("big.txt", megabytes: 16, of: "z")
        try raw.send(#"{"id":3,"cmd":"save","doc":"big.txt","wait":true}"# + "\n")
        #expect(try other.sawSaveRunning(), "status saw the save running")
        try other.send(#"{"id":4,"cmd":"append","doc":"big.txt","text":"!"}"# + "\n")
        #expect(try other.line()?["ok"] == true)
        let saved = try #require(try raw.line())
        #expect(saved["id"] == 3 && saved["ok"] == true)
        let document = try #require(saved["document"])
        #expect(document["state"]?.stringValue == "scheduled" && document["save_at"]?.stringValue != nil)
        let changes = try #require(document["changes"]?.intValue)
        #expect(document["saved_changes"]?.intValue == changes - 1 && document["saves"] == 1)
        #expect(await daemon.stop() == 0)
        #expect(try daemon.onDisk("big.txt").hasSuffix("zz!"), "the edit made during the save was saved at exit")
    }

    @Test(
        "A request sent in a write of its own while the client's save --wait is being written is answered right after the save",
        .timeLimit(.minutes(1)))
    func requestDuringWaitedSave() async throws {
        let daemon = try await RunningDaemon()
        let raw = try Raw(daemon.socket)
        let observer = try Raw(daemon.socket)
        for round in 1...3 {
            // Large enough that its save (on a save thread) takes tens of milliseconds.
            try raw.fill("big.txt", megabytes: 16, of: "y")
            try raw.send(#"{"id":1,"cmd":"save","doc":"big.txt","wait":true}"# + "\n")
            // Once status says the save runs, its line has been read (and nothing after it):
            // the next line comes with readiness of its own while the client's task waits.
            #expect(try observer.sawSaveRunning(), "status saw the save running")
            let command = round == 1 ? "set" : "append"
            try raw.send(#"{"id":2,"cmd":"\#(command)","doc":"small.txt","text":"\#(round)"}"# + "\n")
            let saved = try #require(try raw.line())
            #expect(saved["id"] == 1 && saved["document"]?["state"]?.stringValue == "clean")
            let edited = try #require(try raw.line(), "the second request is read after the save")
            #expect(edited["id"] == 2 && edited["ok"] == true)
        }
        try raw.send(#"{"id":3,"cmd":"get","doc":"small.txt"}"# + "\n")
        #expect(try raw.line()?["text"]?.stringValue == "123")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A client that pipelines 3,000 edits (several reads' worth, all queued while it waits for a durable save) gets every reply in order; another client is served meanwhile",
        .timeLimit(.minutes(1)))
    func longPipeline() async throws {
        let daemon = try await RunningDaemon()
        let heavy = try Raw(daemon.socket)
        let other = try Raw(daemon.socket)
        // A document large enough that its durable save takes a while.
        try other.fill("big.txt", megabytes: 8, of: "x")
        var text = #"{"id":0,"cmd":"save","doc":"big.txt","wait":true}"# + "\n"
        text += #"{"id":1,"cmd":"set","doc":"long.txt","text":""}"# + "\n"
        for index in 2...3001 {
            text += #"{"id":\#(index),"cmd":"append","doc":"long.txt","text":"line \#(index - 1)\n"}"# + "\n"
        }
        #expect(text.utf8.count > 2 * 64 * 1024, "several reads' worth")
        // One write: while the save is written the connection is not read, so everything
        // after it is already in the socket when reading resumes — more than one read
        // takes, with no new readiness to come.
        try heavy.send(text)
        try other.send(#"{"id":"x","cmd":"set","doc":"other.txt","text":"served"}"# + "\n")
        #expect(try other.line()?["id"]?.stringValue == "x")
        for index in 0...3001 {
            let reply = try #require(try heavy.line())
            #expect(reply["id"]?.intValue == index && reply["ok"] == true)
            if reply["id"]?.intValue != index { break }
        }
        try heavy.send(#"{"id":"get","cmd":"get","doc":"long.txt"}"# + "\n")
        let lines = try heavy.line()?["text"]?.stringValue?.split(separator: "\n")
        #expect(lines?.count == 3000 && lines?.first == "line 1" && lines?.last == "line 3000")
        #expect(await daemon.stop() == 0)
    }

    /// Compared name by name, 300,000 names took minutes of the loop (every client waited):
    /// the suite's time limit ends the test as failed.
    @Test(
        "Fields the daemon does not know: 300,000 of them are answered at once, a name given twice is refused, and names equal only by Unicode normalization are two names",
        .timeLimit(.minutes(1)))
    func manyUnknownFields() async throws {
        let daemon = try await RunningDaemon()
        let raw = try Raw(daemon.socket)
        var line = #"{"id":1,"cmd":"status""#
        for index in 0..<300_000 { line += #","k\#(index)":0"# }
        try raw.send(line + "}\n")
        #expect(try raw.line()?["ok"] == true)
        try raw.send(#"{"id":2,"cmd":"status","x":1,"y":2,"x":3}"# + "\n")
        let twice = try raw.line()
        #expect(
            twice?["error"]?["message"]?.stringValue == #"field "x" is given more than once"#,
            "\(String(describing: twice))")
        try raw.send(#"{"id":3,"cmd":"status","\u00e9":1,"e\u0301":2}"# + "\n")
        #expect(try raw.line()?["ok"] == true)
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "Malformed JSON, unknown commands, missing fields, a 10 MB line: each gets its error and the daemon serves on")
    func malformed() async throws {
        let daemon = try await RunningDaemon()
        let raw = try Raw(daemon.socket)
        try raw.send("this is not json\n")
        #expect(try raw.code() == "bad-request")
        try raw.send("[1,2,3]\n")
        #expect(try raw.code() == "bad-request")
        try raw.send(#"{"id": 7, "cmd": "teleport"}"# + "\n")
        let unknown = try raw.line()
        #expect(unknown?["id"]?.intValue == 7 && unknown?["error"]?["code"]?.stringValue == "unknown-command")
        try raw.send(#"{"id": 8, "cmd": "set"}"# + "\n")
        let missing = try raw.line()
        #expect(
            missing?["error"]?["code"]?.stringValue == "invalid-path"
                || missing?["error"]?["code"]?.stringValue == "bad-request")
        #expect(missing?["error"]?["message"]?.stringValue?.contains("\"doc\"") == true)
        try raw.send(#"{"id": 9, "cmd": "replace", "doc": "a.txt", "offset": "x", "length": 1, "text": ""}"# + "\n")
        #expect(try raw.code() == "bad-request")
        // A field given twice is refused, whichever field it is; nothing is applied.
        try raw.send(#"{"id": 5, "cmd": "list", "cmd": "status"}"# + "\n")
        let twice = try raw.line()
        #expect(twice?["id"] == 5 && twice?["error"]?["code"]?.stringValue == "bad-request")
        #expect(twice?["error"]?["message"]?.stringValue == #"field "cmd" is given more than once"#)
        try raw.send(#"{"cmd": "set", "doc": "twice.txt", "doc": "../twice.txt", "text": "x"}"# + "\n")
        #expect(try raw.code() == "bad-request")
        try raw.send(#"{"cmd": "set", "doc": "twice.txt", "text": "x", "text": "y"}"# + "\n")
        #expect(try raw.code() == "bad-request")
        #expect(try daemon.ctl("get", "twice.txt").status == 1, "neither edit was applied")
        // Numbers at and past the ends of what an Int holds: each is refused, none stops the daemon.
        try raw.send(#"{"cmd": "set", "doc": "a.txt", "text": "abc"}"# + "\n")
        #expect(try raw.line()?["ok"] == true)
        for (offset, length, message) in [
            // Whole numbers a signed 64-bit integer holds, outside the text: refused by the document.
            ("9223372036854775807", "1", "are outside the text"), ("1", "9223372036854775807", "are outside the text"),
            ("-9223372036854775808", "-1", "are outside the text"), ("-1", "1", "are outside the text"),
            ("0", "-1", "are outside the text"),
            (
                "9223372036854775808", "0",
                #"field "offset" is out of range: a whole number from -9223372036854775808 to 9223372036854775807"#
            ),
            ("0", "-9223372036854775809", #"field "length" is out of range"#),
            ("99999999999999999999999", "0", "out of range"), ("1e400", "0", "out of range"),
            ("2.5", "0", #"field "offset" must be a whole number"#),
            ("0", "1e-3", #"field "length" must be a whole number"#),
        ] {
            let request = #"{"cmd":"replace","doc":"a.txt","offset":\#(offset),"length":\#(length),"text":"x"}"#
            try raw.send(request + "\n")
            let reply = try raw.line()
            #expect(reply?["error"]?["code"]?.stringValue == "bad-request", "\(request)")
            let said = reply?["error"]?["message"]?.stringValue ?? ""
            #expect(said.contains(message), "\(request) → \(said)")
        }
        try raw.send(#"{"cmd": "get", "doc": "a.txt"}"# + "\n")
        #expect(try raw.line()?["text"]?.stringValue == "abc", "nothing was applied")
        try raw.send(#"{"cmd": "set", "doc": "big.txt", "text": ""# + String(repeating: "x", count: 10 << 20) + "\"}\n")
        #expect(try raw.code() == "too-large")
        try raw.send(#"{"id": 10, "cmd": "status"}"# + "\n")
        #expect(try raw.line()?["ok"]?.boolValue == true, "the same connection still works after the oversized line")
        #expect(try daemon.ctl("status").status == 0)
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "Documents whose names are one character (x, é, d/y, d/é/z) are created, saved durably and read back; the daemon serves on"
    )
    func oneCharacterNames() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        for name in ["x", "é", "d/y", "d/é/z"] {
            let set = try daemon.ctl("set", name, "--text", "in \(name)\n")
            #expect(set.status == 0, "\(set)")
            let save = try daemon.ctl("save", name, "--wait")
            #expect(save.status == 0 && save.stdout.contains("clean"), "\(save)")
            #expect(try daemon.onDisk(name) == "in \(name)\n")
        }
        #expect(try daemon.ctl("put-member", "p.package", "m", "--text", "m\n").status == 1, "no such package yet")
        #expect(try daemon.ctl("create", "p.package").status == 0)
        #expect(try daemon.ctl("put-member", "p.package", "m", "--text", "m\n").status == 0)
        #expect(try daemon.ctl("save", "p.package", "--wait").status == 0)
        #expect(try daemon.onDisk("p.package/m") == "m\n")
        #expect(try daemon.ctl("get", "x").stdout == "in x\n")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A document name with control characters (a newline, ESC, DEL, U+2028) is shown escaped by autosavectl and in the daemon's log lines: no forged line, nothing for a terminal to act on"
    )
    func controlCharactersInNames() async throws {
        let daemon = try await RunningDaemon(quiet: "20ms")
        let name = "evil\n<3>forged\u{1B}[2J\u{7F}\u{2028}.txt"
        let raw = try Raw(daemon.socket)
        try raw.send(
            JSONValue.object([("cmd", "set"), ("doc", .string(name)), ("text", "x")]).serialized(pretty: false) + "\n")
        #expect(try raw.line()?["ok"] == true)
        try raw.send(
            JSONValue.object([("cmd", "save"), ("doc", .string(name)), ("wait", true)]).serialized(pretty: false) + "\n"
        )
        #expect(try raw.line()?["ok"] == true)
        #expect(try daemon.onDisk(name) == "x", "the name itself is kept as given")

        let shown = #"evil\n<3>forged\u{1B}[2J\u{7F}\u{2028}.txt"#
        let list = try daemon.ctl("list")
        #expect(list.stdout.split(separator: "\n").count == 2, "a heading and one line: \(list.stdout)")
        #expect(list.stdout.contains(shown))
        #expect(!list.stdout.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x2028 })
        let json = try daemon.ctl("--json", "list")
        #expect(
            try JSONValue(parsing: json.stdout)["documents"]?.arrayValue?.first?["doc"]?.stringValue == name,
            "JSON keeps the name")
        #expect(await daemon.stop() == 0)
        let saved = daemon.process.output.filter { $0.contains("saved evil") }
        #expect(saved.count == 1 && saved[0].contains(shown), "\(saved)")
        #expect(!daemon.process.output.contains { $0.hasPrefix("<3>forged") })
    }

    @Test("status reports the daemon's memory: a 6 MiB document adds about its size, and closing it gives it back")
    func statusMemory() async throws {
        let daemon = try await RunningDaemon("[Journal]\nMode=off\n")
        let client = try daemon.client()
        func memory() throws -> (resident: Int, allocated: Int, free: Int) {
            let memory = try client.call(["cmd": "status"])["memory"]
            return (
                memory?["resident_bytes"]?.intValue ?? -1, memory?["allocated_bytes"]?.intValue ?? -1,
                memory?["allocator_free_bytes"]?.intValue ?? -1
            )
        }
        let before = try memory()
        #expect(before.resident > 1 << 20 && before.allocated > 0 && before.free >= 0, "\(before)")
        let size = 6 << 20
        let text = String(repeating: "m", count: size)
        // Within a tenth: the daemon's other allocations come and go meanwhile.
        let most = size * 9 / 10
        #expect(try client.call(["cmd": "set", "doc": "big.txt", "text": .string(text)])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "big.txt", "wait": true])["ok"] == true)
        let holding = try memory()
        #expect(holding.allocated - before.allocated >= most, "its text is allocated: \(before) → \(holding)")
        #expect(holding.resident - before.resident >= most, "and resident: \(before) → \(holding)")
        #expect(try client.call(["cmd": "close", "doc": "big.txt"])["ok"] == true)
        let after = try memory()
        #expect(holding.allocated - after.allocated >= most, "closed, its text is freed: \(holding) → \(after)")
        let r = try daemon.ctl("status")
        #expect(r.status == 0 && r.stdout.contains("memory: "), "\(r)")
        #expect(await daemon.stop() == 0)
    }

    @Test("Names that differ only in Unicode normalization are two documents, each with its own file, as on disk")
    func normalizationDistinctNames() async throws {
        let precomposed = "\u{e9}.txt"
        let combining = "e\u{301}.txt"
        let daemon = try await RunningDaemon()
        try Disk.write("precomposed\n", to: daemon.root + "/" + precomposed)
        try Disk.write("combining\n", to: daemon.root + "/" + combining)
        let client = try daemon.client()
        #expect(try client.call(["cmd": "get", "doc": .string(precomposed)])["text"]?.stringValue == "precomposed\n")
        #expect(try client.call(["cmd": "get", "doc": .string(combining)])["text"]?.stringValue == "combining\n")
        let listed = try client.call(["cmd": "list"])["documents"]?.arrayValue ?? []
        #expect(Set(listed.compactMap { $0["doc"]?.stringValue?.utf8.map { $0 } }).count == 2, "\(listed)")
        #expect(try client.call(["cmd": "set", "doc": .string(precomposed), "text": "new\n"])["ok"] == true)
        #expect(try client.call(["cmd": "append", "doc": .string(combining), "text": "more\n"])["ok"] == true)
        #expect(try client.call(["cmd": "save-all", "wait": true])["ok"] == true)
        #expect(try daemon.onDisk(precomposed) == "new\n")
        #expect(try daemon.onDisk(combining) == "combining\nmore\n", "the other file is not written over")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A '/' followed by a combining mark separates two names, as the kernel reads it: './', '..' and empty components before it are seen, and package members clash by their bytes"
    )
    func combiningMarkAfterSlash() async throws {
        let daemon = try await RunningDaemon()
        let name = "\u{301}y.txt"
        try Disk.write("y\n", to: daemon.root + "/" + name)
        try FileManager.default.createDirectory(atPath: daemon.root + "/x", withIntermediateDirectories: true)
        let client = try daemon.client()
        // "./" before the mark is trimmed as it is before any name: one document for the file.
        let opened = try client.call(["cmd": "open", "doc": .string("./" + name)])
        #expect(opened["ok"] == true, "\(opened)")
        #expect(opened["document"]?["doc"]?.stringValue?.utf8.elementsEqual(name.utf8) == true, "\(opened)")
        let listed = try client.call(["cmd": "list"])["documents"]?.arrayValue ?? []
        #expect(listed.count == 1, "\(listed)")
        for bad in ["x//" + name, "x/./" + name, "x/../" + name, "../" + name] {
            let reply = try client.call(["cmd": "set", "doc": .string(bad), "text": "no\n"])
            #expect(reply["error"]?["code"]?.stringValue == "invalid-path", "\(bad): \(reply)")
        }
        #expect(try client.call(["cmd": "list"])["documents"]?.arrayValue?.count == 1, "nothing was opened")
        // A member and a member "inside" it, the slash and the mark one character apart.
        #expect(try client.call(["cmd": "create", "doc": "p.package"])["ok"] == true)
        #expect(try client.call(["cmd": "put-member", "doc": "p.package", "member": "a", "text": "a\n"])["ok"] == true)
        let clash = try client.call(["cmd": "put-member", "doc": "p.package", "member": "a/\u{301}b", "text": "b\n"])
        #expect(clash["error"]?["code"]?.stringValue == "bad-request", "\(clash)")
        let escape = try client.call(["cmd": "put-member", "doc": "p.package", "member": "../\u{301}x", "text": "x\n"])
        #expect(escape["ok"] != true, "\(escape)")
        #expect(try client.call(["cmd": "save-all", "wait": true])["ok"] == true)
        #expect(try daemon.onDisk("p.package/a") == "a\n")
        #expect(!FileManager.default.fileExists(atPath: daemon.root + "/\u{301}x"), "nothing beside the package")
        #expect(await daemon.stop() == 0)
    }

    @Test("get opens a document on first use, as the other commands do (a file made after start, OpenNewFiles=no)")
    func getOpensOnFirstUse() async throws {
        let daemon = try await RunningDaemon("[Watch]\nOpenNewFiles=no\n")
        try Disk.write("made later\n", to: daemon.root + "/late.txt")
        try Disk.write(#"{"k": [1, 2]}"#, to: daemon.root + "/late.json")
        await daemon.process.waitForLine(containing: "listening")
        #expect(try daemon.ctl("list").stdout.contains("no open documents"))
        let text = try daemon.ctl("get", "late.txt")
        #expect(text.status == 0 && text.stdout == "made later\n", "\(text)")
        let value = try daemon.ctl("get", "late.json", "--pointer", "/k/1")
        #expect(value.status == 0 && value.stdout == "2\n", "\(value)")
        #expect(try daemon.ctl("list").stdout.contains("late.txt"))
        #expect(try daemon.ctl("get", "absent.txt").stderr.contains("not-found"))
        #expect(await daemon.stop() == 0)
    }

    /// Were the loop held by the idle client, the requests below would never be answered:
    /// the time limit ends the test as failed.
    @Test(
        "A client that sends nothing, and one that disconnects mid-request, delay nobody", .timeLimit(.minutes(1)))
    func idleAndHalf() async throws {
        let daemon = try await RunningDaemon()
        let idle = try Raw(daemon.socket)
        let half = try Raw(daemon.socket)
        try half.send(#"{"cmd": "set", "doc": "half.txt", "te"#)
        try half.fd.close()
        for i in 0..<20 { #expect(try daemon.ctl("set", "x\(i).txt", "--text", "\(i)").status == 0) }
        _ = idle
        #expect(try daemon.ctl("get", "half.txt").status == 1, "the half request was never applied")
        #expect(await daemon.stop() == 0)
    }

    @Test("Path attacks are refused and nothing outside the root is read or touched")
    func pathAttacks() async throws {
        let daemon = try await RunningDaemon()
        let outside = daemon.directory.sub("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try Disk.write("secret\n", to: outside + "/secret.txt")
        try FileManager.default.createDirectory(atPath: daemon.root + "/sub", withIntermediateDirectories: true)
        #expect(symlink("/etc", daemon.root + "/etc") == 0)
        #expect(symlink(outside, daemon.root + "/sub/linked") == 0)
        #expect(symlink(outside + "/secret.txt", daemon.root + "/leak.txt") == 0)
        let client = try daemon.client()
        let attacks = [
            "../x.txt", "/etc/passwd", "a/../../x.txt", "nul\u{0}.txt", "etc/passwd", "sub/linked/secret.txt",
            "leak.txt", "sub/linked/new.txt",
        ]
        for path in attacks {
            for request: JSONValue in [
                ["cmd": "get", "doc": .string(path)], ["cmd": "set", "doc": .string(path), "text": "pwned"],
                ["cmd": "open", "doc": .string(path)], ["cmd": "create", "doc": .string(path)],
            ] {
                let reply = try client.call(request)
                #expect(
                    reply["error"]?["code"]?.stringValue == "invalid-path",
                    "\(path): \(reply.serialized(pretty: false))")
            }
        }
        let export = try client.call(["cmd": "export", "docs": [], "to": "/tmp"])
        #expect(export["ok"]?.boolValue == false)
        try client.call(["cmd": "set", "doc": "fine.txt", "text": "ok"])
        let outsideExport = try client.call(["cmd": "export", "docs": ["fine.txt"], "to": .string(outside)])
        #expect(outsideExport["error"]?["code"]?.stringValue == "invalid-path")
        let linkedExport = try client.call(["cmd": "export", "docs": ["fine.txt"], "to": "sub/linked"])
        #expect(linkedExport["error"]?["code"]?.stringValue == "invalid-path")
        #expect(try Disk.names(in: outside) == ["secret.txt"])
        #expect(try Disk.bytes(outside + "/secret.txt") == Data("secret\n".utf8))
        #expect(await daemon.stop() == 0)
        #expect(try Disk.bytes(outside + "/secret.txt") == Data("secret\n".utf8))
        #expect(try Disk.names(in: outside) == ["secret.txt"])
    }

    @Test("100 concurrent clients each append 1,000 distinct lines: the saved document holds all 100,000")
    func concurrentAppends() async throws {
        let daemon = try await RunningDaemon(quiet: "100ms")
        let socket = daemon.socket
        try daemon.ctl("set", "log.txt", "--text", "")
        // One thread per client (blocking I/O), so all 100 really are connected and sending at once.
        final class Failures: Sendable {
            let list = Lock<[String]>([])
        }
        let failures = Failures()
        let finished = DispatchGroup()
        for client in 0..<100 {
            finished.enter()
            Thread {
                defer { finished.leave() }
                do {
                    let connection = try ControlClient(socketPath: socket)
                    for line in 0..<1000 {
                        let reply = try connection.call([
                            "cmd": "append", "doc": "log.txt", "text": .string("client \(client) line \(line)\n"),
                        ])
                        if reply["ok"]?.boolValue != true {
                            throw Failure("append refused: \(reply.serialized(pretty: false))")
                        }
                    }
                } catch {
                    failures.list.withLock { $0.append("client \(client): \(error)") }
                }
            }.start()
        }
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                finished.wait()
                continuation.resume()
            }
        }
        #expect(failures.list.withLock { $0 }.isEmpty, "\(failures.list.withLock { $0 })")
        #expect(try daemon.ctl("save", "log.txt", "--wait").status == 0)
        let lines = try daemon.onDisk("log.txt").split(separator: "\n")
        #expect(lines.count == 100_000)
        #expect(Set(lines).count == 100_000)
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "An unprivileged client is refused unless the configuration allows it",
        .enabled(if: Machine.isRoot && Machine.has("setpriv"), "needs root and setpriv"))
    func unprivileged() async throws {
        // The socket mode lets anyone connect, so the refusal must come from SO_PEERCRED.
        let daemon = try await RunningDaemon("SocketMode=0666\n")
        try changeMode(ofPath: daemon.directory.path, to: .init(rawValue: 0o755))
        let nobody = [
            "--reuid=65534", "--regid=65534", "--clear-groups", Machine.product("autosavectl"), "--socket",
            daemon.socket, "status",
        ]
        let refused = try Machine.run("setpriv", nobody)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("forbidden"))
        #expect(refused.stderr.contains("uid 65534"))
        #expect(await daemon.stop() == 0)

        let allowed = try await RunningDaemon("SocketMode=0666\nAllowUsers=65534\n")
        try changeMode(ofPath: allowed.directory.path, to: .init(rawValue: 0o755))
        let ok = try Machine.run(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", Machine.product("autosavectl"), "--socket",
                allowed.socket, "status",
            ])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(await allowed.stop() == 0)

        // With the default mode 0600 the kernel refuses the connection itself.
        let strict = try await RunningDaemon()
        try changeMode(ofPath: strict.directory.path, to: .init(rawValue: 0o755))
        #expect(try FileDescriptor.currentWorkingDirectory.status(of: strict.socket).permissions.rawValue == 0o600)
        let denied = try Machine.run(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", Machine.product("autosavectl"), "--socket",
                strict.socket, "status",
            ])
        #expect(denied.status == 69)
        #expect(await strict.stop() == 0)
    }

    @Test(
        "Run as an unprivileged user: an unreadable file is refused with EACCES, never taken for empty nor written over; an unreadable directory does not stop start-up; an unreadable package member is named",
        .enabled(if: Machine.isRoot && Machine.has("setpriv"), "needs root and setpriv"))
    func unreadable() async throws {
        let directory = TemporaryDirectory("unreadable")
        try changeMode(ofPath: directory.path, to: .init(rawValue: 0o755))
        let root = directory.sub("root")
        for path in [root + "/sub", root + "/b.package", directory.sub("run")] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        try Disk.write("secret\n", to: root + "/locked.txt")
        try Disk.write("inside\n", to: root + "/sub/f.txt")
        try Disk.write("m\n", to: root + "/b.package/m.txt")
        try Disk.write("locked member\n", to: root + "/b.package/locked.txt")
        try Disk.write("readable\n", to: root + "/fine.txt")
        for path in [
            root, root + "/sub", root + "/sub/f.txt", root + "/b.package", root + "/b.package/m.txt",
            root + "/fine.txt", directory.sub("run"),
        ] {
            #expect(chown(path, 65534, 65534) == 0)
        }
        for path in [root + "/locked.txt", root + "/b.package/locked.txt"] { #expect(chmod(path, 0) == 0) }
        #expect(chmod(root + "/sub", 0) == 0)
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(root)\n[Control]\nSocket=\(directory.sub("run/control.sock"))\n"
                + "[Journal]\nDirectory=\(directory.sub("run/journal"))\n", to: config)
        let daemon = try DaemonProcess(
            "/usr/bin/setpriv",
            ["--reuid=65534", "--regid=65534", "--clear-groups", Machine.product("autosaved"), "--config", config])
        await daemon.waitForLine(containing: "started:")
        #expect(daemon.output.contains { $0.contains("recovery: skipped \(root)/sub") && $0.contains("EACCES") })
        #expect(daemon.output.contains { $0.contains("not opened: locked.txt") && $0.contains("EACCES") })

        let raw = try Raw(directory.sub("run/control.sock"))
        func ask(_ request: String) throws -> JSONValue? {
            try raw.send(request + "\n")
            return try raw.line()
        }
        for request in [
            #"{"cmd":"open","doc":"locked.txt"}"#, #"{"cmd":"set","doc":"locked.txt","text":"over"}"#,
            #"{"cmd":"append","doc":"locked.txt","text":"more"}"#, #"{"cmd":"get","doc":"locked.txt"}"#,
        ] {
            let reply = try ask(request)
            #expect(reply?["error"]?["code"]?.stringValue == "io-error", "\(request)")
            #expect(reply?["error"]?["message"]?.stringValue?.contains("EACCES") == true, "\(request)")
        }
        let member = try ask(#"{"cmd":"get","doc":"b.package","member":"locked.txt"}"#)
        #expect(member?["error"]?["code"]?.stringValue == "io-error")
        #expect(member?["error"]?["message"]?.stringValue?.contains("b.package/locked.txt' failed: EACCES") == true)
        #expect(try ask(#"{"cmd":"get","doc":"b.package","member":"m.txt"}"#)?["ok"] == true)
        #expect(try ask(#"{"cmd":"get","doc":"fine.txt"}"#)?["text"]?.stringValue == "readable\n")
        #expect(try ask(#"{"cmd":"put-member","doc":"b.package","member":"n.txt","text":"n"}"#)?["ok"] == true)
        #expect(try ask(#"{"cmd":"save","doc":"b.package","wait":true}"#)?["ok"] == true)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
        #expect(chmod(root + "/locked.txt", 0o600) == 0 && chmod(root + "/b.package/locked.txt", 0o600) == 0)
        #expect(try Disk.bytes(root + "/locked.txt") == Data("secret\n".utf8), "the unreadable file is as it was")
        #expect(try Disk.bytes(root + "/b.package/locked.txt") == Data("locked member\n".utf8))
        #expect(try Disk.bytes(root + "/b.package/n.txt") == Data("n".utf8))
        #expect(chmod(root + "/sub", 0o755) == 0)
    }

    @Test(
        "ExportDirectories=: an absolute destination inside an allowed directory is written; one outside it, or reached through a link that leads out, is refused"
    )
    func exportDirectories() async throws {
        let holder = TemporaryDirectory("export-dirs")
        let allowed = holder.sub("allowed")
        let elsewhere = holder.sub("elsewhere")
        for path in [allowed + "/sub", elsewhere] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        #expect(symlink(elsewhere, allowed + "/out-link") == 0)
        let daemon = try await RunningDaemon("ExportDirectories=\(allowed)\n", quiet: "1h")
        let client = try daemon.client()
        #expect(try client.call(["cmd": "set", "doc": "a.txt", "text": "A"])["ok"] == true)

        let written = try client.call(["cmd": "export", "docs": ["a.txt"], "to": .string(allowed + "/sub")])
        #expect(written["ok"] == true, "\(written)")
        #expect(written["paths"]?.arrayValue?.first?.stringValue?.hasSuffix("/allowed/sub/a.txt") == true)
        #expect(try Disk.bytes(allowed + "/sub/a.txt") == Data("A".utf8))

        for destination in [elsewhere, allowed + "/out-link", allowed + "/../elsewhere", holder.path] {
            let refused = try client.call(["cmd": "export", "docs": ["a.txt"], "to": .string(destination)])
            #expect(refused["error"]?["code"]?.stringValue == "invalid-path", "\(destination): \(refused)")
        }
        #expect(try Disk.names(in: elsewhere).isEmpty, "nothing written where no export may go")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A directory the daemon cannot write into (ExportDirectories= on a read-only mount, missing, a file; TextfileDirectory= read-only) is named at start-up with why; an export there fails saying what to do, and changes nothing",
        .enabled(if: Machine.isRoot, "mounting a read-only file system needs root"))
    func unwritableDirectories() async throws {
        let holder = TemporaryDirectory("export-unwritable")
        let readOnly = holder.sub("read-only")
        let writable = holder.sub("writable")
        let missing = holder.sub("missing")
        let file = holder.sub("a-file")
        for path in [readOnly, writable] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        try Disk.write("not a directory\n", to: file)
        let mounted = try Machine.run("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", readOnly])
        try #require(mounted.status == 0, "\(mounted)")
        defer { _ = try? Machine.run("umount", [readOnly]) }

        let daemon = try await RunningDaemon(
            "ExportDirectories=\(readOnly) \(writable) \(missing) \(file)\n[Metrics]\nTextfileDirectory=\(readOnly)\n",
            quiet: "1h")
        let warnings = daemon.process.output.filter { $0.contains("warn") || $0.hasPrefix("<4>") }
        func warned(_ text: String) -> Bool { warnings.contains { $0.contains(text) } }
        #expect(
            warned(
                "[Control] ExportDirectories=\(readOnly) is on a file system the daemon sees read-only (under a unit with ProtectSystem=strict, as the shipped one, allow it with ReadWritePaths=\(readOnly) in a drop-in: systemctl edit autosaved): exports into it will fail"
            ), "\(daemon.process.output)")
        #expect(warned("[Metrics] TextfileDirectory=\(readOnly) is on a file system the daemon sees read-only"))
        #expect(warned("autosaved.prom cannot be written there"))
        #expect(warned("[Control] ExportDirectories=\(missing) does not exist: exports into it will fail"))
        #expect(warned("[Control] ExportDirectories=\(file) is not a directory: exports into it will fail"))
        #expect(!warned("ExportDirectories=\(writable) "), "the writable directory is not named")
        for errno in [Errno.noSuchFile, .permissionDenied] {
            #expect(
                WritableDirectories.Problem.reason(errno, path: "/home/ops/out")
                    == "does not exist or cannot be reached by the daemon (\(errno)): a unit with ProtectHome=yes, as the shipped one, makes /home, /root and /run/user inaccessible, and ReadWritePaths= cannot open a path below them; set ProtectHome=read-only and ReadWritePaths=/home/ops/out in a drop-in, or use a directory elsewhere"
            )
        }
        #expect(WritableDirectories.Problem.reason(.noSuchFile, path: "/homes/out") == "does not exist")

        let client = try daemon.client()
        #expect(try client.call(["cmd": "set", "doc": "a.txt", "text": "A"])["ok"] == true)
        let failed = try client.call(["cmd": "export", "docs": ["a.txt"], "to": .string(readOnly)])
        #expect(failed["error"]?["code"] == "io-error", "\(failed)")
        let message = failed["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("EROFS"), "\(message)")
        #expect(message.contains("the daemon sees that file system read-only"), "\(message)")
        let resolved = URL(fileURLWithPath: readOnly).standardizedFileURL.path
        #expect(message.contains("ReadWritePaths=\(resolved) in a drop-in"), "\(message)")
        #expect(try client.call(["cmd": "get", "doc": "a.txt"])["text"] == "A")
        #expect(try client.call(["cmd": "export", "docs": ["a.txt"], "to": .string(writable)])["ok"] == true)
        #expect(try Disk.bytes(writable + "/a.txt") == Data("A".utf8))
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "An export refused for one of its documents, or into a package document, changes nothing: the documents before it are not opened, nothing is written, no event comes; one that succeeds reads documents not open from their files and leaves them unopened; \"durable\": true on an export waits for the journal's sync"
    )
    func refusedExportChangesNothing() async throws {
        let daemon = try await RunningDaemon("[Watch]\nOpenNewFiles=no\n[Journal]\nSyncInterval=1h\n", quiet: "1h")
        let client = try daemon.client()
        try Disk.write("A on disk\n", to: daemon.root + "/a.txt")
        try Disk.write("B on disk\n", to: daemon.root + "/b.txt")
        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: false)
        var events: [JSONValue] = []
        let refused = try client.call(["cmd": "export", "docs": ["a.txt", "b.txt", "missing.txt"], "to": "out"]) {
            events.append($0)
        }
        #expect(refused["error"]?["code"] == "not-found", "\(refused)")
        #expect(events.isEmpty, "no progress: nothing was written")
        #expect(try client.call(["cmd": "list"])["documents"]?.arrayValue?.isEmpty == true, "nothing opened")
        #expect(try Disk.names(in: daemon.root + "/out").isEmpty, "nothing written")
        try FileManager.default.createDirectory(
            atPath: daemon.root + "/book.package/ch", withIntermediateDirectories: true)
        for into in ["book.package", "book.package/ch"] {
            let reply = try client.call(["cmd": "export", "docs": ["a.txt"], "to": .string(into)])
            #expect(reply["error"]?["code"] == "invalid-path", "\(into): \(reply)")
            #expect(reply["error"]?["message"]?.stringValue?.contains("package document 'book.package'") == true)
        }
        #expect(try Disk.names(in: daemon.root + "/book.package") == ["ch"], "nothing written into the package")

        try #expect(client.call(["cmd": "set", "doc": "c.txt", "text": "C in memory\n"])["ok"] == true)
        let exported = try client.call(["cmd": "export", "docs": ["a.txt", "c.txt"], "to": "out", "durable": true])
        #expect(exported["ok"] == true, "\(exported)")
        #expect(try Disk.bytes(daemon.root + "/out/a.txt") == Data("A on disk\n".utf8))
        #expect(try Disk.bytes(daemon.root + "/out/c.txt") == Data("C in memory\n".utf8))
        let journal = try client.call(["cmd": "status"])["journal"]
        #expect(
            journal?["durable_lsn"] == journal?["written_lsn"], "the set's record was synced before the export's reply")
        let listed = try client.call(["cmd": "list"])["documents"]?.arrayValue?.compactMap { $0["doc"]?.stringValue }
        #expect(listed == ["c.txt"], "a.txt was read for the export, not opened")
        #expect(await daemon.stop() == 0)
    }

    @Test("Cancelling an export, or the client going away, leaves nothing half-written")
    func cancelExport() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        let big = String(repeating: "0123456789", count: 500_000)
        for i in 0..<6 {
            let reply = try client.call(["cmd": "set", "doc": .string("big\(i).txt"), "text": .string(big)])
            #expect(reply["ok"]?.boolValue == true)
        }
        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: false)
        let docs: JSONValue = .array((0..<6).map { .string("big\($0).txt") })
        let id = try client.send(["cmd": "export", "docs": docs, "to": "out"])
        // Cancel once the first document is written.
        var sawProgress = false
        var reply: JSONValue? = nil
        while reply == nil {
            let line = try client.receive()
            if line["event"] != nil {
                if !sawProgress {
                    sawProgress = true
                    try client.send(["cmd": "cancel", "target": id])
                }
            } else if line["id"] == id {
                reply = line
            }
        }
        #expect(reply?["error"]?["code"]?.stringValue == "cancelled")
        #expect(try Disk.names(in: daemon.root + "/out").isEmpty, "no file, half-written or whole, and no temporary")

        // A client that leaves during an export: the export is cancelled, or, if it had
        // already put everything in place, complete — never partial.
        var leaving: ControlClient? = try daemon.client()
        try leaving?.send(["cmd": "export", "docs": docs, "to": "out"])
        _ = try leaving?.receive()
        leaving = nil
        // The daemon notices the hang-up: then only `client` and the status request itself are connected.
        var connections = 3
        for _ in 0..<200 where connections > 2 {
            connections =
                try JSONValue(parsing: try daemon.ctl("--json", "status").stdout)["connections"]?.intValue ?? 0
        }
        #expect(connections == 2)
        let exported = try Disk.names(in: daemon.root + "/out")
        #expect(exported.isEmpty || exported.count == 6, "all or nothing: \(exported)")
        #expect(Disk.temporaries(under: daemon.root + "/out").isEmpty)
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "An export replaces nothing: not a file at the destination, not a document of the store, not an earlier document of the export whose name came out the same"
    )
    func exportReplacesNothing() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        for (doc, text) in [
            ("a/r.md", "first"), ("b/r.md.txt", "second"), ("x/notes.txt", "mine"), ("y/keep.txt", "new"),
        ] {
            #expect(try client.call(["cmd": "set", "doc": .string(doc), "text": .string(text)])["ok"] == true)
        }
        // At the destination: another program's file, and a document of the store, saved.
        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: true)
        try Disk.write("theirs", to: daemon.root + "/out/notes.txt")
        #expect(try client.call(["cmd": "set", "doc": "out/keep.txt", "text": "kept"])["ok"] == true)
        #expect(try client.call(["cmd": "save", "doc": "out/keep.txt", "wait": true])["ok"] == true)

        let reply = try client.call([
            "cmd": "export", "docs": ["a/r.md", "b/r.md.txt", "x/notes.txt", "y/keep.txt"], "to": "out",
        ])
        #expect(reply["ok"] == true, "\(reply)")
        let paths = reply["paths"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(paths.count == 4 && Set(paths).count == 4, "\(paths)")
        let written = try paths.map { String(decoding: try Disk.bytes($0), as: UTF8.self) }
        #expect(written == ["first", "second", "mine", "new"], "\(paths)")
        #expect(try Disk.bytes(daemon.root + "/out/notes.txt") == Data("theirs".utf8))
        #expect(try Disk.bytes(daemon.root + "/out/keep.txt") == Data("kept".utf8))
        #expect(try client.call(["cmd": "get", "doc": "out/keep.txt"])["text"] == "kept")
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "Two exports under one id: the one that ends first leaves the other reachable, and a cancel of the id cancels it"
    )
    func exportsSharingAnID() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        let big = String(repeating: "0123456789", count: 500_000)
        for i in 0..<12 {
            #expect(try client.call(["cmd": "set", "doc": .string("big\(i).txt"), "text": .string(big)])["ok"] == true)
        }
        #expect(try client.call(["cmd": "set", "doc": "small.txt", "text": "s"])["ok"] == true)
        for directory in ["out", "out2"] {
            try FileManager.default.createDirectory(
                atPath: daemon.root + "/" + directory, withIntermediateDirectories: false)
        }
        let docs: JSONValue = .array((0..<12).map { .string("big\($0).txt") })
        _ = try client.send(["id": 41, "cmd": "export", "docs": docs, "to": "out"])
        _ = try client.send(["id": 41, "cmd": "export", "docs": ["small.txt"], "to": "out2"])
        // The small one's reply, then a progress event of the large one: it still runs.
        var replies: [JSONValue] = []
        var running = false
        while replies.isEmpty || !running {
            let line = try client.receive()
            if line["event"] != nil { running = !replies.isEmpty } else { replies.append(line) }
        }
        #expect(replies.first?["paths"]?.arrayValue?.count == 1, "\(replies)")
        let cancel = try client.call(["cmd": "cancel", "target": 41])
        #expect(cancel["cancelled"] == 41, "\(cancel)")
        while replies.count < 2 {
            let line = try client.receive()
            if line["event"] == nil, line["id"] == 41 { replies.append(line) }
        }
        #expect(replies.last?["error"]?["code"]?.stringValue == "cancelled", "\(replies)")
        #expect(try Disk.names(in: daemon.root + "/out").isEmpty)
        #expect(await daemon.stop() == 0)
    }
}

@Suite("Socket setup, limits and activation", .serialized)
struct SocketSetupTests {
    @Test("MaxConnections: one client too many gets too-many-connections; the others keep working")
    func maxConnections() async throws {
        let daemon = try await RunningDaemon("MaxConnections=2\n")
        let first = try daemon.client()
        let second = try daemon.client()
        #expect(try first.call(["cmd": "status"])["ok"]?.boolValue == true)
        let third = try ControlSocketTests.Raw(daemon.socket)
        #expect(try third.code() == "too-many-connections")
        #expect(try second.call(["cmd": "status"])["ok"]?.boolValue == true)
        #expect(await daemon.stop() == 0)
    }

    struct NoLoopThread: Error, CustomStringConvertible {
        let pid: Int32
        var description: String { "no autosaved-loop thread with a CPU account in /proc/\(pid)/task" }
    }

    /// The CPU time the daemon's loop thread (`autosaved-loop`) has used, in milliseconds:
    /// the scheduler's own account (`se.sum_exec_runtime`), not the 10-ms ticks of `stat`.
    static func loopCPU(_ pid: Int32) throws -> Double {
        for task in try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") {
            let comm = try String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)
            guard comm.hasPrefix("autosaved-loop") else { continue }
            let sched = try String(contentsOfFile: "/proc/\(pid)/task/\(task)/sched", encoding: .utf8)
            for line in sched.split(separator: "\n") where line.hasPrefix("se.sum_exec_runtime") {
                let field = line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces)
                if let value = field.flatMap(Double.init) { return value }
            }
        }
        throw NoLoopThread(pid: pid)
    }

    @Test(
        "BusyPoll=: after answering, the loop polls for the next request, then sleeps; for a client slower than BusyPoll= the polls shrink to none, for a quick one they grow back and catch its requests; 0, set by a reload, sleeps at once",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/sched"))
    )
    func busyPoll() async throws {
        let daemon = try await RunningDaemon("BusyPoll=10ms\n")
        let pid = daemon.process.process.processIdentifier
        let client = try daemon.client()
        // The loop's CPU time in milliseconds over `pause` after one request is answered.
        func afterOneRequest(pause: UInt32 = 100_000) throws -> Double {
            let before = try Self.loopCPU(pid)
            #expect(try client.call(["cmd": "status"])["ok"]?.boolValue == true)
            usleep(pause)
            return try Self.loopCPU(pid) - before
        }
        func polls() throws -> (work: Double, ranOut: Double) {
            let text = try client.call(["cmd": "metrics"])["text"]?.stringValue ?? ""
            return (
                MetricsTests.value(text, "autosaved_busy_polls_total{result=\"work\"}") ?? -1,
                MetricsTests.value(text, "autosaved_busy_polls_total{result=\"ran-out\"}") ?? -1
            )
        }
        // A client that pauses 100 ms: the first poll (10 ms) ran out long before its next
        // request, so the next is 5 ms, then 2.5, 1.25, 0.6, then none. A loop that kept
        // polling for the whole 100 ms would use most of it; one that did not adapt, 10 ms each.
        _ = try afterOneRequest()
        let first = try afterOneRequest()
        #expect(first >= 2 && first < 60, "the loop used \(first) ms of CPU after one request")
        var used: [Double] = []
        for _ in 0..<6 { used.append(try afterOneRequest()) }
        #expect(used.reduce(0, +) < 9, "the loop's CPU after each of six requests 100 ms apart: \(used) ms")
        #expect(used.suffix(2).allSatisfy { $0 < 1.5 }, "no polling left: \(used) ms")
        // A quick client (0.5 ms between a reply and its next request): the polls grow back
        // and find its requests waiting.
        let before = try polls()
        for _ in 0..<200 {
            #expect(try client.call(["cmd": "status"])["ok"]?.boolValue == true)
            usleep(500)
        }
        let after = try polls()
        #expect(after.work - before.work >= 150, "polls that found the next request: \(before) → \(after)")

        let config = daemon.directory.sub("autosaved.conf")
        let text = try String(contentsOfFile: config, encoding: .utf8)
        try Disk.write(text.replacingOccurrences(of: "BusyPoll=10ms", with: "BusyPoll=0"), to: config)
        daemon.process.signal(SIGHUP)
        await daemon.process.waitForLine(containing: "configuration reloaded from")
        _ = try afterOneRequest()
        let off = try polls()
        for _ in 0..<3 {
            let used = try afterOneRequest(pause: 300_000)
            #expect(used < 2, "the loop used \(used) ms of CPU after one request with BusyPoll=0")
        }
        let offAfter = try polls()
        #expect(offAfter.work == off.work && offAfter.ranOut == off.ranOut, "\(off) → \(offAfter)")
        #expect(await daemon.stop() == 0)
    }

    @Test("A second daemon on a live socket refuses to start; a stale socket is replaced")
    func liveAndStaleSockets() async throws {
        let daemon = try await RunningDaemon()
        let config = daemon.directory.sub("second.conf")
        try Disk.write(
            "[Store]\nRoot=\(daemon.directory.sub("root2"))\n[Control]\nSocket=\(daemon.socket)\n", to: config)
        let second = try Machine.run(Machine.product("autosaved"), ["--config", config])
        #expect(second.status == 73)
        #expect(second.stderr.contains("another daemon is listening on \(daemon.socket)"))
        #expect(try daemon.ctl("status").status == 0, "the first daemon still serves")
        #expect(await daemon.stop() == 0)
        #expect(!FileManager.default.fileExists(atPath: daemon.socket), "a clean stop removes the socket")

        // A socket file nobody listens on (left by a killed daemon) is replaced.
        let stale = try FileDescriptor.unixSocket()
        try stale.bind(toPath: daemon.socket)
        try stale.close()
        let third = try DaemonProcess(Machine.product("autosaved"), ["--config", config])
        await third.waitForLine(containing: "started:")
        #expect(try daemon.ctl("status").status == 0)
        third.signal(SIGTERM)
        #expect(await third.exitStatus() == 0)
    }

    @Test("A socket passed by systemd (LISTEN_FDS) is used", .enabled(if: Machine.has("systemd-socket-activate")))
    func socketActivation() async throws {
        let directory = TemporaryDirectory("activation")
        let socket = directory.sub("activated.sock")
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Control]\nSocket=\(directory.sub("unused.sock"))\n", to: config)
        let activator = try DaemonProcess(
            "/usr/bin/systemd-socket-activate",
            ["-l", socket, "--fdname=control", Machine.product("autosaved"), "--config", config])
        await activator.waitForLine(containing: "Listening on")
        // A mode other than the configuration's SocketMode= (0600 by default).
        #expect(chmod(socket, 0o666) == 0)
        // The daemon starts on the first connection, on the socket systemd made.
        let client = try ControlClient(socketPath: socket)
        #expect(try client.call(["cmd": "status"])["ok"]?.boolValue == true)
        await activator.waitForLine(containing: "listening on the socket passed by systemd")
        #expect(!FileManager.default.fileExists(atPath: directory.sub("unused.sock")))
        // The settings that do not apply to a passed socket are named, with where it is and its mode.
        let output = activator.output.joined(separator: "\n")
        #expect(
            output.contains(
                "Socket=\(directory.sub("unused.sock")) is not used: systemd passed the socket at \(socket)"),
            "\(output)")
        #expect(output.contains("SocketMode=0600 is not applied: the socket systemd passed has mode 0666"), "\(output)")
        activator.signal(SIGTERM)
        _ = await activator.exitStatus()
    }

    @Test(
        "In a user namespace that maps only root (unshare -U -r, as PrivateUsers= maps only the service's user): AllowUsers= and AllowGroups= ids it does not map are named at start-up as never matching; mapped ones are not",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"), "needs unshare (util-linux)"))
    func allowListsOutsideTheUserNamespace() async throws {
        let directory = TemporaryDirectory("namespace")
        let config = directory.sub("autosaved.conf")
        try Disk.write(
            "[Store]\nRoot=\(directory.sub("root"))\n[Control]\nSocket=\(directory.sub("s.sock"))\nAllowUsers=0 1000\nAllowGroups=0\n",
            to: config)
        let daemon = try DaemonProcess(
            "/usr/bin/unshare", ["-U", "-r", Machine.product("autosaved"), "--config", config])
        await daemon.waitForLine(containing: "listening on")
        let client = try ControlClient(socketPath: directory.sub("s.sock"))
        #expect(try client.call(["cmd": "status"])["ok"]?.boolValue == true)
        let output = daemon.output.joined(separator: "\n")
        #expect(
            output.contains("[Control] AllowUsers=1000 can never match: the daemon runs in a user namespace"),
            "\(output)")
        #expect(!output.contains("AllowGroups="), "gid 0 is mapped: \(output)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
        // Outside any namespace (the whole id range mapped), nothing is said.
        #expect(ControlServer.IDMap("         0          0 4294967295\n").unmapped([0, 1000, 4_294_967_294]).isEmpty)
        #expect(ControlServer.IDMap("0 1000 1\n65534 65534 1\n").unmapped([0, 1, 1000, 65534]) == [1, 1000])
    }

    @Test("Ctrl-C during autosavectl export cancels it: exit 130 and nothing left behind")
    func interruptExport() async throws {
        let daemon = try await RunningDaemon(quiet: "1h")
        let client = try daemon.client()
        // 12 × 8 MB, each written and synced: the export is still at work when the interrupt
        // comes right after its first document, whatever the disk.
        let big = String(repeating: "0123456789", count: 800_000)
        for i in 0..<12 { try client.call(["cmd": "set", "doc": .string("big\(i).txt"), "text": .string(big)]) }
        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: false)
        let export = try DaemonProcess(
            Machine.product("autosavectl"),
            ["--socket", daemon.socket, "export"] + (0..<12).map { "big\($0).txt" } + ["--to", "out"])
        await export.waitForLine(containing: "export: writing 1/12")
        export.signal(SIGINT)
        let status = await export.exitStatus()
        let exported = try Disk.names(in: daemon.root + "/out")
        #expect(status == 130)
        #expect(exported.isEmpty)
        // Read by the harness's own threads, which may still be at it once the process ended.
        #expect(await export.waitForLine(containing: "cancelled", within: .seconds(10)) != nil)
        #expect(Disk.temporaries(under: daemon.root + "/out").isEmpty)
        #expect(await daemon.stop() == 0)
    }
}
