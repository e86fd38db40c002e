#ifndef CLINUX_H
#define CLINUX_H

// Pieces of glibc that are only declared under _GNU_SOURCE, exposed as small
// inline functions and constants so Swift can call them without defining the
// macro for every target.

#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/// read(2) and sendto(2) as plain system calls: glibc's wrappers are cancellation points
/// and switch the thread's cancellation state around every call, which nothing here uses
/// (no thread is ever cancelled) and which costs on the control socket's busiest path.
static inline long clinux_read(int fd, void *buffer, size_t count) {
    return syscall(SYS_read, fd, buffer, count);
}
static inline long clinux_send(int fd, const void *buffer, size_t count, int flags) {
    return syscall(SYS_sendto, fd, buffer, count, flags, (void *)0, 0);
}

/// fallocate(fd, 0, 0, length): reserves the file's blocks up to `length`, extending its
/// size; -1 with errno (EOPNOTSUPP where the file system cannot) on failure.
int clinux_fallocate(int fd, int64_t length);

/// The file system type (statfs's f_type) of the file open at `fd` in `type`; -1 with errno on failure.
int clinux_fstatfs_type(int fd, int64_t *type);

/// mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0): the file's first `length`
/// bytes mapped shared and writable, or NULL with errno set.
void *clinux_map_shared(int fd, size_t length);

/// Copies `count` bytes from `source` to `destination` strictly front to back (`rep movsb`
/// on x86-64, a byte loop elsewhere): a process killed in the middle leaves a prefix of
/// the bytes stored, as an interrupted write(2) does. memcpy may store the end first.
void clinux_store_forward(void *destination, const void *source, size_t count);

/// madvise(address, length, MADV_DONTNEED): the pages leave the mapping; a shared file
/// mapping's data stays in the page cache.
int clinux_release_pages(void *address, size_t length);

/// munmap(address, length).
int clinux_unmap(void *address, size_t length);

/// madvise(address, length, MADV_POPULATE_WRITE) (Linux 5.14): faults the pages in,
/// writable, ahead of the writes that would otherwise fault them in one at a time.
int clinux_populate_write(void *address, size_t length);

int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                     unsigned int flags);
unsigned int clinux_rename_exchange(void);
unsigned int clinux_rename_noreplace(void);
int clinux_o_tmpfile(void);

/// Credentials of the peer of a connected Unix socket (SO_PEERCRED).
typedef struct {
    int32_t pid;
    uint32_t uid;
    uint32_t gid;
} clinux_peer_credentials;

int clinux_peer_credentials_get(int socket, clinux_peer_credentials *out);

/// openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (and optionally RESOLVE_NO_SYMLINKS).
int clinux_openat_beneath(int dirfd, const char *path, int flags, unsigned int mode, int no_symlinks);

/// openat2(2) with RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS: no symbolic link on the whole path (no O_CREAT).
int clinux_openat_no_symlinks(int dirfd, const char *path, int flags);

/// getrandom(2) without flags.
long clinux_getrandom(void *buffer, size_t count);
/// syncfs(2): flush the file system holding `fd`.
int clinux_syncfs(int fd);

/// fsetxattr(2): sets the extended attribute `name` of the open file `fd` (created or replaced).
int clinux_set_attribute(int fd, const char *name, const void *value, size_t size);

/// getxattr(2) through `dirfd` and a name in it, without following a final symbolic
/// link: the attribute's size, or -1 with errno (ENODATA: the file has none of that name).
long clinux_get_attribute_at(int dirfd, const char *path, const char *name, void *value, size_t size);
/// prctl(PR_SET_NAME): the calling thread's name as the kernel shows it (`comm`, in
/// /proc/PID/task/TID/comm, `top -H`, `perf`), cut to 15 bytes.
int clinux_set_thread_name(const char *name);
/// sync_file_range(2) with SYNC_FILE_RANGE_WRITE over `count` bytes from `offset` (0: to
/// the end of the file): starts writing those dirty pages back without waiting for them.
int clinux_start_writeback(int fd, int64_t offset, int64_t count);

/// SO_PEERGROUPS: the supplementary groups of a Unix socket's peer. Returns the count
/// (which may exceed `capacity`: call again with more room), or -1.
int clinux_peer_groups_get(int socket, uint32_t *groups, int capacity);

/// Binds a Unix stream socket to `path` (which must fit sun_path); -1 with errno on failure,
/// ENAMETOOLONG when it does not fit.
int clinux_unix_bind(int socket, const char *path);
int clinux_unix_connect(int socket, const char *path);
/// The path a Unix socket is bound to (getsockname), NUL-terminated in `buffer`: its
/// length, or -1 with errno (EAFNOSUPPORT for an unnamed or abstract socket).
int clinux_unix_bound_path(int socket, char *buffer, int capacity);
int clinux_accept(int socket);
int clinux_unix_socket(int nonblocking);

/// epoll, one call each.
int clinux_epoll_create(void);
int clinux_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data);
typedef struct { uint32_t events; uint64_t data; } clinux_epoll_event;
int clinux_epoll_wait(int epfd, clinux_epoll_event *events, int capacity, int timeout);
uint32_t clinux_epollin(void);
uint32_t clinux_epollout(void);
uint32_t clinux_epollerr(void);
uint32_t clinux_epollhup(void);
uint32_t clinux_epollrdhup(void);
uint32_t clinux_epolloneshot(void);
uint32_t clinux_epollet(void);
int clinux_epoll_ctl_add(void);
int clinux_epoll_ctl_mod(void);
int clinux_epoll_ctl_del(void);

/// eventfd for waking an epoll loop.
int clinux_eventfd(void);
/// Adds 1 to an eventfd's counter (eventfd_write).
int clinux_eventfd_signal(int fd);

/// A Unix datagram socket (close-on-exec), for a NOTIFY_SOCKET-style receiver.
int clinux_unix_datagram_socket(void);
/// flock(LOCK_EX | LOCK_NB): Swift sees only `struct flock` under that name.
int clinux_flock_exclusive_nonblocking(int fd);
/// CLOCK_MONOTONIC in microseconds.
uint64_t clinux_monotonic_usec(void);

/// Whether the CPU computes CRC-32C in hardware (SSE4.2's `crc32` on x86-64).
int clinux_crc32c_available(void);
/// CRC-32C (Castagnoli, reflected) of `length` bytes, continuing `crc` (the checksum of
/// what came before, 0 to start), with the CPU's instruction; only when
/// `clinux_crc32c_available()`.
uint32_t clinux_crc32c(uint32_t crc, const void *bytes, size_t length);
/// CRC-32C of the 4 bytes of `word` (as stored little-endian) followed by `length` bytes,
/// in one call: a journal record's checksum (its length word, then its body).
uint32_t clinux_crc32c_word_then(uint32_t word, const void *bytes, size_t length);

/// How many bytes at the start of `bytes` (a multiple of 16, at most `length`) hold no
/// byte that ends a JSON string's plain run — a quote, a backslash, a control character,
/// a byte outside ASCII — and, when one of the next sixteen bytes does, its offset: the
/// control characters and the bytes outside ASCII are, as signed bytes, those below 0x20.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
static inline long clinux_json_plain_prefix(const void *bytes, long length) {
    long i = 0;
#if defined(__SSE2__)
    const unsigned char *p = (const unsigned char *)bytes;
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    for (; i + 16 <= length; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i stop = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), _mm_cmplt_epi8(v, space));
        int mask = _mm_movemask_epi8(stop);
        if (mask != 0) return i + __builtin_ctz((unsigned)mask);
    }
#else
    (void)bytes;
    (void)length;
#endif
    return i;
}

/// glibc's allocator: the bytes it holds free and in use over every arena (mallinfo2),
/// and malloc_trim(0), which gives every whole free page back to the system.
#include <malloc.h>
static inline void clinux_malloc_usage(size_t *free_bytes, size_t *used_bytes, size_t *mapped_bytes) {
    struct mallinfo2 info = mallinfo2();
    *free_bytes = info.fordblks;
    *used_bytes = info.uordblks;
    *mapped_bytes = info.hblkhd;
}
static inline int clinux_malloc_trim(void) { return malloc_trim(0); }
/// Has every thread allocate from the main arena (mallopt M_ARENA_MAX 1); see Allocator.useOneArena.
static inline int clinux_malloc_one_arena(void) { return mallopt(M_ARENA_MAX, 1); }

/// Asks the CPU to bring the `lines` cache lines from `address` on into its caches, and
/// returns at once: for memory about to be read whose address is known before the work
/// that precedes the read, so that the two overlap.
static inline void clinux_prefetch_lines(const void *address, int lines) {
    for (int i = 0; i < lines; i++) __builtin_prefetch((const char *)address + 64 * i);
}

/// A pass's sends, or its receives, made together: one io_uring_enter(2) for a batch of
/// non-blocking calls (send with MSG_NOSIGNAL | MSG_DONTWAIT, recv with MSG_DONTWAIT) on many
/// sockets, instead of one sendto(2) or recvfrom(2) each. A call that would block completes
/// at once with -EAGAIN, as the system call would return it.
typedef struct clinux_io_batch clinux_io_batch;

/// A ring for batches of up to `entries` calls (larger batches go in pieces); NULL with
/// errno when the kernel offers no io_uring (ENOSYS; EPERM under a seccomp filter or
/// kernel.io_uring_disabled; ENOMEM).
clinux_io_batch *clinux_io_batch_create(unsigned entries);
void clinux_io_batch_destroy(clinux_io_batch *batch);
/// 1 while the ring is in use; 0 once a submission failed and it was given up.
int clinux_io_batch_usable(const clinux_io_batch *batch);

/// Sends (`receive` 0) `lengths[i]` bytes from `buffers[i]` to `fds[i]`, or receives
/// (`receive` 1) up to `lengths[i]` bytes from `fds[i]` into `buffers[i]`, for every
/// i < count, and sets `results[i]` to the bytes sent or received or -errno. With a ring, a
/// batch of at least `clinux_io_batch_minimum` calls is submitted with one system call (a
/// batch larger than the ring, in pieces); a smaller one (or any, with `batch` NULL) is one
/// system call each, which costs less for so few. Returns how many calls went through the
/// ring.
int clinux_io_batch_run(clinux_io_batch *batch, int receive, int count, const int *fds, void *const *buffers,
                        const size_t *lengths, long *results);

/// The smallest batch made through the ring (below it, a system call each costs less).
extern const int clinux_io_batch_minimum;

#endif
