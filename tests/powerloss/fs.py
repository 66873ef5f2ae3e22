"""The lazy file system's process: the FUSE mount of a `VolatileFS` and its control socket.

Run by `LazyFS` (lazyfs.py) as `python fs.py --backing DIR --mount DIR --control SOCKET`. It serves
FUSE requests and the control socket in one trio loop, so a request and a control command never
interleave. Every open file is direct_io (no page cache in the kernel: each read and write reaches
the model) and every entry and attribute has a timeout of 0 (the kernel asks again each time, so a
power loss that changes the tree is seen at once). It unmounts and exits on the control command
"shutdown", SIGTERM or SIGINT, or when its parent process dies.

Control protocol: one JSON object per line in, one per line out, on a unix socket:
{"op": "ping" | "stats" | "sync" | "shutdown"} or {"op": "power_loss", "mode": ..., "seed": ...,
"block": ..., "namespace": ...}; the answer is {"ok": true, "result": ...} or {"ok": false, "error":
"..."}.
"""

from __future__ import annotations

import argparse
import errno
import functools
import json
import logging
import os
import resource
import signal
import stat
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import pyfuse3
import trio

if __package__:
    from .model import Dir, File, Node, VolatileFS
else:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tests.powerloss.model import Dir, File, Node, VolatileFS

log = logging.getLogger("lazyfs")

P = ParamSpec("P")
T = TypeVar("T")
Ops = TypeVar("Ops", bound="LazyOperations")


def _fuse_errors(
    fn: Callable[Concatenate[Ops, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Ops, P], Coroutine[Any, Any, T]]:
    """OSError -> its errno for the caller; anything else is a bug: logged, EIO (pyfuse3 would stop)."""

    @functools.wraps(fn)
    async def wrapper(self: Ops, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(self, *args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        except Exception:
            log.exception("%s failed", fn.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


class LazyOperations(pyfuse3.Operations):
    """FUSE requests, translated to `VolatileFS` calls."""

    def __init__(self, fs: VolatileFS) -> None:
        super().__init__()
        self.fs = fs
        self._next_fh = 1
        self._files: dict[int, File] = {}
        self._sync_writes: set[int] = set()  # handles opened O_DSYNC or O_SYNC: each write is durable when done
        self._dirs: dict[int, tuple[Dir, list[tuple[bytes, Node]]]] = {}

    def power_loss(self, **kwargs: Any) -> dict[str, Any]:
        self._files.clear()  # descriptors from before the power loss now fail (EIO)
        self._sync_writes.clear()
        self._dirs.clear()
        return self.fs.power_loss(**kwargs)

    def _fh(self) -> int:
        self._next_fh += 1
        return self._next_fh - 1

    def _file(self, fh: int) -> File:
        node = self._files.get(fh)
        if node is None:
            raise pyfuse3.FUSEError(errno.EIO)
        return node

    def _attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        a.entry_timeout = 0
        a.attr_timeout = 0
        a.st_mode = node.mode
        a.st_nlink = (2 if isinstance(node, Dir) else 1) if node.parent or node is self.fs.root else 0
        a.st_uid, a.st_gid = node.uid, node.gid
        a.st_rdev = 0
        a.st_size = node.overlay.size if isinstance(node, File) else 4096
        a.st_blksize = 4096
        a.st_blocks = (a.st_size + 511) // 512
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = node.atime_ns, node.mtime_ns, node.ctime_ns
        return a

    def _entry(self, node: Node) -> pyfuse3.EntryAttributes:
        self.fs.remember(node)
        return self._attrs(node)

    @_fuse_errors
    async def lookup(self, parent_inode: int, name: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        return self._entry(self.fs.lookup(self.fs.dir(parent_inode), name))

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, count in inode_list:
            try:
                self.fs.forget(ino, count)
            except Exception:
                log.exception("forget failed")

    @_fuse_errors
    async def getattr(self, inode: int, ctx: Any) -> pyfuse3.EntryAttributes:
        return self._attrs(self.fs.node(inode))

    @_fuse_errors
    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields,
                      fh: int | None, ctx: Any) -> pyfuse3.EntryAttributes:
        node = self.fs.node(inode)
        if fields.update_size:
            if not isinstance(node, File):
                raise pyfuse3.FUSEError(errno.EISDIR)
            self.fs.truncate(node, attr.st_size)
        if fields.update_mode:
            node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(attr.st_mode)
        if fields.update_uid:
            node.uid = attr.st_uid
        if fields.update_gid:
            node.gid = attr.st_gid
        if fields.update_atime:
            node.atime_ns = attr.st_atime_ns
        if fields.update_mtime:
            node.mtime_ns = attr.st_mtime_ns
        return self._attrs(node)

    @_fuse_errors
    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int,
                    ctx: Any) -> pyfuse3.EntryAttributes:
        if not stat.S_ISREG(mode):
            raise pyfuse3.FUSEError(errno.EPERM)  # no special files
        return self._entry(self.fs.create(self.fs.dir(parent_inode), name, mode, ctx.uid, ctx.gid))

    @_fuse_errors
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: Any) -> pyfuse3.EntryAttributes:
        return self._entry(self.fs.mkdir(self.fs.dir(parent_inode), name, mode, ctx.uid, ctx.gid))

    @_fuse_errors
    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        self.fs.unlink(self.fs.dir(parent_inode), name, want_dir=False)

    @_fuse_errors
    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        self.fs.unlink(self.fs.dir(parent_inode), name, want_dir=True)

    @_fuse_errors
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int,
                     name_new: bytes, flags: int, ctx: Any) -> None:
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)
        self.fs.rename(self.fs.dir(parent_inode_old), name_old, self.fs.dir(parent_inode_new),
                       name_new, noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE))

    @_fuse_errors
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes,
                   ctx: Any) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    @_fuse_errors
    async def symlink(self, parent_inode: int, name: bytes, target: bytes,
                      ctx: Any) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    def _open(self, node: File, flags: int) -> pyfuse3.FileInfo:
        fh = self._fh()
        self._files[fh] = node
        if flags & (os.O_DSYNC | os.O_SYNC):
            # POSIX: a write through it returns when the data is durable. The kernel leaves that to the file
            # system here: with direct_io (FOPEN_DIRECT_IO) it sends no FSYNC after such a write
            self._sync_writes.add(fh)
        self.fs.opened(node)
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)

    @_fuse_errors
    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        node = self.fs.file(inode)
        if flags & os.O_TRUNC and node.overlay.size:  # libfuse asks for atomic O_TRUNC
            self.fs.truncate(node, 0)
        return self._open(node, flags)

    @_fuse_errors
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: Any) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        node = self.fs.create(self.fs.dir(parent_inode), name, mode, ctx.uid, ctx.gid)
        return self._open(node, flags), self._entry(node)

    @_fuse_errors
    async def read(self, fh: int, off: int, size: int) -> bytes:
        return self.fs.read(self._file(fh), off, size)

    @_fuse_errors
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return self.fs.write(self._file(fh), off, bytes(buf), durable=fh in self._sync_writes)

    async def flush(self, fh: int) -> None:
        pass  # close(2) persists nothing

    @_fuse_errors
    async def release(self, fh: int) -> None:
        node = self._files.pop(fh, None)
        self._sync_writes.discard(fh)
        if node is not None:
            self.fs.released(node)

    @_fuse_errors
    async def fsync(self, fh: int, datasync: bool) -> None:
        self.fs.fsync(self._file(fh), datasync)

    @_fuse_errors
    async def opendir(self, inode: int, ctx: Any) -> int:
        node = self.fs.dir(inode)
        fh = self._fh()
        self._dirs[fh] = (node, [])
        return fh

    @_fuse_errors
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        handle = self._dirs.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EIO)
        node, entries = handle
        if start_id == 0:
            entries = sorted(node.children.items())
            self._dirs[fh] = (node, entries)
        for i in range(start_id, len(entries)):
            name, child = entries[i]
            if child.parent is not node:
                continue  # gone since the listing started
            if not pyfuse3.readdir_reply(token, name, self._attrs(child), i + 1):
                break
            self.fs.remember(child)

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    @_fuse_errors
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        handle = self._dirs.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EIO)
        self.fs.fsyncdir(handle[0])

    @_fuse_errors
    async def statfs(self, ctx: Any) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.fs.backing)
        out = pyfuse3.StatvfsData()
        out.f_bsize, out.f_frsize = st.f_bsize, st.f_frsize
        out.f_blocks, out.f_bfree, out.f_bavail = st.f_blocks, st.f_bfree, st.f_bavail
        out.f_files, out.f_ffree, out.f_favail = st.f_files, st.f_ffree, st.f_favail
        out.f_namemax = st.f_namemax
        return out


# --- the control socket ---

def _command(ops: LazyOperations, request: dict[str, Any]) -> Any:
    op = request.pop("op", None)
    if op == "ping":
        return "pong"
    if op == "stats":
        return ops.fs.stats()
    if op == "sync":
        ops.fs.sync_all()
        return None
    if op == "power_loss":
        return ops.power_loss(**request)
    if op == "shutdown":
        pyfuse3.terminate()
        return None
    raise ValueError(f"unknown command {op!r}")


async def _serve_client(ops: LazyOperations, stream: trio.SocketStream) -> None:
    async with stream:
        buf = b""
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    reply = {"ok": True, "result": _command(ops, json.loads(line))}
                except Exception as e:
                    log.exception("control command failed")
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                await stream.send_all(json.dumps(reply).encode() + b"\n")


async def _serve_control(ops: LazyOperations, path: str) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen()
    await trio.serve_listeners(functools.partial(_serve_client, ops), [trio.SocketListener(sock)])


async def _watch(parent: int) -> None:
    """Stop when told to (SIGTERM, SIGINT) or when the process that started this one is gone."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        while os.getppid() == parent:
            with trio.move_on_after(0.5):
                async for _ in signals:
                    pyfuse3.terminate()
                    return
    pyfuse3.terminate()


async def _serve(ops: LazyOperations, control: str, parent: int) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_control, ops, control)
        nursery.start_soon(_watch, parent)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backing", required=True, help="the disk: a directory")
    parser.add_argument("--mount", required=True, help="the mountpoint: an empty directory")
    parser.add_argument("--control", required=True, help="the control socket's path")
    parser.add_argument("--seed", type=int, default=0, help="seeds power losses not given one")
    parser.add_argument("--debug", action="store_true", help="log every FUSE request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, stream=sys.stderr,
                        format="lazyfs %(levelname)s %(message)s")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    parent = os.getppid()
    fs = VolatileFS(args.backing, seed=args.seed)
    ops = LazyOperations(fs)
    options = set(pyfuse3.default_options) | {"fsname=lazyfs", "subtype=lazyfs"}
    if args.debug:
        options.add("debug")
    pyfuse3.init(ops, args.mount, options)
    try:
        trio.run(_serve, ops, args.control, parent)
    finally:
        pyfuse3.close(unmount=True)
        fs.close()


if __name__ == "__main__":
    main()
