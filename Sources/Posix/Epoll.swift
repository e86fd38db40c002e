import CLinux

/// An epoll instance: which descriptors are ready for reading or writing.
///
/// Owns its descriptor; ``close()`` releases it.
public struct Epoll {
    public let descriptor: FileDescriptor

    /// Readiness kinds.
    public struct Events: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static var readable: Events { Events(rawValue: clinux_epollin()) }
        public static var writable: Events { Events(rawValue: clinux_epollout()) }
        public static var error: Events { Events(rawValue: clinux_epollerr()) }
        public static var hangUp: Events { Events(rawValue: clinux_epollhup()) }
        public static var peerClosed: Events { Events(rawValue: clinux_epollrdhup()) }
        /// Report once, then disarm until modified again.
        public static var oneShot: Events { Events(rawValue: clinux_epolloneshot()) }
        /// Report a change of readiness once, not the readiness for as long as it lasts.
        public static var edgeTriggered: Events { Events(rawValue: clinux_epollet()) }
    }

    /// The corresponding C function is `epoll_create1(EPOLL_CLOEXEC)`.
    public init() throws(Errno) {
        descriptor = FileDescriptor(rawValue: try valueOrErrno { system_epoll_create() }.get())
    }

    /// Starts watching `fd` for `events`, tagging reports with `tag`.
    public func add(_ fd: FileDescriptor, events: Events, tag: UInt64) throws(Errno) {
        try nothingOrErrno {
            system_epoll_ctl(descriptor.rawValue, clinux_epoll_ctl_add(), fd.rawValue, events.rawValue, tag)
        }
        .get()
    }

    /// Changes what `fd` is watched for (and re-arms a one-shot watch).
    public func modify(_ fd: FileDescriptor, events: Events, tag: UInt64) throws(Errno) {
        try nothingOrErrno {
            system_epoll_ctl(descriptor.rawValue, clinux_epoll_ctl_mod(), fd.rawValue, events.rawValue, tag)
        }
        .get()
    }

    /// Stops watching `fd`.
    public func remove(_ fd: FileDescriptor) throws(Errno) {
        try nothingOrErrno { system_epoll_ctl(descriptor.rawValue, clinux_epoll_ctl_del(), fd.rawValue, 0, 0) }.get()
    }

    /// Waits up to `timeout` milliseconds (-1: forever) and returns the ready (tag, events) pairs.
    ///
    /// The corresponding C function is `epoll_wait`.
    public func wait(capacity: Int = 256, timeout: Int32 = -1) throws(Errno) -> [(tag: UInt64, events: Events)] {
        var raw = [clinux_epoll_event](repeating: clinux_epoll_event(), count: min(capacity, 256))
        let count = try raw.withUnsafeMutableBufferPointer { buffer in
            valueOrErrno { system_epoll_wait(descriptor.rawValue, buffer.baseAddress!, CInt(buffer.count), timeout) }
        }.get()
        return raw.prefix(Int(count)).map { ($0.data, Events(rawValue: $0.events)) }
    }

    public func close() throws(Errno) { try descriptor.close() }
}

extension FileDescriptor {
    /// A non-blocking, close-on-exec eventfd, for waking a thread blocked in `epoll_wait`.
    ///
    /// The corresponding C function is `eventfd`.
    public static func eventFD() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { system_eventfd() }.get())
    }

    /// Adds 1 to this eventfd's counter, waking a thread that waits for it.
    ///
    /// The corresponding C function is `eventfd_write`, not `write`: a fault injected
    /// into file writes (libfiu's `posix/io/rw/write`) does not stop the wake-ups.
    public func signalEventFD() throws(Errno) {
        _ = try valueOrErrno { system_eventfd_signal(rawValue) }.get()
    }
}
