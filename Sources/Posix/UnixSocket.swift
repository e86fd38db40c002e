import CLinux
import Glibc

/// Who is at the other end of a Unix socket, as the kernel vouches (`SO_PEERCRED`,
/// `SO_PEERGROUPS`).
public struct PeerCredentials: Sendable, Hashable {
    public var processID: Int32
    public var userID: UInt32
    public var groupID: UInt32
    /// Supplementary groups, when the kernel reports them.
    public var groups: [UInt32]
}

extension FileDescriptor {
    /// A new Unix stream socket (close-on-exec; non-blocking when asked).
    ///
    /// The corresponding C function is `socket(AF_UNIX, SOCK_STREAM)`.
    public static func unixSocket(nonBlocking: Bool = false) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { system_unix_socket(nonblocking: nonBlocking) }.get())
    }

    /// A new Unix datagram socket (close-on-exec).
    ///
    /// The corresponding C function is `socket(AF_UNIX, SOCK_DGRAM)`.
    public static func unixDatagramSocket() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { system_unix_datagram_socket() }.get())
    }

    /// Binds the socket to `path`; `ENAMETOOLONG` when the path does not fit a socket address.
    ///
    /// The corresponding C function is `bind`.
    public func bind(toPath path: String) throws(Errno) {
        try withCPath(path) { p in nothingOrErrno { system_unix_bind(rawValue, p) } }.get()
    }

    /// The path the socket is bound to; `EAFNOSUPPORT` for an unnamed or abstract one.
    ///
    /// The corresponding C function is `getsockname`.
    public func boundPath() throws(Errno) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let count = try buffer.withUnsafeMutableBufferPointer { bytes in
            valueOrErrno { system_unix_bound_path(rawValue, bytes.baseAddress!, CInt(bytes.count)) }
        }.get()
        return String(decoding: buffer.prefix(Int(count)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Connects the socket to the listening socket at `path`.
    ///
    /// The corresponding C function is `connect`.
    public func connect(toPath path: String) throws(Errno) {
        try withCPath(path) { p in nothingOrErrno { system_unix_connect(rawValue, p) } }.get()
    }

    /// Marks the socket as accepting connections.
    ///
    /// The corresponding C function is `listen`.
    public func listen(backlog: Int32 = 512) throws(Errno) {
        try nothingOrErrno { system_listen(rawValue, backlog) }.get()
    }

    /// Accepts a connection (non-blocking, close-on-exec); `EAGAIN` when none is waiting.
    ///
    /// The corresponding C function is `accept4`.
    public func accept() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { system_accept(rawValue) }.get())
    }

    /// Stops further sends (`SHUT_WR`) so the peer reads end-of-file.
    ///
    /// The corresponding C function is `shutdown`.
    /// Shuts both directions down: the peer reads end-of-file, and a thread waiting on
    /// this socket sees it hang up.
    public func shutdown() throws(Errno) {
        try nothingOrErrno { system_shutdown(rawValue, CInt(SHUT_RDWR)) }.get()
    }

    public func shutdownWriting() throws(Errno) {
        try nothingOrErrno { system_shutdown(rawValue, CInt(SHUT_WR)) }.get()
    }

    /// Sets `O_NONBLOCK`.
    public func setNonBlocking() throws(Errno) {
        try nothingOrErrno { system_set_nonblocking(rawValue) }.get()
    }

    /// Sends bytes without raising `SIGPIPE`; returns how many were taken (`EAGAIN` when none).
    ///
    /// The corresponding C function is `send(MSG_NOSIGNAL)`.
    public func send(_ buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno { system_send(rawValue, buffer.baseAddress, buffer.count) }.get()
    }

    /// The peer's process, user and groups.
    ///
    /// The corresponding C function is `getsockopt(SO_PEERCRED, SO_PEERGROUPS)`.
    public func peerCredentials() throws(Errno) -> PeerCredentials {
        var raw = clinux_peer_credentials()
        try nothingOrErrno { system_peer_credentials(rawValue, &raw) }.get()
        var groups = [UInt32](repeating: 0, count: 64)
        var count = groups.withUnsafeMutableBufferPointer { system_peer_groups(rawValue, $0.baseAddress!, 64) }
        if count > 64 {
            groups = [UInt32](repeating: 0, count: Int(count))
            count = groups.withUnsafeMutableBufferPointer {
                system_peer_groups(rawValue, $0.baseAddress!, CInt($0.count))
            }
        }
        return PeerCredentials(
            processID: raw.pid, userID: raw.uid, groupID: raw.gid,
            groups: count > 0 ? Array(groups.prefix(Int(count))) : [])
    }
}

/// Changes the mode of the file at `path`.
///
/// The corresponding C function is `chmod`.
public func changeMode(ofPath path: String, to permissions: FilePermissions) throws(Errno) {
    try withCPath(path) { p in nothingOrErrno { system_chmod(p, permissions.rawValue) } }.get()
}
