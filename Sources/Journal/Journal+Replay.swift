import Posix
import Synchronization

/// Replay at open: read every segment in order, deliver the valid records that are not
/// released, cut a torn tail, report what is wrong, then start appending.
extension Journal {
    /// The longest record length replay accepts; anything longer is damage.
    static let maxRecordLength = 1 << 30

    /// What the first pass learned about one segment file.
    private struct Scan {
        var name: String
        var base: LSN
        var size: Int
        var header: JournalProblem.HeaderDefect?
        /// Records from offset 32 up to here are valid, numbered `base`…`last`.
        var validEnd = SegmentFormat.headerSize
        var last: LSN
        var records = 0
        /// The last segment stops inside its header: created, then the crash came.
        var tornHeader = false
        /// The first bad record, when the segment does not end cleanly.
        var defect: (offset: Int, defect: JournalProblem.RecordDefect)?
        /// Bytes after the records' end (a zero record length): space reserved when the
        /// segment was made (see ``Journal/preallocate(_:)``), zeros, or in a recycled
        /// segment an earlier segment's records (`stale`); not counted in `size`.
        var reserved = 0
        var stale = false
        /// With `stale`: valid records numbered after `last` past the zero length (damage).
        var beyondStale: [(offset: Int, lsn: LSN, owner: UInt64)] = []
        /// A header of zeros or of a segment numbered below the name, and no record
        /// numbered from the name on: a recycled file whose new header never reached the
        /// disk (see ``Journal/recycle(_:as:base:)``).
        var headerNeverWritten = false
    }

    /// Delivers every valid, unreleased record in LSN order, then opens a fresh segment and
    /// starts the sync thread. Call it once, before the first ``append(owner:payload:)``.
    ///
    /// - A torn tail of the last segment (a partial or checksum-failing record with nothing
    ///   valid after it) is cut off with `ftruncate` + `fsync` and reported.
    /// - A bad record with valid-looking records after it, or in a segment that is not the
    ///   last, stops that segment: nothing after it in the segment is delivered.
    /// - A segment with a bad header is not read; a gap in the LSNs is reported.
    ///
    /// - Parameter body: Called with each record, on the caller's thread; it may call
    ///   ``noteReplayed(owner:lsn:)`` to keep the record until released. An error it
    ///   throws ends replay and is rethrown; the journal is not started then.
    /// - Returns: What was delivered and what was wrong.
    /// - Throws: ``JournalFailure`` for a directory, read, truncate or start failure, or
    ///   what `body` throws.
    @discardableResult
    public func replay(_ body: (JournalRecord) throws -> Void) throws -> JournalReplayReport {
        let started = ContinuousClock.now
        precondition(state.withLock { s in s.phase == .opened }, "Journal.replay(_:) runs once, before appending")
        var report = JournalReplayReport()
        var scans = try listSegments()
        var released: [UInt64: LSN] = [:]
        var highest = LSN.zero
        for i in scans.indices {
            try scan(&scans[i], isLast: i == scans.count - 1, released: &released)
            highest = max(highest, scans[i].last)
            report.segments += 1
            report.bytes += scans[i].size
        }
        try classify(&scans, report: &report, highest: &highest)
        // What was read may be in the page cache only: a process killed (not the machine)
        // leaves its unsynced writes there, and this start reads them as if they were on
        // disk. They are synced before anything built on them (a replayed document, an edit
        // acknowledged as durable after it) counts as durable; a failure is the start's.
        for scan in scans where scan.size > 0 {
            do throws(Errno) {
                let file = try FileDescriptor.open(scan.name, relativeTo: directoryFD, .readOnly)
                try file.closeAfter { () throws(Errno) in try file.dataSync() }
            } catch .noSuchFile {
                continue
            } catch {
                throw JournalFailure(.fdatasync, path: directory + "/" + scan.name, errno: error)
            }
        }

        state.withLock { s in
            s.segments = scans.map { scan in
                SegmentEntry(
                    base: scan.base, name: scan.name, descriptor: nil, size: scan.size, syncedSize: scan.size,
                    needsDirectorySync: false, damaged: scan.header != nil || scan.defect != nil)
            }
        }

        var walked = LSN.zero
        for (index, scan) in scans.enumerated()
        where scan.header == nil && !scan.tornHeader && scan.validEnd > SegmentFormat.headerSize {
            // What the body keeps (noteReplayed) belongs to this segment, whatever the others' names say.
            state.withLock { $0.replaying = index }
            let bytes = try readSegment(scan.name, upTo: scan.validEnd)
            var offset = SegmentFormat.headerSize
            while offset < scan.validEnd {
                let (length, lsn, owner) = bytes.withUnsafeBytes { b in
                    (
                        Int(b.loadLittleEndianUInt32(at: offset)), LSN(b.loadLittleEndianUInt64(at: offset + 8)),
                        b.loadLittleEndianUInt64(at: offset + 16)
                    )
                }
                let end = offset + SegmentFormat.recordHeaderSize + length
                defer { offset = end }
                guard lsn > walked else { continue }
                walked = lsn
                if owner == Self.reservedOwner { continue }
                if let through = released[owner], lsn <= through { continue }
                let payload = bytes[(offset + SegmentFormat.recordOverhead)..<end]
                try body(JournalRecord(lsn: lsn, owner: owner, payload: payload))
                report.records += 1
                if report.firstLSN == nil { report.firstLSN = lsn }
                report.lastLSN = lsn
            }
        }

        state.withLock { s in
            s.replaying = nil
        }
        try start(after: highest, scans: scans)
        report.duration = ContinuousClock.now - started
        return report
    }

    /// The segment files, by base LSN; leftovers of an interrupted rewrite are removed.
    private func listSegments() throws(JournalFailure) -> [Scan] {
        let entries: [DirectoryEntry]
        do { entries = try directoryFD.directoryEntries() } catch {
            throw JournalFailure(.list, path: directory, errno: error)
        }
        var scans: [Scan] = []
        for entry in entries {
            if entry.name.hasPrefix("."), entry.name.hasSuffix(SegmentFormat.suffix + ".tmp") {
                try? directoryFD.unlink(entry.name)
                continue
            }
            // An obsolete segment kept for reuse by the last run.
            if entry.name.hasPrefix(SegmentFormat.sparePrefix), entry.name.hasSuffix(SegmentFormat.suffix) {
                try? directoryFD.unlink(entry.name)
                continue
            }
            guard let base = SegmentFormat.base(ofName: entry.name) else { continue }
            scans.append(Scan(name: entry.name, base: base, size: 0, last: base.previous))
        }
        return scans.sorted { $0.base < $1.base }
    }

    private func readSegment(_ name: String, upTo limit: Int? = nil) throws(JournalFailure) -> [UInt8] {
        do {
            let fd = try FileDescriptor.open(name, relativeTo: directoryFD, .readOnly)
            return try fd.closeAfter { () throws(Errno) -> [UInt8] in
                let size: Int
                if let limit { size = limit } else { size = Int(try fd.status().size) }
                // Read into uninitialised memory: the read fills it (no pass of zeros first).
                var failure: Errno?
                let bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
                    let raw = UnsafeMutableRawBufferPointer(buffer)
                    var filled = 0
                    while filled < size {
                        do throws(Errno) {
                            let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: raw[filled...]))
                            if n == 0 { break }
                            filled += n
                        } catch {
                            failure = error
                            break
                        }
                    }
                    initialized = filled
                }
                if let failure { throw failure }
                return bytes
            }
        } catch {
            throw JournalFailure(.read, path: path(name), errno: error)
        }
    }

    /// Validates one segment: its header, then record after record until the first bad one.
    private func scan(_ scan: inout Scan, isLast: Bool, released: inout [UInt64: LSN]) throws(JournalFailure) {
        let bytes = try readSegment(scan.name)
        scan.size = bytes.count
        bytes.withUnsafeBytes { b in
            if let defect = SegmentFormat.checkHeader(b, expectedBase: scan.base) {
                scan.header = defect
                if defect == .zeros, Self.onlyZeros(b) { scan.reserved = b.count }
                switch defect {
                case .zeros, .baseMismatch(..<scan.base):
                    scan.headerNeverWritten =
                        Self.recordsBeyond(in: b, from: SegmentFormat.headerSize - 1, after: scan.base.previous).isEmpty
                default: break
                }
                return
            }
            var offset = SegmentFormat.headerSize
            var expected = scan.base
            let recycled = SegmentFormat.isRecycled(b)
            while offset < b.count {
                let rest = UnsafeRawBufferPointer(rebasing: b[offset...])
                if b[offset] == 0, Self.onlyZeros(rest) {
                    // The segment's reserved space: the records end here.
                    scan.reserved = b.count - offset
                    scan.size = offset
                    break
                }
                if recycled, rest.count >= 4, rest.loadLittleEndianUInt32(at: 0) == 0 {
                    // A recycled segment's zero record length: the records end here; past it
                    // lie the earlier records of the file (see SegmentFormat).
                    scan.reserved = b.count - offset
                    scan.size = offset
                    scan.stale = true
                    scan.beyondStale = Self.recordsBeyond(in: b, from: offset, after: expected.previous)
                    break
                }
                if let defect = Self.checkRecord(b, at: offset, expected: expected) {
                    scan.defect = (offset, defect)
                    break
                }
                let length = Int(b.loadLittleEndianUInt32(at: offset))
                if b.loadLittleEndianUInt64(at: offset + 16) == Self.reservedOwner, length == 32 {
                    let owner = b.loadLittleEndianUInt64(at: offset + 24)
                    // A mark covers only records written before it: one naming an LSN
                    // past its own (damaged, or forged) would release records of a later run.
                    let through = min(LSN(b.loadLittleEndianUInt64(at: offset + 32)), expected.previous)
                    released[owner] = max(released[owner] ?? .zero, through)
                }
                scan.last = expected
                scan.records += 1
                expected = expected.next
                offset += SegmentFormat.recordHeaderSize + length
            }
            scan.validEnd = offset
        }
    }

    /// Whether every byte is zero: eight at a time, then the rest one by one.
    static func onlyZeros(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        while index + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) != 0 { return false }
            index += 8
        }
        while index < bytes.count {
            if bytes[index] != 0 { return false }
            index += 1
        }
        return true
    }

    /// Why the record at `offset` is not the valid record numbered `expected`, or `nil`.
    @inline(__always)
    static func checkRecord(_ b: UnsafeRawBufferPointer, at offset: Int, expected: LSN?) -> JournalProblem.RecordDefect?
    {
        guard b.count - offset >= SegmentFormat.recordHeaderSize else { return .truncated }
        let length = Int(b.loadLittleEndianUInt32(at: offset))
        guard length >= SegmentFormat.recordFixedSize, length <= maxRecordLength else {
            return .badLength(UInt32(length))
        }
        guard offset + SegmentFormat.recordHeaderSize + length <= b.count else { return .truncated }
        if let expected {
            // The LSN is checked before the checksum only when its bytes are plausible.
            let lsn = LSN(b.loadLittleEndianUInt64(at: offset + 8))
            if lsn != expected {
                if SegmentFormat.recordChecksum(b, at: offset, length: length)
                    != b.loadLittleEndianUInt32(at: offset + 4)
                {
                    return .checksumMismatch
                }
                return .unexpectedLSN(expected: expected, found: lsn)
            }
        }
        if SegmentFormat.recordChecksum(b, at: offset, length: length) != b.loadLittleEndianUInt32(at: offset + 4) {
            return .checksumMismatch
        }
        return nil
    }

    /// The valid-looking records after `offset` (numbered above `after`), resynchronising
    /// byte by byte: what lies beyond a bad record.
    private func recordsBeyond(_ name: String, from offset: Int, after: LSN) throws(JournalFailure) -> [(
        offset: Int, lsn: LSN, owner: UInt64
    )] {
        try readSegment(name).withUnsafeBytes { b in Self.recordsBeyond(in: b, from: offset, after: after) }
    }

    /// ``recordsBeyond(_:from:after:)`` in a segment's bytes.
    static func recordsBeyond(in b: UnsafeRawBufferPointer, from offset: Int, after: LSN) -> [(
        offset: Int, lsn: LSN, owner: UInt64
    )] {
        var found: [(offset: Int, lsn: LSN, owner: UInt64)] = []
        var q = offset + 1
        let limit = UInt64(b.count / SegmentFormat.recordOverhead + 1)
        while q + SegmentFormat.recordOverhead <= b.count {
            let length = Int(b.loadLittleEndianUInt32(at: q))
            let lsn = b.loadLittleEndianUInt64(at: q + 8)
            if length >= SegmentFormat.recordFixedSize, q + SegmentFormat.recordHeaderSize + length <= b.count,
                lsn > after.rawValue, lsn - after.rawValue <= limit,
                Self.checkRecord(b, at: q, expected: nil) == nil
            {
                found.append((q, LSN(lsn), b.loadLittleEndianUInt64(at: q + 16)))
                q += SegmentFormat.recordHeaderSize + length
            } else {
                q += 1
            }
        }
        return found
    }

    /// Turns each segment's scan into problems: cuts a torn tail, tells a damaged middle
    /// from a superseded tail, finds gaps.
    private func classify(_ scans: inout [Scan], report: inout JournalReplayReport, highest: inout LSN) throws {
        var expectedNext: LSN?
        for i in scans.indices {
            let isLast = i == scans.count - 1
            if let defect = scans[i].header {
                if isLast,
                    defect == .tooShort
                        || (defect == .zeros
                            && (scans[i].size < SegmentFormat.headerSize || scans[i].reserved == scans[i].size))
                        || scans[i].headerNeverWritten
                {
                    // Created, then the crash came before its header was written (a segment
                    // whose space was reserved is all zeros then, a recycled one still has
                    // the header it had before): nothing in it was ever synced.
                    if scans[i].size > 0 {
                        report.problems.append(
                            JournalProblem(
                                kind: .tornTail(bytesDropped: scans[i].size), segment: scans[i].name, offset: 0))
                    }
                    scans[i].header = nil
                    scans[i].tornHeader = true
                    continue
                }
                report.problems.append(JournalProblem(kind: .badHeader(defect), segment: scans[i].name, offset: 0))
                highest = max(highest, scans[i].base)
                continue
            }
            if let expected = expectedNext, scans[i].base > expected {
                report.problems.append(
                    JournalProblem(
                        kind: .missingRecords(expected...scans[i].base.previous), segment: scans[i].name, offset: 0))
            }
            if scans[i].stale, scans[i].defect == nil {
                // A zero record length with an earlier segment's records after it: the end,
                // unless records of this segment, numbered after its last good one, follow.
                let offset = scans[i].size
                let beyond = scans[i].beyondStale
                if !beyond.isEmpty {
                    highest = max(highest, beyond.last?.lsn ?? .zero)
                    let owners = Set(beyond.map(\.owner)).subtracting([Self.reservedOwner]).sorted()
                    scans[i].defect = (offset, .badLength(0))
                    // Kept whole for inspection: what lies past the zero is not cut off.
                    scans[i].reserved = 0
                    report.problems.append(
                        JournalProblem(
                            kind: .badRecord(.badLength(0), skippedOwners: owners), segment: scans[i].name,
                            offset: offset))
                    expectedNext = nil
                    continue
                }
            }
            if let (offset, defect) = scans[i].defect {
                let beyond = try recordsBeyond(scans[i].name, from: offset, after: scans[i].last)
                highest = max(highest, beyond.last?.lsn ?? .zero)
                let bytes = scans[i].size - offset
                let nextBase = scans[(i + 1)...].first(where: { $0.header == nil })?.base
                if isLast && beyond.isEmpty {
                    try cutTail(scans[i].name, at: offset)
                    report.problems.append(
                        JournalProblem(kind: .tornTail(bytesDropped: bytes), segment: scans[i].name, offset: offset))
                    scans[i].size = offset
                    scans[i].defect = nil
                } else if !isLast, let nextBase, nextBase <= scans[i].last.next {
                    report.problems.append(
                        JournalProblem(kind: .supersededTail(bytes: bytes), segment: scans[i].name, offset: offset))
                    scans[i].defect = nil
                } else {
                    let owners = Set(beyond.map(\.owner)).subtracting([Self.reservedOwner]).sorted()
                    report.problems.append(
                        JournalProblem(
                            kind: .badRecord(defect, skippedOwners: owners), segment: scans[i].name, offset: offset))
                    // Its undelivered rest is reported here, not again as a gap.
                    expectedNext = nil
                    continue
                }
            }
            expectedNext = max(expectedNext ?? .zero, scans[i].last.next)
        }
    }

    private func cutTail(_ name: String, at offset: Int) throws(JournalFailure) {
        do {
            let fd = try FileDescriptor.open(name, relativeTo: directoryFD, .writeOnly)
            try fd.closeAfter { () throws(Errno) in
                try fd.truncate(to: Int64(offset))
                try fd.sync()
            }
        } catch {
            throw JournalFailure(.truncate, path: path(name), errno: error)
        }
    }

    /// Opens the segment new records go to — the last one again when it holds nothing
    /// but its header, else a new one after every LSN seen — syncs it, deletes what is not
    /// pinned, and starts the sync thread.
    private func start(after highest: LSN, scans: [Scan]) throws(JournalFailure) {
        var scans = scans
        if let last = scans.last, last.tornHeader {
            try? directoryFD.unlink(last.name)
            scans.removeLast()
        }
        var next = max(highest.next, scans.last?.base.next ?? LSN(1))
        // Only a segment that some file forged or damaged numbers this high: a new segment
        // named above the limit would not be read back, so the journal does not start.
        guard next <= SegmentFormat.maximumBase else {
            throw JournalFailure(.open, path: directory, errno: .valueTooLarge)
        }
        var current: SegmentEntry
        if let last = scans.last, last.header == nil, last.records == 0, last.defect == nil,
            last.size == SegmentFormat.headerSize, last.base >= highest.next
        {
            // The segment the last run started and never wrote to: go on in it, right
            // after its header (its reserved zeros, if any, are written over).
            next = last.base
            let fd: FileDescriptor
            do {
                fd = try FileDescriptor.open(last.name, relativeTo: directoryFD, .readWrite)
            } catch {
                throw JournalFailure(.open, path: path(last.name), errno: error)
            }
            do throws(Errno) {
                try fd.seek(to: Int64(last.size))
            } catch {
                try? fd.close()
                throw JournalFailure(.open, path: path(last.name), errno: error)
            }
            // Its zeros are reserved again (a crash may have left some of them holes).
            let reserved = last.reserved > 0 ? last.size + last.reserved : options.segmentSize
            current = SegmentEntry(
                base: last.base, name: last.name, descriptor: fd.rawValue,
                mapping: preallocate(fd, size: reserved) ? mapSegment(fd, size: reserved) : nil,
                size: last.size, syncedSize: 0, needsDirectorySync: true)
            if last.stale { current.staleEnd = last.size + last.reserved }
        } else {
            current = try createSegment(base: next)
        }
        let fd = FileDescriptor(rawValue: current.descriptor!)
        do { try options.io.dataSync(fd) } catch {
            current.closeFile()
            throw JournalFailure(.fdatasync, path: path(current.name), errno: error)
        }
        do { try directoryFD.sync() } catch {
            current.closeFile()
            throw JournalFailure(.fsyncDirectory, path: directory, errno: error)
        }
        current.syncedSize = current.size
        current.needsDirectorySync = false
        // The space a crash left reserved in segments no longer written to goes back:
        // otherwise every restart while records stay pinned would keep a segment's size.
        for scan in scans
        where scan.reserved > 0 && scan.header == nil && scan.defect == nil && scan.name != current.name {
            guard let file = try? FileDescriptor.open(scan.name, relativeTo: directoryFD, .writeOnly) else { continue }
            try? file.truncate(to: Int64(scan.size))
            try? file.close()
        }
        state.withLock { s in
            s.segments.removeAll { $0.base == current.base }
            s.segments.append(current)
            s.nextLSN = next
            s.writtenThrough = next.previous
            s.durableThrough = next.previous
            s.phase = .running
            s.lastSyncMark = .now
            s.housekeeping = s.oldestIsObsolete()
        }
        performHousekeeping()
        startSyncThread()
    }
}
