// journal-probe: drives the Journal module from a separate process, for the crash test
// (appends and acknowledges records until it is killed) and the benchmark script. Not
// installed; not a user-facing tool.

import Foundation
import Journal
import Posix

/// Writes a line to standard output unbuffered, so a parent waiting for it sees it at once.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("journal-probe: \(message)\n".utf8))
    exit(64)
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 2 else {
    fail("usage: journal-probe append|replay|bench-append|bench-replay DIR [OPTIONS]")
}
let command = arguments.removeFirst()
let directory = arguments.removeFirst()

@MainActor func option(_ name: String, default value: Int) -> Int {
    guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let n = Int(arguments[i + 1]) else {
        return value
    }
    return n
}

@MainActor func text(_ name: String, default value: String) -> String {
    guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count else { return value }
    return arguments[i + 1]
}

@MainActor func mode() -> JournalOptions.SyncMode {
    text("--mode", default: "periodic") == "always"
        ? .always : .periodic(.milliseconds(option("--interval-ms", default: 1000)))
}

/// The payload the crash test expects for a record: derived from its LSN and owner alone.
func payload(lsn: LSN, owner: UInt64, size: Int) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: size)
    var x = lsn.rawValue &* 0x9E37_79B9_7F4A_7C15 ^ owner
    for i in bytes.indices {
        x ^= x << 13
        x ^= x >> 7
        x ^= x << 17
        bytes[i] = UInt8(truncatingIfNeeded: x)
    }
    return bytes
}

/// Replays, checking each payload against ``payload(lsn:owner:size:)`` and that the LSNs
/// run 1, 2, 3, … without a gap — or, with `released` (records are released, and the marks
/// saying so take LSNs of their own), that each owner's records do; each stays pinned.
/// Returns the report, the number of records that failed, and each owner delivered with
/// its first and last LSN, in order.
func checkedReplay(_ journal: Journal, released: Bool = false) throws -> (
    JournalReplayReport, Int, [(owner: UInt64, first: LSN, last: LSN)]
) {
    var bad = 0
    var expected = LSN(1)
    var owners: [(owner: UInt64, first: LSN, last: LSN)] = []
    let report = try journal.replay { record in
        let bytes = payload(lsn: record.lsn, owner: record.owner, size: record.payload.count)
        if released, owners.last?.owner != record.owner { expected = record.lsn }
        if !record.payload.elementsEqual(bytes) || record.lsn != expected { bad += 1 }
        expected = record.lsn.next
        journal.noteReplayed(owner: record.owner, lsn: record.lsn)
        if owners.last?.owner == record.owner {
            owners[owners.count - 1].last = record.lsn
        } else {
            owners.append((record.owner, record.lsn, record.lsn))
        }
    }
    return (report, bad, owners)
}

func milliseconds(_ d: Duration) -> Double {
    Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15
}

do {
    switch command {
    case "append":
        // append DIR [--mode periodic|always] [--interval-ms I] [--payload N] [--batch K]
        //            [--keep B --segment-size S]: appends batches of K records forever; after
        // each flush (periodic) or once durable (always) prints the batch's last LSN: every
        // record up to it is acknowledged. With --keep, each batch has an owner of its own
        // and all but the last B batches are released, oldest first: segments (of S bytes)
        // go obsolete and are recycled; each line also gives how many were and the batch's
        // first LSN. Prints "ready COUNT LAST" after replay, with --keep followed by the
        // LSNs of each batch delivered, FIRST-LAST. In always mode, the first failure the
        // journal reports is printed ("failed OP ERRNO") while a batch waits for its sync,
        // after the lines of every batch acknowledged before it.
        let size = option("--payload", default: 100)
        let batch = option("--batch", default: 8)
        let keep = option("--keep", default: 0)
        let acknowledged = Lock(LSN.zero)
        let firstFailure = Lock<JournalFailure?>(nil)
        var failureSaid = false
        let syncMode = mode()
        let journal = try Journal(
            directory: directory,
            options: JournalOptions(mode: syncMode, segmentSize: option("--segment-size", default: 16 << 20)),
            onDurable: { lsn in acknowledged.withLock { $0 = max($0, lsn) } },
            onFailure: { failure in firstFailure.withLock { $0 = $0 ?? failure } })
        let (report, bad, replayed) = try checkedReplay(journal, released: keep > 0)
        if bad > 0 { fail("\(bad) replayed records with a wrong payload or out of order") }
        let batches = replayed.map { " \($0.first.rawValue)-\($0.last.rawValue)" }.joined()
        say("ready \(report.records) \(report.lastLSN?.rawValue ?? 0)" + (keep > 0 ? batches : ""))
        var owner: UInt64 = (replayed.map(\.owner).max() ?? 0) + 1
        var unreleased = replayed.map { ($0.owner, $0.last) }
        while true {
            var last = LSN.zero
            let first = journal.statistics.lastLSN.next
            for _ in 0..<batch {
                if keep == 0 { owner = owner % 7 + 1 }
                let lsn = journal.statistics.lastLSN.next
                last = try journal.append(owner: owner, payload: payload(lsn: lsn, owner: owner, size: size))
                precondition(last == lsn)
            }
            if keep > 0 {
                unreleased.append((owner, last))
                while unreleased.count > keep {
                    let (oldest, through) = unreleased.removeFirst()
                    journal.release(owner: oldest, through: through)
                }
                owner += 1
            }
            let written = journal.flush()
            if syncMode == .always {
                while acknowledged.withLock({ $0 }) < last {
                    if !failureSaid, let failure = firstFailure.withLock({ $0 }) {
                        say("failed \(failure.operation.rawValue) \(failure.errno.name)")
                        failureSaid = true
                    }
                    usleep(100)
                }
            } else if written < last {
                fail("flush left \(last) unwritten")
            }
            say(
                keep > 0
                    ? "\(last.rawValue) \(journal.statistics.segmentsRecycled) \(first.rawValue)" : "\(last.rawValue)")
        }

    case "sync-failure":
        // sync-failure DIR: for a fault-injection harness (fiu-run, fiu-ctrl). Opens in always
        // mode and prints "ready"; then obeys lines on stdin: "append" appends 5 records,
        // flushes and waits for the first failure or for durability ("failed OP ERRNO
        // FIRST LAST durable N" or "durable N"); "wait" waits for durability ("durable N
        // rewrites R"); "close" closes ("closed" or "closed failure …").
        let failures = Lock<[JournalFailure]>([])
        let durable = Lock(LSN.zero)
        let journal = try Journal(
            directory: directory, options: JournalOptions(mode: .always, retryDelay: .milliseconds(50)),
            onDurable: { lsn in durable.withLock { $0 = max($0, lsn) } },
            onFailure: { failure in failures.withLock { $0.append(failure) } })
        try journal.replay { record in journal.noteReplayed(owner: record.owner, lsn: record.lsn) }
        say("ready")
        var last = LSN.zero
        func waitFor(_ seconds: Double, _ condition: () -> Bool) {
            let end = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
            while !condition() && ContinuousClock.now < end { usleep(1000) }
        }
        while let line = readLine() {
            switch line {
            case "append":
                for i in 0..<5 {
                    last = try journal.append(owner: 1, payload: payload(lsn: LSN(UInt64(i)), owner: 1, size: 10))
                }
                journal.flush()
                waitFor(5) { !failures.withLock { $0.isEmpty } || durable.withLock { $0 } >= last }
                if let failure = failures.withLock({ $0.first }) {
                    let range = failure.notDurable.map { "\($0.lowerBound) \($0.upperBound)" } ?? "- -"
                    say(
                        "failed \(failure.operation.rawValue) \(failure.errno.name) \(range) durable \(journal.statistics.durableThrough)"
                    )
                } else {
                    say("durable \(durable.withLock { $0 })")
                }
            case "wait":
                waitFor(10) { durable.withLock { $0 } >= last }
                say("durable \(durable.withLock { $0 }) rewrites \(journal.statistics.rewrites)")
            case "close":
                if let failure = journal.close() { say("closed failure \(failure)") } else { say("closed") }
                exit(0)
            default:
                fail("unknown line \(line)")
            }
        }

    case "replay":
        // replay DIR: prints the replay report and the record count.
        let journal = try Journal(directory: directory)
        let (report, bad, _) = try checkedReplay(journal)
        say(report.description)
        if bad > 0 { say("\(bad) records with an unexpected payload") }
        journal.close()

    case "bench-append":
        // bench-append DIR --mode M --clients C --documents D --payload N --seconds S: C
        // clients with one request outstanding each; a client's next request waits for its
        // reply — after the flush in periodic mode, once durable in always mode. Each client
        // edits D documents (owners) in turn. One loop pass appends one record per ready
        // client and flushes once. Prints acknowledged records per second.
        let clients = option("--clients", default: 50)
        let documents = max(1, option("--documents", default: 1))
        let size = option("--payload", default: 100)
        let seconds = Double(option("--milliseconds", default: 3000)) / 1000
        let syncMode = mode()
        let durable = Lock(LSN.zero)
        let signal = NSCondition()
        let journal = try Journal(
            directory: directory, options: JournalOptions(mode: syncMode),
            onDurable: { lsn in
                durable.withLock { $0 = max($0, lsn) }
                signal.lock()
                signal.signal()
                signal.unlock()
            })
        try journal.replay { _ in }
        let data = [UInt8](repeating: 0x61, count: size)
        var waiting: [(lsn: LSN, client: Int)] = []
        // Each document's log kept by the caller, as the engine keeps it in the document's entry.
        var logs = [JournalOwnerLog](repeating: JournalOwnerLog(), count: clients * documents)
        var ready = Array(0..<clients)
        var acknowledged = 0
        var passes = 0
        let start = ContinuousClock.now
        let end = start + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < end {
            for client in ready {
                let owner = UInt64(client * documents + passes % documents)
                waiting.append((try journal.append(owner: owner, payload: data, log: &logs[Int(owner)]), client))
            }
            ready.removeAll(keepingCapacity: true)
            let written = journal.flush()
            passes += 1
            if syncMode == .always {
                signal.lock()
                while durable.withLock({ $0 }) < waiting[0].lsn { signal.wait() }
                signal.unlock()
            }
            let done = syncMode == .always ? durable.withLock { $0 } : written
            let split = waiting.firstIndex { $0.lsn > done } ?? waiting.count
            ready.append(contentsOf: waiting[..<split].map(\.client))
            acknowledged += split
            waiting.removeFirst(split)
        }
        let elapsed = ContinuousClock.now - start
        journal.close()
        let stats = journal.statistics
        let rate = Double(acknowledged) / (milliseconds(elapsed) / 1000)
        let perRecord = Double(stats.bytesWritten) / Double(max(1, stats.lastLSN.rawValue))
        say(
            "\(syncMode) | \(clients) | \(documents) | \(size) B | \(Int(rate.rounded())) | \(stats.syncs) | "
                + String(format: "%.1f", Double(acknowledged) / Double(max(1, stats.syncs))) + " | "
                + String(format: "%.1f", perRecord - Double(size)) + " B")
        _ = passes

    case "bench-replay":
        // bench-replay DIR --records N --payload P: writes N records (periodic mode, batches
        // of 1,000, 100 owners), closes, then times opening and replaying them, each record
        // pinned with noteReplayed as the engine does.
        let records = option("--records", default: 1_000_000)
        let size = option("--payload", default: 100)
        let writer = try Journal(directory: directory, options: JournalOptions(segmentSize: 64 << 20))
        try writer.replay { _ in }
        let data = [UInt8](repeating: 0x62, count: size)
        var appended = 0
        while appended < records {
            for _ in 0..<min(1000, records - appended) {
                try writer.append(owner: UInt64(appended % 100), payload: data)
                appended += 1
            }
            writer.flush()
        }
        if let failure = writer.close() { fail("close: \(failure)") }
        let bytes = writer.statistics.bytes
        let start = ContinuousClock.now
        let reader = try Journal(directory: directory)
        var count = 0
        var sum = 0
        let report = try reader.replay { record in
            count += 1
            sum &+= Int(record.payload.first ?? 0)
            reader.noteReplayed(owner: record.owner, lsn: record.lsn)
        }
        let elapsed = ContinuousClock.now - start
        reader.close()
        if count != records { fail("replayed \(count) of \(records) records") }
        say(
            "\(records) | \(size) B | \(bytes / 1_048_576) MiB | \(report.segments) | "
                + String(format: "%.0f ms", milliseconds(elapsed)) + " | "
                + String(format: "%.2f M records/s", Double(records) / (milliseconds(elapsed) / 1000) / 1e6))
        _ = sum

    default:
        fail("unknown command \(command)")
    }
} catch {
    fail("\(error)")
}
