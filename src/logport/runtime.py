"""What every listener and output is handed by the hub: config, store, router, metrics."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from logport.config import Config
from logport.metrics import Metrics
from logport.routing import Router
from logport.store import AppendResult, SegmentStore, WriterCondition
from logport.store.appends import Buffer


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
            await store.append(segment, bodies, events=counts[segment])
        elif by_segment:
            await asyncio.gather(*(store.append(segment, bodies, events=counts[segment])
                                   for segment, bodies in by_segment.items()))
        return counts

    async def submit_framed(self, default_segment: str, framed: memoryview,
                            runs: Iterable[tuple[str, int, int, int]]) -> None:
        """`append_routed` for bodies already framed as the store's Event frames, one after another in `framed`:
        runs of (tag, start, end, frames) say which span of it holds each tag's frames. Each segment's frames
        in one append, written as `append_routed` writes the same bodies (the caller vouches for the frames,
        each within max_frame_size, and that `framed` does not change until this returns); returns once all
        are durable."""
        router = self.router
        by_segment: dict[str, tuple[list[Buffer], int]] = {}
        for tag, start, end, frames in runs:
            segment = router.segment_for(tag, default_segment)
            parts, count = by_segment.get(segment, ([], 0))
            parts.append(framed[start:end])
            by_segment[segment] = (parts, count + frames)
        if len(by_segment) == 1:  # the common case: the whole batch in one segment, as it is
            ((segment, (_, count)),) = by_segment.items()
            await self.store.submit(segment, [framed], multi=count > 1)
        elif by_segment:
            await asyncio.gather(*(self.store.submit(segment, parts, multi=count > 1)
                                   for segment, (parts, count) in by_segment.items()))

    def submit_routed(self, default_segment: str, tag: str, parts: list[Buffer],
                      writer: WriterCondition | None = None, frames: int = 1,
                      events: int | None = None) -> asyncio.Future[AppendResult]:
        """Queue `frames` whole frames, given as buffers that must not change until it is answered (see
        `SegmentStore.submit`), in the segment `tag` routes to, as
        `append_routed` routes, without a task (a Forward chunk's task, coroutine and wake-up were a sizeable
        part of what a chunk cost); one connection's appends to a segment are stored in the order made, also
        while it is being created. One frame without a writer gets no atomic-group record, as `store.append`
        stores it. `events`: what the frames hold, as the store counts them (store/counting.py), if known. The
        future completes once they are durable, or with what the store raised."""
        segment = self.router.segment_for(tag, default_segment)
        return self.store.submit(segment, parts, writer=writer, multi=frames > 1, events=events)

    def logger(self, name: str) -> logging.Logger:
        return logging.getLogger(f"logport.{name}")
