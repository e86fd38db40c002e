// A lean single-threaded epoll load generator that speaks either Redis (RESP) or
// autosaved's control protocol (JSON lines), so both servers are driven the same way:
// N connections, each sending a batch of DEPTH requests and waiting for all their
// replies before it sends the next batch, for a fixed time.
//
//   loadgen [OPTIONS] redis|autosaved SOCKET CLIENTS SECONDS [VALUE_BYTES]
//
//   -o set|append|create  the operation (default set):
//                         set     SET key value / {"cmd":"set","doc":…,"text":…}
//                         append  APPEND key value / {"cmd":"append",…}
//                         create  a set whose key / document is new every time
//   -d DOCS               keys (documents) per client, used in turn (default 1)
//   -p DEPTH              requests per batch, the pipeline depth (default 1)
//   -t TAG                names the creation load's keys, so runs never reuse one
//   -n DIR                the directory of the creation load's new documents under
//                         autosaved's root (default "new", made by the first save;
//                         "" for the root itself, there from the start)
//   -c BYTES              append: the longest a key's value may grow; an append that
//                         would pass it is sent as a set of one value instead
//                         (a reset), counted among the requests (default 65536)
//   -f                    after the timed run, on a new connection, leave the server
//                         idle: autosaved saves everything now (save-all with wait),
//                         Redis forgets the creation load's keys (FLUSHALL); the time
//                         this took is printed, and is not part of the run's
//
// Before the clock starts, every client sets each of its keys once (so a set or append
// run measures edits of existing keys, not their creation); the creation load starts
// with nothing. Values are VALUE_BYTES (default 16) of 'v'.
//
// Prints one line: requests, seconds, requests per second, the p50/p99 latency of a
// batch in microseconds, the number of append resets, the share of the machine's CPU
// time the hypervisor gave to others during the run ("steal", from /proc/stat: on a
// virtual machine whose host is busy, every server's rate falls with it), and with -f
// the finishing time.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum operation { OP_SET, OP_APPEND, OP_CREATE };

typedef struct {
    int fd;
    int index;
    char *out;             // the batch being sent
    size_t out_length;
    size_t sent;
    char *in;              // replies read, not yet complete
    size_t in_length;
    int awaited;           // replies still to come for the batch
    long next_doc;         // the key the next request names (turn by turn)
    long created;          // keys this client has created (creation load)
    size_t *lengths;       // append: each key's current length
    double started;
} client_t;

static int redis_mode;
static enum operation operation = OP_SET;
static int docs_per_client = 1;
static int depth = 1;
static const char *tag = "0";
static const char *new_directory = "new/";
static size_t append_cap = 65536;
static char *value;
static size_t value_length;
static long sequence;
static long resets;
static size_t in_capacity;
static int finish_after;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// The machine's CPU ticks so far, all of them and those stolen (/proc/stat's "cpu" line).
static void cpu_ticks(unsigned long long *total, unsigned long long *steal) {
    unsigned long long v[8] = {0};
    *total = *steal = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]) == 8) {
        for (int i = 0; i < 8; i++) *total += v[i];
        *steal = v[7];
    }
    fclose(f);
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static char *put(char *p, const char *s, size_t n) {
    memcpy(p, s, n);
    return p + n;
}

static char *put_string(char *p, const char *s) { return put(p, s, strlen(s)); }

/// Appends one request to the client's batch: `command` is "set" or "append", the key
/// is the client's key `doc`, or a new key when `doc` is negative.
static void add_request(client_t *c, const char *command, long doc) {
    char key[128];
    int key_length;
    if (redis_mode) {
        if (doc < 0)
            key_length = snprintf(key, sizeof key, "new:%s:%d:%ld", tag, c->index, c->created++);
        else
            key_length = snprintf(key, sizeof key, "bench:%d:%ld", c->index, doc);
    } else {
        if (doc < 0)
            key_length = snprintf(key, sizeof key, "%s%s-c%d-%ld.txt", new_directory, tag, c->index, c->created++);
        else
            key_length = snprintf(key, sizeof key, "bench/c%d-%ld.txt", c->index, doc);
    }
    char *p = c->out + c->out_length;
    char number[32];
    if (redis_mode) {
        int is_set = command[0] == 's';
        p = put_string(p, is_set ? "*3\r\n$3\r\nSET\r\n$" : "*3\r\n$6\r\nAPPEND\r\n$");
        p = put(p, number, (size_t)snprintf(number, sizeof number, "%d\r\n", key_length));
        p = put(p, key, (size_t)key_length);
        p = put(p, "\r\n$", 3);
        p = put(p, number, (size_t)snprintf(number, sizeof number, "%zu\r\n", value_length));
        p = put(p, value, value_length);
        p = put(p, "\r\n", 2);
    } else {
        p = put_string(p, "{\"id\":");
        p = put(p, number, (size_t)snprintf(number, sizeof number, "%ld", ++sequence));
        p = put_string(p, ",\"cmd\":\"");
        p = put_string(p, command);
        p = put_string(p, "\",\"doc\":\"");
        p = put(p, key, (size_t)key_length);
        p = put_string(p, "\",\"text\":\"");
        p = put(p, value, value_length);
        p = put(p, "\"}\n", 3);
    }
    c->out_length = (size_t)(p - c->out);
    c->awaited++;
}

/// The next batch of the timed run.
static void prepare(client_t *c) {
    c->out_length = 0;
    c->sent = 0;
    for (int i = 0; i < depth; i++) {
        if (operation == OP_CREATE) {
            add_request(c, "set", -1);
            continue;
        }
        long doc = c->next_doc;
        c->next_doc = (c->next_doc + 1) % docs_per_client;
        if (operation == OP_SET) {
            add_request(c, "set", doc);
        } else if (c->lengths[doc] + value_length > append_cap) {
            add_request(c, "set", doc);
            c->lengths[doc] = value_length;
            resets++;
        } else {
            add_request(c, "append", doc);
            c->lengths[doc] += value_length;
        }
    }
}

/// The warm-up batch: a set of each of the client's keys, DEPTH at a time. Returns 0
/// when every key has been set.
static int prepare_warmup(client_t *c) {
    c->out_length = 0;
    c->sent = 0;
    for (int i = 0; i < depth && c->next_doc < docs_per_client; i++) {
        if (c->lengths) c->lengths[c->next_doc] = value_length;
        add_request(c, "set", c->next_doc++);
    }
    if (c->out_length == 0) {
        c->next_doc = 0;
        return 0;
    }
    return 1;
}

/// Sends what is left of the batch; returns -1 when the connection broke.
static int flush(client_t *c) {
    while (c->sent < c->out_length) {
        ssize_t w = send(c->fd, c->out + c->sent, c->out_length - c->sent, MSG_NOSIGNAL);
        if (w > 0) {
            c->sent += (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            return 0;
        } else {
            perror("send");
            return -1;
        }
    }
    return 0;
}

/// Reads replies; returns the number of replies completed, or -1 on an error reply or
/// a broken connection. A reply is one line in both protocols (+OK, :length, or a JSON
/// object).
static int receive(client_t *c) {
    ssize_t r = read(c->fd, c->in + c->in_length, in_capacity - c->in_length);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (r <= 0) {
        fprintf(stderr, "connection closed\n");
        return -1;
    }
    size_t end = c->in_length + (size_t)r;
    size_t line = 0;
    int completed = 0;
    char *newline;
    while ((newline = memchr(c->in + line, '\n', end - line)) != NULL) {
        size_t length = (size_t)(newline - (c->in + line)) + 1;
        const char *text = c->in + line;
        int ok = redis_mode ? text[0] != '-' : memmem(text, length, "\"ok\":true", 9) != NULL;
        if (!ok) {
            fprintf(stderr, "error reply: %.*s\n", (int)(length > 400 ? 400 : length), text);
            return -1;
        }
        completed++;
        line += length;
    }
    if (line < end) {
        // A reply longer than the buffer is not expected: keep its last part only.
        if (line == 0 && end == in_capacity) line = end - 1;
        memmove(c->in, c->in + line, end - line);
    }
    c->in_length = end - line;
    return completed;
}

static void watch(int epfd, client_t *c, uint32_t events) {
    struct epoll_event event = {.events = events, .data.u32 = (uint32_t)c->index};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &event);
}

/// Drives every client until `end` (or, with `warmup`, until every client has set each
/// of its keys). Records batch latencies when `latencies` is given. Returns the number
/// of requests answered, or -1.
static long drive(int epfd, client_t *all, int clients, int warmup, double end, double *latencies, size_t capacity,
                  size_t *count) {
    long answered = 0;
    int active = 0;
    for (int i = 0; i < clients; i++) {
        client_t *c = &all[i];
        c->awaited = 0;
        if (warmup ? prepare_warmup(c) : (prepare(c), 1)) {
            active++;
            c->started = now();
            if (flush(c) < 0) return -1;
            watch(epfd, c, c->sent < c->out_length ? EPOLLIN | EPOLLOUT : EPOLLIN);
        }
    }
    struct epoll_event events[1024];
    while (active > 0 && (warmup || now() < end)) {
        int n = epoll_wait(epfd, events, 1024, 100);
        for (int e = 0; e < n; e++) {
            client_t *c = &all[events[e].data.u32];
            if (events[e].events & EPOLLOUT) {
                if (flush(c) < 0) return -1;
                if (c->sent == c->out_length) watch(epfd, c, EPOLLIN);
            }
            if (!(events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
            int done = receive(c);
            if (done < 0) return -1;
            if (done == 0 || c->awaited == 0) continue;
            c->awaited -= done;
            answered += done;
            if (c->awaited > 0) continue;
            double t = now();
            if (latencies && *count < capacity) latencies[*count] = (t - c->started) * 1e6;
            if (latencies) (*count)++;
            if (warmup ? !prepare_warmup(c) : (!warmup && t >= end)) {
                active--;
                continue;
            }
            if (!warmup) prepare(c);
            c->started = t;
            if (flush(c) < 0) return -1;
            if (c->sent < c->out_length) watch(epfd, c, EPOLLIN | EPOLLOUT);
        }
    }
    return answered;
}

static int connect_to(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        perror("connect");
        exit(69);
    }
    return fd;
}

/// The -f step: one request on a new connection, and its one-line reply. Returns the
/// seconds it took, or -1.
static double finish(const char *path) {
    const char *request = redis_mode ? "*1\r\n$8\r\nFLUSHALL\r\n" : "{\"id\":0,\"cmd\":\"save-all\",\"wait\":true}\n";
    if (redis_mode && operation != OP_CREATE) return 0;
    double started = now();
    int fd = connect_to(path);
    if (send(fd, request, strlen(request), MSG_NOSIGNAL) != (ssize_t)strlen(request)) return -1;
    char reply[4096];
    size_t length = 0;
    while (length < sizeof reply && (length == 0 || reply[length - 1] != '\n')) {
        ssize_t r = read(fd, reply + length, sizeof reply - length);
        if (r <= 0) return -1;
        length += (size_t)r;
    }
    close(fd);
    int ok = redis_mode ? reply[0] == '+' : memmem(reply, length, "\"ok\":true", 9) != NULL;
    if (!ok) {
        fprintf(stderr, "finish: %.*s\n", (int)length, reply);
        return -1;
    }
    return now() - started;
}

static void usage(void) {
    fprintf(stderr, "usage: loadgen [-o set|append|create] [-d DOCS] [-p DEPTH] [-t TAG] [-n DIR] [-c BYTES] [-f] "
                    "redis|autosaved SOCKET CLIENTS SECONDS [VALUE_BYTES]\n");
    exit(64);
}

int main(int argc, char **argv) {
    int option;
    while ((option = getopt(argc, argv, "o:d:p:t:n:c:f")) != -1) {
        switch (option) {
        case 'o':
            if (strcmp(optarg, "set") == 0) operation = OP_SET;
            else if (strcmp(optarg, "append") == 0) operation = OP_APPEND;
            else if (strcmp(optarg, "create") == 0) operation = OP_CREATE;
            else usage();
            break;
        case 'd': docs_per_client = atoi(optarg); break;
        case 'p': depth = atoi(optarg); break;
        case 't': tag = optarg; break;
        case 'n': {
            size_t length = strlen(optarg);
            if (length > 64) usage();
            char *directory = malloc(length + 2);
            memcpy(directory, optarg, length);
            if (length > 0 && optarg[length - 1] != '/') directory[length++] = '/';
            directory[length] = 0;
            new_directory = directory;
            break;
        }
        case 'c': append_cap = (size_t)atol(optarg); break;
        case 'f': finish_after = 1; break;
        default: usage();
        }
    }
    if (argc - optind < 4 || docs_per_client < 1 || depth < 1) usage();
    redis_mode = strcmp(argv[optind], "redis") == 0;
    const char *path = argv[optind + 1];
    int clients = atoi(argv[optind + 2]);
    double seconds = atof(argv[optind + 3]);
    value_length = argc - optind > 4 ? (size_t)atol(argv[optind + 4]) : 16;
    if (clients < 1 || value_length < 1) usage();
    value = malloc(value_length);
    memset(value, 'v', value_length);
    if (append_cap < 2 * value_length) append_cap = 2 * value_length;
    // Room for a batch of the longest request, and for many replies at once.
    size_t out_capacity = (size_t)depth * (value_length + 256);
    in_capacity = 65536;

    int epfd = epoll_create1(0);
    client_t *all = calloc((size_t)clients, sizeof(client_t));
    for (int i = 0; i < clients; i++) {
        client_t *c = &all[i];
        c->index = i;
        c->out = malloc(out_capacity);
        c->in = malloc(in_capacity);
        if (operation == OP_APPEND) c->lengths = calloc((size_t)docs_per_client, sizeof(size_t));
        c->fd = connect_to(path);
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event event = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &event);
    }
    if (operation != OP_CREATE && drive(epfd, all, clients, 1, 0, NULL, 0, NULL) < 0) return 1;

    size_t capacity = 1 << 22;
    double *latencies = malloc(capacity * sizeof(double));
    size_t count = 0;
    unsigned long long total0, steal0, total1, steal1;
    cpu_ticks(&total0, &steal0);
    double start = now();
    long answered = drive(epfd, all, clients, 0, start + seconds, latencies, capacity, &count);
    if (answered < 0) return 1;
    double elapsed = now() - start;
    cpu_ticks(&total1, &steal1);
    double steal = total1 > total0 ? 100.0 * (double)(steal1 - steal0) / (double)(total1 - total0) : 0;
    size_t sample = count < capacity ? count : capacity;
    qsort(latencies, sample, sizeof(double), compare);
    printf("%s %d clients: %ld requests in %.2f s = %.0f requests/s, p50 %.0f us, p99 %.0f us, resets %ld",
           argv[optind], clients, answered, elapsed, answered / elapsed, sample ? latencies[sample / 2] : 0,
           sample ? latencies[(size_t)(sample * 0.99)] : 0, resets);
    printf(", steal %.1f %%", steal);
    if (finish_after) {
        double took = finish(path);
        if (took < 0) return 1;
        printf(", finish %.2f s", took);
    }
    printf("\n");
    return 0;
}
