// What saving an existing file again costs, two ways, on the file system of DIR:
//   recipe    the writer's recipe: a new temporary file written, fsync, renamed over
//             the file (whose old inode is freed), fsync of the directory
//   exchange  the file's spare (DIR/spare/N, made once) truncated, written, fsync,
//             exchanged with the file (renameat2 RENAME_EXCHANGE), fsync of the
//             directory: the old inode becomes the next save's spare, so no inode is
//             made or freed
//   overwrite as exchange, but the spare is written over from its start and cut to
//             the new length after (no block freed and allocated again when the
//             length stays)
// FILES files of SIZE bytes in DIR/docs are saved in turn for SECONDS, each way in
// turn, ROUNDS times. Prints saves a second, the machine's busy CPU time per save (all
// CPUs, from /proc/stat) and the mean time of the step that makes the new file (the
// recipe's open with O_CREAT, the exchange's open and truncate of the spare, the
// overwrite's open).
// On ext4 without a journal, the recipe's open walks the inodes freed in the last
// minutes (fs/ext4/ialloc.c, recently_deleted()): the cost grows with the save rate.
// Usage: resave DIR [FILES] [SIZE] [SECONDS] [ROUNDS]   (defaults 2000, 1024, 5, 2)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "machine.h"

static void put(int fd, const char *bytes, size_t size) {
    check(write(fd, bytes, size) == (ssize_t)size, "write");
    check(fsync(fd) == 0, "fsync");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: resave DIR [FILES] [SIZE] [SECONDS] [ROUNDS]\n");
        return 64;
    }
    const char *dir = argv[1];
    int files = argc > 2 ? atoi(argv[2]) : 2000;
    size_t size = argc > 3 ? (size_t)atol(argv[3]) : 1024;
    double seconds = argc > 4 ? atof(argv[4]) : 5;
    int rounds = argc > 5 ? atoi(argv[5]) : 2;
    char *bytes = malloc(size);
    memset(bytes, 'v', size);
    char path[4096], other[4096];
    snprintf(path, sizeof path, "%s/docs", dir);
    check(mkdir(path, 0755) == 0, "mkdir docs (DIR must be empty)");
    snprintf(path, sizeof path, "%s/spare", dir);
    check(mkdir(path, 0700) == 0, "mkdir spare");
    snprintf(path, sizeof path, "%s/docs", dir);
    int docs = open(path, O_RDONLY | O_DIRECTORY);
    check(docs >= 0, "open docs");
    for (int i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/docs/f%d", dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        check(fd >= 0, "create");
        put(fd, bytes, size);
        close(fd);
        snprintf(path, sizeof path, "%s/spare/f%d", dir, i);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        check(fd >= 0, "create spare");
        close(fd);
    }
    check(fsync(docs) == 0, "fsync docs");
    printf("%-8s %5s %10s %14s %14s\n", "way", "round", "saves/s", "busy CPU/save", "make step");
    int next = 0;
    for (int round = 1; round <= rounds; round++) {
        for (int way = 0; way < 3; way++) {
            long long ticks = busy_ticks();
            double start = now(), making = 0;
            long saves = 0;
            while (now() - start < seconds) {
                int i = next++ % files;
                snprintf(path, sizeof path, "%s/docs/f%d", dir, i);
                double t0 = now();
                int fd;
                if (way == 0) {
                    snprintf(other, sizeof other, "%s/docs/.f%d.tmp", dir, i);
                    fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0644);
                    check(fd >= 0, "create temporary");
                } else {
                    snprintf(other, sizeof other, "%s/spare/f%d", dir, i);
                    fd = open(other, O_WRONLY);
                    check(fd >= 0, "open spare");
                    if (way == 1) check(ftruncate(fd, 0) == 0, "ftruncate");
                }
                making += now() - t0;
                if (way == 2) {
                    check(pwrite(fd, bytes, size, 0) == (ssize_t)size, "pwrite");
                    check(ftruncate(fd, (off_t)size) == 0, "ftruncate");
                    check(fsync(fd) == 0, "fsync");
                } else {
                    put(fd, bytes, size);
                }
                close(fd);
                if (way == 0) {
                    check(rename(other, path) == 0, "rename");
                } else {
                    check(renameat2(AT_FDCWD, other, AT_FDCWD, path, RENAME_EXCHANGE) == 0, "renameat2");
                }
                check(fsync(docs) == 0, "fsync docs");
                saves++;
            }
            double elapsed = now() - start;
            double cpu = (double)(busy_ticks() - ticks) / sysconf(_SC_CLK_TCK);
            printf("%-8s %5d %10.0f %11.0f µs %11.1f µs\n", way == 0 ? "recipe" : way == 1 ? "exchange" : "overwrite", round, saves / elapsed,
                   cpu / saves * 1e6, making / saves * 1e6);
            fflush(stdout);
        }
    }
    return 0;
}
