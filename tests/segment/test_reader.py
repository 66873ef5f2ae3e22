"""The asyncio SegmentReader's receive path: replies framed in place, frames stitched across replies
(frames.FrameStitcher: tests/store/test_frames.py), reads asked for ahead and put back in order."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport import errors
from logport.clients.segment import SegmentReader, _ClientProtocol
from logport.hub import Hub
from logport.protocols import segment as sp
from logport.store import frames
from logport.store.reader import DirectoryReader
from tests.segment.test_server import hub_config

BIG = _ClientProtocol.IN_PLACE


def stored_events(data_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, body) of every event of segment "s", read from the data directory without the hub."""
    direct = DirectoryReader(str(data_dir))
    try:
        return [(o, bytes(b)) for o, b in direct.iter_events("s")]
    finally:
        direct.close()


def _replies() -> list[sp.Message]:
    return [
        sp.SegmentRead.make("s", 0, False, False, os.urandom(BIG + 17)),  # received in place
        sp.KeepAlive(),
        sp.SegmentRead.make("s", BIG + 17, False, False, b"small"),  # through the sans-IO connection
        sp.SegmentInfoReply("s", 0, 99, False),
        sp.SegmentRead.make("s", BIG + 22, True, True, bytes(range(256)) * (BIG // 128)),
        sp.NoSuchSegment("t"),
    ]


class _Feed:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.lost: list[BaseException] = []
        self.protocol = _ClientProtocol(self.messages.append, self.lost.append)

    def feed(self, data: bytes, cuts: list[int]) -> None:
        """`data` as the loop would hand it over, in pieces ending at `cuts` (and never more than asked)."""
        pos = 0
        for stop in [*sorted(set(cuts)), len(data)]:
            while pos < stop:
                buffer = self.protocol.get_buffer(-1)
                n = min(len(buffer), stop - pos)
                buffer[:n] = data[pos : pos + n]
                self.protocol.buffer_updated(n)
                pos += n


def _normal(message: Any) -> Any:
    if isinstance(message, sp.SegmentRead):
        return (message.segment, message.offset, message.flags, bytes(message.data))
    return message


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4 * BIG), max_size=12))
def test_replies_split_anywhere_come_out_whole(cuts: list[int]) -> None:
    replies = _replies()
    stream = b"".join(sp.encode(m) for m in replies)
    feed = _Feed()
    feed.feed(stream, [c for c in cuts if c < len(stream)])
    assert not feed.lost
    assert [_normal(m) for m in feed.messages] == [_normal(m) for m in replies]
    assert isinstance(feed.messages[0].data, memoryview)  # the large one: no copy


def test_a_reply_over_the_message_limit_is_refused_naming_it() -> None:
    feed = _Feed()
    limit = feed.protocol.conn.limits.max_message_size
    feed.feed(sp.HEADER.pack(sp.SegmentRead.TYPE, limit + 1) + b"\0" * 100, [])
    assert len(feed.lost) == 1 and isinstance(feed.lost[0], errors.LimitExceeded)
    assert "max_message_size" in str(feed.lost[0]) and str(limit + 1) in str(feed.lost[0])
    assert not feed.messages


def test_a_malformed_large_reply_is_a_protocol_error() -> None:
    feed = _Feed()
    body = b"\xff\xff" + b"\0" * BIG  # a segment name longer than the body
    feed.feed(sp.HEADER.pack(sp.SegmentRead.TYPE, len(body)) + body, [])
    assert len(feed.lost) == 1 and isinstance(feed.lost[0], errors.RemoteProtocolError)


def test_frames_held_stay_intact_while_buffers_are_reused() -> None:
    """A reply's buffer is taken again only once nothing refers to it: frames a caller still holds keep
    their bytes while later replies arrive."""
    feed = _Feed()
    held = []
    for k in range(8):
        data = bytes([k]) * (2 * BIG)
        feed.feed(sp.encode(sp.SegmentRead.make("s", k * len(data), False, False, data)), [])
        if k % 2 == 0:
            held.append((k, feed.messages[-1].data))
        feed.messages.clear()
    for k, view in held:
        assert bytes(view) == bytes([k]) * (2 * BIG)


@pytest.mark.parametrize("read_size", [1000, 70_000, 4 << 20])
async def test_reads_ahead_give_every_frame_in_order(tmp_path: Path, read_size: int) -> None:
    """Catch-up asks for READS_AHEAD reads at once; the server answers them concurrently, in replies of up
    to read_reply_max (here smaller than a read, so they interleave): the frames are the store's, in order."""
    config = hub_config(tmp_path)
    config.segment.read_reply_max = 64 * 1024 + 100
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    store = hub.runtime.store  # type: ignore[union-attr]
    try:
        await store.create("s")
        bodies = [os.urandom((i * 7919) % 150_000) for i in range(60)]
        for i in range(0, len(bodies), 7):
            await store.append("s", bodies[i : i + 7])
        async with SegmentReader("127.0.0.1", config.segment.port, read_size=read_size) as reader:
            got = [(o, bytes(b)) for o, b in [x async for x in reader.events("s")]]
            again = [(o, bytes(b)) async for o, b in reader.events("s", got[5][0])]  # the same connection
    finally:
        await hub.stop()
    expect = stored_events(tmp_path / "data")
    assert [b for _, b in got] == bodies
    assert got == expect
    assert again == expect[5:]


@pytest.mark.parametrize("read_size", [1000, 70_000, 4 << 20])
async def test_a_tail_reader_gets_every_event_in_order_and_stays_usable_after_it_stops(tmp_path: Path,
                                                                                      read_size: int) -> None:
    """At the tail the next read is asked for before a reply's events are handed on, in replies smaller
    than a read: every event comes once, in order, and a consumer that stops leaves a reader that answers."""
    config = hub_config(tmp_path)
    config.segment.read_reply_max = 64 * 1024 + 100
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    store = hub.runtime.store  # type: ignore[union-attr]
    bodies = [os.urandom((i * 7919) % 150_000) for i in range(60)]
    try:
        await store.create("s")
        async with SegmentReader("127.0.0.1", config.segment.port, read_size=read_size) as reader:

            async def follow() -> list[tuple[int, bytes]]:
                got: list[tuple[int, bytes]] = []
                async for batch in reader.event_lists("s", follow=True, wait=5.0):
                    assert batch
                    got += [(o, bytes(b)) for o, b in batch]
                    if len(got) >= len(bodies):
                        break
                return got

            task = asyncio.create_task(follow())
            for i in range(0, len(bodies), 7):
                await asyncio.sleep(0.01)
                await store.append("s", bodies[i : i + 7])
            got = await asyncio.wait_for(task, 20)
            assert (await reader.info("s"))[1] == store.info("s").end_offset
    finally:
        await hub.stop()
    expect = stored_events(tmp_path / "data")
    assert [b for _, b in got] == bodies
    assert got == expect


async def test_a_blocking_read_stopped_between_its_replies_closes_the_connection(tmp_path: Path) -> None:
    """BlockingSegmentClient.iter_frames hands on each reply's frames as it comes: stopped before the rest of a
    read's replies (one read, asked alone), it closes the connection, which would be out of step; read whole,
    the connection stays in step."""
    from logport.clients.segment import BlockingSegmentClient

    config = hub_config(tmp_path)
    config.segment.read_reply_max = 1000
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    store = hub.runtime.store  # type: ignore[union-attr]
    try:
        await store.create("s")
        await store.append("s", [bytes([i]) * 300 for i in range(20)])
        end = store.info("s").end_offset

        def read() -> None:
            with BlockingSegmentClient("127.0.0.1", config.segment.port, read_size=end) as client:
                assert len([f for f in client.iter_frames("s", 0, end) if f[1] == frames.EVENT]) == 20
                assert client.list_segments() == ["s"]
                stopped = client.iter_frames("s", 0, end)
                next(stopped)
                stopped.close()
                with pytest.raises(OSError):
                    client.list_segments()

        await asyncio.to_thread(read)
    finally:
        await hub.stop()
