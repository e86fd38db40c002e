// bench/floor.c's server on io_uring instead of epoll: the kernel's cost of the same
// traffic when the loop makes one system call per pass rather than one per read and
// per reply. Each client has a multishot receive into a ring of provided buffers
// (data arriving is copied out by the kernel and reported as a completion, with no
// readiness event and no read(2)); every reply of a pass is queued as a send and
// submitted together with the wait for the next completions (io_uring_submit_and_wait).
// The ring is set up for one thread (IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN), so
// the kernel's deferred work runs only when the loop asks for completions. Like the
// floor it does no work: each read is answered with a fixed reply of REPLY_BYTES bytes
// starting with {"ok":true}.
//
//   ringfloor SOCKET [REPLY_BYTES]     (default 230, the size of an edit's reply)
//
// Built against Debian's liburing-dev (gcc -O2 ringfloor.c -luring).
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

enum { BUFFERS = 4096, BUFFER_BYTES = 4096, GROUP = 1, ACCEPT = -1, SENT = -2 };

static struct io_uring ring;

static struct io_uring_sqe *sqe(void) {
    struct io_uring_sqe *entry = io_uring_get_sqe(&ring);
    if (!entry) {
        io_uring_submit(&ring);
        entry = io_uring_get_sqe(&ring);
    }
    return entry;
}

static void receive(int fd) {
    struct io_uring_sqe *entry = sqe();
    io_uring_prep_recv_multishot(entry, fd, NULL, 0, 0);
    entry->flags |= IOSQE_BUFFER_SELECT;
    entry->buf_group = GROUP;
    io_uring_sqe_set_data64(entry, (uint64_t)fd);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: ringfloor SOCKET [REPLY_BYTES]\n");
        return 64;
    }
    size_t length = argc > 2 ? (size_t)atoi(argv[2]) : 230;
    if (length < 12 || length > 4096) length = 230;
    static char reply[4096];
    memset(reply, 'x', length);
    memcpy(reply, "{\"ok\":true}", 11);
    reply[length - 1] = '\n';

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1024) != 0) {
        perror("listen");
        return 1;
    }
    struct io_uring_params params = {
        .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE,
        .cq_entries = 16384,
    };
    int failed = io_uring_queue_init_params(4096, &ring, &params);
    if (failed < 0) {
        fprintf(stderr, "ringfloor: io_uring_queue_init: %s\n", strerror(-failed));
        return 1;
    }
    char *buffers = aligned_alloc(4096, (size_t)BUFFERS * BUFFER_BYTES);
    struct io_uring_buf_ring *provided = aligned_alloc(4096, BUFFERS * sizeof(struct io_uring_buf));
    struct io_uring_buf_reg registration = {
        .ring_addr = (uint64_t)(uintptr_t)provided, .ring_entries = BUFFERS, .bgid = GROUP};
    failed = io_uring_register_buf_ring(&ring, &registration, 0);
    if (failed < 0) {
        fprintf(stderr, "ringfloor: provided buffers: %s\n", strerror(-failed));
        return 1;
    }
    io_uring_buf_ring_init(provided);
    for (int i = 0; i < BUFFERS; i++)
        io_uring_buf_ring_add(provided, buffers + (size_t)i * BUFFER_BYTES, BUFFER_BYTES, i,
                              io_uring_buf_ring_mask(BUFFERS), i);
    io_uring_buf_ring_advance(provided, BUFFERS);
    struct io_uring_sqe *accepting = sqe();
    io_uring_prep_multishot_accept(accepting, listener, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(accepting, (uint64_t)(int64_t)ACCEPT);

    static int pending[65536];
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        int pendingCount = 0;
        struct io_uring_cqe *completion;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, completion) {
            seen++;
            int64_t tag = (int64_t)io_uring_cqe_get_data64(completion);
            if (tag == SENT) continue;  // a send that failed: the receive ends the client
            if (tag == ACCEPT) {
                if (completion->res >= 0) receive(completion->res);
                continue;
            }
            int fd = (int)tag;
            if (completion->flags & IORING_CQE_F_BUFFER) {
                int id = (int)(completion->flags >> IORING_CQE_BUFFER_SHIFT);
                io_uring_buf_ring_add(provided, buffers + (size_t)id * BUFFER_BYTES, BUFFER_BYTES, id,
                                      io_uring_buf_ring_mask(BUFFERS), 0);
                io_uring_buf_ring_advance(provided, 1);
            }
            if (completion->res <= 0) {
                // Out of buffers: receive again; the end of the stream or an error: close.
                if (completion->res == -ENOBUFS)
                    receive(fd);
                else if (!(completion->flags & IORING_CQE_F_MORE))
                    close(fd);
                continue;
            }
            if (pendingCount < 65536) pending[pendingCount++] = fd;
            if (!(completion->flags & IORING_CQE_F_MORE)) receive(fd);
        }
        io_uring_cq_advance(&ring, seen);
        for (int i = 0; i < pendingCount; i++) {
            struct io_uring_sqe *entry = sqe();
            io_uring_prep_send(entry, pending[i], reply, length, MSG_NOSIGNAL);
            entry->flags |= IOSQE_CQE_SKIP_SUCCESS;
            io_uring_sqe_set_data64(entry, (uint64_t)(int64_t)SENT);
        }
    }
}
