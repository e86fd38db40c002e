#!/usr/bin/python3
"""powerloss_fs: a FUSE passthrough that can play a power cut.

Usage:
    /usr/bin/python3 powerloss_fs.py BACKING MOUNTPOINT [options]

Every operation is passed through to the directory BACKING. Beside that live tree the
file system keeps a model of what a disk would hold after a power cut:

  strict (the default, POSIX's rule): a file's data and attributes (mode, owner and
      extended attributes) are durable once the file is fsynced (fsync or fdatasync); a
      directory's entries (what create, mkdir, symlink, link, rename, unlink and rmdir did
      to it) and attributes once that directory is fsynced. Nothing else ever is.
  --ordering ordered: an idealised ext4 data=ordered: one journal, so any fsync of a
      file or a directory commits every directory change made so far, and a commit
      carries with it the data written before it (data before the metadata that
      exposes it).

  --torn SEED: what was written and not made durable may still have reached the disk,
      in part. At the cut each file whose bytes differ from its durable model gets a mix:
      its length is the live one (three times in four) or the durable one, and each 4 KiB
      page where the two differ is taken from either, chosen at random (seeded; where
      two or more differ, some of each), a page past the chosen version's end reading as
      zeros, as when a file's size reached the disk before its data. Only pages written
      after the last sync differ: what was made durable is kept unless a later change
      not synced (an overwrite, a truncation) reached the disk in its place, in part, as
      LazyFS's torn writes do on a real disk.

  --reorder SEED (with the strict model; a journal commits its changes in order): the
      changes made to a directory since its last fsync (create, mkdir, symlink, link,
      rename, unlink, rmdir) need not reach the disk all or none, nor in order. At the cut
      each reaches it or not, at random (seeded), independently of the others, applied in
      the order they were made to the directory's durable entries: a later rename can be
      there without an earlier one in the same directory. A directory fsynced after its
      changes has none pending: it is never reordered. This is ALICE's abstract
      persistence model (Pillai et al., OSDI 2014: a call split into the directory
      updates it makes, any subset of those not ordered by an fsync reaching the disk),
      not LazyFS's reorder fault (that one keeps a subset of a file's unsynced writes,
      which --torn plays page by page). Kept together or apart as a real file system can:
        - a rename within one directory is one change, there whole or not at all (the
          new name, the old name gone, whatever it replaced gone with it);
        - a rename across two directories is a change on each: for a file they are
          decided apart, so both names or neither can survive, as on a file system
          without a journal (fsck's lost+found aside); for a directory together (a
          directory never gets two parents, nor loses both);
        - a name needs its inode on the disk: an entry that names an inode made by a
          create, mkdir or symlink the cut dropped, and never synced since (by its own
          fsync, or by an fsync of a directory naming it), is dropped too (the file
          system's check would clear it); the inode of a kept creation is there, with the
          data its last fsync gave (empty if none), as under the strict model;
        - a directory leaves the disk only empty: an rmdir (or a rename over a directory)
          whose directory still has entries at the cut, because their removals were
          dropped, is dropped too; so is a change that would put a name over a directory
          it did not replace when made (a rename into the place of a directory that an
          earlier rename, dropped, had moved away). A name put over a file that an earlier
          change, dropped, had moved away replaces it, as a rename does.
      A file's durable data follows its inode whatever name reaches it. With --torn too,
      the bytes are torn first, by inode, and the names chosen after.
  --reorder-drop TEXT (repeatable; implies --reorder): no chance: the changes whose
      "OP PATH" (as printed below) contains one of the TEXTs are dropped, every other one
      kept (what the rules above need dropped too is), for a cut a test chooses exactly.

At mount time everything in BACKING counts as durable.

Extended attributes (setxattr, getxattr, listxattr, removexattr) are passed through too,
and a file's or a directory's are part of its inode: durable with the rest of its
attributes, as above. Only those of files and directories are modelled (Linux allows no
user.* name on a symbolic link): a symbolic link's are lost at a cut. These operations
are not counted in "op" (nor can a cut or an error be placed on them), so a program that
uses them, or a tool (ls, cp) that asks for them, moves no cut chosen by count.

A power cut freezes the model; from then on every operation fails with EIO (the disk
is gone), so nothing the program does afterwards can look durable to it. A cut comes
  --crash-after KIND:K   right after the K-th operation of KIND completes (KIND: write,
                         fsync (file fsync/fdatasync), fsyncdir, rename, create, mkdir,
                         unlink, rmdir, link, symlink, op (any operation but the
                         extended attributes' ones));
  SIGUSR1                at the next operation after the signal;
  at unmount             unless --on-exit keep: the end of a run is a cut too.
--fail KIND:K[:ERRNO] (repeatable) makes the K-th operation of KIND fail with ERRNO
(default EIO) and do nothing, without a cut: a disk error on one call.
When the file system is unmounted (fusermount3 -u / umount) after a cut, BACKING is
rebuilt from the model alone: exactly the tree a power cut at that instant could leave.

Lines on standard output (flushed at once):
    ready                                  mounted and serving
    crashed KIND K op N                    the cut happened (after op N of the run)
    failed KIND K with ERRNO               an injected error was returned
    counts write=… fsync=… …               operations of the run, at exit
    torn files=F pages=P                   --torn: files the rebuilt tree holds that were given
                                           a mix, and the pages of it taken live
    reorder kept|dropped|dropped-needed OP PATH
                                           --reorder: each directory change not synced, in the
                                           order made, and whether the cut kept it (dropped-needed:
                                           chosen, but what it needs was dropped)
    reordered dirs=D kept=K dropped=X      --reorder: directories with changes not synced, and
                                           of those changes (a rename across two directories
                                           counts twice) the ones kept and dropped
    rebuilt files=F directories=D  BACKING holds the durable model
Other options: --fsname NAME (default powerlossfs).
"""

import argparse
import collections
import errno
import os
import random
import shutil
import signal
import stat
import sys
import threading

from fusepy import FUSE, FuseOSError, Operations

KINDS = ("write", "fsync", "fsyncdir", "rename", "create", "mkdir", "unlink", "rmdir", "link", "symlink", "op")


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Node:
    """One inode of the model: what a disk would hold for it after a cut."""

    __slots__ = ("kind", "data", "mode", "uid", "gid", "xattrs", "entries", "target", "on_disk")

    def __init__(self, kind, mode, uid, gid):
        self.kind = kind  # "file", "dir", "symlink"
        self.data = b""  # files: bytes as of the last fsync
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.xattrs = {}  # files and directories: name -> value, as of the last fsync
        self.entries = {}  # directories: name -> node id, as of the last fsync of the directory
        self.target = None  # symbolic links
        # Whether the inode itself is on the disk whatever happens to the entries not
        # synced: there at mount, synced (its fsync, or its directory's naming it), or
        # (--reorder) made by a creation the cut keeps.
        self.on_disk = False


class PowerLossFS(Operations):
    use_ns = True

    PAGE = 4096

    def __init__(self, backing, ordering, crash_after, failures=(), torn=None, reorder=None, reorder_drop=()):
        self.backing = os.path.realpath(backing)
        self.ordering = ordering
        self.torn = random.Random(torn) if torn is not None else None
        self.reorder = random.Random(reorder) if reorder is not None or reorder_drop else None
        self.reorder_drop = tuple(reorder_drop)  # given: these changes dropped, the others kept
        # --reorder: directory node id -> the changes made to it since its last fsync, in
        # order; each change is a dict (see _record). A change's `unit` is decided as one.
        self.pending = collections.defaultdict(list)
        self.next_change = 0
        self.crash_kind, self.crash_count = crash_after if crash_after else (None, None)
        self.failures = {(kind, count): code for kind, count, code in failures}
        self.mutex = threading.RLock()
        self.nodes = {}
        self.by_inode = {}  # backing inode number -> node id, for inodes alive in BACKING
        self.handles = {}  # open file descriptor -> node id
        self.next_id = 0
        self.counts = collections.Counter()
        self.crashed = False
        self.signalled = False
        self.internal_errors = 0
        self.root_id = self._adopt_tree()

    # --- the model ---------------------------------------------------------------

    def _new_node(self, kind, st):
        node_id = self.next_id
        self.next_id += 1
        self.nodes[node_id] = Node(kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
        self.by_inode[st.st_ino] = node_id
        return node_id

    @staticmethod
    def _kind(st):
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        if stat.S_ISLNK(st.st_mode):
            return "symlink"
        return "file"

    def _adopt_tree(self):
        """Everything in BACKING at mount time is durable."""

        def adopt(path):
            st = os.lstat(path)
            node_id = self._new_node(self._kind(st), st)
            node = self.nodes[node_id]
            node.on_disk = True
            if node.kind != "symlink":
                node.xattrs = self._read_xattrs(path)
            if node.kind == "dir":
                for name in os.listdir(path):
                    node.entries[name] = adopt(os.path.join(path, name))
            elif node.kind == "symlink":
                node.target = os.readlink(path)
            else:
                with open(path, "rb") as f:
                    node.data = f.read()
            return node_id

        return adopt(self.backing)

    def _id_of(self, real):
        """The node of the inode now at the backing path `real` (a new node for a new inode)."""
        st = os.lstat(real)
        node_id = self.by_inode.get(st.st_ino)
        if node_id is None:
            node_id = self._new_node(self._kind(st), st)
            if self.nodes[node_id].kind == "symlink":
                self.nodes[node_id].target = os.readlink(real)
        return node_id

    def _forgetting(self, real, action):
        """Runs `action`, which unlinks or replaces `real`: once its inode's last name goes,
        the backing file system may reuse the inode number for a new file, so the number
        stops naming the node — only once the action succeeded (an rmdir refused with
        ENOTEMPTY leaves the directory, and its node, where they were)."""
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            st = None
        action()
        if st is not None and (stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1):
            # A handle still open on it keeps its node (an fsync through it still counts).
            self.by_inode.pop(st.st_ino, None)

    @staticmethod
    def _read_xattrs(target):
        """The extended attributes of `target`: an open descriptor, or a backing path (a
        final symbolic link not followed)."""
        options = {} if isinstance(target, int) else {"follow_symlinks": False}
        return {name: os.getxattr(target, name, **options) for name in os.listxattr(target, **options)}

    def _sync_file(self, node_id, fd):
        node = self.nodes[node_id]
        st = os.fstat(fd)
        node.data = os.pread(fd, st.st_size, 0) if st.st_size else b""
        node.mode, node.uid, node.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        node.xattrs = self._read_xattrs(fd)
        node.on_disk = True

    def _sync_directory(self, real):
        node_id = self._id_of(real)
        node = self.nodes[node_id]
        st = os.lstat(real)
        node.mode, node.uid, node.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        node.xattrs = self._read_xattrs(real)
        node.entries = {name: self._id_of(os.path.join(real, name)) for name in os.listdir(real)}
        node.on_disk = True
        for child in node.entries.values():
            self.nodes[child].on_disk = True
        # Every change made to it so far is durable now (a rename's half in another
        # directory stays pending there).
        self.pending.pop(node_id, None)

    # --- --reorder: directory changes not synced -------------------------------------

    def _parent_id(self, real):
        return self._id_of(os.path.dirname(real))

    def _record(self, op, path, halves, unit=None, creates=None, adds=None, removes_dir=None):
        """Notes one directory change for --reorder: `halves` is a list of (directory node
        id, mutations), each mutation ("set", name, node id) or ("del", name), one half a
        change pending on that directory. A change's halves share its unit (decided as one)
        unless `unit` is given as a list of units, one per half. `creates`: the node the
        change makes (its inode is on the disk if the change is kept); `adds`: a node
        already made that the change gives a name; `removes_dir`: the directory it removes
        (rmdir, or a rename over an empty directory)."""
        if self.reorder is None:
            return
        units = unit if unit is not None else [self.next_change] * len(halves)
        for (directory, mutations), half_unit in zip(halves, units):
            self.pending[directory].append({
                "seq": self.next_change, "op": op, "path": path, "dir": directory, "mutations": mutations,
                "unit": half_unit, "creates": creates,
                "adds": adds if any(m[0] == "set" for m in mutations) else None, "removes_dir": removes_dir,
            })
            self.next_change += 1

    def _reorder_entries(self):
        """--reorder, at the cut: each change not synced reaches the disk or not, at
        random; returns the lines saying which did. See the module's docstring for what
        stays together."""
        changes = sorted((c for log in self.pending.values() for c in log), key=lambda c: c["seq"])
        if not changes:
            return ["reordered dirs=0 kept=0 dropped=0"]
        units = collections.OrderedDict()
        for change in changes:
            units.setdefault(change["unit"], []).append(change)
        kept = {}
        forced = set()
        on_disk = {node_id for node_id, node in self.nodes.items() if node.on_disk}
        for unit, members in units.items():
            if self.reorder_drop:
                keep = not any(text in "%s %s" % (c["op"], c["path"]) for c in members for text in self.reorder_drop)
            else:
                keep = self.reorder.random() < 0.5
            made = {c["creates"] for c in members if c["creates"] is not None}
            if keep and any(c["adds"] is not None and c["adds"] not in on_disk | made for c in members):
                # A name for an inode that never reached the disk: its creation was dropped
                # and it was never synced.
                keep = False
                forced.add(unit)
            if keep:
                on_disk |= made
            kept[unit] = keep

        def entries_at_cut():
            """The entries of each directory with changes pending, and the kept units that
            would put a name over a directory they did not replace when made."""
            result = {}
            refused = set()
            for directory, log in self.pending.items():
                entries = dict(self.nodes[directory].entries)
                for change in log:
                    if not kept[change["unit"]]:
                        continue
                    for mutation in change["mutations"]:
                        if mutation[0] == "set":
                            there = entries.get(mutation[1])
                            if (there is not None and there != mutation[2] and there != change["removes_dir"]
                                    and self.nodes[there].kind == "dir"):
                                refused.add(change["unit"])
                            entries[mutation[1]] = mutation[2]
                        else:
                            entries.pop(mutation[1], None)
                result[directory] = entries
            return result, refused

        while True:
            result, refused = entries_at_cut()
            # A directory leaves the disk only empty: a removal whose directory still holds
            # entries at the cut (their removals dropped) is dropped too; so is a name put
            # over a directory that an earlier change, dropped, had moved away.
            refused |= {
                unit for unit, members in units.items() if kept[unit] and any(
                    c["removes_dir"] is not None and result.get(c["removes_dir"], self.nodes[c["removes_dir"]].entries)
                    for c in members)
            }
            if not refused:
                break
            for unit in refused:
                kept[unit] = False
                forced.add(unit)
        for directory, entries in result.items():
            self.nodes[directory].entries = entries
        lines = [
            "reorder %s %s %s" % (
                "kept" if kept[c["unit"]] else ("dropped-needed" if c["unit"] in forced else "dropped"),
                c["op"], c["path"])
            for c in changes
        ]
        held = sum(1 for c in changes if kept[c["unit"]])
        lines.append("reordered dirs=%d kept=%d dropped=%d" % (len(self.pending), held, len(changes) - held))
        return lines

    def _commit_everything(self):
        """ordered: the journal commits every directory change so far, with the data
        written before it."""

        def walk(real):
            st = os.lstat(real)
            node_id = self._id_of(real)
            if stat.S_ISDIR(st.st_mode):
                self._sync_directory(real)
                for name in os.listdir(real):
                    walk(os.path.join(real, name))
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    self._sync_file(node_id, fd)
                finally:
                    os.close(fd)

        walk(self.backing)

    def _after_sync(self):
        if self.ordering == "ordered":
            self._commit_everything()

    # --- cuts --------------------------------------------------------------------

    def _check_alive(self):
        if self.signalled and not self.crashed:
            self._crash("signal", 0)
        if self.crashed:
            raise FuseOSError(errno.EIO)

    def _count(self, kind):
        self.counts["op"] += 1
        self.counts[kind] += 1
        if self.crash_kind is not None and not self.crashed:
            if self.counts[self.crash_kind] == self.crash_count and (self.crash_kind == kind or self.crash_kind == "op"):
                self._crash(self.crash_kind, self.crash_count)

    def _crash(self, kind, count):
        self.crashed = True
        say("crashed %s %d op %d" % (kind, count, self.counts["op"]))

    def _op(self, kind, body, counted=True):
        """Runs one operation: refused once the power is off, counted once done. One not
        `counted` (the extended attributes') has a count of its own, outside "op" and out
        of reach of --crash-after and --fail: a cut or an error chosen by count stays where
        it was whether or not the program (or the kernel, or ls) asks for attributes."""
        with self.mutex:
            self._check_alive()
            code = self.failures.get((kind, self.counts[kind] + 1)) if counted else None
            if code is not None:
                # An injected error: the operation does nothing and fails.
                self.counts["op"] += 1
                self.counts[kind] += 1
                say("failed %s %d with %s" % (kind, self.counts[kind], errno.errorcode.get(code, code)))
                raise FuseOSError(code)
            try:
                result = body()
            except OSError:
                raise
            except Exception as error:  # a bug here must not look like a refusal (EINVAL)
                self.internal_errors += 1
                sys.stderr.write("powerloss_fs: internal error in %s: %r\n" % (kind, error))
                raise FuseOSError(errno.EIO)
            if counted:
                self._count(kind)
            else:
                self.counts[kind] += 1
            return result

    @staticmethod
    def _write_xattrs(path, xattrs):
        """Gives `path` exactly the extended attributes `xattrs` (BACKING itself is not
        made anew, and a new file may get some from its directory or the system)."""
        for name in os.listxattr(path, follow_symlinks=False):
            if name not in xattrs:
                os.removexattr(path, name, follow_symlinks=False)
        for name, value in xattrs.items():
            os.setxattr(path, name, value, follow_symlinks=False)

    def _live_files(self):
        """The bytes every regular file of BACKING holds now, by node (--torn)."""
        live = {}
        for directory, _, names in os.walk(self.backing):
            for name in names:
                path = os.path.join(directory, name)
                st = os.lstat(path)
                node_id = self.by_inode.get(st.st_ino)
                if node_id is not None and stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as f:
                        live[node_id] = f.read()
        return live

    def _tear(self, durable, live):
        """A mix of a file's durable and live bytes a cut could leave (--torn); the number
        of pages taken from the live bytes beside it. The length is the live one three
        times in four; of the pages where the two differ, each is taken live or not at
        random, and where two or more differ, at least one of each: a cut that kept all of
        them, or none, is what the strict model plays already."""
        length = len(live) if self.torn.random() < 0.75 else len(durable)
        differing = [
            start for start in range(0, length, self.PAGE)
            if durable[start:start + self.PAGE] != live[start:start + self.PAGE]
        ]
        taken = {start for start in differing if self.torn.random() < 0.5}
        if len(differing) >= 2 and len(taken) in (0, len(differing)):
            taken ^= {self.torn.choice(differing)}
        out = bytearray()
        for start in range(0, length, self.PAGE):
            end = min(start + self.PAGE, length)
            page = live[start:end] if start in taken else durable[start:end]
            out += page.ljust(end - start, b"\0")
        return bytes(out), len(taken)

    def rebuild(self):
        """Replaces BACKING's contents with the durable model."""
        torn = {}  # node id -> pages taken live (--torn)
        if self.torn is not None:
            for node_id, live in sorted(self._live_files().items()):
                node = self.nodes[node_id]
                if node.kind == "file" and live != node.data:
                    node.data, torn[node_id] = self._tear(node.data, live)
        reordered = self._reorder_entries() if self.reorder is not None else []
        for name in os.listdir(self.backing):
            path = os.path.join(self.backing, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        made = {}
        counts = {"file": 0, "dir": 0}
        anomalies = []

        def build(node_id, path, ancestors):
            node = self.nodes[node_id]
            if node_id in made:
                if node.kind == "dir":
                    anomalies.append("directory %s also at %s" % (path, made[node_id]))
                    return
                os.link(made[node_id], path)
                return
            made[node_id] = path
            if node.kind == "dir":
                if path != self.backing:
                    os.mkdir(path, 0o700)
                counts["dir"] += 1
                for name, child in sorted(node.entries.items()):
                    if child in ancestors:
                        anomalies.append("cycle at %s/%s" % (path, name))
                        continue
                    build(child, os.path.join(path, name), ancestors | {node_id})
            elif node.kind == "symlink":
                os.symlink(node.target, path)
                return
            else:
                with open(path, "wb") as f:
                    f.write(node.data)
                counts["file"] += 1
            os.lchown(path, node.uid, node.gid)
            # After the owner (a chown drops security.capability), before the mode (an
            # ACL, system.posix_acl_access, sets mode bits; the mode read with it agrees).
            self._write_xattrs(path, node.xattrs)
            os.chmod(path, node.mode)

        build(self.root_id, self.backing, frozenset())
        if self.torn is not None:
            # Only files the rebuilt tree holds: a torn file no durable name reaches is gone.
            kept = [pages for node_id, pages in torn.items() if node_id in made]
            say("torn files=%d pages=%d" % (len(kept), sum(kept)))
        for line in reordered:
            say(line)
        for anomaly in anomalies:
            say("anomaly " + anomaly)
        say("rebuilt files=%d directories=%d" % (counts["file"], counts["dir"] - 1))

    # --- operations ------------------------------------------------------------------

    def _real(self, path):
        return self.backing + path if path != "/" else self.backing

    def init(self, path):
        say("ready")

    def getattr(self, path, fh=None):
        def body():
            if path is None and fh:
                st = os.fstat(fh.fh)
            else:
                st = os.lstat(self._real(path))
            # Times in nanoseconds (use_ns).
            return {
                key: getattr(st, key)
                for key in ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
            } | {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        return self._op("getattr", body)

    def access(self, path, amode):
        def body():
            if not os.access(self._real(path), amode):
                raise FuseOSError(errno.EACCES)

        return self._op("access", body)

    def readlink(self, path):
        return self._op("readlink", lambda: os.readlink(self._real(path)))

    def statfs(self, path):
        def body():
            sv = os.statvfs(self._real(path))
            return {
                key: getattr(sv, key)
                for key in (
                    "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                    "f_frsize", "f_namemax",
                )
            }

        return self._op("statfs", body)

    def opendir(self, path):
        def body():
            if not os.path.isdir(self._real(path)):
                raise FuseOSError(errno.ENOTDIR)
            return 0

        return self._op("opendir", body)

    def readdir(self, path, fh):
        return self._op("readdir", lambda: [".", ".."] + os.listdir(self._real(path)))

    def releasedir(self, path, fh):
        return 0

    def fsyncdir(self, path, datasync, fh):
        def body():
            self._sync_directory(self._real(path))
            self._after_sync()

        return self._op("fsyncdir", body)

    def mkdir(self, path, mode):
        def body():
            real = self._real(path)
            os.mkdir(real, mode)
            node = self._id_of(real)
            self._record("mkdir", path, [(self._parent_id(real), [("set", os.path.basename(real), node)])], creates=node)

        return self._op("mkdir", body)

    def rmdir(self, path):
        def body():
            real = self._real(path)
            node, parent = self._id_of(real), self._parent_id(real)
            self._forgetting(real, lambda: os.rmdir(real))
            self._record("rmdir", path, [(parent, [("del", os.path.basename(real))])], removes_dir=node)

        return self._op("rmdir", body)

    def unlink(self, path):
        def body():
            real = self._real(path)
            parent = self._parent_id(real)
            self._forgetting(real, lambda: os.unlink(real))
            self._record("unlink", path, [(parent, [("del", os.path.basename(real))])])

        return self._op("unlink", body)

    def symlink(self, target, source):
        def body():
            real = self._real(target)
            os.symlink(source, real)
            node = self._id_of(real)
            self._record(
                "symlink", target, [(self._parent_id(real), [("set", os.path.basename(real), node)])], creates=node)

        return self._op("symlink", body)

    def link(self, target, source):
        def body():
            real = self._real(target)
            os.link(self._real(source), real)
            node = self._id_of(real)
            self._record("link", target, [(self._parent_id(real), [("set", os.path.basename(real), node)])], adds=node)

        return self._op("link", body)

    def rename(self, old, new):
        def body():
            real_old, real_new = self._real(old), self._real(new)
            old_st = os.lstat(real_old)
            try:
                new_st = os.lstat(real_new)
            except FileNotFoundError:
                new_st = None
            node = self._id_of(real_old)
            from_dir, to_dir = self._parent_id(real_old), self._parent_id(real_new)
            replaced_dir = None
            if new_st is not None and (new_st.st_dev, new_st.st_ino) != (old_st.st_dev, old_st.st_ino):
                # What is replaced loses its last name (rename fails for a non-empty
                # directory, before anything changes).
                if stat.S_ISDIR(new_st.st_mode) and os.listdir(real_new):
                    raise FuseOSError(errno.ENOTEMPTY)
                if stat.S_ISDIR(new_st.st_mode):
                    replaced_dir = self._id_of(real_new)
                self._forgetting(real_new, lambda: os.rename(real_old, real_new))
            elif new_st is not None:
                # Two names of one inode: rename does nothing.
                os.rename(real_old, real_new)
                return
            else:
                os.rename(real_old, real_new)
            drop = ("del", os.path.basename(real_old))
            put = ("set", os.path.basename(real_new), node)
            if from_dir == to_dir:
                # One directory: one change, whole or not at all.
                self._record("rename", "%s -> %s" % (old, new), [(to_dir, [drop, put])], adds=node,
                             removes_dir=replaced_dir)
            else:
                # Two directories: each half pending on its own, decided apart for a file
                # (both names or neither, as on a file system without a journal), together
                # for a directory (never two parents).
                units = None
                if not stat.S_ISDIR(old_st.st_mode):
                    units = [self.next_change, self.next_change + 1]
                self._record("rename", "%s -> %s" % (old, new), [(to_dir, [put]), (from_dir, [drop])], unit=units,
                             adds=node, removes_dir=replaced_dir)

        return self._op("rename", body)

    def chmod(self, path, mode):
        return self._op("chmod", lambda: os.chmod(self._real(path), mode))

    def chown(self, path, uid, gid):
        return self._op("chown", lambda: os.lchown(self._real(path), uid, gid))

    def utimens(self, path, times=None):
        def body():
            if times is None:
                os.utime(self._real(path), follow_symlinks=False)
            else:
                os.utime(self._real(path), ns=times, follow_symlinks=False)

        return self._op("utimens", body)

    @staticmethod
    def _backing_flags(flags):
        accmode = flags & os.O_ACCMODE
        # Written files are opened read-write so that an fsync can read back what it makes durable.
        flags = (flags & ~os.O_ACCMODE) | (os.O_RDWR if accmode != os.O_RDONLY else os.O_RDONLY)
        return flags & ~os.O_APPEND

    def create(self, path, mode, fi):
        def body():
            real = self._real(path)
            existed = os.path.lexists(real)
            fd = os.open(real, self._backing_flags(fi.flags) | os.O_CREAT, mode)
            self.handles[fd] = self._id_of(real)
            if not existed:
                node = self.handles[fd]
                self._record(
                    "create", path, [(self._parent_id(real), [("set", os.path.basename(real), node)])], creates=node)
            fi.fh = fd
            fi.direct_io = 1
            return 0

        return self._op("create", body)

    def open(self, path, fi):
        def body():
            real = self._real(path)
            fd = os.open(real, self._backing_flags(fi.flags))
            self.handles[fd] = self._id_of(real)
            fi.fh = fd
            fi.direct_io = 1
            return 0

        return self._op("open", body)

    def read(self, path, size, offset, fi):
        return self._op("read", lambda: os.pread(fi.fh, size, offset))

    def write(self, path, data, offset, fi):
        return self._op("write", lambda: os.pwrite(fi.fh, data, offset))

    def truncate(self, path, length, fi=None):
        def body():
            if fi is not None:
                os.ftruncate(fi.fh, length)
            else:
                os.truncate(self._real(path), length)

        return self._op("truncate", body)

    def flush(self, path, fi):
        return 0

    def fsync(self, path, datasync, fi):
        def body():
            self._sync_file(self.handles[fi.fh], fi.fh)
            self._after_sync()

        return self._op("fsync", body)

    # Extended attributes: part of the inode, durable with its fsync (see _sync_file,
    # _sync_directory); an error from BACKING (ENODATA for a missing name, on Linux
    # fusepy's ENOATTR) reaches the caller with its errno, like every OSError here.

    def setxattr(self, path, name, value, options, position=0):
        def body():
            os.setxattr(self._real(path), name, value, options, follow_symlinks=False)
            return 0

        return self._op("xattr", body, counted=False)

    def getxattr(self, path, name, position=0):
        return self._op(
            "xattr", lambda: os.getxattr(self._real(path), name, follow_symlinks=False), counted=False)

    def listxattr(self, path):
        return self._op("xattr", lambda: os.listxattr(self._real(path), follow_symlinks=False), counted=False)

    def removexattr(self, path, name):
        def body():
            os.removexattr(self._real(path), name, follow_symlinks=False)
            return 0

        return self._op("xattr", body, counted=False)

    def release(self, path, fi):
        with self.mutex:
            self.handles.pop(fi.fh, None)
            os.close(fi.fh)
        return 0


def main():
    parser = argparse.ArgumentParser(description="A FUSE passthrough that can play a power cut.")
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--ordering", choices=("strict", "ordered"), default="strict")
    parser.add_argument("--crash-after", metavar="KIND:K")
    parser.add_argument("--on-exit", choices=("cut", "keep"), default="cut")
    parser.add_argument("--fail", metavar="KIND:K[:ERRNO]", action="append", default=[])
    parser.add_argument("--fsname", default="powerlossfs")
    parser.add_argument("--torn", metavar="SEED", type=int)
    parser.add_argument("--reorder", metavar="SEED", type=int)
    parser.add_argument("--reorder-drop", metavar="TEXT", action="append", default=[])
    args = parser.parse_args()
    if (args.reorder is not None or args.reorder_drop) and args.ordering != "strict":
        parser.error("--reorder goes with the strict model (a journal commits its changes in order)")
    crash_after = None
    if args.crash_after:
        kind, _, count = args.crash_after.partition(":")
        if kind not in KINDS or not count.isdigit() or int(count) < 1:
            parser.error("--crash-after takes KIND:K with KIND one of %s and K >= 1" % ", ".join(KINDS))
        crash_after = (kind, int(count))

    failures = []
    for spec in args.fail:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or parts[0] not in KINDS or not parts[1].isdigit():
            parser.error("--fail takes KIND:K or KIND:K:ERRNO")
        code = int(parts[2]) if len(parts) == 3 else errno.EIO
        failures.append((parts[0], int(parts[1]), code))

    fs = PowerLossFS(args.backing, args.ordering, crash_after, failures, torn=args.torn, reorder=args.reorder,
                     reorder_drop=args.reorder_drop)

    def on_signal(number, frame):
        fs.signalled = True

    signal.signal(signal.SIGUSR1, on_signal)
    # A parent that blocks the signal (a process that takes its signals through signalfd or a
    # dispatch source does) passes the mask on: unblocked here, or the cut would never come.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    FUSE(
        fs, args.mountpoint, raw_fi=True, foreground=True, nothreads=True, fsname=args.fsname,
        attr_timeout=0, entry_timeout=0, negative_timeout=0, use_ino=True, hard_remove=True, big_writes=True,
        default_permissions=True,
    )
    say("counts " + " ".join("%s=%d" % (kind, fs.counts[kind]) for kind in KINDS))
    if fs.crashed or args.on_exit == "cut":
        fs.rebuild()
    if fs.internal_errors:
        say("internal-errors %d" % fs.internal_errors)
        sys.exit(70)


if __name__ == "__main__":
    main()
