#ifndef CLINUX_H
#define CLINUX_H

// Pieces of glibc that are only declared under _GNU_SOURCE, exposed as small
// inline functions and constants so Swift can call them without defining the
// macro for every target.

#include <stdint.h>
#include <sys/types.h>

int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                     unsigned int flags);
unsigned int clinux_rename_exchange(void);
unsigned int clinux_rename_noreplace(void);
int clinux_o_tmpfile(void);

/// Credentials of the peer of a connected Unix socket (SO_PEERCRED).
typedef struct {
    int32_t pid;
    uint32_t uid;
    uint32_t gid;
} clinux_peer_credentials;

int clinux_peer_credentials_get(int socket, clinux_peer_credentials *out);

/// openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (and optionally RESOLVE_NO_SYMLINKS).
int clinux_openat_beneath(int dirfd, const char *path, int flags, unsigned int mode, int no_symlinks);

/// getrandom(2) without flags.
long clinux_getrandom(void *buffer, size_t count);
/// syncfs(2): flush the file system holding `fd`.
int clinux_syncfs(int fd);

#endif
