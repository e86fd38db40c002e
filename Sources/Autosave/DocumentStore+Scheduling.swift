import Dispatch
import Documents
import Foundation
import Journal
import Logging
import Posix
import Synchronization

/// A point on the store's clock, in nanoseconds of `CLOCK_BOOTTIME` (the clock
/// `ContinuousClock` reads on Linux): a plain integer, so the deadline arithmetic of
/// every edit needs no generic code (`ContinuousClock.Instant` is opaque to the compiler
/// outside the standard library, and its optionals go through value witnesses).
struct Moment: Comparable, Hashable, Sendable {
    var nanoseconds: Int64

    static var now: Moment {
        var time = timespec()
        clock_gettime(CLOCK_BOOTTIME, &time)
        return Moment(nanoseconds: Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec))
    }

    static func < (a: Moment, b: Moment) -> Bool { a.nanoseconds < b.nanoseconds }

    /// Saturates instead of overflowing: a very long delay is "never" in practice.
    static func + (moment: Moment, duration: Duration) -> Moment {
        let (seconds, attoseconds) = duration.components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, overflow2) = moment.nanoseconds.addingReportingOverflow(
            overflow ? (seconds < 0 ? Int64.min / 2 : Int64.max / 2) : scaled + attoseconds / 1_000_000_000)
        return Moment(nanoseconds: overflow2 ? (seconds < 0 ? Int64.min / 2 : Int64.max / 2) : sum)
    }

    static func - (a: Moment, b: Moment) -> Duration { .nanoseconds(a.nanoseconds - b.nanoseconds) }

    /// The same moment on `ContinuousClock`, to sleep until it.
    var instant: ContinuousClock.Instant { ContinuousClock.now.advanced(by: self - .now) }
}

extension Int64 {
    func addingSaturated(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other < 0 ? .min : .max) : sum
    }
}

/// A min-heap of (deadline, document) pairs. Entries may be stale: the scheduler checks
/// each popped entry against the document's current deadline.
///
/// The deadlines and the paths are kept apart: a step of a sift compares deadlines side by
/// side in one array and moves paths without touching their strings (no reference count
/// changed, no string's memory read), so that taking the next due save off a heap of
/// hundreds of thousands costs its comparisons, not a cache miss on each level's path.
struct DeadlineHeap {
    private var times: [Moment] = []
    private var paths: [String] = []

    var isEmpty: Bool { times.isEmpty }
    var count: Int { times.count }
    var first: Moment? { times.first }
    /// The pairs the arrays have room for.
    var capacity: Int { times.capacity }

    /// Room the heap keeps whatever its count: below it, it is never given back.
    static let keptCapacity = 1024

    mutating func push(_ time: Moment, _ path: String) {
        times.append(time)
        paths.append(path)
        let count = times.count
        times.withUnsafeMutableBufferPointer { times in
            paths.withUnsafeMutableBufferPointer { paths in
                var child = count - 1
                while child > 0 {
                    let parent = (child - 1) / 2
                    guard time < times[parent] else { break }
                    times[child] = times[parent]
                    paths.swapAt(child, parent)
                    child = parent
                }
                times[child] = time
            }
        }
    }

    mutating func pop() -> (Moment, String)? {
        guard let lastTime = times.popLast(), let lastPath = paths.popLast() else { return nil }
        guard !times.isEmpty else { return (lastTime, lastPath) }
        let top = (times[0], paths[0])
        let count = times.count
        // The last pair sinks from the top's place; the top's path, moved down the same
        // way, is written over at the end (its count given to the copy returned).
        times.withUnsafeMutableBufferPointer { times in
            paths.withUnsafeMutableBufferPointer { paths in
                var hole = 0
                while true {
                    let left = 2 * hole + 1
                    guard left < count else { break }
                    var child = left
                    if left + 1 < count, times[left + 1] < times[left] { child = left + 1 }
                    guard times[child] < lastTime else { break }
                    times[hole] = times[child]
                    paths.swapAt(hole, child)
                    hole = child
                }
                times[hole] = lastTime
                paths[hole] = lastPath
            }
        }
        // A burst (every document saved at once, a long quiet period's stale pairs) grows
        // the arrays, which never shrink by themselves: down to an eighth of their room,
        // they are copied into a quarter of it. Each copy follows at least as many pops
        // as it moves pairs.
        if times.capacity > Self.keptCapacity, count * 8 < times.capacity { shrink() }
        return top
    }

    private mutating func shrink() {
        let room = max(Self.keptCapacity, times.count * 2)
        var newTimes: [Moment] = []
        newTimes.reserveCapacity(room)
        newTimes.append(contentsOf: times)
        times = newTimes
        var newPaths: [String] = []
        newPaths.reserveCapacity(room)
        newPaths.append(contentsOf: paths)
        paths = newPaths
    }
}

extension DocumentStore {
    // MARK: Deadlines

    /// Records an edit's time and (re)computes the document's save deadline.
    func noteEdit(_ path: String) {
        guard let index = entries.index(forKey: path) else { return }
        noteEdit(path, at: index)
    }

    func noteEdit(_ path: String, at index: EntryTable.Index) {
        let now = Moment.now
        let delays = scheduleDelays
        let decision = modifyEntry(at: index) { entry in Self.recordEdit(&entry, now: now, delays: delays) }
        if let decision { queue(path, decision) }
    }

    /// Records an edit made `now` in `entry` and sets its deadline (see ``reschedule(_:now:delays:)``).
    static func recordEdit(
        _ entry: inout Entry, now: Moment, delays: (quiet: Int64, max: Int64)
    ) -> (deadline: Moment, push: Bool)? {
        entry.lastEdit = now
        if entry.firstUnsavedEdit == nil { entry.firstUnsavedEdit = now }
        return reschedule(&entry, now: now, delays: delays)
    }

    /// Runs `body` on the entry in place. Reading `entries[index].field` would copy
    /// the whole entry out first; an `inout` access does not.
    func modifyEntry<R, E: Error>(at index: EntryTable.Index, _ body: (inout Entry) throws(E) -> R) throws(E) -> R {
        try body(&entries[index])
    }

    /// Sets the deadline of a dirty document and makes sure the heap holds it: the
    /// trailing quiet period after the last edit, capped by the maximum delay since the
    /// first unsaved edit, now for an explicit save, and never before a pending retry.
    func schedule(_ path: String) {
        guard let index = entries.index(forKey: path) else { return }
        schedule(path, at: index, now: .now)
    }

    private func schedule(_ path: String, at index: EntryTable.Index, now: Moment) {
        let delays = scheduleDelays
        let decision = modifyEntry(at: index) { entry in Self.reschedule(&entry, now: now, delays: delays) }
        if let decision { queue(path, decision) }
    }

    /// The quiet period and the maximum delay of `configuration`, in nanoseconds.
    static func delays(of configuration: Configuration) -> (quiet: Int64, max: Int64) {
        (
            (Moment(nanoseconds: 0) + configuration.quietPeriod).nanoseconds,
            (Moment(nanoseconds: 0) + configuration.maxDelay).nanoseconds
        )
    }

    /// Sets a dirty entry's deadline (see ``schedule(_:)``); returns it, and whether the
    /// heap must get it, or `nil` for a clean entry.
    static func reschedule(
        _ entry: inout Entry, now: Moment, delays: (quiet: Int64, max: Int64)
    ) -> (deadline: Moment, push: Bool)? {
        guard entry.isDirty else { return nil }
        var deadline: Moment
        if let forced = entry.forcedToken, forced > entry.savedChangeCount {
            deadline = now
        } else {
            let lastEdit = entry.lastEdit ?? now
            let firstEdit = entry.firstUnsavedEdit ?? lastEdit
            deadline = Moment(
                nanoseconds: min(
                    lastEdit.nanoseconds.addingSaturated(delays.quiet),
                    firstEdit.nanoseconds.addingSaturated(delays.max)))
        }
        if let retryAt = entry.retryAt, retryAt > deadline { deadline = retryAt }
        entry.deadline = deadline
        let push = entry.queuedAt.map({ deadline < $0 }) ?? true
        if push { entry.queuedAt = deadline }
        return (deadline, push)
    }

    /// Puts a new deadline in the heap if needed, and wakes the scheduler if it sleeps past it.
    func queue(_ path: String, _ decision: (deadline: Moment, push: Bool)) {
        if decision.push { heap.push(decision.deadline, path) }
        // The sleeper is looked at only when it sleeps without a target (rare): reading
        // the optional continuation copies it.
        if let target = sleepTarget {
            if decision.deadline < target { arm(decision.deadline) }
        } else if sleeper != nil {
            arm(decision.deadline)
        }
    }

    // MARK: The scheduler loop

    /// Runs the scheduler until the calling task is cancelled.
    public func runScheduler() async {
        while !Task.isCancelled {
            processDue()
            await sleep(until: heap.first)
        }
    }

    private func sleep(until deadline: Moment?) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled {
                    continuation.resume()
                    return
                }
                sleeper = continuation
                arm(deadline)
            }
        } onCancel: {
            Task { await self.wake() }
        }
    }

    /// Sets the loop's timer for the scheduler's next look at the heap (no task or thread
    /// sleeps for it). When it fires, the due saves start right there, on the loop's
    /// thread: the scheduler's task stays asleep, since resuming it would hand the work to
    /// another thread and back (for every `save` with `wait`, whose deadline is now).
    ///
    /// A deadline already past while every save slot is taken is not armed: the timer
    /// would fire at once and find no slot. The scheduler then waits on the slots instead
    /// (``allSlotsTaken``): the next save to finish starts the next due document.
    private func arm(_ deadline: Moment?) {
        if let deadline, !hasFreeSaveSlot, deadline <= .now {
            sleepTarget = Self.allSlotsTaken
            loop.setTimer(at: nil)
            return
        }
        sleepTarget = deadline
        if let deadline {
            loop.setTimer(at: deadline.nanoseconds) { [weak self] in self?.isolatedHere { $0.timerFired() } }
        } else {
            loop.setTimer(at: nil)
        }
    }

    private func timerFired() {
        // The scheduler's task is awake (it looks at the heap before it sleeps again).
        guard sleeper != nil else { return }
        processDue()
        arm(heap.first)
    }

    /// Ends the scheduler's current sleep so it looks at the heap again (after a change of
    /// the delays, and at cancellation).
    func wake() {
        if sleepTarget != nil { loop.setTimer(at: nil) }
        sleepTarget = nil
        if let sleeper {
            self.sleeper = nil
            sleeper.resume()
        }
    }

    /// The scheduler's target while due documents wait for a save slot: earlier than any
    /// deadline, so that no new deadline arms the timer (``queue(_:_:)``).
    static let allSlotsTaken = Moment(nanoseconds: .min)

    /// Whether fewer saves run than `MaxConcurrentSaves=` allows.
    var hasFreeSaveSlot: Bool { savesInFlight < configuration.maxConcurrentSaves }

    /// Starts the saves that are due, as many as there are free slots. Due documents
    /// beyond the slots stay in the heap, in deadline order, until a save finishes
    /// (``finishSave(_:serial:token:snapshot:result:duration:since:)``): the loop's work is per
    /// save started, not per document due — a burst of thousands due at once (the quiet
    /// period of a burst of new documents ending, a journal compaction) is not walked
    /// while the saves are busy.
    func processDue() {
        let now = Moment.now
        while hasFreeSaveSlot, let first = heap.first, first <= now, let (_, path) = heap.pop() {
            guard let index = entries.index(forKey: path) else { continue }
            // A conflict waiting for another program to finish writing the file: nothing is
            // saved over it meanwhile (a package's members are written in place, and the
            // look would then find them as saved); the look schedules the save.
            let settling = !settlingConflicts.isEmpty && settlingConflicts[PathKey(path)]?.lookPending == true
            // One access to the entry, in place.
            let (due, requeue) = modifyEntry(at: index) { entry -> (Bool, Moment?) in
                // A stale entry: the document was queued again for an earlier time.
                if let queuedAt = entry.queuedAt, queuedAt < first { return (false, nil) }
                entry.queuedAt = nil
                guard entry.isDirty, let deadline = entry.deadline else { return (false, nil) }
                if deadline > now {
                    entry.queuedAt = deadline
                    return (false, deadline)
                }
                if settling { return (false, nil) }
                // A save in flight reschedules the document when it finishes.
                return (entry.savingToken == nil, nil)
            }
            if let requeue { heap.push(requeue, path) }
            if due { startSave(path, at: index) }
        }
    }

    /// A save slot came free: the next due document takes it, and once none waits for a
    /// slot, the timer looks after the heap again.
    private func slotFreed() {
        processDue()
        if sleepTarget == Self.allSlotsTaken, hasFreeSaveSlot {
            arm(heap.first)
        }
    }

    /// Runs `body` on the store from the loop's thread, in the loop's next pass between
    /// jobs: sound, since the loop is the store's serial executor (as
    /// ``ConnectionReader``'s readiness calls are). How a save thread's result and the
    /// loop's timer reach the store without a task or a further hop.
    nonisolated func onLoop(_ body: @escaping @Sendable (isolated DocumentStore) -> Void) {
        loop.execute { [self] in isolatedHere(body) }
    }

    /// Runs `body` on the store now; the caller is on the loop's thread between jobs (see ``onLoop(_:)``).
    nonisolated func isolatedHere<R>(_ body: @Sendable (isolated DocumentStore) -> R) -> R {
        precondition(loop.isCurrent, "the store used off its thread")
        return withoutActuallyEscaping(body) { body in
            unsafeBitCast(body, to: (@Sendable (DocumentStore) -> R).self)(self)
        }
    }

    private func startSave(_ path: String, at index: EntryTable.Index) {
        // One access to the entry, in place: what the save needs is taken from it.
        saveSerial += 1
        let serial = saveSerial
        let (token, since, snapshot, existing, expected, type, journalSaving, onLoop) = modifyEntry(at: index) {
            entry in
            let token = entry.changeCount
            let since = entry.firstUnsavedEdit
            entry.savingToken = token
            entry.savingSerial = serial
            entry.firstUnsavedEdit = nil
            entry.deadline = nil
            entry.savingLSN = entry.lastJournalLSN
            // Its release will be through what it covers, while later edits are appended.
            entry.journalLog.checkpoint()
            return (
                token, since, entry.document, entry.existingFile,
                // Never replace what was not seen: the file as last read or written, or none.
                entry.fingerprint?.expectedDestination ?? .absent, entry.contentType,
                // The journal's record of the file this save puts in place, written while its bytes are synced.
                self.journalSaving(entry, path: path, token: token), mayRunOnLoop(entry)
            )
        }
        // With `Mode=periodic`, only a save its document is edited during waits for its
        // journal record's sync (see ``SaveCommit``); with `always`, every one does.
        let commit =
            journalSaving != nil && configuration.journalMode != .always
            ? SaveCommit(preceding: entries[index].savingLSN, gate: replyGate) : nil
        if let commit { saveCommits[serial] = commit }
        let journalOwner = entries[index].journalOwner
        savesInFlight += 1
        let fullPath = root + "/" + path
        let root = root
        let writer = writer
        let clock = clock
        let durableDirectories = durableDirectories
        // The journal's record of the file the save puts in place, if it writes one: kept
        // with the document's records however the save ends.
        let savingRecord = SavingRecord()
        // Serialising and writing block on memory copies and on the disk: they run on the
        // save threads, never on the store's thread that edits (and the socket) run on; the
        // result comes back to the loop with one wake-up. A small save somebody waits for
        // may instead run on the loop once it has nothing else to do (``runDeferredSaves(loopWillSleep:)``).
        let work = { @Sendable () -> (Result<SaveOutcome, any Error>, Duration) in
            let start = clock.now
            let result = Result { () throws -> SaveOutcome in
                let wrapper = try snapshot.fileWrapper(configuration: .init(contentType: type, existingFile: existing))
                // Hashed once, for the fingerprint and for the journal's record of the save,
                // while the disk writes the bytes.
                let hashing = ContentHashing(wrapper)
                let report: DurableWriter.Report
                // Closed once the save has been answered (see `SaveOutcome.leftOpen`).
                let leftOpen = DescriptorsLeftOpen()
                let write = {
                    try writer.write(
                        wrapper, to: fullPath, options: [], originalContentsPath: fullPath, expecting: expected,
                        beforeReplacing: journalSaving.map { journalSaving in
                            { _, _, _, _ in
                                // The file names its record itself (``SaveMark``): replay
                                // knows it without the record.
                                if savingRecord.marked { return }
                                if let commit, commit.commit() { return }
                                try journalSaving.settle(savingRecord.lsn)
                            }
                        },
                        whileSyncing: hashing.map { hashing in
                            { size, temporary in
                                // Both while the disk writes the bytes: any save that puts this
                                // file in place has its record in the journal first (a record of a
                                // save that fails names a file that is nowhere, and is passed over).
                                let hash = hashing.value
                                if let journalSaving, let hash {
                                    let file = FileIdentity(size: size, hash: hash)
                                    // The file names itself (its mark, durable with its bytes:
                                    // the fsync that follows), and needs no record: replay
                                    // knows it by the mark, and the edits made meanwhile
                                    // follow the base the save's end journals.
                                    if (try? temporary.setAttribute(
                                        SaveMark.attributeName, to: journalSaving.mark(file)))
                                        != nil
                                    {
                                        savingRecord.marked = true
                                        return
                                    }
                                    // No mark (the file system keeps no extended attributes):
                                    // the record, its sync started now (overlapping the
                                    // file's) where the rename is to wait for it; otherwise
                                    // the journal's own syncs take it, and the file's sync
                                    // has the disk alone.
                                    savingRecord.lsn = journalSaving.write(file, commit?.needsRecord ?? true)
                                }
                            }
                        }, leftOpen: leftOpen)
                }
                do {
                    do {
                        report = try write()
                    } catch let error as DocumentError where Self.mayNeedParentDirectories(error) {
                        // The writer is confined to the root and opens the document's
                        // directory without following a link (see `writer`); one that is
                        // missing is made here, each directory on the way opened the same
                        // way, and the write tried once more.
                        try Self.makeParentDirectories(of: path, beneath: root)
                        report = try write()
                    }
                } catch let error as DocumentError where error.operation == .syncDirectory {
                    throw Self.replacedBeforeFailing(error, contentHash: hashing?.value)
                }
                // The directories above the document's own (which the writer synced) are
                // durable before the save counts as done, once per directory.
                if let directory = Self.directory(of: path),
                    !durableDirectories.withLock({ $0.contains(PathKey(directory)) })
                {
                    do throws(DocumentError) {
                        try Self.syncDirectories(above: directory, beneath: root, known: durableDirectories)
                    } catch {
                        var failed = error
                        failed.placed = report.placed
                        throw Self.replacedBeforeFailing(failed, contentHash: hashing?.value)
                    }
                }
                // The file or the package's directory this save put in place, by its own
                // descriptor: a status by path could be another program's that replaced it
                // since, taken for this save's and then overwritten by the next. (A
                // symbolic link has no descriptor of its own; it is looked up by path.)
                let status =
                    wrapper.isSymbolicLink
                    ? try? FileDescriptor.currentWorkingDirectory.status(of: report.path) : report.placed
                let hash = hashing?.value
                return SaveOutcome(
                    wrapper: wrapper, report: report, fingerprint: status.map { Fingerprint($0, contentHash: hash) },
                    leftOpen: leftOpen)
            }
            return (result, clock.now - start)
        }
        let finish = {
            @Sendable (store: isolated DocumentStore, result: Result<SaveOutcome, any Error>, duration: Duration) in
            store.finishSave(
                path, serial: serial, token: token, snapshot: snapshot, result: result, duration: duration,
                since: since,
                savingRecord: savingRecord.lsn, journalOwner: journalOwner)
        }
        let save = DeferredSave(work: work, finish: finish)
        if onLoop {
            deferredSaves.append(save)
        } else {
            submit(save)
        }
    }

    /// Has a save thread write `save`; its result comes back to the loop with one wake-up.
    /// The save and its result go over in a box that the loop empties: the save thread
    /// keeps nothing of the document once it has handed the result over (it may run again
    /// only after the loop has answered, closed the document and reported its memory).
    private func submit(_ save: DeferredSave) {
        let handoff = SaveHandoff(save)
        saveThreads.submit { @Sendable [weak self] in
            handoff.run()
            self?.onLoop { handoff.finish($0) }
        }
    }

    /// The most bytes a document's last save may have written for its next save to run
    /// on the loop (see ``runDeferredSaves(loopWillSleep:)``). The last save's duration
    /// (`LoopWriteLimit=`) is what keeps the loop from being held long; this bounds what a
    /// document that grew since can cost it once. A megabyte's save is quick on a fast
    /// disk, and on a save thread it waits for two thread hand-offs and is met by the
    /// watcher's wake-ups at each of its system calls, which the loop's saves are not.
    static let loopSaveBytes = 4 << 20

    /// Whether a save about to start may run on the loop: somebody waits for it (a
    /// `save` with `wait: true`), and the document is a regular file whose last save was
    /// small (``loopSaveBytes``) and quick (`LoopWriteLimit=`).
    private func mayRunOnLoop(_ entry: Entry) -> Bool {
        guard configuration.loopWriteLimit > .zero, !entry.waiters.isEmpty, !entry.isPackage,
            let last = entry.lastSaveDuration,
            let size = entry.fingerprint?.size
        else { return false }
        return last <= configuration.loopWriteLimit && size <= Self.loopSaveBytes
    }

    /// Starts the saves ``startSave(_:)`` left to the end of the loop's pass. When the
    /// loop is about to sleep, the first runs right here: the client waiting for it would
    /// otherwise wait for two thread hand-offs (to a save thread and back) around a write
    /// that takes about as long, and the loop has nothing else to do. It is small and its
    /// last save was quick (`LoopWriteLimit=`, 2 ms), so the loop is held for no longer
    /// than that, about; everything else goes to the save threads. Returns whether
    /// a save ran here (its reply is queued: the loop makes another pass).
    func runDeferredSaves(loopWillSleep: Bool) -> Bool {
        guard !deferredSaves.isEmpty else { return false }
        var saves: [DeferredSave] = []
        swap(&saves, &deferredSaves)
        var here: DeferredSave?
        if loopWillSleep, saves.count == 1 { here = saves.removeFirst() }
        for save in saves { submit(save) }
        guard let here else { return false }
        let (result, duration) = here.work()
        here.finish(self, result, duration)
        // After the save's answer (``finishSave``), not on its way.
        if case .success(let outcome) = result { outcome.leftOpen?.close() }
        return true
    }

    /// Makes the entries of `directory` (relative to the root) and of every directory
    /// above it durable: an `fsync` of each directory from the root down to `directory`'s
    /// parent, each opened relative to the one before without following a link. The
    /// writer syncs a document's own directory after its rename; a directory made just
    /// before — by another save of this store whose sync of its parent is still running,
    /// or by another program that never syncs — could otherwise vanish with a power cut,
    /// and the acknowledged file with it. Each directory is done once (`known`), until the
    /// watcher reports a directory removed or renamed.
    nonisolated static func syncDirectories(
        above directory: String, beneath root: String, known: Lock<Set<PathKey>>
    ) throws(DocumentError) {
        var done: [PathKey] = []
        // The directory being opened or synced, for the error to name.
        var at = root
        do throws(Errno) {
            var current = try FileDescriptor.open(root, options: [.directory])
            defer { try? current.close() }
            var prefix = ""
            for name in PathName.components(directory) {
                try current.sync()
                prefix = prefix.isEmpty ? name : prefix + "/" + name
                done.append(PathKey(prefix))
                at = root + "/" + prefix
                let next: FileDescriptor
                do throws(Errno) {
                    next = try FileDescriptor.open(name, relativeTo: current, options: [.directory, .noFollow])
                } catch .noSuchFile, .notDirectory, .tooManySymbolicLinks {
                    // Renamed or removed by another program since the file was put in it:
                    // the watcher reports it, and the document follows (nothing more to sync here).
                    return
                }
                try? current.close()
                current = next
            }
        } catch {
            throw DocumentError(operation: .syncDirectory, path: at, errno: error)
        }
        known.withLock { $0.formUnion(done) }
    }

    /// Whether a save's write failed at opening a directory on the way in a way
    /// ``makeParentDirectories(of:beneath:)`` makes or names better: a directory (or
    /// the root) missing, a symbolic link, or a file in the way.
    nonisolated static func mayNeedParentDirectories(_ error: DocumentError) -> Bool {
        error.operation == .openDirectory
            && [.noSuchFile, .tooManySymbolicLinks, .notDirectory, .crossDevice].contains(error.errno)
    }

    /// Creates the directories a new document's path needs (each made durable in its
    /// parent), one component at a time from the root, each opened relative to the one
    /// before without following a symbolic link: a linked directory (which could lead out
    /// of the root) is refused. The root itself is never made here: start-up makes it,
    /// and one that goes away while the daemon runs (removed, moved, or the mount point
    /// of a file system that is gone) is left for the operator to bring back — a root
    /// made again could be a directory on the wrong file system. Until then the save
    /// fails, naming the root.
    nonisolated static func makeParentDirectories(of path: String, beneath root: String) throws {
        if (try? FileDescriptor.currentWorkingDirectory.status(of: root, followSymlinks: true))?.kind != .directory {
            throw DocumentError(
                operation: .openDirectory, path: root, errno: .noSuchFile,
                detail:
                    "the store root is gone (removed or moved away); the edits are kept in memory and saved once it is back"
            )
        }
        let components = PathName.components(PathName.parent(path))
        guard !components.isEmpty else { return }
        var made = root
        do throws(Errno) {
            var directory = try FileDescriptor.open(root, options: [.directory])
            defer { try? directory.close() }
            for name in components {
                made += "/" + name
                let next: FileDescriptor
                do throws(Errno) {
                    next = try FileDescriptor.open(name, relativeTo: directory, options: [.directory, .noFollow])
                } catch .noSuchFile {
                    do throws(Errno) { try directory.makeDirectory(name) } catch .fileExists {}
                    try directory.sync()
                    next = try FileDescriptor.open(name, relativeTo: directory, options: [.directory, .noFollow])
                }
                try? directory.close()
                directory = next
            }
        } catch .tooManySymbolicLinks {
            // A directory on the way is a symbolic link (it could lead out of the root).
            throw DocumentError(
                operation: .followSymbolicLink, path: root + "/" + PathName.parent(path), errno: .tooManySymbolicLinks)
        } catch {
            throw DocumentError(operation: .makeDirectory, path: made, errno: error)
        }
    }

    private func finishSave(
        _ path: String, serial: UInt64, token: UInt64, snapshot: any AutosaveDocument,
        result: Result<SaveOutcome, any Error>, duration: Duration, since: Moment?,
        savingRecord: UInt64, journalOwner: UInt64
    ) {
        savesInFlight -= 1
        defer { slotFreed() }
        if !saveCommits.isEmpty { saveCommits[serial] = nil }
        // The document this save is for: not one closed while it saved, nor one opened at the
        // same path since (whose edits this save does not hold: taken for it, they would
        // count as saved, and its callers be told so).
        guard let index = entries.index(forKey: path), entries[index].savingToken != nil,
            entries[index].savingSerial == serial
        else {
            // What was reported meanwhile is not for a document opened there later (unless
            // that one's own save is in flight: its end looks).
            if entries[path]?.savingToken == nil {
                pendingChecks.remove(PathKey(path))
                pendingMemberChecks.removeValue(forKey: PathKey(path))
            }
            // Its record, of a file put in place (or not) for a document no longer open:
            // left, the next start would find it naming a file no record leads to.
            if savingRecord != 0 { journalReleaseClosed(owner: journalOwner, savingRecord: savingRecord) }
            return
        }
        entries[index].savingToken = nil
        if case .failure = result, savingRecord != 0 {
            // Its record names a file that is nowhere (replay passes over it): released with
            // the document's other records, not left for the next start to report.
            journalAdopt(&entries[index], savingRecord: savingRecord)
        }
        switch result {
        case .success(let outcome):
            let report = outcome.report
            let now = Date()
            // One access to the entry, in place: no copy of it (or of its document, which
            // `didSave` may change) to write back.
            let (finished, type) = modifyEntry(at: index) { entry in
                entry.savedChangeCount = max(entry.savedChangeCount, token)
                entry.existingFile = outcome.wrapper
                entry.fingerprint = outcome.fingerprint
                entry.failure = nil
                entry.retryAt = nil
                entry.saves += 1
                entry.lastSaveDuration = duration
                entry.lastSaved = now
                let saved = entry.savedChangeCount
                let finished = entry.waiters.filter { $0.token <= saved }
                if !finished.isEmpty {
                    entry.waiters.removeAll { $0.token <= saved }
                    // Emptied, its buffer goes too: kept, every document that ever had a
                    // waiter would hold one (about 100 bytes each).
                    if entry.waiters.isEmpty { entry.waiters = [] }
                    // The file is in place: a caller that can be told now is, before the
                    // bookkeeping below (nothing else runs on the store meanwhile). An edit
                    // made during the save has scheduled the next one already.
                    if finished.contains(where: { $0.onSaved != nil }) {
                        let described = info(path, entry)
                        for waiter in finished { waiter.onSaved?(described) }
                    }
                }
                Self.didSave(&entry.document, snapshot: snapshot)
                journalSaved(&entry, path: path, savingRecord: savingRecord)
                return (finished, entry.contentType)
            }
            totalSaves += 1
            lastSave = (path, now)
            if let since { editToDurable.record(Moment.now - since) }
            for waiter in finished { waiter.continuation.resume() }
            // Kept for the rename's event still to come; one that came during the save
            // (a save thread's: its directory's fsync outlasts the watcher) is checked
            // against the disk below, and nothing is kept for it.
            if let temporary = report.temporaryName, !pendingChecks.contains(PathKey(path)) {
                ownRenames[PathKey(path)] = temporary
            } else if !ownRenames.isEmpty {
                ownRenames.removeValue(forKey: PathKey(path))
            }
            let log = log
            logsAfterReplies.append {
                log.info(
                    "saved \(path)",
                    [
                        "document": path, "content_type": type.identifier,
                        "bytes_written": "\(report.bytesWritten)", "duration_usec": "\(duration.microseconds)",
                        "message_id": MessageID.documentSaved,
                    ])
            }
            emit(.saved(document: path, bytes: report.bytesWritten, duration: duration))
        case .failure(let error as DestinationChanged):
            // Another program's version, seen by the save before the watcher told of it.
            log.info(
                "the save of \(path) found the file changed by another program and replaced nothing: \(error)",
                ["document": path, "message_id": MessageID.externalChange])
            if !heldRenames.isEmpty, heldRenames[PathKey(path)] != nil {
                // Renamed meanwhile (their rename came before the save's): looked at where it went.
                pendingChecks.insert(PathKey(path))
            } else {
                changeFoundBySave(path)
            }
        case .failure(let thrown):
            if watcher == nil, entries[index].isPackage, entries[index].existingFile != nil, packageGone(path) {
                // The package's directory is gone and nothing watches to say so (`[Watch]
                // Enabled=no`; a watcher reports it, and the report is handled): handled as
                // that report would be, by `WhenRemoved=` — written again whole from memory,
                // or closed. (Once: a save of the package written again that fails is a
                // failure.)
                log.info(
                    "the save of \(path) found its directory gone: \(thrown)",
                    ["document": path, "message_id": MessageID.externalChange])
                removedExternally(path)
            } else {
                let replaced = thrown as? FailedAfterReplacing
                recordSaveFailure(
                    path, at: index, replaced?.error ?? thrown, through: token, placed: replaced?.fingerprint)
            }
        }
        // Saves made for the journal's MaxSize=: another round once this one's are done,
        // until it is under the limit.
        let compacted = journalCompacting && journalCompactionDocuments.remove(PathKey(path)) != nil
        defer {
            if compacted, journalCompactionDocuments.isEmpty, let journal { compactIfNeeded(journal) }
        }
        // Another program renamed the file while the save was written: the document follows it now.
        var path = path
        if !heldRenames.isEmpty, let destination = heldRenames.removeValue(forKey: PathKey(path)) {
            guard let followed = followHeldRename(path, to: destination) else {
                pendingChecks.remove(PathKey(path))
                pendingMemberChecks.removeValue(forKey: PathKey(path))
                return
            }
            path = followed
        }
        // A conflict waiting for the other program's write to settle is resolved by its
        // look; saving again meanwhile would only find the file changed again.
        if let index = entries.index(forKey: path), modifyEntry(at: index, { $0.isDirty }),
            settlingConflicts[PathKey(path)]?.lookPending != true
        {
            schedule(path)
        }
        if pendingChecks.remove(PathKey(path)) != nil {
            checkExternalChange(path)
            for member in pendingMemberChecks.removeValue(forKey: PathKey(path)) ?? [] {
                checkExternalChange(path, member: member.path)
            }
        }
    }

    /// Whether the package at `path` is missing from a directory that is there (removed or
    /// moved away), as opposed to a root or a directory above it gone, or a look that
    /// failed for another reason.
    private func packageGone(_ path: String) -> Bool {
        let cwd = FileDescriptor.currentWorkingDirectory
        do {
            _ = try cwd.status(of: root + "/" + path)
            return false
        } catch .noSuchFile {
            let parent = PathName.parent(path)
            return (try? cwd.status(of: parent.isEmpty ? root : root + "/" + parent, followSymlinks: parent.isEmpty))?
                .kind == .directory
        } catch {
            return false
        }
    }

    /// A save of the document at `index` failed with `error` (or its conflict copy could
    /// not be written): the failure is recorded, the next attempt waits for the backoff,
    /// and callers waiting for edits through `token` are answered with `save-failed`.
    /// `placed`: the file the failed save put in place all the same (see
    /// ``replacedBeforeFailing(_:contentHash:)``).
    func recordSaveFailure(
        _ path: String, at index: EntryTable.Index, _ error: any Error, through token: UInt64,
        placed: Fingerprint? = nil
    ) {
        let (failure, failed, backoff, type) = modifyEntry(at: index) {
            entry -> (SaveFailure, [Entry.Waiter], Duration, UTType) in
            if let placed {
                // The file in place is this save's: the retry replaces it, and the watcher
                // does not take it for another program's.
                entry.fingerprint = placed
            }
            let attempts = (entry.failure?.attempts ?? 0) + 1
            let wait = self.backoff(after: attempts)
            let retryAt = Moment.now + wait
            let failure = Self.describe(error, document: path, attempts: attempts, retryAt: date(of: retryAt))
            entry.failure = failure
            entry.retryAt = retryAt
            if entry.firstUnsavedEdit == nil { entry.firstUnsavedEdit = .now }
            let failed = entry.waiters.filter { $0.token <= token }
            entry.waiters.removeAll { $0.token <= token }
            if entry.waiters.isEmpty { entry.waiters = [] }
            return (failure, failed, wait, entry.contentType)
        }
        lastFailure = failure
        for waiter in failed { waiter.continuation.resume(throwing: StoreError.saveFailed(failure)) }
        log.error(
            "\(failure.description); retrying in \(TimeSpan.format(backoff))",
            [
                "document": path, "operation": failure.operation, "path": failure.path,
                "errno": failure.errno.map { "\($0.rawValue)" } ?? "", "errno_name": failure.errno?.name ?? "",
                "content_type": type.identifier, "message_id": MessageID.saveFailed,
            ])
        emit(.saveFailed(failure))
    }

    /// A save whose directory's sync failed after the rename: its file is in place (the
    /// writer says so with the file's status, from its own descriptor), so the store
    /// records it as the document's, and neither the retry nor the watcher takes it for
    /// another program's. A package, or a failure before the rename, is the error as it is.
    nonisolated static func replacedBeforeFailing(_ error: DocumentError, contentHash: UInt64?) -> any Error {
        guard let placed = error.placed, let contentHash else { return error }
        return FailedAfterReplacing(error: error, fingerprint: Fingerprint(placed, contentHash: contentHash))
    }

    private static func didSave<D: AutosaveDocument>(_ document: inout D, snapshot: any AutosaveDocument) {
        didSave(&document, opened: snapshot)
    }

    /// The snapshot's type compared as a type, not cast (`as? D` looks up the metadata
    /// of `Optional<D>` and runs the dynamic cast at every save).
    private static func didSave<D: AutosaveDocument, S: AutosaveDocument>(_ document: inout D, opened snapshot: S) {
        guard S.self == D.self else { return }
        document.didSave(unsafeBitCast(snapshot, to: D.self))
    }

    func backoff(after attempts: Int) -> Duration {
        var interval = configuration.retryInterval
        for _ in 1..<max(1, attempts) {
            interval = interval * 2
            if interval >= configuration.maxRetryInterval { return configuration.maxRetryInterval }
        }
        return min(interval, configuration.maxRetryInterval)
    }

    static func describe(_ error: any Error, document: String, attempts: Int, retryAt: Date) -> SaveFailure {
        if let error = error as? DocumentError {
            return SaveFailure(
                document: document, operation: error.operation.rawValue, path: error.path, errno: error.errno,
                message: error.description, attempts: attempts, failedAt: Date(), retryAt: retryAt)
        }
        return SaveFailure(
            document: document, operation: "encode", path: document, errno: nil,
            message: "the document could not be serialised: \(error)", attempts: attempts, failedAt: Date(),
            retryAt: retryAt)
    }
}

/// A save that failed after it had put its file in place (its directory's fsync failed
/// after the rename): the file there holds the save's bytes, not yet durable.
struct FailedAfterReplacing: Error {
    var error: any Error
    var fingerprint: Fingerprint
}

/// Edits applied, by the protocol command that makes each kind, for the metrics.
struct EditCounts: Sendable {
    private(set) var counts = [Int](repeating: 0, count: EditCommand.allCases.count)

    mutating func count(_ command: EditCommand) { counts[command.rawValue] += 1 }
}

/// A histogram of durations with fixed buckets (seconds), for the metrics.
struct LatencyHistogram: Sendable {
    static let bounds: [Double] = [0.01, 0.1, 0.5, 1, 2, 2.5, 5, 10, 30, 60, 300]
    private(set) var buckets = [Int](repeating: 0, count: bounds.count)
    private(set) var count = 0
    private(set) var sum = 0.0

    mutating func record(_ duration: Duration) {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        count += 1
        sum += seconds
        for (index, bound) in Self.bounds.enumerated() where seconds <= bound { buckets[index] += 1 }
    }
}

/// What a finished save hands back to the store.
/// A save ``DocumentStore/startSave(_:)`` starts: the writing, and what the store does
/// with its result (on a save thread, or left to the end of the loop's pass).
struct DeferredSave: Sendable {
    var work: @Sendable () -> (Result<SaveOutcome, any Error>, Duration)
    var finish: @Sendable (isolated DocumentStore, Result<SaveOutcome, any Error>, Duration) -> Void
}

struct SaveOutcome: Sendable {
    var wrapper: FileWrapper
    var report: DurableWriter.Report
    var fingerprint: Fingerprint?
    /// The descriptors the write left open (the file's, its directory's, the root's): a
    /// save on the loop closes them once its waiting caller has been answered, a save
    /// thread as soon as it has written.
    var leftOpen: DescriptorsLeftOpen?
}

/// Where a save thread keeps the LSN of its journal record between the writer's
/// callback and the save's outcome (both on that thread), and whether the file carries
/// the record's ``SaveMark``.
final class SavingRecord: @unchecked Sendable {
    var lsn: UInt64 = 0
    var marked = false
}

/// Whether a save must wait for its journal record (the file it puts in place) to be
/// durable before its rename (`Mode=periodic`; with `always`, every save waits) — on a
/// file system that keeps no extended attributes. Elsewhere the file carries the
/// record's gist (``SaveMark``), durable with its bytes, and no save waits.
///
/// Once the file is in place, replay can match it only through that record; without
/// it, replay rebuilds the version the durable records give and compares it with the
/// file. Two cases need the record:
/// - An edit journalled during the save before the record was appended could be made
///   durable while the record is not: a power cut right after the rename leaves it
///   with no version to apply to. So an edit made during the save moves the state from
///   idle to *edited* before its own record is appended, and the save, finding it so,
///   waits. A save that moved it from idle to *committing* first needs nothing for the
///   edits after: their records follow its own, and the journal is durable in order.
/// - The document's records before the save (the edits it holds) not yet durable: a
///   power cut after the rename leaves a file ahead of the durable records, which
///   replay would take for another program's (a false conflict, and with
///   `Keep=memory` the older version put back under the name). The record's sync makes
///   them durable too (they precede it).
///
/// A save whose edits a periodic sync has already made durable (every save after the
/// quiet period, with the default 2 s against `SyncInterval=1s`), and that nobody edits
/// meanwhile, renames without waiting for the journal: a cut before its record's sync
/// leaves a file holding exactly the durable records' edits, which replay finds so
/// where the journal holds the document's bytes, and otherwise reports.
final class SaveCommit: Sendable {
    private static let idle: UInt8 = 0
    private static let edited: UInt8 = 1
    private static let committing: UInt8 = 2
    private let state = Atomic<UInt8>(SaveCommit.idle)
    /// The document's last record before the save.
    private let preceding: UInt64
    /// Where the journal's durable point is kept, for any thread.
    private let gate: ReplyGate

    init(preceding: UInt64, gate: ReplyGate) {
        self.preceding = preceding
        self.gate = gate
    }

    /// On the loop, before an edit of the document is journalled.
    func edit() {
        _ = state.compareExchange(expected: Self.idle, desired: Self.edited, ordering: .acquiringAndReleasing)
    }

    /// Whether the record is to be durable before the rename, as far as is known yet
    /// (its sync is then started beside the file's).
    var needsRecord: Bool {
        state.load(ordering: .acquiring) == Self.edited || gate.durable.load(ordering: .acquiring) < preceding
    }

    /// On the save thread, right before the rename: whether it may go ahead without the
    /// record's sync (no edit came first, and the edits the save holds are durable).
    func commit() -> Bool {
        state.compareExchange(expected: Self.idle, desired: Self.committing, ordering: .acquiringAndReleasing)
            .exchanged && gate.durable.load(ordering: .acquiring) >= preceding
    }
}

/// The journal's record of the file a save puts in place (``DocumentStore/journalSaving(_:path:token:)``).
struct SavingJournalRecord: Sendable {
    /// Appends and writes the record, and starts its sync if asked; its LSN (0: it could
    /// not be appended).
    let write: @Sendable (FileIdentity, _ sync: Bool) -> UInt64
    /// The ``SaveMark`` of the file: the extended attribute's value.
    let mark: @Sendable (FileIdentity) -> [UInt8]
    /// Waits until the record of that LSN is durable (right before the rename); throws
    /// when it cannot be made so, and the save fails with nothing replaced.
    let settle: @Sendable (UInt64) throws -> Void
}

/// A save on its way from the loop to a save thread and back (see `submit`): written by
/// the save thread before it hands the box to the loop, read and emptied by the loop.
private final class SaveHandoff: @unchecked Sendable {
    private var save: DeferredSave?
    private var outcome: (Result<SaveOutcome, any Error>, Duration)?

    init(_ save: DeferredSave) { self.save = save }

    /// On the save thread: the save's work, its result kept here; nothing of it stays on
    /// the caller's stack.
    func run() {
        outcome = save?.work()
        if case .success(let written)? = outcome?.0 { written.leftOpen?.close() }
    }

    /// On the loop: the save finished, and the box let go of everything it held.
    func finish(_ store: isolated DocumentStore) {
        guard let save, let (result, duration) = outcome else { return }
        self.save = nil
        outcome = nil
        save.finish(store, result, duration)
    }
}

/// The ``StableHash`` of a save's bytes, for the fingerprint and for the journal's record
/// of the save. The writer has it computed between writing the bytes and their `fsync`
/// (``DurableWriter``'s `whileSyncing`), a large file's write-back already under way: a
/// megabyte's hash, about 0.1 ms, is done on the save's own thread while the disk writes,
/// with no other thread to wake (which the scheduler may well run on the save's own CPU
/// first).
final class ContentHashing {
    private let file: FileWrapper

    /// For a regular-file wrapper; `nil` for other kinds. Hashes nothing yet.
    init?(_ file: FileWrapper) {
        guard file.isRegularFile else { return nil }
        self.file = file
    }

    /// The hash of the bytes as the wrapper holds them (text from its string, with no
    /// `Data` made of it), computed on first use; `nil` for a file read lazily that can no
    /// longer be read.
    lazy var value: UInt64? = try? file.withContents(StableHash.of)
}

extension Duration {
    var microseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }
}
