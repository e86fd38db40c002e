import Foundation
import Posix

/// The edit journal: an append-only sequence of checksummed records in segment files,
/// written in batches and made durable by group commit.
///
/// One thread (the caller's event loop) appends records during a pass and calls
/// ``flush()`` at the end of it: the batch goes to the current segment with one
/// `write(2)`, so it survives a crash of the process from then on. A sync thread of the
/// journal's own runs `fdatasync` for everything written so far — once per interval in
/// ``JournalOptions/SyncMode/periodic(_:)`` mode, back to back in
/// ``JournalOptions/SyncMode/always`` — while the loop goes on writing the next batches,
/// and reports each advance through `onDurable`.
///
/// The journal gives each record a 64-bit ``LSN`` and an owner (an opaque number, such as
/// a document's identity). ``release(owner:through:)`` says an owner's records are no
/// longer needed (a durable save covers them); segments whose records are all released
/// are deleted, oldest first.
///
/// Lifecycle: `init` opens (and locks) the directory, ``replay(_:)`` delivers what the
/// directory holds and starts a fresh segment and the sync thread, then
/// `append`/`flush`/`release` run, and ``close()`` syncs and stops.
///
/// `append`, `flush` and `close` belong to one thread at a time; everything else may be
/// called from any thread.
public final class Journal: Sendable {
    public let directory: String
    public let options: JournalOptions
    let directoryDescriptor: CInt
    /// Whether new segments get their space reserved (see ``preallocate(_:)``): not on a
    /// file system kept in memory, where reserving costs memory and a sync costs nothing.
    let reservesSpace: Bool
    /// Whether segments with reserved space are written through a mapping (see
    /// ``mapSegment(_:size:)``).
    let mapsSegments: Bool
    let state: Lock<JournalState>
    let wake = NSCondition()
    let onDurable: @Sendable (LSN) -> Void
    let onFailure: @Sendable (JournalFailure) -> Void

    /// The owner value the journal keeps for its own release marks.
    public static let reservedOwner = UInt64.max

    /// Opens the journal in `directory` (created, mode 0700, when missing) and takes its
    /// lock: a second journal on the same directory fails with `flock`/`EWOULDBLOCK`
    /// (after half a second of retries).
    ///
    /// - Parameters:
    ///   - directory: A directory of its own, outside any tree the caller watches.
    ///   - options: Mode, segment size, limits.
    ///   - onDurable: Called on the sync thread, outside any lock, each time records
    ///     through an LSN have become durable.
    ///   - onFailure: Called on the sync thread or in ``flush()`` when a write, sync or
    ///     file operation fails; the journal retries by writing the records not proven
    ///     durable to a new segment.
    /// - Throws: ``JournalFailure``.
    public init(
        directory: String,
        options: JournalOptions = JournalOptions(),
        onDurable: @escaping @Sendable (LSN) -> Void = { _ in },
        onFailure: @escaping @Sendable (JournalFailure) -> Void = { _ in }
    ) throws(JournalFailure) {
        self.directory = directory
        self.options = options
        self.onDurable = onDurable
        self.onFailure = onFailure
        do {
            try FileDescriptor.currentWorkingDirectory.makeDirectory(directory, permissions: .init(rawValue: 0o700))
            // The new directory's entry is durable once its parent is synced.
            let parent = PathName.parent(directory)
            let parentFD = try FileDescriptor.open(parent.isEmpty ? "." : parent, .readOnly, options: [.directory])
            try parentFD.closeAfter { () throws(Errno) in try parentFD.sync() }
        } catch Errno.fileExists {
        } catch {
            throw JournalFailure(.open, path: directory, errno: error)
        }
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(directory, .readOnly, options: [.directory])
        } catch {
            throw JournalFailure(.open, path: directory, errno: error)
        }
        // A child forked by another thread holds a copy of a descriptor until it calls
        // exec, and with it the lock: a lock that stays taken for half a second is another
        // journal's.
        var attempts = 0
        while true {
            do {
                try fd.lockExclusively()
                break
            } catch Errno.wouldBlock where attempts < 50 {
                attempts += 1
                usleep(10_000)
            } catch {
                try? fd.close()
                throw JournalFailure(.lock, path: directory, errno: error)
            }
        }
        directoryDescriptor = fd.rawValue
        let type = try? fd.fileSystemType()
        reservesSpace = type.map { !Self.memoryFileSystems.contains($0) } ?? true
        mapsSegments = options.io.mapsSegments && type.map { Self.inPlaceFileSystems.contains($0) } ?? false
        var initial = JournalState()
        initial.retryDelay = options.retryDelay
        initial.statistics.mode = options.mode.description
        state = Lock(initial)
    }

    deinit {
        let segments = state.withLock { s in s.phase == .closed ? nil : s.segments }
        guard let segments else { return }
        for var segment in segments { segment.closeFile() }
        try? FileDescriptor(rawValue: directoryDescriptor).close()
    }

    var directoryFD: FileDescriptor { FileDescriptor(rawValue: directoryDescriptor) }

    /// tmpfs and ramfs (statfs magic numbers): their files live in memory.
    static let memoryFileSystems: Set<Int64> = [0x0102_1994, 0x8584_58F6]

    /// ext4 and XFS (statfs magic numbers): a store to a block `fallocate` reserved is
    /// written in place there, so a mapping over reserved space never needs a block it
    /// could fail to get (on a copy-on-write file system such as Btrfs it could, and the
    /// store would raise SIGBUS).
    static let inPlaceFileSystems: Set<Int64> = [0xEF53, 0x5846_5342]

    /// How far past the records the sync thread faults in the mapping's pages, in
    /// `Mode=periodic` (see ``performPrepare()``).
    static let prepareAhead = 512 << 10

    func path(_ name: String) -> String { directory + "/" + name }

    // MARK: Appending

    /// Adds a record to the current batch and returns its LSN. No system call: the record
    /// reaches the file at the next ``flush()``.
    ///
    /// - Parameters:
    ///   - owner: Whose record this is (any value but ``reservedOwner``); what
    ///     ``release(owner:through:)`` and ``pinningOwners()`` speak of.
    ///   - payload: The bytes to keep, at most ``JournalOptions/maxPayloadSize``.
    /// - Throws: ``JournalRecordTooLarge``; nothing is appended then.
    @discardableResult
    public func append<Payload: Collection<UInt8>>(owner: UInt64, payload: Payload) throws(JournalRecordTooLarge)
        -> LSN
    {
        try check(owner: owner, size: payload.count)
        if let lsn = payload.withContiguousStorageIfAvailable({ append(owner, UnsafeRawBufferPointer($0)) }) {
            return lsn
        }
        return Array(payload).withUnsafeBytes { append(owner, $0) }
    }

    /// ``append(owner:payload:)`` for bytes in an array: the caller's usual case, without
    /// the generic entry point's indirection.
    @discardableResult
    public func append(owner: UInt64, payload: [UInt8]) throws(JournalRecordTooLarge) -> LSN {
        try check(owner: owner, size: payload.count)
        return payload.withUnsafeBytes { append(owner, $0) }
    }

    /// ``append(owner:payload:)`` for an owner whose ``JournalOwnerLog`` the caller keeps:
    /// the record is counted in `log` (and pins its segment when it is the owner's only
    /// unreleased one) instead of in the journal's own table of owners, which the append
    /// does not touch. Release the owner's records with ``release(owner:through:log:)``.
    @discardableResult
    public func append(owner: UInt64, payload: [UInt8], log: inout JournalOwnerLog) throws(JournalRecordTooLarge)
        -> LSN
    {
        try check(owner: owner, size: payload.count)
        return payload.withUnsafeBytes { bytes in
            state.withLock { s in
                let lsn = append(&s, owner, bytes)
                s.note(lsn, owner: owner, in: &log)
                return lsn
            }
        }
    }

    /// ``append(owner:payload:log:)`` with the payload written by `encode` straight into the
    /// batch, after the record's header: no copy of it is made first. `encode` appends at
    /// most `sizeBound` bytes to the buffer it is given (and does nothing else with it); it
    /// runs under the journal's lock.
    ///
    /// - Returns: The record's LSN and the payload's size.
    /// - Throws: ``JournalRecordTooLarge`` when `sizeBound` passes the limit; nothing is
    ///   appended then.
    @discardableResult
    public func append(owner: UInt64, log: inout JournalOwnerLog, sizeBound: Int, encode: (inout [UInt8]) -> Void)
        throws(JournalRecordTooLarge) -> (lsn: LSN, size: Int)
    {
        try check(owner: owner, size: sizeBound)
        return state.withLock { s in
            let (lsn, size) = append(&s, owner, encode: encode)
            precondition(size <= sizeBound, "an encoded payload of \(size) bytes, above its bound of \(sizeBound)")
            s.note(lsn, owner: owner, in: &log)
            return (lsn, size)
        }
    }

    /// Appends a record that no log counts yet: it is not unreleased and pins nothing until
    /// ``adopt(_:owner:into:)`` takes it into its owner's log. For a record appended where
    /// the log is out of reach (another thread), while the owner's older records keep its
    /// segment.
    @discardableResult
    public func appendUnattached(owner: UInt64, payload: [UInt8]) throws(JournalRecordTooLarge) -> LSN {
        try check(owner: owner, size: payload.count)
        return payload.withUnsafeBytes { bytes in state.withLock { s in append(&s, owner, bytes) } }
    }

    /// Counts a record appended with ``appendUnattached(owner:payload:)`` in its owner's log.
    public func adopt(_ lsn: LSN, owner: UInt64, into log: inout JournalOwnerLog) {
        state.withLock { s in s.note(lsn, owner: owner, in: &log) }
    }

    /// What every append checks first: the owner is not the journal's own, the payload not too large.
    private func check(owner: UInt64, size: Int) throws(JournalRecordTooLarge) {
        precondition(owner != Self.reservedOwner, "the owner value UInt64.max is reserved")
        guard size <= options.maxPayloadSize else {
            throw JournalRecordTooLarge(size: size, limit: options.maxPayloadSize)
        }
    }

    private func append(_ owner: UInt64, _ payload: UnsafeRawBufferPointer) -> LSN {
        state.withLock { s in
            let lsn = append(&s, owner, payload)
            s.noteOwnLog(lsn, owner: owner)
            return lsn
        }
    }

    private func append(_ s: inout JournalState, _ owner: UInt64, _ payload: UnsafeRawBufferPointer) -> LSN {
        append(&s, owner) { $0.append(contentsOf: payload) }.lsn
    }

    /// Appends a record whose payload `encode` appends to the batch; returns its LSN and
    /// the payload's size.
    @inline(__always)
    private func append(_ s: inout JournalState, _ owner: UInt64, encode: (inout [UInt8]) -> Void) -> (
        lsn: LSN, size: Int
    ) {
        precondition(s.phase == .running, "Journal.append before replay(_:) or after close()")
        let lsn = s.nextLSN
        s.nextLSN = lsn.next
        let size = SegmentFormat.appendRecord(to: &s.pending, lsn: lsn, owner: owner, encode: encode)
        if s.pendingFirst == nil { s.pendingFirst = lsn }
        return (lsn, size)
    }

    /// Writes the batch appended since the last flush to the current segment with one
    /// `write(2)` (a segment that reached ``JournalOptions/segmentSize`` is closed first and
    /// a new one started), and hands it to the sync thread.
    ///
    /// - Returns: The LSN through which records are written (in the page cache). After a
    ///   failure (reported through `onFailure`) it stops advancing until the sync thread
    ///   has written the records again to a new segment; `onDurable` says when.
    ///
    /// With `deferringSync`, a sync this batch calls for is not asked of the sync thread
    /// yet: the caller says later, through ``startDeferredSync(onCaller:ifLastSyncTookAtMost:)``,
    /// whether it syncs itself or the thread does.
    @discardableResult
    public func flush(deferringSync: Bool = false) -> LSN {
        var prepare = false
        let (written, report, signal) = state.withLock { s -> (LSN, Outcome, Bool) in
            guard s.phase == .running, let first = s.pendingFirst, !s.recovering else {
                return (s.writtenThrough, Outcome(), false)
            }
            if s.segments[s.segments.count - 1].size >= options.segmentSize {
                do throws(JournalFailure) {
                    s.segments.append(try createSegment(base: first, reusing: s.spares.popLast()))
                    if s.segments[s.segments.count - 1].staleEnd > 0 { s.statistics.segmentsRecycled += 1 }
                } catch {
                    s.statistics.writeFailures += 1
                    return (s.writtenThrough, enterRecovery(&s, error), true)
                }
            }
            let batch = Batch(bytes: s.pending, first: first, last: s.nextLSN.previous)
            s.pending = s.takeBuffer(expected: batch.bytes.count)
            s.pendingFirst = nil
            s.segments[s.segments.count - 1].attribute(batch.first...batch.last)
            let current = s.segments.count - 1
            s.unsynced.append(batch)
            s.unsyncedBytes += batch.bytes.count
            let fd = FileDescriptor(rawValue: s.segments[current].descriptor!)
            do throws(Errno) {
                let offset = s.segments[current].size
                if offset + batch.bytes.count < s.segments[current].staleEnd {
                    try markEnd(s.segments[current], fd, at: offset + batch.bytes.count, resumingAt: offset)
                }
                if let mapping = s.segments[current].mapping, !s.segments[current].pastMapping {
                    if batch.bytes.count <= mapping.length - offset {
                        let end = offset + batch.bytes.count
                        let prepared = s.segments[current].preparedThrough
                        if Self.pagesToFault(from: offset, to: end, prepared: prepared) <= 1 {
                            batch.bytes.withUnsafeBytes { mapping.store($0, at: offset) }
                            s.statistics.mappedWrites += 1
                        } else {
                            // A batch reaching over pages not prepared yet (a large edit, many
                            // clients' large values, stores outrunning the preparing while a
                            // sync runs) goes in with write(2), in place: the kernel fills each
                            // new page in one pass, where the stores would take a page fault
                            // each (256 of them for a megabyte).
                            try fd.seek(to: Int64(offset))
                            try options.io.write(fd, contentsOf: batch.bytes)
                        }
                        // Not after a batch as large as a quarter of what is prepared at a
                        // time: the next such batch would reach past it again, and the
                        // pages faulted in would only be written over with write(2) (16 KiB
                        // values at 50 clients: the preparing took a third of the daemon's
                        // time, and the rate fell to 0.67× that of write(2) alone).
                        if case .periodic = options.mode, !s.prepareWanted,
                            batch.bytes.count < Self.prepareAhead / 4,
                            end + Self.prepareAhead / 2 > s.segments[current].preparedThrough,
                            s.segments[current].preparedThrough < mapping.length
                        {
                            s.prepareWanted = true
                            prepare = s.syncThreadIdle
                        }
                    } else {
                        // Past the reserved space: the segment goes on growing with write(2),
                        // from where the mapped records end. (The mapping stays until the
                        // file is closed: the sync thread may be releasing pages of it.)
                        s.segments[current].pastMapping = true
                        try fd.seek(to: Int64(offset))
                        try options.io.write(fd, contentsOf: batch.bytes)
                    }
                } else {
                    try options.io.write(fd, contentsOf: batch.bytes)
                }
            } catch {
                s.statistics.writeFailures += 1
                let failure = JournalFailure(.write, path: path(s.segments[current].name), errno: error)
                return (s.writtenThrough, enterRecovery(&s, failure), true)
            }
            s.segments[current].size += batch.bytes.count
            s.writtenThrough = batch.last
            s.statistics.writes += 1
            s.statistics.bytesWritten += batch.bytes.count
            let wanted =
                options.mode == .always || s.syncRequested > s.durableThrough || s.syncThreadWaitsForSignal
                || s.unsyncedBytes >= options.unsyncedBytesLimit
            if wanted, deferringSync {
                s.syncDeferred = true
                return (s.writtenThrough, Outcome(), false)
            }
            return (s.writtenThrough, Outcome(), wanted && s.syncThreadIdle)
        }
        if signal || prepare { signalSyncThread() }
        report.deliver(self)
        return written
    }

    /// In a recycled segment, writes a zero record length at `end`, over the earlier
    /// segment's bytes there, before the batch that ends at `end` is written: replay
    /// stops there. Written first, so that a crash in between leaves the batch unwritten
    /// (or a prefix of it, a torn record) rather than the batch followed by stale bytes.
    func markEnd(_ segment: SegmentEntry, _ fd: FileDescriptor, at end: Int, resumingAt offset: Int) throws(Errno) {
        let count = min(4, segment.staleEnd - end)
        if let mapping = segment.mapping, !segment.pastMapping, end + count <= mapping.length {
            withUnsafeBytes(of: UInt32(0)) { mapping.store(UnsafeRawBufferPointer(rebasing: $0[..<count]), at: end) }
        } else {
            try fd.seek(to: Int64(end))
            try options.io.write(fd, contentsOf: [UInt8](repeating: 0, count: count))
            try fd.seek(to: Int64(offset))
        }
    }

    /// How many pages from `start` to `end` of a mapped segment the loop's stores would
    /// fault in: those past the one `start` is on (stored into by the batch before, unless
    /// `start` begins it) and past the pages prepared ahead (``performPrepare()``, up to
    /// `prepared`).
    static func pagesToFault(from start: Int, to end: Int, prepared: Int) -> Int {
        let page = SharedMapping.pageSize
        let first = max(prepared, start % page == 0 ? start : (start / page + 1) * page)
        return end > first ? (end - first + page - 1) / page : 0
    }

    /// Creates a segment file with its header, not yet synced: from `spare` when one is
    /// given and can be recycled, else a new file.
    func createSegment(base: LSN, reusing spare: (name: String, size: Int)? = nil) throws(JournalFailure)
        -> SegmentEntry
    {
        let name = SegmentFormat.name(base: base)
        if let spare {
            if let segment = recycle(spare, as: name, base: base) { return segment }
            try? directoryFD.unlink(spare.name)
        }
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(name, relativeTo: directoryFD, .readWrite, options: [.exclusiveCreate])
        } catch {
            throw JournalFailure(.open, path: path(name), errno: error)
        }
        let header = SegmentFormat.header(base: base)
        do {
            try options.io.write(fd, contentsOf: header)
        } catch {
            try? fd.close()
            try? directoryFD.unlink(name)
            throw JournalFailure(.write, path: path(name), errno: error)
        }
        let mapping = preallocate(fd) ? mapSegment(fd, size: options.segmentSize) : nil
        return SegmentEntry(
            base: base, name: name, descriptor: fd.rawValue, mapping: mapping, size: header.count, syncedSize: 0,
            needsDirectorySync: true)
    }

    /// Makes the file of an obsolete segment, kept under a spare name, the segment `name`:
    /// its new header (flagged recycled, a zero record length after it) written over the
    /// old one, then renamed. Its blocks are allocated and its pages most likely in the page cache still,
    /// so records stored into it take neither a block nor a zeroed page (see
    /// ``JournalOptions/recycleWithin``). The earlier records past what is written stay
    /// until written over; replay tells them by their LSNs, below the new base, and stops
    /// at the zero record length written after each batch (``SegmentEntry/staleEnd``).
    /// Should the rename reach the disk and the header not, replay finds the last segment
    /// named above the base its header gives, with no record numbered from its name on:
    /// nothing of it was synced, and it goes as a segment cut inside its header does.
    /// Returns `nil` when the file cannot be used.
    func recycle(_ spare: (name: String, size: Int), as name: String, base: LSN) -> SegmentEntry? {
        guard let fd = try? FileDescriptor.open(spare.name, relativeTo: directoryFD, .readWrite) else { return nil }
        var header = SegmentFormat.header(base: base, recycled: true)
        header.append(contentsOf: [0, 0, 0, 0])
        let size: Int
        do throws(Errno) {
            size = Int(try fd.status().size)
            guard size >= options.segmentSize else { throw Errno.invalidArgument }
            try options.io.write(fd, contentsOf: header)
            try fd.seek(to: Int64(SegmentFormat.headerSize))
            try directoryFD.rename(spare.name, to: name)
        } catch {
            try? fd.close()
            return nil
        }
        var segment = SegmentEntry(
            base: base, name: name, descriptor: fd.rawValue, mapping: mapSegment(fd, size: options.segmentSize),
            size: SegmentFormat.headerSize, syncedSize: 0, needsDirectorySync: true)
        segment.staleEnd = size
        return segment
    }

    /// Reserves the segment's space up front: its size becomes `size` (by default
    /// ``JournalOptions/segmentSize``), zeros past what is written (replay takes a record length of zero followed by nothing
    /// but zeros for the end of the records). A record then overwrites allocated space, and
    /// a sync has no size change to commit: `fdatasync` after a small write measured about
    /// 30 % faster on ext4 than in a file growing with each write. Where the file system
    /// cannot (`EOPNOTSUPP`), or has no room, the segment grows as it is written; on tmpfs
    /// nothing is reserved (it would take the whole segment's memory at once, for no
    /// faster sync). Returns whether the space is reserved.
    @discardableResult
    func preallocate(_ fd: FileDescriptor, size: Int? = nil) -> Bool {
        guard reservesSpace else { return false }
        do { try options.io.allocate(fd, Int64(size ?? options.segmentSize)) } catch { return false }
        return true
    }

    /// Maps a segment (open read-write) whose blocks are reserved up to `size`, for
    /// ``flush(deferringSync:)`` to copy batches into: what it copies is in the page cache
    /// at once, as after `write(2)` (it survives a crash of the process), without the
    /// system call, and the sync thread's `fdatasync` writes it back. `nil` where segments
    /// are not mapped (see ``inPlaceFileSystems``, ``JournalIO/mapsSegments``) or `mmap`
    /// fails: the segment is written with `write(2)`.
    func mapSegment(_ fd: FileDescriptor, size: Int) -> SharedMapping? {
        guard mapsSegments, size > 0 else { return nil }
        return try? SharedMapping(fd, length: size)
    }

    /// Stops writing to the segment at hand: every record not proven durable is to be
    /// written again to a new segment by the sync thread. Returns the failure to report,
    /// with the records it leaves undurable, and the waiters to answer with it.
    func enterRecovery(_ s: inout JournalState, _ failure: JournalFailure) -> Outcome {
        var failure = failure
        let last = max(s.writtenThrough, s.unsynced.last?.last ?? .zero)
        if last > s.durableThrough { failure.notDurable = s.durableThrough.next...last }
        s.recovering = true
        s.retryAt = .now
        s.failure = failure
        let waiters = s.waiters.map(\.handler)
        s.waiters = []
        return Outcome(failure: failure, waiters: waiters)
    }

    // MARK: Durability requests

    /// Asks for a sync as soon as records through `lsn` are written, whatever the mode.
    public func requestSync(through lsn: LSN) {
        let signal = state.withLock { s -> Bool in
            s.syncRequested = max(s.syncRequested, lsn)
            return s.syncThreadIdle && s.writtenThrough > s.durableThrough
        }
        if signal { signalSyncThread() }
    }

    /// Calls `handler` once records through `lsn` are durable (with `nil`), or when a
    /// failure leaves them undurable (with the failure; the journal goes on retrying and
    /// a later `onDurable` may still cover them). Requests an early sync.
    /// The handler runs on the sync thread, or at once on the caller's when `lsn` is
    /// already durable.
    public func whenDurable(_ lsn: LSN, _ handler: @escaping @Sendable (JournalFailure?) -> Void) {
        let now = state.withLock { s -> Bool in
            if lsn <= s.durableThrough { return true }
            s.waiters.append((lsn, handler))
            return false
        }
        if now { handler(nil) } else { requestSync(through: lsn) }
    }

    // MARK: Release

    /// Marks `owner`'s records through `lsn` obsolete (a durable save covers them). The
    /// mark itself is journalled (as a record of ``reservedOwner``), so replay never
    /// delivers released records again; the oldest segments whose records are all
    /// released are deleted by the sync thread. For records appended with
    /// ``append(owner:payload:)``; see ``JournalOwnerLog`` for which releases it counts.
    public func release(owner: UInt64, through lsn: LSN) {
        let signal = state.withLock { s -> Bool in
            guard var log = s.owners.removeValue(forKey: owner) else { return false }
            defer { if !log.isEmpty { s.owners[owner] = log } }
            return release(&s, owner: owner, through: lsn, log: &log)
        }
        if signal { signalSyncThread() }
    }

    /// ``release(owner:through:)`` for records appended with ``append(owner:payload:log:)``.
    public func release(owner: UInt64, through lsn: LSN, log: inout JournalOwnerLog) {
        let signal = state.withLock { s in release(&s, owner: owner, through: lsn, log: &log) }
        if signal { signalSyncThread() }
    }

    /// Returns whether the sync thread is to be woken (for housekeeping).
    private func release(_ s: inout JournalState, owner: UInt64, through lsn: LSN, log: inout JournalOwnerLog) -> Bool {
        guard s.release(owner: owner, through: lsn, in: &log) else { return false }
        if s.phase == .running {
            // Never past the records there are: replay takes a mark to cover only what precedes it.
            let through = min(lsn, s.nextLSN.previous)
            let (mark, _) = append(&s, Self.reservedOwner) { mark in
                mark.appendLittleEndian(owner)
                mark.appendLittleEndian(through.rawValue)
            }
            s.releasedThrough = mark
        }
        if !s.housekeeping && s.oldestIsObsolete() {
            s.housekeeping = true
            return s.syncThreadIdle
        }
        return false
    }

    /// Counts a record that replay delivered as unreleased (pinned, when it is its owner's
    /// first) until released, so the segment holding it stays. Call it from the body given
    /// to ``replay(_:)``.
    public func noteReplayed(owner: UInt64, lsn: LSN) {
        state.withLock { s in
            s.noteOwnLog(lsn, owner: owner)
            attributeReplayed(&s, lsn)
        }
    }

    /// ``noteReplayed(owner:lsn:)`` for an owner whose ``JournalOwnerLog`` the caller keeps.
    public func noteReplayed(owner: UInt64, lsn: LSN, log: inout JournalOwnerLog) {
        state.withLock { s in
            s.note(lsn, owner: owner, in: &log)
            attributeReplayed(&s, lsn)
        }
    }

    /// The segment it was read from: its name alone does not say (see SegmentEntry.records).
    private func attributeReplayed(_ s: inout JournalState, _ lsn: LSN) {
        if let i = s.replaying ?? s.segmentIndex(of: lsn) { s.segments[i].attribute(lsn...lsn) }
    }

    // MARK: Queries

    /// The owners whose unreleased records keep the oldest segment alive: saving their
    /// documents (and releasing) lets it go. Empty when the oldest segment is the current one
    /// and nothing else exists.
    public func pinningOwners() -> [UInt64] {
        state.withLock { s in
            guard !s.segments.isEmpty else { return [] }
            let boundary = s.segments.count > 1 ? s.segments[1].base : s.nextLSN
            return s.owners(before: boundary).sorted()
        }
    }

    /// The owners whose unreleased records keep the oldest segments that together hold at
    /// least `bytes` (all segments but the one being written, at most): saving their
    /// documents frees that much once the segments are deleted. In no particular order.
    public func pinningOwners(toFree bytes: Int) -> [UInt64] {
        state.withLock { s in
            // The oldest segments, up to the one being written, until they hold `bytes`:
            // the owners with a record before the first segment not taken.
            var freed = 0
            var taken = 0
            while taken < s.segments.count - 1, freed < bytes {
                freed += s.segments[taken].size
                taken += 1
            }
            guard taken > 0 else { return [] }
            return s.owners(before: s.segments[taken].base)
        }
    }

    /// The LSN of the last record appended, written or not yet (`LSN(0)` before the first).
    public var lastAppended: LSN { state.withLock { $0.nextLSN.previous } }

    public var statistics: JournalStatistics {
        state.withLock { s in
            var figures = s.statistics
            figures.bytes = s.segments.reduce(0) { $0 + $1.size }
            figures.segments = s.segments.count
            figures.unreleasedRecords = s.unreleased
            figures.lastLSN = s.nextLSN.previous
            figures.writtenThrough = s.writtenThrough
            figures.durableThrough = s.durableThrough
            figures.failure = s.failure
            figures.spareSegments = s.spares.count
            figures.memoryBytes = s.pending.capacity + s.unsynced.reduce(0) { $0 + $1.bytes.capacity } + s.spareBytes
            return figures
        }
    }

    /// The segment files, oldest first.
    public var segmentNames: [String] { state.withLock { s in s.segments.map(\.name) } }

    // MARK: Closing

    /// Flushes what was appended, waits for the sync thread to sync it (one attempt at
    /// recovery when a failure is pending), stops the thread, closes the files and
    /// releases the directory's lock. Nothing may be appended afterwards.
    ///
    /// With `removingSegments` (a run that replayed the journal, saved every document it
    /// held, and goes on without a journal), every segment file is unlinked and the
    /// directory synced before the lock is released — another daemon taking the directory
    /// never finds it half emptied — but only when everything appended is durable. The
    /// label stays. A removal that fails (the segments that are left hold only released
    /// records) is given to `notRemoved`.
    ///
    /// - Returns: The failure that left records undurable, or `nil` when everything
    ///   appended is durable.
    @discardableResult
    public func close(removingSegments: Bool = false, notRemoved: (JournalFailure) -> Void = { _ in })
        -> JournalFailure?
    {
        let running = state.withLock { s in s.phase == .running }
        if running {
            flush()
            state.withLock { s in s.closing = true }
            signalSyncThread()
            wake.lock()
            while !state.withLock({ s in s.threadExited }) { wake.wait() }
            wake.unlock()
        }
        var removal: JournalFailure?
        defer { if let removal { notRemoved(removal) } }
        return state.withLock { s -> JournalFailure? in
            if s.phase != .closed {
                for i in s.segments.indices {
                    // A clean close leaves no reserved space behind: the file ends with its last record.
                    if let fd = s.segments[i].descriptor {
                        try? FileDescriptor(rawValue: fd).truncate(to: Int64(s.segments[i].size))
                    }
                    s.segments[i].closeFile()
                }
                // Spare segments are kept for this run's next segments only.
                for spare in s.spares { try? directoryFD.unlink(spare.name) }
                s.spares = []
                if removingSegments, s.durableThrough >= s.nextLSN.previous {
                    do throws(JournalFailure) { try removeSegmentFiles() } catch { removal = error }
                }
                try? FileDescriptor(rawValue: directoryDescriptor).close()
                s.phase = .closed
            }
            if s.durableThrough >= s.nextLSN.previous { return nil }
            return s.failure
                ?? JournalFailure(
                    .fdatasync, path: directory, errno: .ioError,
                    notDurable: s.durableThrough.next...s.nextLSN.previous)
        }
    }

    /// What a step under the lock leaves to report once the lock is released.
    struct Outcome {
        var durable: LSN?
        var failure: JournalFailure?
        var waiters: [@Sendable (JournalFailure?) -> Void] = []

        func deliver(_ journal: Journal) {
            if let durable { journal.onDurable(durable) }
            if let failure { journal.onFailure(failure) }
            for waiter in waiters { waiter(failure) }
        }
    }

    /// Wakes the sync thread. `wake` is taken and released first, so that a thread deciding
    /// to wait (it decides holding `wake`) is either waiting already or will see what changed;
    /// the broadcast comes after the release, so the woken thread does not wake only to
    /// block on a lock still held and be woken once more.
    func signalSyncThread() {
        wake.lock()
        wake.unlock()
        wake.broadcast()
    }
}
