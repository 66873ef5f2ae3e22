"""An append on its way through a segment: what its caller asks (WriterCondition) and gets back
(AppendResult), and the queued form that the commit loop, the writer state and the writer thread share."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_WRITER_KEY = 1024  # the chunk's writer table stores key lengths as uint16

Buffer = bytes | bytearray | memoryview


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


class PendingAppend:
    __slots__ = ("parts", "writer", "future", "size", "multi", "events")

    def __init__(self, parts: list[Buffer], writer: WriterCondition | None, future: asyncio.Future[AppendResult],
                 multi: bool, events: int | None = None) -> None:
        self.parts = parts  # whole frames, as buffers handed to pwritev without joining them
        self.writer = writer
        self.future = future
        self.size = sum(len(p) for p in parts)
        self.multi = multi  # several frames: needs a record that makes it all-or-nothing
        self.events = events  # what store/counting.py counts in its frames, if the caller knows (else counted)


@dataclass(slots=True)
class CommitGroup:
    """Appends taken from the queue together: `accepted` are written as one group commit."""

    batch: list[PendingAppend]  # everything taken, answered now or with the group
    accepted: list[PendingAppend] = field(default_factory=list)
    retries: list[PendingAppend] = field(default_factory=list)  # repeat an append still on its way
    claimed: dict[bytes, int] = field(default_factory=dict)  # writer offsets the group stores


def resolve(p: PendingAppend, result: AppendResult) -> None:
    if not p.future.done():  # a cancelled appender's future is done already
        p.future.set_result(result)


def fail(pendings: Iterable[PendingAppend], error: Exception) -> None:
    for p in pendings:
        if not p.future.done():
            p.future.set_exception(error)
