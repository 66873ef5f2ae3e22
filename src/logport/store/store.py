"""The segment store: named, append-only, byte-addressed segments under DATA/segments/."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from logport.config import check_segment_name
from logport.errors import (
    CorruptData,
    NoSuchSegment,
    SegmentExists,
    StoreClosed,
    StoreError,
    StoreLimitExceeded,
    StoreWriteFailed,
)
from logport.metrics import Metrics
from logport.store import frames
from logport.store.files import SEGMENTS_DIR, CorruptRange
from logport.store.lock import DataDirectoryLock
from logport.store.segment import (
    AppendResult,
    Buffer,
    CheckedRead,
    ReadResult,
    Segment,
    SegmentInfo,
    WriterCondition,
)
from logport.store.settings import StoreConfig

log = logging.getLogger("logport.store")


def _relay(inner: asyncio.Future[AppendResult], outer: asyncio.Future[AppendResult]) -> None:
    """`outer` completes as `inner` does; cancelling `outer` cancels `inner` (gives up a turn still
    waiting for room: see Segment.submit)."""

    def done(f: asyncio.Future[AppendResult]) -> None:
        if outer.done():
            return
        if f.cancelled():
            outer.cancel()
        elif f.exception() is not None:
            outer.set_exception(f.exception())  # type: ignore[arg-type]
        else:
            outer.set_result(f.result())

    inner.add_done_callback(done)
    outer.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)


class SegmentStore:
    """Appends are durable (per the fsync policy) when their coroutine returns."""

    def __init__(self, config: StoreConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.root = Path(config.data_dir) / SEGMENTS_DIR
        self.metrics = metrics or Metrics()
        self._segments: dict[str, Segment] = {}
        self._creating: dict[str, asyncio.Future[Segment]] = {}
        # appends waiting for their segment to be created, in the order they were made (_submit_in_order)
        self._lines: dict[str, list[tuple[list[Buffer], WriterCondition | None, bool, int | None,
                                          asyncio.Future[AppendResult]]]] = {}
        self._line_tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._lock: DataDirectoryLock | None = None
        self._corrupt_seen: set[str] = set()  # segments with a corrupt-groups series

    @classmethod
    async def open(cls, config: StoreConfig, metrics: Metrics | None = None) -> SegmentStore:
        store = cls(config, metrics)
        store._lock = DataDirectoryLock.acquire(config.data_dir)
        try:
            await asyncio.get_running_loop().run_in_executor(None, store._open_all)
        except BaseException:
            store._lock.release()
            raise
        for segment in store._segments.values():
            segment.start()
            store._watch(segment)
        return store

    def _open_all(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.root.iterdir()):
            if path.is_dir():
                segment = self._new_segment(path.name)
                segment.open_sync(create=False)
                self._segments[path.name] = segment
                log.info("segment opened", extra={"segment": path.name, "end_offset": segment.end})

    def _new_segment(self, name: str) -> Segment:
        return Segment(name, self.root / name, self.config, on_commit=self._committed, on_fsync=self._fsynced,
                       on_corrupt=lambda e: self._corrupt(name, e))

    def _corrupt(self, name: str, error: CorruptData) -> None:
        self.metrics.corrupt_reads.labels(name).inc()
        log.error("corrupt data refused", extra={"segment": name, "start": error.start, "end": error.end,
                                                  "file": error.path})

    def _committed(self, name: str, appends: int, nbytes: int) -> None:
        m = self.metrics
        m.appends.labels(name).inc(appends)
        m.append_bytes.labels(name).inc(nbytes)
        self._update_gauges(self._segments[name])

    def _fsynced(self, seconds: float) -> None:
        self.metrics.fsyncs.inc()
        self.metrics.fsync_seconds.observe(seconds)

    def _watch(self, segment: Segment) -> None:
        """Gauges read live from the segment whenever /metrics is scraped."""
        self.metrics.pending_bytes.labels(segment.name).set_function(lambda: segment.pending_bytes)
        self._update_gauges(segment)
        self._update_corrupt(segment)

    def _update_corrupt(self, segment: Segment) -> None:
        """The corrupt-groups gauge (on open, and as truncation passes ranges); a segment whose state records no
        corrupt range (found on open, or given up since) gets no series."""
        known = segment.state.known_corrupt()
        if segment.state.corrupt or segment.name in self._corrupt_seen:
            self._corrupt_seen.add(segment.name)
            self.metrics.corrupt_groups.labels(segment.name).set(sum(max(1, r.groups) for r in known))

    def corrupt_segments(self) -> dict[str, list[CorruptRange]]:
        """The segments holding corrupt ranges found on open and not given up (GET /ready says so)."""
        return {name: known for name, segment in self._segments.items() if (known := segment.state.known_corrupt())}

    def _update_gauges(self, segment: Segment) -> None:
        info = segment.info()
        self.metrics.segment_bytes.labels(segment.name).set(info.bytes)
        self.metrics.segment_end_offset.labels(segment.name).set(info.end_offset)

    # --- segments ---

    def names(self) -> list[str]:
        return sorted(self._segments)

    def exists(self, name: str) -> bool:
        return name in self._segments

    def segment(self, name: str) -> Segment:
        try:
            return self._segments[name]
        except KeyError:
            raise NoSuchSegment(name) from None

    def info(self, name: str) -> SegmentInfo:
        return self.segment(name).info()

    async def create(self, name: str, *, exist_ok: bool = True) -> SegmentInfo:
        return (await self._get_or_create(name, exist_ok=exist_ok)).info()

    async def _get_or_create(self, name: str, *, exist_ok: bool = True) -> Segment:
        segment = self._segments.get(name)
        if segment is not None:
            if not exist_ok:
                raise SegmentExists(name)
            return segment
        if self._closed:
            raise StoreClosed("store is closed")
        pending = self._creating.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        check_segment_name(name)
        if len(self._segments) >= self.config.max_segments:
            raise StoreLimitExceeded(
                f"creating segment {name!r} would exceed max_segments {self.config.max_segments}"
            )
        future: asyncio.Future[Segment] = asyncio.get_running_loop().create_future()
        self._creating[name] = future
        try:
            segment = self._new_segment(name)
            await asyncio.get_running_loop().run_in_executor(None, segment.open_sync, True)
            segment.start()
            self._segments[name] = segment
            self._watch(segment)
            future.set_result(segment)
            log.info("segment created", extra={"segment": name})
            return segment
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._creating[name]

    # --- appends ---

    async def append(self, name: str, bodies: Sequence[bytes | memoryview], *,
                     writer: WriterCondition | None = None, create: bool = True, events: int | None = None) -> AppendResult:
        """Append events (one frame each) atomically; returns once durable per the fsync policy.

        The bodies are written as they are (no copy): they must not change until this returns. `events`: what
        store/counting.py counts in them (`logport segments`), when the caller knows it; else the store counts.
        """
        limit = self.config.max_frame_size
        for body in bodies:
            if len(body) > limit:
                raise StoreLimitExceeded(
                    f"event of {len(body)} bytes for segment {name!r} exceeds max_frame_size {limit}"
                )
        parts: list[Buffer] = []
        pack = frames.HEADER.pack
        for body in bodies:
            parts.append(pack(frames.EVENT, len(body)))
            parts.append(body)
        return await self._submit_in_order(name, parts, writer, len(bodies) > 1, create, events)

    async def append_framed(self, name: str, framed: bytes | bytearray | memoryview, *,
                            writer: WriterCondition | None = None, create: bool = True) -> AppendResult:
        """Append bytes that are already whole frames (the segment protocol's own Event messages).

        The caller vouches that `framed` is a sequence of whole frames within max_frame_size, and
        that it does not change until this returns (it is written without a copy). Like every
        append it is all-or-nothing across a crash.
        """
        return await self._submit_in_order(name, [framed], writer, True, create, None)

    def submit(self, name: str, parts: list[Buffer], *, writer: WriterCondition | None = None, multi: bool = True,
               create: bool = True, events: int | None = None) -> asyncio.Future[AppendResult]:
        """Queue whole frames given as buffers (the caller vouches for them, as for `append_framed`), without
        the wait, for a caller that makes one future per append and no task (a Forward chunk): queued, or in
        line behind the segment's creation (`create`), before this returns, so calls to one segment are
        stored in their order. `multi`: the frames are one atomic group (a record marks them; not needed for
        one frame without a writer). The future completes as `append` returns, or with what it raises. `events`:
        as for `append`."""
        return self._submit_in_order(name, parts, writer, multi, create, events)

    def submit_framed(self, name: str, framed: bytes | bytearray | memoryview, *,
                      writer: WriterCondition | None = None) -> asyncio.Future[AppendResult]:
        """`append_framed` without the wait, for a caller that must not yield (a transport callback):
        the frames are queued (or in line behind appends waiting for the segment's creation) before
        this returns, so calls are stored in their order. The segment must exist. The future
        completes as `append_framed` returns (see Segment.submit)."""
        return self._submit_in_order(name, [framed], writer, True, False, None)

    def _submit_in_order(self, name: str, parts: list[Buffer], writer: WriterCondition | None, multi: bool,
                         create: bool, events: int | None) -> asyncio.Future[AppendResult]:
        """Queue an append now, or, while its segment is being created, in line behind the appends
        made before it: awaiting the creation, the appends of one connection that came before a
        created segment existed were queued after those that came once it did (a Forward client's
        events 1-2925 of 5000 were stored after 2926-4999)."""
        segment = self._segments.get(name)
        if segment is not None and name not in self._lines:
            return self._submit(segment, parts, writer, multi, events)
        if segment is None and not create:
            raise NoSuchSegment(name)
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        line = self._lines.get(name)
        if line is None:
            line = self._lines[name] = []
            task = asyncio.get_running_loop().create_task(self._open_line(name))
            self._line_tasks.add(task)
            task.add_done_callback(self._line_tasks.discard)
        line.append((parts, writer, multi, events, future))
        return future

    async def _open_line(self, name: str) -> None:
        """Create the segment, then queue the appends in line, in order, in the same step that ends
        the line: an append made after it goes behind them."""
        try:
            segment = await self._get_or_create(name)
        except BaseException as e:
            for *_, future in self._lines.pop(name):
                if future.done():
                    continue
                if isinstance(e, Exception):
                    future.set_exception(e)
                else:  # cancelled (the hub stopping)
                    future.cancel()
            if not isinstance(e, Exception):
                raise
            return
        for parts, writer, multi, events, future in self._lines.pop(name):
            if future.done():  # cancelled while in line
                continue
            try:
                _relay(self._submit(segment, parts, writer, multi, events), future)
            except StoreError as e:  # sealed or closing meanwhile
                future.set_exception(e)

    def _submit(self, segment: Segment, parts: list[Buffer], writer: WriterCondition | None,
                multi: bool = True, events: int | None = None) -> asyncio.Future[AppendResult]:
        future = segment.submit(parts, writer, multi, events)
        future.add_done_callback(lambda f: self._count(segment, f))
        return future

    def _count(self, segment: Segment, future: asyncio.Future[AppendResult]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, StoreWriteFailed):
            self.metrics.write_errors.labels(segment.name).inc()
        elif error is None and future.result().duplicate:
            self.metrics.append_duplicates.labels(segment.name).inc()

    def writer_offset(self, name: str, key: bytes) -> int:
        """The stored offset of a writer (0 for one never seen)."""
        segment = self._segments.get(name)
        return segment.writer_state.offset(key) if segment is not None else 0

    # --- reads ---

    async def read(self, name: str, offset: int, max_bytes: int, *, wait: float = 0.0) -> ReadResult:
        return await self.segment(name).read(offset, max_bytes, wait)

    async def read_frames(self, name: str, offset: int, max_bytes: int, *, wait: float = 0.0) -> ReadResult:
        return await self.segment(name).read_frames(offset, max_bytes, wait)

    async def read_checked(self, name: str, offset: int, max_bytes: int, *, wait: float = 0.0) -> CheckedRead:
        """`read` for a sender that copies nothing itself (Segment.read_checked)."""
        return await self.segment(name).read_checked(offset, max_bytes, wait)

    # --- management ---

    async def seal(self, name: str) -> SegmentInfo:
        return await self.segment(name).seal()

    async def truncate(self, name: str, offset: int) -> SegmentInfo:
        info = await self.segment(name).truncate(offset)
        self._update_gauges(self.segment(name))
        self._update_corrupt(self.segment(name))
        return info

    async def enforce_retention(self) -> None:
        cfg = self.config
        if not cfg.retention_bytes and not cfg.retention_age:
            return
        for segment in list(self._segments.values()):
            cut = segment.retention_cut(cfg.retention_bytes, cfg.retention_age)
            if cut is not None:
                log.info("retention", extra={"segment": segment.name, "start_offset": cut})
                await self.truncate(segment.name, cut)

    async def close(self) -> None:
        self._closed = True
        try:
            for segment in list(self._segments.values()):
                await segment.close()
        finally:
            if self._lock is not None:
                self._lock.release()
