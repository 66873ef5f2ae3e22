"""What a power loss keeps: the lazy file system's model of a disk and a page cache.

The backing directory is the disk. At any moment it holds exactly what would survive a power loss
with nothing unsynced surviving (mode "drop"). The mount shows the disk plus what was not made
durable yet, which is kept in this process's memory and lost on `power_loss`.

Inodes and names are apart, as on a real file system. A `File` or `Dir` node is an inode; a name is
an entry of a directory node. Each node has a live place (the tree the mount shows) and a durable
place (the disk's tree, mirrored in memory by `Dir.durable`), either of which may be missing.

Data. A file's writes and truncates since its last fsync are kept in its `Overlay` (overlay.py) and
read back from there. fsync and fdatasync alike replay them onto the inode's backing file, wherever
(and whether) the file is named on the disk. Closing a file persists nothing. A file created through
the mount has, until its name reaches the disk, an unnamed backing file (O_TMPFILE in the backing
directory) that is linked in when the name does; a file whose disk name is removed keeps its
descriptor, so it stays readable while open.

Names. Every namespace change (create, mkdir, unlink, rmdir, rename) is applied to the live tree at
once and appended to a journal. An entry touches the directories whose entries it changes (both of
a rename's) and any directory it creates, removes, moves or replaces. fsyncdir of directory D
commits every journal entry touching D, and with them every earlier entry touching a directory one
of them touches (transitively), in journal order. Each committed entry therefore finds its
directories on the disk as they were when it ran live: the disk is always the result of running a
subset of the program's namespace changes in their order, never a mix no program could have made.
What follows:

* a file created and fsynced is lost unless its directory is fsynced too; once the directory is, the
  name holds whatever data the file had fsynced (before or after).
* an unsynced rename, unlink or rmdir comes back undone; fsync of either directory of a rename
  commits it whole (atomic, as a journaling file system's rename).
* fsync of a directory also commits its own creation or move (as ext4 does; POSIX asks the parent's
  fsync for that), and any earlier change in a directory that this one depends on (a `mkdir -p`
  chain is committed by fsync of its deepest directory).
* fsync of a file commits no name, not even its own.

Power loss (`power_loss`): optionally a random prefix of the journal is committed first (namespace
"prefix": the file system wrote back some metadata on its own), then each file named on the disk
gets the part of its unsynced ops that `crash_ops` picks for the mode, then all memory is dropped
and the tree is read again from the disk, as after a reboot, with new inode numbers.

Not modelled: hard links, symlinks and special files (refused; ones in the backing directory are
not shown); permissions, owners and times are kept in memory and not persisted (the backing file's
own are shown after a power loss); xattrs; fallocate (EOPNOTSUPP through FUSE).
"""

from __future__ import annotations

import errno
import os
import random
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from .overlay import Mode, Overlay, Write

ROOT_INO = 1
Namespace = Literal["revert", "prefix"]


def _error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Node:
    """An inode: its metadata, its live place and its durable place."""

    def __init__(self, ino: int, st_mode: int, uid: int, gid: int) -> None:
        self.ino = ino
        self.mode = st_mode
        self.uid = uid
        self.gid = gid
        self.atime_ns = self.mtime_ns = self.ctime_ns = time.time_ns()
        self.parent: Dir | None = None  # live
        self.durable_parent: Dir | None = None
        self.durable_name = b""
        self.lookups = 0  # the kernel's lookup count
        self.opens = 0

    def touch(self) -> None:
        self.mtime_ns = self.ctime_ns = time.time_ns()


class Dir(Node):
    def __init__(self, ino: int, st_mode: int, uid: int, gid: int) -> None:
        super().__init__(ino, st_mode, uid, gid)
        self.children: dict[bytes, Node] = {}  # live
        self.durable: dict[bytes, Node] = {}  # the disk's


class File(Node):
    def __init__(self, ino: int, st_mode: int, uid: int, gid: int, fd: int, size: int) -> None:
        super().__init__(ino, st_mode, uid, gid)
        self.fd = fd  # the backing file, opened on first need (-1 until then)
        self.overlay = Overlay(size)


@dataclass(eq=False)
class Change:
    """A journal entry: `node` leaves `src`/`src_name` (None: created) for `dst`/`dst_name` (None:
    removed), replacing `replaced` there."""

    node: Node
    src: Dir | None
    src_name: bytes
    dst: Dir | None
    dst_name: bytes
    replaced: Node | None = None
    touches: set[Node] = field(init=False)  # see the module docstring

    def __post_init__(self) -> None:
        self.touches = {d for d in (self.src, self.dst) if d is not None}
        self.touches |= {n for n in (self.node, self.replaced) if isinstance(n, Dir)}


@dataclass
class Counters:
    fsyncs: int = 0
    fdatasyncs: int = 0
    fsyncdirs: int = 0
    writes: int = 0
    sync_writes: int = 0  # through an O_DSYNC or O_SYNC descriptor
    written_bytes: int = 0
    synced_bytes: int = 0
    committed_changes: int = 0
    power_losses: int = 0


class VolatileFS:
    """The live tree over the disk (`backing`), its journal and its files' overlays."""

    def __init__(self, backing: str | os.PathLike[str], seed: int = 0) -> None:
        self.backing = os.fsencode(os.path.abspath(backing))
        self.rng = random.Random(seed)
        self.counters = Counters()
        self._next_ino = ROOT_INO + 1
        self.nodes: dict[int, Node] = {}
        self.journal: list[Change] = []
        self.dirty: set[File] = set()
        self.root = self._load()

    # --- the disk ---

    def _load(self) -> Dir:
        """Read the tree from the disk, every node new (the root keeps its inode number)."""
        self.nodes, self.journal, self.dirty = {}, [], set()
        st = os.stat(self.backing)
        root = Dir(ROOT_INO, st.st_mode, st.st_uid, st.st_gid)
        self.nodes[ROOT_INO] = root
        pending = [(root, self.backing)]
        while pending:
            parent, path = pending.pop()
            for entry in os.scandir(path):
                st = entry.stat(follow_symlinks=False)
                node: Node
                if stat.S_ISDIR(st.st_mode):
                    node = Dir(self._ino(), st.st_mode, st.st_uid, st.st_gid)
                    pending.append((node, entry.path))
                elif stat.S_ISREG(st.st_mode):
                    node = File(self._ino(), st.st_mode, st.st_uid, st.st_gid, -1, st.st_size)
                else:
                    continue
                node.mtime_ns, node.ctime_ns = st.st_mtime_ns, st.st_ctime_ns
                name = os.fsencode(entry.name)
                parent.children[name] = parent.durable[name] = node
                node.parent = node.durable_parent = parent
                node.durable_name = name
                self.nodes[node.ino] = node
        return root

    def _ino(self) -> int:
        self._next_ino += 1
        return self._next_ino - 1

    def durable_path(self, node: Node) -> bytes:
        names: list[bytes] = []
        while node is not self.root:
            if node.durable_parent is None:
                raise AssertionError(f"inode {node.ino} has no name on the disk")
            names.append(node.durable_name)
            node = node.durable_parent
        return os.path.join(self.backing, *reversed(names))

    def _fd(self, node: File) -> int:
        if node.fd < 0:
            node.fd = os.open(self.durable_path(node), os.O_RDWR | os.O_CLOEXEC)
        return node.fd

    def _commit(self, change: Change) -> None:
        """Run one journal entry on the disk and its mirror."""
        node, src, dst = change.node, change.src, change.dst
        if src is not None and src.durable.get(change.src_name) is not node:
            raise AssertionError(f"journal out of step: {change}")
        if dst is not None and dst.durable.get(change.dst_name) is not change.replaced:
            raise AssertionError(f"journal out of step: {change}")
        for gone in (change.replaced, node if dst is None else None):
            if isinstance(gone, File) and gone.ino in self.nodes:
                self._fd(gone)  # the kernel may still read it: keep its bytes reachable
        if src is None:
            assert dst is not None
            parent = self.durable_path(dst)
            if isinstance(node, Dir):
                os.mkdir(os.path.join(parent, change.dst_name), stat.S_IMODE(node.mode))
            else:
                assert isinstance(node, File)
                dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.link(f"/proc/self/fd/{node.fd}", change.dst_name, dst_dir_fd=dir_fd,
                            follow_symlinks=True)
                finally:
                    os.close(dir_fd)
        elif dst is None:
            path = self.durable_path(node)
            (os.rmdir if isinstance(node, Dir) else os.unlink)(path)
        else:
            os.rename(self.durable_path(node), os.path.join(self.durable_path(dst), change.dst_name))
        if src is not None:
            del src.durable[change.src_name]
        if change.replaced is not None:
            change.replaced.durable_parent = None
        node.durable_parent, node.durable_name = dst, change.dst_name
        if dst is not None:
            dst.durable[change.dst_name] = node
        self.counters.committed_changes += 1

    def _commit_closure(self, seeds: set[Node]) -> None:
        """Commit every journal entry touching `seeds`, with the earlier ones they depend on."""
        touched = set(seeds)
        chosen: set[int] = set()
        for i in range(len(self.journal) - 1, -1, -1):
            if self.journal[i].touches & touched:
                chosen.add(i)
                touched |= self.journal[i].touches
        committed = [c for i, c in enumerate(self.journal) if i in chosen]
        self.journal = [c for i, c in enumerate(self.journal) if i not in chosen]
        for change in committed:
            self._commit(change)
        for change in committed:
            for node in (change.node, change.replaced):
                if node is not None:
                    self._reap(node)

    # --- the live tree ---

    def node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise _error(errno.ESTALE)  # forgotten, or from before a power loss
        return node

    def dir(self, ino: int) -> Dir:
        node = self.node(ino)
        if not isinstance(node, Dir):
            raise _error(errno.ENOTDIR)
        return node

    def file(self, ino: int) -> File:
        node = self.node(ino)
        if not isinstance(node, File):
            raise _error(errno.EISDIR if isinstance(node, Dir) else errno.EINVAL)
        return node

    def lookup(self, parent: Dir, name: bytes) -> Node:
        if name == b".":
            node: Node | None = parent
        elif name == b"..":
            node = parent.parent or self.root
        else:
            node = parent.children.get(name)
        if node is None:
            raise _error(errno.ENOENT)
        return node

    def remember(self, node: Node) -> None:
        """The kernel got `node` (a lookup, create, mkdir or readdir entry)."""
        node.lookups += 1
        self.nodes[node.ino] = node

    def forget(self, ino: int, count: int) -> None:
        node = self.nodes.get(ino)
        if node is not None and node is not self.root:
            node.lookups = max(0, node.lookups - count)
            self._reap(node)

    def _reap(self, node: Node) -> None:
        """Drop a node nothing reaches any more: no live name, no kernel reference, and (for its
        descriptor) no disk name or journal entry."""
        if node is self.root or node.parent is not None or node.lookups or node.opens:
            return
        self.nodes.pop(node.ino, None)
        if not isinstance(node, File) or node.durable_parent is not None:
            return
        if any(node is c.node or node is c.replaced for c in self.journal):
            return
        self.dirty.discard(node)
        if node.fd >= 0:
            os.close(node.fd)
            node.fd = -1

    def _new_name(self, parent: Dir, name: bytes) -> None:
        if parent.parent is None and parent is not self.root:
            raise _error(errno.ENOENT)  # removed directory
        if name in parent.children:
            raise _error(errno.EEXIST)

    def _add(self, parent: Dir, name: bytes, node: Node) -> None:
        parent.children[name] = node
        node.parent = parent
        parent.touch()
        self.journal.append(Change(node, None, b"", parent, name))

    def create(self, parent: Dir, name: bytes, mode: int, uid: int, gid: int) -> File:
        self._new_name(parent, name)
        fd = os.open(self.backing, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, stat.S_IMODE(mode))
        node = File(self._ino(), stat.S_IFREG | stat.S_IMODE(mode), uid, gid, fd, 0)
        self._add(parent, name, node)
        return node

    def mkdir(self, parent: Dir, name: bytes, mode: int, uid: int, gid: int) -> Dir:
        self._new_name(parent, name)
        node = Dir(self._ino(), stat.S_IFDIR | stat.S_IMODE(mode), uid, gid)
        self._add(parent, name, node)
        return node

    def unlink(self, parent: Dir, name: bytes, want_dir: bool) -> None:
        node = self.lookup(parent, name)
        if want_dir != isinstance(node, Dir):
            raise _error(errno.ENOTDIR if want_dir else errno.EISDIR)
        if isinstance(node, Dir) and node.children:
            raise _error(errno.ENOTEMPTY)
        del parent.children[name]
        node.parent = None
        parent.touch()
        self.journal.append(Change(node, parent, name, None, b""))
        self._reap(node)

    def rename(self, src: Dir, src_name: bytes, dst: Dir, dst_name: bytes, noreplace: bool) -> None:
        node = self.lookup(src, src_name)
        replaced = dst.children.get(dst_name)
        if replaced is node:
            return
        if replaced is not None:
            if noreplace:
                raise _error(errno.EEXIST)
            if isinstance(node, Dir) != isinstance(replaced, Dir):
                raise _error(errno.EISDIR if isinstance(replaced, Dir) else errno.ENOTDIR)
            if isinstance(replaced, Dir) and replaced.children:
                raise _error(errno.ENOTEMPTY)
        up: Dir | None = dst
        while up is not None:
            if up is node:
                raise _error(errno.EINVAL)  # into its own subtree
            up = up.parent
        del src.children[src_name]
        dst.children[dst_name] = node
        node.parent = dst
        if replaced is not None:
            replaced.parent = None
        src.touch()
        dst.touch()
        self.journal.append(Change(node, src, src_name, dst, dst_name, replaced))
        if replaced is not None:
            self._reap(replaced)

    # --- data ---

    def read(self, node: File, offset: int, size: int) -> bytes:
        return node.overlay.read(self._fd(node), offset, size)

    def write(self, node: File, offset: int, data: bytes, durable: bool = False) -> int:
        """`durable`: through an O_DSYNC or O_SYNC descriptor (see Overlay.write_durable)."""
        self.counters.writes += 1
        self.counters.written_bytes += len(data)
        node.touch()
        if durable:
            self.counters.sync_writes += 1
            if node.overlay.write_durable(self._fd(node), offset, data):
                self.counters.synced_bytes += len(data)
                if not node.overlay.dirty:
                    self.dirty.discard(node)
                return len(data)
        node.overlay.write(self._fd(node), offset, data)
        self.dirty.add(node)
        if durable:
            self.fsync(node, datasync=True)
        return len(data)

    def truncate(self, node: File, size: int) -> None:
        node.overlay.truncate(size)
        node.touch()
        self.dirty.add(node)

    def fsync(self, node: File, datasync: bool) -> None:
        if datasync:
            self.counters.fdatasyncs += 1
        else:
            self.counters.fsyncs += 1
        if node.overlay.dirty:
            self.counters.synced_bytes += node.overlay.sync(self._fd(node))
        self.dirty.discard(node)

    def fsyncdir(self, node: Dir) -> None:
        self.counters.fsyncdirs += 1
        self._commit_closure({node})

    def opened(self, node: File) -> None:
        node.opens += 1

    def released(self, node: File) -> None:
        node.opens -= 1
        self._reap(node)

    # --- control ---

    def sync_all(self) -> None:
        """Make everything durable, as sync(1) would."""
        for change in self.journal:
            self._commit(change)
        self.journal = []
        for node in list(self.dirty):
            node.overlay.sync(self._fd(node))
        self.dirty.clear()

    def power_loss(self, mode: Mode = "drop", seed: int | None = None, block: int = 0,
                   namespace: Namespace = "revert") -> dict[str, Any]:
        """Lose the memory as a power cut would (see the module docstring); returns what happened."""
        if seed is None:
            seed = self.rng.randrange(2**32)
        rng = random.Random(seed)
        kept = rng.randint(0, len(self.journal)) if namespace == "prefix" else 0
        for change in self.journal[:kept]:
            self._commit(change)
        reverted = len(self.journal) - kept
        files: dict[str, dict[str, int]] = {}
        for path, node in self._durable_files():
            if node.overlay.dirty:
                unsynced = len(node.overlay.ops)
                survived = node.overlay.crash(self._fd(node), mode, rng, block)
                files[path] = {"unsynced_ops": unsynced, "applied_ops": len(survived),
                               "applied_bytes": sum(len(o.data) for o in survived if isinstance(o, Write))}
        self.close()
        self.root = self._load()
        self.counters.power_losses += 1
        return {"mode": mode, "seed": seed, "block": block, "namespace": namespace,
                "namespace_committed": kept, "namespace_reverted": reverted, "files": files}

    def _durable_files(self) -> list[tuple[str, File]]:
        out: list[tuple[str, File]] = []
        pending: list[tuple[str, Dir]] = [("", self.root)]
        while pending:
            prefix, d = pending.pop()
            for name, node in d.durable.items():
                path = prefix + "/" + os.fsdecode(name)
                if isinstance(node, Dir):
                    pending.append((path, node))
                elif isinstance(node, File):
                    out.append((path, node))
        return sorted(out, key=lambda item: item[0])

    def stats(self) -> dict[str, int]:
        out = dict(vars(self.counters))
        out["pending_bytes"] = sum(n.overlay.pending_bytes for n in self.dirty)
        out["pending_files"] = len(self.dirty)
        out["pending_changes"] = len(self.journal)
        return out

    def close(self) -> None:
        """Close every backing descriptor (the memory is then useless: `_load` again)."""
        seen: set[int] = set()
        pending: list[Node] = [*self.nodes.values(), *self.dirty]
        for change in self.journal:
            pending += [n for n in (change.node, change.replaced) if n is not None]
        pending += [n for _, n in self._durable_files()]
        for node in pending:
            if isinstance(node, File) and node.fd >= 0 and id(node) not in seen:
                seen.add(id(node))
                os.close(node.fd)
                node.fd = -1
