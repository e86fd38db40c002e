/// Figures for `status` and metrics.
public struct JournalStatistics: Sendable, Hashable {
    public var mode = ""
    /// Bytes in the segment files.
    public var bytes = 0
    public var segments = 0
    /// Appended records that ``Journal/release(owner:through:)`` has not released yet.
    public var unreleasedRecords = 0
    /// The last LSN handed out.
    public var lastLSN = LSN.zero
    /// Records through this LSN are in the page cache (they survive the daemon's crash).
    public var writtenThrough = LSN.zero
    /// Records through this LSN are on the storage device (they survive a power loss).
    public var durableThrough = LSN.zero
    /// Batches written, with `write(2)` or (``mappedWrites`` of them) copied into a
    /// segment's mapped reserved space.
    public var writes = 0
    public var mappedWrites = 0
    /// Bytes of mapped segments the sync thread faulted in ahead of the records.
    public var preparedBytes = 0
    public var bytesWritten = 0
    public var syncs = 0
    public var syncFailures = 0
    public var writeFailures = 0
    /// Times the records not proven durable were written again to a new segment.
    public var rewrites = 0
    public var segmentsDeleted = 0
    /// Obsolete segments kept to be reused (``JournalOptions/recycleWithin``): how many
    /// are waiting, and how many new segments were made from one.
    public var spareSegments = 0
    public var segmentsRecycled = 0
    /// Memory the journal holds for its records: the batch being appended, the batches
    /// written and waiting for a sync (kept to be written again should it fail), and
    /// synced batches' buffers kept for the next ones (at most
    /// ``JournalOptions/unsyncedBytesLimit`` of each).
    public var memoryBytes = 0
    public var lastSync: ContinuousClock.Instant?
    public var lastSyncDuration: Duration?
    /// The failure the journal has not recovered from yet.
    public var failure: JournalFailure?

    public init() {}
}
