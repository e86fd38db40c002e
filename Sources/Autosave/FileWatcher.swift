import Documents
import Foundation
import Posix
import Synchronization

/// What the watcher saw, as paths relative to the store root.
enum WatchEvent: Sendable, Equatable {
    /// A file was written, created, or renamed into place from outside the root.
    case changed(String)
    /// A file or directory was removed or renamed out of the root.
    case removed(String)
    /// A file or directory was renamed inside the root (the two halves of one rename,
    /// paired by their cookie).
    case renamed(from: String, to: String, isDirectory: Bool)
    /// The kernel's queue overflowed: events were lost.
    case overflow
    /// The root itself was removed or moved away.
    case rootGone
    /// The root is back after it was gone; everything under it should be looked at again.
    case rootBack
}

/// inotify on every directory under the store root (never on single files: editors save
/// by renaming a new file over the old one), recursively, package directories included.
/// A thread reads the events and hands them over in batches, in the kernel's order.
///
/// Directories that get no watch because the per-user limit is reached
/// (`fs.inotify.max_user_watches`) are polled instead: every `pollInterval`, and at once
/// for ``pollNow()`` (the sync barrier). A root that disappears is looked for at the same
/// interval and watched again when it comes back.
final class FileWatcher: @unchecked Sendable {
    // @unchecked: the inotify descriptor is used by the reading thread and, for adding
    // watches, under `state`'s lock; the kernel serialises the calls.
    private let inotify: Inotify
    private let root: String
    private let pollInterval: Duration
    private let mode: WatchMode
    /// Directories the rules ignore get no watch and are not polled — except inside a
    /// package document's directory, all of whose directories hold members.
    private let ignore: SharedIgnoreRules
    /// Whether a directory's name makes it a package document (the store's types).
    private let isPackageName: @Sendable (String) -> Bool
    private let deliver: @Sendable ([WatchEvent]) -> Void
    /// The watch limit's messages: `true` for the limit reached (an error), `false` for
    /// every directory watched again.
    private let log: (@Sendable (String, _ isError: Bool) -> Void)

    /// What a polled directory held at the last look: name → identity of the entry.
    struct Stamp: Equatable {
        var kind: FileKind?
        var device: UInt64 = 0
        var inode: UInt64
        var size: Int64
        var modified: FileTime
        /// The inode's change time, compared too: a file rewritten in place with its size
        /// and modification time kept (`cp -p`, `rsync --inplace -t`, `touch -r`) changes
        /// only this. (The store tells its own saves from others' changes by the
        /// fingerprint it recorded.)
        var changed: FileTime

        /// Whether `other` may be this entry under another name after a rename: the same
        /// inode of the same kind on the same device, with its size and modification time
        /// (a rename changes only the change time; a new file given a freed inode number
        /// has its own modification time).
        func isRenamed(as other: Stamp) -> Bool {
            kind == other.kind && device == other.device && inode == other.inode && size == other.size
                && modified == other.modified
        }
    }

    private struct State {
        /// The directory each watch is on, and the watch on each directory.
        private(set) var directories: [Int32: String] = [:]
        private(set) var watches: [PathKey: Int32] = [:]
        var limitReported = false
        var rootMissing = false
        /// When the root was found missing (for `status`).
        var rootMissingSince: Date?
        /// The watched root's device and inode: each poll compares the root with them.
        var rootIdentity: (device: UInt64, inode: UInt64)?
        /// Whether the last walk from the root could list it.
        var rootListed = false
        /// Watches given back (`inotify_rm_watch`) whose `IN_IGNORED` has not been read
        /// yet: events already queued on them (a directory moved out reports its own
        /// `IN_MOVE_SELF` after its parent's `IN_MOVED_FROM`) are about directories no
        /// longer watched, not events lost, and are dropped.
        var givenBack: Set<Int32> = []

        mutating func add(_ watch: Int32, on directory: String) {
            // A directory moved within the root keeps its watch, under its new path.
            if let old = directories.updateValue(directory, forKey: watch), PathKey(old) != PathKey(directory),
                watches[PathKey(old)] == watch
            {
                watches.removeValue(forKey: PathKey(old))
            }
            watches[PathKey(directory)] = watch
        }

        mutating func remove(_ watch: Int32) {
            if let directory = directories.removeValue(forKey: watch), watches[PathKey(directory)] == watch {
                watches.removeValue(forKey: PathKey(directory))
            }
        }

        mutating func removeAll() {
            directories = [:]
            watches = [:]
        }
    }
    private let state = Lock(State())
    /// See ``takeFilesFoundAtStart()``.
    private let filesFoundAtStart = Lock<[(path: String, stamp: Stamp)]?>(nil)
    /// Polled directories and their last listing. Held for a whole poll round, so rounds
    /// from the thread and from ``pollNow()`` never interleave.
    private let polled = Lock([PathKey: [PathKey: Stamp]]())
    /// The polled directories that are polled by choice (`Mode=poll`, or a file system
    /// inotify cannot see other hosts' changes on), not for want of a watch: never watched.
    private let pollOnly = Lock(Set<PathKey>())
    /// Held across a watch's `inotify_add_watch` and its entry in ``state``, and across an
    /// entry's removal and its `inotify_rm_watch`: a directory watched from one thread
    /// (``pollNow()``, a new directory) while the thread gives its watch back (moved out)
    /// ends either watched or given back, never listed under a watch the kernel dropped.
    private let watchChanges = Lock(())
    private let stopping = Atomic<Bool>(false)
    /// Wakes the thread: ``kick()`` (and ``stop()``).
    private let kicks: FileDescriptor
    /// Whether the thread waits for ``kick()`` instead of for the inotify descriptor itself
    /// (see ``waitForKicks()``).
    private let kicked = Atomic<Bool>(false)
    /// Whether an overflow was handed over and not yet handled: further overflows until
    /// then are folded into it (one rescan covers them all).
    private let overflowPending = Atomic<Bool>(false)

    static let mask: Inotify.Events = [
        .closedAfterWriting, .movedFrom, .movedTo, .created, .deleted, .watchedDeleted, .watchedMoved, .onlyDirectories,
        .dontFollow, .excludeUnlinked,
    ]

    /// The events watched in `directory`: the root's watch follows a symbolic link (the
    /// root itself may be one), no other does.
    static func mask(for directory: String) -> Inotify.Events {
        directory.isEmpty ? mask.subtracting(.dontFollow) : mask
    }

    init(
        root: String, pollInterval: Duration = .seconds(2), mode: WatchMode = .auto, ignore: SharedIgnoreRules,
        isPackageName: @escaping @Sendable (String) -> Bool = { _ in false },
        log: @escaping @Sendable (String, _ isError: Bool) -> Void, deliver: @escaping @Sendable ([WatchEvent]) -> Void
    ) throws {
        let kicks = try FileDescriptor.eventFD()
        do { inotify = try Inotify() } catch {
            // A class whose initialiser throws never runs its deinit.
            try? kicks.close()
            throw error
        }
        self.kicks = kicks
        self.root = root
        self.pollInterval = pollInterval
        self.mode = mode
        self.ignore = ignore
        self.isPackageName = isPackageName
        self.deliver = deliver
        self.log = log
        let found = watchTree("")
        if state.withLock({ $0.rootListed }) {
            filesFoundAtStart.withLock { $0 = found }
        } else {
            // Gone (or not a directory any more) since the store read it: reported, and
            // looked for at every poll, as a root removed later is.
            state.withLock { state in
                state.rootMissing = true
                state.rootMissingSince = Date()
            }
            deliver([.rootGone])
        }
        NamedThread.start("autosaved-watch") { [self] in self.run() }
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        kick()
    }

    /// The inotify descriptor, for a loop to poll (``waitForKicks()``); it must forget it
    /// before ``stop()``.
    var descriptor: FileDescriptor { inotify.descriptor }

    /// From now on the thread waits for ``kick()`` rather than for the inotify descriptor:
    /// the owner polls ``descriptor`` in its own event loop and kicks the thread once it
    /// is readable. Waiting in poll(2) on the inotify descriptor itself has the kernel
    /// wake this thread from inside the system call that made the event — for the store's
    /// own saves, inside the writer's `openat`, `rename` and directory `fsync`, on the
    /// path a client waiting for the save is timed by (on a virtual machine each such
    /// wake-up is an inter-processor interrupt, tens of microseconds). An event loop that
    /// is busy writing that save is not woken by its own events; it kicks this thread
    /// when it next polls, once the save's reply is out.
    func waitForKicks() {
        kicked.store(true, ordering: .relaxed)
        kick()
    }

    /// Has the thread read the inotify descriptor (see ``waitForKicks()``).
    func kick() { try? kicks.signalEventFD() }

    /// Called by the consumer once it starts the rescan for an overflow.
    func overflowHandled() { overflowPending.store(false, ordering: .relaxed) }

    private func appendOverflow(to batch: inout [WatchEvent]) {
        if batch.contains(.overflow) { return }
        if overflowPending.exchange(true, ordering: .relaxed) { return }
        // The lost events may have been directories made or renamed: the tree is walked
        // again, so that each directory has its watch under the path it has now (a watch
        // added again keeps its number and takes the new path), before the store's rescan.
        if state.withLock({ !$0.rootMissing }) { _ = watchTree("") }
        batch.append(.overflow)
    }

    var watchCount: Int { state.withLock { $0.directories.count } }

    /// Watches given back whose `IN_IGNORED` has not been read yet.
    var givenBackCount: Int { state.withLock { $0.givenBack.count } }
    /// Directories polled: those that got no watch, and those polled by choice.
    var polledDirectories: [String] { polled.withLock { $0.keys.map(\.path).sorted() } }
    /// Directories polled because the watch limit left them without a watch (not by choice).
    var unwatchedDirectories: [String] {
        let byChoice = pollOnly.withLock { $0 }
        return polled.withLock { $0.keys.filter { !byChoice.contains($0) }.map(\.path).sorted() }
    }
    /// Since when the root has been missing (removed or moved away), or `nil` while it is there.
    var rootMissingSince: Date? { state.withLock { $0.rootMissing ? $0.rootMissingSince : nil } }
    /// Whether every directory under the root has an inotify watch: none is polled (by
    /// choice, or for want of watches), and the root is there.
    var watchesEverything: Bool { polled.withLock { $0.isEmpty } && !state.withLock { $0.rootMissing } }
    /// Whether `directory` (relative to the root, "" for the root) has an inotify watch:
    /// whatever appears in it from now on is reported.
    func isWatching(_ directory: String) -> Bool { state.withLock { $0.watches[PathKey(directory)] != nil } }
    /// Whether the root has no watch (it is polled, or missing).
    var rootIsPolled: Bool {
        polled.withLock { $0[""] != nil } || state.withLock { $0.rootMissing }
    }

    /// Watches `relative` and every directory below it (without following links), and
    /// polls those the watch limit leaves out; returns the regular files found (for
    /// directories that appeared after start-up, and for the catch-up of the whole tree
    /// when the watcher starts, ``takeFilesFoundAtStart()``).
    @discardableResult
    func watchTree(_ relative: String) -> [(path: String, stamp: Stamp)] {
        var files: [(path: String, stamp: Stamp)] = []
        var pending = [relative]
        var overLimit: [String] = []
        defer { if !overLimit.isEmpty { reportLimit(overLimit) } }
        while let directory = pending.popLast() {
            if isIgnoredDirectory(directory) { continue }
            let full = absolute(directory)
            if directory.isEmpty,
                let status = try? FileDescriptor.currentWorkingDirectory.status(of: full, followSymlinks: true)
            {
                state.withLock { $0.rootIdentity = (status.device, status.inode) }
            }
            var isPolled = false
            var overWatchLimit = false
            let byChoice = pollsByChoice(full)
            if byChoice {
                isPolled = true
                pollOnly.withLock { _ = $0.insert(PathKey(directory)) }
            } else {
                do throws(Errno) {
                    // The root itself may be a symbolic link (DynamicUser= makes
                    // /var/lib/autosaved one): its watch is on the directory it leads to.
                    try watchChanges.withLock { _ throws(Errno) in
                        let watch = try inotify.addWatch(full, events: Self.mask(for: directory))
                        state.withLock { $0.add(watch, on: directory) }
                    }
                } catch .noSpace {
                    isPolled = true
                    overWatchLimit = true
                } catch {
                    // Gone meanwhile (its parent reports it), or not a directory any more.
                    // The root is there (it was just found): polled, never left unwatched.
                    guard directory.isEmpty else { continue }
                    isPolled = true
                }
            }
            let listing = list(directory)
            if directory.isEmpty { state.withLock { $0.rootListed = listing != nil } }
            guard let listing else { continue }
            if isPolled {
                if overWatchLimit { overLimit.append(directory) }
                // A directory polled already keeps its last listing: the next poll reports
                // what changed since (a walk for changed ignore rules must not swallow it).
                polled.withLock { polled in
                    if polled[PathKey(directory)] == nil { polled[PathKey(directory)] = listing }
                }
            }
            for (name, stamp) in listing {
                let path = Self.join(directory, name.path)
                if stamp.kind == .directory {
                    pending.append(path)
                } else if stamp.kind == .regular {
                    files.append((path, stamp))
                }
            }
        }
        return files
    }

    /// The regular files the watcher found under the root as it started watching, each as
    /// it was then; given once (`nil` after, and when the root could not be listed).
    func takeFilesFoundAtStart() -> [(path: String, stamp: Stamp)]? {
        filesFoundAtStart.withLock { found in
            defer { found = nil }
            return found
        }
    }

    /// The ignore rules changed: directories they now ignore lose their watch (and stop
    /// being polled), and those they no longer ignore get one.
    func ignoreRulesChanged() {
        let watched = state.withLock { $0.directories.values.filter { !$0.isEmpty } }
        let polledNow = polled.withLock { $0.keys.map(\.path) }
        for directory in Set((watched + polledNow).map { PathKey($0) }) where isIgnoredDirectory(directory.path) {
            forgetTree(directory.path, removingWatches: true)
        }
        watchTree("")
    }

    /// Whether the ignore rules keep `directory` unwatched: one they match, unless a
    /// directory above it is a package document's, where every directory holds members
    /// (a member is the package's whatever the rules say: `book.package/.git/` or
    /// `book.package/build/` is watched, so that another program's change below it is
    /// seen as any member's is).
    private func isIgnoredDirectory(_ directory: String) -> Bool {
        guard !directory.isEmpty, ignore.ignoring(directory, isDirectory: true) != nil else { return false }
        return !PathName.components(directory).dropLast().contains(where: isPackageName)
    }

    /// File systems whose other hosts' (or other mounts') changes inotify never reports:
    /// FUSE (GlusterFS, sshfs, …), NFS, SMB and CIFS, CephFS, 9p, AFS, OCFS2, GFS2.
    static let sharedFileSystems: Set<Int64> = [
        0x6573_5546, 0x6969, 0x517B, 0xFF53_4D42, 0xFE53_4D42, 0x00C3_6400, 0x0102_1997, 0x5346_414F, 0x6B41_4653,
        0x7461_636F, 0x0116_1970,
    ]

    /// Whether `full` is polled rather than watched: always with `Mode=poll`, on a shared
    /// file system with `Mode=auto`.
    private func pollsByChoice(_ full: String) -> Bool {
        switch mode {
        case .inotify: return false
        case .poll: return true
        case .auto:
            guard let fd = try? FileDescriptor.open(full, options: [.directory]) else { return false }
            let type = try? fd.closeAfter { () throws(Errno) -> Int64 in try fd.fileSystemType() }
            return type.map { Self.sharedFileSystems.contains($0) } ?? false
        }
    }

    /// Directories polled by choice (see ``pollsByChoice(_:)``), not for want of a watch.
    var polledByChoice: Int { pollOnly.withLock { $0.count } }

    /// The absolute path of a root-relative directory (`""` is the root).
    private func absolute(_ directory: String) -> String { directory.isEmpty ? root : root + "/" + directory }

    /// `name` inside the root-relative `directory`.
    private static func join(_ directory: String, _ name: String) -> String {
        directory.isEmpty ? name : directory + "/" + name
    }

    /// Logs, once until every directory is watched again, that the watch limit left
    /// `directories` (root-relative) without a watch, naming them.
    private func reportLimit(_ directories: [String]) {
        let first = state.withLock { state in
            defer { state.limitReported = true }
            return !state.limitReported
        }
        guard first else { return }
        let names = directories.sorted().map { $0.isEmpty ? root : absolute($0) }
        var listed = names.prefix(10).joined(separator: ", ")
        if names.count > 10 { listed += " and \(names.count - 10) more" }
        let count = names.count == 1 ? "1 directory has" : "\(names.count) directories have"
        log(
            "the inotify watch limit is reached (fs.inotify.max_user_watches): \(count) no watch and \(names.count == 1 ? "is" : "are") polled every \(TimeSpan.format(pollInterval)) instead: \(listed) (raise the limit with sysctl fs.inotify.max_user_watches=N; `autosavectl status` lists them)",
            true)
    }

    /// After a poll round: once the limit left no directory without a watch, says so
    /// (and a later shortage is reported again).
    private func reportWatchedAgain() {
        guard state.withLock({ $0.limitReported }), unwatchedDirectories.isEmpty else { return }
        state.withLock { $0.limitReported = false }
        log("inotify watches are available again: every directory under \(root) is watched", false)
    }

    /// A directory's entries (the writer's temporary names left out), or `nil` when it cannot be listed.
    /// Keyed by the names' bytes (``PathKey``): two names in two Unicode normalizations are
    /// two entries.
    private func list(_ directory: String) -> [PathKey: Stamp]? {
        let full = absolute(directory)
        guard
            let fd = try? FileDescriptor.open(
                full, options: directory.isEmpty ? [.directory] : [.directory, .noFollow])
        else { return nil }
        return try? fd.closeAfter { () throws(Errno) -> [PathKey: Stamp] in
            var listing: [PathKey: Stamp] = [:]
            for entry in try fd.directoryEntries() where !TemporaryName.isTemporary(entry.name) {
                guard let status = try? fd.status(of: entry.name, followSymlinks: false) else { continue }
                listing[PathKey(entry.name)] = Stamp(
                    kind: status.kind, device: status.device, inode: status.inode, size: status.size,
                    modified: status.modified, changed: status.changed)
            }
            return listing
        }
    }

    // MARK: Polling

    /// Looks at every polled directory now and hands over what changed since the last
    /// look; tries to watch each again first (watches may have been freed). Returns once
    /// the changes are handed over.
    func pollNow() {
        if state.withLock({ $0.rootMissing }) {
            lookForRoot()
            return
        }
        if rootIsGoneOrReplaced() {
            if forgetRoot() { deliver([.rootGone]) }
            return
        }
        var batch: [WatchEvent] = []
        var newDirectories: [String] = []
        // Names gone and names new in this round: the two ends of a rename are paired below.
        var vanished: [(path: String, stamp: Stamp)] = []
        var appeared: [(path: String, stamp: Stamp)] = []
        var renamedDirectories: [String] = []
        polled.withLock { polled in
            for (key, before) in polled {
                let directory = key.path
                let full = absolute(directory)
                guard let after = list(directory) else {
                    // Gone: its parent reports it; the root is reported here.
                    polled.removeValue(forKey: key)
                    pollOnly.withLock { _ = $0.remove(key) }
                    if directory.isEmpty { batch.append(.rootGone) }
                    continue
                }
                let watched =
                    !pollOnly.withLock({ $0.contains(key) })
                    && watchChanges.withLock { _ in
                        guard let watch = try? inotify.addWatch(full, events: Self.mask(for: directory)) else {
                            return false
                        }
                        state.withLock { $0.add(watch, on: directory) }
                        return true
                    }
                if watched {
                    polled.removeValue(forKey: key)
                } else {
                    polled[key] = after
                }
                for (name, stamp) in after where before[name] != stamp {
                    let path = Self.join(directory, name.path)
                    guard let old = before[name] else {
                        appeared.append((path, stamp))
                        continue
                    }
                    if old.kind != stamp.kind {
                        // A directory replaced by a file, or the other way: what was there is gone first.
                        batch.append(.removed(path))
                        if old.kind == .directory { forgetListings(atOrUnder: path, in: &polled) }
                    }
                    if stamp.kind == .directory {
                        if old.kind != .directory { newDirectories.append(path) }
                    } else if stamp.kind == .regular {
                        batch.append(.changed(path))
                    }
                }
                for (name, stamp) in before where after[name] == nil {
                    vanished.append((Self.join(directory, name.path), stamp))
                }
            }
            // A name gone and a name new holding the same inode, unchanged: a rename, as
            // inotify reports it (the document follows its file instead of being written
            // again under the old name). A renamed directory's listings follow it.
            var byInode: [UInt64: [Int]] = [:]
            for (index, new) in appeared.enumerated() { byInode[new.stamp.inode, default: []].append(index) }
            var taken = Set<Int>()
            for gone in vanished {
                let isDirectory = gone.stamp.kind == .directory
                guard
                    let target = byInode[gone.stamp.inode]?.first(where: {
                        !taken.contains($0) && gone.stamp.isRenamed(as: appeared[$0].stamp)
                    })
                else {
                    batch.append(.removed(gone.path))
                    if isDirectory { forgetListings(atOrUnder: gone.path, in: &polled) }
                    continue
                }
                taken.insert(target)
                let to = appeared[target].path
                if isDirectory {
                    moveListings(from: gone.path, to: to, in: &polled)
                    renamedDirectories.append(to)
                }
                batch.append(.renamed(from: gone.path, to: to, isDirectory: isDirectory))
            }
            for (index, new) in appeared.enumerated() where !taken.contains(index) {
                if new.stamp.kind == .directory {
                    newDirectories.append(new.path)
                } else if new.stamp.kind == .regular {
                    batch.append(.changed(new.path))
                }
            }
        }
        // Watches below a renamed directory (where inotify works) are filed under its new
        // name; its polled listings moved already, and are compared at the next poll.
        for directory in renamedDirectories { _ = watchTree(directory) }
        for directory in newDirectories {
            for file in watchTree(directory) { batch.append(.changed(file.path)) }
            batch.append(.changed(directory))
        }
        if batch.contains(.rootGone), !forgetRoot() { batch.removeAll { $0 == .rootGone } }
        reportWatchedAgain()
        if !batch.isEmpty { deliver(batch) }
    }

    /// Drops the listings of `path` and the directories below it (they are gone). Called
    /// under ``polled``'s lock.
    private func forgetListings(atOrUnder path: String, in polled: inout [PathKey: [PathKey: Stamp]]) {
        for key in polled.keys where PathName.isWithin(key.path, path) { polled.removeValue(forKey: key) }
        pollOnly.withLock { $0 = $0.filter { !PathName.isWithin($0.path, path) } }
    }

    /// Files the listings of the directory `from` and the directories below it under `to`
    /// (polled by choice stays so). Called under ``polled``'s lock.
    private func moveListings(from: String, to: String, in polled: inout [PathKey: [PathKey: Stamp]]) {
        func moved(_ path: String) -> PathKey { PathKey(to + path.dropFirst(from.count)) }
        for key in polled.keys where PathName.isWithin(key.path, from) {
            polled[moved(key.path)] = polled.removeValue(forKey: key)
        }
        pollOnly.withLock { only in
            for key in only where PathName.isWithin(key.path, from) {
                only.remove(key)
                only.insert(moved(key.path))
            }
        }
    }

    /// Whether the root is no longer the directory that was watched: removed, or another
    /// directory in its place. inotify reports the removal (`IN_DELETE_SELF`) only once
    /// nothing holds the directory any more — an open descriptor (the control server's,
    /// for its path checks) or a shell's working directory defers it until then — so each
    /// poll looks.
    func rootIsGoneOrReplaced() -> Bool {
        guard let identity = state.withLock({ $0.rootIdentity }) else { return false }
        guard let status = try? FileDescriptor.currentWorkingDirectory.status(of: root, followSymlinks: true),
            status.kind == .directory
        else { return true }
        return status.device != identity.device || status.inode != identity.inode
    }

    /// While the root is missing: watches it again once it is back.
    private func lookForRoot() {
        guard (try? FileDescriptor.currentWorkingDirectory.status(of: root))?.kind == .directory else { return }
        let wasMissing = state.withLock { state in
            defer {
                state.rootMissing = false
                state.rootMissingSince = nil
                // The root's removal can discard the `IN_IGNORED` of watches it gave
                // back (the rest of that read is dropped, and a deleted directory's watch
                // goes with it before it could be given back): none can come any more.
                state.givenBack.removeAll()
                // Its watches were all given back: a shortage is reported afresh.
                state.limitReported = false
            }
            return state.rootMissing
        }
        guard wasMissing else { return }
        watchTree("")
        deliver([.rootBack])
    }

    /// The root was removed or moved: its watches describe paths that no longer exist.
    /// Returns `false` when it was already known to be missing (reported once).
    @discardableResult
    private func forgetRoot() -> Bool {
        let wasPresent = watchChanges.withLock { _ in forgetRootWatches() }
        polled.withLock { $0 = [:] }
        pollOnly.withLock { $0 = [] }
        return wasPresent
    }

    /// ``forgetRoot()``'s part under ``watchChanges``.
    private func forgetRootWatches() -> Bool {
        let (watches, wasPresent) = state.withLock { state in
            defer {
                state.givenBack.formUnion(state.directories.keys)
                state.removeAll()
                if !state.rootMissing { state.rootMissingSince = Date() }
                state.rootMissing = true
                state.rootIdentity = nil
            }
            return (Array(state.directories.keys), !state.rootMissing)
        }
        for watch in watches { try? inotify.removeWatch(watch) }
        return wasPresent
    }

    // MARK: Reading events

    /// Closed only once nothing can add or remove a watch any more (a closed number may be reused).
    deinit {
        try? inotify.close()
        try? kicks.close()
    }

    private func run() {
        var nextPoll = ContinuousClock.now + pollInterval
        while !stopping.load(ordering: .relaxed) {
            if ContinuousClock.now >= nextPoll {
                nextPoll = ContinuousClock.now + pollInterval
                pollNow()
            }
            guard wait(milliseconds: 100), let events = try? inotify.readEvents(), !events.isEmpty else { continue }
            var batch: [WatchEvent] = []
            // The first halves of renames whose second half has not been read yet, by cookie.
            // Other events can come between the two (inotify(7)): another program, or this
            // daemon's save threads, writing meanwhile — a first half is not taken for a
            // move out of the root just because the next event is not its second half.
            var pendingMoves: [(cookie: UInt32, path: String, isDirectory: Bool)] = []
            // The second halves are waited for up to 5 ms after the latest first half, and
            // the batch held back for 50 ms at most (then what is unpaired counts as moved
            // out); what is queued already is always read.
            let readAt = ContinuousClock.now
            var latestFirstHalf = readAt
            var queue = events[...]
            var last: Inotify.Event?
            while true {
                if queue.isEmpty {
                    // The two halves of a rename are queued together; a read can still
                    // fall between them. Wait briefly for the second half.
                    guard !pendingMoves.isEmpty else { break }
                    let until = min(latestFirstHalf + .milliseconds(5), readAt + .milliseconds(50))
                    let left = until - ContinuousClock.now
                    let milliseconds = left > .zero ? Int32(left.components.attoseconds / 1_000_000_000_000_000) + 1 : 0
                    guard wait(milliseconds: milliseconds, forInotify: true),
                        let more = try? inotify.readEvents(), !more.isEmpty
                    else { break }
                    queue = more[...]
                }
                let event = queue.removeFirst()
                last = event
                if event.events.contains(.movedTo), event.cookie != 0, !pendingMoves.isEmpty,
                    let at = pendingMoves.firstIndex(where: { $0.cookie == event.cookie })
                {
                    let move = pendingMoves.remove(at: at)
                    if let to = path(of: event) {
                        if move.isDirectory {
                            // The watches below keep their descriptors; watching again gives them the new paths.
                            let before = forgetTree(move.path, removingWatches: false)
                            watchTree(to)
                            // Exchanged (RENAME_EXCHANGE): the other directory is at the old name now.
                            if (try? FileDescriptor.currentWorkingDirectory.status(of: absolute(move.path)))?.kind
                                == .directory
                            {
                                watchTree(move.path)
                            }
                            // Those not taken back (the new name is ignored, say) are given back.
                            giveBackUnclaimed(before)
                        }
                        batch.append(.renamed(from: move.path, to: to, isDirectory: move.isDirectory))
                        continue
                    }
                    movedOut(move)
                    batch.append(.removed(move.path))
                }
                if event.events.contains(.movedFrom), event.cookie != 0, let from = path(of: event) {
                    latestFirstHalf = ContinuousClock.now
                    pendingMoves.append((event.cookie, from, event.events.contains(.isDirectory)))
                    continue
                }
                translate(event, into: &batch)
                if batch.last == .rootGone {
                    if !forgetRoot() { batch.removeLast() }
                    break
                }
            }
            // Never paired: moved out of the root (or to a place not watched).
            for move in pendingMoves {
                movedOut(move)
                batch.append(.removed(move.path))
            }
            if !batch.isEmpty { deliver(batch) }
            // The last event read was a save's temporary being written (created, or
            // closed): its rename follows within the save's sync. Waiting in poll(2) at
            // once would have the kernel wake this thread for that event and each of the
            // next save's, in the middle of the writer's system calls; a pause lets them
            // gather for one read. Other programs' changes are read at once.
            if let last, TemporaryName.isTemporary(last.name),
                !last.events.isDisjoint(with: [.created, .closedAfterWriting])
            {
                usleep(Self.settleMicroseconds)
            }
        }
    }

    private func movedOut(_ move: (cookie: UInt32, path: String, isDirectory: Bool)) {
        if move.isDirectory { forgetTree(move.path, removingWatches: true) }
    }

    /// Drops the watches and polled directories at and below `relative` (moved away: its
    /// watches would go on reporting under paths that no longer exist).
    /// Returns the watches it dropped.
    @discardableResult
    private func forgetTree(_ relative: String, removingWatches: Bool) -> [Int32] {
        func inside(_ path: String) -> Bool { PathName.isWithin(path, relative) }
        let watches = watchChanges.withLock { _ in
            let watches = state.withLock { state in
                let found = state.directories.filter { inside($0.value) }.map(\.key)
                for watch in found { state.remove(watch) }
                if removingWatches { state.givenBack.formUnion(found) }
                return found
            }
            if removingWatches { for watch in watches { try? inotify.removeWatch(watch) } }
            return watches
        }
        polled.withLock { forgetListings(atOrUnder: relative, in: &$0) }
        return watches
    }

    /// Gives back (`inotify_rm_watch`) those of `watches` that no walk took back: left in
    /// the kernel, they would go on reporting under no known path, each report taken for
    /// lost events (a rescan of everything).
    private func giveBackUnclaimed(_ watches: [Int32]) {
        guard !watches.isEmpty else { return }
        watchChanges.withLock { _ in
            let unclaimed = state.withLock { state in
                let found = watches.filter { state.directories[$0] == nil }
                state.givenBack.formUnion(found)
                return found
            }
            for watch in unclaimed { try? inotify.removeWatch(watch) }
        }
    }

    /// How long the thread lets a save's events gather (see ``run()``).
    static let settleMicroseconds: useconds_t = 2000

    /// Waits until there may be events to read (or `milliseconds` pass): until the
    /// inotify descriptor is readable or, once the thread waits for kicks, until it is
    /// kicked (a kick or a stop ends the wait). With `forInotify`, only until the
    /// descriptor is readable: a kick left from events already read must not end the
    /// short wait for a rename's second half.
    private func wait(milliseconds: Int32, forInotify: Bool = false) -> Bool {
        var events = pollfd(fd: inotify.descriptor.rawValue, events: Int16(POLLIN), revents: 0)
        if forInotify { return poll(&events, 1, milliseconds) == 1 }
        var pollers = [pollfd(fd: kicks.rawValue, events: Int16(POLLIN), revents: 0), events]
        let waitsForKicks = kicked.load(ordering: .relaxed)
        if waitsForKicks {
            // Events a read left (it takes at most 64 KiB of them) bring the loop no new
            // readiness, so no kick: look at the descriptor without waiting first (a
            // look that leaves the thread on no wait queue).
            if poll(&events, 1, 0) == 1 { return true }
        }
        guard poll(&pollers, waitsForKicks ? 1 : 2, milliseconds) > 0 else { return false }
        if pollers[0].revents != 0 {
            var value: UInt64 = 0
            _ = withUnsafeMutableBytes(of: &value) { try? kicks.read(into: $0) }
        }
        return true
    }

    /// The root-relative path an event names, or `nil` for an event about a directory itself or an unknown watch.
    private func path(of event: Inotify.Event) -> String? {
        guard !event.name.isEmpty, let directory = state.withLock({ $0.directories[event.watch] }) else { return nil }
        return Self.join(directory, event.name)
    }

    private func translate(_ event: Inotify.Event, into batch: inout [WatchEvent]) {
        if event.events.contains(.queueOverflowed) {
            // The kernel dropped events, perhaps the `IN_IGNORED` of watches given back:
            // everything is looked at again anyway, so none is waited for any longer.
            state.withLock { $0.givenBack.removeAll() }
            appendOverflow(to: &batch)
            return
        }
        let (directory, known): (String?, Bool) = state.withLock { state in
            if event.events.contains(.ignored) {
                state.remove(event.watch)
                state.givenBack.remove(event.watch)
                return (nil, true)
            }
            if let directory = state.directories[event.watch] { return (directory, true) }
            return (nil, state.givenBack.contains(event.watch) || state.rootMissing)
        }
        guard let directory else {
            // A watch neither held nor given back: what it reported cannot be placed, so
            // everything is looked at again, as after lost events.
            if !known { appendOverflow(to: &batch) }
            return
        }
        if event.name.isEmpty {
            if directory.isEmpty, !event.events.isDisjoint(with: [.watchedDeleted, .watchedMoved]) {
                batch.append(.rootGone)
            }
            return
        }
        let path = Self.join(directory, event.name)
        if event.events.contains(.isDirectory) {
            if !event.events.isDisjoint(with: [.created, .movedTo]) {
                for file in watchTree(path) { batch.append(.changed(file.path)) }
                batch.append(.changed(path))
            } else if !event.events.isDisjoint(with: [.deleted, .movedFrom]) {
                batch.append(.removed(path))
            }
            return
        }
        // The daemon's own temporary files (a save being written) are nobody's document:
        // dropped here, they do not wake the store at every save. Their rename into place
        // is paired above and reported as what it is.
        if TemporaryName.isTemporary(event.name) { return }
        if !event.events.isDisjoint(with: [.closedAfterWriting, .movedTo]) {
            batch.append(.changed(path))
        } else if event.events.contains(.created) {
            // A file created empty and closed shows CLOSE_WRITE too; a sync cookie may not.
            batch.append(.changed(path))
        } else if !event.events.isDisjoint(with: [.deleted, .movedFrom]) {
            batch.append(.removed(path))
        }
    }
}
