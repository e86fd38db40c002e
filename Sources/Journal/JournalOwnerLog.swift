/// What the journal needs to know of one owner's unreleased records: the oldest (it keeps
/// its segment, and every later one, from being deleted), the last, and how many.
///
/// The caller keeps it beside the owner's own state (the engine keeps it in the document's
/// entry) and passes it to ``Journal/append(owner:payload:log:)`` and
/// ``Journal/release(owner:through:log:)``: an append then changes a few fields of memory
/// the caller is touching anyway, and looks nothing up in a table of the journal's. The
/// journal's own table of owners serves only ``Journal/append(owner:payload:)`` and the
/// other calls without a log.
///
/// A release through the last record releases them all. A release through fewer is exact
/// when it is through the LSN the log had at its last ``checkpoint()`` (a save starts: its
/// release will be through what it covers); through any other LSN it still writes the
/// mark (replay never delivers the released records again), but the log keeps counting
/// every record and keeps its oldest pinned, until a later release covers them.
public struct JournalOwnerLog: Sendable, Equatable {
    // Six words, no optionals (LSN zero is "none"): it lives in each of the caller's
    // entries, among the fields an edit reads.
    private var oldest = LSN.zero
    /// The newest record.
    public internal(set) var last = LSN.zero
    /// Unreleased records.
    public internal(set) var count = 0
    /// What the log held at its last ``checkpoint()`` (`through` zero: no checkpoint), and
    /// the first record counted since.
    private var checkpointThrough = LSN.zero
    private var checkpointCount = 0
    private var checkpointNext = LSN.zero

    public init() {}

    /// The oldest unreleased record: the journal keeps the segment holding it.
    public internal(set) var first: LSN? {
        get { oldest == .zero ? nil : oldest }
        set { oldest = newValue ?? .zero }
    }

    /// Whether the owner has no unreleased record.
    public var isEmpty: Bool { count == 0 }

    /// Remembers what the log holds now, so that a release through its last record, while
    /// later ones are appended, releases exactly those.
    public mutating func checkpoint() {
        checkpointThrough = last
        checkpointCount = count
        checkpointNext = .zero
    }

    mutating func clearCheckpoint() { checkpointThrough = .zero }

    /// Counts a record of the owner's (appended or replayed); returns whether it is the
    /// oldest now, and pins.
    mutating func note(_ lsn: LSN) -> Bool {
        count += 1
        if lsn > last { last = lsn }
        if checkpointThrough != .zero, lsn > checkpointThrough, checkpointNext == .zero || lsn < checkpointNext {
            checkpointNext = lsn
        }
        guard oldest == .zero else { return false }
        oldest = lsn
        return true
    }

    /// What a release through `lsn` leaves: the records it releases, and the oldest record
    /// left (`nil`: none), or `nil` when it releases nothing.
    func afterRelease(through lsn: LSN) -> (released: Int, first: LSN?)? {
        guard oldest != .zero, lsn >= oldest else { return nil }
        if lsn >= last { return (count, nil) }
        if checkpointThrough != .zero, checkpointThrough == lsn, checkpointNext != .zero {
            return (checkpointCount, checkpointNext)
        }
        // Not a release the log can count: the records stay counted, the oldest pinned.
        return (0, oldest)
    }
}
