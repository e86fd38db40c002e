// What a durable save of many small new files costs the machine, one file at a time
// against batches: COUNT files of SIZE bytes made in DIR (which must be empty) either
//   batch 0   each file: temporary written, fsync, rename into place, fsync of DIR
//             (the writer's recipe for one save)
//   batch N   N temporaries written, one syncfs, N renames, one syncfs (one flush of
//             the file system for many saves: DESIGN's batched flushes)
// Prints files a second and the machine's busy CPU time per file (all CPUs, from
// /proc/stat: the I/O completions and the kernel's workers count, not only this process).
// Usage: batchflush DIR [COUNT] [BATCH] [SIZE]   (defaults 4000, 0, 100)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "machine.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: batchflush DIR [COUNT] [BATCH] [SIZE]\n");
        return 64;
    }
    int count = argc > 2 ? atoi(argv[2]) : 4000;
    int batch = argc > 3 ? atoi(argv[3]) : 0;
    int size = argc > 4 ? atoi(argv[4]) : 100;
    if (count < 1 || batch < 0 || batch > 4096 || size < 1 || size > 65536) return 64;
    static char bytes[65536];
    memset(bytes, 'x', sizeof bytes);
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    check(dir >= 0, argv[1]);
    char temporary[64], name[64];
    static int fds[4096];
    long long busy = busy_ticks();
    double start = now();
    for (int i = 0; i < count; i += batch ? batch : 1) {
        if (batch == 0) {
            snprintf(temporary, sizeof temporary, ".f%d.tmp", i);
            snprintf(name, sizeof name, "f%d", i);
            int fd = openat(dir, temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            check(fd >= 0, "openat");
            check(write(fd, bytes, size) == size, "write");
            check(fsync(fd) == 0, "fsync");
            check(renameat(dir, temporary, dir, name) == 0, "renameat");
            check(fsync(dir) == 0, "fsync of the directory");
            close(fd);
            continue;
        }
        int n = count - i < batch ? count - i : batch;
        for (int j = 0; j < n; j++) {
            snprintf(temporary, sizeof temporary, ".f%d.tmp", i + j);
            fds[j] = openat(dir, temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            check(fds[j] >= 0, "openat");
            check(write(fds[j], bytes, size) == size, "write");
        }
        check(syncfs(dir) == 0, "syncfs");
        for (int j = 0; j < n; j++) {
            snprintf(temporary, sizeof temporary, ".f%d.tmp", i + j);
            snprintf(name, sizeof name, "f%d", i + j);
            check(renameat(dir, temporary, dir, name) == 0, "renameat");
            close(fds[j]);
        }
        check(syncfs(dir) == 0, "syncfs");
    }
    double seconds = now() - start;
    busy = busy_ticks() - busy;
    printf("batch %4d, %d files of %d B: %.2f s, %.0f files/s, machine busy %.0f us a file\n", batch, count, size,
           seconds, count / seconds, busy * 1e6 / sysconf(_SC_CLK_TCK) / count);
    return 0;
}
