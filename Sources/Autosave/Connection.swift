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
        /// The queued output includes a reply that may go out only once the journal is
        /// durable through this LSN (see ``ReplyGate``).
        var durableNeed: UInt64 = 0
        /// The queued output includes the reply to an edit whose record has this LSN: it
        /// goes out only once the journal has written it.
        var writtenNeed: UInt64 = 0
        /// Parked in the gate until the journal catches up.
        var held = false
    }
    private let output = Lock(Output())
    /// `Output.broken`, readable without the lock (the loop asks before every read).
    private let brokenFlag = Atomic<Bool>(false)

    /// Replies wait here for the journal (see ``ReplyGate``).
    let gate: ReplyGate?

    init(raw: Int32, loop: EventLoop, peer: PeerCredentials?, limit: Int, gate: ReplyGate? = nil) {
        self.raw = raw
        self.loop = loop
        self.peer = peer
        self.limit = limit
        self.gate = gate
    }

    /// The output queued so far, and whatever is queued after it, goes out only once the
    /// journal is durable through `lsn`.
    func require(durable lsn: UInt64) {
        output.withLock { $0.durableNeed = max($0.durableNeed, lsn) }
    }

    /// The output queued so far, and whatever is queued after it, goes out only once the
    /// journal has written the records through `lsn`, and has synced them when `durable`:
    /// the reply to an edit whose record is `lsn`.
    func require(written lsn: UInt64, durable: Bool) {
        output.withLock { state in
            state.writtenNeed = max(state.writtenNeed, lsn)
            if durable { state.durableNeed = max(state.durableNeed, lsn) }
        }
    }

    /// After a journal write failed, through `lsn`: output that acknowledges records the
    /// journal has not written waits until they are synced (the journal writes them
    /// again, then syncs). Output that acknowledges nothing unwritten — a `status`, a
    /// `get`, another client's edit journalled earlier — goes out as usual: while the disk
    /// is full, `status` is how an operator learns of it.
    func requireDurableIfUnwritten(through lsn: UInt64) {
        guard let gate else { return }
        let written = gate.written.load(ordering: .acquiring)
        output.withLock { state in
            if state.writtenNeed > written { state.durableNeed = max(state.durableNeed, lsn) }
        }
    }

    /// Whether the gate still keeps this connection's output back.
    func isHeldByGate(_ gate: ReplyGate) -> Bool {
        output.withLock { state in
            guard state.held else { return false }
            if gate.mustHold(needingWritten: state.writtenNeed, durable: state.durableNeed) { return true }
            state.held = false
            return false
        }
    }

    /// The gate let the output go: the loop writes it.
    func releasedByGate() { loop.scheduleFlush(self) }

    /// Whether output waits for the journal.
    var isHeld: Bool { output.withLock { $0.held } }

    var isBroken: Bool { brokenFlag.load(ordering: .acquiring) }

    func markBroken() {
        output.withLock { $0.broken = true }
        brokenFlag.store(true, ordering: .releasing)
    }

    /// Queues one line of JSON text given as bytes (without the newline).
    func send(json: [UInt8]) {
        send { writer in writer.json(json) }
    }

    /// Queues a complete line (newline included).
    func send(line: UnsafeRawBufferPointer) {
        enqueue { pending in
            if pending.capacity == 0 { pending.reserveCapacity(512) }
            pending.append(contentsOf: line)
        }
    }

    /// Queues one line of JSON text written by `body` straight into the output buffer.
    func send(writing body: (inout JSONWriter) -> Void) {
        enqueue { pending in
            var buffer: [UInt8] = []
            swap(&buffer, &pending)
            if buffer.capacity < 512 { buffer.reserveCapacity(512) }
            var writer = JSONWriter(appendingTo: buffer)
            body(&writer)
            writer.endLine()
            pending = writer.take()
        }
    }

    /// Adds to the queued output with `append`, marks the connection broken past the
    /// limit, and has the loop flush it (once until it has).
    private func enqueue(_ append: (inout [UInt8]) -> Void) {
        let schedule: Bool = output.withLock { state in
            if state.broken { return false }
            append(&state.pending)
            if state.pending.count > limit {
                state.broken = true
                brokenFlag.store(true, ordering: .releasing)
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
    ///
    /// Sends under the output's lock (one lock a flush): a non-blocking send is short,
    /// and the replies queued meanwhile by another thread wait for it at most that long.
    func flush() -> Bool {
        var wrote = false
        return flush(wrote: &wrote)
    }

    /// Whether the queued output may be written now, under the output's lock: not when
    /// there is none or the connection is broken (it is no longer scheduled), nor while the
    /// gate holds it for the journal (`hold` is set when it has just begun to: park the
    /// connection in the gate once the lock is released).
    private func hasOutputToWrite(_ state: inout Output, hold: inout Bool) -> Bool {
        if state.pending.isEmpty || state.broken {
            state.scheduled = false
            return false
        }
        if state.held { return false }
        if let gate, gate.mustHold(needingWritten: state.writtenNeed, durable: state.durableNeed) {
            // Still scheduled: replies queued meanwhile wait behind it, the gate reschedules.
            state.held = true
            hold = true
            return false
        }
        return true
    }

    /// ``flush()``, setting `wrote` when it wrote output (rather than finding none, or
    /// holding it for the journal).
    func flush(wrote: inout Bool) -> Bool {
        let fd = FileDescriptor(rawValue: raw)
        var hold = false
        let (done, broke): (Bool, Bool) = output.withLock { state in
            guard hasOutputToWrite(&state, hold: &hold) else { return (true, false) }
            var offset = 0
            let total = state.pending.count
            while offset < total {
                let sent = state.pending.withUnsafeBytes { buffer in
                    Result { () throws(Errno) in try fd.send(UnsafeRawBufferPointer(rebasing: buffer[offset...])) }
                }
                switch sent {
                case .success(let count):
                    offset += count
                    wrote = true
                case .failure(.wouldBlock):
                    // The rest waits for the socket to drain (still scheduled: the loop retries).
                    state.pending.removeSubrange(..<offset)
                    return (false, false)
                case .failure:
                    state.broken = true
                    state.scheduled = false
                    return (true, true)
                }
            }
            // The buffer is written again by the next reply, unless it grew past what edits'
            // replies need: an idle connection does not keep a large reply's room.
            if state.pending.capacity > 4 << 10 {
                state.pending = []
            } else {
                state.pending.removeAll(keepingCapacity: true)
            }
            state.scheduled = false
            return (true, false)
        }
        if broke { brokenFlag.store(true, ordering: .releasing) }
        if hold, let gate { gate.hold(self) }
        return done
    }

    /// What ``stage(into:room:)`` did with the queued output.
    enum Staging {
        /// Nothing to send now: nothing queued, the connection broken, or the output held
        /// for the journal.
        case nothing
        /// This many bytes were moved out of the queue, to be sent with the batch.
        case staged(Int)
        /// More than the room: ``flush(wrote:)`` sends it from the queue.
        case tooLarge
    }

    /// The first half of a flush for the loop's batched sends (``BatchedIO``): moves the
    /// queued output to `destination` when it fits in `room` bytes. The connection stays
    /// scheduled, so output queued meanwhile by another thread waits for
    /// ``sent(_:result:wrote:)``. Called by the loop only.
    func stage(into destination: UnsafeMutableRawPointer, room: Int) -> Staging {
        var hold = false
        let staging: Staging = output.withLock { state in
            guard hasOutputToWrite(&state, hold: &hold) else { return .nothing }
            let count = state.pending.count
            guard count <= room else { return .tooLarge }
            state.pending.withUnsafeBytes { destination.copyMemory(from: $0.baseAddress!, byteCount: count) }
            // Kept for the next reply, unless it grew past what edits' replies need.
            if state.pending.capacity > 4 << 10 {
                state.pending = []
            } else {
                state.pending.removeAll(keepingCapacity: true)
            }
            return .staged(count)
        }
        if hold, let gate { gate.hold(self) }
        return staging
    }

    /// The second half: the batched send of `staged` (what ``stage(into:room:)`` moved out)
    /// sent `result` bytes of it, or failed with -`result` (an errno). What was not sent
    /// goes back to the front of the queue. Returns `false` when the socket is full and
    /// output remains — call ``flush()`` again once it is writable — as ``flush(wrote:)``.
    func sent(_ staged: UnsafeRawBufferPointer, result: Int, wrote: inout Bool) -> Bool {
        if result < 0, result != -Int(Errno.wouldBlock.rawValue) {
            output.withLock { state in
                state.broken = true
                state.scheduled = false
            }
            brokenFlag.store(true, ordering: .releasing)
            return true
        }
        if result > 0 { wrote = true }
        let rest = UnsafeRawBufferPointer(rebasing: staged[max(0, result)...])
        let more: Bool = output.withLock { state in
            if rest.isEmpty {
                if state.pending.isEmpty || state.broken {
                    state.scheduled = false
                    return false
                }
                return true
            }
            state.pending.insert(contentsOf: rest, at: 0)
            return false
        }
        // The socket is full: the rest waits for it to drain (still scheduled).
        if !rest.isEmpty { return false }
        // Output queued by another thread during the send goes out now, as it would have
        // with the rest.
        return more ? flush(wrote: &wrote) : true
    }

    /// Writes what is queued now, on the loop's thread, rather than at the end of the
    /// loop's pass: for a reply whose client has waited long (a `save` with `wait`). What
    /// cannot be written yet stays queued for the loop (the queueing scheduled it).
    func flushNow() {
        precondition(loop.isCurrent, "a connection flushed off the loop's thread")
        _ = flush()
    }

    /// Writes everything still queued before the connection is closed, waiting for the
    /// client to read as needed; gives up when the client is gone.
    func finish(isolation: isolated (any Actor)? = #isolation) async {
        let fd = FileDescriptor(rawValue: raw)
        let started = ContinuousClock.now
        // The journal records of the edits these replies acknowledge go first, as in every pass of the loop.
        if loop.isCurrent, let beforeReplies = loop.beforeReplies, let wait = beforeReplies() {
            requireDurableIfUnwritten(through: wait)
        }
        while true {
            if !flush() {
                if await !loop.writable(fd) { break }
            } else if isHeld, !isBroken, ContinuousClock.now - started < .seconds(30) {
                // A reply waiting for the journal's sync (a few milliseconds, unless the
                // journal's disk fails): the client is owed it before the connection closes.
                try? await Task.sleep(for: .milliseconds(1))
            } else {
                break
            }
        }
        markBroken()
    }
}

/// Splits a byte stream into lines, refusing lines longer than a limit without
/// buffering them. Lines are handed out as views of the bytes fed (or of the reader's
/// own buffer, for a line that came in pieces), valid during the call only.
struct LineReader {
    enum Item {
        case line(UnsafeRawBufferPointer)
        /// A line longer than the limit was skipped (its length so far).
        case tooLarge(Int)
    }

    let limit: Int
    private var partial: [UInt8] = []
    private var discarding = false
    private var discarded = 0

    init(limit: Int) { self.limit = limit }

    /// The next line of `bytes` from `start`, when it can be handed out without the
    /// reader's buffering — nothing held from an earlier read, a newline ahead, within the
    /// limit — with `start` moved past it; `nil` when the rest must go to ``feed(_:_:)``.
    /// The line has no carriage return and may be empty (skip it).
    func wholeLine(in bytes: UnsafeRawBufferPointer, from start: inout Int) -> UnsafeRawBufferPointer? {
        guard partial.isEmpty, !discarding, let newline = Self.newline(in: bytes, from: start),
            newline - start <= limit
        else { return nil }
        var line = UnsafeRawBufferPointer(rebasing: bytes[start..<newline])
        if line.last == 13 { line = UnsafeRawBufferPointer(rebasing: line.dropLast()) }
        start = newline + 1
        return line
    }

    mutating func feed(_ bytes: UnsafeRawBufferPointer, _ body: (Item) -> Void) {
        var start = 0
        let count = bytes.count
        while start < count {
            guard let newline = Self.newline(in: bytes, from: start) else {
                let rest = count - start
                if discarding {
                    discarded += rest
                } else if partial.count + rest > limit {
                    discarding = true
                    discarded = partial.count + rest
                    partial = []
                } else {
                    partial += UnsafeRawBufferPointer(rebasing: bytes[start..<count])
                }
                return
            }
            if discarding {
                discarded += newline - start
                body(.tooLarge(discarded))
                discarding = false
                discarded = 0
            } else if partial.count + (newline - start) > limit {
                body(.tooLarge(partial.count + newline - start))
                partial = []
            } else if partial.isEmpty {
                Self.emit(UnsafeRawBufferPointer(rebasing: bytes[start..<newline]), body)
            } else {
                partial += UnsafeRawBufferPointer(rebasing: bytes[start..<newline])
                partial.withUnsafeBytes { Self.emit($0, body) }
                partial = []
            }
            start = newline + 1
        }
    }

    /// The offset of the next `\n` at or after `start` (`memchr`: the bytes of a line are scanned once more by the parser anyway).
    private static func newline(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = bytes.baseAddress, start < bytes.count,
            let found = memchr(base + start, 10, bytes.count - start)
        else { return nil }
        return base.distance(to: UnsafeRawPointer(found))
    }

    /// Hands out a line without its carriage return; empty lines are skipped.
    private static func emit(_ line: UnsafeRawBufferPointer, _ body: (Item) -> Void) {
        let trimmed = line.last == 13 ? UnsafeRawBufferPointer(rebasing: line.dropLast()) : line
        if !trimmed.isEmpty { body(.line(trimmed)) }
    }
}
