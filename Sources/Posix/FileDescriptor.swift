import Glibc

/// An open file descriptor.
///
/// Not `Sendable`: a descriptor has one owner, which closes it in one place,
/// usually through ``closeAfter(_:)``.
public struct FileDescriptor: RawRepresentable, Hashable {
    public let rawValue: CInt

    public init(rawValue: CInt) { self.rawValue = rawValue }

    /// The directory descriptor that makes `*at` calls resolve against the working directory.
    public static var currentWorkingDirectory: FileDescriptor { FileDescriptor(rawValue: AT_FDCWD) }

    /// How a file is opened for reading and writing.
    public struct AccessMode: RawRepresentable, Hashable, Sendable {
        public let rawValue: CInt
        public init(rawValue: CInt) { self.rawValue = rawValue }
        public static let readOnly = AccessMode(rawValue: O_RDONLY)
        public static let writeOnly = AccessMode(rawValue: O_WRONLY)
        public static let readWrite = AccessMode(rawValue: O_RDWR)
    }

    /// Flags for `openat`. `closeOnExec` is always added.
    public struct OpenOptions: OptionSet, Hashable, Sendable {
        public let rawValue: CInt
        public init(rawValue: CInt) { self.rawValue = rawValue }
        public static let create = OpenOptions(rawValue: O_CREAT)
        public static let exclusiveCreate = OpenOptions(rawValue: O_CREAT | O_EXCL)
        public static let truncate = OpenOptions(rawValue: O_TRUNC)
        public static let append = OpenOptions(rawValue: O_APPEND)
        public static let noFollow = OpenOptions(rawValue: O_NOFOLLOW)
        public static let directory = OpenOptions(rawValue: O_DIRECTORY)
        public static let nonBlocking = OpenOptions(rawValue: O_NONBLOCK)
        /// `O_PATH`: a handle for `*at` calls and `fstat` only.
        public static let pathOnly = OpenOptions(rawValue: 0o10000000)
    }

    /// Opens `path`, relative to `directory` when it is not absolute.
    ///
    /// - Parameters:
    ///   - path: The path to open. A path containing a NUL byte is refused with `EINVAL`.
    ///   - directory: The directory a relative path resolves against.
    ///   - mode: Read, write or both.
    ///   - options: `O_*` flags; `O_CLOEXEC` is always added.
    ///   - permissions: The mode of a file that `options` creates.
    /// - Returns: The new descriptor.
    /// - Throws: `Errno`.
    ///
    /// The corresponding C function is `openat`.
    public static func open(
        _ path: String,
        relativeTo directory: FileDescriptor = .currentWorkingDirectory,
        _ mode: AccessMode = .readOnly,
        options: OpenOptions = [],
        permissions: FilePermissions = .init(rawValue: 0o600)
    ) throws(Errno) -> FileDescriptor {
        let flags = mode.rawValue | options.rawValue | O_CLOEXEC
        let fd = try withCPath(path) { p in
            valueOrErrno { system_openat(directory.rawValue, p, flags, permissions.rawValue) }
        }.get()
        return FileDescriptor(rawValue: fd)
    }

    /// Opens `path` beneath `directory` only: `..`, absolute paths and symbolic links
    /// that lead outside `directory` fail with `EXDEV`; with `noSymlinks`, any
    /// symbolic link in the path fails with `ELOOP`.
    ///
    /// The corresponding C function is `openat2` with `RESOLVE_BENEATH`.
    public static func openBeneath(
        _ path: String,
        relativeTo directory: FileDescriptor,
        _ mode: AccessMode = .readOnly,
        options: OpenOptions = [],
        permissions: FilePermissions = .init(rawValue: 0o600),
        noSymlinks: Bool = false
    ) throws(Errno) -> FileDescriptor {
        let flags = mode.rawValue | options.rawValue | O_CLOEXEC
        let result = withCPath(path) { p in
            valueOrErrno {
                system_openat_beneath(directory.rawValue, p, flags, permissions.rawValue, noSymlinks: noSymlinks)
            }
        }
        switch result {
        case .success(let fd):
            return FileDescriptor(rawValue: fd)
        case .failure(.noSystemCall) where noSymlinks:
            // No openat2 (a kernel before 5.6, or a seccomp filter that does not know it):
            // walk the path one component at a time, refusing every symbolic link.
            return try openBeneathByWalking(
                path, relativeTo: directory, mode, options: options, permissions: permissions)
        case .failure(let error):
            throw error
        }
    }

    /// Opens `path` (not creating it) through no symbolic link on any of its components,
    /// those above `directory` included (`openat2` with `RESOLVE_NO_SYMLINKS`): a link on
    /// the way fails it with ``Errno/tooManySymbolicLinks``; without `openat2` (before
    /// Linux 5.6) it fails with ``Errno/noSystemCall``.
    public static func openWithoutSymlinks(
        _ path: String, relativeTo directory: FileDescriptor = .currentWorkingDirectory, _ mode: AccessMode = .readOnly,
        options: OpenOptions = []
    ) throws(Errno) -> FileDescriptor {
        let flags = mode.rawValue | options.rawValue | O_CLOEXEC
        let fd = try withCPath(path) { p in
            valueOrErrno { system_openat_no_symlinks(directory.rawValue, p, flags) }
        }.get()
        return FileDescriptor(rawValue: fd)
    }

    /// `openBeneath` with `noSymlinks` without `openat2`: each directory component is
    /// checked with `fstatat(AT_SYMLINK_NOFOLLOW)` and opened with `O_PATH|O_NOFOLLOW`.
    static func openBeneathByWalking(
        _ path: String, relativeTo directory: FileDescriptor, _ mode: AccessMode, options: OpenOptions,
        permissions: FilePermissions
    ) throws(Errno) -> FileDescriptor {
        if path.utf8.first == UInt8(ascii: "/") { throw .crossDevice }
        let components = PathName.components(path).filter { !$0.utf8.elementsEqual(".".utf8) }
        if components.contains(where: { $0.utf8.elementsEqual("..".utf8) }) { throw .crossDevice }
        guard let last = components.last else {
            return try FileDescriptor.open(".", relativeTo: directory, mode, options: options, permissions: permissions)
        }
        var current = try FileDescriptor.open(".", relativeTo: directory, options: [.pathOnly, .directory])
        defer { try? current.close() }
        for name in components.dropLast() {
            let status = try current.status(of: name)
            if status.kind == .symbolicLink { throw .tooManySymbolicLinks }
            if status.kind != .directory { throw .notDirectory }
            let next = try FileDescriptor.open(name, relativeTo: current, options: [.pathOnly, .directory, .noFollow])
            try? current.close()
            current = next
        }
        if let status = try current.statusIfPresent(of: last), status.kind == .symbolicLink {
            throw .tooManySymbolicLinks
        }
        return try FileDescriptor.open(
            last, relativeTo: current, mode, options: options.union(.noFollow), permissions: permissions)
    }

    /// Closes the descriptor. Never retried: after `EINTR` the descriptor is already released.
    ///
    /// The corresponding C function is `close`.
    public func close() throws(Errno) {
        if system_close(rawValue) == -1 {
            let code = system_errno
            if code != EINTR { throw Errno(rawValue: code) }
        }
    }

    /// Runs `body` with the descriptor, then closes it whatever `body` did.
    public func closeAfter<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        defer { try? close() }
        return try body()
    }

    /// Duplicates the descriptor (with `FD_CLOEXEC`).
    ///
    /// The corresponding C function is `fcntl(F_DUPFD_CLOEXEC)`.
    public func duplicate() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { system_dup(rawValue) }.get())
    }
}

// MARK: Reading and writing

extension FileDescriptor {
    /// Reads up to `buffer.count` bytes. Returns 0 at end of file.
    ///
    /// The corresponding C function is `read`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno { system_read(rawValue, buffer.baseAddress, buffer.count) }.get()
    }

    /// Reads from the current offset to the end of the file.
    ///
    /// `sizeHint` (the file's size, when known) sizes the buffer: the bytes are read
    /// straight into one uninitialised allocation of `sizeHint + 1` bytes (the extra byte
    /// lets the read that finds the end of the file tell it from a file that grew), so a
    /// small file costs no zero-filling of space it does not use. A file longer than the
    /// hint is read on into an allocation twice as large.
    public func readToEnd(sizeHint: Int = 0) throws(Errno) -> [UInt8] {
        var bytes: [UInt8] = []
        var capacity = max(sizeHint, 4095) + 1
        while true {
            var failure: Errno?
            var reachedEnd = false
            let previous = bytes
            bytes = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
                initialized = previous.withUnsafeBufferPointer { buffer.initialize(fromContentsOf: $0) }
                while initialized < buffer.count {
                    let free = UnsafeMutableBufferPointer(rebasing: buffer[initialized...])
                    do throws(Errno) {
                        let n = try read(into: UnsafeMutableRawBufferPointer(free))
                        if n == 0 {
                            reachedEnd = true
                            return
                        }
                        initialized += n
                    } catch {
                        failure = error
                        return
                    }
                }
            }
            if let failure { throw failure }
            if reachedEnd { return bytes }
            capacity *= 2
        }
    }

    /// Writes every byte of `buffer`, looping over short writes.
    ///
    /// The corresponding C function is `write`.
    public func writeAll(_ buffer: UnsafeRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < buffer.count {
            let n = try valueOrErrno {
                system_write(rawValue, buffer.baseAddress! + offset, buffer.count - offset)
            }.get()
            offset += n
        }
    }

    /// Writes every byte of `bytes` (a `[UInt8]`, `Data`, …).
    public func writeAll<S: Sequence<UInt8>>(_ bytes: S) throws(Errno) {
        let result = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(Errno) in try writeAll(UnsafeRawBufferPointer(buffer)) }
        }
        if let result { return try result.get() }
        try Array(bytes).withUnsafeBytes { buffer in Result { () throws(Errno) in try writeAll(buffer) } }.get()
    }

    /// Flushes the file's data and metadata to the storage device.
    ///
    /// The corresponding C function is `fsync`.
    public func sync() throws(Errno) {
        try nothingOrErrno { system_fsync(rawValue) }.get()
    }

    /// Sets the extended attribute `name` (a `user.` name, say) to `value`, creating or
    /// replacing it. Part of the file's inode: durable with its next ``sync()``.
    /// `ENOTSUP` where the file system keeps no such attributes.
    ///
    /// The corresponding C function is `fsetxattr`.
    public func setAttribute(_ name: String, to value: [UInt8]) throws(Errno) {
        let result = value.withUnsafeBytes { bytes in
            nothingOrErrno { system_set_attribute(rawValue, name, bytes) }
        }
        try result.get()
    }

    /// The extended attribute `name` of the file at `path` in this directory (a final
    /// symbolic link not followed), at most `limit` bytes; `nil` when it has none of that
    /// name (`ENODATA`) or the file system keeps none (`ENOTSUP`).
    ///
    /// The corresponding C function is `fgetxattr`, on the file opened read-only.
    public func attribute(_ name: String, of path: String, limit: Int = 256) throws(Errno) -> [UInt8]? {
        var value = [UInt8](repeating: 0, count: limit)
        let result = value.withUnsafeMutableBytes { bytes in
            valueOrErrno { system_get_attribute_at(rawValue, path, name, bytes) }
        }
        switch result {
        case .success(let count):
            value.removeSubrange(count...)
            return value
        case .failure(let error) where error == .noData || error == .notSupported:
            return nil
        case .failure(let error):
            throw error
        }
    }

    /// Starts writing the file's dirty pages within `count` bytes from `offset` back to the
    /// storage device, and returns without waiting for them: a ``sync()`` that follows
    /// finds part of its work done or under way. Durability still needs that sync (the
    /// file's metadata and a write-back error are its business).
    ///
    /// The corresponding C function is `sync_file_range(SYNC_FILE_RANGE_WRITE)`.
    public func startWriteBack(from offset: Int64, count: Int64) throws(Errno) {
        try nothingOrErrno { system_start_writeback(rawValue, offset, count) }.get()
    }

    /// Flushes the file's data, and the metadata needed to read it back (its size), to the
    /// storage device; unlike ``sync()`` it skips metadata such as the modification time.
    ///
    /// The corresponding C function is `fdatasync`.
    public func dataSync() throws(Errno) {
        try nothingOrErrno { system_fdatasync(rawValue) }.get()
    }

    /// Takes an exclusive advisory lock on the open file without waiting: `EWOULDBLOCK`
    /// (``Errno/wouldBlock``) when another open file description holds it. The lock goes
    /// with the last descriptor of this open file description, and with the process.
    ///
    /// The corresponding C function is `flock(LOCK_EX | LOCK_NB)`.
    public func lockExclusively() throws(Errno) {
        try nothingOrErrno { system_flock_exclusive_nonblocking(rawValue) }.get()
    }

    /// Flushes every file of the file system holding this descriptor, and reports a
    /// write-back error that happened since the descriptor was opened.
    ///
    /// The corresponding C function is `syncfs`.
    public func syncFileSystem() throws(Errno) {
        try nothingOrErrno { system_syncfs(rawValue) }.get()
    }

    /// Truncates or extends the file to `length` bytes.
    ///
    /// The corresponding C function is `ftruncate`.
    public func truncate(to length: Int64) throws(Errno) {
        try nothingOrErrno { system_ftruncate(rawValue, off_t(length)) }.get()
    }

    /// Allocates the file's blocks up to `length` bytes, extending its size to at least
    /// that; the new bytes read as zeros. `EOPNOTSUPP` (``Errno/notSupported``) where the
    /// file system cannot (tmpfs can; NFS before 4.2 and many FUSE file systems cannot).
    ///
    /// The corresponding C function is `fallocate` with no flags.
    public func allocate(upTo length: Int64) throws(Errno) {
        try nothingOrErrno { system_fallocate(rawValue, length) }.get()
    }

    /// Moves the file offset, where the next `read` or `write` starts, to `offset`.
    ///
    /// The corresponding C function is `lseek` with `SEEK_SET`.
    public func seek(to offset: Int64) throws(Errno) {
        try nothingOrErrno { system_lseek_set(rawValue, off_t(offset)) }.get()
    }
}

// MARK: Metadata

extension FileDescriptor {
    /// The status of the open file.
    ///
    /// The corresponding C function is `fstat`.
    public func status() throws(Errno) -> FileStatus {
        var buf = stat()
        try nothingOrErrno { system_fstat(rawValue, &buf) }.get()
        return FileStatus(buf)
    }

    /// The magic number of the file system holding this file (`statfs`'s `f_type`:
    /// `0x65735546` for FUSE, `0x6969` for NFS, …).
    ///
    /// The corresponding C function is `fstatfs`.
    public func fileSystemType() throws(Errno) -> Int64 {
        var type: Int64 = 0
        try nothingOrErrno { system_fstatfsType(rawValue, &type) }.get()
        return type
    }

    /// The status of `name` relative to this directory.
    ///
    /// - Parameter followSymlinks: When `false`, a symbolic link is described itself (`AT_SYMLINK_NOFOLLOW`).
    ///
    /// The corresponding C function is `fstatat`.
    public func status(of name: String, followSymlinks: Bool = false) throws(Errno) -> FileStatus {
        var buf = stat()
        let flags = followSymlinks ? 0 : AT_SYMLINK_NOFOLLOW
        try withCPath(name) { p in nothingOrErrno { system_fstatat(rawValue, p, &buf, flags) } }.get()
        return FileStatus(buf)
    }

    /// The status of `name`, or `nil` when nothing exists there.
    public func statusIfPresent(of name: String, followSymlinks: Bool = false) throws(Errno) -> FileStatus? {
        do { return try status(of: name, followSymlinks: followSymlinks) } catch Errno.noSuchFile { return nil }
    }

    /// Sets the permission bits.
    ///
    /// The corresponding C function is `fchmod`.
    public func changeMode(_ permissions: FilePermissions) throws(Errno) {
        try nothingOrErrno { system_fchmod(rawValue, permissions.rawValue) }.get()
    }

    /// Sets the owner and group; pass `nil` to leave either as it is.
    ///
    /// The corresponding C function is `fchown`.
    public func changeOwner(user: UInt32?, group: UInt32?) throws(Errno) {
        let uid = user.map { uid_t($0) } ?? uid_t.max
        let gid = group.map { gid_t($0) } ?? gid_t.max
        try nothingOrErrno { system_fchown(rawValue, uid, gid) }.get()
    }

    /// Sets the access and modification times.
    ///
    /// The corresponding C function is `futimens`.
    public func setTimes(accessed: FileTime, modified: FileTime) throws(Errno) {
        var times = [
            timespec(tv_sec: accessed.seconds, tv_nsec: Int(accessed.nanoseconds)),
            timespec(tv_sec: modified.seconds, tv_nsec: Int(modified.nanoseconds)),
        ]
        try nothingOrErrno { system_futimens(rawValue, &times) }.get()
    }
}

// MARK: Directory operations (this descriptor is a directory)

extension FileDescriptor {
    /// Renames `name` in this directory to `newName` in `newDirectory`, replacing what is there.
    ///
    /// The corresponding C function is `renameat`.
    public func rename(_ name: String, to newName: String, in newDirectory: FileDescriptor? = nil) throws(Errno) {
        let target = (newDirectory ?? self).rawValue
        try withCPath(name) { old in
            withCPath(newName) { new in nothingOrErrno { system_renameat(rawValue, old, target, new) } }
        }.get()
    }

    /// Flags for ``rename(_:to:in:flags:)``.
    public struct RenameFlags: OptionSet, Hashable, Sendable {
        public let rawValue: CUnsignedInt
        public init(rawValue: CUnsignedInt) { self.rawValue = rawValue }
        /// Swap the two names atomically; both must exist.
        public static var exchange: RenameFlags { RenameFlags(rawValue: system_RENAME_EXCHANGE) }
        /// Fail with `EEXIST` instead of replacing.
        public static var noReplace: RenameFlags { RenameFlags(rawValue: system_RENAME_NOREPLACE) }
    }

    /// Renames with flags: `.exchange` swaps two names atomically, `.noReplace` refuses to replace.
    ///
    /// The corresponding C function is `renameat2`.
    public func rename(
        _ name: String, to newName: String, in newDirectory: FileDescriptor? = nil, flags: RenameFlags
    ) throws(Errno) {
        let target = (newDirectory ?? self).rawValue
        try withCPath(name) { old in
            withCPath(newName) { new in
                nothingOrErrno { system_renameat2(rawValue, old, target, new, flags.rawValue) }
            }
        }.get()
    }

    /// Creates a hard link `newName` in `newDirectory` to `name` in this directory.
    ///
    /// The corresponding C function is `linkat`.
    public func link(_ name: String, to newName: String, in newDirectory: FileDescriptor? = nil) throws(Errno) {
        let target = (newDirectory ?? self).rawValue
        try withCPath(name) { old in
            withCPath(newName) { new in nothingOrErrno { system_linkat(rawValue, old, target, new, 0) } }
        }.get()
    }

    /// Removes `name`; with `directory: true`, removes an empty directory.
    ///
    /// The corresponding C function is `unlinkat`.
    public func unlink(_ name: String, directory: Bool = false) throws(Errno) {
        let flags = directory ? AT_REMOVEDIR : 0
        try withCPath(name) { p in nothingOrErrno { system_unlinkat(rawValue, p, flags) } }.get()
    }

    /// Creates the directory `name`.
    ///
    /// The corresponding C function is `mkdirat`.
    public func makeDirectory(_ name: String, permissions: FilePermissions = .init(rawValue: 0o755)) throws(Errno) {
        try withCPath(name) { p in nothingOrErrno { system_mkdirat(rawValue, p, permissions.rawValue) } }.get()
    }

    /// Creates a symbolic link `name` pointing at `destination`.
    ///
    /// The corresponding C function is `symlinkat`.
    public func makeSymbolicLink(_ name: String, pointingTo destination: String) throws(Errno) {
        try withCPath(destination) { d in
            withCPath(name) { p in nothingOrErrno { system_symlinkat(d, rawValue, p) } }
        }.get()
    }

    /// The destination of the symbolic link `name`; `EILSEQ` when it is not UTF-8.
    ///
    /// The corresponding C function is `readlinkat`.
    public func readSymbolicLink(_ name: String) throws(Errno) -> String {
        var capacity = 256
        while true {
            var buffer = [CChar](repeating: 0, count: capacity)
            let n = try withCPath(name) { p in
                buffer.withUnsafeMutableBufferPointer { b in
                    valueOrErrno { system_readlinkat(rawValue, p, b.baseAddress!, capacity) }
                }
            }.get()
            if n < capacity {
                // A destination that is not UTF-8 has no String that writes it back as it
                // was: refused rather than silently changed.
                guard let destination = String(validating: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                else { throw Errno.illegalByteSequence }
                return destination
            }
            capacity *= 4
        }
    }

    /// Where `d_name` lies in a `dirent`.
    private static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!

    /// The entries of this directory, without `.` and `..`, in the order the file system gives.
    ///
    /// The descriptor stays open and its offset is untouched: the listing reads a duplicate.
    ///
    /// The corresponding C functions are `fdopendir` and `readdir`.
    public func directoryEntries() throws(Errno) -> [DirectoryEntry] {
        try directoryEntries(atMost: .max).entries
    }

    /// ``directoryEntries()``, reading no more than `limit` entries: `complete` says
    /// whether they are all of them.
    public func directoryEntries(atMost limit: Int) throws(Errno) -> (entries: [DirectoryEntry], complete: Bool) {
        let copy = try FileDescriptor.open(".", relativeTo: self, .readOnly, options: [.directory])
        guard let stream = system_fdopendir(copy.rawValue) else {
            let error = Errno.current
            try? copy.close()
            throw error
        }
        defer { _ = system_closedir(stream) }
        var entries: [DirectoryEntry] = []
        while true {
            system_errno = 0
            guard let entry = system_readdir(stream) else {
                if system_errno != 0 { throw Errno.current }
                return (entries, true)
            }
            // The name is read where it lies, up to its terminating zero: `readdir` packs
            // entries by `d_reclen`, so the last one in its buffer may end well before the
            // 256 bytes `d_name` is declared with (copying the field whole reads past it).
            let start = UnsafeRawPointer(entry) + Self.nameOffset
            let bytes = UnsafeBufferPointer(
                start: start.assumingMemoryBound(to: UInt8.self),
                count: strlen(start.assumingMemoryBound(to: CChar.self)))
            let validated = String(validating: bytes, as: UTF8.self)
            let name = validated ?? String(decoding: bytes, as: UTF8.self)
            if name == "." || name == ".." { continue }
            if entries.count == limit { return (entries, false) }
            entries.append(
                DirectoryEntry(
                    name: name, kind: FileKind(directoryEntryType: entry.pointee.d_type), nameIsUTF8: validated != nil))
        }
    }
}

/// One entry of a directory listing.
public struct DirectoryEntry: Hashable, Sendable {
    /// The name; with U+FFFD for the bytes that are not UTF-8 when ``nameIsUTF8`` is false.
    public var name: String
    /// The type the file system reported, or `nil` when it did not say (`DT_UNKNOWN`).
    public var kind: FileKind?
    /// Whether the name's bytes are UTF-8. A name that is not has no String that opens
    /// the file again (``name`` names another file, or none).
    public var nameIsUTF8 = true
}

/// Calls `body` with a C string for `path`, refusing a path with an embedded NUL byte,
/// which C would silently cut short.
@inline(__always)
internal func withCPath<T>(_ path: String, _ body: (UnsafePointer<CChar>) -> Result<T, Errno>) -> Result<T, Errno> {
    if path.utf8.contains(0) { return .failure(.invalidArgument) }
    return path.withCString(body)
}
