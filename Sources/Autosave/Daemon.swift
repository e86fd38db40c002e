import Control
import Dispatch
import Documents
import Foundation
import Journal
import Logging
import Posix
import Synchronization
import Systemd

/// The `autosaved` process: configuration, start-up recovery, the store and its
/// scheduler, signals (SIGTERM/SIGINT stop with a flush, SIGHUP reloads), exit codes.
/// The executable only calls ``run(arguments:environment:onReady:)``.
public enum Daemon {
    /// `sysexits.h` codes the daemon exits with.
    public enum ExitCode {
        public static let success: Int32 = 0
        /// Some edits could not be saved at shutdown (they are named in the log).
        public static let unsavedAtShutdown: Int32 = 1
        public static let usage: Int32 = 64
        public static let cannotCreate: Int32 = 73
        public static let configuration: Int32 = 78
    }

    public static let version = AutosaveVersion.current

    public static let usage = """
        OVERVIEW: autosaved keeps documents in memory and saves them in the background,
        debounced, atomically and durably.

        USAGE: autosaved [--config PATH] [--check-config]

        OPTIONS:
          --config PATH     Read the configuration from PATH (and PATH.d/*.conf)
                            instead of \(Configuration.defaultPath).
          --check-config    Validate the configuration, print the effective
                            configuration and exit (78 when it is invalid).
          --version         Print the version and exit.
          -h, --help        Show this help and exit.

        With no configuration file the embedded defaults apply: documents under
        $STATE_DIRECTORY, else $XDG_STATE_HOME/autosaved, else ./autosave-data.

        SIGNALS: SIGTERM and SIGINT save every unsaved edit, then exit 0 (1 if
        some could not be saved);
        SIGHUP reloads the configuration (a bad file is reported and the old
        configuration kept).
        """

    struct Options {
        var configPath: String?
        var checkConfig = false
        var help = false
        var version = false
    }

    static func parse(_ arguments: [String]) throws(ConfigurationError) -> Options {
        var options = Options()
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--config":
                guard let path = iterator.next(), !path.hasPrefix("--") else {
                    throw ConfigurationError(file: "autosaved", line: nil, message: "--config needs a path")
                }
                options.configPath = path
            case _ where argument.hasPrefix("--config="):
                options.configPath = String(argument.dropFirst("--config=".count))
            case "--check-config": options.checkConfig = true
            case "-h", "--help": options.help = true
            case "--version": options.version = true
            default:
                throw ConfigurationError(file: "autosaved", line: nil, message: "unknown argument '\(argument)'")
            }
        }
        return options
    }

    /// What the daemon sets for its whole process before it starts a thread: every thread
    /// allocates from one `malloc` arena (``Allocator/useOneArena(environment:)``; an
    /// operator's `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` arena limit is left as it is). The
    /// daemon's `main` calls it first; a program embedding the store makes its own choice.
    /// `fsync` of every directory above `path` (absolute), from `/` down: the entries
    /// of directories just made are durable.
    static func syncParents(of path: String) throws {
        var directory = PathName.parent(path)
        var chain: [String] = []
        while !directory.isEmpty {
            chain.append(directory)
            if directory == "/" { break }
            directory = PathName.parent(directory)
        }
        for directory in chain.reversed() {
            // One this process may pass through but not read (mode 0711) cannot be opened
            // to be synced: left as it is (it existed before; only what was made matters).
            guard let fd = try? FileDescriptor.open(directory, options: [.directory]) else { continue }
            try fd.closeAfter { () throws(Errno) in try fd.sync() }
        }
    }

    public static func prepareProcess() {
        Allocator.useOneArena()
        // A write to a pipe whose reader is gone (standard error piped to a program that
        // exited) fails with EPIPE instead of killing the daemon, unsaved edits and all.
        signal(SIGPIPE, SIG_IGN)
        // Descriptors up to the hard limit (systemd gives 1,024 soft, 524,288 hard): a
        // package's save holds a directory open at each level of its tree, and every
        // client holds one. The soft limit exists for programs using select(2); the
        // daemon uses epoll.
        let files = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        var limit = rlimit()
        if getrlimit(files, &limit) == 0, limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(files, &limit)
        }
    }

    /// Runs the daemon until SIGTERM or SIGINT and returns its exit code.
    ///
    /// - Parameter onReady: Called once the store is open and the scheduler runs (used
    ///   by harnesses that drive the store in-process).
    public static func run(
        arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
        onReady: (@Sendable (DocumentStore) async -> Void)? = nil
    ) async -> Int32 {
        func fail(_ message: String) { StderrLogHandler.writeToStandardError(Array("autosaved: \(message)\n".utf8)) }

        let options: Options
        do { options = try parse(arguments) } catch {
            fail(error.message)
            fail("see 'autosaved --help'")
            return ExitCode.usage
        }
        if options.help {
            print(usage)
            return ExitCode.success
        }
        if options.version {
            print("autosaved \(version)")
            return ExitCode.success
        }

        let configPath = options.configPath ?? Configuration.defaultPath
        var configuration: Configuration
        do {
            configuration = try Configuration.load(
                path: configPath, required: options.configPath != nil, environment: environment)
        } catch {
            for problem in error.errors { fail(problem.description) }
            return ExitCode.configuration
        }
        if options.checkConfig {
            print(configuration.rendered, terminator: "")
            // The ignore files under the root, as the daemon would read them now.
            var rules = IgnoreRules(configuration: configuration)
            rules.readFiles(
                root: configuration.root,
                registry: DocumentTypeRegistry(packageExtensions: configuration.packageExtensions))
            for directory in rules.fileDirectories {
                print("# \(directory.isEmpty ? "" : directory + "/")\(configuration.ignoreFile) (gitignore syntax):")
                for pattern in rules.files[PathKey(directory)]! { print("#   \(pattern.text)  (\(pattern.source))") }
            }
            return ExitCode.success
        }

        let levels = LogLevelSetting(configuration.logLevel)
        let log = Logger(level: .debug, handler: FilteringLogHandler(levels: levels, next: Self.logHandler()))
        let notifier = Notifier()
        func fatal(_ message: String, errno: Int32, exitCode: Int32) -> Int32 {
            fail(message)
            log.critical(message, ["message_id": MessageID.failedToStart])
            notifier.fatal(errno: errno, status: message)
            return exitCode
        }

        // Installed before the start-up work: a signal that arrives meanwhile is acted on once the store is ready.
        let signals = SignalStream([SIGTERM, SIGINT, SIGHUP])

        do {
            let existed = FileManager.default.fileExists(atPath: configuration.root)
            try FileManager.default.createDirectory(atPath: configuration.root, withIntermediateDirectories: true)
            // Made now: its entry (and those of any directory made with it) is durable
            // before a save in it is acknowledged.
            if !existed { try syncParents(of: configuration.root) }
        } catch {
            return fatal(
                "cannot create the store root \(configuration.root): \(error.localizedDescription)", errno: EACCES,
                exitCode: ExitCode.cannotCreate)
        }
        do {
            let recovery = try DurableWriter.recover(at: configuration.root)
            for path in recovery.restored {
                log.notice("recovery: finished an interrupted package save", ["path": path])
            }
            if !recovery.removed.isEmpty {
                log.notice("recovery: removed \(recovery.removed.count) temporary files left by an interrupted save")
            }
            for skipped in recovery.skipped {
                log.warning("recovery: skipped \(skipped.path): \(skipped)", ["path": skipped.path])
            }
        } catch {
            let code = (error as? DocumentError)?.errno.rawValue ?? EIO
            return fatal(
                "start-up recovery of \(configuration.root) failed: \(error)", errno: code,
                exitCode: ExitCode.cannotCreate)
        }

        let store = DocumentStore(configuration: configuration, log: log)
        for problem in await store.openAll() { log.warning("not opened: \(problem)") }
        // Before anything can edit: the journal's edits are applied again to what was just read.
        var replayed: JournalReplaySummary?
        do {
            replayed = try await store.openJournal()
        } catch let error as JournalOfAnotherRoot {
            return fatal("\(error)", errno: EEXIST, exitCode: ExitCode.configuration)
        } catch {
            let errno = (error as? JournalFailure)?.errno.rawValue ?? EIO
            if configuration.journalMode == .off {
                return fatal(
                    "cannot open the edit journal a run with [Journal] Mode= on left in \(configuration.journalDirectory), to replay its edits: \(error)",
                    errno: errno, exitCode: ExitCode.cannotCreate)
            }
            return fatal(
                "cannot open the edit journal in \(configuration.journalDirectory): \(error) ([Journal] Mode=off runs without it)",
                errno: errno, exitCode: ExitCode.cannotCreate)
        }
        if let replayed {
            let level: LogLevel = replayed.unapplied.isEmpty && replayed.problems.isEmpty ? .notice : .warning
            log.log(
                level, replayed.message,
                [
                    "message_id": MessageID.journalReplayed, "edits": "\(replayed.edits)",
                    "documents": "\(replayed.documents)", "records": "\(replayed.records)",
                    "duration_usec": "\(replayed.duration.microseconds)",
                ])
        }
        let scheduler = Task { await store.runScheduler() }
        if configuration.journalMode == .off, replayed != nil {
            // A journal a run with it on left: its edits, replayed, are saved before anything
            // else, and the journal is closed and emptied — this run journals nothing, and a
            // later run with it on must not find them again. Edits that cannot be saved keep
            // the daemon from starting: they stay in the journal.
            var failure: (any Error)?
            do { try await store.saveAll(wait: true) } catch { failure = error }
            // Emptied only when every document is saved (the segments removed while the
            // journal still holds its directory's lock).
            let closed = await store.closeJournal(removingSegments: failure == nil)
            if failure != nil || !closed.keptDocuments.isEmpty || closed.failure != nil {
                scheduler.cancel()
                let why = failure.map { "\($0)" } ?? closed.failure.map { "\($0)" } ?? "not saved"
                return fatal(
                    "[Journal] Mode=off, and the edits replayed from the journal a run with it on left in \(configuration.journalDirectory) could not all be saved (\(why)): not starting, so that the journal keeps them",
                    errno: EIO, exitCode: ExitCode.cannotCreate)
            }
            log.notice(
                "[Journal] Mode=off: the journal a run with it on left in \(configuration.journalDirectory) was replayed and its edits saved; it is emptied, and this run journals nothing",
                ["message_id": MessageID.journalReplayed, "path": configuration.journalDirectory])
        }
        if configuration.watchEnabled {
            do { try await store.startWatching() } catch {
                log.error("cannot watch \(configuration.root) for changes by other programs: \(error)")
            }
        }
        WritableDirectories.warn(configuration: configuration, log: log)
        let reloader = Reloader(
            path: configPath, required: options.configPath != nil, environment: environment, store: store,
            levels: levels, log: log, notifier: notifier)
        let server: ControlServer
        do {
            server = try ControlServer(store: store, configuration: configuration, log: log) {
                await reloader.reload()
            }
        } catch {
            _ = await store.shutdown()
            scheduler.cancel()
            return fatal("cannot open the control socket: \(error)", errno: EADDRINUSE, exitCode: ExitCode.cannotCreate)
        }
        let serving = Task { await server.run() }
        let opened = await store.status().documents
        log.notice(
            "started: \(documents(opened)) under \(configuration.root)",
            ["root": configuration.root, "documents": "\(opened)", "message_id": MessageID.started])
        // Ready only now: recovery done, documents open, the socket accepting connections.
        var readyStatus = Self.statusText(await store.status())
        if let replayed, replayed.edits > 0 || replayed.documents > 0 {
            readyStatus += "; replayed \(replayed.edits) edits to \(documents(replayed.documents)) from the journal"
        }
        let readiness = notifier.ready(status: readyStatus)
        if case .failed(let errno) = readiness { log.warning("sd_notify(READY=1) failed: \(errno)") }
        let background =
            Self.startSystemdTasks(store: store, notifier: notifier, log: log)
            + (await Metrics.start(
                store: store, configuration: configuration, log: log, connections: { server.connectionCount }))
        if let onReady { await onReady(store) }
        // Resident memory follows the live data, not the highest peak so far.
        let trimmer = MemoryTrimmer()
        trimmer.start()

        for await signal in signals.stream {
            if signal == SIGHUP {
                _ = await reloader.reload()
                continue
            }
            break
        }

        let dirty = await store.status().unsaved
        log.notice("stopping: saving \(documents(dirty)) with unsaved edits", ["message_id": MessageID.stopping])
        notifier.stopping(status: "Stopping: saving \(documents(dirty)) with unsaved edits")
        // While the flush runs, keep asking systemd for more time than its stop timeout.
        let extender = Task {
            while !Task.isCancelled {
                let left = await store.status().unsaved
                notifier.extendTimeout(microseconds: 10_000_000, status: "Stopping: \(documents(left)) left to save")
                try? await Task.sleep(for: .seconds(5))
            }
        }
        let report = await store.shutdown()
        extender.cancel()
        for task in background { task.cancel() }
        trimmer.stop()
        if trimmer.totals.trims > 0 { log.notice(trimmer.summary) }
        serving.cancel()
        await serving.value
        scheduler.cancel()
        await scheduler.value
        await store.stopWatching()
        let journal = await store.closeJournal()
        if let failure = journal.failure {
            log.error(
                "the edit journal could not be synced at shutdown: \(failure)",
                ["message_id": MessageID.journalFailed, "path": failure.path, "errno_name": failure.errno.name])
        }
        if !report.unsaved.isEmpty {
            let kept = Set(journal.keptDocuments)
            for failure in report.unsaved {
                log.error("NOT SAVED at shutdown: \(failure.description)", ["document": failure.document])
                if kept.contains(failure.document) && journal.failure == nil {
                    log.notice(
                        "the unsaved edits of \(failure.document) are kept in the edit journal (\(configuration.journalDirectory)) and are replayed at the next start",
                        ["document": failure.document, "message_id": MessageID.journalKept])
                }
            }
            notifier.status("Stopped with \(documents(report.unsaved.count)) not saved")
            return ExitCode.unsavedAtShutdown
        }
        log.notice("stopped: \(documents(report.saved)) saved at shutdown")
        return ExitCode.success
    }

    /// Journald when it is there (without repeating entries on a standard error that
    /// already goes to it), else lines on standard error (for people on a terminal).
    static func logHandler() -> any LogHandler {
        guard JournalLogHandler.isJournalAvailable else { return TerminalLogHandler.forStandardError() }
        if JournalLogHandler.standardErrorIsJournal { return JournalLogHandler() }
        return MultiplexLogHandler([JournalLogHandler(), TerminalLogHandler.forStandardError()])
    }

    /// "1 document", "2 documents".
    static func documents(_ count: Int) -> String { count == 1 ? "1 document" : "\(count) documents" }

    /// The `STATUS=` text: counts, the last save and the last failure, in words.
    static func statusText(_ status: StoreStatus, now: Date = Date()) -> String {
        var text = "\(documents(status.documents)), \(status.unsaved) unsaved, \(status.saving) saving"
        if let last = status.lastSave {
            text += "; last save \(Int(now.timeIntervalSince(last.at).rounded())) s ago (\(last.document))"
        } else {
            text += "; no save yet"
        }
        if let gone = status.rootGoneSince {
            text += "; the store root is gone (for \(Int(now.timeIntervalSince(gone).rounded())) s): saves wait for it"
        }
        if status.unwatchedDirectories > 0 {
            text +=
                "; \(status.unwatchedDirectories) \(status.unwatchedDirectories == 1 ? "directory" : "directories") polled, past the inotify watch limit"
        }
        if status.failed > 0, let failure = status.lastFailure {
            text +=
                "; \(status.failed) failing, last: \(failure.document): \(failure.operation) failed with \(failure.errno?.name ?? "an error")"
        }
        return text
    }

    /// Keeps `STATUS=` current (after each save or failure, and every 5 s for the "ago"),
    /// and pings the watchdog while the store answers.
    static func startSystemdTasks(store: DocumentStore, notifier: Notifier, log: Logger) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        // Not under systemd: nothing listens for STATUS= (and the status is counted over
        // every document, which is not worth doing for nobody).
        guard ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] != nil else { return tasks }
        tasks.append(
            Task {
                // At most one update per quarter second, the last save of a burst included:
                // a save of each of 10,000 documents is not 10,000 counts of them all.
                let spacing = Duration.milliseconds(250)
                var last = ContinuousClock.now - spacing
                var trailingAt: ContinuousClock.Instant?
                for await event in await store.events() {
                    switch event {
                    case .saved, .saveFailed: break
                    default: continue
                    }
                    let now = ContinuousClock.now
                    if now - last >= spacing {
                        last = now
                        notifier.status(statusText(await store.status()))
                    } else if trailingAt != last + spacing {
                        let at = last + spacing
                        trailingAt = at
                        Task {
                            try? await Task.sleep(until: at)
                            notifier.status(statusText(await store.status()))
                        }
                    }
                }
            })
        tasks.append(
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(5))
                    notifier.status(statusText(await store.status()))
                }
            })
        if let interval = Notifier.watchdogInterval() {
            log.notice("watchdog enabled: pinging every \(TimeSpan.format(interval / 2))")
            tasks.append(
                Task {
                    while !Task.isCancelled {
                        // A store (or scheduler) that no longer answers stops the pings, and
                        // systemd restarts the service.
                        await store.heartbeat()
                        notifier.watchdogPing()
                        try? await Task.sleep(for: interval / 2)
                    }
                })
        }
        return tasks
    }
}

/// `MESSAGE_ID=`s of the well-known journal entries (listed in `docs/LOGGING.md`), so
/// that `journalctl MESSAGE_ID=…` finds every occurrence of one.
public enum MessageID {
    public static let documentSaved = "ac57d3817afb416bb2fbbc5ea830fbfa"
    public static let saveFailed = "f5a2d6ef4129416682c0b482f4b3f25b"
    public static let externalChange = "f26cb68c10d94b03b54d987e11293131"
    public static let conflict = "57bcf54bd23f488084dcd6d5819a1d8d"
    public static let watchLimit = "86012bc4a2794d0286a3816d6d119cad"
    public static let started = "ff85704b76fb49bc965a220504b5e8de"
    public static let stopping = "6bb40d6015d24e209607079229404aa0"
    public static let reloaded = "87f5a7c7b7d043d7afb686c80edda626"
    public static let failedToStart = "3968f3d40bc541e2afcf70fb205d4c5c"
    public static let journalReplayed = "ac93a8826fe54cd494cfa58e991c3e03"
    public static let journalFailed = "d13bed74fb434127840dba60ab5c05c2"
    public static let journalKept = "2ee300b8d7ed4ed9bc2e5438a2818451"
}

/// Reads the configuration again (SIGHUP, the `reload` command) and applies it; a bad
/// file is reported and the running configuration kept.
actor Reloader {
    let path: String
    let required: Bool
    let environment: [String: String]
    let store: DocumentStore
    let levels: LogLevelSetting
    let log: Logger
    let notifier: Notifier

    init(
        path: String, required: Bool, environment: [String: String], store: DocumentStore, levels: LogLevelSetting,
        log: Logger, notifier: Notifier
    ) {
        self.notifier = notifier
        self.path = path
        self.required = required
        self.environment = environment
        self.store = store
        self.levels = levels
        self.log = log
    }

    func reload() async -> Result<String, ConfigurationErrors> {
        notifier.reloading()
        let result = await load()
        // READY=1 again, whether the new configuration was taken or refused.
        notifier.ready(status: Daemon.statusText(await store.status()))
        return result
    }

    private func load() async -> Result<String, ConfigurationErrors> {
        do {
            let reloaded = try Configuration.load(path: path, required: required, environment: environment)
            await store.reconfigure(reloaded)
            levels.level = reloaded.logLevel
            let from = reloaded.sources.isEmpty ? "the embedded defaults" : reloaded.sources.joined(separator: ", ")
            log.notice("configuration reloaded from \(from)", ["message_id": MessageID.reloaded])
            return .success("configuration reloaded from \(from)")
        } catch {
            for problem in error.errors { log.error("reload refused, keeping the running configuration: \(problem)") }
            return .failure(error)
        }
    }
}

/// The running log level, changed by a configuration reload.
public final class LogLevelSetting: Sendable {
    private let raw: Atomic<Int>
    public init(_ level: LogLevel) { raw = Atomic(level.rawValue) }
    public var level: LogLevel {
        get { LogLevel(rawValue: raw.load(ordering: .relaxed)) ?? .info }
        set { raw.store(newValue.rawValue, ordering: .relaxed) }
    }
}

/// Drops entries above the running level, then hands the rest on.
public struct FilteringLogHandler: LogHandler {
    let levels: LogLevelSetting
    let next: any LogHandler

    public init(levels: LogLevelSetting, next: any LogHandler) {
        self.levels = levels
        self.next = next
    }

    public func log(
        level: LogLevel, message: String, metadata: [String: String], file: String, line: Int, function: String
    ) {
        guard level <= levels.level else { return }
        next.log(level: level, message: message, metadata: metadata, file: file, line: line, function: function)
    }
}
