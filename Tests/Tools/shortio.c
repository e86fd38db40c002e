// An LD_PRELOAD interposer that makes a chosen fraction of read, write, pread and
// pwrite calls on regular files return a short count or fail with EINTR — both of
// which POSIX allows and real kernels produce (a signal arriving during a slow write,
// a file system that transfers less than asked), and which libfiu cannot make (its
// wrappers fail a call with an errno; they never shorten one).
//
// Calls made through syscall(3) (`syscall(SYS_read, …)`, as autosaved's Posix layer
// reads, bypassing glibc's wrapper) are caught too.
//
// Only regular files are touched (checked with fstat on every call): sockets, pipes,
// eventfds, inotify descriptors and the journald socket pass through unchanged.
//
//   cc -shared -fPIC -O2 -o shortio.so shortio.c -ldl
//   SHORTIO_SHORT=0.3 SHORTIO_EINTR=0.2 SHORTIO_SEED=7 SHORTIO_REPORT=/tmp/counts LD_PRELOAD=./shortio.so program …
//
// SHORTIO_SHORT and SHORTIO_EINTR are probabilities per call (a call of one byte is
// never shortened); SHORTIO_REPORT names files (one per process: the name and ".PID")
// rewritten after every injected fault with one line of counts (calls seen on regular files, short counts and EINTRs, for
// writes and reads).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static long (*real_syscall)(long, ...);

static double short_probability;
static double eintr_probability;
static uint64_t seed;
static int report_fd = -1;
static atomic_int ready;

enum { WRITE_CALLS, WRITE_SHORT, WRITE_EINTR, READ_CALLS, READ_SHORT, READ_EINTR, COUNTERS };
static atomic_ulong counters[COUNTERS];
static atomic_ulong draws;

static void setup(void) {
    if (atomic_load(&ready)) return;
    real_read = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_pread = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    const char *value;
    if ((value = getenv("SHORTIO_SHORT"))) short_probability = atof(value);
    if ((value = getenv("SHORTIO_EINTR"))) eintr_probability = atof(value);
    if ((value = getenv("SHORTIO_SEED"))) seed = strtoull(value, NULL, 10);
    if ((value = getenv("SHORTIO_REPORT")) && *value) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", value, (int)getpid());
        report_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    atomic_store(&ready, 1);
}

__attribute__((constructor)) static void initialise(void) { setup(); }

// splitmix64 over a shared counter: each call draws a fresh value.
static uint64_t draw(void) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (atomic_fetch_add(&draws, 1) + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(void) { return (double)(draw() >> 11) / 9007199254740992.0; }

static int regular(int fd) {
    if (fd < 0 || fd == report_fd) return 0;
    int saved = errno;
    struct stat st;
    int result = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    errno = saved;
    return result;
}

static void report(void) {
    if (report_fd < 0) return;
    char line[256];
    int n = snprintf(
        line, sizeof line, "write_calls=%lu write_short=%lu write_eintr=%lu read_calls=%lu read_short=%lu read_eintr=%lu\n",
        atomic_load(&counters[WRITE_CALLS]), atomic_load(&counters[WRITE_SHORT]), atomic_load(&counters[WRITE_EINTR]),
        atomic_load(&counters[READ_CALLS]), atomic_load(&counters[READ_SHORT]), atomic_load(&counters[READ_EINTR]));
    // Counts only grow, so a line is never shorter than the one before: no truncation needed.
    if (n > 0) real_pwrite(report_fd, line, (size_t)n, 0);
}

// 0: leave the call alone; 1: shorten it to *count; -1: fail it with EINTR.
static int decide(int fd, size_t *count, int calls) {
    setup();
    if (!regular(fd)) return 0;
    atomic_fetch_add(&counters[calls], 1);
    double roll = uniform();
    if (roll < eintr_probability) {
        atomic_fetch_add(&counters[calls + 2], 1);
        report();
        return -1;
    }
    if (*count > 1 && roll < eintr_probability + short_probability) {
        *count = 1 + (size_t)(draw() % (*count - 1));
        atomic_fetch_add(&counters[calls + 1], 1);
        report();
        return 1;
    }
    return 0;
}

ssize_t write(int fd, const void *buffer, size_t count) {
    if (decide(fd, &count, WRITE_CALLS) < 0) {
        errno = EINTR;
        return -1;
    }
    return real_write(fd, buffer, count);
}

ssize_t pwrite(int fd, const void *buffer, size_t count, off_t offset) {
    if (decide(fd, &count, WRITE_CALLS) < 0) {
        errno = EINTR;
        return -1;
    }
    return real_pwrite(fd, buffer, count, offset);
}

ssize_t pwrite64(int fd, const void *buffer, size_t count, off_t offset) { return pwrite(fd, buffer, count, offset); }

ssize_t read(int fd, void *buffer, size_t count) {
    if (decide(fd, &count, READ_CALLS) < 0) {
        errno = EINTR;
        return -1;
    }
    return real_read(fd, buffer, count);
}

ssize_t pread(int fd, void *buffer, size_t count, off_t offset) {
    if (decide(fd, &count, READ_CALLS) < 0) {
        errno = EINTR;
        return -1;
    }
    return real_pread(fd, buffer, count, offset);
}

ssize_t pread64(int fd, void *buffer, size_t count, off_t offset) { return pread(fd, buffer, count, offset); }

// syscall(3) for the four calls above; every other number passes through with its six
// argument registers as they are.
long syscall(long number, ...) {
    va_list list;
    va_start(list, number);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(list, long);
    va_end(list);
    setup();
    size_t count = (size_t)a[2];
    int kind = -1;
    if (number == SYS_read || number == SYS_pread64) kind = READ_CALLS;
    if (number == SYS_write || number == SYS_pwrite64) kind = WRITE_CALLS;
    if (kind >= 0) {
        if (decide((int)a[0], &count, kind) < 0) {
            errno = EINTR;
            return -1;
        }
        a[2] = (long)count;
    }
    return real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
