import Foundation
import Posix
import Synchronization

/// The sync thread: group commits, the rewrite after a failure, and deleting segments.
extension Journal {
    enum SyncWork {
        case sync
        case recover
        case housekeep
        case prepare
        case exit
    }

    func startSyncThread() {
        NamedThread.start("journal-sync") { [self] in self.runSyncThread() }
    }

    private func runSyncThread() {
        while true {
            switch nextWork() {
            case .sync: performSync()
            case .recover: performRecovery()
            case .housekeep: performHousekeeping()
            case .prepare: performPrepare()
            case .exit:
                state.withLock { s in s.threadExited = true }
                signalSyncThread()
                return
            }
        }
    }

    /// Waits until there is something to do.
    private func nextWork() -> SyncWork {
        wake.lock()
        defer { wake.unlock() }
        while true {
            let (work, deadline) = state.withLock { s -> (SyncWork?, ContinuousClock.Instant?) in
                decide(&s, now: .now)
            }
            if let work { return work }
            if let deadline {
                let seconds = ContinuousClock.now.duration(to: deadline).seconds
                if seconds > 0 { _ = wake.wait(until: Date(timeIntervalSinceNow: seconds)) }
            } else {
                wake.wait()
            }
        }
    }

    private func decide(_ s: inout JournalState, now: ContinuousClock.Instant) -> (SyncWork?, ContinuousClock.Instant?)
    {
        s.syncThreadIdle = false
        s.syncThreadWaitsForSignal = false
        if s.syncing {
            // A caller is syncing: it signals once it is done if anything is left to do.
            s.syncThreadIdle = true
            s.syncThreadWaitsForSignal = true
            return (nil, nil)
        }
        if s.recovering {
            if s.closing {
                if s.closeRetried { return (.exit, nil) }
                s.closeRetried = true
                return (.recover, nil)
            }
            if let at = s.retryAt, at <= now { return (.recover, nil) }
            s.syncThreadIdle = true
            return (nil, s.retryAt)
        }
        if s.prepareWanted, !s.closing { return (.prepare, nil) }
        var deadline: ContinuousClock.Instant?
        if s.writtenThrough > s.durableThrough {
            switch options.mode {
            case .always:
                return (.sync, nil)
            case .periodic(let interval):
                let due = s.lastSyncMark + interval
                if s.closing || s.syncRequested > s.durableThrough || due <= now
                    || s.unsyncedBytes >= options.unsyncedBytesLimit
                {
                    return (.sync, nil)
                }
                deadline = due
            }
        }
        if s.housekeeping { return (.housekeep, nil) }
        if s.closing { return (.exit, nil) }
        s.syncThreadIdle = true
        s.syncThreadWaitsForSignal = deadline == nil
        s.idlePasses &+= 1
        return (nil, deadline)
    }

    /// Wakes the sync thread and waits until it has looked at the state as it is now and
    /// found nothing left to do: every sync, rewrite, page preparing and deletion that the
    /// state calls for at this moment is done (a periodic sync not yet due is not). For
    /// tests that show something does *not* happen. Returns `false` if that took longer
    /// than `seconds` (a recovery waiting for its retry time never settles).
    func settled(within seconds: Double = 10) -> Bool {
        let before = state.withLock { s in s.idlePasses }
        let end = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < end {
            signalSyncThread()
            if state.withLock({ s in s.idlePasses != before }) { return true }
            usleep(500)
        }
        return false
    }

    /// Makes the records written so far durable on the caller's thread, when waiting for
    /// the sync thread would only add its two wake-ups: the thread is idle, something
    /// waits for the sync (`Mode=always`, a requested sync, a ``whenDurable(_:_:)``
    /// handler), and the last sync took at most `limit` (a slow or stalled disk is left
    /// to the thread, so that the caller is never held for long). The event loop calls
    /// it when it is about to sleep with replies held for the journal: it would wait for
    /// the sync anyway, and a client waiting alone gets its reply without two thread
    /// hand-offs. `onDurable` and the handlers then run on the caller's thread.
    ///
    /// - Returns: Whether it synced (the records written so far are durable, or the
    ///   failure has been reported and the sync thread recovers).
    public func syncOnCaller(ifLastSyncTookAtMost limit: Duration) -> Bool {
        performSync(onCallerWithin: limit)
    }

    /// Starts the sync that ``flush(deferringSync:)`` left waiting, if any: on the
    /// caller's thread when `onCaller` and ``syncOnCaller(ifLastSyncTookAtMost:)`` can,
    /// else on the sync thread. Returns whether it synced on the caller's thread.
    public func startDeferredSync(onCaller: Bool, ifLastSyncTookAtMost limit: Duration) -> Bool {
        let deferred = state.withLock { s -> Bool in
            defer { s.syncDeferred = false }
            return s.syncDeferred
        }
        guard deferred else { return false }
        if onCaller, performSync(onCallerWithin: limit) { return true }
        let signal = state.withLock { s in s.syncThreadIdle && s.writtenThrough > s.durableThrough }
        if signal { signalSyncThread() }
        return false
    }

    /// One group commit: `fdatasync` of every segment with written but unsynced bytes (and
    /// of the directory when a segment was created), covering every batch written so far.
    /// On the sync thread when `limit` is `nil`; else on a caller's, if
    /// ``syncOnCaller(ifLastSyncTookAtMost:)``'s conditions hold.
    @discardableResult
    private func performSync(onCallerWithin limit: Duration? = nil) -> Bool {
        struct Item {
            var base: LSN
            var descriptor: CInt
            var size: Int
            var name: String
            /// Pages of the segment's mapping to release before the sync.
            var release: (mapping: SharedMapping, range: Range<Int>)?
        }
        let snapshot = state.withLock { s -> (target: LSN, items: [Item], directory: [LSN])? in
            guard !s.recovering, !s.syncing, s.writtenThrough > s.durableThrough else { return nil }
            if let limit {
                guard s.phase == .running, !s.closing, s.syncThreadIdle,
                    options.mode == .always || s.syncRequested > s.durableThrough || !s.waiters.isEmpty
                else { return nil }
                if let last = s.statistics.lastSyncDuration, last > limit { return nil }
            }
            s.syncing = true
            let items = s.segments.indices.compactMap { i -> Item? in
                let segment = s.segments[i]
                guard let fd = segment.descriptor, segment.syncedSize < segment.size else { return nil }
                var item = Item(base: segment.base, descriptor: fd, size: segment.size, name: segment.name)
                // The whole pages the records written so far fill are never stored to again:
                // released from the mapping (their data stays in the page cache, dirty), the
                // sync finds them mapped nowhere and writes them back without write-protecting
                // each in the loop's page tables (a TLB shootdown of the loop's CPU per page).
                if let mapping = segment.mapping {
                    let end = min(segment.size, mapping.length) / SharedMapping.pageSize * SharedMapping.pageSize
                    if end > segment.releasedThrough {
                        item.release = (mapping, segment.releasedThrough..<end)
                        s.segments[i].releasedThrough = end
                    }
                }
                return item
            }
            return (s.writtenThrough, items, s.segments.filter(\.needsDirectorySync).map(\.base))
        }
        guard let snapshot else { return false }
        let start = ContinuousClock.now
        var failure: JournalFailure?
        for item in snapshot.items {
            if let (mapping, range) = item.release { mapping.release(range) }
            do {
                try options.io.dataSync(FileDescriptor(rawValue: item.descriptor))
            } catch {
                failure = JournalFailure(.fdatasync, path: path(item.name), errno: error)
                break
            }
        }
        if failure == nil, !snapshot.directory.isEmpty {
            do { try directoryFD.sync() } catch {
                failure = JournalFailure(.fsyncDirectory, path: directory, errno: error)
            }
        }
        let end = ContinuousClock.now
        // The buffers of synced batches that are not kept for reuse come out of the lock,
        // and are freed there, not while the loop may be waiting for it.
        let (outcome, signal, _) = state.withLock { s -> (Outcome, Bool, [[UInt8]]) in
            s.syncing = false
            s.statistics.lastSync = end
            s.statistics.lastSyncDuration = end - start
            s.lastSyncMark = end
            // A caller's sync hands what is left (a rewrite, more records, housekeeping, pages
            // to prepare) to the thread, which found it syncing and waits to be told.
            func left(_ s: JournalState) -> Bool {
                limit != nil
                    && (s.recovering || s.housekeeping || s.prepareWanted || s.writtenThrough > s.durableThrough)
            }
            if let failure {
                s.statistics.syncFailures += 1
                return (enterRecovery(&s, failure), limit != nil, [])
            }
            s.statistics.syncs += 1
            for item in snapshot.items {
                if let i = s.segments.firstIndex(where: { $0.base == item.base }) {
                    s.segments[i].syncedSize = max(s.segments[i].syncedSize, item.size)
                    // The sync wrote the prepared pages back and write-protected them.
                    s.segments[i].preparedThrough = 0
                }
            }
            for base in snapshot.directory {
                if let i = s.segments.firstIndex(where: { $0.base == base }) {
                    s.segments[i].needsDirectorySync = false
                }
            }
            s.durableThrough = max(s.durableThrough, snapshot.target)
            let durable = s.durableThrough
            let freed = s.dropSynced(through: durable, keepingUpTo: options.unsyncedBytesLimit)
            for i in s.segments.indices.dropLast() {
                if s.segments[i].descriptor != nil, s.segments[i].syncedSize >= s.segments[i].size {
                    s.segments[i].closeFile()
                }
            }
            if s.oldestIsObsolete() { s.housekeeping = true }
            return (Outcome(durable: durable, waiters: s.takeWaiters(through: durable)), left(s), freed)
        }
        outcome.deliver(self)
        if signal { signalSyncThread() }
        return true
    }

    /// Faults in, writable, the current segment's mapped pages from where the records end
    /// to ``prepareAhead`` past it (`MADV_POPULATE_WRITE`), so that the loop's next stores
    /// find them there instead of taking a page fault each (a page-cache page allocated,
    /// its block prepared by the file system): the faults are taken here, in one call,
    /// while the loop goes on. Asked for by ``flush(deferringSync:)`` in `Mode=periodic`
    /// when the stores come within half of that of the prepared end; not in `Mode=always`,
    /// whose back-to-back syncs would write the prepared pages back, zeros, at each sync.
    /// The pages are the thread's to prepare: only this thread (or ``close()``, once it
    /// has exited) unmaps a segment.
    private func performPrepare() {
        let work = state.withLock { s -> (SharedMapping, Range<Int>)? in
            s.prepareWanted = false
            guard s.phase == .running, let last = s.segments.indices.last, !s.segments[last].pastMapping,
                let mapping = s.segments[last].mapping
            else { return nil }
            let start = max(s.segments[last].preparedThrough, s.segments[last].size)
            let end = min(mapping.length, s.segments[last].size + Self.prepareAhead)
            guard start < end else { return nil }
            s.segments[last].preparedThrough = end
            return (mapping, start..<end)
        }
        guard let (mapping, range) = work else { return }
        // Where the kernel cannot (before Linux 5.14), the loop takes the faults itself.
        guard (try? mapping.prepare(range)) != nil else { return }
        state.withLock { s in s.statistics.preparedBytes += range.count }
    }

    /// After a failed write or sync: every record not proven durable (and what was appended
    /// since) goes to a new segment, written under a temporary name, synced, renamed into
    /// place and made durable by a directory sync. The failed segment is never synced again
    /// (after an `fdatasync` error its pages may be gone while marked clean); its durable
    /// part stays, its tail is cut back to it, and segments holding nothing durable go.
    private func performRecovery() {
        let plan = state.withLock { s -> (base: LSN, batches: [Batch]) in
            if let first = s.pendingFirst {
                s.segments[s.segments.count - 1].attribute(first...s.nextLSN.previous)
                s.unsynced.append(Batch(bytes: s.pending, first: first, last: s.nextLSN.previous))
                s.unsyncedBytes += s.pending.count
                s.pending = []
                s.pendingFirst = nil
            }
            return (s.unsynced.first?.first ?? s.nextLSN, s.unsynced)
        }
        let name = SegmentFormat.name(base: plan.base)
        let temporary = SegmentFormat.temporaryName(base: plan.base)
        var bytes = SegmentFormat.header(base: plan.base)
        for batch in plan.batches { bytes.append(contentsOf: batch.bytes) }
        try? directoryFD.unlink(temporary)
        var descriptor: FileDescriptor?
        do throws(JournalFailure) {
            let fd: FileDescriptor
            do {
                fd = try FileDescriptor.open(
                    temporary, relativeTo: directoryFD, .writeOnly, options: [.exclusiveCreate])
            } catch { throw JournalFailure(.open, path: path(temporary), errno: error) }
            descriptor = fd
            do {
                try options.io.write(fd, contentsOf: bytes)
            } catch { throw JournalFailure(.write, path: path(temporary), errno: error) }
            do { try options.io.dataSync(fd) } catch {
                throw JournalFailure(.fdatasync, path: path(temporary), errno: error)
            }
            do { try directoryFD.rename(temporary, to: name) } catch {
                throw JournalFailure(.rename, path: path(name), errno: error)
            }
            do { try directoryFD.sync() } catch { throw JournalFailure(.fsyncDirectory, path: directory, errno: error) }
        } catch {
            if let descriptor { try? descriptor.close() }
            try? directoryFD.unlink(temporary)
            let outcome = state.withLock { s -> Outcome in
                var failure = error
                let last = s.unsynced.last?.last ?? s.writtenThrough
                if last > s.durableThrough { failure.notDurable = s.durableThrough.next...last }
                s.failure = failure
                s.statistics.syncFailures += 1
                s.retryAt = .now + s.retryDelay
                s.retryDelay = min(s.retryDelay * 2, options.maxRetryDelay)
                let waiters = s.waiters.map(\.handler)
                s.waiters = []
                return Outcome(failure: failure, waiters: waiters)
            }
            outcome.deliver(self)
            return
        }
        let (outcome, stale) = state.withLock { s -> (Outcome, [String]) in
            var stale: [String] = []
            s.segments.removeAll { segment in
                guard segment.base >= plan.base else { return false }
                var segment = segment
                segment.closeFile()
                if segment.name != name { stale.append(segment.name) }
                return true
            }
            for i in s.segments.indices {
                guard let fd = s.segments[i].descriptor else { continue }
                if s.segments[i].syncedSize < s.segments[i].size {
                    try? FileDescriptor(rawValue: fd).truncate(to: Int64(s.segments[i].syncedSize))
                    s.segments[i].size = s.segments[i].syncedSize
                }
                s.segments[i].closeFile()
            }
            // The records from plan.base on are in the new segment now, no longer in those before it.
            for i in s.segments.indices {
                guard let records = s.segments[i].records, records.upperBound >= plan.base else { continue }
                s.segments[i].records =
                    records.lowerBound < plan.base ? records.lowerBound...plan.base.previous : nil
            }
            var rewritten = SegmentEntry(
                base: plan.base, name: name, descriptor: descriptor!.rawValue, size: bytes.count,
                syncedSize: bytes.count, needsDirectorySync: false)
            if let first = plan.batches.first?.first, let last = plan.batches.last?.last {
                rewritten.records = first...last
            }
            s.segments.append(rewritten)
            if let last = plan.batches.last?.last {
                s.writtenThrough = max(s.writtenThrough, last)
                s.durableThrough = max(s.durableThrough, last)
            }
            s.unsynced.removeAll()
            s.unsyncedBytes = 0
            s.recovering = false
            s.failure = nil
            s.retryAt = nil
            s.retryDelay = options.retryDelay
            s.statistics.rewrites += 1
            s.statistics.writes += 1
            s.statistics.bytesWritten += bytes.count
            if s.oldestIsObsolete() { s.housekeeping = true }
            return (Outcome(durable: s.durableThrough, waiters: s.takeWaiters(through: s.durableThrough)), stale)
        }
        for name in stale { try? directoryFD.unlink(name) }
        if !stale.isEmpty { try? directoryFD.sync() }
        outcome.deliver(self)
        // Records appended while the rewrite ran were left in the batch (``flush(deferringSync:)``
        // writes nothing while recovering); they are written now, not at the caller's next
        // flush, which may never come.
        if state.withLock({ s in s.pendingFirst != nil }) { flush() }
    }

    /// Deletes the oldest segments while everything in them is released, oldest first (a
    /// segment's release marks may speak of records in the ones before it, so a segment
    /// never goes before its elders). A damaged one is renamed `<name>.damaged` instead.
    func performHousekeeping() {
        let victims = state.withLock { s -> [SegmentEntry] in
            s.housekeeping = false
            guard !s.recovering else { return [] }
            var victims: [SegmentEntry] = []
            while s.oldestIsObsolete() { victims.append(s.segments.removeFirst()) }
            s.statistics.segmentsDeleted += victims.count
            return victims
        }
        guard !victims.isEmpty else { return }
        var failure: JournalFailure?
        var done = 0
        var spares: [(name: String, size: Int)] = []
        for var victim in victims {
            do {
                if victim.damaged {
                    try directoryFD.rename(victim.name, to: victim.name + SegmentFormat.damagedSuffix)
                } else if let spare = spareName(for: victim, pending: spares) {
                    victim.closeFile()
                    try directoryFD.rename(victim.name, to: spare)
                    spares.append((spare, max(victim.size, victim.staleEnd)))
                } else {
                    try directoryFD.unlink(victim.name)
                }
            } catch Errno.noSuchFile {
            } catch {
                failure = JournalFailure(victim.damaged ? .rename : .unlink, path: path(victim.name), errno: error)
                break
            }
            done += 1
        }
        if done > 0, failure == nil {
            do { try directoryFD.sync() } catch {
                failure = JournalFailure(.fsyncDirectory, path: directory, errno: error)
            }
        }
        // A spare is reused only once its new name is durable: a segment made from it could
        // otherwise come back, after a power loss, under the old segment's name with a
        // header that does not match it. After a failure they go (as deleted segments do).
        if failure != nil {
            for spare in spares { try? directoryFD.unlink(spare.name) }
        }
        state.withLock { s in
            s.segments.insert(contentsOf: victims[done...], at: 0)
            s.statistics.segmentsDeleted -= victims.count - done
            if failure == nil { s.spares += spares }
        }
        if let failure { onFailure(failure) }
    }
}

extension Journal {
    /// The name to keep an obsolete segment under for reuse, or `nil` to delete it: only a
    /// full segment (one that reached ``JournalOptions/segmentSize``, the size of the next
    /// one), on a file system with blocks to keep (not in memory): two, and more within
    /// ``JournalOptions/recycleWithin`` (`pending`: spares this housekeeping made, not yet
    /// published).
    func spareName(for victim: SegmentEntry, pending: [(name: String, size: Int)]) -> String? {
        state.withLock { s -> String? in
            guard reservesSpace, options.recycleWithin > 0, victim.size >= options.segmentSize else { return nil }
            let spares = s.spares + pending
            if spares.count >= 2 {
                let bytes = s.segments.reduce(0) { $0 + $1.size } + spares.reduce(0) { $0 + $1.size }
                guard bytes + victim.size <= options.recycleWithin else { return nil }
            }
            s.sparesMade += 1
            return SegmentFormat.spareName(s.sparesMade)
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
