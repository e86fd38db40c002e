import Posix
import Synchronization

/// Holds back replies until the journal records they depend on are on the disk.
///
/// With `[Journal] Mode=periodic` an edit's reply may go out once its record is
/// *written* (in the page cache): the loop writes the pass's records before it writes
/// the pass's replies, so nothing waits — unless a journal write failed, and then the
/// replies to the edits whose records it did not write wait until it has written them
/// again (edits are refused meanwhile, ``barrier``), whenever their connection is
/// flushed: in that pass, a later one, or once a client that was not reading reads.
/// With `Mode=always`, and for a request with `"durable": true`, a reply waits until
/// its record is *synced*. Each connection records what its queued output needs
/// (``Connection/require(written:durable:)``) and, while that is not there yet, the
/// loop leaves the connection's output queued (later replies queue behind it, in
/// order) and parks the connection here; the journal's next write or sync releases it.
public final class ReplyGate: Sendable {
    /// Records through this LSN are written (in the page cache).
    let written = Atomic<UInt64>(0)
    /// Records through this LSN are durable.
    let durable = Atomic<UInt64>(0)
    /// Set when a journal write failed, to the last LSN appended then: until `written`
    /// reaches it again, the journal is failing and edits are refused. (The replies of the
    /// pass whose write failed that acknowledge its records wait for the records' sync,
    /// through ``Connection/requireDurableIfUnwritten(through:)``.)
    let barrier = Atomic<UInt64>(0)
    private let held = Lock<[Connection]>([])
    /// The journal's latest write or sync failure, for the refusal of edits while it lasts.
    let lastFailure = Lock<String?>(nil)

    /// Whether the journal failed to write records and has not written them again yet:
    /// edits are refused meanwhile.
    var isFailing: Bool { barrier.load(ordering: .acquiring) > written.load(ordering: .acquiring) }

    /// Whether output that needs the records through `writtenNeed` written, and those
    /// through `durableNeed` synced, must wait.
    func mustHold(needingWritten writtenNeed: UInt64, durable durableNeed: UInt64) -> Bool {
        durableNeed > durable.load(ordering: .acquiring) || writtenNeed > written.load(ordering: .acquiring)
    }

    /// Parks `connection` until ``advance(written:durable:)`` lets its output go.
    func hold(_ connection: Connection) {
        let release: Bool = held.withLock { held in
            held.append(connection)
            // A sync that finished since the connection looked: nobody else will release it.
            guard !connection.isHeldByGate(self) else { return false }
            held.removeLast()
            return true
        }
        if release { connection.releasedByGate() }
    }

    /// Records progress of the journal and lets the connections go whose output no longer waits.
    func advance(written newWritten: UInt64? = nil, durable newDurable: UInt64? = nil) {
        if let newWritten { Self.raise(written, to: newWritten) }
        if let newDurable {
            Self.raise(durable, to: newDurable)
            Self.raise(written, to: newDurable)
        }
        let released: [Connection] = held.withLock { held in
            guard !held.isEmpty else { return [] }
            var free: [Connection] = []
            held.removeAll { connection in
                guard !connection.isHeldByGate(self) else { return false }
                free.append(connection)
                return true
            }
            return free
        }
        for connection in released { connection.releasedByGate() }
    }

    /// Sets `value` to `target` unless it is already past it (the loop and the sync thread both advance `written`).
    private static func raise(_ value: borrowing Atomic<UInt64>, to target: UInt64) {
        var current = value.load(ordering: .relaxed)
        while current < target {
            let (exchanged, found) = value.compareExchange(
                expected: current, desired: target, successOrdering: .releasing, failureOrdering: .relaxed)
            if exchanged { return }
            current = found
        }
    }
}
