// The floor for the control socket's throughput on this machine: a minimal C server on
// the same loop shape as autosaved's (epoll, edge-triggered reads, one read per
// readable client, every reply of a pass sent just before the next epoll_wait) that
// does no work at all — each line it reads is answered with a fixed reply of
// REPLY_BYTES bytes starting with {"ok":true}. Driven by bench/loadgen.c in autosaved
// mode, it shows what the kernel costs for the same traffic.
//
//   floor SOCKET [REPLY_BYTES]     (default 230, the size of an edit's reply)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: floor SOCKET [REPLY_BYTES]\n");
        return 64;
    }
    size_t length = argc > 2 ? (size_t)atoi(argv[2]) : 230;
    if (length < 12 || length > 4096) length = 230;
    char reply[4096];
    memset(reply, 'x', length);
    memcpy(reply, "{\"ok\":true}", 11);
    reply[length - 1] = '\n';

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1024) != 0) {
        perror("listen");
        return 1;
    }
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);

    static int pending[65536];
    int pendingCount = 0;
    static char buffer[65536];
    for (;;) {
        for (int i = 0; i < pendingCount; i++) send(pending[i], reply, length, MSG_NOSIGNAL);
        pendingCount = 0;
        struct epoll_event ready[256];
        int count = epoll_wait(epoll, ready, 256, -1);
        for (int i = 0; i < count; i++) {
            int fd = ready[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct epoll_event clientEvent = {.events = EPOLLIN | EPOLLET, .data.fd = client};
                    epoll_ctl(epoll, EPOLL_CTL_ADD, client, &clientEvent);
                }
                continue;
            }
            ssize_t n = read(fd, buffer, sizeof buffer);
            if (n <= 0) {
                close(fd);
                continue;
            }
            if (pendingCount < 65536) pending[pendingCount++] = fd;
        }
    }
}
