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
    to the store in the order they were made, each without a task of its own (a Forward chunk's: a task, its
    coroutine and its wake-up were a sizeable part of what a chunk cost): straight to `store.submit_framed` while
    its segment exists, else in line behind the segment's creation, with every later append of the line."""

    __slots__ = ("runtime", "waiting", "task")

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.waiting: collections.deque[tuple[str, bytes, WriterCondition | None, asyncio.Future[AppendResult]]] = \
            collections.deque()
        self.task: asyncio.Task[None] | None = None  # submits `waiting` once their segments exist

    def submit(self, default_segment: str, tag: str, framed: bytes, writer: WriterCondition | None = None
               ) -> asyncio.Future[AppendResult]:
        """Queue whole frames (see `SegmentStore.submit_framed`: the caller vouches for them) in the segment `tag`
        routes to; the future completes once they are durable, or with what the store raised."""
        segment = self.runtime.router.segment_for(tag, default_segment)
        store = self.runtime.store
        if not self.waiting and store.exists(segment):
            return store.submit_framed(segment, framed, writer=writer)
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self.waiting.append((segment, framed, writer, future))
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._submit_waiting())
        return future

    async def _submit_waiting(self) -> None:
        store = self.runtime.store
        try:
            while self.waiting:
                segment, framed, writer, future = self.waiting[0]
                if not store.exists(segment):
                    try:
                        await store.create(segment)
                    except Exception as e:  # bad name, max_segments, a full disk: this append fails, not the line
                        self.waiting.popleft()
                        if not future.done():
                            future.set_exception(e)
                        continue
                self.waiting.popleft()
                if future.done():  # given up by its caller
                    continue
                try:
                    _relay(store.submit_framed(segment, framed, writer=writer), future)
                except StoreError as e:  # sealed, or the store closing
                    future.set_exception(e)
        except BaseException as e:  # cancelled (the hub stopping): nothing still waiting was queued
            for *_, future in self.waiting:
                if not future.done():
                    future.cancel()
            self.waiting.clear()
            if not isinstance(e, Exception):
                raise
        finally:
            self.task = None


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
