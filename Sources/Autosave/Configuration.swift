import Control
import Foundation
import Logging
import Posix

/// The daemon's configuration: systemd-style INI files (`autosaved.conf` plus drop-ins
/// in `autosaved.conf.d/*.conf`), every key documented in `docs/CONFIGURATION.md`.
public struct Configuration: Sendable, Equatable {
    // [Store]
    /// The directory holding the documents.
    public var root: String
    /// Directory extensions that make a directory one package document.
    public var packageExtensions: [String] = ["package", "bundle"]
    /// Whether the built-in ignore patterns (``IgnoreRules/defaults``) apply.
    public var ignoreDefaults = true
    /// Ignore patterns (gitignore syntax) added to the defaults.
    public var ignore: [String] = []
    /// The name of the ignore files read in the root and every directory below it; empty for none.
    public var ignoreFile = ".autosavedignore"

    // [Autosave]
    /// Quiet time after the last edit before a document is saved.
    public var quietPeriod: Duration = .seconds(2)
    /// Longest a document stays unsaved while edits keep coming.
    public var maxDelay: Duration = .seconds(30)
    /// Saves running at once, across all documents.
    public var maxConcurrentSaves = 4
    /// The longest a document's last save (or the journal's last sync) may have taken for
    /// the event loop to make the next one itself, when a client waits for it and the loop
    /// has nothing else to do; zero: always on the save threads and the journal's thread.
    public var loopWriteLimit: Duration = .milliseconds(2)
    /// First wait before retrying a failed save; doubles up to `maxRetryInterval`.
    public var retryInterval: Duration = .seconds(1)
    public var maxRetryInterval: Duration = .seconds(60)
    /// Refuse edits to a document whose saves are failing (back-pressure, as Redis's
    /// `stop-writes-on-bgsave-error`).
    public var refuseEditsWhenSaveFails = false

    // [Watch]
    /// Whether changes by other programs are watched for (inotify, polling past the watch limit).
    public var watchEnabled = true
    /// Whether files and packages that appear under the root are opened.
    public var openNewFiles = true
    /// How often polled directories (and a missing root) are looked at.
    public var pollInterval: Duration = .seconds(2)
    /// inotify, polling, or inotify except on file systems where it cannot see other hosts' changes.
    public var watchMode: WatchMode = .auto

    // [Conflicts]
    /// Which version keeps the document's name when another program changes a document
    /// with unsaved edits; the other is written beside it as a conflict copy.
    public var conflictKeep: ConflictVersion = .disk
    /// What happens to a document whose file another program removes.
    public var whenRemoved: RemovalPolicy = .recreateUnsaved

    // [Journal]
    /// Whether edits are journalled, and when their records are synced.
    public var journalMode: JournalMode = .periodic
    /// How often `periodic` syncs the journal.
    public var journalSyncInterval: Duration = .seconds(1)
    /// `Directory=`, when given; see ``journalDirectory``.
    public var journalDirectorySetting: String?
    /// Past this many bytes of journal, the documents pinning its oldest segment are saved.
    public var journalMaxSize = 256 << 20
    /// The largest record the journal takes, in bytes (not a setting of the file): an edit
    /// larger than this is refused while the journal is on, since it could not be
    /// protected from a crash before its save.
    public var journalRecordLimit = 256 << 20
    /// The second directory of `$STATE_DIRECTORY` (systemd's `StateDirectory=` with two
    /// names), the default place of the journal under the shipped unit.
    var stateJournalDirectory: String?

    // [Control]
    /// The control socket (default: `ControlProtocol.defaultSocketPath`).
    public var socketPath: String
    public var socketMode: FilePermissions = .init(rawValue: 0o600)
    /// Users (besides root and the daemon's own user) allowed to connect.
    public var allowUsers: [UInt32] = []
    /// Groups whose members are allowed to connect.
    public var allowGroups: [UInt32] = []
    public var maxConnections = 1024
    /// The longest request line accepted, in bytes.
    public var maxRequestSize = 8 << 20
    /// Directories outside the store root that `export` may write into.
    public var exportDirectories: [String] = []
    /// How long the event loop polls for a client's next request after serving one,
    /// before it sleeps; zero: it sleeps at once.
    public var busyPoll: Duration = .microseconds(50)
    /// Whether the event loop makes a pass's reads, and its replies' sends, together
    /// through io_uring (one system call for many clients) when the kernel allows.
    public var ioURing = true

    // [Log]
    public var logLevel: LogLevel = .info

    // [Metrics]
    /// Where `autosaved.prom` is written for node_exporter's textfile collector (none: not written).
    public var metricsTextfileDirectory: String?
    /// How often that file is written.
    public var metricsInterval: Duration = .seconds(15)

    /// The files the configuration was read from, in order.
    public var sources: [String] = []

    /// Where each key was last set (`"Autosave.MaxDelay"` → file and line): a check
    /// between keys names the lines it is about. Keys left at their defaults have none.
    var origins = KeyOrigins()

    /// Where keys were set. Not part of what a configuration says: two that say the same
    /// are equal wherever they said it (a reload compares them).
    struct KeyOrigins: Sendable, Equatable {
        var byKey: [String: ConfigurationError.Origin] = [:]
        subscript(key: String) -> ConfigurationError.Origin? {
            get { byKey[key] }
            set { byKey[key] = newValue }
        }
        static func == (_: KeyOrigins, _: KeyOrigins) -> Bool { true }
    }

    /// The embedded default: the root under `$STATE_DIRECTORY`, else
    /// `$XDG_STATE_HOME/autosaved`, else `./autosave-data`.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        root = Self.defaultRoot(environment: environment)
        if let state = environment["STATE_DIRECTORY"], case let parts = state.split(separator: ":"), parts.count > 1 {
            stateJournalDirectory = String(parts[1])
        }
        socketPath = ControlProtocol.defaultSocketPath(environment: environment)
    }

    public static func defaultRoot(environment: [String: String]) -> String {
        if let state = environment["STATE_DIRECTORY"], !state.isEmpty {
            // systemd passes several directories separated by ':'; the first is ours.
            return String(state.split(separator: ":").first ?? Substring(state))
        }
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty { return xdg + "/autosaved" }
        return "./autosave-data"
    }

    /// Where the journal lives: `Directory=`, else the second directory systemd's
    /// `StateDirectory=` gives, else beside the root (`<root>.journal`). Never inside the root.
    public var journalDirectory: String {
        if let journalDirectorySetting { return journalDirectorySetting }
        if let stateJournalDirectory { return stateJournalDirectory }
        var root = root
        while root.count > 1, root.hasSuffix("/") { root.removeLast() }
        return root + ".journal"
    }

    /// The configuration file read when no `--config` is given.
    public static let defaultPath = "/etc/autosaved/autosaved.conf"
}

/// One of the two versions in a conflict: the file as another program left it, or the
/// document in memory with its unsaved edits.
public enum ConflictVersion: String, Sendable, CaseIterable {
    case disk
    case memory
}

/// `[Journal] Mode=`: when an edit's record reaches the disk.
public enum JournalMode: String, Sendable, CaseIterable {
    /// Written before the reply (a crash of the daemon loses nothing), synced every `SyncInterval=`.
    case periodic
    /// The reply waits until the record is synced (a power loss loses nothing acknowledged).
    case always
    /// No journal: unsaved edits live only in memory.
    case off
}

/// How the watcher learns of other programs' changes.
public enum WatchMode: String, Sendable, CaseIterable {
    /// inotify, except on shared and network file systems (FUSE — GlusterFS among them —
    /// NFS, CIFS/SMB, CephFS, 9p, AFS, OCFS2, GFS2), whose other hosts' changes inotify
    /// never sees: their directories are polled.
    case auto
    /// inotify everywhere (polling only past the watch limit).
    case inotify
    /// Every directory polled.
    case poll
}

/// What happens to an open document whose file another program removes.
public enum RemovalPolicy: String, Sendable, CaseIterable {
    /// Written again from memory when it has unsaved edits; closed when it has none.
    case recreateUnsaved = "recreate-unsaved"
    /// Always written again from memory.
    case recreate
    /// Always closed; unsaved edits are discarded (and the number logged).
    case close
}

/// A problem in a configuration file, with the place it was found.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int?
    public var message: String

    /// A file and a line.
    public struct Origin: Sendable, Equatable, CustomStringConvertible {
        public var file: String
        public var line: Int
        public var description: String { "\(file):\(line)" }
    }

    public var description: String {
        if let line { return "\(file):\(line): \(message)" }
        return "\(file): \(message)"
    }
}

/// All the problems found in a configuration, reported together.
public struct ConfigurationErrors: Error, Sendable, CustomStringConvertible {
    public var errors: [ConfigurationError]
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}

extension Configuration {
    /// Reads `path` and its drop-ins (`<path>.d/*.conf`, in name order), on top of the
    /// embedded defaults. A missing main file is an error only when `required` (given
    /// with `--config`); every problem in every file is reported, each with its line.
    public static func load(
        path: String = defaultPath, required: Bool = false,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigurationErrors) -> Configuration {
        var configuration = Configuration(environment: environment)
        var errors: [ConfigurationError] = []
        var files: [String] = []
        if FileManager.default.fileExists(atPath: path) || required {
            files.append(path)
        }
        let dropIns = path + ".d"
        if let names = try? FileManager.default.contentsOfDirectory(atPath: dropIns) {
            files += names.filter { $0.hasSuffix(".conf") }.sorted().map { dropIns + "/" + $0 }
        }
        for file in files {
            let text: String
            do {
                text = try readText(file)
            } catch {
                errors.append(ConfigurationError(file: file, line: nil, message: "cannot be read: \(error)"))
                continue
            }
            configuration.sources.append(file)
            errors += configuration.apply(text, file: file)
        }
        errors += configuration.validate(file: files.last ?? path)
        if !errors.isEmpty { throw ConfigurationErrors(errors: errors) }
        configuration.absoluteRoot()
        return configuration
    }

    /// Makes a relative `Root=` (the embedded default `./autosave-data`, say) absolute
    /// against the working directory: every path the store reads is compared with the
    /// root by bytes, and Foundation hands some of them back absolute. The journal's
    /// default directory beside it follows.
    public mutating func absoluteRoot() {
        root = PathName.absolute(root, cwd: FileManager.default.currentDirectoryPath)
    }

    private static func readText(_ path: String) throws -> String {
        let fd = try FileDescriptor.open(path)
        var bytes = try fd.closeAfter { () throws(Errno) -> [UInt8] in try fd.readToEnd() }
        // A byte-order mark some editors write is no part of the first line.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError(file: path, line: nil, message: "is not UTF-8 text")
        }
        return text
    }

    /// Applies the settings in `text`; returns the problems found.
    mutating func apply(_ text: String, file: String) -> [ConfigurationError] {
        var errors: [ConfigurationError] = []
        var section: String? = nil
        // Split by scalars: "\r\n" is one Character, which a split by Character never cuts.
        for (index, scalars) in text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
            .enumerated()
        {
            let lineNumber = index + 1
            var rawLine = Substring(scalars)
            if rawLine.unicodeScalars.last == "\r" { rawLine.unicodeScalars.removeLast() }
            let line = rawLine.trimmingWhitespace()
            func fail(_ message: String) {
                errors.append(ConfigurationError(file: file, line: lineNumber, message: message))
            }
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") {
                guard line.hasSuffix("]") else {
                    fail("a section header must end with ']': \(line)")
                    continue
                }
                let name = String(line.dropFirst().dropLast())
                guard Self.keys[name] != nil else {
                    fail(
                        "unknown section [\(name)]; known sections: \(Self.keys.keys.sorted().map { "[\($0)]" }.joined(separator: ", "))"
                    )
                    section = nil
                    continue
                }
                section = name
                continue
            }
            // By scalars: "=" followed by a combining mark is one Character, not "=".
            let scalars = line.unicodeScalars
            guard let equals = scalars.firstIndex(of: "=") else {
                fail("expected Key=value, found: \(line)")
                continue
            }
            let key = Substring(scalars[..<equals]).trimmingWhitespace()
            let value = Substring(scalars[scalars.index(after: equals)...]).trimmingWhitespace()
            guard let section else {
                fail("\(key)= is outside any section (or in an unknown one)")
                continue
            }
            guard Self.keys[section]?.contains(key) == true else {
                fail(
                    "unknown key \(key)= in section [\(section)]; known keys: \(Self.keys[section]!.map { $0 + "=" }.joined(separator: ", "))"
                )
                continue
            }
            if let message = set(section: section, key: key, value: value) {
                fail("\(key)=\(value): \(message)")
            } else {
                origins[section + "." + key] = ConfigurationError.Origin(file: file, line: lineNumber)
            }
        }
        return errors
    }

    static let keys: [String: [String]] = [
        "Store": ["Root", "PackageExtensions", "IgnoreDefaults", "Ignore", "IgnoreFile"],
        "Autosave": [
            "QuietPeriod", "MaxDelay", "MaxConcurrentSaves", "RetryInterval", "MaxRetryInterval",
            "RefuseEditsWhenSaveFails", "LoopWriteLimit",
        ],
        "Watch": ["Enabled", "Mode", "OpenNewFiles", "PollInterval"],
        "Conflicts": ["Keep", "WhenRemoved"],
        "Journal": ["Mode", "SyncInterval", "Directory", "MaxSize"],
        "Control": [
            "Socket", "SocketMode", "AllowUsers", "AllowGroups", "MaxConnections", "MaxRequestSize",
            "ExportDirectories", "BusyPoll", "IOUring",
        ],
        "Log": ["Level"],
        "Metrics": ["TextfileDirectory", "Interval"],
    ]

    /// The keys whose value is one path (`[Journal] Directory=` is the only `Directory=`).
    private static let pathKeys: Set<String> = ["Root", "Directory", "Socket", "TextfileDirectory"]

    /// Sets one key; returns why the value is bad, or `nil`.
    private mutating func set(section: String, key: String, value: String) -> String? {
        // A path ending in whitespace once its trailing slashes go (`x\r/`): the effective
        // configuration would name it without them, and read back as another path.
        if Self.pathKeys.contains(key) {
            var path = Substring(value)
            while path.count > 1, path.hasSuffix("/") { path.removeLast() }
            if String(path).trimmingWhitespace() != path {
                return "the path ends in whitespace before its trailing '/', which a configuration file cannot hold"
            }
        }
        switch (section, key) {
        case ("Store", "Root"):
            guard !value.isEmpty else { return "the store root must not be empty" }
            root = value
        case ("Store", "PackageExtensions"):
            let list = Self.list(value).map { $0.lowercased() }
            if let bad = list.first(where: { $0.contains("/") || $0.contains(".") }) {
                return "'\(bad)' is not a file name extension (give it without the dot)"
            }
            packageExtensions = list
        case ("Store", "IgnoreDefaults"):
            guard let flag = Self.boolean(value) else { return "expected yes or no" }
            ignoreDefaults = flag
        case ("Store", "Ignore"):
            // A list setting, as systemd's: each assignment adds, an empty one resets.
            if value.isEmpty {
                ignore = []
            } else {
                let patterns: [String]
                switch value[...].quotedConfigurationWords() {
                case .success(let words): patterns = words
                case .failure(let problem): return problem.message
                }
                if let bad = patterns.first(where: { IgnorePattern($0, source: "") == nil }) {
                    return "'\(bad)' is not an ignore pattern (a comment, or only a slash)"
                }
                ignore += patterns
            }
        case ("Store", "IgnoreFile"):
            if value.contains("/") || value == "." || value == ".." {
                return "expected a file name (the file is read in every directory), not a path"
            }
            if value.hasPrefix("#") || value.hasPrefix("!") {
                return "an ignore file's name must not start with # or !"
            }
            ignoreFile = value
        case ("Autosave", "QuietPeriod"):
            return parseSpan(value) { quietPeriod = $0 }
        case ("Autosave", "MaxDelay"):
            return parseSpan(value) { maxDelay = $0 }
        case ("Autosave", "RetryInterval"):
            // Zero would retry a failing save at once, again and again.
            return parseSpan(value) { retryInterval = $0 }
                ?? (retryInterval > .zero
                    ? nil : "must be longer than 0 (a failed save waits this long before its retry)")
        case ("Autosave", "MaxRetryInterval"):
            return parseSpan(value) { maxRetryInterval = $0 }
        case ("Autosave", "MaxConcurrentSaves"):
            guard let n = Int(value), n >= 1, n <= 1024 else { return "expected a whole number from 1 to 1024" }
            maxConcurrentSaves = n
        case ("Autosave", "LoopWriteLimit"):
            return parseSpan(value) { loopWriteLimit = $0 }
        case ("Autosave", "RefuseEditsWhenSaveFails"):
            guard let flag = Self.boolean(value) else { return "expected yes or no" }
            refuseEditsWhenSaveFails = flag
        case ("Watch", "Enabled"):
            guard let flag = Self.boolean(value) else { return "expected yes or no" }
            watchEnabled = flag
        case ("Watch", "OpenNewFiles"):
            guard let flag = Self.boolean(value) else { return "expected yes or no" }
            openNewFiles = flag
        case ("Watch", "Mode"):
            guard let mode = WatchMode(rawValue: value.lowercased()) else {
                return "expected one of \(WatchMode.allCases.map(\.rawValue).joined(separator: ", "))"
            }
            watchMode = mode
        case ("Watch", "PollInterval"):
            return parseSpan(value) { pollInterval = $0 }
        case ("Conflicts", "Keep"):
            guard let version = ConflictVersion(rawValue: value.lowercased()) else {
                return "expected disk (the other program's file keeps the name) or memory (the unsaved edits do)"
            }
            conflictKeep = version
        case ("Conflicts", "WhenRemoved"):
            guard let policy = RemovalPolicy(rawValue: value.lowercased()) else {
                return "expected one of \(RemovalPolicy.allCases.map(\.rawValue).joined(separator: ", "))"
            }
            whenRemoved = policy
        case ("Control", "Socket"):
            guard value.hasPrefix("/") else { return "the socket path must be absolute" }
            guard value.utf8.count < 108 else {
                return "the socket path is longer than a Unix socket address allows (107 bytes)"
            }
            socketPath = value
        case ("Control", "SocketMode"):
            guard let mode = mode_t(value, radix: 8), mode <= 0o777 else {
                return "expected an octal mode such as 0600 or 0660"
            }
            socketMode = FilePermissions(rawValue: mode)
        case ("Control", "AllowUsers"):
            var ids: [UInt32] = []
            for name in Self.list(value) {
                guard let id = UInt32(name) ?? Self.userID(named: name) else { return "no user named '\(name)'" }
                ids.append(id)
            }
            allowUsers = ids
        case ("Control", "AllowGroups"):
            var ids: [UInt32] = []
            for name in Self.list(value) {
                guard let id = UInt32(name) ?? Self.groupID(named: name) else { return "no group named '\(name)'" }
                ids.append(id)
            }
            allowGroups = ids
        case ("Control", "MaxConnections"):
            guard let n = Int(value), n >= 1, n <= 1_000_000 else { return "expected a whole number from 1 to 1000000" }
            maxConnections = n
        case ("Control", "MaxRequestSize"):
            // Below 4 GiB: a request's fields are kept with 32-bit lengths.
            guard let n = Self.byteSize(value), n >= 1024, n < 1 << 32 else {
                return "expected a size such as 64K, 8M or 1G (at least 1K, less than 4G)"
            }
            maxRequestSize = n
        case ("Control", "ExportDirectories"):
            let list = Self.list(value)
            if let bad = list.first(where: { !$0.hasPrefix("/") }) { return "'\(bad)' is not an absolute path" }
            exportDirectories = list
        case ("Journal", "Mode"):
            guard let mode = JournalMode(rawValue: value.lowercased()) else {
                return "expected one of \(JournalMode.allCases.map(\.rawValue).joined(separator: ", "))"
            }
            journalMode = mode
        case ("Journal", "SyncInterval"):
            return parseSpan(value) { journalSyncInterval = $0 }
        case ("Journal", "Directory"):
            journalDirectorySetting = value.isEmpty ? nil : value
        case ("Journal", "MaxSize"):
            guard let n = Self.byteSize(value), n >= 1 << 20 else {
                return "expected a size such as 64M or 1G (at least 1M)"
            }
            journalMaxSize = n
        case ("Control", "BusyPoll"):
            return parseSpan(value) { busyPoll = $0 }
        case ("Control", "IOUring"):
            guard let flag = Self.boolean(value) else { return "expected yes or no" }
            ioURing = flag
        case ("Log", "Level"):
            guard let level = LogLevel(name: value.lowercased()) else {
                return "expected one of \(LogLevel.allCases.map(\.name).joined(separator: ", "))"
            }
            logLevel = level
        case ("Metrics", "TextfileDirectory"):
            guard value.isEmpty || value.hasPrefix("/") else { return "'\(value)' is not an absolute path" }
            metricsTextfileDirectory = value.isEmpty ? nil : value
        case ("Metrics", "Interval"):
            return parseSpan(value) { metricsInterval = max($0, .seconds(1)) }
        default:
            return "unknown key"
        }
        return nil
    }

    private func parseSpan(_ value: String, _ assign: (Duration) -> Void) -> String? {
        do {
            assign(try TimeSpan.parse(value))
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// The items of a list setting: separated by whitespace or commas.
    static func list(_ value: String) -> [String] { value[...].configurationWords(commas: true) }

    /// `512`, `64K`, `8M`, `1G` (powers of 1024).
    static func byteSize(_ value: String) -> Int? {
        let units: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        if let last = value.last, let unit = units[Character(last.uppercased())] {
            guard let count = Int(value.dropLast()) else { return nil }
            let (size, overflow) = count.multipliedReportingOverflow(by: unit)
            return overflow ? nil : size
        }
        return Int(value)
    }

    /// `256M`, `1G`, `4K`, or bytes: the largest unit that divides the size.
    static func formatSize(_ size: Int) -> String {
        for (unit, factor) in [("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] where size % factor == 0 && size > 0 {
            return "\(size / factor)\(unit)"
        }
        return "\(size)"
    }

    static func userID(named name: String) -> UInt32? { getpwnam(name).map { $0.pointee.pw_uid } }
    static func groupID(named name: String) -> UInt32? { getgrnam(name).map { $0.pointee.gr_gid } }

    static func boolean(_ value: String) -> Bool? {
        switch value.lowercased() {
        case "yes", "true", "on", "1": true
        case "no", "false", "off", "0": false
        default: nil
        }
    }

    /// Checks relations between keys. Each problem is reported at the line that set the
    /// last of the keys it is about (read last, it is the one that broke the relation), or
    /// in `file` when they are all at their defaults; the message says where the others
    /// were set.
    func validate(file: String) -> [ConfigurationError] {
        var errors: [ConfigurationError] = []
        func fail(_ message: String, keys: [String]) {
            let set = keys.compactMap { key in origins[key].map { (key: key, origin: $0) } }
            // The files are read in order, and lines in a file: the last is the greatest.
            let sources = self.sources
            let last = set.max { a, b in
                let (fa, fb) = (sources.lastIndex(of: a.origin.file) ?? 0, sources.lastIndex(of: b.origin.file) ?? 0)
                return fa != fb ? fa < fb : a.origin.line < b.origin.line
            }
            let others = keys.filter { $0 != last?.key }.map { key in
                let name = "[" + key.replacingOccurrences(of: ".", with: "] ") + "="
                return origins[key].map { "\(name) is set at \($0)" } ?? "\(name) is its default"
            }
            let context = others.isEmpty ? "" : " (" + others.joined(separator: "; ") + ")"
            errors.append(
                ConfigurationError(
                    file: last?.origin.file ?? file, line: last?.origin.line, message: message + context))
        }
        if maxDelay < quietPeriod {
            fail(
                "MaxDelay= (\(TimeSpan.format(maxDelay))) must not be shorter than QuietPeriod= (\(TimeSpan.format(quietPeriod)))",
                keys: ["Autosave.MaxDelay", "Autosave.QuietPeriod"])
        }
        if pollInterval < .milliseconds(100) {
            fail("PollInterval= must be at least 100ms", keys: ["Watch.PollInterval"])
        }
        if loopWriteLimit > .seconds(1) {
            fail("[Autosave] LoopWriteLimit= must be from 0 to 1s", keys: ["Autosave.LoopWriteLimit"])
        }
        if busyPoll > .milliseconds(10) {
            fail("[Control] BusyPoll= must be from 0 to 10ms", keys: ["Control.BusyPoll"])
        }
        if journalSyncInterval < .milliseconds(1) || journalSyncInterval > .seconds(3600) {
            fail("[Journal] SyncInterval= must be from 1ms to 1h", keys: ["Journal.SyncInterval"])
        }
        if journalMode != .off, Self.contains(root, journalDirectory) {
            fail(
                "[Journal] Directory= (\(journalDirectory)) must be outside the store root (\(root)): the journal is never a document",
                keys: ["Journal.Directory", "Store.Root"])
        }
        if maxRetryInterval < retryInterval {
            fail(
                "MaxRetryInterval= must not be shorter than RetryInterval=",
                keys: ["Autosave.MaxRetryInterval", "Autosave.RetryInterval"])
        }
        return errors
    }

    /// Whether `path` is `directory` or lies beneath it (both made absolute, `.` and `..` resolved by name).
    static func contains(_ directory: String, _ path: String) -> Bool {
        func normalized(_ path: String) -> [Substring] {
            let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            var parts: [Substring] = []
            for part in absolute.split(separator: "/") where part != "." {
                if part == ".." { _ = parts.popLast() } else { parts.append(part) }
            }
            return parts
        }
        let outer = normalized(directory)
        let inner = normalized(path)
        return inner.count >= outer.count && Array(inner.prefix(outer.count)) == outer
    }

    /// The built-in patterns and `Ignore=` as comment lines of ``rendered``.
    private var ignoreRulesRendered: String {
        IgnoreRules(configuration: self).base.map { "\n#   \($0.text)  (\($0.source))" }.joined()
    }

    /// The effective configuration as a configuration file (what `--check-config` prints).
    public var rendered: String {
        var text = "# Effective configuration"
        text += sources.isEmpty ? " (embedded defaults)\n" : " from \(sources.joined(separator: ", "))\n"
        text += """

            [Store]
            Root=\(root)
            PackageExtensions=\(packageExtensions.joined(separator: " "))
            IgnoreDefaults=\(ignoreDefaults ? "yes" : "no")
            # In force, in order (later patterns win):\(ignoreRulesRendered)
            Ignore=\(ignore.map(\.quotedConfigurationWord).joined(separator: " "))
            IgnoreFile=\(ignoreFile)

            [Autosave]
            QuietPeriod=\(TimeSpan.format(quietPeriod))
            MaxDelay=\(TimeSpan.format(maxDelay))
            MaxConcurrentSaves=\(maxConcurrentSaves)
            RetryInterval=\(TimeSpan.format(retryInterval))
            MaxRetryInterval=\(TimeSpan.format(maxRetryInterval))
            RefuseEditsWhenSaveFails=\(refuseEditsWhenSaveFails ? "yes" : "no")
            LoopWriteLimit=\(TimeSpan.format(loopWriteLimit))

            [Watch]
            Enabled=\(watchEnabled ? "yes" : "no")
            Mode=\(watchMode.rawValue)
            OpenNewFiles=\(openNewFiles ? "yes" : "no")
            PollInterval=\(TimeSpan.format(pollInterval))

            [Conflicts]
            Keep=\(conflictKeep.rawValue)
            WhenRemoved=\(whenRemoved.rawValue)

            [Journal]
            Mode=\(journalMode.rawValue)
            SyncInterval=\(TimeSpan.format(journalSyncInterval))
            # In use: \(journalDirectory)
            Directory=\(journalDirectorySetting ?? "")
            MaxSize=\(Self.formatSize(journalMaxSize))

            [Control]
            Socket=\(socketPath)
            SocketMode=0\(String(socketMode.rawValue, radix: 8))
            AllowUsers=\(allowUsers.map(String.init).joined(separator: " "))
            AllowGroups=\(allowGroups.map(String.init).joined(separator: " "))
            MaxConnections=\(maxConnections)
            MaxRequestSize=\(maxRequestSize)
            ExportDirectories=\(exportDirectories.joined(separator: " "))
            BusyPoll=\(TimeSpan.format(busyPoll))
            IOUring=\(ioURing ? "yes" : "no")

            [Log]
            Level=\(logLevel.name)

            [Metrics]
            TextfileDirectory=\(metricsTextfileDirectory ?? "")
            Interval=\(TimeSpan.format(metricsInterval))

            """
        return text
    }
}

/// systemd time spans: `500ms`, `2s`, `1min 30s`, `1h`, a bare number of seconds.
public enum TimeSpan {
    public struct ParseError: Error, CustomStringConvertible {
        public var description: String
    }

    static let units: [(String, Double)] = [
        ("nsec", 1e-9), ("ns", 1e-9), ("usec", 1e-6), ("us", 1e-6), ("µs", 1e-6), ("msec", 1e-3), ("ms", 1e-3),
        ("seconds", 1), ("second", 1),
        ("sec", 1), ("s", 1), ("minutes", 60), ("minute", 60), ("min", 60), ("m", 60), ("hours", 3600),
        ("hour", 3600), ("hr", 3600), ("h", 3600), ("days", 86400), ("day", 86400), ("d", 86400),
    ]

    public static func parse(_ text: String) throws -> Duration {
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty else { throw ParseError(description: "expected a time span such as 500ms, 2s or 1min") }
        var total = 0.0
        var rest = Substring(trimmed)
        while !rest.isEmpty {
            rest = rest.drop(while: { $0 == " " })
            let number = rest.prefix(while: { $0.isNumber || $0 == "." })
            guard let value = Double(number), !number.isEmpty else {
                throw ParseError(description: "'\(text)' is not a time span (expected e.g. 500ms, 2s, 1min 30s)")
            }
            rest = rest.dropFirst(number.count).drop(while: { $0 == " " })
            let unitText = rest.prefix(while: { $0.isLetter || $0 == "µ" })
            rest = rest.dropFirst(unitText.count)
            if unitText.isEmpty {
                total += value
            } else if let unit = units.first(where: { $0.0 == unitText }) {
                total += value * unit.1
            } else {
                throw ParseError(description: "unknown time unit '\(unitText)' in '\(text)' (use ms, s, min, h)")
            }
        }
        let nanoseconds = (total * 1e9).rounded()
        guard nanoseconds < 0x1p63 else { throw ParseError(description: "'\(text)' is longer than 292 years") }
        return .nanoseconds(Int64(nanoseconds))
    }

    /// The span in the largest unit that gives a whole number (what ``parse(_:)`` reads back).
    public static func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let ns = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        if ns % 1_000_000 != 0 { return ns % 1000 == 0 ? "\(ns / 1000)us" : "\(ns)ns" }
        let ms = ns / 1_000_000
        if ms % 3_600_000 == 0 && ms > 0 { return "\(ms / 3_600_000)h" }
        if ms % 60_000 == 0 && ms > 0 { return "\(ms / 60_000)min" }
        if ms % 1000 == 0 { return "\(ms / 1000)s" }
        return "\(ms)ms"
    }
}

extension Substring {
    /// The text without the whitespace at either end: tabs, the Unicode space separators
    /// (general category Zs) and U+200B (Zs in Unicode before 4.0.1) — the set
    /// `trimmingCharacters(in: .whitespaces)` trims, here without bridging each line to
    /// `NSString` (which made the trimming most of the time a configuration file takes to
    /// read) — and carriage returns, as systemd's parser trims them: a value that kept a
    /// final CR would lose it once rendered, where it comes before the line's LF.
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.isConfigurationWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.isConfigurationWhitespace })!
        return String(scalars[first...last])
    }

    /// The words of a list setting, split at whitespace (the set ``trimmingWhitespace()``
    /// trims) and, with `commas`, at commas. Split by scalars, not by `Character`s: a
    /// separator followed by a combining mark is one `Character`, and would otherwise
    /// stay inside a word; and a word can hold no whitespace that reading its own
    /// rendering (the words joined by spaces) would trim away.
    func configurationWords(commas: Bool) -> [String] {
        unicodeScalars.split(whereSeparator: { $0.isConfigurationWhitespace || (commas && $0 == ",") })
            .map { String(String.UnicodeScalarView($0)) }
    }

    /// A list setting's words, split at whitespace outside quotes: a word that starts with
    /// a quote, `"…"` or `'…'`, takes everything up to the same quote as it is (whitespace,
    /// the other quote), and a quote right after the closing one opens another such part
    /// (`"a b"'"'` is `a b"`), as systemd reads a list; unquoted text may follow (`"My
    /// Notes"/*.tmp`). A quote inside an unquoted word is a character like any other
    /// (`don't.txt`). Backslashes are not special here: they stay in the word, for the
    /// word's own syntax (an ignore pattern's `\#`, `\*`).
    func quotedConfigurationWords() -> Result<[String], ConfigurationWordsProblem> {
        enum State {
            case between
            case unquoted
            case quoted(Unicode.Scalar)
            /// Right after a closing quote: another quote opens another quoted part.
            case closed
        }
        var words: [String] = []
        var word = String.UnicodeScalarView()
        var state = State.between
        for scalar in unicodeScalars {
            switch state {
            case .quoted(let open):
                if scalar == open { state = .closed } else { word.append(scalar) }
            case .between, .closed:
                if scalar == "\"" || scalar == "'" {
                    state = .quoted(scalar)
                } else if scalar.isConfigurationWhitespace {
                    if case .closed = state { words.append(String(word)) }
                    word = String.UnicodeScalarView()
                    state = .between
                } else {
                    word.append(scalar)
                    state = .unquoted
                }
            case .unquoted:
                if scalar.isConfigurationWhitespace {
                    words.append(String(word))
                    word = String.UnicodeScalarView()
                    state = .between
                } else {
                    word.append(scalar)
                }
            }
        }
        switch state {
        case .quoted(let quote): return .failure(.init(message: "a quote (\(quote)) is not closed"))
        case .unquoted, .closed: words.append(String(word))
        case .between: break
        }
        return .success(words)
    }
}

/// Why a setting's value cannot be split into words.
struct ConfigurationWordsProblem: Error {
    var message: String
}

extension String {
    /// The word as ``Substring/quotedConfigurationWords()`` reads it back: as it is when
    /// it holds no whitespace and does not start with a quote, else in double quotes, each
    /// `"` in it written `'"'`.
    var quotedConfigurationWord: String {
        guard
            unicodeScalars.contains(where: \.isConfigurationWhitespace) || isEmpty
                || unicodeScalars.first == "\"" || unicodeScalars.first == "'"
        else { return self }
        return split(separator: "\"", omittingEmptySubsequences: false).map { "\"" + $0 + "\"" }
            .joined(separator: "'\"'")
    }
}

extension Unicode.Scalar {
    /// Whitespace in a configuration file: see ``Substring/trimmingWhitespace()``.
    var isConfigurationWhitespace: Bool {
        self == " " || self == "\t" || self == "\r"
            || (value >= 0x80 && (properties.generalCategory == .spaceSeparator || value == 0x200B))
    }
}

extension String {
    /// See ``Substring/trimmingWhitespace()``.
    func trimmingWhitespace() -> String { self[...].trimmingWhitespace() }
}
