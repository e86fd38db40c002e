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

    /// Waits up to `timeout` milliseconds (-1: forever) for ready descriptors, into room kept
    /// from one wait to the next: a loop that polls tens of thousands of times a second
    /// allocates nothing to do it. On return `reports` holds this wait's (tag, events)
    /// reports (none when it fails).
    ///
    /// The corresponding C function is `epoll_wait`.
    public func wait(into reports: Reports, timeout: Int32 = -1) throws(Errno) {
        reports.count = 0
        let storage = reports.storage
        reports.count = Int(
            try valueOrErrno {
                system_epoll_wait(descriptor.rawValue, storage.baseAddress!, CInt(storage.count), timeout)
            }.get())
    }

    /// Room for the reports of one `epoll_wait`, for ``wait(into:timeout:)``. Used by one
    /// thread at a time.
    public final class Reports {
        fileprivate let storage: UnsafeMutableBufferPointer<clinux_epoll_event>
        /// How many reports the last wait left.
        public fileprivate(set) var count = 0

        /// Room for `capacity` reports (at most 256: the most one wait returns).
        public init(capacity: Int = 256) {
            storage = .allocate(capacity: min(max(capacity, 1), 256))
            storage.initialize(repeating: clinux_epoll_event())
        }

        deinit { storage.deallocate() }

        /// The report at `index` (below ``count``).
        public subscript(index: Int) -> (tag: UInt64, events: Events) {
            precondition(index >= 0 && index < count, "no such report")
            let raw = storage[index]
            return (raw.data, Events(rawValue: raw.events))
        }
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
