// A lean single-threaded epoll load generator that speaks either Redis (RESP SET) or
// autosaved's control protocol (JSON "set"), so both servers are driven the same way:
// N connections, each with one request outstanding at a time, for a fixed time.
//
//   loadgen redis|autosaved SOCKET CLIENTS SECONDS [VALUE_BYTES]
//
// Prints: requests, seconds, requests per second, and p50/p99 latency in microseconds.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    char request[512];
    size_t request_length;
    size_t sent;
    char reply[8192];
    size_t received;
    double started;
} client_t;

static int redis_mode;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void prepare(client_t *c, int index, long sequence, const char *value) {
    if (redis_mode) {
        char key[64];
        int key_length = snprintf(key, sizeof key, "bench:%d", index);
        c->request_length = (size_t)snprintf(c->request, sizeof c->request, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%zu\r\n%s\r\n",
                                             key_length, key, strlen(value), value);
    } else {
        c->request_length = (size_t)snprintf(c->request, sizeof c->request,
                                             "{\"id\":%ld,\"cmd\":\"set\",\"doc\":\"bench/c%d.txt\",\"text\":\"%s\"}\n", sequence,
                                             index, value);
    }
    c->sent = 0;
    c->received = 0;
}

/// Whether the reply buffer holds one complete reply (a line for both protocols here).
static int complete(client_t *c) {
    return c->received > 0 && c->reply[c->received - 1] == '\n';
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: loadgen redis|autosaved SOCKET CLIENTS SECONDS [VALUE_BYTES]\n");
        return 64;
    }
    redis_mode = strcmp(argv[1], "redis") == 0;
    const char *path = argv[2];
    int clients = atoi(argv[3]);
    double seconds = atof(argv[4]);
    int value_bytes = argc > 5 ? atoi(argv[5]) : 16;
    char value[256];
    if (value_bytes > 200) value_bytes = 200;
    memset(value, 'v', (size_t)value_bytes);
    value[value_bytes] = 0;

    int epfd = epoll_create1(0);
    client_t *all = calloc((size_t)clients, sizeof(client_t));
    size_t capacity = 1 << 22;
    double *latencies = malloc(capacity * sizeof(double));
    size_t count = 0;
    long sequence = 0;
    for (int i = 0; i < clients; i++) {
        all[i].fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        strncpy(address.sun_path, path, sizeof address.sun_path - 1);
        if (connect(all[i].fd, (struct sockaddr *)&address, sizeof address) != 0 && errno != EINPROGRESS) {
            perror("connect");
            return 69;
        }
        struct epoll_event event = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)i};
        epoll_ctl(epfd, EPOLL_CTL_ADD, all[i].fd, &event);
        prepare(&all[i], i, ++sequence, value);
    }
    double start = now();
    double end = start + seconds;
    for (int i = 0; i < clients; i++) all[i].started = now();
    struct epoll_event events[1024];
    while (now() < end) {
        int n = epoll_wait(epfd, events, 1024, 100);
        for (int e = 0; e < n; e++) {
            client_t *c = &all[events[e].data.u32];
            if ((events[e].events & EPOLLOUT) && c->sent < c->request_length) {
                ssize_t w = send(c->fd, c->request + c->sent, c->request_length - c->sent, MSG_NOSIGNAL);
                if (w > 0) c->sent += (size_t)w;
                if (c->sent == c->request_length) {
                    struct epoll_event event = {.events = EPOLLIN, .data.u32 = events[e].data.u32};
                    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &event);
                }
            }
            if (events[e].events & EPOLLIN) {
                ssize_t r = read(c->fd, c->reply + c->received, sizeof c->reply - c->received);
                if (r <= 0) {
                    fprintf(stderr, "connection closed\n");
                    return 1;
                }
                c->received += (size_t)r;
                if (c->received == sizeof c->reply) c->received = 0;
                if (complete(c)) {
                    if (!redis_mode && strstr(c->reply, "\"ok\":true") == NULL) {
                        fprintf(stderr, "error reply: %.*s\n", (int)c->received, c->reply);
                        return 1;
                    }
                    double t = now();
                    if (count < capacity) latencies[count] = (t - c->started) * 1e6;
                    count++;
                    prepare(c, (int)events[e].data.u32, ++sequence, value);
                    c->started = t;
                    ssize_t w = send(c->fd, c->request, c->request_length, MSG_NOSIGNAL);
                    if (w > 0) c->sent = (size_t)w;
                    if (c->sent < c->request_length) {
                        struct epoll_event event = {.events = EPOLLIN | EPOLLOUT, .data.u32 = events[e].data.u32};
                        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &event);
                    }
                }
            }
        }
    }
    double elapsed = now() - start;
    size_t sample = count < capacity ? count : capacity;
    qsort(latencies, sample, sizeof(double), compare);
    printf("%s %d clients: %zu requests in %.2f s = %.0f requests/s, p50 %.0f us, p99 %.0f us\n", argv[1], clients, count,
           elapsed, count / elapsed, sample ? latencies[sample / 2] : 0, sample ? latencies[(size_t)(sample * 0.99)] : 0);
    return 0;
}
