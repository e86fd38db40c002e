import Glibc

/// An inotify instance: events about the directories it watches.
///
/// Owns its descriptor; ``close()`` releases it (every instance counts against
/// `fs.inotify.max_user_instances`).
public struct Inotify {
    public let descriptor: FileDescriptor

    /// What to watch for / what happened.
    public struct Events: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let modified = Events(rawValue: UInt32(IN_MODIFY))
        public static let attributesChanged = Events(rawValue: UInt32(IN_ATTRIB))
        public static let closedAfterWriting = Events(rawValue: UInt32(IN_CLOSE_WRITE))
        public static let movedFrom = Events(rawValue: UInt32(IN_MOVED_FROM))
        public static let movedTo = Events(rawValue: UInt32(IN_MOVED_TO))
        public static let created = Events(rawValue: UInt32(IN_CREATE))
        public static let deleted = Events(rawValue: UInt32(IN_DELETE))
        public static let watchedDeleted = Events(rawValue: UInt32(IN_DELETE_SELF))
        public static let watchedMoved = Events(rawValue: UInt32(IN_MOVE_SELF))
        public static let unmounted = Events(rawValue: UInt32(IN_UNMOUNT))
        public static let queueOverflowed = Events(rawValue: UInt32(IN_Q_OVERFLOW))
        public static let ignored = Events(rawValue: UInt32(IN_IGNORED))
        public static let isDirectory = Events(rawValue: UInt32(IN_ISDIR))
        public static let onlyDirectories = Events(rawValue: UInt32(IN_ONLYDIR))
        public static let dontFollow = Events(rawValue: UInt32(IN_DONT_FOLLOW))
        public static let excludeUnlinked = Events(rawValue: UInt32(IN_EXCL_UNLINK))
    }

    /// One event: the watch it came from, what happened, the rename cookie, and the name
    /// inside the watched directory (empty for events about the directory itself).
    public struct Event: Sendable, Hashable {
        public var watch: Int32
        public var events: Events
        public var cookie: UInt32
        public var name: String
    }

    /// The corresponding C function is `inotify_init1(IN_CLOEXEC | IN_NONBLOCK)`.
    public init() throws(Errno) {
        let fd = try valueOrErrno { inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK)) }.get()
        descriptor = FileDescriptor(rawValue: fd)
    }

    /// Watches `path` for `events`; returns the watch descriptor. `ENOSPC` means the
    /// per-user watch limit (`fs.inotify.max_user_watches`) is reached.
    ///
    /// The corresponding C function is `inotify_add_watch`.
    public func addWatch(_ path: String, events: Events) throws(Errno) -> Int32 {
        try withCPath(path) { p in valueOrErrno { inotify_add_watch(descriptor.rawValue, p, events.rawValue) } }.get()
    }

    /// The corresponding C function is `inotify_rm_watch`.
    public func removeWatch(_ watch: Int32) throws(Errno) {
        try nothingOrErrno { inotify_rm_watch(descriptor.rawValue, watch) }.get()
    }

    /// The events waiting to be read (none: `[]`). Each `inotify_event` is 16 bytes
    /// followed by `len` bytes of NUL-padded name.
    public func readEvents() throws(Errno) -> [Event] {
        // Read into uninitialised memory: zeroing 64 KiB for every read cost more than
        // reading the few events a save makes.
        var failure: Errno?
        let buffer = [UInt8](unsafeUninitializedCapacity: 64 * 1024) { raw, initialized in
            do throws(Errno) {
                initialized = try descriptor.read(into: UnsafeMutableRawBufferPointer(raw))
            } catch {
                failure = error
                initialized = 0
            }
        }
        if let failure {
            if failure == .wouldBlock { return [] }
            throw failure
        }
        let count = buffer.count
        var events: [Event] = []
        var offset = 0
        while offset + 16 <= count {
            let (watch, mask, cookie, length) = buffer.withUnsafeBytes { raw in
                (
                    raw.loadUnaligned(fromByteOffset: offset, as: Int32.self),
                    raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                    raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self),
                    Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                )
            }
            let nameBytes = buffer[(offset + 16)..<min(count, offset + 16 + length)]
            let end = nameBytes.firstIndex(of: 0) ?? nameBytes.endIndex
            events.append(
                Event(
                    watch: watch, events: Events(rawValue: mask), cookie: cookie,
                    name: String(decoding: nameBytes[nameBytes.startIndex..<end], as: UTF8.self)))
            offset += 16 + length
        }
        return events
    }

    public func close() throws(Errno) { try descriptor.close() }
}
