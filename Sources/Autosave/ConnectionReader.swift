import Control
import Posix

/// A connection's requests, read and answered by the event loop as they arrive, the way
/// Redis serves its clients: when the socket becomes readable the loop reads it, splits
/// the lines, and answers every request that needs no waiting (edits, `open`, `list`, …)
/// right there, on the store's thread, without resuming a task. A request that has to
/// wait (`save` with `wait`, `sync`, `status`, `export`, …) is handed to the
/// connection's task together with everything read after it, and the loop stops
/// reading the connection until the task has answered them: replies keep the order of
/// the requests.
///
/// `@unchecked Sendable`: its state is used only on the loop's thread (by the loop, and
/// by the connection's task, which is isolated to the store and so runs there too).
final class ConnectionReader: ReadinessHandler, @unchecked Sendable {
    /// What the connection's task has to do next.
    enum Work {
        /// Requests to handle in order: the first needs waiting.
        case requests([Pending])
        /// The client hung up, the connection broke, or the server stops.
        case end
    }

    enum Pending {
        case request(ControlRequest)
        case line([UInt8])
        case tooLarge(Int)
    }

    private let fd: FileDescriptor
    private let store: DocumentStore
    private let session: ControlSession
    private let connection: Connection
    private let maxRequestSize: Int
    // Used on the loop's thread only, never with overlapping accesses: exempt from the
    // runtime's exclusivity checks (one or more per request otherwise).
    @exclusivity(unchecked) private var reader: LineReader
    @exclusivity(unchecked) private var memo = ControlSession.EditMemo()
    /// The loop's read buffer (see ``EventLoop/readBuffer``).
    private let readBuffer: UnsafeMutableRawBufferPointer
    /// The connection's task, parked until there is work for it.
    private var waiting: UnsafeContinuation<Work, Never>?
    private var ended = false
    /// The client closed its side: after a short read, read on to the end of file rather
    /// than wait for readiness, which will not come again.
    private var peerClosed = false
    /// The last read took all there was (a short read), and no readiness has come since:
    /// with edge-triggered readiness the next data brings its own, so the task, done with
    /// the requests that waited, parks without reading first (a read that would only
    /// find nothing, between a waited-for reply and its sending).
    private var drained = false

    init(fd: FileDescriptor, store: DocumentStore, session: ControlSession, maxRequestSize: Int) {
        self.fd = fd
        self.store = store
        self.session = session
        self.connection = session.connection
        self.maxRequestSize = maxRequestSize
        self.reader = LineReader(limit: maxRequestSize)
        self.readBuffer = store.loop.readBuffer
    }

    /// Serves the connection until it ends. Runs as the connection's task, isolated to the store.
    func run(store: isolated DocumentStore) async {
        guard store.loop.attach(fd, self) else { return }
        while true {
            let work: Work
            if drained, !peerClosed, !ended, !connection.isBroken {
                work = await withUnsafeContinuation(isolation: store) { waiting = $0 }
            } else if let ready = pump(store: store) {
                work = ready
            } else {
                work = await withUnsafeContinuation(isolation: store) { waiting = $0 }
            }
            guard case .requests(let pending) = work else { return }
            for item in pending {
                switch item {
                case .request(let request): await session.handle(request, store: store)
                case .line(let line): await session.handle(line, store: store)
                case .tooLarge(let size): tooLarge(size)
                }
            }
        }
    }

    /// The loop read for this reader in its batch, and has yet to call ``readable(peerClosed:ahead:)``.
    private var readAheadClaimed = false

    func claimReadAhead() -> Int32? {
        // Only when a call now would read (the task waits for readiness), once.
        guard waiting != nil, !readAheadClaimed, !ended, !connection.isBroken else { return nil }
        readAheadClaimed = true
        return fd.rawValue
    }

    func readable(peerClosed: Bool, ahead: ReadAhead?) {
        readAheadClaimed = false
        if peerClosed { self.peerClosed = true }
        // The task is busy with requests that wait: it reads again once it is done. (The
        // loop reads ahead only for a reader whose task waits, and nothing between that
        // read and this call resumes the task.)
        guard let waiting else {
            precondition(ahead == nil, "a batched read for a connection whose task is busy")
            drained = false
            return
        }
        precondition(store.loop.isCurrent, "a connection read off the store's thread")
        let work = Self.pumpOnLoop(self, store, ahead)
        guard let work else { return }
        self.waiting = nil
        waiting.resume(returning: work)
    }

    /// ``pump(store:)`` entered from the loop's readiness call, which runs on the store's
    /// thread between jobs: sound, since the loop is the store's serial executor. (Asking
    /// the runtime with `assumeIsolated` would cost a round trip through the executor on
    /// every readiness event; a closure capturing the reader, an allocation.) The
    /// isolated parameter is an ordinary one in the calling convention.
    private static let pumpOnLoop = unsafeBitCast(
        { (reader: ConnectionReader, store: isolated DocumentStore, ahead: ReadAhead?) in
            reader.pump(store: store, ahead: ahead)
        }
            as @Sendable (ConnectionReader, isolated DocumentStore, ReadAhead?) -> Work?,
        to: (@Sendable (ConnectionReader, DocumentStore, ReadAhead?) -> Work?).self)

    func loopStopped() {
        ended = true
        waiting?.resume(returning: .end)
        waiting = nil
    }

    /// Reads once (until the end of file once the peer has closed its side) and answers
    /// the requests that need no waiting. Returns work for the task, or `nil` to wait for
    /// the next readiness. `ahead`: the first read, made already by the loop's batch.
    private func pump(store: isolated DocumentStore, ahead: ReadAhead? = nil) -> Work? {
        var ahead = ahead
        while true {
            if ended || connection.isBroken { return .end }
            // Every connection reads into the loop's one buffer (or its slice of the loop's
            // batch): what a read brings is answered, or copied for the task, before the
            // next connection's turn.
            let buffer: UnsafeMutableRawBufferPointer
            let count: Int
            if let first = ahead {
                ahead = nil
                buffer = first.buffer
                if first.result == -Int(Errno.wouldBlock.rawValue) { return nil }
                if first.result < 0 {
                    ended = true
                    return .end
                }
                count = first.result
            } else {
                buffer = readBuffer
                do {
                    count = try fd.read(into: buffer)
                } catch .wouldBlock {
                    return nil
                } catch {
                    ended = true
                    return .end
                }
            }
            if count == 0 {
                ended = true
                return .end
            }
            drained = count < buffer.count
            // Requests are answered as they are split off; once one has to wait, it and every
            // line after it go to the task, in order.
            var pending: [Pending] = []
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[..<count])
            // Whole lines first, without the reader's buffering (the usual case: each read
            // brings complete requests); whatever is left goes through the reader.
            var start = 0
            while pending.isEmpty, let line = reader.wholeLine(in: bytes, from: &start) {
                guard !line.isEmpty else { continue }
                if let request = session.handleNow(line, memo: &memo, store: store) {
                    pending.append(.request(request))
                }
            }
            if start < count {
                feed(UnsafeRawBufferPointer(rebasing: bytes[start...]), into: &pending, store: store)
            }
            if !pending.isEmpty { return .requests(pending) }
            // A full buffer may have left more behind, and edge-triggered readiness will not
            // say so again: come back after the other clients have had their turn.
            if count == buffer.count {
                store.loop.readAgain(fd)
                return nil
            }
            // A short read took all there was; the next data brings new readiness, unless
            // the peer has closed its side, whose end of file is read now.
            if !peerClosed { return nil }
        }
    }

    /// Splits `bytes` with the reader and answers or collects each request in order: once
    /// one has to wait, it and every line after it go to `pending`.
    private func feed(_ bytes: UnsafeRawBufferPointer, into pending: inout [Pending], store: isolated DocumentStore) {
        reader.feed(bytes) { item in
            switch item {
            case .line(let line):
                if !pending.isEmpty {
                    pending.append(.line(Array(line)))
                } else if let request = session.handleNow(line, memo: &memo, store: store) {
                    pending.append(.request(request))
                }
            case .tooLarge(let size):
                if pending.isEmpty { tooLarge(size) } else { pending.append(.tooLarge(size)) }
            }
        }
    }

    private func tooLarge(_ size: Int) {
        connection.sendError(
            .tooLarge, "the request line has \(size) bytes or more; the limit is \(maxRequestSize) (MaxRequestSize=)")
    }
}
