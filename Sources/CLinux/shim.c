#define _GNU_SOURCE
#include "CLinux.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                     unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

unsigned int clinux_rename_exchange(void) { return RENAME_EXCHANGE; }
unsigned int clinux_rename_noreplace(void) { return RENAME_NOREPLACE; }
int clinux_o_tmpfile(void) { return O_TMPFILE; }

int clinux_peer_credentials_get(int socket, clinux_peer_credentials *out) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        return -1;
    }
    out->pid = cred.pid;
    out->uid = cred.uid;
    out->gid = cred.gid;
    return 0;
}

int clinux_openat_beneath(int dirfd, const char *path, int flags, unsigned int mode, int no_symlinks) {
    struct open_how how = {0};
    how.flags = (uint64_t)flags;
    how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (no_symlinks) {
        how.resolve |= RESOLVE_NO_SYMLINKS;
    }
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

long clinux_getrandom(void *buffer, size_t count) { return (long)getrandom(buffer, count, 0); }

int clinux_syncfs(int fd) { return syncfs(fd); }
