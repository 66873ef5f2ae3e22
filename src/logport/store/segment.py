"""One segment, wired: the append queue with its back-pressure, the commit loop that stages groups for the
writer thread (store/chunkwriter.py) after the exactly-once check (store/writers.py), checked reads
(store/verified.py), recovery on open, seal, truncation and retention. The path of an append: `submit` ->
`_enqueue` -> `_commit_loop` -> `WriterState.check` -> `_stage` -> `ChunkWriter.write` (writer thread) ->
`_written` answers it; with direct_io, into a chunk's written blocks, `EngineLine.take` (store/engine.py) in
place of `_stage`, then the engine's thread, then `_durable` -> `_written`."""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logport.errors import (
    CorruptData,
    OffsetTruncated,
    SegmentSealed,
    StoreClosed,
    StoreError,
    StoreWriteFailed,
)
from logport.store import engine, frames, groups, marks
from logport.store.appends import (
    MAX_WRITER_KEY,
    AppendResult,
    Buffer,
    CommitGroup,
    PendingAppend,
    WriterCondition,
    fail,
    resolve,
)
from logport.store.chunkwriter import ChunkWriter, chunk_head
from logport.store.counting import count_parts
from logport.store.files import (
    ChunkFiles,
    ChunkReader,
    CorruptRange,
    SegmentState,
    chunk_path,
    fsync_dir,
    list_chunk_bases,
)
from logport.store.groups import COMMIT_SIZE, VERSION, ChunkLayout, walk_chunk
from logport.store.marks import ChunkMark
from logport.store.settings import StoreConfig
from logport.store.verified import VerifiedReads
from logport.store.writers import WriterState

__all__ = ["AppendResult", "Buffer", "CheckedRead", "ReadResult", "Segment", "SegmentInfo", "WriterCondition"]

log = logging.getLogger("logport.store")

_BACKFILL_PAUSE = 0.05  # seconds between two older chunks walked for their marks


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
class CheckedRead:
    """A read for a sender that copies nothing itself (`Segment.read_checked`): `data` may be a view of a
    chunk file's mapping, whose bytes are the segment's only while `stored()` says so (retention recycles the
    files of the chunks it drops, and a recycled file is written again): check it before each send."""

    data: bytes | memoryview
    offset: int
    at_tail: bool
    end_of_segment: bool
    stored: Callable[[], bool]


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


OnCommit = Callable[[str, int, int], None]  # (segment, appends, bytes)


class Segment:
    def __init__(self, name: str, seg_dir: Path, config: StoreConfig, on_commit: OnCommit | None = None,
                 on_fsync: Callable[[float], None] | None = None,
                 on_corrupt: Callable[[CorruptData], None] | None = None) -> None:
        self.name = name
        self.dir = seg_dir
        self.config = config
        self._on_commit = on_commit
        self._on_fsync = on_fsync
        self._on_corrupt = on_corrupt
        self.state = SegmentState()
        self.reader = ChunkReader(seg_dir) if seg_dir.exists() else None
        self.verified: VerifiedReads | None = None
        self.files = ChunkFiles(seg_dir, config.chunk_size, config.spare_chunks)
        self.chunk_writer: ChunkWriter | None = None  # set up on open
        self._preparing: asyncio.Future[None] | None = None
        self._prepared_for: int | None = None  # the active chunk for which the next was last written ahead
        self.writer_state = WriterState(name, config.writer_state_limit)
        self.end = 0  # readers see [start_offset, end): written, and fsync'd under fsync=always
        self._queue: list[PendingAppend] = []
        self.pending_bytes = 0  # queued and reserved bytes not yet written
        self._waiters: collections.deque[PendingAppend] = collections.deque()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._tail = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._engine: engine.EngineLine | None = None  # store.direct_io's commits without the GIL (store/engine.py)
        self._fsync_task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()  # the staged groups and the two flags below, shared with the writer thread
        self._staged: list[CommitGroup] = []
        self._writing = False  # a writer-thread job is running
        self._poisoned = False  # a group failed in the writer thread and the loop has not heard yet
        self._closing = False
        self._sealing = False
        self._state_changes = asyncio.Lock()  # truncations (retention's and clients') and the seal, one at a time
        # recovery points and event counts (store/marks.py): the marks written last (or to write), the events
        # of each chunk not marked sealed yet up to `end`, and, under fsync=interval, the active chunk's mark
        # as far as the last interval fsync made it durable
        self._sealed: dict[int, ChunkMark] = {}  # the chunks that take no more appends
        self._saved_live: ChunkMark | None = None  # the active chunk's mark written last (its CRC read)
        self._events: dict[int, int] = {}
        self._synced: ChunkMark | None = None
        self._marks_task: asyncio.Task[None] | None = None
        self._marks_again = False
        self._points_task: asyncio.Task[None] | None = None
        self._backfill_task: asyncio.Task[None] | None = None

    # --- opening and recovery ---

    def open_sync(self, create: bool) -> None:
        """Recover from disk: the active chunk's data ends at its last valid commit group (a v1 chunk's at
        its last whole append, cut there), unless that is below the recovery point (store/marks.py): then
        the range up to it is corrupt, kept as it is, and appends go to a new chunk after it. Or create the
        segment's directory."""
        if create:
            self.dir.mkdir(parents=True, exist_ok=False)
            self.state.save(self.dir)
            self.files.start_chunk(0, chunk_head(0, {})[0])
            fsync_dir(self.dir.parent)
        self.files.clear_leftovers()
        marks.clear_leftovers(self.dir)
        self.state = SegmentState.load(self.dir)
        found = marks.load(self.dir)  # before the chunks are listed and walked: each mark was true by then
        if found.error:
            log.error("the segment's marks cannot be read; its recovery point is unknown, so recovery cuts a "
                      "failing last group as a write a crash tore", extra={"segment": self.name, "error": found.error})
        bases = list_chunk_bases(self.dir)
        if not bases:
            self.files.start_chunk(self.state.start_offset, chunk_head(self.state.start_offset, {})[0])
            bases = [self.state.start_offset]
        # chunks wholly below the start offset (a retention pass cut short by a crash)
        while len(bases) > 1 and bases[1] <= self.state.start_offset:
            chunk_path(self.dir, bases.pop(0)).unlink(missing_ok=True)
        # chunks deleted before the state file recorded it (truncation deletes first)
        self.state.start_offset = max(self.state.start_offset, bases[0])
        point = found.recovery_point(bases[0])
        durable = point.end if point is not None else -1  # every group below this was durable: never cut
        while True:
            base = bases[-1]
            path = chunk_path(self.dir, base)
            data = path.read_bytes()
            layout = walk_chunk(data, base)
            if layout.version == 1 and layout.end - base < len(data) and durable <= base:
                with open(path, "r+b") as f:  # v1's end is the file's size: cut the torn tail
                    f.truncate(layout.end - base)
                    os.fsync(f.fileno())
            if (len(bases) > 1 and durable <= base
                    and (layout.end == base if layout.version == 1 else not layout.groups and not layout.corrupt)):
                path.unlink()  # a chunk torn while it was being started (or with no commit yet): nothing in it
                bases.pop()
                continue
            break
        for bad in layout.corrupt:
            log.error("corrupt data found on open", extra={"segment": self.name, "start": bad.start,
                                                             "end": bad.end, "reason": bad.reason, "file": str(path)})
            self._record_corrupt(CorruptRange(bad.start, bad.end, bad.reason, 1))
        quarantined = None
        if durable > layout.end:
            assert point is not None
            why = (groups.why_the_data_ends(data[layout.end - base :], layout) if point.base == base
                   else f"the chunk file of offset {point.base} is missing")
            lost = max(1, point.groups - len(layout.groups)) if point.base == base else 0
            below = marks.below_recovery_point(layout, point, why)
            assert below is not None
            quarantined = CorruptRange(below.start, below.end, below.reason, lost)
            log.error("corrupt data below the recovery point: kept as it is (quarantined), never overwritten; new "
                      "appends go to a new chunk after it; `logport verify --repair` gives it up",
                      extra={"segment": self.name, "start": below.start, "end": below.end, "groups": lost,
                             "bytes": below.end - below.start, "reason": why, "file": str(path)})
            self._record_corrupt(quarantined)
        elif layout.version == VERSION and any(data[layout.end - base : layout.end - base + COMMIT_SIZE]):
            torn = groups.group_extent(data[layout.end - base :], layout.end) or COMMIT_SIZE
            log.warning("recovery cut a write a crash interrupted (above the recovery point: never acknowledged)",
                        extra={"segment": self.name, "start": layout.end,
                               "end": min(layout.end + torn, base + len(data)), "recovery_point": durable,
                               "file": str(path)})
        self.writer_state.load(layout.writers)
        self.reader = ChunkReader(self.dir)
        self.verified = VerifiedReads(self.name, self.reader, self._on_corrupt)
        self.verified.recorded = self.state.corrupt
        self.chunk_writer = writer = ChunkWriter(self.dir, self.config, self.reader, self.files, self._on_fsync)
        self._sealed = {b: m for b, m in found.by_base.items() if b in bases and b != base}
        events = marks.count_layout(data, layout, point if point is not None and point.base == base else None)
        if quarantined is not None:
            # the chunk keeps its valid part's mark; the range after it stays as it is, and the segment goes on
            # after the recovery point, in a chunk of its own (state first: a crash before the roll finds the
            # range again and records nothing twice)
            self._sealed[base] = marks.mark_of(layout, events, marks.SEALED)
            writer.roll(quarantined.end, dict(layout.writers))
        elif layout.version == 1 or not layout.groups and layout.version != VERSION:
            # v1, or a v2 chunk whose header was torn while it was started: appends go to a new v2 chunk
            if layout.end == base:
                path.unlink()
                fsync_dir(self.dir)
            writer.roll(layout.end, dict(layout.writers), known=layout.end == base)
        else:
            writer.resume(layout)
            if layout.end > durable and not create:  # recovered from the page cache after a crash, perhaps
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        self.verified.set_last(writer.layout)
        self.end = writer.write_pos
        self._events = {writer.layout.base: events if writer.layout.base == base else 0}
        live = self._live_mark()
        kept = found.by_base.get(live.base)
        if kept is None or kept.end != live.end or quarantined is not None or found.error:
            try:
                self._wrote_marks(self._write_marks(list(self._sealed.values()), live), live)
            except OSError as e:  # a full disk, say: the recovery point stays where it was (lower: safe)
                log.warning("recording the recovery point failed", extra={"segment": self.name, "error": str(e)})
        else:
            self._saved_live = kept

    def _record_corrupt(self, bad: CorruptRange) -> None:
        """Keep a corrupt range found on open in the segment's state (once)."""
        if not any(r.start == bad.start and r.end == bad.end for r in self.state.corrupt):
            self.state.corrupt.append(bad)
            self.state.save(self.dir)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.fsync == "always" and self.config.direct_io and engine.available():
            assert self.chunk_writer is not None
            self._engine = engine.EngineLine(self.chunk_writer, loop, self._durable, self._failed,
                                             lambda group: self._stage(group, loop), self._on_fsync)
        self._task = loop.create_task(self._commit_loop(), name=f"commit:{self.name}")
        if self.config.fsync == "interval":
            self._fsync_task = asyncio.get_running_loop().create_task(self._interval_fsync())
        if self.config.fsync != "never":
            self._points_task = loop.create_task(self._recovery_points(), name=f"recovery-point:{self.name}")
        assert self.reader is not None
        if any(b not in self._sealed for b in self.reader.bases[:-1]):
            self._backfill_task = loop.create_task(self._mark_older_chunks(), name=f"marks:{self.name}")
        self._prepare_next()

    def _prepare_next(self) -> None:
        """Write the next chunk ahead in a worker thread (store.prewrite_chunks), one at a time, once the
        active chunk is a quarter full: a segment that gets a trickle keeps no chunk of zeros for long
        beside it (one per segment at most, and only for a segment that will need it), and a busy one
        has it before it rolls."""
        assert self.chunk_writer is not None
        base = self.chunk_writer.layout.base
        if (not self.config.prewrite_chunks or self._closing or self._prepared_for == base
                or self.end - base < self.config.chunk_size // 4
                or (self._preparing and not self._preparing.done())):
            return
        self._prepared_for = base
        self._preparing = asyncio.get_running_loop().run_in_executor(None, self._prepare_sync)

    def _prepare_sync(self) -> None:
        try:
            self.files.prepare()
        except OSError as e:  # a full disk, say: the next chunk is then created when it is needed
            log.warning("writing the next chunk ahead failed", extra={"segment": self.name, "error": str(e)})

    # --- appends ---

    def submit(self, parts: list[Buffer], writer: WriterCondition | None,
               multi: bool = True, events: int | None = None) -> asyncio.Future[AppendResult]:
        """Append whole frames given as buffers: they are queued (or wait for room, first come first
        served) before this returns, so calls are stored in their order; the future completes once
        they are durable per the fsync policy. Cancelling it gives up a turn still waiting for room;
        once queued, the frames are written all the same (a cancelled append's outcome is unknown). `events`:
        what store/counting.py counts in the frames, when the caller knows it (else the store counts them)."""
        self._check_open()
        if writer is not None and len(writer.key) > MAX_WRITER_KEY:
            raise StoreError(f"writer key of {len(writer.key)} bytes for segment {self.name!r} "
                             f"exceeds the limit of {MAX_WRITER_KEY}")
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        pending = PendingAppend(parts, writer, future, multi, events)
        if self._waiters or self.pending_bytes >= self.config.max_pending_bytes:
            # back-pressure: _release_waiters queues them in the order they came
            self._waiters.append(pending)
            future.add_done_callback(lambda _: self._give_up_turn(pending))
        else:
            self._enqueue(pending)
        return future

    def _give_up_turn(self, pending: PendingAppend) -> None:
        if pending.future.cancelled() and pending in self._waiters:
            self._waiters.remove(pending)
            self._release_waiters()

    def _enqueue(self, pending: PendingAppend) -> None:
        self.pending_bytes += pending.size
        if (self._writing or self._engine is not None and self._engine.busy) and not self._queue:
            # the writer thread (or the commit engine) is busy: stage it now, not on the commit loop's
            # next turn, which comes late while the loop reads sockets (it was 24 ms behind with 8
            # segment-protocol appenders); the thread takes it with whatever else is staged when its
            # commit is done
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

    def _commit(self, batch: list[PendingAppend], loop: asyncio.AbstractEventLoop) -> None:
        """Check a batch and stage it as one group (its duplicates and refusals are answered now)."""
        try:
            group = self.writer_state.check(batch, self.end)
        except Exception as e:  # a bug, not an I/O error: fail this batch, keep serving the next
            fail(batch, self._write_failed(e))
            self._done(batch)
            return
        if not group.accepted and not group.retries:
            self._done(batch)
            return
        try:
            taken = self._engine is not None and self._engine.take(group, self._writing)
        except Exception as e:  # a bug: fail this batch, keep serving the next
            self._fail_groups([group], self._write_failed(e))
            return
        if not taken:
            self._stage(group, loop)

    def _stage(self, group: CommitGroup, loop: asyncio.AbstractEventLoop) -> None:
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
                assert self.chunk_writer is not None
                offsets = self.chunk_writer.write([p for g in groups for p in g.accepted], self.writer_state)
            except BaseException as e:  # an I/O error, or a bug: these and every group staged after fail
                with self._lock:
                    self._poisoned = True
                    groups += self._staged
                    self._staged = []
                    self._writing = False
                loop.call_soon_threadsafe(self._failed, groups, e)
                break
            self.writer_state.written(groups)  # here, not in _written: the next group's chunk roll needs them
            loop.call_soon_threadsafe(self._written, groups, offsets, self.chunk_writer.write_pos,
                                      self.chunk_writer.layout)
        loop.call_soon_threadsafe(self._wake.set)  # close() waits for this job

    def _durable(self, groups: list[CommitGroup], offsets: list[int], end: int, layout: ChunkLayout) -> None:
        """Groups the direct commit engine wrote: their claims are stored offsets now, then they hear."""
        self.writer_state.written(groups)
        self._written(groups, offsets, end, layout)

    def _written(self, groups: list[CommitGroup], offsets: list[int], end: int, layout: ChunkLayout) -> None:
        self.end = end
        assert self.verified is not None
        rolled = self.verified.last is not layout
        if rolled:  # the writer started a chunk: readers walk it from now on
            self.verified.set_last(layout)
        self._prepare_next()
        offset = iter(offsets)
        for group in groups:
            self.writer_state.settled(group)
            for p in group.accepted:
                resolve(p, AppendResult(next(offset), end, False, p.writer.end if p.writer else None))
            for p in group.retries:
                assert p.writer is not None
                resolve(p, AppendResult(end, end, True, self.writer_state.offset(p.writer.key)))
            self._done(group.batch)
        self._tail.set()
        self._tail = asyncio.Event()
        self._count(groups, offsets, layout.base)
        if rolled:
            self._mark_rolled()
        if self._on_commit is not None:
            accepted = [p for g in groups for p in g.accepted]
            self._on_commit(self.name, len(accepted), sum(p.size for p in accepted))

    # --- recovery points and event counts (store/marks.py) ---

    def _count(self, groups: list[CommitGroup], offsets: list[int], active: int) -> None:
        """Add the events of written appends to their chunks' counts (after they were answered)."""
        counts = self._events
        offset = iter(offsets)
        for group in groups:
            for p in group.accepted:
                at = next(offset)
                base = active if at >= active else self._chunk_of(at)
                counts[base] = counts.get(base, 0) + (p.events if p.events is not None else count_parts(p.parts))

    def _chunk_of(self, offset: int) -> int:
        assert self.reader is not None
        return self.reader.chunk_span(offset, offset)[0]

    def _mark_rolled(self) -> None:
        """The chunks the writer rolled from are complete: their marks (sealed) are written soon."""
        assert self.chunk_writer is not None
        finished = self.chunk_writer.finished
        while finished:
            layout = finished.popleft()
            self._sealed[layout.base] = marks.mark_of(layout, self._events.pop(layout.base, 0), marks.SEALED)
        self._save_marks_soon()

    def _live_mark(self, flags: int = 0) -> ChunkMark:
        """The active chunk's mark at the segment's end (its CRC read when it is written)."""
        assert self.verified is not None and self.verified.last is not None
        layout = self.verified.last
        at = bisect.bisect_left(layout.groups, self.end)  # the writer may be appending groups past `end`
        last = layout.groups[at - 1] if at else layout.base
        return ChunkMark(layout.base, self.end, last, -1, at, self._events.get(layout.base, 0), flags)

    def _durable_mark(self) -> ChunkMark | None:
        """The active chunk's mark as far as its data is durable: at the end (fsync=always: nothing is
        answered before), as of the last interval fsync, or not known (fsync=never: at rolls and stops)."""
        if self.config.fsync == "always":
            return self._live_mark()
        return self._synced if self.config.fsync == "interval" else None

    async def _mark_older_chunks(self) -> None:
        """Chunks written before the marks (or whose mark was lost), walked one at a time in the background and
        marked, so that `logport segments` need not walk them again; one that fails its checks stays unmarked."""
        assert self.reader is not None
        loop = asyncio.get_running_loop()
        bases = self.reader.bases
        marked = 0
        for base, following in zip(bases[:-1], bases[1:], strict=True):
            if self._closing:
                return
            if base in self._sealed or base < self.state.start_offset:
                continue
            try:
                mark = await loop.run_in_executor(None, self._walk_for_mark, base, following)
            except OSError:  # retention dropped it meanwhile, say
                continue
            if mark is not None:
                self._sealed[base] = mark
                marked += 1
            await asyncio.sleep(_BACKFILL_PAUSE)  # behind the appends
        if marked:
            self._save_marks_soon()

    def _walk_for_mark(self, base: int, following: int) -> ChunkMark | None:
        path = chunk_path(self.dir, base)
        with open(path, "rb") as f:
            if groups.chunk_version(f.read(groups.CHUNK_HEADER_SIZE + COMMIT_SIZE), base) != VERSION:
                return None  # v1 (no checksums to mark by) or a damaged head: counted by walking
        data = path.read_bytes()
        layout = walk_chunk(data, base)
        if layout.version != VERSION or layout.corrupt or layout.end != following:
            return None
        return marks.mark_of(layout, marks.count_layout(data, layout), marks.SEALED)

    async def _recovery_points(self) -> None:
        """At most every store.recovery_point_interval seconds, record the recovery point if it moved."""
        while not self._closing:
            await asyncio.sleep(self.config.recovery_point_interval)
            mark = self._durable_mark()
            saved = self._saved_live
            if mark is not None and (saved is None or (mark.base, mark.end) != (saved.base, saved.end)) \
                    and not self._closing:
                self._save_marks_soon()

    def _save_marks_soon(self) -> None:
        """Write the marks in a worker thread, one write at a time (a request meanwhile makes one more)."""
        if self._marks_task is not None and not self._marks_task.done():
            self._marks_again = True
            return
        self._marks_task = asyncio.get_running_loop().create_task(self._save_marks())

    async def _save_marks(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._marks_again = False
            live = self._durable_mark()
            try:
                written = await loop.run_in_executor(None, self._write_marks, list(self._sealed.values()), live)
            except OSError as e:  # a full disk, say: the recovery point stays where it was (lower: safe)
                log.warning("recording the recovery point failed", extra={"segment": self.name, "error": str(e)})
            else:
                self._wrote_marks(written, live)
            if not self._marks_again or self._closing:
                return

    def _write_marks(self, sealed: list[ChunkMark], live: ChunkMark | None) -> list[ChunkMark]:
        """In a worker thread (or while opening, or on close): the marks of the chunks still there, their
        CRCs read from the chunks, written; what was written. Without a `live` mark (its durable end not
        known since: fsync=never, or interval before its first fsync) the last one written stays, unless its
        chunk is sealed since."""
        assert self.reader is not None
        first = self.reader.bases[0] if self.reader.bases else 0
        done: list[ChunkMark] = []
        saved = self._saved_live
        if live is None and saved is not None and not any(m.base == saved.base for m in sealed):
            live = saved
        for mark in [*sealed, *([live] if live is not None else [])]:
            if mark.base < first:
                continue  # retention dropped it
            try:
                done.append(marks.fill_crc(mark, self._pread_chunk(mark.base)))
            except FileNotFoundError:
                continue
        marks.save(self.dir, done)
        return done

    def _wrote_marks(self, written: list[ChunkMark], live: ChunkMark | None) -> None:
        """The sealed marks kept with their CRCs (those of chunks dropped meanwhile forgotten), and the active
        chunk's mark as written."""
        first = min((m.base for m in written), default=0)
        for mark in written:
            if mark.sealed and mark.base in self._sealed:
                self._sealed[mark.base] = mark
            elif live is not None and mark.base == live.base:
                self._saved_live = mark
        for base in [b for b in self._sealed if b < first]:
            del self._sealed[base]

    def _pread_chunk(self, base: int) -> Callable[[int, int], bytes]:
        path = chunk_path(self.dir, base)

        def pread(position: int, n: int) -> bytes:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                return os.pread(fd, n, position)
            finally:
                os.close(fd)

        return pread

    def _failed(self, groups: list[CommitGroup], error: BaseException) -> None:
        self._fail_groups(groups, self._write_failed(error))
        self.writer_state.ahead.clear()  # every group that claimed anything has failed, here or in _stage
        with self._lock:
            self._poisoned = False

    def _write_failed(self, error: BaseException) -> StoreWriteFailed:
        """What the appenders of a failed commit hear; one that is not an I/O error is a bug, logged."""
        if isinstance(error, OSError):
            return StoreWriteFailed(f"writing to segment {self.name!r} failed: {error}; nothing was acknowledged")
        log.error("commit to segment %r failed", self.name, exc_info=error)
        return StoreWriteFailed(f"writing to segment {self.name!r} failed: {error!r}; nothing was acknowledged")

    def _fail_groups(self, groups: list[CommitGroup], failure: StoreWriteFailed) -> None:
        for group in groups:
            fail(group.accepted + group.retries, failure)
            self._done(group.batch)

    def _done(self, batch: list[PendingAppend]) -> None:
        """The batch's appends are answered: their bytes no longer count against max_pending_bytes."""
        self.pending_bytes -= sum(p.size for p in batch)
        self._release_waiters()
        self._space.set()

    async def _interval_fsync(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            await asyncio.sleep(self.config.fsync_interval)
            writer = self.chunk_writer
            if writer is not None and writer.dirty:
                writer.dirty = False
                synced = self._live_mark()  # what this fdatasync makes durable (a roll syncs the chunk before)
                try:
                    await loop.run_in_executor(None, writer.sync_interval)
                except OSError:
                    writer.dirty = True
                else:
                    self._synced = synced

    # --- reads ---

    async def read(self, offset: int, max_bytes: int, wait: float = 0.0) -> ReadResult:
        """Bytes from `offset` (at most `max_bytes`, within one chunk); at the tail, wait for an append."""
        await self._reach(offset, wait)
        assert self.verified is not None
        data = self.verified.read(offset, max_bytes, self.end) if offset < self.end else b""
        stop = offset + len(data)
        return ReadResult(data, offset, stop >= self.end, stop >= self.end and self.state.sealed)

    async def read_checked(self, offset: int, max_bytes: int, wait: float = 0.0) -> CheckedRead:
        """`read` (the same checks, the same wait at the tail), its bytes from `VerifiedReads.checked_view`:
        checked, not copied."""
        await self._reach(offset, wait)
        assert self.verified is not None
        end = self.end
        data = self.verified.checked_view(offset, max_bytes, end) if offset < end else b""
        state = self.state
        stop = offset + len(data)
        return CheckedRead(data, offset, stop >= end, stop >= end and state.sealed,
                           lambda: state.start_offset <= offset)

    async def _reach(self, offset: int, wait: float) -> None:
        """Check a read's offset (not truncated away, not past the end); at the tail, wait up to `wait` seconds
        for an append."""
        if offset < self.state.start_offset:
            raise OffsetTruncated(self.name, offset, self.state.start_offset)
        if offset > self.end:
            raise StoreError(f"offset {offset} is beyond the end {self.end} of segment {self.name!r}")
        if offset == self.end and wait > 0 and not self.state.sealed and not self._closing:
            tail = self._tail
            try:
                async with asyncio.timeout(wait):
                    await tail.wait()
            except TimeoutError:
                pass
            if offset < self.state.start_offset:
                raise OffsetTruncated(self.name, offset, self.state.start_offset)

    async def read_frames(self, offset: int, max_bytes: int, wait: float = 0.0) -> ReadResult:
        """Like `read`, but whole frames only: at least one frame, even one larger than `max_bytes`."""
        r = await self.read(offset, max_bytes, wait)
        keep = frames.complete_prefix(r.data)
        if keep == len(r.data):
            return r
        if keep == 0:
            (_, length) = frames.HEADER.unpack_from(r.data, 0) if len(r.data) >= 8 else (0, 0)
            assert self.verified is not None
            if len(r.data) < 8:
                head = self.verified.read(offset, 8, self.end)
                (_, length) = frames.HEADER.unpack_from(head, 0)
            data = self.verified.read(offset, frames.HEADER_SIZE + length, self.end)
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
        fail(self._waiters, error)
        self._waiters.clear()

    async def seal(self) -> SegmentInfo:
        self._sealing = True
        self._fail_waiters(SegmentSealed(self.name))
        await self.drain()
        async with self._state_changes:
            if not self.state.sealed:
                self.state.sealed = True
                await asyncio.get_running_loop().run_in_executor(None, self.state.save, self.dir)
        self._tail.set()
        return self.info()

    async def truncate(self, offset: int) -> SegmentInfo:
        """Move the start offset forward to `offset`; whole chunks below it are deleted (recycled)."""
        async with self._state_changes:  # two at once wrote the same state file and dropped the same chunks
            return await self._truncate(offset)

    async def _truncate(self, offset: int) -> SegmentInfo:
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
            self.files.recycle(base)  # the next chunk, or deleted
        if self.verified is not None:
            self.verified.forget_below(keep_from)
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
        self.files.stopping = True
        if self._preparing is not None:
            await asyncio.wait([self._preparing])
        self._fail_waiters(StoreClosed(f"store is closing; append to {self.name!r} refused"))
        self._wake.set()
        self._space.set()
        self._tail.set()
        if self._task is not None:
            await self._task
        for task in (self._fsync_task, self._points_task, self._backfill_task):
            if task is not None:
                task.cancel()
        if self._marks_task is not None:
            await asyncio.wait([self._marks_task])
        if self._engine is not None:
            self._engine.close()
        if self.chunk_writer is not None:
            self.chunk_writer.close()  # synced: the end is durable, and the next start opens here
            if self.verified is not None and self.verified.last is not None:
                try:
                    self._write_marks(list(self._sealed.values()), self._live_mark(marks.CLEAN))
                except OSError as e:
                    log.warning("recording the recovery point at the stop failed",
                                extra={"segment": self.name, "error": str(e)})
        if self.reader is not None:
            self.reader.close()
