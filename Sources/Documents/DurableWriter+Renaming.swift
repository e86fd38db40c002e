import Posix

/// Renames that must not replace what is at the destination, on every file system.
enum Renaming {
    /// The errors with which a file system refuses `renameat2`'s flags (FUSE, NFS,
    /// CIFS, GlusterFS answer `EINVAL`; old kernels `ENOSYS`).
    static let refusedFlags: [Errno] = [.invalidArgument, .noSystemCall, .notSupported]

    /// Errors with which `linkat` says the file system has no hard links (or none for this node).
    static let noHardLinks: [Errno] = [.notPermitted, .notSupported, .noSystemCall, .tooManyLinks, .crossDevice]

    /// Renames `name` to `newName` in `directory` unless `newName` exists (`EEXIST` then).
    ///
    /// `renameat2(RENAME_NOREPLACE)` where the file system accepts the flag. Where it
    /// refuses it, the strongest substitute the file system allows:
    ///
    /// - a non-directory is hard-linked to `newName` (`linkat` fails with `EEXIST` when
    ///   the name is taken, as atomically as the flag would), then `name` is unlinked. A
    ///   crash between the two leaves both names on one inode; both orders of recovery
    ///   are safe, because `name` is always a temporary name whose destination exists.
    /// - a directory, or a non-directory where there are no hard links, is renamed with
    ///   plain `renameat` after checking that `newName` is absent. The check and the
    ///   rename are two steps: a name made by another program between them is refused by
    ///   the rename when it is a file or a non-empty directory (`ENOTDIR`, `ENOTEMPTY`)
    ///   when a directory is renamed, so at most an empty directory made in that instant
    ///   is replaced; a non-directory renamed without hard links could replace a file
    ///   made in that instant.
    ///
    /// The corresponding C functions are `renameat2`, `linkat`, `unlinkat` and `renameat`.
    static func renameWithoutReplacing(_ name: String, to newName: String, in directory: FileDescriptor)
        throws(Errno)
    {
        do {
            try directory.rename(name, to: newName, flags: .noReplace)
            return
        } catch let error where refusedFlags.contains(error) {
            // Falls through to the substitutes below.
        }
        let source = try directory.status(of: name)
        if source.kind != .directory {
            var linked = false
            do {
                try directory.link(name, to: newName)
                linked = true
            } catch let error where noHardLinks.contains(error) {
                // No hard links here: the checked rename below.
            }
            if linked {
                do { try directory.unlink(name) } catch {
                    try? directory.unlink(newName)
                    throw error
                }
                return
            }
        }
        if try directory.statusIfPresent(of: newName) != nil { throw .fileExists }
        do { try directory.rename(name, to: newName) } catch .isDirectory, .notDirectory, .directoryNotEmpty {
            // Something appeared at `newName` after the check and the rename refused to replace it.
            throw .fileExists
        }
    }
}
