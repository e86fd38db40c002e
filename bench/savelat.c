// Save latency as a client of autosaved sees it, beside the bare durable replace on the
// same file system, alternating one of each:
//
//   bare     the recipe written against the syscalls: a temp file (O_CREAT|O_EXCL),
//            write, fsync, close, rename over the file, fsync of the directory
//   socket   through the daemon's control socket: `set` of the document, then `save`
//            with "wait": true; the time is the save's round trip, that is the whole
//            exchange less the set's own round trip (printed too)
//   durable  the same with "durable": true on the set: its reply waits for the journal's
//            sync, so the save's round trip is the save alone, with nothing of the
//            journal left for it to make durable (as for a save after the quiet period)
//   floor    with FLOOR_SOCKET: the same set and save sent to bench/savefloor.c, the bare
//            recipe behind a minimal socket server: what the socket alone adds
//
//   savelat SOCKET DOC BARE_DIR BYTES ITERATIONS [FLOOR_SOCKET]
//
// DOC is the document's path in the store; BARE_DIR a directory (outside the store root,
// on the same file system) where the bare recipe replaces BARE_DIR/bare.txt. Each
// iteration writes new contents of BYTES letters; the order of the kinds turns from one
// iteration to the next. Prints a Markdown table: p50, p90, p99 and mean in
// milliseconds, and the ratios socket / bare (and floor / bare, socket / floor) of each.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void write_all(int fd, const char *p, size_t n, const char *what) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail(what);
        p += w;
        n -= (size_t)w;
    }
}

/// The bare recipe: BARE_DIR/.bare.txt.tmp written, synced and renamed over
/// BARE_DIR/bare.txt, then the directory synced.
static void bare_save(int directory, const char *contents, size_t length) {
    int fd = openat(directory, ".bare.txt.tmp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) fail("open temp");
    write_all(fd, contents, length, "write");
    if (fsync(fd) != 0) fail("fsync");
    if (close(fd) != 0) fail("close");
    if (renameat(directory, ".bare.txt.tmp", directory, "bare.txt") != 0) fail("rename");
    if (fsync(directory) != 0) fail("fsync directory");
}

static int connect_to(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) fail("connect");
    return fd;
}

static char reply[65536];

/// Sends one request line and reads its one-line reply; exits unless it is "ok":true.
static void exchange(int fd, const char *request, size_t length) {
    write_all(fd, request, length, "send");
    size_t received = 0;
    while (received == 0 || reply[received - 1] != '\n') {
        ssize_t r = read(fd, reply + received, sizeof reply - 1 - received);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) fail("read reply");
        received += (size_t)r;
        if (received == sizeof reply - 1) received = 0;
    }
    reply[received] = 0;
    if (strstr(reply, "\"ok\":true") == NULL) {
        fprintf(stderr, "error reply: %s", reply);
        exit(1);
    }
}

/// New contents for iteration `i`: letters, the iteration written into the first ones.
static void vary(char *text, size_t length, long i) {
    for (size_t k = 0; k < 8 && k < length; k++) {
        text[k] = (char)('a' + i % 26);
        i /= 26;
    }
}

static void row(const char *name, double *v, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    qsort(v, n, sizeof *v, compare);
    printf("| %s | %.3f | %.3f | %.3f | %.3f |\n", name, v[n / 2] * 1e3, v[(size_t)(n * 0.9)] * 1e3,
           v[(size_t)(n * 0.99)] * 1e3, sum / n * 1e3);
}

/// The ratio of two sorted samples at p50, p90 and p99.
static void ratios(const char *name, const double *a, const double *b, size_t n) {
    printf("| %s | %.2f× | %.2f× | %.2f× | |\n", name, a[n / 2] / b[n / 2], a[(size_t)(n * 0.9)] / b[(size_t)(n * 0.9)],
           a[(size_t)(n * 0.99)] / b[(size_t)(n * 0.99)]);
}

// A set then a save through the daemon's socket: each one's round trip.
static void set_then_save(int fd, const char *set, size_t set_length, const char *save, size_t save_length,
                          double *setting, double *saving) {
    double t0 = now();
    exchange(fd, set, set_length);
    double t1 = now();
    exchange(fd, save, save_length);
    *setting = t1 - t0;
    *saving = now() - t1;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: savelat SOCKET DOC BARE_DIR BYTES ITERATIONS [FLOOR_SOCKET]\n");
        return 64;
    }
    const char *doc = argv[2];
    size_t bytes = (size_t)atol(argv[4]);
    size_t iterations = (size_t)atol(argv[5]);
    if (bytes < 1 || iterations < 1) return 64;

    int directory = open(argv[3], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) fail("open bare directory");
    int fd = connect_to(argv[1]);
    int floor_fd = argc == 7 ? connect_to(argv[6]) : -1;
    // SAVELAT_DURABLE=0: no durable set (the daemon runs without its journal, which
    // refuses one).
    const char *durable_env = getenv("SAVELAT_DURABLE");
    int with_durable = !(durable_env && strcmp(durable_env, "0") == 0);
    int active[4];
    int kinds = 0;
    active[kinds++] = 0;
    active[kinds++] = 1;
    if (with_durable) active[kinds++] = 2;
    if (floor_fd >= 0) active[kinds++] = 3;

    // The set request, with the text at a fixed place so each iteration can vary it.
    size_t capacity = bytes + strlen(doc) + 128;
    char *set = malloc(capacity);
    int prefix = snprintf(set, capacity, "{\"id\":1,\"cmd\":\"set\",\"doc\":\"%s\",\"text\":\"", doc);
    char *text = set + prefix;
    memset(text, 'a', bytes);
    size_t set_length = (size_t)prefix + bytes;
    set_length += (size_t)snprintf(set + set_length, capacity - set_length, "\"}\n");
    // The same set, durable: ...","durable":true}
    char *durable_set = malloc(capacity + 32);
    memcpy(durable_set, set, set_length - 2);
    size_t durable_length = set_length - 2;
    durable_length += (size_t)sprintf(durable_set + durable_length, ",\"durable\":true}\n");
    char *durable_text = durable_set + prefix;
    char save[512];
    size_t save_length = (size_t)snprintf(save, sizeof save, "{\"id\":2,\"cmd\":\"save\",\"doc\":\"%s\",\"wait\":true}\n", doc);

    double *bare = malloc(iterations * sizeof(double));
    double *saved = malloc(iterations * sizeof(double));
    double *setting = malloc(iterations * sizeof(double));
    double *floored = malloc(iterations * sizeof(double));
    double *saved_durable = malloc(iterations * sizeof(double));
    double *setting_durable = malloc(iterations * sizeof(double));
    // One untimed save of each first: the document exists, the files are there.
    exchange(fd, set, set_length);
    exchange(fd, save, save_length);
    bare_save(directory, text, bytes);
    if (floor_fd >= 0) {
        exchange(floor_fd, set, set_length);
        exchange(floor_fd, save, save_length);
    }
    for (size_t i = 0; i < iterations; i++) {
        vary(text, bytes, (long)i + 1);
        // Other contents than the plain set's, so that each set is an edit.
        memcpy(durable_text, text, bytes);
        vary(durable_text, bytes, (long)i + 1 + 1000000);
        for (int turn = 0; turn < kinds; turn++) {
            int kind = active[(turn + i) % (size_t)kinds];
            if (kind == 0) {
                double t0 = now();
                bare_save(directory, text, bytes);
                bare[i] = now() - t0;
            } else if (kind == 1) {
                set_then_save(fd, set, set_length, save, save_length, &setting[i], &saved[i]);
            } else if (kind == 2) {
                set_then_save(fd, durable_set, durable_length, save, save_length, &setting_durable[i], &saved_durable[i]);
            } else {
                exchange(floor_fd, set, set_length);
                double t1 = now();
                exchange(floor_fd, save, save_length);
                floored[i] = now() - t1;
            }
        }
    }
    printf("| %zu B × %zu | p50 ms | p90 ms | p99 ms | mean ms |\n", bytes, iterations);
    printf("|---|---:|---:|---:|---:|\n");
    row("bare recipe", bare, iterations);
    row("save through the socket (less the set)", saved, iterations);
    row("(the set's own round trip)", setting, iterations);
    ratios("ratio, socket / bare", saved, bare, iterations);
    if (with_durable) {
        row("save through the socket after a durable set (less the set)", saved_durable, iterations);
        row("(the durable set's own round trip)", setting_durable, iterations);
        ratios("ratio, socket after a durable set / bare", saved_durable, bare, iterations);
    }
    if (floor_fd >= 0) {
        row("floor: the recipe behind a minimal socket server (bench/savefloor.c)", floored, iterations);
        ratios("ratio, floor / bare", floored, bare, iterations);
        ratios("ratio, socket / floor", saved, floored, iterations);
    }
    return 0;
}
