import Autosave
import Control
import Documents
import Foundation
import FuzzSupport
import Logging

/// The daemon's control sessions, through the code that serves a connection: a
/// ``DocumentStore`` and a ``ControlServer`` started in this process as `autosaved`
/// starts them (with the edit journal on, `Mode=periodic`, so that `durable`, the reply
/// gate and `revert`'s release marks are reached), and a client with two connections to
/// the control socket that sends the input's lines one at a time, each once the one before
/// it (on either connection) is answered. Every line goes the daemon's way: read and split
/// by the connection's reader, decoded, answered at once on the store's thread or handed
/// to the connection's task (an export runs on the main actor, whose jobs the main thread
/// runs, as in the daemon).
///
/// The root holds `a.txt`, `b.json`, `z.bin`, `d/e.md`, the package `c.package` (`m.txt`,
/// `ch/1.txt`, `meta.json`), an export destination `out/`, `ignored/` (with the ignore
/// file's `*.tmp`), and the links `link` and `flink` to a directory and a file outside.
/// Every input starts from that tree: the documents the previous one opened are closed,
/// and the tree is made anew if anything in it changed.
///
/// Input: request lines, one a line (at most 32; empty lines are skipped: the daemon
/// ignores them). A line goes on connection 1, opened as the input starts — but a line
/// that starts with `2>` goes, without those two bytes, on connection 2, opened at its
/// first such line (a line empty without them is skipped too); both are closed at the
/// end of the input. Each line is sent once the one before it is answered, so the order
/// of the requests across the connections is the input's — but a line that starts (after
/// `2>`) with a tab is sent in one write with the line just before it when that line went
/// on the same connection (and their replies are awaited together): the daemon reads them
/// at once, and the lines after a request that waits go to the connection's task with it.
/// A tab line whose line before went on the other connection (or that comes first) is
/// sent alone (the tab is JSON whitespace: the request is the same). `@EXPORTS@` in a
/// line stands for the export directory's absolute path (`ExportDirectories=`; it changes
/// with the process).
///
/// Oracles, for every request: one reply line, on its own connection, a JSON object with
/// `ok` true or false; a refusal has an `error` with a documented `code` (never
/// `internal-error`) and a message; the reply echoes the request's `id` exactly when the
/// line is a JSON object giving it once, and carries none otherwise (not JSON, `id` given
/// twice) nor for a line over `MaxRequestSize=`, refused with `too-large`. Lines that are
/// objects with a string `event` (and no `ok`) are events, on either connection, and are
/// skipped; any other line on the connection that owes no reply (while the other one's
/// replies are awaited) is a reply to no request of its own. Replies on a connection come
/// in the order of its requests (an export's excepted). A refused request (a batch of
/// them, all refused) changes nothing: the open documents (path, type, change count,
/// contents) and every file under the root and the export directory are as they were —
/// but for `save-failed` and `conflict` refusals of `save`, `save-all` and `close`, which
/// report saves that were tried. Nothing is ever made or changed outside the root, the
/// journal's directory and the export directory: the tree around the root (its parent,
/// grandparent and their parent, with a planted file the root's symbolic links lead to)
/// stays as it was. After the last line a `list` on each open connection (connection 1's
/// first) must be answered next on it (no stray reply before it).
enum Layout {
    static let scratch = ScratchDirectory("session")
    /// Three levels below the scratch directory: `..`, `../..` and `../../..` all land
    /// in the tree this target watches.
    static let root = scratch.path + "/up/mid/root"
    static let outside = scratch.path + "/up/outside"
    static let journal = scratch.path + "/journal"
    static let exports = scratch.path + "/exports"
    static let socket = scratch.path + "/control.sock"
    static let maxRequestSize = 3072
    static let maxLines = 32
    static let ignoreFile = "ignored/\n*.tmp\n"
    /// `FUZZ_SESSION_TRACE=1` prints every request and its reply, and every event, each
    /// after its connection's number (to follow an input replayed).
    static let trace = getenv("FUZZ_SESSION_TRACE") != nil
}

/// A result handed from a task to the thread that waits for it (the semaphore orders the accesses).
final class Box<T>: @unchecked Sendable { var value: T? }

/// Runs `body` on the concurrency runtime and waits for it (the fuzzer's thread is not
/// one of its threads); on `executor` when given (the store's: no hop to reach it).
func blocking<T: Sendable>(
    on executor: (any TaskExecutor)? = nil, _ body: @escaping @Sendable () async -> T
) -> T {
    let box = Box<T>()
    let done = DispatchSemaphore(value: 0)
    Task(executorPreference: executor) {
        box.value = await body()
        done.signal()
    }
    done.wait()
    return box.value!
}

// MARK: The tree

/// What the root holds at the start of every input.
func makeRoot() {
    let root = Layout.root
    writeFile(root + "/.autosavedignore", Array(Layout.ignoreFile.utf8))
    writeFile(root + "/a.txt", Array("hello\nworld\n".utf8))
    writeFile(root + "/b.json", Array(#"{"k": [1, 2], "s": "x", "o": {"p": null}}"#.utf8) + [10])
    writeFile(root + "/z.bin", [0xFF, 0xFE, 0x00, 0x80, 0x41])
    mkdir(root + "/d", 0o755)
    writeFile(root + "/d/e.md", Array("# e\n".utf8))
    mkdir(root + "/c.package", 0o755)
    mkdir(root + "/c.package/ch", 0o755)
    writeFile(root + "/c.package/m.txt", Array("member\n".utf8))
    writeFile(root + "/c.package/ch/1.txt", Array("It was a dark night.\n".utf8))
    writeFile(root + "/c.package/meta.json", Array("{}\n".utf8))
    mkdir(root + "/out", 0o755)
    mkdir(root + "/ignored", 0o755)
    writeFile(root + "/ignored/i.txt", Array("ignored\n".utf8))
    // Symbolic links out of the root: to a directory and to a file outside it.
    symlink("../../outside", root + "/link")
    symlink("../../outside/planted.txt", root + "/flink")
}

/// A buffer reused by every directory listing and file digest (the fuzzer's thread alone uses them).
nonisolated(unsafe) let scratchBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)

/// glibc's wrapper of the system call (declared only with `_GNU_SOURCE`).
@_silgen_name("getdents64")
func getdents64(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int

/// The names in a directory, sorted (none when it cannot be read): getdents64(2) into a
/// reused buffer, without opendir's allocation per listing.
func names(in directory: String) -> [String] {
    let fd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0 else { return [] }
    defer { close(fd) }
    var names: [String] = []
    while true {
        let count = getdents64(fd, scratchBuffer.baseAddress!, scratchBuffer.count)
        if count <= 0 { break }
        var offset = 0
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
        while offset < count {
            let record = scratchBuffer.baseAddress! + offset
            let length = Int(record.loadUnaligned(fromByteOffset: 16, as: UInt16.self))
            let name = UnsafeRawBufferPointer(start: record + 19, count: length - 19)
            let bytes = name.prefix { $0 != 0 }
            if !bytes.elementsEqual([0x2E]) && !bytes.elementsEqual([0x2E, 0x2E]) {
                names.append(String(decoding: bytes, as: UTF8.self))
            }
            offset += length
        }
    }
    return names.sorted()
}

/// A digest of a file's bytes.
func digest(_ path: String) -> Int {
    let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    guard fd >= 0 else { return -1 }
    defer { close(fd) }
    var hasher = Hasher()
    while true {
        let n = read(fd, scratchBuffer.baseAddress!, scratchBuffer.count)
        if n <= 0 { break }
        hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: scratchBuffer[..<n]))
    }
    return hasher.finalize()
}

/// A digest of bytes, for contents compared between snapshots.
func digest(_ bytes: some Sequence<UInt8>) -> String {
    var hasher = Hasher()
    for byte in bytes { hasher.combine(byte) }
    return String(UInt(bitPattern: hasher.finalize()), radix: 16)
}

/// The tree under `path` (symbolic links not followed): each entry's relative path, kind
/// and mode, and a file's size and a digest of its bytes, or a link's target; `skipping`
/// relative paths are left out.
func tree(_ path: String, skipping: Set<String> = []) -> [String] {
    var found: [String] = []
    func walk(_ relative: String) {
        let full = relative.isEmpty ? path : path + "/" + relative
        for name in names(in: full) {
            let child = relative.isEmpty ? name : relative + "/" + name
            if skipping.contains(child) { continue }
            var status = stat()
            guard lstat(path + "/" + child, &status) == 0 else { continue }
            switch status.st_mode & S_IFMT {
            case S_IFDIR:
                found.append("\(child)/ mode \(status.st_mode)")
                walk(child)
            case S_IFLNK:
                var target = [UInt8](repeating: 0, count: 4096)
                let n = target.withUnsafeMutableBytes { readlink(path + "/" + child, $0.baseAddress!, $0.count) }
                found.append(child + " -> " + String(decoding: target.prefix(max(0, n)), as: UTF8.self))
            case S_IFREG:
                found.append(
                    "\(child) mode \(status.st_mode) size \(status.st_size) digest \(digest(path + "/" + child))")
            default:
                found.append("\(child) mode \(status.st_mode)")
            }
        }
    }
    walk("")
    return found
}

/// What the store and the disk show: the open documents and the files under the root
/// and the export directory (contents as digests).
struct Snapshot: Equatable {
    var documents: [String]
    var disk: [String]

    func difference(to other: Snapshot) -> String {
        let documents = Set(self.documents).symmetricDifference(other.documents).sorted()
        let disk = Set(self.disk).symmetricDifference(other.disk).sorted()
        return "documents: \(documents), disk: \(disk)"
    }
}

/// The open documents, each with its contents (a package's members and theirs), read from the store.
func documents(of store: isolated DocumentStore) -> [String] {
    store.list().map { info in
        var line = "\(info.path) \(info.contentType.identifier) changes \(info.changeCount) "
        switch try? store.read(info.path, .contents) {
        case .text(let text): line += "text " + digest(text.utf8)
        case .json(let value): line += "json " + digest(value.serializedBytes())
        case .data(let data): line += "data " + digest(data)
        case .members(let members): line += "members \(members)"
        case nil:
            if case .members(let members)? = try? store.read(info.path, .members) {
                line += "members"
                for member in members {
                    switch try? store.read(info.path, .member(member)) {
                    case .text(let text): line += " \(member)=" + digest(text.utf8)
                    case .data(let data): line += " \(member)=" + digest(data)
                    case let other: line += " \(member)=\(String(describing: other))"
                    }
                }
            } else {
                line += "unreadable"
            }
        }
        return line
    }.sorted()
}

// MARK: The daemon

/// The store and the server, started once; reset before every input.
final class Daemon: @unchecked Sendable {
    let store: DocumentStore
    let server: ControlServer
    /// ``disk()`` as the root is made.
    let pristine: [String]

    init() {
        for directory in [
            Layout.scratch.path + "/up", Layout.scratch.path + "/up/mid", Layout.root, Layout.outside, Layout.journal,
            Layout.exports,
        ] {
            check(mkdir(directory, 0o755) == 0, "cannot make \(directory): errno \(errno)")
        }
        writeFile(Layout.outside + "/planted.txt", Array("planted\n".utf8))
        makeRoot()
        pristine = tree(Layout.root).map { "root/" + $0 }
        var configuration = Configuration(environment: [:])
        configuration.root = Layout.root
        configuration.socketPath = Layout.socket
        // Saves only when asked: a refusal's snapshot is not raced by a debounced save.
        configuration.quietPeriod = .seconds(3600)
        configuration.maxDelay = .seconds(3600)
        // Another program's changes are not this target's: the tree changes only by requests.
        configuration.watchEnabled = false
        configuration.journalMode = .periodic
        configuration.journalDirectorySetting = Layout.journal
        configuration.maxRequestSize = Layout.maxRequestSize
        configuration.exportDirectories = [Layout.exports]
        let log = Logger(level: .critical)
        let store = DocumentStore(configuration: configuration, log: log)
        self.store = store
        _ = blocking { await store.openAll() }
        do {
            _ = try blocking { () async -> Result<JournalReplaySummary?, any Error> in
                do { return .success(try await store.openJournal()) } catch { return .failure(error) }
            }.get()
        } catch {
            fail("the journal does not open: \(error)")
        }
        Task { await store.runScheduler() }
        do {
            server = try ControlServer(store: store, configuration: configuration, log: log) {
                .success("configuration reloaded (FuzzSession reads none)")
            }
        } catch {
            fail("the control server does not start: \(error)")
        }
        let server = server
        Task { await server.run() }
    }

    /// The state before an input: no connection, no open document, the tree as made.
    func reset() {
        let store = store
        waitForNoConnection()
        let left = blocking { () async -> [String] in
            for info in await store.list() {
                do { try await store.close(info.path) } catch {
                    // A document whose save fails stays open: its edits are thrown away first.
                    _ = try? await store.revert(info.path)
                    try? await store.close(info.path)
                }
            }
            return await store.list().map(\.path)
        }
        check(left.isEmpty, "documents that cannot be closed: \(left)")
        // Made anew only when something changed (most inputs only read, or are refused).
        if disk() != pristine {
            removeTree(Layout.root, keepingTop: true)
            removeTree(Layout.exports, keepingTop: true)
            makeRoot()
        }
    }

    /// The files under the root and the export directory.
    func disk() -> [String] {
        tree(Layout.root).map { "root/" + $0 } + tree(Layout.exports).map { "exports/" + $0 }
    }

    func waitForNoConnection() {
        let started = ContinuousClock.now
        while server.connectionCount > 0 {
            check(
                ContinuousClock.now - started < .seconds(20),
                "a closed connection is still being served after 20 s")
            usleep(50)
        }
    }

    /// The observable state, once no save is being written.
    func snapshot() -> Snapshot {
        let store = store
        let started = ContinuousClock.now
        while true {
            let (saving, documents) = blocking(on: store.taskExecutor) { () async -> (Int, [String]) in
                await Self.settled(store)
            }
            if saving == 0 {
                return Snapshot(documents: documents, disk: disk())
            }
            check(ContinuousClock.now - started < .seconds(20), "a save is still being written after 20 s")
            usleep(100)
        }
    }

    private static func settled(_ store: isolated DocumentStore) -> (Int, [String]) {
        let saving = store.status().saving
        return (saving, saving == 0 ? documents(of: store) : [])
    }
}

// MARK: The client

/// A blocking client of the control socket that reads whole lines.
struct Client {
    let fd: Int32
    var buffer: [UInt8] = []

    init() {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        check(fd >= 0, "socket: errno \(errno)")
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(Layout.socket.utf8)
        check(path.count < MemoryLayout.size(ofValue: address.sun_path), "the socket path is too long")
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        check(connected == 0, "connect: errno \(errno)")
        // A reply that does not come within this is a hang: the read fails and the oracle says so.
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            }
            check(n > 0, "send: errno \(errno)")
            sent += n
        }
    }

    /// The next whole line received (without its newline), if one is buffered.
    mutating func bufferedLine() -> [UInt8]? {
        guard let newline = buffer.firstIndex(of: 10) else { return nil }
        defer { buffer.removeSubrange(...newline) }
        return Array(buffer[..<newline])
    }

    /// Reads once (blocking, up to the 20-s timeout) into the buffer; false at the end
    /// of the connection, on an error or after the timeout.
    mutating func receive() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
        if n <= 0 { return false }
        buffer += chunk[..<n]
        return true
    }

    func close() { _ = Glibc.close(fd) }
}

/// The input's two connections: connection 1 opened as the input starts, connection 2
/// at the first line sent on it.
struct Connections {
    private var clients: [Client?] = [Client(), nil]

    /// Whether connection `number` (1 or 2) is open.
    func isOpen(_ number: Int) -> Bool { clients[number - 1] != nil }

    /// Sends `bytes` on connection `number`, opening it first if need be.
    mutating func send(_ bytes: [UInt8], on number: Int) {
        if clients[number - 1] == nil { clients[number - 1] = Client() }
        clients[number - 1]!.send(bytes)
    }

    /// The next line connection `number` sends (without its newline); `nil` at its end or
    /// after 20 s of silence. Meanwhile what the other connection, which owes no reply,
    /// sends is read as it comes: events only, or the oracle fails.
    mutating func line(on number: Int, input: [UInt8]) -> [UInt8]? {
        let mine = number - 1
        let other = 1 - mine
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            if let line = clients[mine]!.bufferedLine() { return line }
            guard clients[other] != nil else {
                if !clients[mine]!.receive() { return nil }
                continue
            }
            var fds = [
                pollfd(fd: clients[mine]!.fd, events: Int16(POLLIN), revents: 0),
                pollfd(fd: clients[other]!.fd, events: Int16(POLLIN), revents: 0),
            ]
            let milliseconds = Int32(max(0, (deadline - ContinuousClock.now) / .milliseconds(1)))
            let ready = poll(&fds, 2, milliseconds)
            if ready == 0 { return nil }
            if ready < 0 {
                check(errno == EINTR, "poll: errno \(errno)")
                continue
            }
            if fds[1].revents != 0 {
                check(
                    clients[other]!.receive(),
                    "connection \(other + 1) ended while connection \(number)'s replies were awaited\ninput: \(show(input))"
                )
                while let line = clients[other]!.bufferedLine() {
                    if Layout.trace { print("\(other + 1)~ " + show(line)) }
                    check(
                        (try? JSONValue(parsing: line)).map { isEvent($0, line: line) } ?? false,
                        "a line on connection \(other + 1), which owes no reply, while connection \(number)'s "
                            + "replies were awaited: \(show(line))\ninput: \(show(input))")
                }
            }
            if fds[0].revents != 0, !clients[mine]!.receive() { return nil }
        }
    }

    func close() {
        for client in clients { client?.close() }
    }
}

// MARK: The oracles

let documentedCodes = Set(ControlProtocol.ErrorCode.allCases.map(\.rawValue))

/// The `id` the reply must echo: the request's, when the line is a JSON object that gives
/// it once (a line that gives it twice is refused without one).
func expectedID(_ line: [UInt8]) -> JSONValue? {
    guard case .object(let members)? = try? JSONValue(parsing: line) else { return nil }
    let ids = members.filter { $0.key.utf8.elementsEqual("id".utf8) }
    // (Not `nil` in a conditional expression: JSONValue takes `nil` as JSON's null.)
    guard ids.count == 1 else { return nil }
    return ids[0].value
}

func member(_ value: JSONValue, _ name: String) -> JSONValue? {
    guard case .object(let members) = value else { return nil }
    return members.last { $0.key.utf8.elementsEqual(name.utf8) }?.value
}

/// The command a request line names, when it is a JSON object with a string `cmd`.
func command(_ line: [UInt8]) -> String? {
    guard let value = try? JSONValue(parsing: line), case .string(let name)? = member(value, "cmd") else { return nil }
    return name
}

/// Whether a line the daemon sent is an event: an object with a string `event` (and then no `ok`).
func isEvent(_ value: JSONValue, line: [UInt8]) -> Bool {
    guard case .string? = member(value, "event") else { return false }
    check(member(value, "ok") == nil, "an event line with ok: \(show(line))")
    return true
}

/// What a request's reply must carry as `id` (serialized), `nil` for none.
func echo(for request: [UInt8]) -> [UInt8]? {
    // The limit counts a carriage return before the newline; such a line is not read.
    if request.count > Layout.maxRequestSize { return nil }
    var line = request
    if line.last == 13 { line.removeLast() }
    return expectedID(line)?.serializedBytes()
}

/// One write of the input: the connection it goes on (1 or 2) and its request lines.
struct Batch {
    var connection: Int
    var requests: [[UInt8]]

    /// Its lines as failure messages show them.
    var shown: String {
        requests.map { (connection == 2 ? "2>" : "") + show($0) }.joined(separator: "\n")
    }
}

/// Sends a batch's requests in one write on its connection and checks their replies;
/// returns each reply's `ok` and refusal code, in the order the replies came. Replies
/// come in the order of the requests, but an export's, which may come after later ones:
/// with an export in the batch, each reply's `id` is matched against those the requests
/// still owed.
func exchange(_ batch: Batch, connections: inout Connections, input: [UInt8]) -> [(ok: Bool, code: String?)] {
    let requests = batch.requests
    connections.send(requests.flatMap { $0 + [10] }, on: batch.connection)
    let inOrder = !requests.contains { command($0) == "export" }
    var owed = requests.map(echo(for:))
    var outcomes: [(ok: Bool, code: String?)] = []
    let shown = batch.shown
    while outcomes.count < requests.count {
        guard let reply = connections.line(on: batch.connection, input: input) else {
            fail(
                "no reply on connection \(batch.connection) to \(shown) (the connection ended or 20 s passed)"
                    + "\ninput: \(show(input))")
        }
        let value: JSONValue
        do { value = try JSONValue(parsing: reply) } catch {
            fail("a reply line that is not JSON (\(error)): \(show(reply))\nrequests: \(shown)")
        }
        guard case .object = value else { fail("a reply line that is not an object: \(show(reply))") }
        if isEvent(value, line: reply) {
            if Layout.trace { print("\(batch.connection)~ " + show(reply)) }
            continue
        }
        if Layout.trace {
            print("\(batch.connection)> " + show(requests[outcomes.count]) + "\n\(batch.connection)< " + show(reply))
        }
        guard case .bool(let ok)? = member(value, "ok") else {
            fail("a reply without ok true or false: \(show(reply))\nrequests: \(shown)")
        }
        var code: String?
        if !ok {
            guard let error = member(value, "error"), case .string(let text)? = member(error, "code"),
                case .string(let message)? = member(error, "message")
            else { fail("a refusal without error code and message: \(show(reply))") }
            check(documentedCodes.contains(text), "an undocumented error code: \(show(reply))")
            check(text != "internal-error", "internal-error for \(shown): \(show(reply))\ninput: \(show(input))")
            check(!message.isEmpty, "a refusal with an empty message: \(show(reply))")
            code = text
        }
        let index = outcomes.count
        if requests[index].count > Layout.maxRequestSize, inOrder {
            check(code == "too-large", "a line over MaxRequestSize= not refused as too-large: \(show(reply))")
        }
        let echoed = member(value, "id")?.serializedBytes()
        let owedIndex = inOrder ? (owed[0] == echoed ? 0 : nil) : owed.firstIndex { $0 == echoed }
        guard let owedIndex else {
            fail(
                "the reply's id is \(echoed.map(show) ?? "missing"), the request's "
                    + "\(owed[0].map(show) ?? "none")\nrequests: \(shown)\nreply: \(show(reply))")
        }
        owed.remove(at: owedIndex)
        outcomes.append((ok, code))
    }
    return outcomes
}

/// Refusals that report saves tried (of other documents too, for `save-all`): what they
/// saved stays saved.
func mayChangeWhenRefused(_ requests: [[UInt8]], _ outcomes: [(ok: Bool, code: String?)]) -> Bool {
    requests.contains { ["save", "save-all", "close"].contains(command($0) ?? "") }
        && outcomes.contains { $0.code == "save-failed" || $0.code == "conflict" }
}

enum Harness {
    static let daemon = Daemon()
    /// The tree around the root as made: what every request must leave as it is.
    static let surroundings = around()

    static func around() -> [String] {
        tree(Layout.scratch.path, skipping: ["up/mid/root", "journal", "exports", "control.sock"])
    }
}

/// The line with `@EXPORTS@` replaced by the export directory's path.
func substituteExports(_ line: [UInt8]) -> [UInt8] {
    let marker = Array("@EXPORTS@".utf8)
    guard line.count >= marker.count, line.contains(UInt8(ascii: "@")) else { return line }
    var out: [UInt8] = []
    var index = 0
    while index < line.count {
        if line[index] == UInt8(ascii: "@"), line[index...].starts(with: marker) {
            out += Layout.exports.utf8
            index += marker.count
        } else {
            out.append(line[index])
            index += 1
        }
    }
    return out
}

/// The input's requests in batches: a line that starts with `2>` goes, without it, on
/// connection 2, any other on connection 1; a line that then starts with a tab (JSON
/// whitespace: the request is the same) goes in one write with the line just before it
/// when that one went on the same connection.
func batches(_ input: [UInt8]) -> [Batch] {
    var batches: [Batch] = []
    let lines = input.split(separator: 10, omittingEmptySubsequences: true).lazy
        .map { line in line.starts(with: [50, 62]) ? (2, line.dropFirst(2)) : (1, line) }
        .filter { !$0.1.isEmpty && $0.1 != [13] }.prefix(Layout.maxLines)
        .map { ($0.0, substituteExports(Array($0.1))) }
    for (connection, line) in lines {
        if line.first == 9, batches.last?.connection == connection {
            batches[batches.count - 1].requests.append(line)
        } else {
            batches.append(Batch(connection: connection, requests: [line]))
        }
    }
    return batches
}

func fuzzSession(_ input: [UInt8]) {
    let daemon = Harness.daemon
    let surroundings = Harness.surroundings
    daemon.reset()
    var connections = Connections()
    var before = daemon.snapshot()
    for batch in batches(input) {
        let outcomes = exchange(batch, connections: &connections, input: input)
        let after = daemon.snapshot()
        let shown = batch.shown
        if !outcomes.contains(where: \.ok), !mayChangeWhenRefused(batch.requests, outcomes) {
            let codes = outcomes.map { $0.code ?? "?" }
            check(
                after == before,
                "\(shown) was refused (\(codes)) and yet changed \(before.difference(to: after))\ninput: \(show(input))"
            )
        }
        let now = Harness.around()
        check(
            now == surroundings,
            "\(shown) changed what lies outside the root: \(Set(now).symmetricDifference(surroundings).sorted())\ninput: \(show(input))"
        )
        before = after
    }
    // Nothing more is on its way: the next reply on each connection is the one to this.
    for connection in [1, 2] where connections.isOpen(connection) {
        let last = Batch(connection: connection, requests: [Array(#"{"id":"fuzz-last","cmd":"list"}"#.utf8)])
        check(
            exchange(last, connections: &connections, input: input)[0].ok,
            "the closing list on connection \(connection) was refused\ninput: \(show(input))")
    }
    connections.close()
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    fuzzSession(bytes(data, size))
    return 0
}

// libFuzzer's driver runs on a thread of its own: the main thread runs the main actor's
// jobs, as in the daemon (an export runs on the main actor).
let driver = Thread { exit(runFuzzer(CommandLine.argc, CommandLine.unsafeArgv, testOneInput)) }
driver.stackSize = 16 << 20
driver.start()
dispatchMain()
