// What concurrent saves of new files into one directory cost when each syncs the
// directory itself, against one directory sync shared by the saves whose renames it
// covers (a group commit: a save whose rename came before a sync started waits for that
// sync instead of starting its own).
//   own      each save: temporary written, fsync, rename into place, fsync of DIR
//   shared   the same, but the fsync of DIR is shared as above
// THREADS threads save COUNT files of SIZE bytes in all, into DIR/own and DIR/shared
// (made here; DIR must exist), one way and then the other, ROUNDS times. Prints files a
// second, the machine's busy CPU time per file (all CPUs, from /proc/stat) and the
// directory syncs made per file.
// Usage: dirsync DIR [THREADS] [COUNT] [SIZE] [ROUNDS]   (defaults 4, 4000, 100, 2)
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "machine.h"

static char directory[4096];
static int directoryFD;
static int shared;
static int perThread;
static size_t size;
static char *bytes;
static int round_;

// The group commit of the directory's sync.
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static long long issued;   // tickets handed to renames done
static long long synced;   // every ticket up to this one is covered by a finished sync
static int syncing;
static long long syncs;

static void syncDirectory(void) {
    if (!shared) {
        check(fsync(directoryFD) == 0, "fsync directory");
        __atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
        return;
    }
    pthread_mutex_lock(&lock);
    long long ticket = ++issued;
    while (synced < ticket) {
        if (!syncing) {
            syncing = 1;
            long long covering = issued;  // every rename with a ticket up to here is done
            pthread_mutex_unlock(&lock);
            check(fsync(directoryFD) == 0, "fsync directory");
            __atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
            pthread_mutex_lock(&lock);
            syncing = 0;
            if (covering > synced) synced = covering;
            pthread_cond_broadcast(&done);
        } else {
            pthread_cond_wait(&done, &lock);
        }
    }
    pthread_mutex_unlock(&lock);
}

static void *worker(void *argument) {
    long index = (long)argument;
    char path[4200], temporary[4200];
    for (int i = 0; i < perThread; i++) {
        snprintf(path, sizeof path, "%s/r%d-t%ld-%d", directory, round_, index, i);
        snprintf(temporary, sizeof temporary, "%s/.r%d-t%ld-%d.tmp", directory, round_, index, i);
        int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0644);
        check(fd >= 0, "create temporary");
        check(write(fd, bytes, size) == (ssize_t)size, "write");
        check(fsync(fd) == 0, "fsync");
        close(fd);
        check(rename(temporary, path) == 0, "rename");
        syncDirectory();
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dirsync DIR [THREADS] [COUNT] [SIZE] [ROUNDS]\n");
        return 64;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    int count = argc > 3 ? atoi(argv[3]) : 4000;
    size = argc > 4 ? (size_t)atol(argv[4]) : 100;
    int rounds = argc > 5 ? atoi(argv[5]) : 2;
    perThread = count / threads;
    bytes = malloc(size);
    memset(bytes, 'v', size);
    printf("%-7s %5s %10s %14s %17s\n", "way", "round", "files/s", "busy CPU/file", "directory syncs/file");
    for (round_ = 1; round_ <= rounds; round_++) {
        for (shared = 0; shared < 2; shared++) {
            snprintf(directory, sizeof directory, "%s/%s", argv[1], shared ? "shared" : "own");
            mkdir(directory, 0755);
            directoryFD = open(directory, O_RDONLY | O_DIRECTORY);
            check(directoryFD >= 0, "open DIR");
            issued = synced = syncs = 0;
            long long ticks = busy_ticks();
            double start = now();
            pthread_t ids[64];
            for (long t = 0; t < threads && t < 64; t++) pthread_create(&ids[t], NULL, worker, (void *)t);
            for (int t = 0; t < threads && t < 64; t++) pthread_join(ids[t], NULL);
            double elapsed = now() - start;
            double cpu = (double)(busy_ticks() - ticks) / sysconf(_SC_CLK_TCK);
            int files = perThread * threads;
            printf("%-7s %5d %10.0f %11.0f µs %17.2f\n", shared ? "shared" : "own", round_, files / elapsed,
                   cpu / files * 1e6, (double)syncs / files);
            fflush(stdout);
            close(directoryFD);
        }
    }
    return 0;
}
