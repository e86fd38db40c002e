import Control
import Foundation
import Posix
import Synchronization

/// One client connection's output: replies and events are queued and written by
/// whichever task finds the queue idle, so a client that does not read slows only
/// itself; past `limit` unsent bytes the connection is marked broken and closed.
final class Connection: Sendable {
    let raw: Int32
    let loop: EventLoop
    let peer: PeerCredentials?
    private let limit: Int
    private struct Output {
        var pending: [UInt8] = []
        var writing = false
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

    /// Queues one line (the compact JSON of `message`) and writes what is queued.
    func send(_ message: JSONValue, isolation: isolated (any Actor)? = #isolation) async {
        var line = message.serializedBytes()
        line.append(10)
        let shouldWrite: Bool = output.withLock { state in
            if state.broken { return false }
            state.pending += line
            if state.pending.count > limit {
                state.broken = true
                return false
            }
            if state.writing { return false }
            state.writing = true
            return true
        }
        if shouldWrite { await drain() }
    }

    private func drain(isolation: isolated (any Actor)? = #isolation) async {
        let fd = FileDescriptor(rawValue: raw)
        while true {
            let chunk: [UInt8]? = output.withLock { state in
                if state.pending.isEmpty || state.broken {
                    state.writing = false
                    return nil
                }
                defer { state.pending = [] }
                return state.pending
            }
            guard let chunk else { return }
            var offset = 0
            while offset < chunk.count {
                do {
                    offset += try chunk.withUnsafeBytes { buffer in
                        Result { () throws(Errno) in try fd.send(UnsafeRawBufferPointer(rebasing: buffer[offset...])) }
                    }.get()
                } catch .wouldBlock {
                    if await !loop.writable(fd) {
                        output.withLock {
                            $0.broken = true
                            $0.writing = false
                        }
                        return
                    }
                } catch {
                    output.withLock {
                        $0.broken = true
                        $0.writing = false
                    }
                    return
                }
            }
        }
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
