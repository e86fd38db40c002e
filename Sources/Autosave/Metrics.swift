import Control
import Foundation
import Logging
import Posix

/// The daemon's figures in the Prometheus text format (version 0.0.4), for
/// `autosavectl metrics` (the `metrics` command) and node_exporter's textfile collector
/// (`[Metrics] TextfileDirectory=`). Counters of what the store's events report (saves,
/// bytes, durations, failures by errno, other programs' changes) are kept by a
/// ``Metrics`` value that observes the store's events; gauges come from the store's
/// status when the text is made.
public final class Metrics: Sendable {
    /// Upper bounds of the save-duration histogram's buckets, in seconds.
    static let durationBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    struct Counters {
        var bytesWritten = 0
        var failuresByErrno: [String: Int] = [:]
        var bucketCounts = [Int](repeating: 0, count: Metrics.durationBuckets.count)
        var durationCount = 0
        var durationSum = 0.0
        var events: [String: Int] = [:]
    }

    private let counters = Lock(Counters())
    /// The control socket's open connections, when a server is there to say.
    private let connections: (@Sendable () -> Int)?

    /// The metrics of each store that has them, so that its control sessions find them.
    private static let registry = Lock<[ObjectIdentifier: Metrics]>([:])

    init(connections: (@Sendable () -> Int)? = nil) { self.connections = connections }

    /// Starts following `store`'s events, and writes the text file every interval when
    /// the configuration names a directory. The tasks end when cancelled.
    public static func start(
        store: DocumentStore, configuration: Configuration, log: Logger, connections: (@Sendable () -> Int)? = nil
    ) async -> [Task<Void, Never>] {
        let metrics = Metrics(connections: connections)
        registry.withLock { $0[ObjectIdentifier(store)] = metrics }
        // Counted on the store's thread as each event happens: no task to wake per save or
        // opened document, and none missed when the events come faster than a task reads them.
        await store.observe { metrics.record($0) }
        var tasks: [Task<Void, Never>] = []
        if let directory = configuration.metricsTextfileDirectory {
            let interval = configuration.metricsInterval
            tasks.append(
                Task {
                    var reported = false
                    while !Task.isCancelled {
                        do {
                            try await Self.writeTextfile(store: store, directory: directory)
                            reported = false
                        } catch {
                            // Said once until it works again, not every interval.
                            if !reported { log.error("cannot write the metrics file in \(directory): \(error)") }
                            reported = true
                        }
                        try? await Task.sleep(for: interval)
                    }
                })
        }
        return tasks
    }

    /// Writes `autosaved.prom` in `directory` atomically: a temporary file beside it,
    /// renamed over it.
    static func writeTextfile(store: DocumentStore, directory: String) async throws {
        let text = await render(store: store)
        try Data(text.utf8).write(to: URL(fileURLWithPath: directory + "/autosaved.prom"), options: .atomic)
    }

    func record(_ event: StoreEvent) {
        counters.withLock { counters in
            switch event {
            case .saved(_, let bytes, let duration):
                counters.bytesWritten += bytes
                let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
                counters.durationCount += 1
                counters.durationSum += seconds
                for (index, bound) in Self.durationBuckets.enumerated() where seconds <= bound {
                    counters.bucketCounts[index] += 1
                }
            case .saveFailed(let failure):
                counters.failuresByErrno[failure.errno?.name ?? "none", default: 0] += 1
            case .changedOnDisk: counters.events["changed-on-disk", default: 0] += 1
            case .recreated: counters.events["recreated", default: 0] += 1
            case .renamed: counters.events["renamed", default: 0] += 1
            case .opened: counters.events["opened", default: 0] += 1
            case .closed: counters.events["closed", default: 0] += 1
            case .conflict: break
            }
        }
    }

    /// The whole text: every family with its HELP and TYPE lines. `connections`: the
    /// control socket's open connections, when a server is there to say.
    public static func render(store: DocumentStore, connections: Int? = nil) async -> String {
        let status = await store.status()
        let (edits, editToDurable) = await (store.editCounts, store.editToDurable)
        let watch = await store.watchSummary
        let metrics = registry.withLock { $0[ObjectIdentifier(store)] }
        let counters = metrics?.counters.withLock { $0 } ?? Counters()
        let connections = connections ?? metrics?.connections?()
        var text = MetricsText()
        text.family(
            "autosaved_build_info", "gauge", "The running version.", [("{version=\"\(AutosaveVersion.current)\"}", "1")]
        )
        text.family(
            "autosaved_start_time_seconds", "gauge", "When the daemon started, in seconds since the epoch.",
            [("", MetricsText.number(status.startedAt.timeIntervalSince1970))])
        text.family("autosaved_documents", "gauge", "Open documents.", [("", "\(status.documents)")])
        text.family(
            "autosaved_documents_in_state", "gauge",
            "Open documents with unsaved edits, being saved, and whose last save failed.",
            [
                ("{state=\"unsaved\"}", "\(status.unsaved)"), ("{state=\"saving\"}", "\(status.saving)"),
                ("{state=\"failing\"}", "\(status.failed)"),
            ])
        text.family(
            "autosaved_edits_total", "counter", "Edits applied, by the command that made them.",
            zip(EditCommand.allCases, edits.counts).map { ("{command=\"\($0.name)\"}", "\($1)") })
        text.family(
            "autosaved_saves_total", "counter", "Saves that completed (durable on disk).", [("", "\(status.saves)")])
        let polls = store.busyPollFigures
        text.family(
            "autosaved_busy_polls_total", "counter",
            "The event loop's polls for a next request before sleeping ([Control] BusyPoll=), by whether work came before the time ran out.",
            [("{result=\"work\"}", "\(polls.caught)"), ("{result=\"ran-out\"}", "\(polls.ranOut)")])
        text.family(
            "autosaved_busy_poll_seconds_total", "counter",
            "Time the event loop spent polling before sleeping ([Control] BusyPoll=): the CPU time the setting costs.",
            [("", MetricsText.number(polls.seconds))])
        let ring = store.ioURingSummary
        text.family(
            "autosaved_io_uring", "gauge",
            "1 while the event loop batches its reads and sends through io_uring ([Control] IOUring=), 0 otherwise.",
            [("", ring.state == "in-use" ? "1" : "0")])
        text.family(
            "autosaved_io_uring_batches_total", "counter",
            "Batches of reads (receive) and of replies (send) the event loop made through io_uring, each one system call.",
            [("{call=\"receive\"}", "\(ring.receiveBatches)"), ("{call=\"send\"}", "\(ring.sendBatches)")])
        text.family(
            "autosaved_io_uring_calls_total", "counter",
            "Reads (receive) and sends (send) made in those batches.",
            [("{call=\"receive\"}", "\(ring.receives)"), ("{call=\"send\"}", "\(ring.sends)")])
        text.family(
            "autosaved_edit_to_durable_seconds", "histogram",
            "From a document's first unsaved edit to the end of the save that made it durable.",
            MetricsText.histogram(
                bounds: LatencyHistogram.bounds, counts: editToDurable.buckets, count: editToDurable.count,
                sum: editToDurable.sum))
        if let journal = await store.journalSummary {
            text.family(
                "autosaved_journal_bytes", "gauge", "Bytes of the records in the edit journal's segments.",
                [("", "\(journal.bytes)")])
            text.family(
                "autosaved_journal_segments", "gauge", "The edit journal's segment files.",
                [("", "\(journal.segments)")])
            text.family(
                "autosaved_journal_spare_segments", "gauge",
                "Segment files no longer needed, kept to be reused as the next segments.",
                [("", "\(journal.spareSegments)")])
            text.family(
                "autosaved_journal_unsaved_records", "gauge", "Journal records no durable save covers yet.",
                [("", "\(journal.unsavedRecords)")])
            text.family(
                "autosaved_journal_syncs_total", "counter", "fdatasync calls that made journal records durable.",
                [("", "\(journal.syncs)")])
            text.family(
                "autosaved_journal_unjournalled_edits_total", "counter",
                "Edits made through modify(_:as:_:), which the journal cannot hold.",
                [("", "\(journal.unjournalledEdits)")])
        }
        if let connections {
            text.family(
                "autosaved_connections", "gauge", "Clients connected to the control socket.", [("", "\(connections)")])
        }
        text.family(
            "autosaved_save_failures_total", "counter", "Saves that failed, by the error's name.",
            counters.failuresByErrno.sorted { $0.key < $1.key }.map { ("{errno=\"\($0.key)\"}", "\($0.value)") })
        text.family(
            "autosaved_bytes_written_total", "counter",
            "Bytes of contents saves wrote (for a package, only its changed members).",
            [("", "\(counters.bytesWritten)")])
        text.family(
            "autosaved_save_duration_seconds", "histogram",
            "How long saves took, serialisation and every fsync included.",
            MetricsText.histogram(
                bounds: durationBuckets, counts: counters.bucketCounts, count: counters.durationCount,
                sum: counters.durationSum))
        text.family(
            "autosaved_external_changes_total", "counter",
            "Other programs' changes to open documents' files, by what followed.",
            ["changed-on-disk", "recreated", "renamed"].map { ("{kind=\"\($0)\"}", "\(counters.events[$0] ?? 0)") })
        if let watch {
            text.family(
                "autosaved_reloads_total", "counter", "Documents read again after another program changed them.",
                [("", "\(watch.reloads)")])
            text.family(
                "autosaved_conflicts_total", "counter",
                "Changes by another program to documents with unsaved edits (both versions kept).",
                [("", "\(watch.conflicts)")])
            text.family(
                "autosaved_inotify_overflows_total", "counter", "inotify queue overflows (each followed by a rescan).",
                [("", "\(watch.overflows)")])
            text.family(
                "autosaved_watched_directories", "gauge", "Directories with an inotify watch.",
                [("", "\(watch.watchedDirectories)")])
            text.family(
                "autosaved_polled_directories", "gauge",
                "Directories polled instead of watched: past fs.inotify.max_user_watches, or by [Watch] Mode=.",
                [("", "\(watch.polledDirectories)")])
        }
        return text.text
    }
}

/// Prometheus text format lines.
struct MetricsText {
    private(set) var text = ""

    /// One family: `# HELP`, `# TYPE`, then each sample (`suffix` is labels, or a
    /// histogram's `_bucket{…}`, `_sum`, `_count`).
    mutating func family(_ name: String, _ type: String, _ help: String, _ samples: [(String, String)]) {
        text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        for (suffix, value) in samples { text += "\(name)\(suffix) \(value)\n" }
    }

    /// A histogram's samples: a cumulative `_bucket` per bound and `+Inf`, `_sum`, `_count`.
    static func histogram(bounds: [Double], counts: [Int], count: Int, sum: Double) -> [(String, String)] {
        var samples = zip(bounds, counts).map { ("_bucket{le=\"\(number($0))\"}", "\($1)") }
        samples.append(("_bucket{le=\"+Inf\"}", "\(count)"))
        samples.append(("_sum", number(sum)))
        samples.append(("_count", "\(count)"))
        return samples
    }

    /// A number as Prometheus reads it: integers without a fraction, others as Swift prints them.
    static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
    }
}
