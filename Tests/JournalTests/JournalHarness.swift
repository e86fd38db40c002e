import Foundation
@preconcurrency import Glibc
import Journal
import Posix
import TestSupport

/// The journal's two disk calls, counted, with failures injected on demand: a fake only
/// in that it can make a healthy disk answer EIO or ENOSPC when told to.
final class FaultyDisk: Sendable {
    struct Counts {
        /// Sizes of the writes, in order (segment headers included).
        var writes: [Int] = []
        var syncs = 0
        /// The next this many `fdatasync` calls fail with `syncError`.
        var failingSyncs = 0
        var syncError = Errno.ioError
        var failingWrites = 0
        var writeError = Errno.noSpace
        /// Each `fdatasync` sleeps this long first (a slow disk).
        var syncDelayMicroseconds: UInt32 = 0
        /// While closed, every `fdatasync` waits (a sync that takes as long as the test wants).
        var gateClosed = false
        var syncsInFlight = 0
        /// Writes made while an `fdatasync` was in flight.
        var writesDuringSync = 0
    }

    let counts = Lock(Counts())
    /// Whether segments are mapped, as with the system's calls: batches stored in the
    /// mapping pass by ``JournalIO/write`` (only `fdatasync` failures reach them).
    let mapsSegments: Bool

    init(mapsSegments: Bool = false) { self.mapsSegments = mapsSegments }

    var io: JournalIO {
        JournalIO(
            write: { [self] fd, bytes throws(Errno) in
                let error = counts.withLock { c -> Errno? in
                    if c.failingWrites > 0 {
                        c.failingWrites -= 1
                        return c.writeError
                    }
                    c.writes.append(bytes.count)
                    if c.syncsInFlight > 0 { c.writesDuringSync += 1 }
                    return nil
                }
                if let error { throw error }
                try fd.writeAll(bytes)
            },
            dataSync: { [self] fd throws(Errno) in
                counts.withLock { $0.syncsInFlight += 1 }
                defer { counts.withLock { $0.syncsInFlight -= 1 } }
                while counts.withLock({ $0.gateClosed }) { usleep(1000) }
                let (delay, error) = counts.withLock { c -> (UInt32, Errno?) in
                    c.syncs += 1
                    if c.failingSyncs > 0 {
                        c.failingSyncs -= 1
                        return (c.syncDelayMicroseconds, c.syncError)
                    }
                    return (c.syncDelayMicroseconds, nil)
                }
                if delay > 0 { usleep(delay) }
                if let error { throw error }
                try fd.dataSync()
            },
            mapsSegments: mapsSegments)
    }
}

/// What the journal reported through its callbacks.
final class Reports: Sendable {
    struct Seen {
        var durable = LSN.zero
        var durableCalls: [LSN] = []
        var failures: [JournalFailure] = []
    }

    let seen = Lock(Seen())

    var durable: LSN { seen.withLock { $0.durable } }
    var failures: [JournalFailure] { seen.withLock { $0.failures } }

    func noteDurable(_ lsn: LSN) {
        seen.withLock { s in
            s.durable = max(s.durable, lsn)
            s.durableCalls.append(lsn)
        }
    }

    func noteFailure(_ failure: JournalFailure) { seen.withLock { $0.failures.append(failure) } }
}

/// A replayed record, copied out.
struct Replayed: Equatable {
    var lsn: UInt64
    var owner: UInt64
    var payload: [UInt8]
}

/// Waits up to `seconds` for `condition`, polling.
func eventually(_ seconds: Double = 10, _ condition: () -> Bool) -> Bool {
    let end = Date(timeIntervalSinceNow: seconds)
    while Date() < end {
        if condition() { return true }
        usleep(2000)
    }
    return condition()
}

/// Opens a journal with callbacks going to `reports`, replays it and returns the records.
func openJournal(
    _ directory: String, options: JournalOptions = JournalOptions(), reports: Reports = Reports(),
    pin: Bool = false
) throws -> (Journal, JournalReplayReport, [Replayed]) {
    let journal = try Journal(
        directory: directory, options: options,
        onDurable: { reports.noteDurable($0) }, onFailure: { reports.noteFailure($0) })
    var records: [Replayed] = []
    let report = try journal.replay { record in
        records.append(Replayed(lsn: record.lsn.rawValue, owner: record.owner, payload: Array(record.payload)))
        if pin { journal.noteReplayed(owner: record.owner, lsn: record.lsn) }
    }
    return (journal, report, records)
}

/// A payload that tells records apart: `size` bytes derived from `seed`.
func payload(_ seed: Int, size: Int = 100) -> [UInt8] {
    (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed &* 7 &+ 1) }
}

/// The segment files in a directory, sorted (damaged and temporary files excluded).
func segmentFiles(_ directory: String) throws -> [String] {
    try Disk.names(in: directory).filter { $0.hasSuffix(".journal") && !$0.hasPrefix(".") }
}

/// Reads and writes whole files for the damage tests.
enum Bytes {
    static func read(_ path: String) throws -> [UInt8] { Array(try Disk.bytes(path)) }
    static func write(_ bytes: [UInt8], to path: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }
}
