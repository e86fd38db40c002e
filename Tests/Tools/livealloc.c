// Live heap blocks by size, for placing a rise of the bytes in use (the soak's memory
// check) without a heap profiler: preloaded into a process, it counts every block
// malloc, calloc, realloc and the aligned allocators hand out and free takes back, by
// usable size, and on SIGUSR2 writes the counts to /tmp/livealloc.PID.N (N counts the
// dumps from 0). Lines "CLASS BLOCKS BYTES" give the blocks of usable size
// CLASS..2*CLASS-1; lines "x SIZE BLOCKS" the blocks of 2 KiB and more by usable size
// (rounded down to 16 bytes). Compare two dumps of one run to see which sizes grew.
//
//   cc -O2 -shared -fPIC -o livealloc.so Tests/Tools/livealloc.c
//   LD_PRELOAD=$PWD/livealloc.so .build/release/autosaved --config …   (or a wrapper
//       script given to Tests/Tools/soak.py --daemon)
//   kill -USR2 <pid>; …; kill -USR2 <pid>
//
// glibc only (it calls glibc's own __libc_malloc and friends). The counters are updated
// with atomic adds; the dump reads them without stopping other threads, so one dump is
// a snapshot only to within the blocks that change while it is written.
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_memalign(size_t, size_t);

enum { classes = 64, exactLimit = 16384 };
static long long blocks[classes], bytes[classes];
static long long exact[exactLimit];  // by usable size / 16, for 2 KiB and more
static int dumps;

static int sizeClass(size_t size) {
    int c = 0;
    while (size > 1 && c < classes - 1) {
        size >>= 1;
        c++;
    }
    return c;
}

static void count(void *block, int sign) {
    if (!block) return;
    size_t usable = malloc_usable_size(block);
    int c = sizeClass(usable);
    __atomic_add_fetch(&blocks[c], sign, __ATOMIC_RELAXED);
    __atomic_add_fetch(&bytes[c], sign * (long long)usable, __ATOMIC_RELAXED);
    if (usable >= 2048 && usable / 16 < exactLimit) __atomic_add_fetch(&exact[usable / 16], sign, __ATOMIC_RELAXED);
}

void *malloc(size_t size) {
    void *block = __libc_malloc(size);
    count(block, 1);
    return block;
}

void free(void *block) {
    count(block, -1);
    __libc_free(block);
}

void *calloc(size_t count_, size_t size) {
    void *block = __libc_calloc(count_, size);
    count(block, 1);
    return block;
}

void *realloc(void *block, size_t size) {
    count(block, -1);
    void *moved = __libc_realloc(block, size);
    count(moved ? moved : block, 1);
    return moved;
}

int posix_memalign(void **result, size_t alignment, size_t size) {
    void *block = __libc_memalign(alignment, size);
    if (!block) return 12;  // ENOMEM
    count(block, 1);
    *result = block;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
    void *block = __libc_memalign(alignment, size);
    count(block, 1);
    return block;
}

void *memalign(size_t alignment, size_t size) {
    void *block = __libc_memalign(alignment, size);
    count(block, 1);
    return block;
}

// Only open, write, close and snprintf into a stack buffer: nothing that allocates.
static void dump(int signal_) {
    (void)signal_;
    char name[64];
    snprintf(name, sizeof name, "/tmp/livealloc.%d.%d", (int)getpid(), dumps++);
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    char line[128];
    for (int c = 0; c < classes; c++) {
        if (!blocks[c]) continue;
        int n = snprintf(line, sizeof line, "%llu %lld %lld\n", 1ULL << c, blocks[c], bytes[c]);
        if (write(fd, line, (size_t)n) < 0) break;
    }
    for (int i = 0; i < exactLimit; i++) {
        if (!exact[i]) continue;
        int n = snprintf(line, sizeof line, "x %d %lld\n", i * 16, exact[i]);
        if (write(fd, line, (size_t)n) < 0) break;
    }
    close(fd);
}

__attribute__((constructor)) static void install(void) { signal(SIGUSR2, dump); }
