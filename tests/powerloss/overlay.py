"""One file's unsynced data: what a page cache holds between a write and the fsync that persists it.

An `Overlay` sits over the file's backing descriptor (its durable bytes) and keeps two views of the
same unsynced changes:

* `ops`, the writes and truncates in the order they were made. `sync` replays them all onto the
  backing file; a power loss replays a chosen part of them (`crash_ops`).
* dirty 4 KiB pages holding the file's current bytes wherever an unsynced write landed, so reads see
  the latest data (as through a page cache) without replaying anything. Bytes of the backing file at
  or past the lowest size the file was truncated to since the last sync read as zeros.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Literal

PAGE = 4096

Mode = Literal["drop", "subset", "torn", "reorder"]
MODES: tuple[Mode, ...] = ("drop", "subset", "torn", "reorder")


@dataclass(frozen=True)
class Write:
    offset: int
    data: bytes


@dataclass(frozen=True)
class Truncate:
    size: int


Op = Write | Truncate


def apply_ops(fd: int, ops: list[Op]) -> None:
    """Replay `ops` in order onto the file `fd`."""
    for op in ops:
        if isinstance(op, Write):
            view = memoryview(op.data)
            at = op.offset
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
        else:
            os.ftruncate(fd, op.size)


def _pieces(op: Op, block: int) -> list[Op]:
    """`op` cut at the file's `block`-aligned offsets (whole when `block` is 0 or it is a truncate)."""
    if block <= 0 or isinstance(op, Truncate):
        return [op]
    out: list[Op] = []
    at, end = op.offset, op.offset + len(op.data)
    while at < end:
        stop = min(end, (at // block + 1) * block)
        out.append(Write(at, op.data[at - op.offset:stop - op.offset]))
        at = stop
    return out


def crash_ops(ops: list[Op], mode: Mode, rng: random.Random, block: int = 0) -> list[Op]:
    """The part of the unsynced `ops` that reached the disk before the power went, in apply order.

    drop: none. subset: each op (each `block`-aligned piece of a write, with `block` > 0) kept or not
    at random. torn: the ops in order up to a random byte of the written stream, the op there cut at
    that byte. reorder: torn, plus a random byte range of one write past the cut, landed out of order.
    """
    if mode == "drop" or not ops:
        return []
    if mode == "subset":
        return [p for op in ops for p in _pieces(op, block) if rng.random() < 0.5]
    if mode not in ("torn", "reorder"):
        raise ValueError(f"unknown power-loss mode {mode!r}")
    sizes = [len(op.data) if isinstance(op, Write) else 1 for op in ops]
    left = rng.randint(0, sum(sizes))
    out: list[Op] = []
    rest: list[Op] = []
    for i, (op, size) in enumerate(zip(ops, sizes, strict=True)):
        if left >= size:
            out.append(op)
            left -= size
            continue
        if isinstance(op, Write) and left > 0:
            out.append(Write(op.offset, op.data[:left]))
        rest = ops[i + 1:] if left > 0 else ops[i:]
        break
    later = [op for op in rest if isinstance(op, Write) and op.data]
    if mode == "reorder" and later:
        w = rng.choice(later)
        a = rng.randrange(len(w.data))
        b = rng.randint(a + 1, len(w.data))
        out.append(Write(w.offset + a, w.data[a:b]))
    return out


class Overlay:
    """Unsynced writes and truncates of one file over its backing descriptor."""

    def __init__(self, synced_size: int) -> None:
        self.synced_size = synced_size  # the backing file's size
        self.size = synced_size  # the size reads see
        self.ops: list[Op] = []
        self.pending_bytes = 0  # bytes written since the last sync
        self._low = synced_size  # backing bytes at and past this offset were truncated away
        self._pages: dict[int, bytearray] = {}  # page index -> the page's current bytes

    @property
    def dirty(self) -> bool:
        return bool(self.ops)

    def _backing(self, fd: int, start: int, stop: int) -> bytes:
        """The bytes [start, stop) as the backing file gives them, zeros past the truncated size."""
        if stop <= start:
            return b""
        top = min(stop, self._low)
        got = os.pread(fd, top - start, start) if start < top else b""
        return got + bytes(stop - start - len(got))

    def read(self, fd: int, offset: int, n: int) -> bytes:
        end = min(offset + n, self.size)
        if not self._pages:
            return self._backing(fd, offset, end)
        parts: list[bytes] = []
        at = offset
        while at < end:
            index = at // PAGE
            page = self._pages.get(index)
            stop = min(end, (index + 1) * PAGE)
            if page is not None:
                parts.append(bytes(page[at - index * PAGE:stop - index * PAGE]))
            else:
                while stop < end and stop // PAGE not in self._pages:
                    stop = min(end, stop + PAGE)
                parts.append(self._backing(fd, at, stop))
            at = stop
        return b"".join(parts)

    def write(self, fd: int, offset: int, data: bytes) -> None:
        self.ops.append(Write(offset, data))
        self.pending_bytes += len(data)
        self._put_pages(fd, offset, data)

    def write_durable(self, fd: int, offset: int, data: bytes) -> bool:
        """A write through an O_DSYNC (or O_SYNC) descriptor: durable when it returns, and only it. It goes
        to the backing file at once, and the unsynced writes made before it lose the bytes it covers (a
        power loss that keeps some of them must not put older bytes over it); the file's other unsynced
        writes stay unsynced. False, having done nothing, when it would change the file's size or a
        truncate is pending (the caller then writes and syncs the whole file: more durable than needed,
        which no store write here relies on)."""
        end = offset + len(data)
        if end > self.synced_size or any(isinstance(op, Truncate) for op in self.ops):
            return False
        kept: list[Op] = []
        for op in self.ops:
            assert isinstance(op, Write)
            stop = op.offset + len(op.data)
            if stop <= offset or op.offset >= end:
                kept.append(op)
                continue
            if op.offset < offset:
                kept.append(Write(op.offset, op.data[: offset - op.offset]))
            if stop > end:
                kept.append(Write(end, op.data[end - op.offset :]))
        self.ops = kept
        self.pending_bytes = sum(len(op.data) for op in kept if isinstance(op, Write))
        apply_ops(fd, [Write(offset, data)])
        self._put_pages(fd, offset, data)
        return True

    def _put_pages(self, fd: int, offset: int, data: bytes) -> None:
        """Reads see `data` at `offset` from now on."""
        end = offset + len(data)
        at = offset
        while at < end:
            index = at // PAGE
            start = index * PAGE
            stop = min(end, start + PAGE)
            page = self._pages.get(index)
            if page is None:
                if at == start and stop == start + PAGE:
                    self._pages[index] = bytearray(data[at - offset:stop - offset])
                    at = stop
                    continue
                page = self._pages[index] = bytearray(
                    self._backing(fd, start, min(start + PAGE, self.size)).ljust(PAGE, b"\0"))
            page[at - start:stop - start] = data[at - offset:stop - offset]
            at = stop
        self.size = max(self.size, end)

    def truncate(self, size: int) -> None:
        self.ops.append(Truncate(size))
        if size < self.size:
            for index in [i for i in self._pages if i * PAGE >= size]:
                del self._pages[index]
            page = self._pages.get(size // PAGE)
            if page is not None:
                cut = size % PAGE
                page[cut:] = bytes(PAGE - cut)
            self._low = min(self._low, size)
        self.size = size

    def sync(self, fd: int) -> int:
        """Persist every unsynced op onto the backing file; returns the bytes written."""
        written = self.pending_bytes
        apply_ops(fd, self.ops)
        self._reset(self.size)
        return written

    def crash(self, fd: int, mode: Mode, rng: random.Random, block: int = 0) -> list[Op]:
        """Apply what survives a power loss in `mode` onto the backing file; returns it."""
        survived = crash_ops(self.ops, mode, rng, block)
        apply_ops(fd, survived)
        self._reset(os.fstat(fd).st_size)
        return survived

    def _reset(self, size: int) -> None:
        self.synced_size = self.size = self._low = size
        self.ops = []
        self.pending_bytes = 0
        self._pages.clear()
