import Autosave
import Documents
import Foundation
import Logging
import Posix
import TestSupport
import Testing

/// Every event a store emitted, in order, with waiting for one to come.
actor EventLog {
    private(set) var events: [StoreEvent] = []
    private var waiters:
        [UUID: (from: Int, predicate: @Sendable (StoreEvent) -> Bool, continuation: CheckedContinuation<Int?, Never>)] =
            [:]

    func append(_ event: StoreEvent) {
        events.append(event)
        let index = events.count - 1
        for (id, waiter) in waiters where index >= waiter.from && waiter.predicate(event) {
            waiters[id] = nil
            waiter.continuation.resume(returning: index)
        }
    }

    /// The index of the first event at or after `from` matching `predicate`, waiting up to `timeout`.
    func first(from: Int, within timeout: Duration, where predicate: @escaping @Sendable (StoreEvent) -> Bool) async
        -> Int?
    {
        if let index = events.indices.first(where: { $0 >= from && predicate(events[$0]) }) { return index }
        let id = UUID()
        return await withCheckedContinuation { continuation in
            waiters[id] = (from, predicate, continuation)
            Task {
                try? await Task.sleep(for: timeout)
                self.expire(id)
            }
        }
    }

    private func expire(_ id: UUID) {
        waiters.removeValue(forKey: id)?.continuation.resume(returning: nil)
    }

    func count(where predicate: (StoreEvent) -> Bool) -> Int { events.filter(predicate).count }
}

/// Log entries kept for tests to look at.
final class CapturedLog: LogHandler, Sendable {
    struct Entry: Sendable {
        var level: LogLevel
        var message: String
        var metadata: [String: String]
    }
    private let entries = Lock<[Entry]>([])

    func log(level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String) {
        entries.withLock { $0.append(Entry(level: level, message: message, metadata: metadata)) }
    }

    var all: [Entry] { entries.withLock { $0 } }

    func count(messageID: String) -> Int { all.filter { $0.metadata["message_id"] == messageID }.count }
}

/// A store on a temporary root with its scheduler running, and its events.
final class StoreHarness: @unchecked Sendable {
    let directory: TemporaryDirectory
    let store: DocumentStore
    let log = EventLog()
    /// The store's log entries at warning and above.
    let lines = CapturedLog()
    private var cursor = 0
    private let tasks: [Task<Void, Never>]
    /// What lives as long as the harness (a file system mounted for its root, say).
    var held: [Any] = []

    init(
        root: String? = nil, quiet: Duration = .milliseconds(300), maxDelay: Duration = .seconds(30),
        concurrentSaves: Int = 4, retry: Duration = .milliseconds(100), refuseEditsWhenSaveFails: Bool = false,
        registry: DocumentTypeRegistry? = nil, configure: (inout Configuration) -> Void = { _ in }
    ) async {
        directory = TemporaryDirectory("store")
        var configuration = Configuration(environment: [:])
        configuration.root = root ?? directory.sub("root")
        try? FileManager.default.createDirectory(atPath: configuration.root, withIntermediateDirectories: true)
        configuration.quietPeriod = quiet
        configuration.maxDelay = maxDelay
        configuration.maxConcurrentSaves = concurrentSaves
        configuration.retryInterval = retry
        configuration.maxRetryInterval = retry * 4
        configuration.refuseEditsWhenSaveFails = refuseEditsWhenSaveFails
        configure(&configuration)
        let store = DocumentStore(
            configuration: configuration, registry: registry, log: Logger(level: .warning, handler: lines))
        self.store = store
        let events = await store.events()
        let log = log
        tasks = [
            Task { await store.runScheduler() },
            Task { for await event in events { await log.append(event) } },
        ]
    }

    deinit { for task in tasks { task.cancel() } }

    var root: String { store.root }

    func file(_ path: String) -> String { root + "/" + path }

    /// The next event after the previous one returned that matches `predicate`; a test
    /// failure if none comes within `timeout`.
    @discardableResult
    func next(
        within timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation,
        where predicate: @escaping @Sendable (StoreEvent) -> Bool = { _ in true }
    ) async -> StoreEvent? {
        guard let index = await log.first(from: cursor, within: timeout, where: predicate) else {
            Issue.record("no matching store event within \(timeout)", sourceLocation: sourceLocation)
            return nil
        }
        cursor = index + 1
        return await log.events[index]
    }

    /// The next save of `path`.
    @discardableResult
    func nextSave(
        of path: String, within timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation
    )
        async -> StoreEvent?
    {
        await next(within: timeout, sourceLocation: sourceLocation) {
            if case .saved(path, _, _) = $0 { return true }
            return false
        }
    }

    /// The next failed save of `path`.
    func nextFailure(of path: String, sourceLocation: SourceLocation = #_sourceLocation) async -> SaveFailure? {
        let event = await next(sourceLocation: sourceLocation) {
            if case .saveFailed(let failure) = $0 { return failure.document == path }
            return false
        }
        if case .saveFailed(let failure)? = event { return failure }
        return nil
    }

    func saves(of path: String) async -> Int {
        await log.count {
            if case .saved(path, _, _) = $0 { return true }
            return false
        }
    }

    func text(onDisk path: String) throws -> String {
        try String(contentsOfFile: file(path), encoding: .utf8)
    }
}

extension StoreHarness {
    /// The harness `make` returns, made with `fs.inotify.max_queued_events` at 1 and the
    /// setting put back after, thrown or not: an inotify instance's queue size is fixed when
    /// it is made, so a watcher started in `make` holds one report and overflows on any
    /// burst. Root only.
    static func withOneReportQueue(_ make: () async throws -> StoreHarness) async throws -> StoreHarness {
        let setting = "/proc/sys/fs/inotify/max_queued_events"
        let original = try String(contentsOfFile: setting, encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines)
        try Disk.write("1\n", to: setting)
        defer { try? Disk.write(original + "\n", to: setting) }
        return try await make()
    }
}
