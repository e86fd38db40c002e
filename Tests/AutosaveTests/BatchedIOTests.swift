import Control
import Foundation
import Posix
import TestSupport
import Testing

/// The event loop's batched reads and sends (`[Control] IOUring=`), through the built
/// daemon: what clients see must not depend on whether a pass's calls went through
/// io_uring together or one system call each.
@Suite("The loop's reads and replies made together through io_uring (IOUring=)", .serialized)
struct BatchedIOTests {
    /// A client socket (``ControlSocketTests/Raw``'s: connected, with a read timeout) read a
    /// buffer at a time, so that a reply of megabytes takes a few reads.
    final class Client {
        private let raw: ControlSocketTests.Raw
        var fd: FileDescriptor { raw.fd }
        private var buffer: [UInt8] = []

        init(_ path: String) throws { raw = try ControlSocketTests.Raw(path) }

        func send(_ text: String) throws { try fd.writeAll(Array(text.utf8)) }

        /// The next line's bytes, without its newline; `nil` at the end of file.
        func rawLine() throws -> [UInt8]? {
            var scanned = 0
            while true {
                if let newline = buffer[scanned...].firstIndex(of: 10) {
                    let line = Array(buffer[..<newline])
                    buffer.removeSubrange(...newline)
                    return line
                }
                scanned = buffer.count
                var chunk = [UInt8](repeating: 0, count: 256 << 10)
                let count = try chunk.withUnsafeMutableBytes { try fd.read(into: $0) }
                if count == 0 { return nil }
                buffer += chunk[..<count]
            }
        }

        func line() throws -> JSONValue? { try rawLine().map { try JSONValue(parsing: $0) } }
    }

    /// `status`'s `io_uring` object.
    static func ioURing(_ client: ControlClient) throws -> JSONValue {
        try client.call(["cmd": "status"])["io_uring"] ?? .null
    }

    /// Asks `status` until `io_uring`'s state is `state` (a reload is applied by the loop
    /// after the signal: at most 10,000 times); the last state seen.
    static func waitForState(_ state: String, _ client: ControlClient) throws -> String {
        var seen = ""
        for _ in 0..<10_000 {
            seen = try ioURing(client)["state"]?.stringValue ?? ""
            if seen == state { break }
        }
        return seen
    }

    @Test(
        "Clients whose requests arrive while the loop is busy are read and answered together, through io_uring in batches (IOUring=yes) or a system call each (no): every client gets its own replies, in order",
        arguments: ["yes", "no"])
    func clientsTogether(setting: String) async throws {
        let daemon = try await RunningDaemon("IOUring=\(setting)\n", quiet: "1h")
        let control = try daemon.client()
        let start = try Self.ioURing(control)
        #expect(start["state"]?.stringValue == (setting == "yes" ? "in-use" : "off"), "\(start)")
        #expect(start["error"] == .null, "\(start)")
        // A document whose `get` keeps the loop busy encoding its reply (milliseconds).
        let staller = try ControlSocketTests.Raw(daemon.socket)
        try staller.fill("big.txt", megabytes: 8, of: "b")
        let stalling = try Client(daemon.socket)
        let clients = try (0..<8).map { _ in try Client(daemon.socket) }
        for index in clients.indices {
            #expect(try control.call(["cmd": "set", "doc": .string("c\(index).txt"), "text": ""])["ok"] == true)
        }
        var batched = 0
        for round in 0..<12 {
            try stalling.send(#"{"id":\#(round),"cmd":"get","doc":"big.txt"}"# + "\n")
            // While the loop answers that, each client sends an edit and a read of its own
            // document, in one write.
            for (index, client) in clients.enumerated() {
                try client.send(
                    #"{"id":\#(round * 100 + index),"cmd":"append","doc":"c\#(index).txt","text":"\#(round),"}"# + "\n"
                        + #"{"id":\#(round * 100 + 50 + index),"cmd":"get","doc":"c\#(index).txt"}"# + "\n")
            }
            let expected = (0...round).map { "\($0)," }.joined()
            for (index, client) in clients.enumerated() {
                let edit = try client.line()
                #expect(
                    edit?["id"]?.intValue == round * 100 + index && edit?["ok"] == true, "\(String(describing: edit))")
                let read = try client.line()
                #expect(read?["id"]?.intValue == round * 100 + 50 + index, "\(String(describing: read))")
                #expect(read?["text"]?.stringValue == expected, "client \(index), round \(round)")
            }
            let big = try stalling.rawLine() ?? []
            #expect(big.count > 8 << 20 && big.starts(with: Array(#"{"id":\#(round),"ok":true"#.utf8)))
            let now = try Self.ioURing(control)
            if (now["receive_batches"]?.intValue ?? 0) > 0, (now["send_batches"]?.intValue ?? 0) > 0 {
                batched += 1
                if batched >= 3 { break }
            }
        }
        let summary = try daemon.ctl("status").stdout
        #expect(
            summary.contains(
                setting == "yes"
                    ? "; reads and replies through io_uring: "
                    : "; io_uring off (IOUring=no): a system call for each read and reply"), "\(summary)")
        let end = try Self.ioURing(control)
        if setting == "yes" {
            #expect(batched >= 3, "no batch through io_uring in 12 rounds: \(end)")
            // At least three calls a batch (fewer are made one by one).
            let receives = end["receives"]?.intValue ?? 0
            let receiveBatches = end["receive_batches"]?.intValue ?? 0
            #expect(receives >= 3 * receiveBatches && receiveBatches > 0, "\(end)")
            let sends = end["sends"]?.intValue ?? 0
            let sendBatches = end["send_batches"]?.intValue ?? 0
            #expect(sends >= 3 * sendBatches && sendBatches > 0, "\(end)")
        } else {
            #expect(end["state"]?.stringValue == "off", "\(end)")
            for key in ["receive_batches", "receives", "send_batches", "sends"] {
                #expect(end[key]?.intValue == 0, "\(key): \(end)")
            }
        }
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "A client that does not read, answered in the same passes as others sending requests larger than a batched read: what its full socket does not take waits, every reply arrives whole and in order once it reads, and the others' edits arrive whole (IOUring=yes and no)",
        arguments: ["yes", "no"])
    func fullSocketInABatch(setting: String) async throws {
        let daemon = try await RunningDaemon("IOUring=\(setting)\n", quiet: "1h")
        let control = try daemon.client()
        let text = String(repeating: "0123456789abcdef", count: 1024)  // 16 KiB
        #expect(try control.call(["cmd": "set", "doc": "r.txt", "text": .string(text)])["ok"] == true)
        let staller = try ControlSocketTests.Raw(daemon.socket)
        try staller.fill("big.txt", megabytes: 8, of: "b")
        let stalling = try Client(daemon.socket)
        let reader = try Client(daemon.socket)
        let others = try (0..<4).map { _ in try Client(daemon.socket) }
        // In each round, while the loop answers a `get` of 8 MiB, the reader asks for 15
        // reads of 16 KiB (240 KiB of replies: more than its socket holds, within what a
        // pass's batch takes) and the others for edits larger than a batched read's share of
        // the loop's buffer (16 KiB), which arrive in pieces, read in turn. The next pass
        // reads and answers them together: the reader's send is cut short by its full
        // socket, and the rest must wait, in order, behind what its later requests add.
        let rounds = 4
        for round in 0..<rounds {
            try stalling.send(#"{"id":\#(round),"cmd":"get","doc":"big.txt"}"# + "\n")
            try reader.send(
                (0..<15).map { #"{"id":\#(round * 15 + $0),"cmd":"get","doc":"r.txt"}"# + "\n" }.joined())
            let value = String(repeating: "\(round)", count: 40_000)
            for (index, other) in others.enumerated() {
                try other.send(#"{"id":\#(round),"cmd":"set","doc":"o\#(index).txt","text":"\#(value)"}"# + "\n")
            }
            for other in others {
                let reply = try other.line()
                #expect(reply?["id"]?.intValue == round && reply?["ok"] == true, "\(String(describing: reply))")
            }
            #expect(try stalling.rawLine()?.count ?? 0 > 8 << 20)
        }
        for id in 0..<(15 * rounds) {
            let reply = try reader.line()
            #expect(reply?["id"]?.intValue == id, "reply \(id): \(String(describing: reply?["id"]))")
            #expect(reply?["text"]?.stringValue == text, "reply \(id) whole")
        }
        for index in others.indices {
            let last = try control.call(["cmd": "get", "doc": .string("o\(index).txt")])["text"]?.stringValue
            #expect(last == String(repeating: "\(rounds - 1)", count: 40_000), "o\(index).txt")
        }
        // Nothing more: the next reply is the one to this request.
        try reader.send(#"{"id":1000,"cmd":"status"}"# + "\n")
        #expect(try reader.line()?["id"]?.intValue == 1000)
        let end = try Self.ioURing(control)
        if setting == "yes" { #expect((end["send_batches"]?.intValue ?? 0) > 0, "\(end)") }
        #expect(await daemon.stop() == 0)
    }

    @Test(
        "Where the kernel refuses io_uring (kernel.io_uring_disabled=2), the daemon says so at start-up and in status, and serves every client with a system call each; a reload after the kernel allows it again takes it up",
        .enabled(if: getuid() == 0 && FileManager.default.isWritableFile(atPath: "/proc/sys/kernel/io_uring_disabled")))
    func refusedByTheKernel() async throws {
        let setting = "/proc/sys/kernel/io_uring_disabled"
        let before = try String(contentsOfFile: setting, encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines)
        try Disk.write("2\n", to: setting)
        defer { try? Disk.write(before + "\n", to: setting) }
        let daemon = try await RunningDaemon(quiet: "1h")
        try Disk.write(before + "\n", to: setting)
        await daemon.process.waitForLine(
            containing:
                "io_uring is unavailable: EPERM (Operation not permitted); the event loop makes a system call for each client's read and reply"
        )
        let control = try daemon.client()
        let refused = try Self.ioURing(control)
        #expect(
            refused["state"]?.stringValue == "unavailable" && refused["error"]?.stringValue == "EPERM", "\(refused)")
        let summary = try daemon.ctl("status").stdout
        #expect(summary.contains("; io_uring unavailable (EPERM): a system call for each read and reply"), "\(summary)")
        let clients = try (0..<6).map { _ in try Client(daemon.socket) }
        for round in 0..<20 {
            for (index, client) in clients.enumerated() {
                try client.send(#"{"id":\#(round),"cmd":"set","doc":"k\#(index).txt","text":"\#(round)"}"# + "\n")
            }
            for client in clients { #expect(try client.line()?["id"]?.intValue == round) }
        }
        let text = try control.call(["cmd": "metrics"])["text"]?.stringValue ?? ""
        #expect(MetricsTests.value(text, "autosaved_io_uring") == 0, "\(text)")
        // The setting applied again by a reload: the kernel allows it now.
        let config = daemon.directory.sub("autosaved.conf")
        try Disk.write(try String(contentsOfFile: config, encoding: .utf8) + "IOUring=no\n", to: config)
        daemon.process.signal(SIGHUP)
        #expect(try Self.waitForState("off", control) == "off")
        try Disk.write(
            try String(contentsOfFile: config, encoding: .utf8).replacingOccurrences(
                of: "IOUring=no", with: "IOUring=yes"),
            to: config)
        daemon.process.signal(SIGHUP)
        #expect(try Self.waitForState("in-use", control) == "in-use")
        let after = try control.call(["cmd": "metrics"])["text"]?.stringValue ?? ""
        #expect(MetricsTests.value(after, "autosaved_io_uring") == 1)
        #expect(await daemon.stop() == 0)
    }
}
