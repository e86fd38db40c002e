#define _GNU_SOURCE
#include "CLinux.h"

#include <errno.h>
#include <sys/statfs.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                     unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

unsigned int clinux_rename_exchange(void) { return RENAME_EXCHANGE; }
unsigned int clinux_rename_noreplace(void) { return RENAME_NOREPLACE; }
int clinux_o_tmpfile(void) { return O_TMPFILE; }

int clinux_peer_credentials_get(int socket, clinux_peer_credentials *out) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        return -1;
    }
    out->pid = cred.pid;
    out->uid = cred.uid;
    out->gid = cred.gid;
    return 0;
}

int clinux_openat_beneath(int dirfd, const char *path, int flags, unsigned int mode, int no_symlinks) {
    struct open_how how = {0};
    how.flags = (uint64_t)flags;
    how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (no_symlinks) {
        how.resolve |= RESOLVE_NO_SYMLINKS;
    }
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int clinux_openat_no_symlinks(int dirfd, const char *path, int flags) {
    struct open_how how = {0};
    how.flags = (uint64_t)flags;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

long clinux_getrandom(void *buffer, size_t count) { return (long)getrandom(buffer, count, 0); }

int clinux_syncfs(int fd) { return syncfs(fd); }

int clinux_set_attribute(int fd, const char *name, const void *value, size_t size) {
    return fsetxattr(fd, name, value, size, 0);
}

long clinux_get_attribute_at(int dirfd, const char *path, const char *name, void *value, size_t size) {
    /* No getxattrat before Linux 6.13: the file is opened without following a link
       (O_PATH cannot read attributes), read through its descriptor, and closed. */
    int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return -1;
    long got = fgetxattr(fd, name, value, size);
    int saved = errno;
    close(fd);
    errno = saved;
    return got;
}

int clinux_set_thread_name(const char *name) { return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }

int clinux_start_writeback(int fd, int64_t offset, int64_t count) {
    return sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE);
}

int clinux_peer_groups_get(int socket, uint32_t *groups, int capacity) {
    socklen_t len = (socklen_t)(capacity * sizeof(gid_t));
    if (getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
        if (errno == ERANGE) {
            return (int)(len / sizeof(gid_t));
        }
        return -1;
    }
    return (int)(len / sizeof(gid_t));
}

static int fill_address(struct sockaddr_un *address, const char *path, socklen_t *length) {
    memset(address, 0, sizeof(*address));
    address->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof(address->sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(address->sun_path, path, n + 1);
    *length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}

int clinux_unix_bind(int socket, const char *path) {
    struct sockaddr_un address;
    socklen_t length;
    if (fill_address(&address, path, &length) != 0) return -1;
    return bind(socket, (struct sockaddr *)&address, length);
}

int clinux_unix_connect(int socket, const char *path) {
    struct sockaddr_un address;
    socklen_t length;
    if (fill_address(&address, path, &length) != 0) return -1;
    return connect(socket, (struct sockaddr *)&address, length);
}

int clinux_unix_bound_path(int socket, char *buffer, int capacity) {
    struct sockaddr_un address;
    socklen_t length = sizeof(address);
    memset(&address, 0, sizeof(address));
    if (getsockname(socket, (struct sockaddr *)&address, &length) != 0) return -1;
    if (address.sun_family != AF_UNIX || length <= offsetof(struct sockaddr_un, sun_path) ||
        address.sun_path[0] == 0) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    size_t n = strnlen(address.sun_path, length - offsetof(struct sockaddr_un, sun_path));
    if ((int)n >= capacity) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buffer, address.sun_path, n);
    buffer[n] = 0;
    return (int)n;
}

int clinux_accept(int socket) { return accept4(socket, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK); }

int clinux_unix_socket(int nonblocking) {
    return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
}

int clinux_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int clinux_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &event);
}

int clinux_epoll_wait(int epfd, clinux_epoll_event *out, int capacity, int timeout) {
    struct epoll_event events[256];
    if (capacity > 256) capacity = 256;
    int n = epoll_wait(epfd, events, capacity, timeout);
    for (int i = 0; i < n; i++) {
        out[i].events = events[i].events;
        out[i].data = events[i].data.u64;
    }
    return n;
}

uint32_t clinux_epollin(void) { return EPOLLIN; }
uint32_t clinux_epollout(void) { return EPOLLOUT; }
uint32_t clinux_epollerr(void) { return EPOLLERR; }
uint32_t clinux_epollhup(void) { return EPOLLHUP; }
uint32_t clinux_epollrdhup(void) { return EPOLLRDHUP; }
uint32_t clinux_epolloneshot(void) { return EPOLLONESHOT; }
uint32_t clinux_epollet(void) { return EPOLLET; }
int clinux_epoll_ctl_add(void) { return EPOLL_CTL_ADD; }
int clinux_epoll_ctl_mod(void) { return EPOLL_CTL_MOD; }
int clinux_epoll_ctl_del(void) { return EPOLL_CTL_DEL; }

int clinux_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

int clinux_eventfd_signal(int fd) { return eventfd_write(fd, 1); }

int clinux_unix_datagram_socket(void) { return socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0); }

uint64_t clinux_monotonic_usec(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

int clinux_fstatfs_type(int fd, int64_t *type) {
    struct statfs buf;
    if (fstatfs(fd, &buf) != 0) return -1;
    *type = (int64_t)buf.f_type;
    return 0;
}

int clinux_fallocate(int fd, int64_t length) { return fallocate(fd, 0, 0, (off_t)length); }

int clinux_flock_exclusive_nonblocking(int fd) { return flock(fd, LOCK_EX | LOCK_NB); }

void *clinux_map_shared(int fd, size_t length) {
    void *address = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return address == MAP_FAILED ? NULL : address;
}

void clinux_store_forward(void *destination, const void *source, size_t count) {
#if defined(__x86_64__)
    // Interrupted (a fault, a signal), rep movsb stops between two bytes with every byte
    // before that point stored and none after it.
    __asm__ volatile("rep movsb" : "+D"(destination), "+S"(source), "+c"(count) : : "memory");
#else
    volatile unsigned char *to = destination;
    const unsigned char *from = source;
    for (size_t i = 0; i < count; i++) to[i] = from[i];
#endif
}

int clinux_unmap(void *address, size_t length) { return munmap(address, length); }

int clinux_release_pages(void *address, size_t length) { return madvise(address, length, MADV_DONTNEED); }

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int clinux_populate_write(void *address, size_t length) {
    return madvise(address, length, MADV_POPULATE_WRITE);
}

// LeakSanitizer's suppressions, read by its runtime from this hook in a binary built with
// -sanitize=address (scripts/sanitize); in any other build nothing calls it. Compiled in
// rather than a file named by LSAN_OPTIONS, so that the products find them wherever they
// run (inside a container that sees only /usr and the binaries too). Each names a
// toolchain library or runtime function, never a frame of this package, so a leak in the
// package's own code still fails the run:
// - the test harnesses (libXCTest, libTesting) leak at the exit of the test binary;
// - a weak reference's side table: the Swift runtime keeps its address only in the
//   object's reference-count word, shifted and tagged, where LeakSanitizer sees no
//   pointer, so the side table of every weakly referenced object alive at exit is
//   reported. An object that really leaked is reported itself, with its allocation.
// - a Data's storage: `Data` keeps a payload of 15 bytes or more as an enum case whose
//   tag Swift stores in the spare (high) bits of the storage object's pointer, so no
//   word in memory holds the plain address and LeakSanitizer takes every such Data
//   alive at exit — a document's contents held by a thread still running — for a leak
//   (a 65-byte storage object, its bytes as an indirect leak). The functions named are
//   the ones that allocate the storage object and its bytes (they call no code of this
//   package); whatever holds a Data and really leaked is still reported with its
//   own allocation, and a buffer Foundation itself fails to free (the 4 KiB that
//   `Data(contentsOf:)` leaked per empty file, allocated in readBytesFromFile) still is.
// - libfiu's preload library (`fiu-run`, Debian's fiu-utils) keeps a strdup of its
//   configuration for the life of the process.
extern char *program_invocation_short_name;
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:libXCTest.so\n"
           "leak:libTesting.so\n"
           "leak:formWeakReference\n"
           // InlineSlice.init(_: UnsafeRawBufferPointer), _Representation.append(contentsOf:)
           // and the closures of Data.init(_: some Sequence<UInt8>) that make the
           // representation from the bytes: the storage object.
           "leak:s20FoundationEssentials4DataV11InlineSliceVyAESWcfC\n"
           "leak:s20FoundationEssentials4DataVyACxcSTRzs5UInt8V7ElementRtzlufcAC15_RepresentationO\n"
           "leak:s20FoundationEssentials4DataV15_RepresentationO6append10contentsOf\n"
           // __DataStorage.init(bytes:length:) and ensureUniqueBufferReference: its bytes.
           "leak:s20FoundationEssentials13__DataStorageC5bytes6length\n"
           "leak:s20FoundationEssentials13__DataStorageC27ensureUniqueBufferReference\n"
           "leak:fiu_run_preload.so\n";
}

// LeakSanitizer asks this at exit whether to skip its check. Skipped in the test binary
// alone (its name ends in "PackageTests.xctest"): its harness keeps Foundation's
// `Process`, `Pipe` and `FileHandle` objects of the children it ran in reference cycles
// (several hundred blocks, none allocated by this package's products) and reads files
// with Foundation's readBytesFromFile, which leaks 4 KiB per empty file. Every product
// the tests run — each autosaved, autosavectl and probe — is checked at its exit.
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
    const char *name = program_invocation_short_name;
    const char *suffix = "PackageTests.xctest";
    size_t length = strlen(name), count = strlen(suffix);
    return length >= count && strcmp(name + length - count, suffix) == 0;
}

#if defined(__x86_64__)
#include <cpuid.h>

int clinux_crc32c_available(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_SSE4_2) != 0;
}

// Three lanes: the `crc32` instruction takes three cycles to give its result and can
// start one every cycle, so a single chain of them runs at a third of the speed the CPU
// allows. Stripes of three 256-byte lanes are checksummed side by side, and the lanes'
// checksums joined: a lane's checksum is carried over the bytes after it — multiplied by
// x^(8 * 256) modulo the polynomial, a linear map applied with four tables of 256 entries
// — and combined with the next lane's by xor (Mark Adler's crc32c.c does the same).
enum { crc32c_lane = 256 };
static uint32_t crc32c_shift_tables[4][256];

// The map of a CRC-32C register over one zero bit, then over 2^k of them by squaring.
static uint32_t gf2_times(const uint32_t *matrix, uint32_t vector) {
    uint32_t sum = 0;
    for (int i = 0; vector != 0; i++, vector >>= 1)
        if (vector & 1) sum ^= matrix[i];
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *matrix) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(matrix, matrix[n]);
}

__attribute__((constructor)) static void crc32c_make_shift_tables(void) {
    uint32_t op[32], square[32];
    // One zero bit: the register shifts right, and its low bit feeds the polynomial back.
    op[0] = 0x82F63B78;
    for (int n = 1; n < 32; n++) op[n] = 1u << (n - 1);
    // 2^11 zero bits = 256 zero bytes.
    for (int k = 0; k < 11; k++) {
        gf2_square(square, op);
        memcpy(op, square, sizeof op);
    }
    for (int b = 0; b < 4; b++)
        for (uint32_t v = 0; v < 256; v++) crc32c_shift_tables[b][v] = gf2_times(op, v << (8 * b));
}

/// The register `crc` carried over 256 zero bytes.
static inline uint32_t crc32c_shift_lane(uint32_t crc) {
    return crc32c_shift_tables[0][crc & 0xFF] ^ crc32c_shift_tables[1][(crc >> 8) & 0xFF]
        ^ crc32c_shift_tables[2][(crc >> 16) & 0xFF] ^ crc32c_shift_tables[3][crc >> 24];
}

__attribute__((target("sse4.2")))
uint32_t clinux_crc32c(uint32_t crc, const void *bytes, size_t length) {
    const unsigned char *p = bytes;
    uint64_t c = (uint32_t)~crc;
    while (length >= 3 * crc32c_lane) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < crc32c_lane; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + crc32c_lane + i, 8);
            memcpy(&w2, p + 2 * crc32c_lane + i, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c = crc32c_shift_lane((uint32_t)c) ^ (uint32_t)c1;
        c = crc32c_shift_lane((uint32_t)c) ^ (uint32_t)c2;
        p += 3 * crc32c_lane;
        length -= 3 * crc32c_lane;
    }
    while (length >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
        p += 8;
        length -= 8;
    }
    // The tail in at most three steps (four, two, one byte), each as slow as eight bytes:
    // a record's length word is checksummed on its own, then its body's last few bytes.
    uint32_t c32 = (uint32_t)c;
    if (length & 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        c32 = __builtin_ia32_crc32si(c32, word);
        p += 4;
    }
    if (length & 2) {
        uint16_t half;
        memcpy(&half, p, 2);
        c32 = __builtin_ia32_crc32hi(c32, half);
        p += 2;
    }
    if (length & 1) c32 = __builtin_ia32_crc32qi(c32, *p);
    return ~c32;
}

__attribute__((target("sse4.2")))
uint32_t clinux_crc32c_word_then(uint32_t word, const void *bytes, size_t length) {
    return clinux_crc32c(~__builtin_ia32_crc32si(~0u, word), bytes, length);
}
#else
int clinux_crc32c_available(void) { return 0; }

uint32_t clinux_crc32c(uint32_t crc, const void *bytes, size_t length) {
    (void)bytes;
    (void)length;
    return crc;
}

uint32_t clinux_crc32c_word_then(uint32_t word, const void *bytes, size_t length) {
    (void)word;
    (void)bytes;
    (void)length;
    return 0;
}
#endif

#include <liburing.h>
#include <stdlib.h>

struct clinux_io_batch {
    struct io_uring ring;
    unsigned entries;
    /// The ring failed (a submission the kernel refused): calls are one by one from then on.
    int failed;
};

// Measured on 6.18 (batches of 150-byte sends to Unix stream sockets, and their receives):
// one sendto(2) costs 0.87-0.89 us; through the ring a send costs 1.26 us alone, 0.93-1.0 us
// in twos, 0.82-0.89 in fours, 0.61-0.63 in fifties (a receive 0.84-0.90 us alone, 1.22 us
// through the ring alone, 0.81-0.89 in fours, 0.68-0.70 in fifties).
const int clinux_io_batch_minimum = 3;

clinux_io_batch *clinux_io_batch_create(unsigned entries) {
    clinux_io_batch *batch = calloc(1, sizeof *batch);
    if (!batch) {
        errno = ENOMEM;
        return NULL;
    }
    // SUBMIT_ALL: a send refused at submission (a closed descriptor) gets its completion
    // and the rest of the batch still goes.
    int result = io_uring_queue_init(entries, &batch->ring, IORING_SETUP_SUBMIT_ALL);
    if (result == -EINVAL) result = io_uring_queue_init(entries, &batch->ring, 0);
    if (result < 0) {
        free(batch);
        errno = -result;
        return NULL;
    }
    batch->entries = entries;
    return batch;
}

void clinux_io_batch_destroy(clinux_io_batch *batch) {
    if (!batch) return;
    io_uring_queue_exit(&batch->ring);
    free(batch);
}

int clinux_io_batch_usable(const clinux_io_batch *batch) { return batch && !batch->failed; }

static long one(int receive, int fd, void *buffer, size_t length) {
    long done = receive ? syscall(SYS_recvfrom, fd, buffer, length, MSG_DONTWAIT, (void *)0, (void *)0)
                        : syscall(SYS_sendto, fd, buffer, length, MSG_NOSIGNAL | MSG_DONTWAIT, (void *)0, 0);
    return done < 0 ? -errno : done;
}

int clinux_io_batch_run(clinux_io_batch *batch, int receive, int count, const int *fds, void *const *buffers,
                        const size_t *lengths, long *results) {
    int start = 0;
    int through = 0;
    while (batch && !batch->failed && count - start >= clinux_io_batch_minimum) {
        int piece = count - start < (int)batch->entries ? count - start : (int)batch->entries;
        for (int i = start; i < start + piece; i++) {
            struct io_uring_sqe *entry = io_uring_get_sqe(&batch->ring);
            if (!entry) {
                // Never while every batch is submitted whole; should it happen, the
                // entries prepared go, the ring is given up, and the rest are made one by
                // one below.
                batch->failed = 1;
                piece = i - start;
                break;
            }
            if (receive) {
                io_uring_prep_recv(entry, fds[i], buffers[i], lengths[i], MSG_DONTWAIT);
            } else {
                io_uring_prep_send(entry, fds[i], buffers[i], lengths[i], MSG_NOSIGNAL | MSG_DONTWAIT);
            }
            io_uring_sqe_set_data64(entry, (uint64_t)i);
            results[i] = -EIO;
        }
        int submitted;
        do {
            submitted = io_uring_submit(&batch->ring);
        } while (submitted == -EINTR);
        if (submitted != piece) {
            // Entries the kernel did not take would stay queued in the ring, to be made with
            // a later batch on buffers reused by then: the ring is given up instead (its
            // queued entries go with it), and its calls are made one by one below. Those it
            // did take, it made already (each non-blocking call completes as it is submitted).
            batch->failed = 1;
            if (submitted < 0) submitted = 0;
        }
        for (int reaped = 0; reaped < submitted; reaped++) {
            struct io_uring_cqe *completion;
            int waited;
            do {
                waited = io_uring_wait_cqe(&batch->ring, &completion);
            } while (waited == -EINTR);
            if (waited < 0) {
                // Calls whose outcome cannot be learned: left at -EIO (their connections
                // are closed), and the ring is given up.
                batch->failed = 1;
                break;
            }
            results[io_uring_cqe_get_data64(completion)] = completion->res;
            io_uring_cqe_seen(&batch->ring, completion);
        }
        for (int i = start + submitted; i < start + piece; i++) results[i] = one(receive, fds[i], buffers[i], lengths[i]);
        through += submitted;
        start += piece;
    }
    for (int i = start; i < count; i++) results[i] = one(receive, fds[i], buffers[i], lengths[i]);
    return through;
}
