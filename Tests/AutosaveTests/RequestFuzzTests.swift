import Control
import Foundation
import Posix
import TestSupport
import Testing

/// A small seeded generator (SplitMix64), so a failing run can be repeated exactly.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Requests a hostile or careless client could send: every command, each field given
/// a value of the right type most of the time and of any type otherwise, document paths
/// from the ordinary to the hostile.
struct RequestGenerator {
    var random: SeededGenerator

    static let documents = [
        "a.txt", "b.json", "c.package", "d/e.txt", "x", "é", "d/y", "z.bin", "ü/ß.json", "c.package/m.txt",
        "../outside/planted.txt", "/etc/passwd", "a/../../x", "", "a\u{0}b", ".", "..", "a//b.txt", "a/./b.txt",
        "nodir/", "a.txt/", "link/planted.txt", "link", "dirlink/new.txt", "q.json", "p.package", "a.txt/x",
    ]
    static let members = ["m.txt", "ch/1.txt", "ch", "../x", "/x", "", "a\u{0}", "ch/../../x", "x", "é/ü.txt", "."]
    /// Field names and the kind of value each takes, per command.
    static let schema: [String: [(String, String)]] = [
        "status": [], "list": [], "sync": [], "reload": [],
        "open": [("doc", "doc")], "create": [("doc", "doc")], "revert": [("doc", "doc")], "close": [("doc", "doc")],
        "get": [("doc", "doc"), ("pointer", "pointer"), ("member", "member"), ("members", "bool")],
        "set": [("doc", "doc"), ("text", "text"), ("json", "json"), ("base64", "base64")],
        "append": [("doc", "doc"), ("text", "text"), ("base64", "base64")],
        "replace": [("doc", "doc"), ("offset", "int"), ("length", "int"), ("text", "text")],
        "patch": [("doc", "doc"), ("patch", "json")],
        "put-member": [("doc", "doc"), ("member", "member"), ("text", "text"), ("base64", "base64")],
        "remove-member": [("doc", "doc"), ("member", "member")],
        "save": [("doc", "doc"), ("wait", "bool")], "save-all": [("wait", "bool")],
        "export": [("docs", "docs"), ("to", "directory"), ("type", "type")],
        "cancel": [("target", "int")],
        "subscribe": [("docs", "docs"), ("events", "events")],
    ]

    mutating func pick<T>(_ choices: [T]) -> T { choices.randomElement(using: &random)! }
    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &random) < p }

    mutating func text() -> String {
        let alphabet: [String] = [
            "a", "b", "\n", "\"", "\\", "é", "{", "}", "[", "]", ":", ",", "0", " ", "\t", "\u{2028}", "😀",
        ]
        return (0..<Int.random(in: 0..<30, using: &random)).map { _ in pick(alphabet) }.joined()
    }

    mutating func json(depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<7, using: &random) {
        case 0 where depth < 4:
            return .object(
                (0..<Int.random(in: 0..<4, using: &random)).map { _ in
                    (pick(["a", "b", "", "é"]), json(depth: depth + 1))
                })
        case 1 where depth < 4:
            return .array((0..<Int.random(in: 0..<4, using: &random)).map { _ in json(depth: depth + 1) })
        case 2:
            return .number(
                pick([
                    "0", "-1", "9223372036854775807", "-9223372036854775808", "18446744073709551616", "1.5", "1e300",
                    "-0.0", "1e400",
                ]))
        case 3: return pick([.bool(true), .bool(false), .null])
        default: return .string(text())
        }
    }

    mutating func value(_ kind: String) -> JSONValue {
        switch kind {
        case "doc": .string(pick(Self.documents))
        case "text": .string(text())
        case "json": json()
        case "base64": .string(pick(["aGVsbG8=", "!!", "", "AAA", "AA==", "////"]))
        case "int":
            .number(
                pick([
                    "0", "1", "2", "5", "-1", "9223372036854775807", "-9223372036854775808", "100000000000000000000",
                    "1.5", "1e300",
                ]))
        case "pointer": .string(pick(["", "/", "/a", "/a/0", "/0", "/-", "/~1", "/~2", "a", "/a/b/c"]))
        case "member": .string(pick(Self.members))
        case "bool": .bool(chance(0.5))
        case "docs": .array((0..<Int.random(in: 0..<4, using: &random)).map { _ in .string(pick(Self.documents)) })
        case "directory":
            .string(pick(["out", "out/sub", "/tmp", "../outside", "link", "", ".", "a.txt", "d", "dirlink"]))
        case "type": .string(pick(["public.plain-text", "public.json", "public.data", "nope", ""]))
        case "events":
            .array(
                (0..<Int.random(in: 0..<3, using: &random)).map { _ in
                    .string(pick(["saved", "closed", "conflict", "bogus"]))
                })
        default: json()
        }
    }

    /// One request line with the given id.
    mutating func request(id: Int) -> String {
        var command = pick(Self.schema.keys.sorted() + ["bogus"])
        if command == "reload", chance(0.8) { command = "list" }  // each reload reads the configuration file
        var fields: [(key: String, value: JSONValue)] = [("cmd", .string(command)), ("id", .number(String(id)))]
        for (key, kind) in Self.schema[command] ?? [] {
            if chance(0.6) {
                fields.append((key, value(kind)))
            } else if chance(0.25) {
                fields.append((key, value(pick(["json", "int", "bool", "docs", "doc"]))))
            }
        }
        if chance(0.05) { fields.append((pick(["extra", "doc", "text"]), json())) }
        return JSONValue.object(fields).serialized(pretty: false)
    }
}

@Suite("Random requests against the built daemon", .serialized)
struct RequestFuzzTests {
    @Test(
        "4,000 seeded random requests of every command, with values of every type and hostile paths: each gets one reply with a documented code, nothing outside the root is touched, the daemon serves on and stops cleanly",
        .timeLimit(.minutes(3)), arguments: [UInt64(1), 2])
    func randomRequests(seed: UInt64) async throws {
        let daemon = try await RunningDaemon(quiet: "50ms")
        // Beside the root: a directory the requests aim at through `..` and symbolic links.
        let outside = daemon.directory.sub("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Disk.write("planted\n", to: outside + "/planted.txt")
        try FileManager.default.createSymbolicLink(atPath: daemon.root + "/link", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: daemon.root + "/dirlink", withDestinationPath: outside)
        try FileManager.default.createDirectory(atPath: daemon.root + "/out", withIntermediateDirectories: true)

        var generator = RequestGenerator(random: SeededGenerator(state: seed))
        let answered = try Self.drive(
            daemon.socket, requests: 4000, generator: &generator, checkRefusals: true, root: daemon.root
        ) {
            problem in
            Issue.record("seed \(seed): \(problem)")
        }
        #expect(answered["ok", default: 0] > 400, "enough requests were valid to reach the documents: \(answered)")
        #expect(answered["invalid-path", default: 0] > 50, "\(answered)")
        #expect(answered["refusals checked", default: 0] > 1000, "\(answered)")
        #expect(try daemon.ctl("status").status == 0, "another client is served")
        let status = await daemon.stop()
        #expect(
            status == 0,
            "every edit saved, a clean exit; output:\n\(daemon.process.output.suffix(30).joined(separator: "\n"))")
        #expect(try Disk.names(in: outside) == ["planted.txt"], "nothing created outside the root")
        #expect(try Disk.bytes(outside + "/planted.txt") == Data("planted\n".utf8), "nothing outside changed")
    }

    /// The open documents as `list` describes them, without what saves change on their own
    /// (state, saved changes, times): each one's path, type and change count. A `sync`
    /// first: what the watcher has still to hand over (the files an earlier `export`
    /// wrote into the root, opened as new files) is in the list it is compared with.
    static func documents(_ raw: ControlSocketTests.Raw, id: Int) throws -> [String] {
        try raw.send("{\"id\":\(id),\"cmd\":\"sync\"}\n{\"id\":\(id),\"cmd\":\"list\"}\n")
        var synced = false
        while let line = try raw.line() {
            if line["event"] != nil { continue }
            if !synced {
                synced = true
                continue
            }
            return (line["documents"]?.arrayValue ?? []).map {
                "\($0["doc"]?.stringValue ?? "?") \($0["type"]?.stringValue ?? "?") \($0["changes"]?.intValue ?? -1)"
            }
        }
        return ["(no reply to list)"]
    }

    /// Sends `requests` generated requests over one connection, one at a time, and checks
    /// each reply: one per request, its id, `ok`, a documented error code with a message.
    /// The events a subscriber to every kind was sent since the last call, but those of
    /// saves (debounced saves of earlier edits come at any time): each as its kind and
    /// document. A `status` on the subscriber's connection marks the end of what was sent:
    /// a subscription writes each event in the loop's pass after the change, before the
    /// loop reads a later request.
    static func events(_ subscriber: ControlSocketTests.Raw) throws -> [String] {
        try subscriber.send("{\"id\":-2,\"cmd\":\"status\"}\n")
        var events: [String] = []
        while let line = try subscriber.line() {
            guard let kind = line["event"]?.stringValue else { return events }
            if kind == "saved" || kind == "save-failed" { continue }
            events.append("\(kind) \(line["doc"]?.stringValue ?? "?")")
        }
        return events
    }

    /// What is on disk under `root` that no open document accounts for: every path with
    /// its kind, size and modification time, but the open documents' files (and what
    /// is beneath them), the directories their saves make, and the daemon's temporaries
    /// and sync cookies.
    static func disk(_ root: String, open documents: [String]) -> Set<String> {
        let open = Set(documents.map { $0.split(separator: " ").dropLast(2).joined(separator: " ") })
        var made: Set<String> = []
        for document in open {
            var parent = PathName.parent(document)
            while !parent.isEmpty {
                made.insert(parent)
                parent = PathName.parent(parent)
            }
        }
        var found: Set<String> = []
        func walk(_ relative: String) {
            let full = relative.isEmpty ? root : root + "/" + relative
            for name in (try? FileManager.default.contentsOfDirectory(atPath: full)) ?? [] {
                let path = relative.isEmpty ? name : relative + "/" + name
                if name.contains(".autosave-") || open.contains(path) { continue }
                guard let status = try? Disk.status(root + "/" + path) else { continue }
                if status.kind == .directory {
                    if !made.contains(path) { found.insert("\(path)/") }
                    walk(path)
                } else {
                    found.insert("\(path) \(status.kind) \(status.size) \(status.modified)")
                }
            }
        }
        walk("")
        return found
    }

    /// With `checkRefusals` (one client, no other program), every refused request must
    /// leave the open documents as they were (none opened, created, closed or edited),
    /// send no event (but those of debounced saves) and leave the disk under `root` as it
    /// was (``disk(_:open:)``). Returns how often each outcome came; `problem` hears what
    /// was wrong.
    static func drive(
        _ socket: String, requests: Int, generator: inout RequestGenerator, checkRefusals: Bool = false,
        root: String = "", problem: (String) -> Void
    ) throws -> [String: Int] {
        let codes = Set(ControlProtocol.ErrorCode.allCases.map(\.rawValue))
        let raw = try ControlSocketTests.Raw(socket)
        var answered: [String: Int] = [:]
        let subscriber = try ControlSocketTests.Raw(socket)
        if checkRefusals {
            try subscriber.send(
                #"{"id":-3,"cmd":"subscribe","events":["saved","save-failed","changed-on-disk","conflict","recreated","renamed","closed"]}"#
                    + "\n")
            _ = try subscriber.line()
        }
        var before = checkRefusals ? try documents(raw, id: -1) : []
        var beforeDisk = checkRefusals ? disk(root, open: before) : []
        var refusalsChecked = 0
        for id in 0..<requests {
            let request = generator.request(id: id)
            try raw.send(request + "\n")
            // Events (after a `subscribe`, an export's progress) come between replies.
            var reply: JSONValue?
            while let line = try raw.line() {
                if line["event"] != nil { continue }
                reply = line
                break
            }
            guard let answer = reply else {
                problem("no reply to \(request) (did the daemon stop?)")
                return answered
            }
            let text = answer.serialized(pretty: false)
            if answer["id"]?.intValue != id { problem("\(request) → \(text): another id") }
            guard let ok = answer["ok"]?.boolValue else {
                problem("a reply without ok: \(text)")
                continue
            }
            if ok {
                answered["ok", default: 0] += 1
            } else {
                let code = answer["error"]?["code"]?.stringValue ?? "(none)"
                if !codes.contains(code) || code == "internal-error" { problem("\(request) → \(text)") }
                if answer["error"]?["message"]?.stringValue?.isEmpty != false { problem("\(text): no message") }
                answered[code, default: 0] += 1
            }
            guard checkRefusals else { continue }
            let after = try documents(raw, id: -1)
            let sent = try events(subscriber)
            let afterDisk = disk(root, open: after)
            if !ok {
                refusalsChecked += 1
                if after != before {
                    problem(
                        "\(request) was refused and yet changed the open documents: \(Set(before).symmetricDifference(after).sorted())"
                    )
                }
                if !sent.isEmpty { problem("\(request) was refused and yet sent events: \(sent)") }
                if after == before, afterDisk != beforeDisk {
                    problem(
                        "\(request) was refused and yet changed the disk: \(beforeDisk.symmetricDifference(afterDisk).sorted())"
                    )
                }
            }
            before = after
            beforeDisk = afterDisk
        }
        if checkRefusals { answered["refusals checked"] = refusalsChecked }
        return answered
    }

    @Test(
        "Four clients sending random requests while another program renames, removes, rewrites and replaces files under the root: every request answered, the daemon serves on and stops by the book",
        .timeLimit(.minutes(3)))
    func concurrentWithOtherPrograms() async throws {
        let daemon = try await RunningDaemon(quiet: "20ms")
        let root = daemon.root
        // Where the other program's symbolic links point (`../outside` from the root).
        let outside = daemon.directory.sub("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Disk.write("planted\n", to: outside + "/planted.txt")
        let problems = Lock<[String]>([])
        let done = DispatchSemaphore(value: 0)
        var threads: [Thread] = []
        for client in 0..<4 {
            let socket = daemon.socket
            threads.append(
                Thread {
                    var generator = RequestGenerator(random: SeededGenerator(state: 100 + UInt64(client)))
                    do {
                        _ = try Self.drive(socket, requests: 1500, generator: &generator) { problem in
                            problems.withLock { $0.append("client \(client): \(problem)") }
                        }
                    } catch {
                        problems.withLock { $0.append("client \(client): \(error)") }
                    }
                    done.signal()
                })
        }
        // Another program, busy under the root the whole time.
        threads.append(
            Thread {
                var random = SeededGenerator(state: 7)
                let names = [
                    "a.txt", "b.json", "c.package", "d", "d/e.txt", "x", "é", "d/y", "q.json", "p.package",
                    "c.package/m.txt", "c.package/ch/1.txt", "d/f.package/z.txt", "new.md",
                ]
                let manager = FileManager.default
                // The other program never goes through a symbolic link itself (it makes
                // them, pointing outside, for the daemon to meet), so whatever appears
                // outside was put there by the daemon.
                func direct(_ relative: String) -> Bool {
                    var path = root
                    for component in relative.split(separator: "/") {
                        path += "/" + component
                        if (try? FileDescriptor.currentWorkingDirectory.status(of: path, followSymlinks: false))?.kind
                            == .symbolicLink
                        {
                            return false
                        }
                    }
                    return true
                }
                for step in 0..<6000 {
                    let first = names.randomElement(using: &random)!
                    let second = names.randomElement(using: &random)!
                    guard direct(PathName.parent(first)), direct(PathName.parent(second)) else {
                        // Unlink the link in the way instead.
                        var path = root
                        for component in first.split(separator: "/") {
                            path += "/" + component
                            if (try? FileDescriptor.currentWorkingDirectory.status(of: path, followSymlinks: false))?
                                .kind
                                == .symbolicLink
                            {
                                _ = unlink(path)
                                break
                            }
                        }
                        continue
                    }
                    let a = root + "/" + first
                    let b = root + "/" + second
                    switch Int.random(in: 0..<8, using: &random) {
                    case 0:
                        try? manager.createDirectory(
                            atPath: PathName.parent(a), withIntermediateDirectories: true)
                        try? Disk.write(["{}", "[1]", "text\n", "{bad", ""].randomElement(using: &random)!, to: a)
                    case 1:
                        try? Disk.write("renamed over \(step)\n", to: a + ".other")
                        _ = rename(a + ".other", a)
                    case 2: _ = rename(a, b)
                    case 3: try? manager.removeItem(atPath: a)
                    case 4: try? manager.createDirectory(atPath: a, withIntermediateDirectories: true)
                    case 5:
                        if let handle = FileHandle(forWritingAtPath: a) {
                            _ = try? handle.seekToEnd()
                            try? handle.write(contentsOf: Data("appended\n".utf8))
                            try? handle.close()
                        }
                    case 6: _ = symlink([outside, "a.txt", "../outside"].randomElement(using: &random)!, a)
                    default: _ = truncate(a, 0)
                    }
                }
                done.signal()
            })
        for thread in threads { thread.start() }
        let count = threads.count
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                for _ in 0..<count { done.wait() }
                continuation.resume()
            }
        }
        for problem in problems.withLock({ $0 }) { Issue.record(Comment(rawValue: problem)) }
        #expect(try daemon.ctl("sync").status == 0, "the watcher caught up")
        #expect(try daemon.ctl("status").status == 0, "another client is served")
        // Documents whose directory another program turned into a file cannot be saved:
        // the daemon says so and exits 1 (ExitCode.unsavedAtShutdown); anything else is a fault.
        let status = await daemon.stop()
        #expect(
            status == 0 || status == 1,
            "a clean exit or the documented unsaved-at-shutdown; output:\n\(daemon.process.output.suffix(30).joined(separator: "\n"))"
        )
        if status == 1 { #expect(daemon.process.output.contains { $0.contains("NOT SAVED at shutdown") }) }
        let names = try Disk.names(in: outside)
        #expect(names == ["planted.txt"], "nothing created outside the root: \(names)")
        #expect(try Disk.bytes(outside + "/planted.txt") == Data("planted\n".utf8), "nothing outside changed")
    }
}
