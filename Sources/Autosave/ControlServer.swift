import Control
import Foundation
import Logging
import Posix
import Synchronization
import Systemd

/// The control socket: accepts clients, checks who they are, reads one JSON request
/// per line and answers each with one JSON line (see `docs/PROTOCOL.md`).
///
/// The store's thread is also the epoll loop (see ``EventLoop``): when a connection
/// becomes readable the loop reads it and answers the requests that need no waiting
/// right there (see ``ConnectionReader``), and the replies of one round go out with one
/// write per client. Each connection also has a task, isolated to the store, for the
/// requests that wait (a durable save, `sync`, an export, …). A client
/// that sends nothing, sends too much, or does not read its replies affects only its
/// own connection.
public final class ControlServer: Sendable {
    let store: DocumentStore
    let configuration: Configuration
    let loop: EventLoop
    let listener: Int32
    let log: Logger
    /// Reloads the daemon's configuration; returns what happened, in words.
    let reload: @Sendable () async -> Result<String, ConfigurationErrors>
    /// The path this server bound (and removes at the end), `nil` for an inherited socket.
    let boundPath: String?
    let boundInode: UInt64?
    /// The store root, held open (`O_PATH`) for path checks; opened again when the root
    /// was removed or moved away and another directory is there now. Used on the loop's
    /// thread only (requests are checked there).
    let root: Lock<HeldRoot>

    /// The root's descriptor and the identity of the directory it is.
    struct HeldRoot: Sendable {
        var raw: Int32
        var device: UInt64
        var inode: UInt64
        /// When the directory at the root's path was last seen to be this one.
        var confirmedAt = Moment.now

        var descriptor: FileDescriptor { FileDescriptor(rawValue: raw) }

        init(_ path: String) throws(Errno) {
            let descriptor = try FileDescriptor.open(path, options: [.directory, .pathOnly])
            do {
                let status = try descriptor.status()
                (raw, device, inode) = (descriptor.rawValue, status.device, status.inode)
            } catch {
                try? descriptor.close()
                throw error
            }
        }
    }
    private let connections = Atomic<Int>(0)
    /// The descriptors of the connections being served, and whether the server stops.
    private let live = Lock<(descriptors: Set<Int32>, stopping: Bool)>(([], false))

    /// Listens on the configured socket, or on the one systemd passed (socket activation).
    public init(
        store: DocumentStore, configuration: Configuration, log: Logger,
        reload: @escaping @Sendable () async -> Result<String, ConfigurationErrors>
    ) throws {
        self.store = store
        self.configuration = configuration
        self.log = log
        self.reload = reload
        loop = store.loop
        do {
            root = Lock(try HeldRoot(configuration.root))
        } catch {
            throw SetupError(description: "the store root \(configuration.root) cannot be opened: \(error)")
        }
        if let inherited = ListenSockets.socket(named: "control") {
            try inherited.setNonBlocking()
            listener = inherited.rawValue
            boundPath = nil
            boundInode = nil
            log.notice("listening on the socket passed by systemd (fd \(inherited.rawValue))")
            Self.warnAboutSettingsNotApplied(to: inherited, configuration: configuration, log: log)
        } else {
            let socket = try Self.bindSocket(at: configuration.socketPath, mode: configuration.socketMode)
            listener = socket.rawValue
            boundPath = configuration.socketPath
            boundInode = try? FileDescriptor.currentWorkingDirectory.status(of: configuration.socketPath).inode
            log.notice("listening on \(configuration.socketPath)", ["socket": configuration.socketPath])
        }
        Self.warnAboutUnmappedPeers(configuration: configuration, log: log)
    }

    /// `AllowUsers=` and `AllowGroups=` entries no peer can ever have: the daemon runs in
    /// a user namespace (systemd's `PrivateUsers=`, say) that does not map them, where a
    /// peer of an unmapped user shows as the overflow id (65534). Said once at start-up,
    /// so that an operator whose clients are all refused learns why.
    static func warnAboutUnmappedPeers(configuration: Configuration, log: Logger) {
        let maps = (
            users: (try? String(contentsOfFile: "/proc/self/uid_map", encoding: .utf8)) ?? "",
            groups: (try? String(contentsOfFile: "/proc/self/gid_map", encoding: .utf8)) ?? ""
        )
        for (key, ids, map) in [
            ("AllowUsers", configuration.allowUsers, maps.users),
            ("AllowGroups", configuration.allowGroups, maps.groups),
        ] {
            let unmapped = IDMap(map).unmapped(ids)
            guard !unmapped.isEmpty else { continue }
            let listed = unmapped.map(String.init).joined(separator: " ")
            log.warning(
                "[Control] \(key)=\(listed) can never match: the daemon runs in a user namespace that does not map \(unmapped.count == 1 ? "that id" : "those ids") (PrivateUsers= in its unit?), where peers outside it show as 65534; allow a mapped id, or run without the namespace"
            )
        }
    }

    /// A user namespace's id map (`/proc/self/uid_map`): lines of the first id inside, the
    /// first outside and how many.
    struct IDMap {
        var ranges: [(first: UInt64, count: UInt64)] = []

        init(_ text: String) {
            for line in text.split(separator: "\n") {
                let fields = line.split(whereSeparator: \.isWhitespace).compactMap { UInt64($0) }
                if fields.count == 3 { ranges.append((fields[0], fields[2])) }
            }
        }

        /// The ids of `ids` no range holds (none when the map could not be read).
        func unmapped(_ ids: [UInt32]) -> [UInt32] {
            guard !ranges.isEmpty else { return [] }
            return ids.filter { id in !ranges.contains { UInt64(id) >= $0.first && UInt64(id) - $0.first < $0.count } }
        }
    }

    /// `Socket=` and `SocketMode=` do not apply to a socket systemd made (its socket unit's
    /// `ListenStream=` and `SocketMode=` do): said when they differ from what it made, so
    /// an operator who tightened the mode in the configuration learns it has no effect.
    private static func warnAboutSettingsNotApplied(
        to socket: FileDescriptor, configuration: Configuration, log: Logger
    ) {
        guard let path = try? socket.boundPath() else { return }
        if path != configuration.socketPath {
            log.warning(
                "[Control] Socket=\(configuration.socketPath) is not used: systemd passed the socket at \(path) (the socket unit's ListenStream= decides where it is)"
            )
        }
        if let status = try? FileDescriptor.currentWorkingDirectory.status(of: path),
            status.permissions.rawValue & 0o777 != configuration.socketMode.rawValue & 0o777
        {
            let actual = String(status.permissions.rawValue & 0o777, radix: 8)
            let configured = String(configuration.socketMode.rawValue & 0o777, radix: 8)
            log.warning(
                "[Control] SocketMode=0\(configured) is not applied: the socket systemd passed has mode 0\(actual) (set SocketMode= in the socket unit)"
            )
        }
    }

    /// Why the control socket could not be set up.
    public struct SetupError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Creates the listening socket at `path` with `mode`, without a moment where it
    /// exists with another mode: it is bound inside a fresh 0700 directory, given its
    /// mode there, then renamed into place. A stale socket (nobody listening) is replaced;
    /// a live one, or anything that is not a socket, is an error.
    static func bindSocket(at path: String, mode: FilePermissions) throws -> FileDescriptor {
        let directory = PathName.parent(path)
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw SetupError(
                description: "cannot create \(directory) for the control socket: \(error.localizedDescription)")
        }
        if let existing = try? FileDescriptor.currentWorkingDirectory.status(of: path) {
            guard existing.kind == .other else {
                throw SetupError(description: "\(path) exists and is not a socket; remove it or set [Control] Socket=")
            }
            if let probe = try? FileDescriptor.unixSocket() {
                defer { try? probe.close() }
                if (try? probe.connect(toPath: path)) != nil {
                    throw SetupError(description: "another daemon is listening on \(path)")
                }
            }
        }
        let staging = directory + "/.control-bind-" + CurrentProcess.randomAlphanumerics(6)
        do {
            let parent = try FileDescriptor.open(directory, options: [.directory])
            try parent.closeAfter { () throws(Errno) in
                try parent.makeDirectory(PathName.lastComponent(staging), permissions: .init(rawValue: 0o700))
            }
        } catch {
            throw SetupError(description: "cannot create a staging directory in \(directory): \(error)")
        }
        defer { try? FileManager.default.removeItem(atPath: staging) }
        let socket: FileDescriptor
        do {
            socket = try FileDescriptor.unixSocket(nonBlocking: true)
        } catch {
            throw SetupError(description: "cannot create a socket: \(error)")
        }
        do throws(Errno) {
            try socket.bind(toPath: staging + "/s")
            try changeMode(ofPath: staging + "/s", to: mode)
            try socket.listen(backlog: 1024)
            let directoryFD = try FileDescriptor.open(directory, options: [.directory])
            try directoryFD.closeAfter { () throws(Errno) in
                try directoryFD.rename(
                    PathName.lastComponent(staging) + "/s", to: PathName.lastComponent(path))
            }
        } catch {
            try? socket.close()
            if error == .nameTooLong {
                throw SetupError(description: "the socket path \(path) is too long for a Unix socket address")
            }
            throw SetupError(description: "cannot listen on \(path): \(error)")
        }
        return socket
    }

    /// Accepts and serves clients until the calling task is cancelled; then closes every
    /// connection (cancelling their exports) and removes the socket it bound.
    public func run() async {
        await withTaskCancellationHandler {
            await serveClients()
        } onCancel: {
            // Shutting the connections down ends every wait on them: they read end-of-file
            // and finish. The listener is not shut down (one systemd passed is systemd's
            // too): its wait is ended, and the accept loop sees the cancellation.
            live.withLock { live in
                // (Not once the listener is closed: its number may belong to another descriptor.)
                if !live.stopping { loop.end(FileDescriptor(rawValue: listener)) }
                live.stopping = true
                for raw in live.descriptors { try? FileDescriptor(rawValue: raw).shutdown() }
            }
        }
    }

    private func serveClients() async {
        let listener = FileDescriptor(rawValue: self.listener)
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                guard await loop.readable(listener) else { break }
                while true {
                    let client: FileDescriptor
                    do {
                        client = try listener.accept()
                    } catch .wouldBlock {
                        break
                    } catch .tooManyOpenFiles {
                        log.error("cannot accept a connection: too many open files")
                        break
                    } catch {
                        break
                    }
                    if connections.wrappingAdd(1, ordering: .relaxed).newValue > configuration.maxConnections {
                        connections.wrappingSubtract(1, ordering: .relaxed)
                        var writer = JSONWriter()
                        ControlSession.writeError(
                            id: nil, code: .tooManyConnections,
                            message:
                                "the daemon already serves \(configuration.maxConnections) connections (MaxConnections=)",
                            into: &writer)
                        writer.endLine()
                        let line = writer.bytes
                        _ = line.withUnsafeBytes { try? client.send($0) }
                        try? client.close()
                        continue
                    }
                    let raw = client.rawValue
                    group.addTask(executorPreference: loop.taskExecutor) {
                        await self.serve(raw, on: self.store)
                        self.connections.wrappingSubtract(1, ordering: .relaxed)
                    }
                }
            }
            group.cancelAll()
        }
        // Stopping from here on: a cancellation that comes later leaves the closed number alone.
        live.withLock { live in
            live.stopping = true
            loop.forget(listener)
            try? listener.close()
        }
        if let boundPath, let boundInode,
            (try? FileDescriptor.currentWorkingDirectory.status(of: boundPath))?.inode == boundInode
        {
            try? FileManager.default.removeItem(atPath: boundPath)
        }
        try? root.withLock { $0 }.descriptor.close()
    }

    /// Refuses a document path that is not a clean relative path, or whose existing part
    /// goes through a symbolic link (which could lead out of the root): one `openat2`
    /// with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` from the root, or for a name in the
    /// root itself one `fstatat` without following it. Returns whether something is there.
    @discardableResult
    func checkBeneathRoot(_ path: String) throws -> Bool {
        let normalized: String
        do { normalized = try DocumentPath.validate(path) } catch { throw RequestError(error) }
        return try checkBeneathRoot(valid: normalized, as: path)
    }

    /// ``checkBeneathRoot(_:)`` of a path ``DocumentPath/validate(_:)`` returned;
    /// messages name it as `path`.
    private func checkBeneathRoot(valid normalized: String, as path: String) throws -> Bool {
        var retried = false
        while true {
            let held = root.withLock { $0 }
            do {
                if !normalized.utf8.contains(UInt8(ascii: "/")) {
                    // A name in the root itself goes through no directory: one status of it,
                    // not followed, says whether something is there and whether it is a link.
                    let status = try held.descriptor.status(of: normalized, followSymlinks: false)
                    if status.kind == .symbolicLink { throw Errno.tooManySymbolicLinks }
                    return true
                }
                // Without O_NOFOLLOW: with O_PATH it would let a symbolic link as the last component through.
                try FileDescriptor.openBeneath(
                    normalized, relativeTo: held.descriptor, options: [.pathOnly], noSymlinks: true
                )
                .close()
                return true
            } catch .noSuchFile {
                // Under a root that was removed (or moved away) nothing is found: look again
                // under the directory at the root's path now, if it is another one.
                if retried || !reopenRootIfReplaced(held) { return false }
                retried = true
            } catch .tooManySymbolicLinks, .crossDevice {
                throw RequestError(
                    .invalidPath,
                    "invalid document path '\(path)': it goes through a symbolic link, which could lead out of the store root"
                )
            } catch .notDirectory {
                throw RequestError(.invalidPath, "invalid document path '\(path)': a component is not a directory")
            } catch {
                throw RequestError(.ioError, "'\(path)' cannot be checked: \(error)")
            }
        }
    }

    /// Opens the root again when the directory at its path is not the one `held` is;
    /// `true` when it did. One `stat` of the path (the held directory's identity is known),
    /// at most once a millisecond: a burst of requests naming documents not there yet (new
    /// ones) costs one look at the root's path, not one each.
    private func reopenRootIfReplaced(_ held: HeldRoot) -> Bool {
        let now = Moment.now
        if now.nanoseconds - held.confirmedAt.nanoseconds < 1_000_000 { return false }
        guard let status = try? FileDescriptor.currentWorkingDirectory.status(of: configuration.root) else {
            return false
        }
        guard status.device != held.device || status.inode != held.inode,
            let fresh = try? HeldRoot(configuration.root)
        else {
            root.withLock { if $0.raw == held.raw { $0.confirmedAt = now } }
            return false
        }
        root.withLock { $0 = fresh }
        try? held.descriptor.close()
        return true
    }

    /// Connections being served now.
    public var connectionCount: Int { connections.load(ordering: .relaxed) }

    func allowed(_ peer: PeerCredentials) -> Bool {
        if peer.userID == 0 || peer.userID == CurrentProcess.userID { return true }
        if configuration.allowUsers.contains(peer.userID) { return true }
        if configuration.allowGroups.contains(peer.groupID) { return true }
        return peer.groups.contains { configuration.allowGroups.contains($0) }
    }

    /// Serves one client: reads lines, handles each request in order, replies. Runs on
    /// the store's thread, which is also the I/O loop: a request is read, carried out
    /// and answered without leaving it.
    private func serve(_ raw: Int32, on store: isolated DocumentStore) async {
        let fd = FileDescriptor(rawValue: raw)
        let stopping = live.withLock { live in
            live.descriptors.insert(raw)
            return live.stopping
        }
        if stopping { try? fd.shutdown() }
        defer {
            loop.forget(fd)
            // Out of the set before the number can be reused, so a late shutdown cannot reach another file.
            live.withLock { _ = $0.descriptors.remove(raw) }
            try? fd.close()
        }
        let peer = try? fd.peerCredentials()
        let connection = Connection(raw: raw, loop: loop, peer: peer, limit: 64 << 20, gate: store.replyGate)
        guard let peer, allowed(peer) else {
            let who = peer.map { "uid \($0.userID), gid \($0.groupID)" } ?? "an unknown peer"
            log.warning("refused a control connection from \(who)", ["peer_uid": peer.map { "\($0.userID)" } ?? ""])
            connection.sendError(
                .forbidden, "\(who) may not use this daemon; allow it with [Control] AllowUsers= or AllowGroups=")
            await connection.finish()
            try? fd.shutdownWriting()
            // Closing with the client's request unread could discard the error before the
            // client reads it: wait (at most 2 s) for the client to close its end first.
            let raw = fd.rawValue
            let limit = Task {
                // Cancelled once the client has closed: then the descriptor is closed (or
                // about to be) and its number may already be another connection's or
                // another watcher's — forgetting it would drop their registration.
                guard (try? await Task.sleep(for: .seconds(2))) != nil else { return }
                self.loop.forget(FileDescriptor(rawValue: raw))
            }
            var scratch = [UInt8](repeating: 0, count: 4096)
            draining: while true {
                do {
                    let n = try scratch.withUnsafeMutableBytes { bytes in
                        Result { () throws(Errno) in try fd.read(into: bytes) }
                    }.get()
                    if n == 0 { break draining }
                } catch .wouldBlock {
                    guard await loop.readable(fd) else { break draining }
                } catch {
                    break draining
                }
            }
            limit.cancel()
            return
        }
        let session = ControlSession(server: self, connection: connection)
        await ConnectionReader(fd: fd, store: store, session: session, maxRequestSize: configuration.maxRequestSize)
            .run(store: store)
        // Nothing may write to the descriptor once it is closed (its number is reused):
        // stop the connection's other tasks and wait for them first.
        await session.finish()
        await connection.finish()
    }
}

extension ControlServer: UnopenedPathCheck {
    /// A document a request opens or creates must lie beneath the root (see ``checkBeneathRoot(_:)``).
    func checkUnopened(valid: String) throws -> Bool { try checkBeneathRoot(valid: valid, as: valid) }

    /// The directory looked at as ``checkBeneathRoot(_:)`` looks at a document's path:
    /// missing when nothing is found there (a refusal is not "missing").
    func directoryIsMissing(_ directory: String) -> Bool {
        (try? checkBeneathRoot(valid: directory, as: directory)) == false
    }
}
