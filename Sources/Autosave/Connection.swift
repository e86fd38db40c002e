import Control
import Foundation
import Posix
import Synchronization

/// One client connection's output. Replies and events are queued, and the event loop
/// writes every connection's queue in one pass before it next waits for readiness, as
/// Redis does: a client gets the replies to everything it sent in that round with one
/// write, and is woken once. A client that does not read slows only itself; past
/// `limit` unsent bytes the connection is marked broken and closed.
final class Connection: Sendable {
    let raw: Int32
    let loop: EventLoop
    let peer: PeerCredentials?
    private let limit: Int
    private struct Output {
        var pending: [UInt8] = []
        /// Handed to the loop for writing (queued, or waiting for the socket to drain).
        var scheduled = false
        var broken = false
    }
    private let output = Mutex(Output())

    init(raw: Int32, loop: EventLoop, peer: PeerCredentials?, limit: Int) {
        self.raw = raw
        self.loop = loop
        self.peer = peer
        self.limit = limit
    }

    var isBroken: Bool { output.withLock { $0.broken } }

    func markBroken() { output.withLock { $0.broken = true } }

    /// Queues one line (the compact JSON of `message`); the loop writes it.
    func send(_ message: JSONValue) { send(json: message.serializedBytes()) }

    /// Queues one line of JSON text given as bytes (without the newline).
    func send(json: [UInt8]) {
        var line = json
        line.append(10)
        let schedule: Bool = output.withLock { state in
            if state.broken { return false }
            if state.pending.isEmpty {
                state.pending = line
            } else {
                state.pending += line
            }
            if state.pending.count > limit {
                state.broken = true
                return false
            }
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        if schedule { loop.scheduleFlush(self) }
    }

    /// Writes what is queued, without blocking. `false` when the socket is full and
    /// output remains: call again once it is writable. Called by the loop only.
    func flush() -> Bool {
        let fd = FileDescriptor(rawValue: raw)
        while true {
            let chunk: [UInt8]? = output.withLock { state in
                if state.pending.isEmpty || state.broken {
                    state.scheduled = false
                    return nil
                }
                defer { state.pending = [] }
                return state.pending
            }
            guard let chunk else { return true }
            var offset = 0
            while offset < chunk.count {
                do {
                    offset += try chunk.withUnsafeBytes { buffer in
                        Result { () throws(Errno) in try fd.send(UnsafeRawBufferPointer(rebasing: buffer[offset...])) }
                    }.get()
                } catch .wouldBlock {
                    output.withLock { state in
                        state.pending = Array(chunk[offset...]) + state.pending
                    }
                    return false
                } catch {
                    output.withLock {
                        $0.broken = true
                        $0.scheduled = false
                    }
                    return true
                }
            }
        }
    }

    /// Writes everything still queued before the connection is closed, waiting for the
    /// client to read as needed; gives up when the client is gone.
    func finish(isolation: isolated (any Actor)? = #isolation) async {
        let fd = FileDescriptor(rawValue: raw)
        while !flush() {
            if await !loop.writable(fd) { break }
        }
        markBroken()
    }
}

/// Splits a byte stream into lines, refusing lines longer than a limit without
/// buffering them.
struct LineReader {
    enum Item {
        case line([UInt8])
        /// A line longer than the limit was skipped (its length so far).
        case tooLarge(Int)
    }

    let limit: Int
    private var partial: [UInt8] = []
    private var discarding = false
    private var discarded = 0

    init(limit: Int) { self.limit = limit }

    mutating func feed(_ bytes: UnsafeRawBufferPointer) -> [Item] {
        var items: [Item] = []
        var start = 0
        let count = bytes.count
        while start < count {
            guard let newline = bytes[start...].firstIndex(of: 10) else {
                let rest = count - start
                if discarding {
                    discarded += rest
                } else if partial.count + rest > limit {
                    discarding = true
                    discarded = partial.count + rest
                    partial = []
                } else {
                    partial += bytes[start..<count]
                }
                return items
            }
            if discarding {
                discarded += newline - start
                items.append(.tooLarge(discarded))
                discarding = false
                discarded = 0
            } else if partial.count + (newline - start) > limit {
                items.append(.tooLarge(partial.count + newline - start))
                partial = []
            } else {
                var line = partial
                line += bytes[start..<newline]
                partial = []
                if line.last == 13 { line.removeLast() }
                if !line.isEmpty { items.append(.line(line)) }
            }
            start = newline + 1
        }
        return items
    }
}
