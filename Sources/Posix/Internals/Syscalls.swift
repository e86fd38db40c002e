// swift-format-ignore-file: AlwaysUseLowerCamelCase
// The only file in Posix that speaks to C. One thin wrapper per call; every
// other file uses the typed API built on these.

import CLinux
import Glibc

@usableFromInline
internal var system_errno: CInt {
    get { Glibc.errno }
    set { Glibc.errno = newValue }
}

internal func system_openat(_ dir: CInt, _ path: UnsafePointer<CChar>, _ flags: CInt, _ mode: mode_t) -> CInt {
    Glibc.openat(dir, path, flags, mode)
}

internal func system_openat_beneath(
    _ dir: CInt, _ path: UnsafePointer<CChar>, _ flags: CInt, _ mode: mode_t, noSymlinks: Bool
) -> CInt {
    clinux_openat_beneath(dir, path, flags, UInt32(mode), noSymlinks ? 1 : 0)
}

internal func system_openat_no_symlinks(_ dir: CInt, _ path: UnsafePointer<CChar>, _ flags: CInt) -> CInt {
    clinux_openat_no_symlinks(dir, path, flags)
}

internal func system_close(_ fd: CInt) -> CInt { Glibc.close(fd) }

internal func system_read(_ fd: CInt, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    clinux_read(fd, buffer, count)
}

internal func system_pread(_ fd: CInt, _ buffer: UnsafeMutableRawPointer?, _ count: Int, _ offset: off_t) -> Int {
    Glibc.pread(fd, buffer, count, offset)
}

internal func system_write(_ fd: CInt, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
    Glibc.write(fd, buffer, count)
}

internal func system_fsync(_ fd: CInt) -> CInt { Glibc.fsync(fd) }
internal func system_syncfs(_ fd: CInt) -> CInt { clinux_syncfs(fd) }
internal func system_set_attribute(_ fd: CInt, _ name: String, _ value: UnsafeRawBufferPointer) -> CInt {
    clinux_set_attribute(fd, name, value.baseAddress, value.count)
}
internal func system_get_attribute_at(
    _ dir: CInt, _ path: String, _ name: String, _ value: UnsafeMutableRawBufferPointer
) -> Int {
    clinux_get_attribute_at(dir, path, name, value.baseAddress, value.count)
}
internal func system_set_thread_name(_ name: UnsafePointer<CChar>) -> CInt { clinux_set_thread_name(name) }
internal func system_start_writeback(_ fd: CInt, _ offset: Int64, _ count: Int64) -> CInt {
    clinux_start_writeback(fd, offset, count)
}
internal func system_fdatasync(_ fd: CInt) -> CInt { Glibc.fdatasync(fd) }
internal func system_fchmod(_ fd: CInt, _ mode: mode_t) -> CInt { Glibc.fchmod(fd, mode) }
internal func system_fchown(_ fd: CInt, _ uid: uid_t, _ gid: gid_t) -> CInt { Glibc.fchown(fd, uid, gid) }
internal func system_ftruncate(_ fd: CInt, _ length: off_t) -> CInt { Glibc.ftruncate(fd, length) }
internal func system_fallocate(_ fd: CInt, _ length: Int64) -> CInt { clinux_fallocate(fd, length) }
internal func system_lseek_set(_ fd: CInt, _ offset: off_t) -> off_t { Glibc.lseek(fd, offset, SEEK_SET) }
internal func system_flock_exclusive_nonblocking(_ fd: CInt) -> CInt { clinux_flock_exclusive_nonblocking(fd) }

internal func system_fstatat(_ dir: CInt, _ path: UnsafePointer<CChar>, _ buf: inout stat, _ flags: CInt) -> CInt {
    Glibc.fstatat(dir, path, &buf, flags)
}

internal func system_fstat(_ fd: CInt, _ buf: inout stat) -> CInt { Glibc.fstat(fd, &buf) }
internal func system_fstatfsType(_ fd: CInt, _ type: inout Int64) -> CInt { clinux_fstatfs_type(fd, &type) }

internal func system_renameat(
    _ oldDir: CInt, _ old: UnsafePointer<CChar>, _ newDir: CInt, _ new: UnsafePointer<CChar>
) -> CInt {
    Glibc.renameat(oldDir, old, newDir, new)
}

internal func system_renameat2(
    _ oldDir: CInt, _ old: UnsafePointer<CChar>, _ newDir: CInt, _ new: UnsafePointer<CChar>, _ flags: CUnsignedInt
) -> CInt {
    clinux_renameat2(oldDir, old, newDir, new, flags)
}

internal var system_RENAME_EXCHANGE: CUnsignedInt { clinux_rename_exchange() }
internal var system_RENAME_NOREPLACE: CUnsignedInt { clinux_rename_noreplace() }

internal func system_linkat(
    _ oldDir: CInt, _ old: UnsafePointer<CChar>, _ newDir: CInt, _ new: UnsafePointer<CChar>, _ flags: CInt
) -> CInt {
    Glibc.linkat(oldDir, old, newDir, new, flags)
}

internal func system_unlinkat(_ dir: CInt, _ path: UnsafePointer<CChar>, _ flags: CInt) -> CInt {
    Glibc.unlinkat(dir, path, flags)
}

internal func system_mkdirat(_ dir: CInt, _ path: UnsafePointer<CChar>, _ mode: mode_t) -> CInt {
    Glibc.mkdirat(dir, path, mode)
}

internal func system_symlinkat(_ target: UnsafePointer<CChar>, _ dir: CInt, _ path: UnsafePointer<CChar>) -> CInt {
    Glibc.symlinkat(target, dir, path)
}

internal func system_readlinkat(
    _ dir: CInt, _ path: UnsafePointer<CChar>, _ buffer: UnsafeMutablePointer<CChar>, _ size: Int
) -> Int {
    Glibc.readlinkat(dir, path, buffer, size)
}

internal func system_dup(_ fd: CInt) -> CInt { Glibc.fcntl(fd, F_DUPFD_CLOEXEC, 0) }

internal func system_fdopendir(_ fd: CInt) -> OpaquePointer? { Glibc.fdopendir(fd) }
internal func system_readdir(_ dir: OpaquePointer) -> UnsafeMutablePointer<dirent>? { Glibc.readdir(dir) }
internal func system_closedir(_ dir: OpaquePointer) -> CInt { Glibc.closedir(dir) }

internal func system_getuid() -> uid_t { Glibc.getuid() }
internal func system_getgid() -> gid_t { Glibc.getgid() }
internal func system_geteuid() -> uid_t { Glibc.geteuid() }
internal func system_getegid() -> gid_t { Glibc.getegid() }
internal func system_getpid() -> pid_t { Glibc.getpid() }

internal func system_strerror(_ code: CInt) -> String { String(cString: Glibc.strerror(code)) }

internal func system_getrandom(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    clinux_getrandom(buffer, count)
}

internal func system_futimens(_ fd: CInt, _ times: UnsafePointer<timespec>?) -> CInt { Glibc.futimens(fd, times) }

internal func system_unix_socket(nonblocking: Bool) -> CInt { clinux_unix_socket(nonblocking ? 1 : 0) }
internal func system_unix_datagram_socket() -> CInt { clinux_unix_datagram_socket() }
internal func system_monotonic_usec() -> UInt64 { clinux_monotonic_usec() }
internal func system_unix_bind(_ fd: CInt, _ path: UnsafePointer<CChar>) -> CInt { clinux_unix_bind(fd, path) }
internal func system_unix_bound_path(_ fd: CInt, _ buffer: UnsafeMutablePointer<CChar>, _ capacity: CInt) -> CInt {
    clinux_unix_bound_path(fd, buffer, capacity)
}
internal func system_unix_connect(_ fd: CInt, _ path: UnsafePointer<CChar>) -> CInt { clinux_unix_connect(fd, path) }
internal func system_listen(_ fd: CInt, _ backlog: CInt) -> CInt { Glibc.listen(fd, backlog) }
internal func system_accept(_ fd: CInt) -> CInt { clinux_accept(fd) }
internal func system_shutdown(_ fd: CInt, _ how: CInt) -> CInt { Glibc.shutdown(fd, how) }
internal func system_chmod(_ path: UnsafePointer<CChar>, _ mode: mode_t) -> CInt { Glibc.chmod(path, mode) }
internal func system_peer_credentials(_ fd: CInt, _ out: inout clinux_peer_credentials) -> CInt {
    clinux_peer_credentials_get(fd, &out)
}
internal func system_peer_groups(_ fd: CInt, _ buffer: UnsafeMutablePointer<UInt32>, _ capacity: CInt) -> CInt {
    clinux_peer_groups_get(fd, buffer, capacity)
}
internal func system_set_nonblocking(_ fd: CInt) -> CInt {
    let flags = Glibc.fcntl(fd, F_GETFL)
    if flags == -1 { return -1 }
    return Glibc.fcntl(fd, F_SETFL, flags | O_NONBLOCK)
}
internal func system_send(_ fd: CInt, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
    clinux_send(fd, buffer, count, CInt(MSG_NOSIGNAL))
}

internal func system_epoll_create() -> CInt { clinux_epoll_create() }
internal func system_epoll_ctl(_ epfd: CInt, _ op: CInt, _ fd: CInt, _ events: UInt32, _ data: UInt64) -> CInt {
    clinux_epoll_ctl(epfd, op, fd, events, data)
}
internal func system_epoll_wait(
    _ epfd: CInt, _ events: UnsafeMutablePointer<clinux_epoll_event>, _ capacity: CInt, _ timeout: CInt
)
    -> CInt
{
    clinux_epoll_wait(epfd, events, capacity, timeout)
}
internal func system_eventfd() -> CInt { clinux_eventfd() }
internal func system_eventfd_signal(_ fd: CInt) -> CInt { clinux_eventfd_signal(fd) }

/// Runs `body` until it succeeds or fails with something other than EINTR.
/// `close` never goes through here: after EINTR its descriptor is already gone.
@inline(__always)
internal func valueOrErrno<I: FixedWidthInteger>(
    retryOnInterrupt: Bool = true, _ body: () -> I
) -> Result<I, Errno> {
    while true {
        let result = body()
        if result != -1 { return .success(result) }
        let code = system_errno
        if retryOnInterrupt && code == EINTR { continue }
        return .failure(Errno(rawValue: code))
    }
}

@inline(__always)
internal func nothingOrErrno<I: FixedWidthInteger>(
    retryOnInterrupt: Bool = true, _ body: () -> I
) -> Result<Void, Errno> {
    valueOrErrno(retryOnInterrupt: retryOnInterrupt, body).map { _ in () }
}
internal func system_crc32c_available() -> Bool { clinux_crc32c_available() != 0 }
internal func system_crc32c(_ crc: UInt32, _ bytes: UnsafeRawPointer, _ count: Int) -> UInt32 {
    clinux_crc32c(crc, bytes, count)
}
internal func system_crc32c_word_then(_ word: UInt32, _ bytes: UnsafeRawPointer, _ count: Int) -> UInt32 {
    clinux_crc32c_word_then(word, bytes, count)
}

internal func system_map_shared(_ fd: CInt, _ length: Int) -> UnsafeMutableRawPointer? { clinux_map_shared(fd, length) }
internal func system_store_forward(_ to: UnsafeMutableRawPointer, _ from: UnsafeRawPointer, _ count: Int) {
    clinux_store_forward(to, from, count)
}
internal func system_release_pages(_ address: UnsafeMutableRawPointer, _ length: Int) -> CInt {
    clinux_release_pages(address, length)
}
internal func system_unmap(_ address: UnsafeMutableRawPointer, _ length: Int) -> CInt { clinux_unmap(address, length) }
internal func system_populate_write(_ address: UnsafeMutableRawPointer, _ length: Int) -> CInt {
    clinux_populate_write(address, length)
}
internal func system_page_size() -> Int { Int(Glibc.sysconf(Int32(_SC_PAGESIZE))) }
