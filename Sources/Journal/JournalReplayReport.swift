/// One record as replay delivers it.
public struct JournalRecord: Sendable {
    public var lsn: LSN
    /// The owner given to ``Journal/append(owner:payload:)``; the journal does not interpret it.
    public var owner: UInt64
    /// The payload: a slice of the segment as read, so its indices start at `startIndex`,
    /// not 0. Copy it (`Array(payload)`) to keep it: the slice keeps the whole segment's
    /// buffer alive.
    public var payload: ArraySlice<UInt8>
}

/// Something replay found wrong (or worth saying) in the journal directory.
public struct JournalProblem: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// The last segment ended in a partial or checksum-failing record with nothing
        /// valid after it: the bytes from `offset` on were cut off (`ftruncate` + `fsync`)
        /// and never delivered. What a crash in the middle of a write leaves.
        case tornTail(bytesDropped: Int)
        /// A damaged record with more after it (or in a segment that is not the last):
        /// replay of this segment stopped at `offset` and delivered nothing after it.
        /// `skippedOwners` lists the owners of the valid-looking records found beyond the
        /// damage, so the caller can say which documents are affected.
        case badRecord(RecordDefect, skippedOwners: [UInt64])
        /// The segment's header is unreadable; none of its records were delivered. The
        /// file is set aside as `<name>.damaged` once nothing replayed from it is pinned.
        case badHeader(HeaderDefect)
        /// Records between two segments are missing (a deleted or lost segment, or a
        /// damaged segment's undelivered rest). `segment` names the segment after the gap.
        case missingRecords(ClosedRange<LSN>)
        /// A segment's tail was damaged, but the records it held were written again in the
        /// next segment (after a failed write or sync): nothing is missing.
        case supersededTail(bytes: Int)
    }

    /// Why a record was refused.
    public enum RecordDefect: Sendable, Hashable, CustomStringConvertible {
        /// Fewer bytes than the record header or the length announce.
        case truncated
        case badLength(UInt32)
        case checksumMismatch
        case unexpectedLSN(expected: LSN, found: LSN)

        public var description: String {
            switch self {
            case .truncated: "record cut short"
            case .badLength(let n): "impossible record length \(n)"
            case .checksumMismatch: "checksum mismatch"
            case .unexpectedLSN(let expected, let found): "record numbered \(found) where \(expected) was due"
            }
        }
    }

    public enum HeaderDefect: Sendable, Hashable, CustomStringConvertible {
        case tooShort
        case zeros
        case badMagic
        case unsupportedVersion(UInt32)
        case checksumMismatch
        case baseMismatch(LSN)

        public var description: String {
            switch self {
            case .tooShort: "shorter than a segment header"
            case .zeros: "all zeros"
            case .badMagic: "not a journal segment (bad magic)"
            case .unsupportedVersion(let v): "unsupported format version \(v)"
            case .checksumMismatch: "header checksum mismatch"
            case .baseMismatch(let base): "header names base LSN \(base), unlike its file name"
            }
        }
    }

    public var kind: Kind
    /// The segment's file name.
    public var segment: String
    /// The byte offset in the segment where the problem starts.
    public var offset: Int

    public init(kind: Kind, segment: String, offset: Int) {
        self.kind = kind
        self.segment = segment
        self.offset = offset
    }

    /// Whether acknowledged data may be missing or unreadable (everything but a superseded
    /// tail; a torn tail is expected after a crash but still means records were lost).
    public var isDamage: Bool {
        if case .supersededTail = kind { return false }
        return true
    }

    public var description: String {
        switch kind {
        case .tornTail(let bytes):
            return "\(segment): torn tail at offset \(offset), \(bytes) bytes cut off"
        case .badRecord(let defect, let owners):
            let affected =
                owners.isEmpty ? "" : "; owners of skipped records: \(owners.map(String.init).joined(separator: ", "))"
            return "\(segment): bad record at offset \(offset) (\(defect)), rest of segment not replayed\(affected)"
        case .badHeader(let defect):
            return "\(segment): bad header (\(defect)), segment not replayed"
        case .missingRecords(let range):
            return "\(segment): records \(range.lowerBound)…\(range.upperBound) missing before this segment"
        case .supersededTail(let bytes):
            return "\(segment): \(bytes) bytes at offset \(offset) superseded by the next segment"
        }
    }
}

/// What replay found: a value to log and to show in `status`.
public struct JournalReplayReport: Sendable, Hashable, CustomStringConvertible {
    /// Segment files read.
    public var segments = 0
    /// Records delivered.
    public var records = 0
    /// Bytes read.
    public var bytes = 0
    public var firstLSN: LSN?
    public var lastLSN: LSN?
    public var duration: Duration = .zero
    public var problems: [JournalProblem] = []

    /// No problem that may have lost records.
    public var isClean: Bool { !problems.contains(where: \.isDamage) }

    public var description: String {
        let ms = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        var text = "replayed \(records) records from \(segments) segments in \(Int(ms.rounded())) ms"
        if let first = firstLSN, let last = lastLSN { text += " (LSN \(first)…\(last))" }
        for problem in problems { text += "; " + problem.description }
        return text
    }
}
