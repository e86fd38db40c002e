// What the file-system measurements in bench/ share: a monotonic clock, the machine's
// busy CPU time (all CPUs, from /proc/stat: the I/O completions and the kernel's workers
// count, not only the measuring process) and a check that exits on a failed call.
#ifndef BENCH_MACHINE_H
#define BENCH_MACHINE_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/// Busy jiffies of all CPUs: everything but idle and iowait.
static inline long long busy_ticks(void) {
    FILE *f = fopen("/proc/stat", "r");
    long long v[8] = {0};
    if (!f || fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                     &v[6], &v[7]) != 8) {
        perror("/proc/stat");
        exit(1);
    }
    fclose(f);
    long long total = 0;
    for (int i = 0; i < 8; i++) total += v[i];
    return total - v[3] - v[4];
}

static inline void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

#endif
