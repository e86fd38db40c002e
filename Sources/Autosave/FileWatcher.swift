import Documents
import Foundation
import Posix
import Synchronization

/// What the watcher saw, as paths relative to the store root.
enum WatchEvent: Sendable, Equatable {
    /// A file was written, created, or renamed into place.
    case changed(String)
    /// A file or directory was removed or renamed away.
    case removed(String)
    /// The kernel's queue overflowed: events were lost.
    case overflow
    /// The root itself was removed or moved.
    case rootGone
}

/// inotify on every directory under the store root (never on single files: editors save
/// by renaming a new file over the old one), recursively, package directories included.
/// A thread reads the events and hands them over in batches, in the kernel's order.
final class FileWatcher: @unchecked Sendable {
    // @unchecked: the inotify descriptor is used by the reading thread and, for adding
    // watches, under `state`'s lock; the kernel serialises the calls.
    private let inotify: Inotify
    private let root: String
    private let deliver: @Sendable ([WatchEvent]) -> Void
    private let log: (@Sendable (String) -> Void)
    private struct State {
        var directories: [Int32: String] = [:]
        var limitReported = false
    }
    private let state = Mutex(State())
    private let stopping = Atomic<Bool>(false)
    /// Whether an overflow was handed over and not yet handled: further overflows until
    /// then are folded into it (one rescan covers them all).
    private let overflowPending = Atomic<Bool>(false)

    static let mask: Inotify.Events = [
        .closedAfterWriting, .movedFrom, .movedTo, .created, .deleted, .watchedDeleted, .watchedMoved, .onlyDirectories,
        .dontFollow, .excludeUnlinked,
    ]

    init(root: String, log: @escaping @Sendable (String) -> Void, deliver: @escaping @Sendable ([WatchEvent]) -> Void)
        throws
    {
        inotify = try Inotify()
        self.root = root
        self.deliver = deliver
        self.log = log
        watchTree("")
        let thread = Thread { [self] in self.run() }
        thread.name = "autosaved-watch"
        thread.start()
    }

    func stop() { stopping.store(true, ordering: .relaxed) }

    /// Called by the consumer once it starts the rescan for an overflow.
    func overflowHandled() { overflowPending.store(false, ordering: .relaxed) }

    private func appendOverflow(to batch: inout [WatchEvent]) {
        if batch.contains(.overflow) { return }
        if overflowPending.exchange(true, ordering: .relaxed) { return }
        batch.append(.overflow)
    }

    var watchCount: Int { state.withLock { $0.directories.count } }

    /// Watches `relative` and every directory below it (without following links);
    /// returns the files found, for directories that appeared after start-up.
    @discardableResult
    func watchTree(_ relative: String) -> [String] {
        var files: [String] = []
        var pending = [relative]
        while let directory = pending.popLast() {
            let full = directory.isEmpty ? root : root + "/" + directory
            do {
                let watch = try inotify.addWatch(full, events: Self.mask)
                state.withLock { $0.directories[watch] = directory }
            } catch .noSpace {
                let first = state.withLock { state in
                    defer { state.limitReported = true }
                    return !state.limitReported
                }
                if first {
                    log(
                        "the inotify watch limit is reached (fs.inotify.max_user_watches); changes under \(full) and other directories beyond the limit are not noticed"
                    )
                }
                continue
            } catch {
                continue
            }
            guard let fd = try? FileDescriptor.open(full, options: [.directory]),
                let entries = try? fd.closeAfter({ () throws(Errno) -> [DirectoryEntry] in try fd.directoryEntries() })
            else { continue }
            for entry in entries where !TemporaryName.isTemporary(entry.name) {
                let path = directory.isEmpty ? entry.name : directory + "/" + entry.name
                let kind =
                    entry.kind ?? (try? FileDescriptor.currentWorkingDirectory.status(of: root + "/" + path))?.kind
                if kind == .directory { pending.append(path) } else if kind == .regular { files.append(path) }
            }
        }
        return files
    }

    private func run() {
        defer { try? inotify.close() }
        while !stopping.load(ordering: .relaxed) {
            var poller = pollfd(fd: inotify.descriptor.rawValue, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) == 1 else { continue }
            guard let events = try? inotify.readEvents(), !events.isEmpty else { continue }
            var batch: [WatchEvent] = []
            for event in events {
                if event.events.contains(.queueOverflowed) {
                    appendOverflow(to: &batch)
                    continue
                }
                let directory: String? = state.withLock { state in
                    if event.events.contains(.ignored) {
                        state.directories.removeValue(forKey: event.watch)
                        return nil
                    }
                    return state.directories[event.watch]
                }
                guard let directory else {
                    if !event.events.contains(.ignored) { appendOverflow(to: &batch) }  // an unknown watch: rescan
                    continue
                }
                if event.name.isEmpty {
                    if directory.isEmpty, !event.events.isDisjoint(with: [.watchedDeleted, .watchedMoved]) {
                        batch.append(.rootGone)
                    }
                    continue
                }
                let path = directory.isEmpty ? event.name : directory + "/" + event.name
                if event.events.contains(.isDirectory) {
                    if !event.events.isDisjoint(with: [.created, .movedTo]) {
                        for file in watchTree(path) { batch.append(.changed(file)) }
                        batch.append(.changed(path))
                    } else if !event.events.isDisjoint(with: [.deleted, .movedFrom]) {
                        batch.append(.removed(path))
                    }
                    continue
                }
                if !event.events.isDisjoint(with: [.closedAfterWriting, .movedTo]) {
                    batch.append(.changed(path))
                } else if event.events.contains(.created) {
                    // A file created empty and closed shows CLOSE_WRITE too; a sync cookie may not.
                    batch.append(.changed(path))
                } else if !event.events.isDisjoint(with: [.deleted, .movedFrom]) {
                    batch.append(.removed(path))
                }
            }
            if !batch.isEmpty { deliver(batch) }
        }
    }
}
