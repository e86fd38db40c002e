import CLinux
import Posix
import Synchronization

/// The reads and the replies of one pass of the event loop, each made together: the
/// loop hands the kernel every ready connection's `recv`, then every answered
/// connection's `send`, in one `io_uring_enter` each rather than one system call per
/// client (see `clinux_io_batch_run`), which saves each call its system call's entry,
/// exit and descriptor lookup — about a quarter of a small send's or receive's cost on
/// this kernel. Each call is non-blocking, as the system call with `MSG_DONTWAIT` is, and
/// its outcome is what that would have returned, so a connection reads, and its output
/// is queued, held for the journal, put back when the socket is full, and marked broken,
/// exactly as without the batch.
///
/// Without io_uring (a kernel built without it, `kernel.io_uring_disabled`, a seccomp
/// filter, `[Control] BatchedIO=no`), and for a batch of fewer than three calls, which
/// the ring would make dearer, each call is its own system call.
///
/// Its batches are made on the loop's thread only; its state and figures are read from any.
final class BatchedIO: Sendable {
    /// Whether batches go through io_uring, and why not.
    enum State: UInt8 {
        /// `[Control] IOUring=no`.
        case off
        case inUse
        /// The kernel refused a ring (see ``unavailable``).
        case unavailable
        /// A submission failed and the ring was given up (until the setting is applied again).
        case failed

        var name: String {
            switch self {
            case .off: "off"
            case .inUse: "in-use"
            case .unavailable: "unavailable"
            case .failed: "failed"
            }
        }
    }

    /// The loop's state: touched on its thread only.
    private struct Loop {
        /// The ring, or `nil` when calls are one by one.
        var ring: OpaquePointer?
        var connections: [Connection] = []
        var readers: [Int] = []
        var descriptors: [Int32] = []
        var buffers: [UnsafeMutableRawPointer?] = []
        var lengths: [Int] = []
        var results: [Int] = []
    }
    /// `nonisolated(unsafe)`, as the two arenas below: used on the loop's thread only
    /// (``setRing(_:)`` too runs there, or before the loop does).
    nonisolated(unsafe) private var loop = Loop()

    private let stateValue = Atomic<UInt8>(State.off.rawValue)
    /// The errno of the kernel's refusal, when ``state`` is `unavailable`.
    private let refusal = Atomic<Int32>(0)
    /// Batches made through the ring and the calls in them, receives and sends: for the metrics.
    private let receiveBatches = Atomic<UInt64>(0)
    private let receiveCalls = Atomic<UInt64>(0)
    private let sendBatches = Atomic<UInt64>(0)
    private let sendCalls = Atomic<UInt64>(0)

    /// The staged output of a pass. A reply larger than what is left is sent from its
    /// connection's queue, alone.
    nonisolated(unsafe) private let sendArena = UnsafeMutableRawBufferPointer.allocate(
        byteCount: 256 << 10, alignment: 64)
    /// Where a pass's batched reads land, a slice of ``sliceSize`` bytes for each
    /// connection. A read that fills its slice is followed by another, after the
    /// other clients' turn, as a full read of the loop's own buffer is.
    nonisolated(unsafe) private let receiveArena = UnsafeMutableRawBufferPointer.allocate(
        byteCount: BatchedIO.slices * BatchedIO.sliceSize, alignment: 64)
    private static let slices = 64
    private static let sliceSize = 16 << 10

    /// Batches through io_uring when `ring` and the kernel allow (see ``setRing(_:)``).
    init(ring: Bool) { setRing(ring) }

    deinit {
        clinux_io_batch_destroy(loop.ring)
        sendArena.deallocate()
        receiveArena.deallocate()
    }

    /// Makes the ring (`true`), or lets it go (`false`); a ring that failed is made anew.
    /// Before the loop runs, or on its thread.
    func setRing(_ wanted: Bool) {
        clinux_io_batch_destroy(loop.ring)
        loop.ring = nil
        refusal.store(0, ordering: .relaxed)
        guard wanted else {
            stateValue.store(State.off.rawValue, ordering: .relaxed)
            return
        }
        loop.ring = clinux_io_batch_create(256)
        if loop.ring == nil {
            refusal.store(Errno.current.rawValue, ordering: .relaxed)
            stateValue.store(State.unavailable.rawValue, ordering: .relaxed)
        } else {
            stateValue.store(State.inUse.rawValue, ordering: .relaxed)
        }
    }

    /// Whether batches go through io_uring; from any thread.
    var state: State { State(rawValue: stateValue.load(ordering: .relaxed)) ?? .off }

    /// Why the kernel refused a ring, when ``state`` is `unavailable`.
    var unavailable: Errno? {
        let raw = refusal.load(ordering: .relaxed)
        return raw == 0 ? nil : Errno(rawValue: raw)
    }

    /// Batches made through the ring and the calls in them, for the metrics.
    var figures: (receiveBatches: UInt64, receives: UInt64, sendBatches: UInt64, sends: UInt64) {
        (
            receiveBatches.load(ordering: .relaxed), receiveCalls.load(ordering: .relaxed),
            sendBatches.load(ordering: .relaxed), sendCalls.load(ordering: .relaxed)
        )
    }

    /// Reads, for each of `handlers` that reads its socket now (``ReadinessHandler/claimReadAhead()``),
    /// what is waiting, and sets `ahead` (one element per handler) to it; `nil` for the others.
    func receive(_ handlers: [(handler: any ReadinessHandler, peerClosed: Bool)], into ahead: inout [ReadAhead?]) {
        ahead.append(contentsOf: repeatElement(nil, count: handlers.count))
        // Without a ring, each handler reads for itself, into the loop's one buffer.
        guard handlers.count >= Int(clinux_io_batch_minimum), clinux_io_batch_usable(loop.ring) != 0 else { return }
        for index in handlers.indices where loop.readers.count < Self.slices {
            guard let raw = handlers[index].handler.claimReadAhead() else { continue }
            loop.readers.append(index)
            loop.descriptors.append(raw)
            loop.buffers.append(receiveArena.baseAddress! + (loop.readers.count - 1) * Self.sliceSize)
            loop.lengths.append(Self.sliceSize)
        }
        if !loop.readers.isEmpty {
            run(receive: true)
            for (slot, index) in loop.readers.enumerated() {
                let slice = UnsafeMutableRawBufferPointer(start: loop.buffers[slot], count: Self.sliceSize)
                ahead[index] = ReadAhead(buffer: slice, result: loop.results[slot])
            }
        }
        loop.readers.removeAll(keepingCapacity: true)
        clear()
    }

    /// Sends the queued output of `flushes`, setting `wrote` when any was sent, and calls
    /// `blocked` for each connection whose socket is full with output left.
    func send(_ flushes: [Connection], wrote: inout Bool, blocked: (Connection) -> Void) {
        // Without a ring, or for so few, each connection sends from its queue.
        guard flushes.count >= Int(clinux_io_batch_minimum), clinux_io_batch_usable(loop.ring) != 0 else {
            for connection in flushes where !connection.flush(wrote: &wrote) { blocked(connection) }
            return
        }
        var used = 0
        for connection in flushes {
            switch connection.stage(into: sendArena.baseAddress! + used, room: sendArena.count - used) {
            case .nothing:
                continue
            case .tooLarge:
                if !connection.flush(wrote: &wrote) { blocked(connection) }
            case .staged(let count):
                loop.connections.append(connection)
                loop.descriptors.append(connection.raw)
                loop.buffers.append(sendArena.baseAddress! + used)
                loop.lengths.append(count)
                used += count
            }
        }
        guard !loop.connections.isEmpty else { return }
        run(receive: false)
        for index in loop.connections.indices {
            let staged = UnsafeRawBufferPointer(start: loop.buffers[index], count: loop.lengths[index])
            if !loop.connections[index].sent(staged, result: loop.results[index], wrote: &wrote) {
                blocked(loop.connections[index])
            }
        }
        loop.connections.removeAll(keepingCapacity: true)
        clear()
    }

    private func run(receive: Bool) {
        let ring = loop.ring
        loop.results.removeAll(keepingCapacity: true)
        loop.results.append(contentsOf: repeatElement(0, count: loop.descriptors.count))
        let through = loop.descriptors.withUnsafeBufferPointer { descriptors in
            loop.buffers.withUnsafeBufferPointer { buffers in
                loop.lengths.withUnsafeBufferPointer { lengths in
                    loop.results.withUnsafeMutableBufferPointer { results in
                        clinux_io_batch_run(
                            ring, receive ? 1 : 0, Int32(descriptors.count), descriptors.baseAddress,
                            buffers.baseAddress, lengths.baseAddress, results.baseAddress)
                    }
                }
            }
        }
        guard through > 0 else {
            if ring != nil, clinux_io_batch_usable(ring) == 0 {
                stateValue.store(State.failed.rawValue, ordering: .relaxed)
            }
            return
        }
        if receive {
            receiveBatches.wrappingAdd(1, ordering: .relaxed)
            receiveCalls.wrappingAdd(UInt64(through), ordering: .relaxed)
        } else {
            sendBatches.wrappingAdd(1, ordering: .relaxed)
            sendCalls.wrappingAdd(UInt64(through), ordering: .relaxed)
        }
        if clinux_io_batch_usable(ring) == 0 { stateValue.store(State.failed.rawValue, ordering: .relaxed) }
    }

    private func clear() {
        loop.descriptors.removeAll(keepingCapacity: true)
        loop.buffers.removeAll(keepingCapacity: true)
        loop.lengths.removeAll(keepingCapacity: true)
    }
}

/// What the loop's batch read for a handler before calling it: `result` bytes at the
/// start of `buffer` (valid during the call only), or -errno.
///
/// `@unchecked Sendable`: it never leaves the loop's thread (it is passed through the
/// `@Sendable` entry of ``ConnectionReader``'s pump, which runs there).
struct ReadAhead: @unchecked Sendable {
    let buffer: UnsafeMutableRawBufferPointer
    let result: Int
}
