import Posix

/// A segment file as the journal tracks it.
struct SegmentEntry {
    var base: LSN
    var name: String
    /// Open while the segment may still be written or synced; closed once it is neither.
    var descriptor: CInt?
    /// Bytes in the file.
    var size: Int
    /// Bytes proven durable by a successful `fdatasync`.
    var syncedSize: Int
    /// The file was created since the directory was last synced.
    var needsDirectorySync: Bool
    /// Records attributed to this segment that are not released yet. Which owners they
    /// belong to is not kept per segment: the owners' logs say it when asked
    /// (``JournalState/owners(before:)``), so a record costs no per-segment bookkeeping.
    var live = 0
    /// Replay found it damaged: it is set aside rather than deleted.
    var damaged = false
    /// The LSNs of the records attributed to it: delivered from it by replay (and kept,
    /// ``Journal/noteReplayed(owner:lsn:)``) or written to it. A segment's name gives only
    /// where its LSNs start; a damaged or forged file can be named inside another
    /// segment's range, and a record belongs to the segment it was read from or written to.
    var records: ClosedRange<LSN>?

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

/// The LSNs of one owner's records that are not released yet, oldest first.
struct OwnerLog {
    var lsns: [LSN] = []
    var head = 0

    var isEmpty: Bool { head == lsns.count }

    mutating func compactIfWasteful() {
        if head > 1024 && head * 2 > lsns.count {
            lsns.removeFirst(head)
            head = 0
        } else if head == lsns.count {
            lsns.removeAll(keepingCapacity: true)
            head = 0
        }
    }
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
    /// Owners' records in the batch not released yet: attributed to no segment until the
    /// flush says which.
    var pendingRecords = 0

    /// Buffers of batches proven durable, emptied and kept for the next batches: a batch
    /// is kept until its sync (a second's worth in `periodic` mode), and a new buffer for
    /// each would be memory touched for the first time, page by page.
    var spareBuffers: [[UInt8]] = []
    var spareBytes = 0

    var owners: [UInt64: OwnerLog] = [:]
    /// Records appended since the owners' logs were last brought up to date, in LSN
    /// order. An append writes here, to memory the last append touched; filed at once
    /// into the owners' logs (``absorbRecentRecords()``) at each flush, and before
    /// anything reads the logs. With thousands of owners, a log appended to directly is
    /// memory not touched since that owner's last record — cache misses on the path of
    /// every request — where a pass's records filed together overlap theirs.
    var recentRecords: [(owner: UInt64, lsn: LSN)] = []
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
    var closing = false
    /// At close, a pending recovery gets one more attempt, without waiting for its retry time.
    var closeRetried = false
    /// When the last sync ended (or the journal started): the periodic interval counts from it.
    var lastSyncMark = ContinuousClock.now
    var threadExited = false
    var syncThreadIdle = false
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
    /// The records replay delivered and the caller kept, in the order delivered: made into
    /// the owners' logs at once when replay ends (``absorbReplayNotes()``). Appended one
    /// by one, each owner's log would be touched once per record, and with many owners
    /// every such touch misses the cache.
    var replayNotes: [(owner: UInt64, lsn: LSN)] = []

    /// Files ``recentRecords`` into their owners' logs.
    mutating func absorbRecentRecords() {
        guard !recentRecords.isEmpty else { return }
        recentRecords.withUnsafeBufferPointer { recent in
            for record in recent { owners[record.owner, default: OwnerLog()].lsns.append(record.lsn) }
        }
        recentRecords.removeAll(keepingCapacity: true)
    }

    /// Moves ``replayNotes`` into the owners' logs: the notes grouped by owner (in the order
    /// delivered within each owner, ``Grouping``), each owner's log then made from its run
    /// in one piece.
    mutating func absorbReplayNotes() {
        guard !replayNotes.isEmpty else { return }
        var numbering = DenseNumbering<UInt64>()
        var slotOfNote: [Int32] = []
        slotOfNote.reserveCapacity(replayNotes.count)
        for note in replayNotes { slotOfNote.append(numbering.number(of: note.owner)) }
        let notes = replayNotes
        replayNotes = []
        let grouping = Grouping(slots: slotOfNote, slotCount: numbering.keys.count)
        for (slot, owner) in numbering.keys.enumerated() {
            owners[owner, default: OwnerLog()].lsns.append(contentsOf: grouping.group(slot).map { notes[$0].lsn })
        }
        unreleased += notes.count
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

    /// Counts the batch's records as the segment's at `index`, where the batch goes.
    mutating func attributePending(toSegment index: Int, lsns: ClosedRange<LSN>) {
        segments[index].live += pendingRecords
        segments[index].attribute(lsns)
        pendingRecords = 0
    }

    /// Attributes the records still pinned to the segments they are in, from scratch.
    mutating func recount() {
        absorbRecentRecords()
        for i in segments.indices { segments[i].live = 0 }
        for log in owners.values {
            for lsn in log.lsns[log.head...] {
                if let first = pendingFirst, lsn >= first { continue }
                guard let i = segmentIndex(of: lsn) else { continue }
                segments[i].live += 1
            }
        }
    }

    /// The owners with an unreleased record written before `boundary` (records not flushed
    /// yet are in no segment and do not count). An owner's log is in LSN order, so its
    /// oldest unreleased record decides.
    func owners(before boundary: LSN) -> [UInt64] {
        let boundary = pendingFirst.map { min($0, boundary) } ?? boundary
        var found: [UInt64] = []
        for (owner, log) in owners where log.head < log.lsns.count && log.lsns[log.head] < boundary {
            found.append(owner)
        }
        return found
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

    /// The oldest segment can go: it holds nothing pinned, is closed, and is not the one being written.
    var oldestIsObsolete: Bool {
        guard segments.count > 1, let oldest = segments.first else { return false }
        return oldest.live == 0 && oldest.descriptor == nil
    }
}
