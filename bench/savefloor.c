// The floor for a save's latency through a socket on this machine: a minimal C server on
// autosaved's loop shape (epoll, one read per readable client, the reply sent once the
// request is done) that keeps the text of the last `set` in memory and answers a
// `save` by the bare durable recipe — a temp file (O_CREAT|O_EXCL), write, fsync,
// close, rename over DIR/floor.txt, fsync of the directory — and then its reply. No
// parsing beyond finding "cmd" and "text", no journal, no watcher: what the socket's
// two wake-ups add to the recipe, and nothing else. bench/savelat.c drives it beside
// the daemon and the bare recipe.
//
//   savefloor SOCKET DIR
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void fail(const char *what) {
    perror(what);
    exit(1);
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

static char *text;
static size_t text_length, text_capacity;

static void keep_text(const char *line, size_t length) {
    const char *start = memmem(line, length, "\"text\":\"", 8);
    if (start == NULL) return;
    start += 8;
    const char *end = line + length;
    while (end > start && *end != '"') end--;
    size_t n = (size_t)(end - start);
    if (n > text_capacity) {
        text = realloc(text, n);
        if (text == NULL) fail("realloc");
        text_capacity = n;
    }
    memcpy(text, start, n);
    text_length = n;
}

static void save(int directory) {
    int fd = openat(directory, ".floor.txt.tmp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) fail("open temp");
    write_all(fd, text, text_length, "write");
    if (fsync(fd) != 0) fail("fsync");
    if (close(fd) != 0) fail("close");
    if (renameat(directory, ".floor.txt.tmp", directory, "floor.txt") != 0) fail("rename");
    if (fsync(directory) != 0) fail("fsync directory");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: savefloor SOCKET DIR\n");
        return 64;
    }
    int directory = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) fail("open directory");
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) fail("bind");
    if (listen(listener, 16) != 0) fail("listen");
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);

    size_t capacity = 1 << 16;
    char *buffer = malloc(capacity);
    size_t used = 0;
    for (;;) {
        struct epoll_event events[16];
        int n = epoll_wait(epoll, events, 16, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (client < 0) continue;
                struct epoll_event added = {.events = EPOLLIN, .data.fd = client};
                epoll_ctl(epoll, EPOLL_CTL_ADD, client, &added);
                used = 0;
                continue;
            }
            if (used == capacity) {
                capacity *= 2;
                buffer = realloc(buffer, capacity);
                if (buffer == NULL) fail("realloc");
            }
            ssize_t r = read(fd, buffer + used, capacity - used);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) {
                close(fd);
                continue;
            }
            used += (size_t)r;
            char *start = buffer;
            char *newline;
            while ((newline = memchr(start, '\n', used - (size_t)(start - buffer))) != NULL) {
                size_t length = (size_t)(newline - start);
                if (memmem(start, length, "\"cmd\":\"save\"", 12) != NULL) {
                    save(directory);
                    write_all(fd, "{\"id\":2,\"ok\":true}\n", 19, "send");
                } else {
                    keep_text(start, length);
                    write_all(fd, "{\"id\":1,\"ok\":true}\n", 19, "send");
                }
                start = newline + 1;
            }
            used -= (size_t)(start - buffer);
            memmove(buffer, start, used);
        }
    }
}
