import Control
import Documents
import Foundation
import Journal
import Logging
import Posix

/// Every open document, its edits and its saves.
///
/// Edits apply to the in-memory value at once and never wait for a save. Saves are
/// scheduled per document: a trailing quiet period after the last edit, capped by a
/// maximum delay since the first unsaved edit. A save takes a snapshot here (value
/// types are copy-on-write, so this is cheap), serialises it with
/// `fileWrapper(configuration:)` and writes it with ``DurableWriter`` *off* the store,
/// then applies its change token: edits made meanwhile stay dirty and are saved next.
/// At most one save per document runs at a time, and at most `MaxConcurrentSaves` in
/// all. A failed save keeps the edits, leaves the file as it was, and is retried with
/// exponential backoff until it succeeds.
public actor DocumentStore {
    public nonisolated let root: String
    public private(set) var configuration: Configuration {
        didSet {
            scheduleDelays = Self.delays(of: configuration)
            refusesEditsWhenSaveFails = configuration.refuseEditsWhenSaveFails
        }
    }
    // The state every edit touches is exempt from the runtime's exclusivity checks
    // (`@exclusivity(unchecked)`, ≈ 10 ns an access, several per edit): it is used only
    // on the store's thread, and no access to it spans a call into other code that could
    // reach the store again (a document's own `apply` cannot: it is not isolated to the
    // store). The compiler's static checks still apply.

    /// The last ``wallClockOffset(now:)``, and when it was measured.
    @exclusivity(unchecked) var clockOffset: (measuredAt: Moment, seconds: Double) = (Moment(nanoseconds: 0), 0)
    /// `QuietPeriod=` and `MaxDelay=` in nanoseconds, for the deadline of every edit.
    @exclusivity(unchecked) var scheduleDelays: (quiet: Int64, max: Int64)
    /// `RefuseEditsWhenSaveFails=`, looked at by every edit.
    @exclusivity(unchecked) var refusesEditsWhenSaveFails: Bool
    public let registry: DocumentTypeRegistry
    /// Symbolic links at a document's place are refused (they could lead out of the
    /// root); written bytes are not kept twice in memory.
    /// Confined to the root: a directory another program swaps for a link after a
    /// request's checks cannot take a save elsewhere.
    var writer: DurableWriter
    /// Which paths are not documents (shared with the watcher's thread).
    nonisolated let ignore: SharedIgnoreRules
    /// Paths the scans and the watcher met that the rules ignore (for `status`).
    var ignoredPaths: Set<PathKey> = []
    /// The documents that became ignored and are being saved before they are closed (one task each).
    var closingIgnored: Set<PathKey> = []
    let clock = ContinuousClock()
    let log: Logger

    /// A document the store holds. Its stored fields are laid out in the order written:
    /// those every edit reads or writes come first (the cold ones — waiters, the
    /// fingerprint, the last save's duration — last), and the optional times, tokens and
    /// durations are kept without an optional's extra word (a sentinel stands for "none"
    /// behind the optional properties). An edit of a document whose entry is not in the
    /// cache misses on fewer of its lines.
    struct Entry {
        var document: any AutosaveDocument
        var existingFile: FileWrapper?
        var changeCount: UInt64 = 0
        var savedChangeCount: UInt64 = 0
        var contentType: UTType
        /// The change token of the save in flight.
        @PackedToken var savingToken: UInt64?
        /// A save requested explicitly up to this token: due at once.
        @PackedToken var forcedToken: UInt64?
        @PackedMoment var firstUnsavedEdit: Moment?
        @PackedMoment var lastEdit: Moment?
        @PackedMoment var deadline: Moment?
        /// The earliest time the heap holds for this document.
        @PackedMoment var queuedAt: Moment?
        @PackedMoment var retryAt: Moment?
        /// The document's owner number in the edit journal (0: it has no records yet).
        var journalOwner: UInt64 = 0
        /// The LSN of the document's latest record.
        var lastJournalLSN: UInt64 = 0
        /// The document's unreleased records, as the journal counts them (see ``JournalOwnerLog``).
        var journalLog = JournalOwnerLog()
        var saves = 0
        private var rawLastSaved = Double.nan
        private(set) var failureBox: Boxed<SaveFailure>? = nil
        var isPackage: Bool
        /// Whether the journal holds the version the next edit applies to (a base record,
        /// or the record of a save); the next edit writes a base first otherwise.
        var journalHasBase = false
        /// An edit the journal cannot hold was made (``DocumentStore/modify(_:as:_:)``):
        /// nothing is journalled for the document until its next save.
        var journalBroken = false
        // Not read by an edit.
        /// A caller of `save(wait: true)`: the change it waits for, and how it is told (with
        /// `onSaved`, also at once, from inside the save's completion: ``DocumentStore/save(_:wait:onSaved:)``).
        typealias Waiter = (
            token: UInt64, continuation: CheckedContinuation<Void, any Error>,
            onSaved: (@Sendable (DocumentInfo) -> Void)?
        )
        var waiters: [Waiter] = []
        /// The LSN of the latest record the save in flight covers.
        var savingLSN: UInt64 = 0
        /// The store-wide number of the save in flight (see ``DocumentStore/saveSerial``):
        /// its end applies to this document only if the number is still its own.
        var savingSerial: UInt64 = 0
        private var rawLastSaveDuration: Int64 = -1
        private(set) var fingerprintBox: Boxed<Fingerprint>? = nil

        init(contentType: UTType, isPackage: Bool, document: any AutosaveDocument, existingFile: FileWrapper?) {
            self.contentType = contentType
            self.isPackage = isPackage
            self.document = document
            self.existingFile = existingFile
        }

        var lastSaved: Date? {
            get { rawLastSaved.isNaN ? nil : Date(timeIntervalSinceReferenceDate: rawLastSaved) }
            set { rawLastSaved = newValue?.timeIntervalSinceReferenceDate ?? .nan }
        }
        /// How long the last successful save took.
        var lastSaveDuration: Duration? {
            get { rawLastSaveDuration < 0 ? nil : .nanoseconds(rawLastSaveDuration) }
            set { rawLastSaveDuration = newValue.map(Self.nanoseconds) ?? -1 }
        }
        /// The last save's failure, until a save succeeds.
        var failure: SaveFailure? {
            get { failureBox?.value }
            set { failureBox = newValue.map(Boxed.init) }
        }
        /// The file as this store last read or wrote it.
        var fingerprint: Fingerprint? {
            get { fingerprintBox?.value }
            set { fingerprintBox = newValue.map(Boxed.init) }
        }

        /// What the journal's compaction asks of a document: unsaved edits, a save in
        /// flight, a save due already that covers every edit.
        var compactionState: (dirty: Bool, saving: Bool, covered: Bool) {
            (isDirty, savingToken != nil, (forcedToken ?? 0) >= changeCount)
        }

        var isDirty: Bool { changeCount > savedChangeCount }

        private static func nanoseconds(_ duration: Duration) -> Int64 {
            let (seconds, attoseconds) = duration.components
            let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
            let (total, carry) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
            return overflow || carry ? .max : max(0, total)
        }
    }

    /// An optional moment in one word (`Int64.min` stands for none): an entry's times.
    @propertyWrapper
    struct PackedMoment {
        private var raw = Int64.min
        init() {}
        var wrappedValue: Moment? {
            get { raw == .min ? nil : Moment(nanoseconds: raw) }
            set { raw = newValue?.nanoseconds ?? .min }
        }
    }

    /// An optional change token in one word (`UInt64.max`, never a change count, stands for none).
    @propertyWrapper
    struct PackedToken {
        private var raw = UInt64.max
        init() {}
        var wrappedValue: UInt64? {
            get { raw == .max ? nil : raw }
            set { raw = newValue ?? .max }
        }
    }

    /// An immutable value on the heap (a change replaces the box).
    final class Boxed<Value: Sendable>: Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }

    @exclusivity(unchecked) var entries = EntryTable()
    /// How many open documents lie beneath each directory (relative to the root) that
    /// holds one: whether a path is the directory of open documents is one lookup, not a
    /// walk over every document. Kept by ``insert(_:at:)`` and ``remove(_:)``. Keyed by the
    /// names' bytes (``PathKey``), as the directory caches below are: two names in two
    /// Unicode normalizations are two directories.
    var directoryUses: [PathKey: Int] = [:]
    /// Directories known not to be there while inotify watches every directory: a new
    /// document in one needs no look at the disk (DocumentStore+MissingDirectories.swift).
    var missingDirectories: Set<PathKey> = []
    /// Directories (relative to the root, "" for the root) listed while inotify watches
    /// every directory: a name there that is no document and none of ``namesInTheWay``
    /// is not there (DocumentStore+MissingDirectories.swift).
    var knownDirectories: Set<PathKey> = []
    /// For each known directory that has some, the names in it that are not the store's own.
    var namesInTheWay: [PathKey: Set<PathKey>] = [:]
    /// New documents' looks at the disk in each directory since it was last listed.
    var directoryLooks: [PathKey: DirectoryLooks] = [:]
    var heap = DeadlineHeap()
    var savesInFlight = 0
    /// Numbers every save started. A save's end finds its document by path; the number
    /// tells it from another document opened at that path since (whose first save's change
    /// token may well be the same).
    var saveSerial: UInt64 = 0
    /// The saves in flight whose journal record an edit made meanwhile needs durable
    /// before their rename (``SaveCommit``), by ``saveSerial``; looked up only for a
    /// document being saved.
    var saveCommits: [UInt64: SaveCommit] = [:]
    /// The calls through which the journal's records reach the disk (tests wrap them).
    var journalIO = JournalIO.system
    @exclusivity(unchecked) var accepting = true
    var sleeper: CheckedContinuation<Void, Never>?
    @exclusivity(unchecked) var sleepTarget: Moment?
    /// Where saves are serialised and written.
    nonisolated let saveThreads = SaveThreads()
    /// Directories (relative to the root) whose entry, and every entry above it, a save
    /// has made durable (``syncDirectories(above:beneath:known:)``); emptied when the
    /// watcher reports a directory removed or renamed. Shared with the save threads.
    nonisolated let durableDirectories = Lock<Set<PathKey>>([])
    var subscribers: [UUID: AsyncStream<StoreEvent>.Continuation] = [:]
    /// Called with every event, on the store's thread (see ``observe(_:)``).
    var observers: [@Sendable (StoreEvent) -> Void] = []
    var watcher: FileWatcher?
    /// Counts the watchers started and stopped: a batch of events is handled only by the watcher that read it.
    var watchGeneration = 0
    /// Documents whose file changed while their own save was being written: checked
    /// once that save has recorded its fingerprint. This and the other collections of
    /// paths below are keyed by the names' bytes (``PathKey``), as ``entries`` is.
    var pendingChecks: Set<PathKey> = []
    /// The members of packages in ``pendingChecks`` that changed (or went) meanwhile:
    /// each is compared with what the save wrote, as the watcher would have.
    var pendingMemberChecks: [PathKey: Set<PathKey>] = [:]
    /// Documents another program renamed while their save was being written, and the
    /// name their file has now: the document follows once the save is done (see
    /// ``followHeldRename(_:to:)``), whose end is for the old name. Until then the new name
    /// is not opened as a document of its own.
    var heldRenames: [PathKey: String] = [:]
    /// Open documents whose file another program renamed onto the name of a held
    /// document (its file gone elsewhere, the document still under that name until its
    /// save is done), by that name: each moves there once the held one has followed.
    var movesOntoHeld: [PathKey: String] = [:]
    /// Conflicts waiting for another program to finish writing their file (see
    /// ``conflictSettle``).
    var settlingConflicts: [PathKey: SettlingConflict] = [:]
    /// ``sync()`` callers waiting for those conflicts to be resolved.
    var settleWaiters: [CheckedContinuation<Void, Never>] = []
    var syncWaiters: [PathKey: CheckedContinuation<Void, Never>] = [:]
    /// Documents closed while the watcher may still hold events of their own last saves:
    /// what the store last read or wrote there, so that those events do not open them
    /// again as files created by another program. Each is forgotten once the watcher has
    /// handed over everything from before the close (a ``sync()`` barrier), or at the
    /// first event that finds the file changed since.
    var recentlyClosed: [PathKey: ClosedDocument] = [:]
    /// Numbers the closes, so that a barrier forgets only the memo of its own close.
    var closeGeneration = 0
    /// The temporary name each document's last save renamed into place, until the
    /// watcher reports that rename: the event of the store's own save, to be passed over
    /// without a look at the disk (the save recorded the file's fingerprint already). One
    /// per document at most; a later save replaces it, a close removes it.
    var ownRenames: [PathKey: String] = [:]
    /// Log entries of this pass's work, written once its replies are out (``EventLoop/afterReplies``).
    var logsAfterReplies: [() -> Void] = []
    var externalReloads = 0
    var overflows = 0
    var conflicts = 0
    var totalSaves = 0
    /// Edits applied, by the protocol command that makes each kind (``EditCounts``).
    @exclusivity(unchecked) var editCounts = EditCounts()
    /// From a document's first unsaved edit to the end of the save that made it durable.
    var editToDurable = LatencyHistogram()
    var lastSave: (document: String, at: Date)?
    var lastFailure: SaveFailure?
    let startedAt = Date()

    // The edit journal (DocumentStore+Journal.swift).
    /// Open while `[Journal] Mode=` is not `off` (see ``openJournal()``). Set when it is
    /// opened and closed, read by every edit: no run-time exclusivity check.
    @exclusivity(unchecked) var journal: Journal?
    /// Holds replies back until the journal records they acknowledge are written or synced.
    public nonisolated let replyGate = ReplyGate()
    /// Where each record's payload is encoded (reused: no allocation per edit).
    @exclusivity(unchecked) var journalBuffer: [UInt8] = []
    /// The LSN of the latest record appended.
    @exclusivity(unchecked) var lastJournalLSN: UInt64 = 0
    /// `Mode=always`: every edit's reply waits for its record's sync.
    @exclusivity(unchecked) var replyNeedsSync = false
    var nextJournalOwner: UInt64 = 1
    /// The journal's identity in its label (see ``JournalRootLabel``), for the marks saves
    /// leave on their files (``SaveMark``).
    var journalIdentity: UInt64 = 0
    /// Which document each journal owner is (for `MaxSize=`, and for reports).
    var journalOwners: [UInt64: String] = [:]
    /// Bytes appended to the journal since its size was last looked at (for `MaxSize=`).
    @exclusivity(unchecked) var journalBytesSinceCheck = 0
    /// The latest LSN whose replies were held because the journal's write failed.
    var journalWaitIssued: UInt64 = 0
    /// Saves waiting for the end of the loop's pass (see ``runDeferredSaves(loopWillSleep:)``).
    var deferredSaves: [DeferredSave] = []
    /// Passes of a busy loop since the journal's sync was last started (see ``startJournalSync(loopWillSleep:)``).
    @exclusivity(unchecked) var journalBusyPasses = 0
    /// A pass wrote records whose sync has not been started yet; what the loop's flushes wrote through.
    @exclusivity(unchecked) var journalSyncPending = false
    @exclusivity(unchecked) var journalFlushedThrough: UInt64 = 0
    /// Saves started because the journal is past `MaxSize=` are running.
    var journalCompacting = false
    /// Set while one document's journalled edits are replayed: they were acknowledged, so
    /// they are applied (and saved) even where the ignore rules now match the path.
    @exclusivity(unchecked) var replayOverridesIgnore = false
    /// The documents the current round of ``compactIfNeeded(_:)`` waits for.
    var journalCompactionDocuments: Set<PathKey> = []
    var unjournalledEdits = 0
    var unjournalledTypes: Set<String> = []
    var lastReplay: JournalReplaySummary?

    /// The thread the store runs on, which also serves the control socket's connections.
    nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    /// The store's thread as a task executor: a task that prefers it
    /// (`withTaskExecutorPreference`, `Task(executorPreference:)`) calls the store without
    /// a hop between threads, as the control socket's connections do. From any other
    /// thread each call hops to the store's thread and back.
    public nonisolated var taskExecutor: any TaskExecutor { loop.taskExecutor }

    /// What the event loop's polls before sleeping (`[Control] BusyPoll=`) came to: how
    /// many found a request (or other work) before the time ran out, how many ran out,
    /// and the seconds spent polling.
    public nonisolated var busyPollFigures: (caught: UInt64, ranOut: UInt64, seconds: Double) {
        loop.busyPollFigures
    }

    /// Whether the event loop batches its reads and sends through io_uring
    /// (`[Control] IOUring=`): `in-use`, `off`, `unavailable` (with the kernel's errno) or
    /// `failed`; and the batches made and the calls in them.
    public nonisolated var ioURingSummary:
        (
            state: String, refusal: String?, receiveBatches: UInt64, receives: UInt64, sendBatches: UInt64,
            sends: UInt64
        )
    {
        let batched = loop.batched
        let figures = batched.figures
        return (
            batched.state.name, batched.unavailable?.name, figures.receiveBatches, figures.receives,
            figures.sendBatches, figures.sends
        )
    }

    /// Says when io_uring was asked for (`[Control] IOUring=yes`) and the kernel refused it.
    private nonisolated static func logIOURing(_ batched: BatchedIO, log: Logger) {
        guard batched.state == .unavailable else { return }
        let reason = batched.unavailable.map { "\($0)" } ?? "unknown"
        log.notice(
            "io_uring is unavailable: \(reason); the event loop makes a system call for each client's read and reply ([Control] IOUring=)"
        )
    }

    deinit {
        if let watcher { loop.forget(watcher.descriptor) }
        watcher?.stop()
        saveThreads.stop()
        loop.stop()
    }

    public init(configuration: Configuration, registry: DocumentTypeRegistry? = nil, log: Logger = Logger()) {
        do {
            loop = try EventLoop(ioURing: configuration.ioURing)
        } catch {
            fatalError("cannot create the store's event loop (epoll and eventfd): \(error)")
        }
        // A root given relative is made absolute once (see ``Configuration/absoluteRoot()``).
        var configuration = configuration
        configuration.absoluteRoot()
        self.configuration = configuration
        loop.setBusyPoll(configuration.busyPoll)
        scheduleDelays = Self.delays(of: configuration)
        refusesEditsWhenSaveFails = configuration.refuseEditsWhenSaveFails
        root = configuration.root
        writer = DurableWriter(symlinkPolicy: .refuse, keepsWrittenContents: false, confinedTo: configuration.root)
        self.registry = registry ?? DocumentTypeRegistry(packageExtensions: configuration.packageExtensions)
        self.log = log
        Self.logIOURing(loop.batched, log: log)
        ignore = SharedIgnoreRules(IgnoreRules(configuration: configuration))
        // Set on the loop's thread, the only one that reads it.
        let loop = loop
        loop.execute { [weak self] in
            loop.beforePolling = { [weak self] willSleep in
                self?.isolatedHere { $0.loopWillPoll(willSleep: willSleep) } ?? false
            }
            loop.afterReplies = { [weak self] in
                self?.isolatedHere { store in
                    store.writeJournalAfterReplies()
                    store.writeLogsAfterReplies()
                }
            }
        }
    }

    /// Writes the log entries left for after the pass's replies: a client waiting for a
    /// save hears of it before the entry that records it is formatted and sent to
    /// journald.
    func writeLogsAfterReplies() {
        guard !logsAfterReplies.isEmpty else { return }
        var logs: [() -> Void] = []
        swap(&logs, &logsAfterReplies)
        for log in logs { log() }
    }

    /// The end of a pass of the loop, before it polls (see ``EventLoop/beforePolling``):
    /// the saves and the journal's sync left to it start. Returns whether it did work
    /// whose replies are queued.
    func loopWillPoll(willSleep: Bool) -> Bool {
        if runDeferredSaves(loopWillSleep: willSleep) { return true }
        return startJournalSync(loopWillSleep: willSleep)
    }

    // MARK: Configuration

    /// Applies a reloaded configuration. The root cannot change while running.
    public func reconfigure(_ new: Configuration) {
        var applied = new
        if new.root != configuration.root {
            log.warning("Root= changed to \(new.root); the store keeps \(root) until the daemon is restarted")
            applied.root = root
        }
        for key in Self.keepStartValues(of: &applied, from: configuration) {
            log.warning("\(key) changed; the running value is kept until the daemon is restarted")
        }
        let old = configuration
        configuration = applied
        loop.setBusyPoll(applied.busyPoll)
        if applied.ioURing != old.ioURing || loop.batched.state == .failed {
            loop.setIOURing(applied.ioURing) { [log] in Self.logIOURing($0, log: log) }
        }
        for path in entries.keys where entries[path]!.isDirty { schedule(path) }
        wake()
        if old.ignoreDefaults != applied.ignoreDefaults || old.ignore != applied.ignore
            || old.ignoreFile != applied.ignoreFile
        {
            var rules = IgnoreRules(configuration: applied)
            rules.readFiles(root: root, registry: registry)
            ignore.replace(rules)
            ignoreRulesChanged()
        }
        let watcherRestarts =
            old.watchEnabled != applied.watchEnabled || old.pollInterval != applied.pollInterval
            || old.watchMode != applied.watchMode
        // Turned on: the files that appeared while it was off are opened, as a start would.
        if !old.openNewFiles, applied.openNewFiles, !watcherRestarts, watcher != nil {
            openAll(readingIgnoreFiles: false)
        }
        if watcherRestarts {
            stopWatching()
            guard applied.watchEnabled else { return }
            do {
                try startWatching()
                rescan()  // changes made while nothing watched
            } catch {
                log.error("cannot watch \(root) for changes by other programs: \(error)")
            }
        }
    }

    /// Puts back into `applied` the settings read only at start-up — the journal was
    /// opened with them, the document types built from them, the control socket and the
    /// metrics writer started with them — so that the store's configuration (and
    /// `status`) says what runs. Returns the keys whose new values were not taken.
    static func keepStartValues(of applied: inout Configuration, from running: Configuration) -> [String] {
        var kept: [String] = []
        func keep<Value: Equatable>(_ key: String, _ path: WritableKeyPath<Configuration, Value>) {
            guard applied[keyPath: path] != running[keyPath: path] else { return }
            applied[keyPath: path] = running[keyPath: path]
            kept.append(key)
        }
        keep("[Store] PackageExtensions=", \.packageExtensions)
        keep("[Journal] Mode=", \.journalMode)
        keep("[Journal] SyncInterval=", \.journalSyncInterval)
        keep("[Journal] Directory=", \.journalDirectorySetting)
        keep("[Control] Socket=", \.socketPath)
        keep("[Control] SocketMode=", \.socketMode)
        keep("[Control] AllowUsers=", \.allowUsers)
        keep("[Control] AllowGroups=", \.allowGroups)
        keep("[Control] MaxConnections=", \.maxConnections)
        keep("[Control] MaxRequestSize=", \.maxRequestSize)
        keep("[Control] ExportDirectories=", \.exportDirectories)
        keep("[Metrics] TextfileDirectory=", \.metricsTextfileDirectory)
        keep("[Metrics] Interval=", \.metricsInterval)
        return kept
    }

    // MARK: Opening and creating

    /// Opens every document under the root (files by extension, package directories
    /// whole); returns the problems met, each naming its path. Symbolic links are not
    /// followed: a document is a file or directory under the root.
    @discardableResult
    public func openAll() -> [String] { openAll(readingIgnoreFiles: true) }

    /// ``openAll()``, reading the ignore files under the root afresh unless told not to:
    /// each directory's as the scan enters it, so that it applies to what the scan finds
    /// there and below (the tree is walked once). The rules of a directory not entered yet
    /// stay in force meanwhile (the watcher, on its own thread, never sees a moment
    /// without them); those of directories the scan did not enter are dropped after it.
    @discardableResult
    func openAll(readingIgnoreFiles: Bool) -> [String] {
        var problems: [String] = []
        var visited: Set<PathKey>? = readingIgnoreFiles ? [] : nil
        scan(relative: "", problems: &problems, visited: &visited)
        if let visited, !ignore.current.files.keys.allSatisfy(visited.contains) {
            var rules = ignore.current
            rules.forgetFiles(except: visited)
            ignore.replace(rules)
        }
        return problems
    }

    /// Opens the documents under the directory `relative`.
    func scan(directory relative: String) {
        var problems: [String] = []
        var visited: Set<PathKey>? = nil
        scan(relative: relative, problems: &problems, visited: &visited)
        for problem in problems { log.debug("not opened: \(problem)") }
    }

    /// With `visited`, the ignore file of each directory entered is read as the scan
    /// enters it, and the directory added to `visited`.
    private func scan(relative: String, problems: inout [String], visited: inout Set<PathKey>?) {
        if visited != nil {
            visited!.insert(PathKey(relative))
            var rules = ignore.current
            if rules.setFile(relative, rules.readFile(in: relative, root: root)) { ignore.replace(rules) }
        }
        let directoryPath = relative.isEmpty ? root : root + "/" + relative
        let entries: [DirectoryEntry]
        do {
            // The root itself may be a symbolic link (DynamicUser= makes /var/lib/autosaved one);
            // below it, links are never followed.
            let fd = try FileDescriptor.open(
                directoryPath, options: relative.isEmpty ? [.directory] : [.directory, .noFollow])
            entries = try fd.closeAfter { () throws(Errno) -> [DirectoryEntry] in try fd.directoryEntries() }
        } catch {
            problems.append("\(directoryPath): cannot be listed: \(error)")
            return
        }
        for entry in entries.sorted(by: { $0.name < $1.name })
        where !TemporaryName.isTemporary(entry.name) && !entry.name.hasPrefix(Self.syncCookiePrefix) {
            let path = relative.isEmpty ? entry.name : relative + "/" + entry.name
            // Already open: its in-memory state (unsaved edits included) stays.
            if self.entries.index(forKey: path) != nil { continue }
            let kind = entry.kind ?? (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + path))?.kind
            if ignore.ignoring(path, isDirectory: kind == .directory) != nil {
                ignoredPaths.insert(PathKey(path))
                continue
            }
            switch kind {
            case .directory:
                if registry.isPackage(entry.name) {
                    do { try load(path) } catch { problems.append("\(path): \(error)") }
                } else {
                    scan(relative: path, problems: &problems, visited: &visited)
                }
            case .regular:
                do { try load(path) } catch { problems.append("\(path): \(error)") }
            default:
                continue
            }
        }
    }

    /// Reads the document at `path` from disk into the store.
    @discardableResult
    func load(_ path: String) throws(StoreError) -> Entry {
        let entry = try loadEntry(path)
        insert(entry, at: path)
        emit(.opened(document: path))
        return entry
    }

    /// Refuses a path inside a package document (`book.package/ch/1.txt`): the package's
    /// files are its members, edited through it; a second document over the same file
    /// would have two owners saving it.
    private func refuseInsidePackage(_ path: String) throws(StoreError) {
        // Each directory of the path in turn (no array of components: most paths have none).
        let utf8 = path.utf8
        var start = utf8.startIndex
        while let slash = utf8[start...].firstIndex(of: UInt8(ascii: "/")) {
            if registry.isPackage(String(Substring(utf8[start..<slash]))) {
                let package = String(Substring(utf8[..<slash]))
                throw .invalidPath(
                    path, reason: "it lies inside the package document '\(package)', whose files are its members")
            }
            start = utf8.index(after: slash)
        }
    }

    /// Refuses a new document whose file could never be written: one of its directories
    /// is a document or a file (`notes.txt/x`), or it would be a file where open documents
    /// need a directory (`notes` while `notes/a.txt` is open). Its saves would fail until
    /// shutdown and its edits be lost.
    private func refuseClash(_ path: String) throws(StoreError) {
        var end = path.utf8.startIndex
        while let slash = path.utf8[end...].firstIndex(of: UInt8(ascii: "/")) {
            let directory = String(Substring(path.utf8[..<slash]))
            if entries.index(forKey: directory) != nil {
                throw .invalidPath(path, reason: "'\(directory)' is a document, not a directory")
            }
            // The directory of open documents needs no look at the disk: the store takes it
            // for one already (were it replaced by a file, their saves would say so).
            if directoryUses[PathKey(directory)] == nil,
                let status = try? FileDescriptor.currentWorkingDirectory.status(
                    of: root + "/" + directory, followSymlinks: false), status.kind != .directory
            {
                throw .invalidPath(path, reason: "'\(directory)' is not a directory")
            }
            end = path.utf8.index(after: slash)
        }
        if directoryUses[PathKey(path)] != nil {
            throw .invalidPath(path, reason: "it is the directory of open documents")
        }
    }

    /// Reads the document at `path` from disk, without adding it to the store.
    func loadEntry(_ path: String) throws(StoreError) -> Entry {
        // The new name of a document's file renamed during its save: the document is
        // to follow it there (not a second document over the same file).
        if !heldRenames.isEmpty, let source = heldRename(to: path) {
            throw .unsupported(
                path,
                message:
                    "another program renamed \(source) to it while that document's save was being written; the document follows its file there once the save is done"
            )
        }
        try refuseInsidePackage(path)
        // A file another program made at a longer path than a request may name: not a
        // document (it could be edited, but never read, saved on request or closed).
        if path.utf8.count > DocumentPath.maxBytes {
            throw .invalidPath(
                String(decoding: path.utf8.prefix(64), as: UTF8.self) + "…",
                reason:
                    "the path is \(path.utf8.count) bytes long, over the \(DocumentPath.maxBytes) a document's may be; not opened"
            )
        }
        let fullPath = root + "/" + path
        let status: FileStatus
        do { status = try FileDescriptor.currentWorkingDirectory.status(of: fullPath) } catch {
            try refuseIgnored(path, isDirectory: registry.isPackage(PathName.lastComponent(path)))
            if error == .noSuchFile { throw .notFound(path) }
            throw .io(DocumentError(operation: .stat, path: fullPath, errno: error))
        }
        try refuseIgnored(path, isDirectory: status.kind == .directory)
        guard status.kind == .regular || status.kind == .directory else {
            throw .unsupported(path, message: "only regular files and package directories are documents")
        }
        let name = PathName.lastComponent(path)
        guard let registration = registry.registration(forName: name, isDirectory: status.kind == .directory) else {
            throw .unsupported(path, message: "a directory is a document only with a package extension")
        }
        let file: FileWrapper
        // A regular file is read now (its type's init reads it anyway): a file this process
        // may not read is refused with the errno, not taken for an empty document that a
        // save would then write over. A package's members stay lazy.
        let reading: FileWrapper.ReadingOptions = status.kind == .regular ? .immediate : []
        do {
            file = try FileWrapper(url: URL(fileURLWithPath: fullPath), options: reading, beneath: root)
        } catch let error
            as DocumentError
        {
            throw .io(error)
        } catch {
            throw .invalidDocument(path, message: "\(error)")
        }
        let document: any AutosaveDocument
        do {
            document = try registration.documentType.init(
                configuration: .init(contentType: registration.contentType, file: file))
        } catch let error as DocumentError {
            throw .io(error)
        } catch {
            throw .invalidDocument(path, message: "\(error)")
        }
        var entry = Entry(
            contentType: registration.contentType, isPackage: registration.isPackage, document: document,
            existingFile: file)
        entry.fingerprint = Fingerprint(status, contents: file.isRegularFile ? file.regularFileContents : nil)
        // The document holds its value; the wrapper need not hold the bytes a second time.
        file.releaseContents()
        return entry
    }

    /// Adds a document the store did not hold.
    @discardableResult
    func insert(_ entry: Entry, at path: String) -> EntryTable.Slot {
        let (replaced, slot) = entries.insert(entry, forKey: path)
        if replaced == nil { countDirectories(of: path, by: 1) }
        return slot
    }

    /// Forgets a document; returns what it held. Its journal records are released
    /// unless it only moves (`keepingJournal`).
    @discardableResult
    func remove(_ path: String, keepingJournal: Bool = false) -> Entry? {
        guard var entry = entries.removeValue(forKey: path) else { return nil }
        countDirectories(of: path, by: -1)
        // Its file may stay (a document closed): its name in its directory is not free.
        if !knownDirectories.isEmpty { noteInTheWay(path) }
        let key = PathKey(path)
        if !ownRenames.isEmpty { ownRenames.removeValue(forKey: key) }
        if !heldRenames.isEmpty { heldRenames.removeValue(forKey: key) }
        if !movesOntoHeld.isEmpty {
            for (name, waiting) in movesOntoHeld where PathKey(waiting) == key {
                movesOntoHeld.removeValue(forKey: name)
            }
        }
        if !journalCompactionDocuments.isEmpty { journalCompactionDocuments.remove(key) }
        if !keepingJournal { journalDiscard(&entry, closing: true) }
        return entry
    }

    private func countDirectories(of path: String, by change: Int) {
        var end = path.utf8.startIndex
        while let slash = path.utf8[end...].firstIndex(of: UInt8(ascii: "/")) {
            let directory = PathKey(String(Substring(path.utf8[..<slash])))
            if change > 0 {
                directoryUses[directory, default: 0] += change  // one lookup, in place
            } else {
                let count = (directoryUses[directory] ?? 0) + change
                directoryUses[directory] = count > 0 ? count : nil
            }
            end = path.utf8.index(after: slash)
        }
    }

    /// Whether the store holds the document at `path` (exactly as given).
    public func isOpen(_ path: String) -> Bool { entries.index(forKey: path) != nil }

    /// Opens the document at `path` if it is not open yet.
    @discardableResult
    public func open(_ path: String) throws(StoreError) -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        if entries.index(forKey: path) == nil { try load(path) }
        return info(path, entries[path]!)
    }

    /// Creates a new, empty document at `path` (its type from the extension); it is
    /// saved like any edit. Fails if the document exists in memory or on disk.
    @discardableResult
    public func create(_ path: String) throws(StoreError) -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        guard accepting else { throw .shuttingDown }
        try checkJournalWritable()
        if case .invalidPath = missing(path) { throw missing(path) }
        if entries.index(forKey: path) != nil
            || (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + path)) != nil
        {
            throw .alreadyExists(path)
        }
        try makeNew(path)
        writeJournal()
        return info(path, entries[path]!)
    }

    private func makeNew(_ path: String) throws(StoreError) {
        var entry = try newEntry(path)
        journalCreation(&entry, path: path)
        insert(entry, at: path)
        noteEdit(path)
        emit(.opened(document: path))
    }

    /// A new, empty document for `path`, not yet in the store.
    func newEntry(_ path: String) throws(StoreError) -> Entry {
        // In a directory that holds open documents, that directory and every one above it
        // were found good when those documents were opened: none is a package or a
        // document. Only the name itself is looked at then, for those (one lookup, where a
        // burst of new documents in one directory would look at every directory of every
        // path again). The ignore rules look at the directories themselves (they remember
        // the last directory they found not ignored): a document that became ignored stays
        // open until its unsaved edits are saved.
        let directoryKnown = directoryHoldsDocuments(path)
        if !directoryKnown { try refuseInsidePackage(path) }
        let name = PathName.lastComponent(path)
        let registration = registry.registration(forNewName: name)
        try refuseIgnored(path, isDirectory: registration.isPackage)
        if directoryKnown {
            if directoryUses[PathKey(path)] != nil {
                throw .invalidPath(path, reason: "it is the directory of open documents")
            }
        } else {
            try refuseClash(path)
        }
        let empty: any AutosaveDocument
        do {
            empty = try Self.emptyDocument(registration)
        } catch {
            throw .unsupported(path, message: "cannot create an empty \(registration.contentType) document: \(error)")
        }
        var entry = Entry(
            contentType: registration.contentType, isPackage: registration.isPackage, document: empty, existingFile: nil
        )
        entry.changeCount = 1
        return entry
    }

    /// Refuses a path the ignore rules keep from being a document, naming the rule.
    func refuseIgnored(_ path: String, isDirectory: Bool) throws(StoreError) {
        guard !replayOverridesIgnore, let pattern = ignore.ignoring(path, isDirectory: isDirectory) else { return }
        throw .invalidPath(path, reason: "it is ignored: it matches \(pattern)")
    }

    /// Whether `path`'s directory (not the root) holds open documents
    /// (``directoryUses``): a path with no directory has none to know.
    private func directoryHoldsDocuments(_ path: String) -> Bool {
        guard let directory = Self.directory(of: path) else { return false }
        return directoryUses[PathKey(directory)] != nil
    }

    /// `path`'s directory relative to the root, or `nil` for a name in the root itself.
    static func directory(of path: String) -> String? {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        return String(Substring(path.utf8[..<slash]))
    }

    /// The error for a request naming a document the store does not hold: `invalid-path`
    /// naming the rule for an ignored path, `not-found` otherwise.
    func missing(_ path: String) -> StoreError {
        let isDirectory =
            (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + path, followSymlinks: false))?.kind
            == .directory
        do { try refuseIgnored(path, isDirectory: isDirectory) } catch { return error }
        return .notFound(path)
    }

    static func emptyDocument(_ registration: DocumentTypeRegistry.Registration) throws -> any AutosaveDocument {
        // The built-in types' empty documents directly, without reading an empty file.
        if registration.documentType == JSONDocument.self { return JSONDocument(value: .object([])) }
        if registration.documentType == PlainTextDocument.self { return PlainTextDocument(text: "") }
        let file =
            registration.isPackage
            ? FileWrapper(directoryWithFileWrappers: [:]) : FileWrapper(regularFileWithContents: Data())
        return try registration.documentType.init(
            configuration: .init(contentType: registration.contentType, file: file))
    }

    // MARK: Editing and reading

    /// Applies `edit` to the document at `path`, opening it from disk if needed; with
    /// `create`, a document that does not exist is created (type from its extension).
    ///
    /// With the journal on, the edit's record is written before this returns. Should that
    /// write fail (a full disk), the edit stays applied and the journal writes the record
    /// again on its own: until it has, the edit is protected from a crash only by its
    /// document's save, ``journalSummary``'s `failure` names the problem, and later edits
    /// (and reverts) are refused with ``StoreError/journalFailing(_:)``. An edit larger
    /// than a journal record may be is refused with ``StoreError/tooLargeForJournal(bytes:limit:)``.
    @discardableResult
    public func apply(_ edit: DocumentEdit, to path: String, create: Bool = false) throws(StoreError) -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        guard accepting else { throw .shuttingDown }
        try checkJournalTakes(edit)
        // The record is written before the caller hears of the edit, as the socket's replies are.
        defer { writeJournal() }
        if let index = entries.index(forKey: path) {
            return try apply(edit, at: index, path: path).info(path: path)
        }
        return try applyUnopened(edit, path: path, create: create).info(path: path)
    }

    /// ``apply(_:to:create:)`` for the control socket: `path` as the request gave it (checked
    /// here unless the store holds a document under exactly that name, which was checked
    /// when it was opened), `unopened` asked first about a document the store does not hold
    /// yet (the socket checks the path on disk then). Returns the outcome and the path the
    /// document has (`path` in its checked form). An edit of any open document needs one
    /// lookup by its path.
    func apply(
        _ edit: DocumentEdit, named path: String, create: Bool, unopened: some UnopenedPathCheck
    ) throws -> (outcome: EditOutcome, path: String) {
        let existing = entries.index(forKey: path)
        let valid = existing == nil ? try DocumentPath.validate(path) : path
        guard accepting else { throw StoreError.shuttingDown }
        try checkJournalTakes(edit)
        if let existing { return (try apply(edit, at: existing, path: path), path) }
        if valid != path, let existing = entries.index(forKey: valid) {
            return (try apply(edit, at: existing, path: valid), valid)
        }
        let exists: Bool
        if create, isInMissingDirectory(valid) || isNewInKnownDirectory(valid) {
            exists = false
        } else {
            exists = try unopened.checkUnopened(valid: valid)
            if create, !exists { noteNothingFound(at: valid, unopened: unopened) }
        }
        return (try applyUnopened(edit, path: valid, create: create, knownMissing: !exists), valid)
    }

    /// ``apply(_:named:create:unopened:)`` for a document the socket found in the table by
    /// its path's bytes (``EntryTable/index(forBytes:)``): `path` is the table's own key.
    func apply(_ edit: DocumentEdit, openedAt index: EntryTable.Index, path: String) throws -> EditOutcome {
        guard accepting else { throw StoreError.shuttingDown }
        try checkJournalTakes(edit)
        return try apply(edit, at: index, path: path)
    }

    /// Applies `edit` to a document the store does not hold: read from disk (or, with
    /// `create`, made new), edited, and only then added. A refused edit leaves the store
    /// as it was: no document opened or created, no event.
    private func applyUnopened(
        _ edit: DocumentEdit, path: String, create: Bool, knownMissing: Bool = false
    ) throws(StoreError) -> EditOutcome {
        var entry: Entry
        if knownMissing, create {
            // Nothing was at the path a moment ago: no second look (a file made meanwhile
            // is caught by the save, which expects to find none).
            entry = try newEntry(path)
        } else {
            do { entry = try loadEntry(path) } catch .notFound(let missing) {
                guard create else { throw .notFound(missing) }
                entry = try newEntry(path)
            }
        }
        let baseContents = journal == nil ? nil : journalBaseContents(entry, for: edit)
        let member = journal == nil || !entry.isPackage ? nil : journalMemberBefore(entry, path: path, for: edit)
        do {
            try entry.document.apply(edit, existingFile: entry.existingFile)
        } catch {
            throw Self.storeError(error, path: path)
        }
        entry.changeCount += 1
        editCounts.count(edit.command)
        journalEdit(&entry, path: path, edit, baseContents: baseContents, member: member)
        let slot = insert(entry, at: path)
        emit(.opened(document: path))
        let now = Moment.now
        let delays = scheduleDelays
        let (outcome, decision) = slot.modify { entry in
            let decision = Self.recordEdit(&entry, now: now, delays: delays)
            return (self.outcome(entry, now: now), decision)
        }
        if let decision { queue(path, decision) }
        return outcome
    }

    /// Applies `edit` to the entry at `index` and schedules its save: one access to the
    /// entry for the whole edit, the path every edit takes.
    private func apply(
        _ edit: DocumentEdit, at index: EntryTable.Index, path: String
    ) throws(StoreError) -> EditOutcome {
        let refuse = refusesEditsWhenSaveFails
        let delays = scheduleDelays
        let now = Moment.now
        let (described, decision) = try modifyEntry(at: index) {
            (entry) throws(StoreError) -> (EditOutcome, (deadline: Moment, push: Bool)?) in
            if refuse, let failure = entry.failure { throw .refusedWhileSaveFails(failure) }
            let baseContents = entry.journalHasBase || journal == nil ? nil : journalBaseContents(entry, for: edit)
            let member = journal == nil || !entry.isPackage ? nil : journalMemberBefore(entry, path: path, for: edit)
            do {
                try entry.document.apply(edit, existingFile: entry.existingFile)
            } catch {
                throw Self.storeError(error, path: path)
            }
            entry.changeCount += 1
            // Counted once applied: a refused edit is no edit (autosaved_edits_total).
            editCounts.count(edit.command)
            if journal != nil { journalEdit(&entry, path: path, edit, baseContents: baseContents, member: member) }
            let decision = Self.recordEdit(&entry, now: now, delays: delays)
            return (self.outcome(entry, now: now), decision)
        }
        if let decision { queue(path, decision) }
        return described
    }

    /// What a document's refusal of an edit or query means for the store's callers.
    private static func storeError(_ error: any Error, path: String) -> StoreError {
        if let error = error as? DocumentError { return .io(error) }
        guard let error = error as? DocumentContentError else { return .invalidDocument(path, message: "\(error)") }
        switch error.kind {
        case .unsupported: return .unsupported(path, message: error.message)
        case .notFound: return .notFoundInside(path, message: error.message)
        case .invalid: return .invalidDocument(path, message: error.message)
        }
    }

    /// Changes the document at `path` through its Swift type (for library users with
    /// their own document types).
    public func modify<D: AutosaveDocument, R: Sendable>(
        _ path: String, as type: D.Type, _ body: @Sendable (inout D) throws -> R
    ) throws -> R {
        let path = try DocumentPath.validate(path)
        guard accepting else { throw StoreError.shuttingDown }
        let opened = entries.index(forKey: path) == nil
        let entry = opened ? try loadEntry(path) : entries[path]!
        guard var document = entry.document as? D else {
            throw StoreError.unsupported(path, message: "the document is not a \(D.self)")
        }
        let result = try body(&document)
        if opened {
            insert(entry, at: path)
            emit(.opened(document: path))
        }
        entries[path]!.document = document
        entries[path]!.changeCount += 1
        journalUnjournalled(&entries[path]!)
        noteEdit(path)
        return result
    }

    /// Answers `query` about the document at `path`, opening it from disk if needed.
    public func read(_ path: String, _ query: DocumentQuery = .contents) throws(StoreError) -> QueryResult {
        let path = try DocumentPath.validate(path)
        // A document not open yet is opened only if the query can be answered: a refused
        // query leaves the store as it was.
        let opened = entries.index(forKey: path) == nil
        let entry = opened ? try loadEntry(path) : entries[path]!
        let result: QueryResult
        do {
            result = try entry.document.read(query, existingFile: entry.existingFile)
        } catch {
            throw Self.storeError(error, path: path)
        }
        if opened {
            insert(entry, at: path)
            emit(.opened(document: path))
        }
        return result
    }

    /// The document's value as its Swift type.
    public func document<D: AutosaveDocument>(_ path: String, as type: D.Type) throws -> D {
        let path = try DocumentPath.validate(path)
        let opened = entries.index(forKey: path) == nil
        let entry = opened ? try loadEntry(path) : entries[path]!
        guard let document = entry.document as? D else {
            throw StoreError.unsupported(path, message: "the document is not a \(D.self)")
        }
        if opened {
            insert(entry, at: path)
            emit(.opened(document: path))
        }
        return document
    }

    /// Reads an open document from disk again, keeping its counters (the file now holds
    /// every change made so far); on failure the document stays as it was. Callers of
    /// `save(_:wait:)` still waiting for edits that are now gone are answered with
    /// `superseded` and `reason` (what happened to those edits).
    func reread(_ path: String, reason: @autoclosure () -> String) throws(StoreError) {
        guard let old = entries[path] else { throw missing(path) }
        var entry = try loadEntry(path)
        entry.changeCount = old.changeCount
        entry.savedChangeCount = old.changeCount
        entry.saves = old.saves
        entry.lastSaved = old.lastSaved
        entry.journalOwner = old.journalOwner
        entry.lastJournalLSN = old.lastJournalLSN
        entry.journalLog = old.journalLog
        journalDiscard(&entry)
        entries[path] = entry
        if !old.waiters.isEmpty { failWaiters(old, .superseded(path, message: reason())) }
    }

    /// Answers every caller still waiting for `entry`'s edits to be saved with `error`
    /// (the entry was replaced or removed, so no save of theirs will come).
    func failWaiters(_ entry: Entry, _ error: StoreError) {
        for waiter in entry.waiters { waiter.continuation.resume(throwing: error) }
    }

    /// Throws away unsaved edits and reads the document from disk again.
    public func revert(_ path: String) throws(StoreError) -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        guard let old = entries[path] else { throw missing(path) }
        if old.savingToken != nil {
            throw .unsupported(path, message: "a save is being written; revert once it is done")
        }
        // Refused like an edit while the journal cannot write: the mark that releases the
        // discarded edits could not be written, and replay would bring them back.
        try checkJournalWritable()
        do {
            try reread(path, reason: "the edits were discarded by revert before they were saved")
        } catch .notFound {
            throw .noFileToRevertTo(path)
        }
        return info(path, entries[path]!)
    }

    /// Saves the document if it has unsaved edits, then forgets it.
    public func close(_ path: String) async throws {
        let path = try DocumentPath.validate(path)
        guard entries.index(forKey: path) != nil else { throw missing(path) }
        try await save(path, wait: true)
        if let index = entries.index(forKey: path), modifyEntry(at: index, { !$0.isDirty && $0.savingToken == nil }) {
            let closed = remove(path)
            rememberClosed(path, closed)
            emit(.closed(document: path))
        }
    }

    // MARK: Explicit saves

    /// Saves the document now. With `wait`, returns once the edits made before this call
    /// are durable on disk (or throws the save's failure).
    public func save(_ path: String, wait: Bool) async throws {
        _ = try await save(path, wait: wait, onSaved: nil)
    }

    /// ``save(_:wait:)``, whose waiting caller is told the moment its edits are durable:
    /// `onSaved` runs on the store with the document's description, inside the save's
    /// completion, before the rest of its bookkeeping — not a task resumption later. How
    /// the control socket answers a `save` with `wait`: the reply goes out while the
    /// save's completion goes on. Returns whether `onSaved` ran (`false`: nothing needed
    /// saving, or no waiting).
    func save(_ path: String, wait: Bool, onSaved: (@Sendable (DocumentInfo) -> Void)?) async throws -> Bool {
        let path = try DocumentPath.validate(path)
        guard let index = entries.index(forKey: path) else { throw missing(path) }
        // One lookup, the entry changed in place (a copy of it would retain its every reference).
        let token = modifyEntry(at: index) { entry -> UInt64? in
            guard entry.isDirty else { return nil }
            entry.forcedToken = max(entry.forcedToken ?? 0, entry.changeCount)
            entry.retryAt = nil
            return entry.changeCount
        }
        guard let token else { return false }
        guard wait else {
            schedule(path)
            // Due now: started here, without waiting for the scheduler's turn.
            processDue()
            return false
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            // The waiter first: a save somebody waits for may run on the loop
            // (``runDeferredSaves(loopWillSleep:)``). Nothing ran since the lookup above.
            entries[index].waiters.append((token, continuation, onSaved))
            schedule(path)
            processDue()
        }
        // Resumed without an error only by the save that covered `token`, which called `onSaved`.
        return onSaved != nil
    }

    /// Saves every document with unsaved edits; with `wait`, returns once all are durable.
    /// Throws the first failure after every save has finished.
    public func saveAll(wait: Bool) async throws {
        var firstError: (any Error)?
        // A document can move while the others are waited for (a rename by another
        // program, followed once its save is done): one still dirty under a name not
        // waited for, with no failure of its own, is saved in another round.
        for round in 0..<3 {
            let dirty = entries.filter { $0.value.isDirty && (round == 0 || $0.value.failure == nil) }.map(\.key)
            if dirty.isEmpty { break }
            for path in dirty {
                do { try await save(path, wait: false) } catch { firstError = firstError ?? error }
            }
            guard wait else { return }
            for path in dirty where entries.index(forKey: path) != nil {
                do { try await save(path, wait: true) } catch { firstError = firstError ?? error }
            }
            if firstError != nil { break }
        }
        if let firstError { throw firstError }
    }

    // MARK: Shutdown

    /// What a shutdown flush did.
    public struct ShutdownReport: Sendable {
        public var saved: Int
        /// Documents whose edits could not be saved, with why.
        public var unsaved: [SaveFailure]
    }

    /// Stops accepting edits and saves every dirty document, retrying failures up to
    /// `attempts` times; returns what could not be saved.
    public func shutdown(attempts: Int = 3) async -> ShutdownReport {
        accepting = false
        let before = totalSaves
        for attempt in 1...max(1, attempts) {
            do {
                try await saveAll(wait: true)
                break
            } catch {
                if attempt == attempts { break }
                try? await Task.sleep(for: configuration.retryInterval)
            }
        }
        let failures = entries.values.filter { $0.isDirty }.compactMap(\.failure)
        return ShutdownReport(saved: totalSaves - before, unsaved: failures)
    }

    public var isAcceptingEdits: Bool { accepting }

    /// Answers at once; a store that cannot (its actor is stuck) stops the watchdog pings.
    public func heartbeat() {}

    // MARK: Reporting

    /// The same as `info(path, entries[path]!)`, without copying the entry out.
    func info(_ path: String, at index: EntryTable.Index) -> DocumentInfo {
        modifyEntry(at: index) { entry in info(path, entry) }
    }

    func info(_ path: String, _ entry: Entry, now: Moment = .now) -> DocumentInfo {
        outcome(entry, now: now).info(path: path)
    }

    func outcome(_ entry: Entry, now: Moment) -> EditOutcome {
        EditOutcome(
            contentType: entry.contentType, state: state(of: entry, now: now), changeCount: entry.changeCount,
            savedChangeCount: entry.savedChangeCount, lastSaved: entry.lastSaved, saves: entry.saves)
    }

    func state(of entry: Entry, now: Moment = .now) -> SaveState {
        if entry.savingToken != nil { return .saving }
        guard entry.isDirty else { return .clean }
        if let failure = entry.failure { return .failed(failure) }
        if let deadline = entry.deadline { return .scheduled(date(of: deadline, now: now)) }
        return .dirty
    }

    func date(of moment: Moment, now: Moment = .now) -> Date {
        Date(timeIntervalSince1970: Double(moment.nanoseconds) / 1e9 + wallClockOffset(now: now))
    }

    /// Seconds from the store's clock to the wall clock (`Date`), measured again when
    /// older than a second: a description needs it for its `save_at`, and reading both
    /// clocks for every edit cost more than the rest of the scheduling.
    func wallClockOffset(now: Moment) -> Double {
        if now.nanoseconds - clockOffset.measuredAt.nanoseconds > 1_000_000_000
            || clockOffset.measuredAt.nanoseconds == 0
        {
            clockOffset = (now, Date().timeIntervalSince1970 - Double(now.nanoseconds) / 1e9)
        }
        return clockOffset.seconds
    }

    /// The fingerprint of the document's file as last read or saved, `nil` before its first save.
    public func fingerprint(_ path: String) throws(StoreError) -> Fingerprint? {
        let path = try DocumentPath.validate(path)
        guard let entry = entries[path] else { throw missing(path) }
        return entry.fingerprint
    }

    /// The state of the document at `path`.
    public func info(_ path: String) throws(StoreError) -> DocumentInfo {
        let path = try DocumentPath.validate(path)
        guard let entry = entries[path] else { throw missing(path) }
        return info(path, entry)
    }

    /// Every open document, sorted by path.
    public func list() -> [DocumentInfo] {
        entries.keys.sorted().map { info($0, entries[$0]!) }
    }

    public func status() -> StoreStatus {
        var unsaved = 0
        var saving = 0
        var failed = 0
        for entry in entries.values {
            if entry.isDirty { unsaved += 1 }
            if entry.savingToken != nil { saving += 1 }
            if entry.isDirty && entry.failure != nil { failed += 1 }
        }
        return StoreStatus(
            documents: entries.count, unsaved: unsaved, saving: saving, failed: failed, saves: totalSaves,
            lastSave: lastSave, lastFailure: lastFailure, startedAt: startedAt,
            rootGoneSince: watcher?.rootMissingSince,
            unwatchedDirectories: watcher?.unwatchedDirectories.count ?? 0)
    }

    /// Events from now on, until the stream is dropped.
    public func events() -> AsyncStream<StoreEvent> {
        let (stream, continuation) = AsyncStream<StoreEvent>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let id = UUID()
        subscribers[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { await self?.unsubscribe(id) }
        }
        return stream
    }

    private func unsubscribe(_ id: UUID) { subscribers[id] = nil }

    /// Calls `observer` with every event from now on, on the store's thread, as the event
    /// happens (before the subscribers of ``events()`` hear of it). For bookkeeping that
    /// must see every event and costs little: it runs on the path of saves and edits.
    public func observe(_ observer: @escaping @Sendable (StoreEvent) -> Void) {
        observers.append(observer)
    }

    func emit(_ event: StoreEvent) {
        for observer in observers { observer(event) }
        for continuation in subscribers.values { continuation.yield(event) }
    }
}
