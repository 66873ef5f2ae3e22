"""Direct commits without the GIL: store.direct_io with fsync = "always", when the C extension
(_commitengine.c) is built.

The loop copies each append into the engine's open group itself (`Engine.add`, which also folds it into the
group's CRC while it is in cache), and the engine's native thread takes the open group whenever the disk is
free, seals it and writes it with one O_DIRECT|O_DSYNC pwrite; completions come back through an eventfd
that the loop reads. So the disk goes from one group to the next without waiting for the loop, and a group
is what arrived while the one before it was written. On disk it is what the writer thread writes, cut into
other groups (the tests hold the two to the same events and checks): groups one after another, each
durable before the next is written. Why a native thread: through the writer thread the loop and the disk
took turns (0.16-0.27 ms per MiB), and in Python any overlap only alternated as fast as the GIL passed.

The engine writes only into a chunk's written blocks (a recycled or pre-written chunk) and never rolls:
a commit that would pass the chunk's end, or that finds the writer thread busy, goes to the writer
thread, after every commit in the engine is durable (commits are stored in the order they came).
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Callable

from logport.store.appends import Buffer, CommitGroup
from logport.store.chunkwriter import ChunkWriter, append_record
from logport.store.groups import COMMIT_SIZE, ChunkLayout

try:
    from logport.store import _commitengine
except ImportError:  # built without a C compiler: direct commits go through the writer thread
    _commitengine = None  # type: ignore[assignment]
Engine = _commitengine.Engine if _commitengine is not None else None

BUFFER_BYTES = 4 << 20  # each of an engine's two buffers: a group is at most this (the rest waits for the next)

_NEVER = 1 << 63  # the group number of an append that was never placed: only a failure answers it

Written = Callable[[list[CommitGroup], list[int], int, ChunkLayout], None]
Failed = Callable[[list[CommitGroup], BaseException], None]


def available() -> bool:
    return Engine is not None


class _Entry:
    __slots__ = ("group", "offsets", "last_seq")

    def __init__(self, group: CommitGroup, offsets: list[int], last_seq: int) -> None:
        self.group = group
        self.offsets = offsets  # of its accepted appends' first frames
        self.last_seq = last_seq  # durable once the engine's group of this number is


class EngineLine:
    """A segment's commits through the engine, on the event loop. `take` hands it a checked group (False:
    the writer thread's, now); the engine's completions answer them through `written`, in order, and a
    failed write fails every group not yet durable through `failed`. Groups that must go to the writer
    thread while commits are in the engine wait in `held` and are handed to `stage` once they are all
    durable."""

    def __init__(self, writer: ChunkWriter, loop: asyncio.AbstractEventLoop, written: Written, failed: Failed,
                 stage: Callable[[CommitGroup], None], on_fsync: Callable[[float], None] | None) -> None:
        assert Engine is not None
        self._writer = writer
        self._loop = loop
        self._written = written
        self._failed = failed
        self._stage = stage
        self._on_fsync = on_fsync
        self._engine: _commitengine.Engine | None = None  # made on the first commit it takes: a thread, 2 buffers
        self._running = False  # started at the chunk writer's position, which is the engine's until drained
        self._limit = 0  # while running: no group ends past this segment offset
        self._seq = 0  # the number of the last group an add went into
        self._inflight: collections.deque[_Entry] = collections.deque()
        self.held: list[CommitGroup] = []
        self.groups_written = 0

    @property
    def busy(self) -> bool:
        return bool(self._inflight)

    def take(self, group: CommitGroup, writer_busy: bool) -> bool:
        """Add the group's appends to the engine, if it can take them all; False: stage it (now)."""
        if self.held:
            self.held.append(group)
            return True
        if not group.accepted:  # retries only: answered with the commits they repeat
            if not self._inflight:
                return False
            self._inflight.append(_Entry(group, [], self._seq))
            return True
        parts: list[list[Buffer]] = []
        sizes: list[int] = []
        starts: list[int] = []
        total = 0
        for p in group.accepted:
            record = append_record(p)
            parts.append([record, *p.parts] if record else p.parts)
            starts.append(len(record))
            sizes.append(len(record) + p.size)
            total += len(record) + p.size
        # each append in a group of its own, at worst: its COMMIT frame and the pages on either side
        fits = (not writer_busy and max(sizes) + COMMIT_SIZE + 2 * 4096 <= BUFFER_BYTES and self._start()
                and self._engine is not None and self._engine.end + total + COMMIT_SIZE * len(sizes) <= self._limit)
        if not fits:
            if self._inflight:
                self.held.append(group)
                return True
            self._stop()
            return False
        # each append is answered once its own engine group is durable, not with the last of the batch's
        accepted = set(map(id, group.accepted))
        rest = CommitGroup([p for p in group.batch if id(p) not in accepted], [], group.retries)
        assert self._engine is not None
        for p, append_parts, size, start in zip(group.accepted, parts, sizes, starts, strict=True):
            one = CommitGroup([p], [p], [], {p.writer.key: p.writer.end} if p.writer is not None else {})
            added = self._engine.add(append_parts, size)
            if added is None:  # the engine failed meanwhile: this append fails with the ones in it
                self._inflight.append(_Entry(one, [], _NEVER))
                continue
            self._seq, at = added
            self._inflight.append(_Entry(one, [at + start], self._seq))
        if rest.batch:
            self._inflight.append(_Entry(rest, [], self._seq))
        return True

    def _start(self) -> bool:
        """Put the engine to work at the chunk writer's position, if the active chunk takes direct writes."""
        if self._running:
            return True
        position = self._writer.engine_position()
        if position is None:
            return False
        if self._engine is None:
            assert Engine is not None
            self._engine = Engine(BUFFER_BYTES)
            self._loop.add_reader(self._engine.eventfd, self._completed)
        fd, base, end, prev, head, limit = position
        self._engine.start(fd, base, end, prev, head, limit)
        self._limit = limit
        self._running = True
        return True

    def _stop(self) -> None:
        """The engine is idle: its position goes back to the chunk writer."""
        if self._running:
            assert self._engine is not None
            busy, end, prev, head = self._engine.state()
            assert not busy
            self._writer.engine_stopped(end, prev, head)
            self._running = False

    def _completed(self) -> None:
        """The eventfd: groups written (answered in order), or a write that failed."""
        assert self._engine is not None
        done, failure = self._engine.completed()
        layout = self._writer.layout
        self.groups_written += len(done)
        for seq, start, end, seconds in done:
            layout.groups.append(start)
            layout.end = end
            if self._on_fsync is not None:
                self._on_fsync(seconds)
            answered: list[CommitGroup] = []
            offsets: list[int] = []
            while self._inflight and self._inflight[0].last_seq <= seq:
                entry = self._inflight.popleft()
                answered.append(entry.group)
                offsets += entry.offsets
            if answered:
                self._written(answered, offsets, end, layout)
        if failure is not None:
            code, _, start, prev = failure
            groups = [entry.group for entry in self._inflight] + self.held
            self._inflight.clear()
            self.held = []
            self._writer.engine_failed(start, prev)
            self._running = False
            self._failed(groups, OSError(code, f"direct commit: {os.strerror(code)}"))
            return
        if not self._inflight and self._running:
            self._stop()
            held, self.held = self.held, []
            for group in held:
                self._stage(group)

    def close(self) -> None:
        """Once nothing is in the engine (the segment's appends are all answered)."""
        self._stop()
        if self._engine is not None:
            self._loop.remove_reader(self._engine.eventfd)
            self._engine.close()
            self._engine = None


__all__ = ["BUFFER_BYTES", "EngineLine", "available"]
