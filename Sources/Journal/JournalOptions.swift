import Posix

/// How a journal syncs, rolls and reaches the disk.
public struct JournalOptions: Sendable {
    /// When written records are made durable with `fdatasync`.
    public enum SyncMode: Sendable, Hashable, CustomStringConvertible {
        /// Sync what has been written once per interval (and early when asked through
        /// ``Journal/requestSync(through:)`` or ``Journal/whenDurable(_:_:)``, or once
        /// ``JournalOptions/unsyncedBytesLimit`` bytes wait for a sync).
        case periodic(Duration)
        /// Sync as soon as anything has been written: group commits back to back, each
        /// covering every batch written while the previous sync ran.
        case always

        public var description: String {
            switch self {
            case .periodic: "periodic"
            case .always: "always"
            }
        }
    }

    public var mode: SyncMode
    /// A segment that has reached this many bytes is closed and the next batch starts a new one.
    public var segmentSize: Int
    /// The largest payload ``Journal/append(owner:payload:)`` takes; replay treats a longer
    /// record length as damage.
    public var maxPayloadSize: Int
    /// In `periodic` mode, a sync starts before its interval is over once this many bytes
    /// of records have been written since the last one. Records not proven durable are
    /// kept in memory (to be written again elsewhere if the sync fails): this bounds that
    /// memory under a heavy load, and the buffers are reused rather than new memory
    /// touched page by page.
    public var unsyncedBytesLimit: Int
    /// A segment whose records are all obsolete is not deleted but kept, under a spare name,
    /// and made the next segment (see ``Journal/recycle(_:as:base:)``): two at any time, and
    /// more while the live segments' records and the spares take at most this many bytes
    /// (after the saves that free many segments at once, most of the next segments are
    /// then recycled ones); 0 deletes each at once.
    /// A recycled file's blocks are allocated and its pages most likely still in the page
    /// cache: records stored into it find their pages there, where a new segment's pages are
    /// allocated and zeroed one by one, and its blocks' state changed as they are written.
    public var recycleWithin: Int
    /// The wait before the first retry after a failed write or sync; it doubles up to
    /// `maxRetryDelay` while the failures go on.
    public var retryDelay: Duration
    public var maxRetryDelay: Duration
    /// The calls through which records reach the disk; tests replace them to inject failures.
    public var io: JournalIO

    public init(
        mode: SyncMode = .periodic(.seconds(1)),
        segmentSize: Int = 16 << 20,
        maxPayloadSize: Int = 16 << 20,
        unsyncedBytesLimit: Int = 8 << 20,
        recycleWithin: Int = 256 << 20,
        retryDelay: Duration = .milliseconds(100),
        maxRetryDelay: Duration = .seconds(5),
        io: JournalIO = .system
    ) {
        self.mode = mode
        self.segmentSize = segmentSize
        self.maxPayloadSize = maxPayloadSize
        self.unsyncedBytesLimit = unsyncedBytesLimit
        self.recycleWithin = recycleWithin
        self.retryDelay = retryDelay
        self.maxRetryDelay = maxRetryDelay
        self.io = io
    }
}

/// The calls that put records on the disk: `write(2)` of a batch, `fdatasync(2)` of a
/// segment, and `fallocate(2)` of a new segment's space. Everything else (open, rename,
/// directory fsync) goes straight to Posix.
public struct JournalIO: Sendable {
    public var write: @Sendable (FileDescriptor, UnsafeRawBufferPointer) throws(Errno) -> Void
    public var dataSync: @Sendable (FileDescriptor) throws(Errno) -> Void
    /// Reserves a segment's blocks up to a size, extending the file with zeros. A failure
    /// (a file system without `fallocate`, no room) only leaves the segment to grow as it
    /// is written.
    public var allocate: @Sendable (FileDescriptor, Int64) throws(Errno) -> Void
    /// Whether batches may be copied into a segment's reserved space mapped in memory
    /// instead of passing through ``write`` (see ``Journal/mapSegment(_:size:)``): only
    /// for the system's own calls, since a store to a mapping cannot be made to fail.
    public var mapsSegments: Bool

    public init(
        write: @escaping @Sendable (FileDescriptor, UnsafeRawBufferPointer) throws(Errno) -> Void,
        dataSync: @escaping @Sendable (FileDescriptor) throws(Errno) -> Void,
        allocate: @escaping @Sendable (FileDescriptor, Int64) throws(Errno) -> Void = { fd, size throws(Errno) in
            try fd.allocate(upTo: size)
        },
        mapsSegments: Bool = false
    ) {
        self.write = write
        self.dataSync = dataSync
        self.allocate = allocate
        self.mapsSegments = mapsSegments
    }

    /// `write(2)` (looping over short writes), `fdatasync(2)` and `fallocate(2)`, and
    /// segments' reserved space mapped for the batches that fit in it.
    public static let system = JournalIO(
        write: { fd, bytes throws(Errno) in try fd.writeAll(bytes) },
        dataSync: { fd throws(Errno) in try fd.dataSync() },
        mapsSegments: true)
}

extension JournalIO {
    /// ``write`` over an array's bytes.
    func write(_ fd: FileDescriptor, contentsOf bytes: [UInt8]) throws(Errno) {
        try bytes.withUnsafeBytes { b in Result { () throws(Errno) in try write(fd, b) } }.get()
    }
}
