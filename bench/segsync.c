// What a journal segment's layout costs a small synced append: `write` of RECORD bytes
// then `fdatasync`, ITERATIONS times, into a new file in DIR laid out four ways:
//   growing     the file grows with each write (what a segment was before reserving)
//   reserved    fallocate(fd, 0, 0, 16 MiB) first: allocated, size 16 MiB, reads as zeros
//   zeroed      16 MiB of zeros written and synced first (allocated and written)
//   keep-size   fallocate with FALLOC_FL_KEEP_SIZE: allocated, but the size still grows
// Prints p50 and p90 of each, the four layouts alternated ROUNDS times.
// Usage: segsync DIR [RECORD_BYTES] [ITERATIONS] [ROUNDS]   (defaults 200, 2000, 3)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *names[] = {"growing", "reserved", "zeroed", "keep-size"};
static const off_t segment = 16 << 20;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fail(const char *what) {
    perror(what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: segsync DIR [RECORD_BYTES] [ITERATIONS] [ROUNDS]\n");
        return 64;
    }
    size_t record = argc > 2 ? (size_t)atol(argv[2]) : 200;
    int iterations = argc > 3 ? atoi(argv[3]) : 2000;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    char path[4096];
    snprintf(path, sizeof path, "%s/segsync.journal", argv[1]);
    char *bytes = malloc(record);
    memset(bytes, 'x', record);
    double *times = malloc(sizeof(double) * (size_t)iterations);
    printf("| round | layout | %zu B write + fdatasync, p50 µs | p90 µs |\n|---:|---|---:|---:|\n", record);
    for (int round = 1; round <= rounds; round++) {
        for (int layout = 0; layout < 4; layout++) {
            int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0) fail("open");
            if (layout == 1 && fallocate(fd, 0, 0, segment) != 0) fail("fallocate");
            if (layout == 2) {
                char *zeros = calloc(1, 1 << 20);
                for (int i = 0; i < 16; i++)
                    if (write(fd, zeros, 1 << 20) != 1 << 20) fail("write zeros");
                free(zeros);
                if (lseek(fd, 0, SEEK_SET) != 0) fail("lseek");
            }
            if (layout == 3 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, segment) != 0) fail("fallocate");
            if (fsync(fd) != 0) fail("fsync");
            for (int i = 0; i < iterations; i++) {
                double start = now_us();
                if (write(fd, bytes, record) != (ssize_t)record) fail("write");
                if (fdatasync(fd) != 0) fail("fdatasync");
                times[i] = now_us() - start;
            }
            qsort(times, (size_t)iterations, sizeof(double), compare);
            printf("| %d | %s | %.0f | %.0f |\n", round, names[layout], times[iterations / 2],
                   times[iterations * 9 / 10]);
            close(fd);
            unlink(path);
        }
    }
    return 0;
}
