import Posix

/// A segment file as the journal tracks it.
struct SegmentEntry {
    var base: LSN
    var name: String
    /// Open while the segment may still be written or synced; closed once it is neither.
    var descriptor: CInt?
    /// The segment's reserved space mapped for writing (see ``Journal/mapSegment(_:size:)``):
    /// a batch is copied here instead of written with `write(2)` while it fits.
    var mapping: SharedMapping?
    /// A batch did not fit in the mapping: the segment is written with `write(2)` from then on.
    var pastMapping = false
    /// The pages of the mapping below this offset are released (see ``Journal/performSync``).
    var releasedThrough = 0
    /// The pages of the mapping below this offset were faulted in writable since the last
    /// sync (which writes them back and write-protects them again).
    var preparedThrough = 0
    /// Bytes in the file.
    var size: Int
    /// Bytes proven durable by a successful `fdatasync`.
    var syncedSize: Int
    /// The file was created since the directory was last synced.
    var needsDirectorySync: Bool
    /// Replay found it damaged: it is set aside rather than deleted.
    var damaged = false
    /// A recycled segment (``Journal/recycle(_:as:base:)``): up to this offset, the file
    /// holds an earlier segment's records past those written to it. Each batch written
    /// below it is preceded by a zero record length right after where the batch ends,
    /// where replay stops.
    var staleEnd = 0
    /// The LSNs of the records attributed to it: delivered from it by replay (and kept,
    /// ``Journal/noteReplayed(owner:lsn:)``) or written to it. A segment's name gives only
    /// where its LSNs start; a damaged or forged file can be named inside another
    /// segment's range, and a record belongs to the segment it was read from or written to.
    var records: ClosedRange<LSN>?

    /// Unmaps and closes the file (still in the directory).
    mutating func closeFile() {
        mapping?.unmap()
        mapping = nil
        if let descriptor { try? FileDescriptor(rawValue: descriptor).close() }
        descriptor = nil
    }

    mutating func attribute(_ lsns: ClosedRange<LSN>) {
        records = records.map { min($0.lowerBound, lsns.lowerBound)...max($0.upperBound, lsns.upperBound) } ?? lsns
    }
}

/// Records handed to `write(2)` (or meant for it) that are not proven durable yet: kept
/// so that a failure can write them again elsewhere.
struct Batch {
    var bytes: [UInt8]
    var first: LSN
    var last: LSN
}

/// Everything that changes, behind the journal's one lock.
struct JournalState {
    enum Phase {
        case opened
        case running
        case closed
    }

    var phase = Phase.opened
    var nextLSN = LSN(1)

    /// Framed records appended since the last flush.
    var pending: [UInt8] = []
    var pendingFirst: LSN?

    /// Buffers of batches proven durable, emptied and kept for the next batches: a batch
    /// is kept until its sync (a second's worth in `periodic` mode), and a new buffer for
    /// each would be memory touched for the first time, page by page.
    var spareBuffers: [[UInt8]] = []
    var spareBytes = 0

    /// The logs of the owners whose records came without one of the caller's
    /// (``Journal/append(owner:payload:)``, ``Journal/noteReplayed(owner:lsn:)``).
    var owners: [UInt64: JournalOwnerLog] = [:]
    /// The oldest unreleased record of each owner that has one (its LSN, and the owner):
    /// the segment holding it, and every later one, stay. One entry per owner, made when
    /// the owner's first unreleased record is appended and moved when a release leaves an
    /// older one: nothing per record.
    var pins: [LSN: UInt64] = [:]
    /// The keys of ``pins`` (and some removed since, at most about as many), smallest
    /// first: a binary heap.
    var pinHeap: [LSN] = []
    var unreleased = 0
    /// Sorted by base LSN; while running, the last one is the segment being written.
    var segments: [SegmentEntry] = []
    var unsynced: [Batch] = []
    /// The bytes of the batches in ``unsynced``.
    var unsyncedBytes = 0

    var writtenThrough = LSN.zero
    var durableThrough = LSN.zero
    var syncRequested = LSN.zero
    var waiters: [(lsn: LSN, handler: @Sendable (JournalFailure?) -> Void)] = []

    /// After a failed write or sync: nothing more is written to the segment it happened in;
    /// the sync thread writes every record not proven durable to a new segment.
    var recovering = false
    var retryAt: ContinuousClock.Instant?
    var retryDelay: Duration = .zero
    var failure: JournalFailure?

    var housekeeping = false
    /// The LSN of the last release mark appended: the records appended before it (the new
    /// base record of a document a save covered) stand in for those the release let go,
    /// so no segment goes until it is durable (see ``oldestIsObsolete()``).
    var releasedThrough = LSN.zero
    /// Segment files whose records are all obsolete, renamed to spare names and kept to be
    /// made the next segments (see ``JournalOptions/recycleWithin``), with their sizes.
    var spares: [(name: String, size: Int)] = []
    var sparesMade = 0
    /// The loop's stores are nearing the end of the current segment's prepared pages:
    /// the sync thread is to fault in the next ones (see ``Journal/performPrepare()``).
    var prepareWanted = false
    var closing = false
    /// At close, a pending recovery gets one more attempt, without waiting for its retry time.
    var closeRetried = false
    /// When the last sync ended (or the journal started): the periodic interval counts from it.
    var lastSyncMark = ContinuousClock.now
    var threadExited = false
    var syncThreadIdle = false
    /// How many times the sync thread has looked at the state and found nothing to do
    /// (``Journal/settled(within:)`` waits for the next one).
    var idlePasses: UInt64 = 0
    /// A group commit is under way (on the sync thread, or on a caller's through
    /// ``Journal/syncOnCaller(ifLastSyncTookAtMost:)``): nobody else syncs, rewrites or
    /// closes descriptors meanwhile.
    var syncing = false
    /// A flush called for a sync and left it to ``Journal/startDeferredSync(onCaller:ifLastSyncTookAtMost:)``.
    var syncDeferred = false
    /// The idle sync thread has no deadline: a periodic write must wake it to start one.
    var syncThreadWaitsForSignal = false

    var statistics = JournalStatistics()

    /// The segment replay is delivering records from: the one ``Journal/noteReplayed(owner:lsn:)``
    /// attributes them to.
    var replaying: Int?

    /// Pins `lsn`, `owner`'s oldest unreleased record.
    mutating func pin(_ lsn: LSN, owner: UInt64) {
        guard pins.updateValue(owner, forKey: lsn) == nil else { return }
        pinHeap.append(lsn)
        var child = pinHeap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard pinHeap[child] < pinHeap[parent] else { break }
            pinHeap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes the pin at `lsn`. The heap keeps its entry until it comes to the top; when
    /// such entries outnumber the pins (a pin held for long keeps those behind it), the heap
    /// is made again from the pins (a sorted array is a heap).
    mutating func unpin(_ lsn: LSN) {
        pins[lsn] = nil
        if pinHeap.count > 2 * pins.count + 1024 { pinHeap = pins.keys.sorted() }
    }

    /// The oldest pinned record (the heap's removed entries dropped on the way).
    mutating func oldestPin() -> LSN? {
        while let top = pinHeap.first, pins[top] == nil {
            let last = pinHeap.removeLast()
            guard !pinHeap.isEmpty else { break }
            pinHeap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                guard left < pinHeap.count else { break }
                let right = left + 1
                let child = right < pinHeap.count && pinHeap[right] < pinHeap[left] ? right : left
                guard pinHeap[child] < pinHeap[parent] else { break }
                pinHeap.swapAt(child, parent)
                parent = child
            }
        }
        return pinHeap.first
    }

    /// Counts `lsn` as a record of the owner `log` describes, pinning it when it is the
    /// owner's only unreleased one.
    mutating func note(_ lsn: LSN, owner: UInt64, in log: inout JournalOwnerLog) {
        if log.note(lsn) { pin(lsn, owner: owner) }
        unreleased += 1
    }

    /// ``note(_:owner:in:)`` in the journal's own table of owners.
    mutating func noteOwnLog(_ lsn: LSN, owner: UInt64) {
        if owners[owner, default: JournalOwnerLog()].note(lsn) { pin(lsn, owner: owner) }
        unreleased += 1
    }

    /// Releases `owner`'s records through `lsn` from `log`: the count, and the pin moved to
    /// the oldest record left. Returns whether anything was released.
    mutating func release(owner: UInt64, through lsn: LSN, in log: inout JournalOwnerLog) -> Bool {
        guard let (released, first) = log.afterRelease(through: lsn) else { return false }
        if first != log.first {
            if let old = log.first { unpin(old) }
            if let first { pin(first, owner: owner) }
        }
        log.first = first
        log.count -= released
        unreleased -= released
        if first == nil || released > 0 { log.clearCheckpoint() }
        return true
    }

    /// The index of the segment holding the record `lsn` (attributed to it): the last one
    /// whose base is not above it, unless that one's records do not include it (a damaged
    /// segment named inside an earlier one's range), then the nearest earlier one that does.
    func segmentIndex(of lsn: LSN) -> Int? {
        var low = 0
        var high = segments.count
        while low < high {
            let mid = (low + high) / 2
            if segments[mid].base <= lsn { low = mid + 1 } else { high = mid }
        }
        var index = low - 1
        while index >= 0 {
            if let records = segments[index].records, records.contains(lsn) { return index }
            index -= 1
        }
        return nil
    }

    /// The largest buffer kept for reuse.
    static let spareBufferLimit = 1 << 20

    /// An empty buffer for the next batch, with room for about `expected` bytes.
    mutating func takeBuffer(expected: Int) -> [UInt8] {
        var buffer = spareBuffers.popLast() ?? []
        spareBytes -= buffer.capacity
        buffer.reserveCapacity(expected)
        return buffer
    }

    /// Removes the batches through `durable` from ``unsynced``, keeping their buffers for
    /// reuse (up to `limit` bytes of them, none larger than ``spareBufferLimit``); returns
    /// the buffers not kept, for the caller to free outside the lock.
    mutating func dropSynced(through durable: LSN, keepingUpTo limit: Int) -> [[UInt8]] {
        var batches: [Batch] = []
        swap(&batches, &unsynced)
        var freed: [[UInt8]] = []
        for i in batches.indices {
            guard batches[i].last <= durable else {
                unsynced.append(batches[i])
                continue
            }
            unsyncedBytes -= batches[i].bytes.count
            // Swapped out, so that the buffer is referenced once and is emptied in place.
            var bytes: [UInt8] = []
            swap(&bytes, &batches[i].bytes)
            let capacity = bytes.capacity
            if capacity <= Self.spareBufferLimit, spareBytes + capacity <= limit {
                bytes.removeAll(keepingCapacity: true)
                spareBuffers.append(bytes)
                spareBytes += capacity
            } else {
                freed.append(bytes)
            }
        }
        return freed
    }

    /// The owners with a pinned record (their oldest unreleased) written before `boundary`
    /// (records not flushed yet are in no segment and do not count).
    func owners(before boundary: LSN) -> [UInt64] {
        let boundary = pendingFirst.map { min($0, boundary) } ?? boundary
        return pins.compactMap { lsn, owner in lsn < boundary ? owner : nil }
    }

    /// The waiters whose LSN is durable now, removed from the list.
    mutating func takeWaiters(through lsn: LSN) -> [@Sendable (JournalFailure?) -> Void] {
        guard !waiters.isEmpty else { return [] }
        var ready: [@Sendable (JournalFailure?) -> Void] = []
        waiters.removeAll { waiter in
            if waiter.lsn <= lsn {
                ready.append(waiter.handler)
                return true
            }
            return false
        }
        return ready
    }

    /// The oldest segment can go: it is closed, it is not the one being written, and no
    /// pinned record is in it — none at or below the last LSN attributed to it (a damaged
    /// segment's range may overlap a later one's: a pin there keeps it, to be safe).
    mutating func oldestIsObsolete() -> Bool {
        guard segments.count > 1, segments[0].descriptor == nil else { return false }
        // A release makes records obsolete because others replace them (a save's new base
        // record, appended before the release's mark): deleted before those are durable, a
        // crash or a power loss would leave the document's later records with no base.
        guard durableThrough >= releasedThrough else { return false }
        guard let pin = oldestPin(), let records = segments[0].records else { return true }
        return pin > records.upperBound
    }
}
