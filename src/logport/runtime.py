"""What every listener and output is handed by the hub: config, store, router, metrics."""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from logport.config import Config
from logport.errors import StoreError
from logport.metrics import Metrics
from logport.routing import Router
from logport.store import AppendResult, SegmentStore, WriterCondition
from logport.store.frames import HEADER_SIZE


class Service(Protocol):
    """A running listener or output."""

    async def close(self) -> None: ...


@dataclass
class Runtime:
    config: Config
    store: SegmentStore
    metrics: Metrics
    router: Router
    hostname: str = field(default_factory=socket.gethostname)
    hub_id: str = ""  # the hub's stable identity (logport.store.identity), made on its first start

    async def append_routed(self, default_segment: str, batches: Iterable[tuple[str, bytes, int]]) -> dict[str, int]:
        """Store every (tag, stored body, events in it) in the segment its tag routes to (`default_segment` when
        no route matches): each segment's bodies in one append, the segments' appends at once. Returns once
        all are durable, with the events stored per segment; raises what the store raised."""
        router = self.router
        by_segment: dict[str, list[bytes]] = {}
        counts: dict[str, int] = {}
        for tag, body, events in batches:
            segment = router.segment_for(tag, default_segment)
            by_segment.setdefault(segment, []).append(body)
            counts[segment] = counts.get(segment, 0) + events
        store = self.store
        if len(by_segment) == 1:  # the common case: no task for gather to make
            ((segment, bodies),) = by_segment.items()
            await store.append(segment, bodies)
        elif by_segment:
            await asyncio.gather(*(store.append(segment, bodies) for segment, bodies in by_segment.items()))
        return counts

    def append_line(self) -> AppendLine:
        """A line of appends for one connection that stores its batches one at a time (see AppendLine)."""
        return AppendLine(self)

    def logger(self, name: str) -> logging.Logger:
        return logging.getLogger(f"logport.{name}")


class AppendLine:
    """One connection's appends of framed batches, routed by tag as `Runtime.append_routed` routes them and handed
    to the store in the order they were made, without a task each (a Forward chunk's: a task, its coroutine and
    its wake-up were a sizeable part of what a chunk cost): straight to `store.submit_framed` while the segment
    exists, else in line behind the segment's creation, with every later append of the line.

    One frame without a writer goes through `store.append`, in a task, as before: `submit_framed` makes every
    append an atomic group, whose record (20 bytes) such a frame does not need, and a Message-mode event without
    a chunk id is not much larger. While such a task has not started, every later append of the line takes a
    task too, so that none overtakes it (tasks start in the order they are made)."""

    __slots__ = ("runtime", "waiting", "task", "unstarted", "tasks")

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.waiting: collections.deque[_Append] = collections.deque()
        self.task: asyncio.Task[None] | None = None  # submits `waiting` once their segments exist
        self.unstarted = 0  # appends in tasks that have not started
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, default_segment: str, tag: str, framed: bytes, writer: WriterCondition | None = None,
               frames: int = 1) -> asyncio.Future[AppendResult]:
        """Queue `frames` whole frames (see `SegmentStore.submit_framed`: the caller vouches for them) in the
        segment `tag` routes to; the future completes once they are durable, or with what the store raised."""
        segment = self.runtime.router.segment_for(tag, default_segment)
        append = _Append(segment, framed, writer, frames == 1 and writer is None)
        if not self.waiting and self.runtime.store.exists(segment):
            return self._submit(append)
        append.future = asyncio.get_running_loop().create_future()
        self.waiting.append(append)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._submit_waiting())
        return append.future

    def _submit(self, append: _Append) -> asyncio.Future[AppendResult]:
        """To the store now, or in a task (see the class); the segment exists."""
        if not append.plain and not self.unstarted:
            future = self.runtime.store.submit_framed(append.segment, append.framed, writer=append.writer)
            if append.future is None:
                return future
            _relay(future, append.future)
            return append.future
        if append.future is None:
            append.future = asyncio.get_running_loop().create_future()
        self.unstarted += 1
        task = asyncio.get_running_loop().create_task(self._append(append))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return append.future

    async def _append(self, append: _Append) -> None:
        self.unstarted -= 1
        store = self.runtime.store
        future = append.future
        assert future is not None
        if future.done():
            return
        try:
            if append.plain:
                result = await store.append(append.segment, [memoryview(append.framed)[HEADER_SIZE:]])
            else:
                result = await store.append_framed(append.segment, append.framed, writer=append.writer)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as e:
            if not future.done():
                future.set_exception(e)
        else:
            if not future.done():
                future.set_result(result)

    async def _submit_waiting(self) -> None:
        store = self.runtime.store
        try:
            while self.waiting:
                append = self.waiting[0]
                future = append.future
                assert future is not None
                if not store.exists(append.segment):
                    try:
                        await store.create(append.segment)
                    except Exception as e:  # bad name, max_segments, a full disk: this append fails, not the line
                        self.waiting.popleft()
                        if not future.done():
                            future.set_exception(e)
                        continue
                self.waiting.popleft()
                if future.done():  # given up by its caller
                    continue
                try:
                    self._submit(append)
                except StoreError as e:  # sealed, or the store closing
                    future.set_exception(e)
        except BaseException as e:  # cancelled (the hub stopping): nothing still waiting was queued
            for append in self.waiting:
                if append.future is not None and not append.future.done():
                    append.future.cancel()
            self.waiting.clear()
            if not isinstance(e, Exception):
                raise
        finally:
            self.task = None


class _Append:
    __slots__ = ("segment", "framed", "writer", "plain", "future")

    def __init__(self, segment: str, framed: bytes, writer: WriterCondition | None, plain: bool) -> None:
        self.segment = segment
        self.framed = framed
        self.writer = writer
        self.plain = plain  # one frame, no writer: store.append's form
        self.future: asyncio.Future[AppendResult] | None = None  # made when it cannot go to the store at once


def _relay(inner: asyncio.Future[AppendResult], outer: asyncio.Future[AppendResult]) -> None:
    """`outer` completes as `inner` does."""

    def done(f: asyncio.Future[AppendResult]) -> None:
        if outer.done():
            return
        if f.cancelled():
            outer.cancel()
        elif (error := f.exception()) is not None:
            outer.set_exception(error)
        else:
            outer.set_result(f.result())

    inner.add_done_callback(done)
