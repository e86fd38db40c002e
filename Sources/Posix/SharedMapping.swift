/// A file's first bytes mapped shared and writable (`mmap` with `MAP_SHARED`): bytes copied
/// into the mapping are in the file's page cache at once, as after a `write(2)`, without a
/// system call. They survive the end of the process (SIGKILL included) and reach the disk
/// with the file's next `fdatasync`, which writes back the pages dirtied here.
///
/// Only for a file whose blocks are allocated for the whole mapping (`fallocate`) on a
/// file system that writes such blocks in place: a store to a page of the mapping that
/// needs a new block, beyond the end of the file, or that cannot be read back from the
/// disk raises `SIGBUS` rather than returning an error.
///
/// A value type holding an address: copies share the mapping, and ``unmap()`` ends it for
/// all of them. The owner serializes stores and the unmapping.
public struct SharedMapping: Sendable {
    /// The mapping's address, as a number (a pointer is not `Sendable`).
    private let address: UInt
    /// Bytes mapped from the start of the file.
    public let length: Int

    /// Maps the first `length` bytes of the file open (read-write) at `fd`.
    ///
    /// The corresponding C function is `mmap`.
    public init(_ fd: FileDescriptor, length: Int) throws(Errno) {
        precondition(length > 0, "an empty mapping")
        guard let pointer = system_map_shared(fd.rawValue, length) else { throw Errno(rawValue: system_errno) }
        address = UInt(bitPattern: pointer)
        self.length = length
    }

    private var base: UnsafeMutableRawPointer { UnsafeMutableRawPointer(bitPattern: address)! }

    /// Copies `bytes` into the file at `offset` (which, with the bytes' count, stays within
    /// ``length``), front to back: a process killed in the middle of the copy leaves a
    /// prefix of the bytes in the file, as an interrupted `write(2)` does, never a later
    /// part without an earlier one (`memcpy` may store the end of a block first).
    public func store(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
        precondition(offset >= 0 && bytes.count <= length - offset, "a store past the mapping")
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        system_store_forward(base + offset, source, bytes.count)
    }

    /// Faults in the pages holding `range` (clamped to the mapping) writable, so that the
    /// stores that follow find them there.
    ///
    /// The corresponding C function is `madvise` with `MADV_POPULATE_WRITE`.
    public func prepare(_ range: Range<Int>) throws(Errno) {
        let page = Self.pageSize
        let start = max(0, range.lowerBound) / page * page
        let end = min(length, range.upperBound)
        guard start < end else { return }
        try nothingOrErrno { system_populate_write(base + start, end - start) }.get()
    }

    /// Takes the whole pages within `range` out of the mapping (`MADV_DONTNEED`): what was
    /// stored there stays in the file's page cache (dirty pages stay dirty), and a later
    /// store or read maps the page again. One TLB flush for the range, where writing back
    /// pages still mapped write-protects them one at a time.
    public func release(_ range: Range<Int>) {
        let page = Self.pageSize
        let start = (max(0, range.lowerBound) + page - 1) / page * page
        let end = min(length, range.upperBound) / page * page
        guard start < end else { return }
        _ = system_release_pages(base + start, end - start)
    }

    /// Ends the mapping. What was stored stays in the file.
    ///
    /// The corresponding C function is `munmap`.
    public func unmap() {
        _ = system_unmap(base, length)
    }

    /// The size of a page, the unit of ``prepare(_:)`` and ``release(_:)``.
    public static let pageSize = system_page_size()
}
