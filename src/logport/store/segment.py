"""One segment: recovery on open, the group-commit writer, tail reads, seal, truncation."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from logport.config import StoreConfig
from logport.errors import (
    OffsetTruncated,
    SegmentSealed,
    StoreClosed,
    StoreError,
    StoreWriteFailed,
    WriterOffsetMismatch,
)
from logport.store import frames
from logport.store.files import (
    ChunkReader,
    SegmentState,
    chunk_path,
    fsync_dir,
    list_chunk_bases,
    start_writeback,
)

log = logging.getLogger("logport.store")
MAX_WRITER_KEY = 1024  # the chunk's writer table stores key lengths as uint16


@dataclass(frozen=True, slots=True)
class WriterCondition:
    """Makes an append exactly-once for one writer (a segment-protocol connection id, a chunk id).

    The store keeps, per `key`, the writer offset its last stored append reached.
    An append that would not move it past `end` is a retry: acknowledged, not
    stored again. With `start` set, an append must continue exactly from the
    stored offset, or it is refused (a gap).
    """

    key: bytes
    end: int
    start: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    offset: int  # offset of the first appended frame (the segment's end, for a duplicate)
    end_offset: int  # the segment's end after the append
    duplicate: bool = False
    writer_offset: int | None = None  # the writer's stored offset after the append


@dataclass(frozen=True, slots=True)
class ReadResult:
    data: bytes
    offset: int
    at_tail: bool
    end_of_segment: bool  # sealed, and nothing more to read

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    name: str
    start_offset: int
    end_offset: int
    sealed: bool
    chunks: int

    @property
    def bytes(self) -> int:
        return self.end_offset - self.start_offset


Buffer = bytes | bytearray | memoryview


class _Pending:
    __slots__ = ("parts", "writer", "future", "size", "multi")

    def __init__(self, parts: list[Buffer], writer: WriterCondition | None, future: asyncio.Future[AppendResult],
                 multi: bool) -> None:
        self.parts = parts  # whole frames, as buffers handed to pwritev without joining them
        self.writer = writer
        self.future = future
        self.size = sum(len(p) for p in parts)
        self.multi = multi  # several frames: needs a record that makes it all-or-nothing


@dataclass(slots=True)
class _Group:
    """Appends taken from the queue together: `accepted` are written as one group commit."""

    batch: list[_Pending]  # everything taken, answered now or with the group
    accepted: list[_Pending] = field(default_factory=list)
    retries: list[_Pending] = field(default_factory=list)  # repeat an append still on its way
    claimed: dict[bytes, int] = field(default_factory=dict)  # writer offsets the group stores


def _resolve(p: _Pending, result: AppendResult) -> None:
    if not p.future.done():  # a cancelled appender's future is done already
        p.future.set_result(result)


def _fail(pendings: Iterable[_Pending], error: Exception) -> None:
    for p in pendings:
        if not p.future.done():
            p.future.set_exception(error)


OnCommit = Callable[[str, int, int], None]  # (segment, appends, bytes)
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024


class Segment:
    def __init__(self, name: str, seg_dir: Path, config: StoreConfig, on_commit: OnCommit | None = None,
                 on_fsync: Callable[[float], None] | None = None) -> None:
        self.name = name
        self.dir = seg_dir
        self.config = config
        self._on_commit = on_commit
        self._on_fsync = on_fsync
        self.state = SegmentState()
        self.reader = ChunkReader(seg_dir) if seg_dir.exists() else None
        # writer offsets as far as written (fsync'd under fsync=always): set by the writer thread, read here
        self.writers: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.end = 0  # readers see [start_offset, end): written, and fsync'd under fsync=always
        self._write_pos = 0  # where the next write goes (== end between commits)
        self._base = 0  # base offset of the active chunk
        self._fd = -1
        self._queue: list[_Pending] = []
        self.pending_bytes = 0  # queued and reserved bytes not yet written
        self._waiters: collections.deque[_Pending] = collections.deque()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._tail = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fsync_task: asyncio.Task[None] | None = None
        self._dirty = False
        self._lock = threading.Lock()  # the staged groups, the two flags below and _fd, shared with threads
        self._staged: list[_Group] = []
        self._writing = False  # a writer-thread job is running
        self._poisoned = False  # a group failed in the writer thread and the loop has not heard yet
        self._ahead: dict[bytes, int] = {}  # writer offsets claimed by groups staged or being written
        self._closing = False
        self._sealing = False

    # --- opening and recovery ---

    def open_sync(self, create: bool) -> None:
        """Recover from disk (cut a torn tail), or create the segment's directory."""
        if create:
            self.dir.mkdir(parents=True, exist_ok=False)
            self.state.save(self.dir)
            self._create_chunk_file(0, {})
            fsync_dir(self.dir.parent)
        self.state = SegmentState.load(self.dir)
        bases = list_chunk_bases(self.dir)
        if not bases:
            self._create_chunk_file(self.state.start_offset, {})
            bases = [self.state.start_offset]
        # chunks wholly below the start offset (a retention pass cut short by a crash)
        while len(bases) > 1 and bases[1] <= self.state.start_offset:
            chunk_path(self.dir, bases.pop(0)).unlink(missing_ok=True)
        # chunks deleted before the state file recorded it (truncation deletes first)
        self.state.start_offset = max(self.state.start_offset, bases[0])
        while True:
            base = bases[-1]
            path = chunk_path(self.dir, base)
            data = path.read_bytes()
            keep, writers = frames.recover_chunk(data)
            if keep < len(data):
                with open(path, "r+b") as f:
                    f.truncate(keep)
                    os.fsync(f.fileno())
            if keep == 0 and len(bases) > 1:
                path.unlink()  # a chunk torn while it was being started
                bases.pop()
                continue
            break
        self.writers = collections.OrderedDict(writers)
        self._base = base
        self.end = self._write_pos = base + keep
        self._fd = os.open(chunk_path(self.dir, base), os.O_WRONLY)
        self.reader = ChunkReader(self.dir)

    def _create_chunk_file(self, base: int, writers: dict[bytes, int]) -> int:
        """A new chunk starting with the writer table (when there are writers); returns its size."""
        path = chunk_path(self.dir, base)
        head = frames.writer_table(writers) if writers else b""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if head:
                os.write(fd, head)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.dir)
        return len(head)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._commit_loop(), name=f"commit:{self.name}")
        if self.config.fsync == "interval":
            self._fsync_task = asyncio.get_running_loop().create_task(self._interval_fsync())

    # --- appends ---

    def submit(self, parts: list[Buffer], writer: WriterCondition | None,
               multi: bool = True) -> asyncio.Future[AppendResult]:
        """Append whole frames given as buffers: they are queued (or wait for room, first come first
        served) before this returns, so calls are stored in their order; the future completes once
        they are durable per the fsync policy. Cancelling it gives up a turn still waiting for room;
        once queued, the frames are written all the same (a cancelled append's outcome is unknown)."""
        self._check_open()
        if writer is not None and len(writer.key) > MAX_WRITER_KEY:
            raise StoreError(f"writer key of {len(writer.key)} bytes for segment {self.name!r} "
                             f"exceeds the limit of {MAX_WRITER_KEY}")
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        pending = _Pending(parts, writer, future, multi)
        if self._waiters or (self.pending_bytes >= self.config.max_pending_bytes and self._queue):
            # back-pressure: _release_waiters queues them in the order they came
            self._waiters.append(pending)
            future.add_done_callback(lambda _: self._give_up_turn(pending))
        else:
            self._enqueue(pending)
        return future

    def _give_up_turn(self, pending: _Pending) -> None:
        if pending.future.cancelled() and pending in self._waiters:
            self._waiters.remove(pending)
            self._release_waiters()

    def _enqueue(self, pending: _Pending) -> None:
        self.pending_bytes += pending.size
        if self._writing and not self._queue:
            # the writer thread is busy: stage it now, not on the commit loop's next turn, which
            # comes late while the loop reads sockets (it was 24 ms behind with 8 segment-protocol
            # appenders); the thread takes it with whatever else is staged when its commit is done
            self._commit([pending], asyncio.get_running_loop())
        else:  # the commit loop's next turn: appends made in this turn of the loop join it
            self._queue.append(pending)
            self._wake.set()

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosed(f"store is closing; append to {self.name!r} refused")
        if self.state.sealed or self._sealing:
            raise SegmentSealed(self.name)

    def _release_waiters(self) -> None:
        """Queue waiting appends, oldest first, while there is room (or nothing at all is pending)."""
        limit = self.config.max_pending_bytes
        while self._waiters and (self.pending_bytes < limit or self.pending_bytes == 0):
            pending = self._waiters.popleft()
            if not pending.future.done():
                self._enqueue(pending)

    async def _commit_loop(self) -> None:
        """Take what is queued, check it, and stage it for the writer thread as one group.

        The writer thread (`_write_staged`) writes and syncs everything staged since its last
        commit, then goes straight on to what was staged meanwhile: the disk does not wait for
        this loop between commits (it took a third of a Forward commit cycle). Results come back
        in commit order through `_written` and `_failed`.
        """
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                if self._closing and not self._writing and not self.pending_bytes:
                    return  # every staged group answered: its callback ran before the job's last wake
                self._wake.clear()  # checked empty first, so a wake set by append or close is never lost
                await self._wake.wait()
                continue
            batch, self._queue = self._queue, []
            self._commit(batch, loop)

    def _commit(self, batch: list[_Pending], loop: asyncio.AbstractEventLoop) -> None:
        """Check a batch and stage it as one group (its duplicates and refusals are answered now)."""
        try:
            group = self._prepare(batch)
        except Exception as e:  # a bug, not an I/O error: fail this batch, keep serving the next
            _fail(batch, self._write_failed(e))
            self._done(batch)
            return
        if group.accepted or group.retries:
            self._stage(group, loop)
        else:
            self._done(batch)

    def _prepare(self, batch: list[_Pending]) -> _Group:
        """Check writer conditions against the stored offsets and the claims of groups not yet
        written: duplicates are answered now, the rest make the group."""
        group = _Group(batch)
        claimed = group.claimed
        for p in batch:
            w = p.writer
            if w is not None:
                stored = self.writers.get(w.key, 0)
                if w.end <= stored:  # stored already, whatever this group does
                    _resolve(p, AppendResult(self.end, self.end, True, stored))
                    continue
                current = claimed[w.key] if w.key in claimed else self._ahead.get(w.key, stored)
                if w.end <= current:  # repeats an append still on its way: its fate is that one's
                    group.retries.append(p)
                    continue
                if w.start is not None and w.start != current:
                    _fail([p], WriterOffsetMismatch(self.name, w.key, current, w.start))
                    continue
                claimed[w.key] = w.end
            group.accepted.append(p)
        self._ahead.update(claimed)
        return group

    def _stage(self, group: _Group, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            refused = self._poisoned
            if not refused:
                self._staged.append(group)
                start = not self._writing
                self._writing = True
        if refused:  # checked against claims of a group that failed: the loop has not heard yet
            self._fail_groups([group], StoreWriteFailed(
                f"writing to segment {self.name!r} failed just before; nothing was acknowledged"))
        elif start:
            loop.run_in_executor(None, self._write_staged, loop)

    def _write_staged(self, loop: asyncio.AbstractEventLoop) -> None:
        """In a worker thread: commit what is staged, group after group, until nothing is."""
        while True:
            with self._lock:
                groups, self._staged = self._staged, []
                if not groups:
                    self._writing = False
                    break
            try:
                offsets = self._write_sync([p for g in groups for p in g.accepted])
            except BaseException as e:  # an I/O error, or a bug: these and every group staged after fail
                with self._lock:
                    self._poisoned = True
                    groups += self._staged
                    self._staged = []
                    self._writing = False
                loop.call_soon_threadsafe(self._failed, groups, e)
                break
            for group in groups:  # here, not in _written: the next group's chunk roll needs them
                for key, value in group.claimed.items():
                    self._set_writer(key, value)
            loop.call_soon_threadsafe(self._written, groups, offsets, self._write_pos)
        loop.call_soon_threadsafe(self._wake.set)  # close() waits for this job

    def _written(self, groups: list[_Group], offsets: list[int], end: int) -> None:
        self.end = end
        offset = iter(offsets)
        for group in groups:
            for key, value in group.claimed.items():
                if self._ahead.get(key) == value:
                    del self._ahead[key]
            for p in group.accepted:
                _resolve(p, AppendResult(next(offset), end, False, p.writer.end if p.writer else None))
            for p in group.retries:
                assert p.writer is not None
                _resolve(p, AppendResult(end, end, True, self.writers.get(p.writer.key, 0)))
            self._done(group.batch)
        self._tail.set()
        self._tail = asyncio.Event()
        if self._on_commit is not None:
            accepted = [p for g in groups for p in g.accepted]
            self._on_commit(self.name, len(accepted), sum(p.size for p in accepted))

    def _failed(self, groups: list[_Group], error: BaseException) -> None:
        self._fail_groups(groups, self._write_failed(error))
        self._ahead.clear()  # every group that claimed anything has failed, here or in _stage
        with self._lock:
            self._poisoned = False

    def _write_failed(self, error: BaseException) -> StoreWriteFailed:
        """What the appenders of a failed commit hear; one that is not an I/O error is a bug, logged."""
        if isinstance(error, OSError):
            return StoreWriteFailed(f"writing to segment {self.name!r} failed: {error}; nothing was acknowledged")
        log.error("commit to segment %r failed", self.name, exc_info=error)
        return StoreWriteFailed(f"writing to segment {self.name!r} failed: {error!r}; nothing was acknowledged")

    def _fail_groups(self, groups: list[_Group], failure: StoreWriteFailed) -> None:
        for group in groups:
            _fail(group.accepted + group.retries, failure)
            self._done(group.batch)

    def _done(self, batch: list[_Pending]) -> None:
        """The batch's appends are answered: their bytes no longer count against max_pending_bytes."""
        self.pending_bytes -= sum(p.size for p in batch)
        self._release_waiters()
        self._space.set()

    def _set_writer(self, key: bytes, value: int) -> None:
        self.writers[key] = value
        self.writers.move_to_end(key)
        while len(self.writers) > self.config.writer_state_limit:
            self.writers.popitem(last=False)

    def _write_sync(self, accepted: list[_Pending]) -> list[int]:
        """In a worker thread: write every accepted append (rolling chunks), fsync per policy."""
        start_base, start_pos = self._base, self._write_pos
        created: list[int] = []
        offsets: list[int] = []
        parts: list[Buffer] = []
        pos = self._write_pos
        claimed: dict[bytes, int] = {}  # this group's writers so far: with self.writers, a new chunk's table
        try:
            for p in accepted:
                record = b""
                if p.writer is not None:
                    record = frames.writer_record(p.writer.key, p.writer.end, p.size)
                elif p.multi:
                    record = frames.writer_record(b"", 0, p.size)  # an atomic group, no writer
                n = len(record) + p.size
                if pos > self._base and pos - self._base + n > self.config.chunk_size:
                    self._flush(parts, pos)
                    parts = []
                    self._sync_active()
                    created.append(pos)  # before pos moves past the new chunk's head: _undo deletes it
                    pos += self._roll(pos, self._pruned({**self.writers, **claimed}))
                if record:
                    parts.append(record)
                if p.writer is not None:
                    claimed[p.writer.key] = p.writer.end
                offsets.append(pos + len(record))
                parts.extend(p.parts)
                pos += n
            self._flush(parts, pos)
            if self.config.fsync == "always":
                self._sync_active()
            else:
                self._dirty = True
        except BaseException:  # an I/O error, or a bug past the write: its appenders hear "not written"
            self._undo(start_base, start_pos, created)
            raise
        return offsets

    def _pruned(self, writers: dict[bytes, int]) -> dict[bytes, int]:
        limit = self.config.writer_state_limit
        if len(writers) <= limit:
            return writers
        return dict(list(writers.items())[-limit:])

    def _flush(self, parts: list[Buffer], pos: int) -> None:
        """pwritev the buffers at the write position, IOV_MAX at a time. Of a group larger than
        `writeback_bytes`, each slice of about that size goes to the disk (start_writeback) while the
        next is copied, so the fdatasync after waits for the last slice, not for all of it: a 16 MiB
        group plain gave 446-900 MB/s on this machine's disk, sliced at 1 MiB 1,564-1,712."""
        at = self._write_pos - self._base
        slice_bytes = self.config.writeback_bytes if self.config.fsync != "never" else 0
        if pos - self._write_pos <= slice_bytes:
            slice_bytes = 0
        batch: list[Buffer] = []
        size = 0
        for part in parts:
            batch.append(part)
            size += len(part)
            if len(batch) == _IOV_MAX or (slice_bytes and size >= slice_bytes):
                self._pwritev_all(batch, size, at)
                if slice_bytes:
                    start_writeback(self._fd, at, size)
                at += size
                batch, size = [], 0
        if batch:
            self._pwritev_all(batch, size, at)
        self._write_pos = pos

    def _pwritev_all(self, batch: list[Buffer], size: int, at: int) -> None:
        written = os.pwritev(self._fd, batch, at)
        if written < size:  # short write (rare): finish this batch byte by byte
            rest = memoryview(b"".join(batch))[written:]
            at += written
            while rest:
                n = os.pwrite(self._fd, rest, at)
                at += n
                rest = rest[n:]

    def _sync_active(self) -> None:
        self._fdatasync(self._fd)

    def _sync_interval(self) -> None:
        """fsync=interval, in a worker thread: through a duplicate of the active chunk's descriptor,
        which the writer thread may replace (and close) meanwhile when it rolls."""
        with self._lock:
            fd = os.dup(self._fd)
        try:
            self._fdatasync(fd)
        finally:
            os.close(fd)

    def _fdatasync(self, fd: int) -> None:
        t0 = time.perf_counter()
        os.fdatasync(fd)
        if self._on_fsync is not None:
            self._on_fsync(time.perf_counter() - t0)

    def _open_active(self, base: int) -> None:
        """Write to the chunk at `base` from now on (under the lock: see _sync_interval)."""
        fd = os.open(chunk_path(self.dir, base), os.O_WRONLY)
        with self._lock:
            old, self._fd = self._fd, fd
        os.close(old)

    def _roll(self, base: int, writers: dict[bytes, int]) -> int:
        """Start a new chunk at `base`; returns the size of its writer-table head."""
        head = self._create_chunk_file(base, writers)
        self._open_active(base)
        self._base = base
        self._write_pos = base + head
        assert self.reader is not None
        self.reader.add_chunk(base)
        return head

    def _undo(self, start_base: int, start_pos: int, created: list[int]) -> None:
        """Put the files back as they were before a failed commit (best effort; reads stop at `end`)."""
        try:
            if created:
                for base in created:
                    chunk_path(self.dir, base).unlink(missing_ok=True)
                assert self.reader is not None
                self.reader.bases = [b for b in self.reader.bases if b not in created]
                self._open_active(start_base)
            os.ftruncate(self._fd, start_pos - start_base)
        except OSError:
            pass
        self._base, self._write_pos = start_base, start_pos

    async def _interval_fsync(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            await asyncio.sleep(self.config.fsync_interval)
            if self._dirty:
                self._dirty = False
                try:
                    await loop.run_in_executor(None, self._sync_interval)
                except OSError:
                    self._dirty = True

    # --- reads ---

    async def read(self, offset: int, max_bytes: int, wait: float = 0.0) -> ReadResult:
        """Bytes from `offset` (at most `max_bytes`, within one chunk); at the tail, wait for an append."""
        if offset < self.state.start_offset:
            raise OffsetTruncated(self.name, offset, self.state.start_offset)
        if offset > self.end:
            raise StoreError(f"offset {offset} is beyond the end {self.end} of segment {self.name!r}")
        if offset == self.end and wait > 0 and not self.state.sealed and not self._closing:
            tail = self._tail
            try:
                await asyncio.wait_for(tail.wait(), wait)
            except TimeoutError:
                pass
            if offset < self.state.start_offset:
                raise OffsetTruncated(self.name, offset, self.state.start_offset)
        assert self.reader is not None
        data = self.reader.pread(offset, max_bytes, self.end) if offset < self.end else b""
        stop = offset + len(data)
        return ReadResult(data, offset, stop >= self.end, stop >= self.end and self.state.sealed)

    async def read_frames(self, offset: int, max_bytes: int, wait: float = 0.0) -> ReadResult:
        """Like `read`, but whole frames only: at least one frame, even one larger than `max_bytes`."""
        r = await self.read(offset, max_bytes, wait)
        keep = frames.complete_prefix(r.data)
        if keep == len(r.data):
            return r
        if keep == 0:
            (_, length) = frames.HEADER.unpack_from(r.data, 0) if len(r.data) >= 8 else (0, 0)
            if len(r.data) < 8:
                assert self.reader is not None
                head = self.reader.pread(offset, 8, self.end)
                (_, length) = frames.HEADER.unpack_from(head, 0)
            assert self.reader is not None
            data = self.reader.pread(offset, frames.HEADER_SIZE + length, self.end)
        else:
            data = r.data[:keep]
        stop = offset + len(data)
        return ReadResult(data, offset, stop >= self.end, stop >= self.end and self.state.sealed)

    # --- lifecycle ---

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.name, self.state.start_offset, self.end, self.state.sealed,
                           len(self.reader.bases) if self.reader else 0)

    async def drain(self) -> None:
        while self._queue or self.pending_bytes:
            self._space.clear()
            await self._space.wait()

    def _fail_waiters(self, error: Exception) -> None:
        _fail(self._waiters, error)
        self._waiters.clear()

    async def seal(self) -> SegmentInfo:
        self._sealing = True
        self._fail_waiters(SegmentSealed(self.name))
        await self.drain()
        if not self.state.sealed:
            self.state.sealed = True
            await asyncio.get_running_loop().run_in_executor(None, self.state.save, self.dir)
        self._tail.set()
        return self.info()

    async def truncate(self, offset: int) -> SegmentInfo:
        """Move the start offset forward to `offset`; whole chunks below it are deleted."""
        if offset > self.end:
            raise StoreError(f"cannot truncate segment {self.name!r} at {offset}: its end is {self.end}")
        if offset <= self.state.start_offset:
            return self.info()
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, self._is_frame_boundary, offset):
            raise StoreError(f"cannot truncate segment {self.name!r} at {offset}: not a frame boundary")
        self.state.start_offset = offset
        await loop.run_in_executor(None, self._drop_chunks_below, offset)
        return self.info()

    def _is_frame_boundary(self, offset: int) -> bool:
        """Walk frame headers from the chunk's base (chunks start on a frame) up to `offset`."""
        assert self.reader is not None
        if offset == self.end:
            return True
        base, _ = self.reader.chunk_span(offset, self.end)
        pos = base
        while pos < offset:
            head = self.reader.pread(pos, frames.HEADER_SIZE, self.end)
            if len(head) < frames.HEADER_SIZE:
                return False
            pos += frames.HEADER_SIZE + frames.HEADER.unpack(head)[1]
        return pos == offset

    def _drop_chunks_below(self, offset: int) -> None:
        """Delete whole chunks first, then record the start offset: on a full disk the deletion is
        what makes room for the state file. A crash in between is repaired on open, where the
        first remaining chunk bounds the start offset."""
        assert self.reader is not None
        bases = self.reader.bases
        keep_from = max((b for b in bases if b <= offset), default=bases[0])
        for base in self.reader.drop_chunks_below(keep_from):
            chunk_path(self.dir, base).unlink(missing_ok=True)
        fsync_dir(self.dir)
        self.state.save(self.dir)

    def retention_cut(self, max_bytes: int, max_age: float) -> int | None:
        """The start offset retention asks for (whole chunks only; the active chunk stays), or None."""
        assert self.reader is not None
        bases = self.reader.bases
        cut = None
        now = time.time()
        for i, base in enumerate(bases[:-1]):
            next_base = bases[i + 1]
            too_big = max_bytes > 0 and self.end - base > max_bytes
            too_old = max_age > 0 and now - os.stat(chunk_path(self.dir, base)).st_mtime > max_age
            if too_big or too_old:
                cut = next_base
            else:
                break
        return cut if cut is not None and cut > self.state.start_offset else None

    async def close(self) -> None:
        self._closing = True
        self._fail_waiters(StoreClosed(f"store is closing; append to {self.name!r} refused"))
        self._wake.set()
        self._space.set()
        self._tail.set()
        if self._task is not None:
            await self._task
        if self._fsync_task is not None:
            self._fsync_task.cancel()
        if self._fd >= 0:
            if self.config.fsync != "never" or self._dirty:
                os.fdatasync(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self.reader is not None:
            self.reader.close()
