"""The segment listener in a hub, spoken to byte for byte and with logport's own clients."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import os
import signal
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from logport import errors
from logport.batch import encode_batch
from logport.clients import segment as client
from logport.clients.stream import InputLines, SenderInput, SendProgress
from logport.config import Config, StoreConfig
from logport.hub import Hub
from logport.protocols import segment as sp
from logport.store import frames
from logport.store.groups import CHUNK_HEADER_SIZE, COMMIT_SIZE, chunk_header, commit_frame
from logport.store.reader import DirectoryReader
from tests.conftest import free_port
from tests.support import assert_segment_files_whole, fill_the_disk

CID = uuid.UUID(int=0xABC)


def hub_config(tmp_path: Path, **segment: object) -> Config:
    config = Config()
    config.store = StoreConfig(data_dir=str(tmp_path / "data"))
    config.forward.enabled = config.lumberjack.enabled = config.logjam.enabled = False
    config.metrics.enabled = False
    config.segment.port = free_port()
    config.segment.keepalive_interval = 0.05
    for key, value in segment.items():
        setattr(config.segment, key, value)
    return config


@pytest.fixture
async def hub(tmp_path: Path):  # type: ignore[no-untyped-def]
    h = Hub(hub_config(tmp_path), serve_metrics=False)
    await h.start()
    yield h
    await h.stop()


class Peer:
    """A raw connection: exact bytes out, decoded replies in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = sp.Connection(sp.Role.CLIENT)

    @classmethod
    async def open(cls, port: int) -> Peer:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, *messages: sp.Message | bytes) -> None:
        for m in messages:
            self.writer.write(m if isinstance(m, bytes) else sp.encode(m))
        await self.writer.drain()

    async def reply(self, timeout: float = 5.0, *, keepalives: bool = False) -> sp.Message:
        while True:
            event = self.conn.next_event()
            if event is sp.NEED_DATA:
                data = await asyncio.wait_for(self.reader.read(1 << 20), timeout)
                if not data:
                    raise ConnectionError("closed")
                self.conn.receive_data(data)
                continue
            assert isinstance(event, sp.Message)
            if isinstance(event, sp.KeepAlive) and not keepalives:
                continue
            return event

    async def closed(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1 << 20), 5) == b""
        except ConnectionError:
            return True

    async def close(self) -> None:
        self.writer.close()


def port_of(hub: Hub) -> int:
    return hub.config.segment.port


def events_of(hub: Hub, segment: str) -> list[bytes]:
    reader = DirectoryReader(hub.config.store.data_dir)
    return [bytes(body) for _, body in reader.iter_events(segment)]


EV = sp.event_messages([b"one", b"two", b"three"])


async def test_setup_append_ack_and_exactly_once(hub: Hub) -> None:
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "logs"))
    assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
    await peer.send(sp.encode_block(CID, 0, EV))
    assert await peer.reply() == sp.DataAppended(CID, len(EV))
    # a retransmission of the same block: acknowledged, not stored again
    await peer.send(sp.encode_block(CID, 0, EV))
    assert await peer.reply() == sp.DataAppended(CID, len(EV))
    assert events_of(hub, "logs") == [b"one", b"two", b"three"]
    await peer.close()
    # a new connection with the same id learns the stored ack level
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "logs"))
    assert await peer.reply() == sp.AppendSetup("logs", CID, len(EV))
    # a gap is refused
    await peer.send(sp.encode_block(CID, len(EV) + 5, sp.event_messages([b"late"])))
    assert await peer.reply() == sp.WrongConnectionOffset(CID, len(EV), len(EV) + 5)
    assert events_of(hub, "logs") == [b"one", b"two", b"three"]
    await peer.close()


async def test_blocks_go_into_the_store_as_they_arrive_and_in_order(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once its writer is set up, a block is queued in the store by the transport callback that completed
    it, not on its task's first turn of the loop (which comes late while the loop reads many sockets);
    blocks that came before the setup was answered go through their tasks, and the order holds across
    the two ways."""
    from logport.servers.segment import SegmentServerProtocol

    ways: list[bool] = []
    real = SegmentServerProtocol._store_block

    def recording(self, writer, block, before, queued):  # type: ignore[no-untyped-def]
        ways.append(queued is not None)
        return real(self, writer, block, before, queued)

    monkeypatch.setattr(SegmentServerProtocol, "_store_block", recording)
    a, b, c = (sp.event_messages([body]) for body in (b"a", b"bb", b"ccc"))
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "logs"), sp.encode_block(CID, 0, a), sp.encode_block(CID, len(a), b))
    assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
    assert await peer.reply() == sp.DataAppended(CID, len(a))
    assert await peer.reply() == sp.DataAppended(CID, len(a) + len(b))
    await peer.send(sp.encode_block(CID, len(a) + len(b), c), sp.encode_block(CID, 0, a + b))  # and a resend
    replies = {await peer.reply(), await peer.reply()}  # the resend is answered at once, as stored before
    assert replies == {sp.DataAppended(CID, len(a) + len(b)), sp.DataAppended(CID, len(a) + len(b) + len(c))}
    assert ways == [False, False, True, True]
    assert events_of(hub, "logs") == [b"a", b"bb", b"ccc"]
    await peer.close()


async def test_ack_level_survives_a_restart(tmp_path: Path) -> None:
    config = hub_config(tmp_path)
    h = Hub(config, serve_metrics=False)
    await h.start()
    peer = await Peer.open(config.segment.port)
    await peer.send(sp.SetupAppend(CID, "logs"), sp.encode_block(CID, 0, EV))
    assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
    assert await peer.reply() == sp.DataAppended(CID, len(EV))
    await peer.close()
    await h.stop()
    h = Hub(config, serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(config.segment.port)
        await peer.send(sp.SetupAppend(CID, "logs"))
        assert await peer.reply() == sp.AppendSetup("logs", CID, len(EV))
        await peer.close()
    finally:
        await h.stop()


async def test_retransmission_with_other_block_boundaries_stores_only_the_new_part(hub: Hub) -> None:
    a = sp.event_messages([b"a1", b"a2"])
    b = sp.event_messages([b"b1"])
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "logs"), sp.encode_block(CID, 0, a))
    await peer.reply()
    assert await peer.reply() == sp.DataAppended(CID, len(a))
    await peer.send(sp.encode_block(CID, 0, a + b))  # the client re-cut its blocks after a lost ack
    assert await peer.reply() == sp.DataAppended(CID, len(a + b))
    assert events_of(hub, "logs") == [b"a1", b"a2", b"b1"]
    await peer.close()


async def test_split_event_and_several_connection_ids_on_one_connection(hub: Hub) -> None:
    other = uuid.UUID(int=99)
    x = sp.event_messages([b"x" * 100, b"y" * 50])
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "left"), sp.SetupAppend(other, "right"),
                    sp.encode_block(CID, 0, x, split_at=len(x) - 20, fragment=7),
                    sp.encode_block(other, 0, x[:108]), sp.encode_block(other, 108, x[108:], split_at=30))
    replies = []
    while sp.DataAppended(CID, len(x)) not in replies or sp.DataAppended(other, len(x)) not in replies:
        replies.append(await peer.reply())
    assert sp.AppendSetup("left", CID, 0) in replies
    assert sp.AppendSetup("right", other, 0) in replies
    assert events_of(hub, "left") == [b"x" * 100, b"y" * 50]
    assert events_of(hub, "right") == [b"x" * 100, b"y" * 50]
    await peer.close()


async def test_append_before_setup_is_a_protocol_violation(hub: Hub) -> None:
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.encode_block(CID, 0, EV))
    reply = await peer.reply()
    assert isinstance(reply, sp.ProtocolViolation) and "without SetupAppend" in reply.message
    assert await peer.closed()


async def test_garbage_gets_a_protocol_violation_and_the_connection_closes(hub: Hub) -> None:
    peer = await Peer.open(port_of(hub))
    await peer.send(struct.pack(">iI", 4242, 0))
    reply = await peer.reply()
    assert reply == sp.ProtocolViolation("unknown message type 4242")
    assert await peer.closed()


async def test_message_too_large(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, max_event_size=1000), serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(port_of(h))
        await peer.send(sp.SetupAppend(CID, "logs"))
        await peer.reply()
        await peer.send(sp.BeginAppendBlock(CID, 0, 2000), struct.pack(">iI", 0, 1001))
        assert await peer.reply() == sp.MessageTooLarge("event", 1001, "max_event_size", 1000)
        assert await peer.closed()
        peer = await Peer.open(port_of(h))
        await peer.send(struct.pack(">iI", 66, 1 << 24))
        assert await peer.reply() == sp.MessageTooLarge("message", 1 << 24, "max_message_size", (1 << 24) - 1)
    finally:
        await h.stop()


async def test_invalid_names_and_missing_segments(hub: Hub) -> None:
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "../etc"))
    reply = await peer.reply()
    assert isinstance(reply, sp.InvalidSegmentName) and reply.segment == "../etc"
    await peer.send(sp.ReadSegment("nope", 0, 10, 0))
    assert await peer.reply() == sp.NoSuchSegment("nope")
    await peer.send(sp.GetSegmentInfo("nope"))
    assert await peer.reply() == sp.NoSuchSegment("nope")
    await peer.send(sp.SealSegment("nope"))
    assert await peer.reply() == sp.NoSuchSegment("nope")
    await peer.close()


async def test_no_auto_create(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, auto_create=False), serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(port_of(h))
        await peer.send(sp.SetupAppend(CID, "logs"))
        assert await peer.reply() == sp.NoSuchSegment("logs")
        await peer.send(sp.CreateSegment("logs"), sp.SetupAppend(CID, "logs"))
        assert await peer.reply() == sp.SegmentCreated("logs", True)
        assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
    finally:
        await h.stop()


async def test_management(hub: Hub) -> None:
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.CreateSegment("a"))
    assert await peer.reply() == sp.SegmentCreated("a", True)
    await peer.send(sp.CreateSegment("a"))
    assert await peer.reply() == sp.SegmentCreated("a", False)
    await peer.send(sp.CreateSegment("b"))
    await peer.reply()
    await peer.send(sp.ListSegments())
    assert await peer.reply() == sp.SegmentList(("a", "b"))
    await peer.send(sp.SetupAppend(CID, "a"), sp.encode_block(CID, 0, EV))
    await peer.reply()
    await peer.reply()
    await peer.send(sp.GetSegmentInfo("a"))
    info = await peer.reply()
    assert isinstance(info, sp.SegmentInfoReply) and info.start_offset == 0 and not info.sealed
    end = info.end_offset
    await peer.send(sp.TruncateSegment("a", end + 1))
    assert isinstance(await peer.reply(), sp.OperationFailed)
    # reading beyond the end: refused at once, with or without a wait (no long poll for bytes that cannot come)
    for wait_ms, length in [(0, 100), (None, 100), (0, 0)]:
        await peer.send(sp.ReadSegment("a", end + 1, length, wait_ms))
        assert await peer.reply() == sp.OperationFailed(
            "a", f"offset {end + 1} is beyond the end {end} of segment 'a'")
    await peer.send(sp.ReadSegment("a", end, 0, 0))
    assert await peer.reply() == sp.SegmentRead.make("a", end, True, False, b"")
    second = [o for o, _ in DirectoryReader(hub.config.store.data_dir).iter_events("a")][1]
    await peer.send(sp.TruncateSegment("a", second))
    assert await peer.reply() == sp.SegmentTruncated("a", second)
    for length in (100, 0):
        await peer.send(sp.ReadSegment("a", 0, length, 0))
        assert await peer.reply() == sp.SegmentIsTruncated("a", second)
    await peer.send(sp.SealSegment("a"))
    assert await peer.reply() == sp.SegmentSealed("a", end)
    await peer.send(sp.ReadSegment("a", end, 100))
    assert await peer.reply() == sp.SegmentRead.make("a", end, True, True, b"")
    await peer.send(sp.encode_block(CID, len(EV), sp.event_messages([b"more"])))
    assert await peer.reply() == sp.SegmentIsSealed("a")
    await peer.send(sp.SetupAppend(uuid.UUID(int=1), "a"))
    assert await peer.reply() == sp.SegmentIsSealed("a")
    await peer.close()


async def test_read_is_answered_in_capped_replies(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, read_reply_max=1000), serve_metrics=False)
    await h.start()
    try:
        bodies = [bytes([i]) * 300 for i in range(20)]
        await h.runtime.store.append("logs", bodies)
        end = h.runtime.store.info("logs").end_offset
        peer = await Peer.open(port_of(h))
        await peer.send(sp.ReadSegment("logs", 0, 10_000_000, 0))
        data = b""
        while True:
            reply = await peer.reply()
            assert isinstance(reply, sp.SegmentRead) and reply.offset == len(data)
            assert len(reply.data) <= 1000
            data += reply.data
            if reply.at_tail:
                break
        assert len(data) == end
        assert [bytes(b) for _, t, b in frames.iter_frames(data) if t == 0] == bodies
        # a suggested length is honoured exactly, over several replies
        await peer.send(sp.ReadSegment("logs", 0, 2500, 0))
        got = [await peer.reply() for _ in range(3)]
        assert [len(r.data) for r in got] == [1000, 1000, 500]  # type: ignore[union-attr]
        assert not any(r.at_tail for r in got)  # type: ignore[union-attr]
    finally:
        await h.stop()


async def test_a_read_reply_max_above_the_message_size_limit_still_gives_replies_a_client_takes(
        tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, read_reply_max=64 * 1024 * 1024), serve_metrics=False)
    await h.start()
    try:
        bodies = [bytes([i]) * (3_500_000) for i in range(6)]  # 21 MB: more than one message can carry
        await h.runtime.store.append("big", bodies)
        end = h.runtime.store.info("big").end_offset
        # every reply's body fits the limit; the first is filled up to it exactly
        peer = await Peer.open(port_of(h))
        await peer.send(sp.ReadSegment("big", 0, end, 0))
        first = await peer.reply()
        assert isinstance(first, sp.SegmentRead) and not first.at_tail
        assert len(sp.encode(first)) - sp.HEADER_SIZE == sp.MAX_MESSAGE_SIZE
        second = await peer.reply()
        assert isinstance(second, sp.SegmentRead) and second.at_tail and second.offset == len(first.data)
        await peer.close()
        # logport's own client reads the whole segment in one request
        async with client.SegmentReader("127.0.0.1", port_of(h)) as reader:
            reply = await reader.read("big", 0, 32 * 1024 * 1024)
        assert reply.at_tail and len(reply.data) == end
        assert [bytes(b) for _, t, b in frames.iter_frames(reply.data) if t == 0] == bodies
    finally:
        await h.stop()


async def test_tail_read_waits_with_keepalives_then_gets_the_data(hub: Hub) -> None:
    store = hub.runtime.store
    await store.create("logs")
    # format v2: a new segment holds its chunk header; the tail is after it
    tail = store.info("logs").end_offset
    assert tail == CHUNK_HEADER_SIZE
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.ReadSegment("logs", tail, 1000, 5000))
    first = await peer.reply(keepalives=True)
    assert first == sp.KeepAlive()  # keepalive_interval is 0.05 s
    result = await store.append("logs", [b"late event"])
    while isinstance(reply := await peer.reply(keepalives=True), sp.KeepAlive):
        pass
    # the bytes as stored: the append's commit group, its COMMIT frame (chained to the chunk header) and event
    event = frames.frame_events([b"late event"])
    group = commit_frame(tail, chunk_header(0)[1], [event])[0] + event
    assert reply == sp.SegmentRead.make("logs", tail, True, False, group)
    assert result.offset == tail + COMMIT_SIZE
    assert result.end_offset == tail + len(reply.data)  # type: ignore[union-attr]
    # the server's wait runs out: an empty reply at the tail
    await peer.send(sp.ReadSegment("logs", result.end_offset, 1000, 120))
    assert await peer.reply() == sp.SegmentRead.make("logs", result.end_offset, True, False, b"")
    await peer.close()


async def test_a_keepalive_is_echoed(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, token="s3cret"), serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(port_of(h))
        # as Pravega's server does: the same KeepAlive back, also before Authenticate
        for data in (b"", b"ping"):
            await peer.send(sp.KeepAlive(data))
            assert await peer.reply(keepalives=True) == sp.KeepAlive(data)
        await peer.send(sp.Authenticate("s3cret"))
        assert await peer.reply(keepalives=True) == sp.Authenticated()
        # not while the peer does not read what it was sent (a flood would queue without bound)
        (conn,) = h.services["segment"].connections  # type: ignore[attr-defined]
        conn.pause_writing()
        await peer.send(sp.KeepAlive(b"dropped"), sp.ListSegments())
        assert await peer.reply(keepalives=True) == sp.SegmentList(())
        conn.resume_writing()
        await peer.send(sp.KeepAlive(b"again"))
        assert await peer.reply(keepalives=True) == sp.KeepAlive(b"again")
        await peer.close()
    finally:
        await h.stop()


async def test_token(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, token="s3cret"), serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(port_of(h))
        await peer.send(sp.ListSegments())
        assert await peer.reply() == sp.AuthenticationFailed("authentication required")
        assert await peer.closed()
        peer = await Peer.open(port_of(h))
        await peer.send(sp.Authenticate("wrong"))
        assert await peer.reply() == sp.AuthenticationFailed("wrong token")
        peer = await Peer.open(port_of(h))
        await peer.send(sp.Authenticate("s3cret"), sp.ListSegments())
        assert await peer.reply() == sp.Authenticated()
        assert await peer.reply() == sp.SegmentList(())
        with pytest.raises(errors.AuthenticationError):
            await asyncio.to_thread(client.BlockingSegmentClient, "127.0.0.1", port_of(h), token="nope")
        c = await asyncio.to_thread(client.BlockingSegmentClient, "127.0.0.1", port_of(h), token="s3cret")
        assert await asyncio.to_thread(c.list_segments) == []
        c.close()
        async with client.SegmentAppender("127.0.0.1", port_of(h), "t", token="s3cret") as app:
            await app.append(b"authenticated")
        bad = client.SegmentAppender("127.0.0.1", port_of(h), "t", token="nope")
        await bad.start()
        await bad.append(b"x")
        with pytest.raises(errors.AuthenticationError):
            await bad.flush()
        await bad.close(flush=False)
    finally:
        await h.stop()


# --- logport's own clients ---


@pytest.mark.parametrize(("block_size", "pad"), [
    (4096, 0),
    (256 * 1024, 1000),  # blocks of 64 KiB and more: received into the pool's reused buffers
])
async def test_appender_reconnects_and_delivers_exactly_once(hub: Hub, block_size: int, pad: int) -> None:
    app = client.SegmentAppender("127.0.0.1", port_of(hub), "logs", block_size=block_size, linger=0.0005)
    await app.start()
    for i in range(3000):
        await app.append(b"event-%05d" % i + bytes([i % 251]) * pad)
        if i % 500 == 250:
            await asyncio.sleep(0.1)  # reconnect, let some of it go out, then cut the connection
            app.abort_connection()
    await app.close()
    assert app.reconnects >= 5
    assert events_of(hub, "logs") == [b"event-%05d" % i + bytes([i % 251]) * pad for i in range(3000)]
    if pad:
        assert hub.services["segment"].receive_pool.free_bytes > 0  # type: ignore[attr-defined]


async def test_appender_back_pressure(hub: Hub) -> None:
    app = client.SegmentAppender("127.0.0.1", port_of(hub), "logs", max_unacked_bytes=10_000, linger=0)
    await app.start()
    peak = 0
    for _ in range(200):
        await app.append(b"x" * 1000)
        peak = max(peak, app._unacked_bytes)
    await app.close()
    assert peak < 10_000 + 1008
    assert len(events_of(hub, "logs")) == 200


async def test_reader_events_entries_and_follow(hub: Hub) -> None:
    store = hub.runtime.store
    batch = encode_batch("app.web", [(1700000000, 5, {"msg": "hi"}), (1700000001, 0, {"msg": "there"})],
                         {"size": 2, "source": "forward"})
    await store.append("mixed", [batch, b"opaque"])
    async with client.SegmentReader("127.0.0.1", port_of(hub)) as reader:
        got = [(off, idx, e) async for off, idx, e in reader.entries("mixed")]
        assert [e.record for _, _, e in got[:2]] == [{"msg": "hi"}, {"msg": "there"}]  # type: ignore[union-attr]
        assert got[2][2] == b"opaque"
        assert await reader.list_segments() == ["mixed"]

        async def follow() -> list[bytes]:
            # a reader of its own, closed as this returns: the tail read its stopped generator left out answers
            # on that connection, never as the reply to the GetSegmentInfo of `reader` below (3 runs in 70 did)
            out = []
            async with client.SegmentReader("127.0.0.1", port_of(hub)) as follower:
                async for _, body in follower.events("mixed", follow=True, wait=0.2):
                    out.append(bytes(body))
                    if len(out) == 4:
                        return out
            return out

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.3)  # the reader is waiting at the tail (keep-alives flowing)
        await store.append("mixed", [b"x" * 3_000_000])  # bigger than one reply
        await store.append("mixed", [b"after"])
        out = await asyncio.wait_for(task, 10)
        assert out[2:] == [b"x" * 3_000_000, b"after"]
        await store.seal("mixed")
        assert len([b async for _, b in reader.events("mixed", follow=True)]) == 4  # ends at the seal


async def test_blocking_client_matches_the_directory_reader(hub: Hub) -> None:
    store = hub.runtime.store
    for i in range(50):
        await store.append("s1", [b"e%d" % i * (i * 1000 + 1)])
    await store.append("s2", [b"tiny"], writer=None)
    port = port_of(hub)

    def blocking() -> None:
        with client.BlockingSegmentClient("127.0.0.1", port, read_size=10_000) as c:
            assert c.list_segments() == ["s1", "s2"]
            start, end, sealed = c.info("s1")
            direct = DirectoryReader(hub.config.store.data_dir)
            assert (start, end, sealed) == direct.bounds("s1")
            want = [(o, t, bytes(b)) for o, t, b in direct.iter_frames("s1", start, end)]
            assert [(o, t, bytes(b)) for o, t, b in c.iter_frames("s1", start, end)] == want
            # a sub-range on frame boundaries: frames wholly inside it
            mid = want[10][0]
            assert [o for o, _, _ in c.iter_frames("s1", mid, want[20][0])] == [o for o, _, _ in want[10:20]]
            assert [o for o, _, _ in c.iter_frames("s1", mid, want[20][0] + 5)] == [o for o, _, _ in want[10:20]]
            with pytest.raises(errors.NoSuchSegment):
                c.info("missing")
            assert c.create("s3") is True
            # format v2: a new segment holds its chunk header, a store record: that is its end
            assert c.seal("s3") == CHUNK_HEADER_SIZE
            assert c.info("s3") == (0, CHUNK_HEADER_SIZE, True) == direct.bounds("s3")

    await asyncio.to_thread(blocking)


async def send_segment(args: Any, data: bytes) -> str:
    """`logport send segment` in this process: `data` as its stdin (a pipe); the line it ends with."""
    read, write = os.pipe()
    os.write(write, data)  # less than a pipe's buffer
    os.close(write)
    progress = SendProgress()
    try:
        source = SenderInput(InputLines(read), progress, interval=1.0, skip=0)
        return await client.LineAppender(args).send(source, progress)
    finally:
        os.close(read)


async def test_cat_from_server_and_send(hub: Hub) -> None:
    port = port_of(hub)
    parser = __import__("argparse").ArgumentParser()
    client.add_send_arguments(parser)
    args = parser.parse_args(["lines", "--server", f"127.0.0.1:{port}"])
    assert "appended 3 events" in await send_segment(args, b"first line\nsecond\nno newline")
    assert events_of(hub, "lines") == [b"first line", b"second", b"no newline"]
    out = io.StringIO()
    assert await client.cat_from_server(f"127.0.0.1:{port}", "lines", None, False, out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and '"raw":"Zmlyc3QgbGluZQ=="' in lines[0]


async def test_cat_from_server_checks_the_start_offset_as_cat_of_a_directory_does(hub: Hub) -> None:
    store = hub.runtime.store  # type: ignore[union-attr]
    starts = [(await store.append("lines", [b"event %d" % i])).offset for i in range(5)]
    # format v2: the chunk header, then per append a commit group: its COMMIT frame, its event (8 + 7 bytes)
    assert starts == [CHUNK_HEADER_SIZE + COMMIT_SIZE + i * (COMMIT_SIZE + 15) for i in range(5)]
    end = store.info("lines").end_offset
    assert end == starts[-1] + 15
    server = f"127.0.0.1:{port_of(hub)}"
    commits = [start - COMMIT_SIZE for start in starts]  # store records start frames too: cat may start there
    for offset in [0, *commits, *starts, end]:
        out = io.StringIO()
        assert await client.cat_from_server(server, "lines", offset, False, out) == 0
        assert [json.loads(line)["offset"] for line in out.getvalue().splitlines()] == [o for o in starts if o >= offset]
    inside = "is not where a frame starts (use an offset that logport cat printed)"
    for offset, message in [(3, f"offset 3 of segment 'lines' {inside}"),  # inside the chunk header
                            (commits[-1] + 1, f"offset {commits[-1] + 1} of segment 'lines' {inside}"),
                            (starts[-1] + 1, f"offset {starts[-1] + 1} of segment 'lines' {inside}"),
                            (end + 1, f"offset {end + 1} of segment 'lines' is beyond its end {end}")]:
        for follow in ([], ["--follow"]):  # it used to print nothing (or wait for ever) without a word
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "logport.cli", "cat", "--server", server, "lines", "--from", str(offset),
                *follow, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out_bytes, err = await asyncio.wait_for(proc.communicate(), 30)
            assert (proc.returncode, out_bytes, err.decode()) == (2, b"", f"logport: {message}\n")


LINES = [b"line %d" % i for i in range(40)]
TEXT = b"".join(line + b"\n" for line in LINES)
SEND_ID = "00000000-0000-0000-0000-00000000abcd"


@pytest.mark.parametrize(("first", "stored", "refused"), [
    # a run stopped after 15 lines: the second run sends the other 25, once
    (TEXT[: TEXT.index(b"line 15\n")], LINES, None),
    # the whole input twice: nothing stored twice
    (TEXT, LINES, None),
    # the first run's input ended inside a line: the stored level falls inside an event of the whole input
    (b"line 0\nline 1\nli", [b"line 0", b"line 1", b"li"], b"inside line 3"),
    # more stored than this input holds
    (TEXT + b"line 40\n", [*LINES, b"line 40"], b"ends at connection offset 590"),
], ids=["stopped-after-a-line", "whole-input-twice", "stopped-inside-a-line", "input-shorter-than-stored"])
async def test_send_with_a_connection_id_resumes_without_duplicates(
        hub: Hub, first: bytes, stored: list[bytes], refused: bytes | None) -> None:
    server = f"127.0.0.1:{port_of(hub)}"
    parser = __import__("argparse").ArgumentParser()
    client.add_send_arguments(parser)
    assert "appended" in await send_segment(
        parser.parse_args(["lines", "--server", server, "--connection-id", SEND_ID]), first)
    # the second run, of the real command, over the whole input
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "logport.cli", "send", "segment", "lines", "--server", server,
        "--connection-id", SEND_ID, stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(TEXT), 60)
    assert b"Traceback" not in err, err.decode()
    if refused is None:
        assert proc.returncode == 0, err.decode()
    else:
        assert proc.returncode == 2 and refused in err and b"nothing appended" in err, err.decode()
    assert events_of(hub, "lines") == stored


async def test_cat_from_server_follow_stops_quietly_on_ctrl_c(hub: Hub) -> None:
    one = await hub.runtime.store.append("lines", [b"one"])  # type: ignore[union-attr]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "logport.cli", "cat", "--server", f"127.0.0.1:{port_of(hub)}", "lines", "--follow",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert b'"offset":%d,' % one.offset in await asyncio.wait_for(proc.stdout.readline(), 30)
        await hub.runtime.store.append("lines", [b"two"])  # type: ignore[union-attr]
        assert b"dHdv" in await asyncio.wait_for(proc.stdout.readline(), 30)  # base64 of "two"
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode()


async def test_a_following_reader_reconnects_across_a_hub_restart(tmp_path: Path) -> None:
    config = hub_config(tmp_path)
    h = Hub(config, serve_metrics=False)
    await h.start()
    await h.runtime.store.append("lines", [b"before"])  # type: ignore[union-attr]
    got: asyncio.Queue[bytes] = asyncio.Queue()

    async def follow() -> None:
        async with client.SegmentReader("127.0.0.1", config.segment.port, timeout=30.0) as reader:
            async for _, body in reader.events("lines", follow=True, wait=1.0):
                await got.put(bytes(body))

    task = asyncio.create_task(follow())
    try:
        assert await asyncio.wait_for(got.get(), 10) == b"before"
        await h.stop()
        await asyncio.sleep(0.5)  # the reader finds nobody listening for a while
        h = Hub(config, serve_metrics=False)
        await h.start()
        await h.runtime.store.append("lines", [b"after"])  # type: ignore[union-attr]
        assert await asyncio.wait_for(got.get(), 10) == b"after"  # from where it was: nothing twice
        assert got.empty()
    finally:
        task.cancel()
        await h.stop()


async def test_idle_connections_are_closed(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path, idle_timeout=0.2), serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(port_of(h))
        assert await peer.closed()
    finally:
        await h.stop()


# --- TLS, the segment limit, back-pressure ---


def self_signed(tmp_path: Path) -> tuple[str, str]:
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


async def test_tls(tmp_path: Path) -> None:
    from logport.config import TLSConfig
    from logport.tls import client_context

    cert, key = self_signed(tmp_path)
    h = Hub(hub_config(tmp_path, tls=TLSConfig(cert=cert, key=key)), serve_metrics=False)
    await h.start()
    try:
        ctx = client_context(ca=cert)
        async with client.SegmentAppender("127.0.0.1", port_of(h), "secure", ssl=ctx) as app:
            await app.append_many([b"over", b"tls"])
        c = await asyncio.to_thread(client.BlockingSegmentClient, "127.0.0.1", port_of(h), ssl=ctx)
        start, end, _ = await asyncio.to_thread(c.info, "secure")
        frames_read = await asyncio.to_thread(lambda: [bytes(b) for _, t, b in c.iter_frames("secure", start, end)
                                                       if t == 0])
        c.close()
        assert frames_read == [b"over", b"tls"]
        # a plaintext client gets nowhere (the handshake fails), and the server carries on
        peer = await Peer.open(port_of(h))
        await peer.send(sp.ListSegments())
        assert await peer.closed()
    finally:
        await h.stop()


async def test_segment_limit_is_an_operation_failed_reply(tmp_path: Path) -> None:
    config = hub_config(tmp_path)
    config.store.max_segments = 1
    h = Hub(config, serve_metrics=False)
    await h.start()
    try:
        peer = await Peer.open(port_of(h))
        await peer.send(sp.CreateSegment("first"), sp.CreateSegment("second"), sp.SetupAppend(CID, "third"))
        assert await peer.reply() == sp.SegmentCreated("first", True)
        for name in ("second", "third"):
            reply = await peer.reply()
            assert isinstance(reply, sp.OperationFailed) and reply.segment == name
            assert "max_segments 1" in reply.message
        await peer.send(sp.ListSegments())  # the connection is still fine
        assert await peer.reply() == sp.SegmentList(("first",))
    finally:
        await h.stop()


def hold_appends(store: Any) -> tuple[asyncio.Event, Any]:
    """Make the store's submit_framed wait for the returned event before it queues anything (a store
    behind its clients); the real submit_framed, to put back."""
    gate = asyncio.Event()
    real_submit = store.submit_framed

    def slow_submit(*args, **kwargs):  # type: ignore[no-untyped-def]
        async def later():  # type: ignore[no-untyped-def]
            await gate.wait()
            return await real_submit(*args, **kwargs)

        return asyncio.ensure_future(later())

    store.submit_framed = slow_submit
    return gate, real_submit


async def test_server_stops_reading_while_the_store_is_behind(tmp_path: Path) -> None:
    limit = 64 * 1024
    h = Hub(hub_config(tmp_path, max_pending_bytes=limit), serve_metrics=False)
    await h.start()
    store = h.runtime.store  # type: ignore[union-attr]
    gate, real_submit = hold_appends(store)
    try:
        peer = await Peer.open(port_of(h))
        await peer.send(sp.SetupAppend(CID, "logs"))
        assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
        bodies = [i.to_bytes(4, "big") * 2500 for i in range(400)]  # 400 blocks of 10 kB: 4 MB
        offset = 0
        for body in bodies:
            block = sp.event_messages([body])
            peer.writer.write(sp.encode_block(CID, offset, block))  # no drain: the kernel buffers what it can
            offset += len(block)
        server = h.services["segment"]
        await asyncio.sleep(0.5)
        (conn,) = server.connections  # type: ignore[attr-defined]
        # paused: what it holds is the limit plus at most one read's worth, far from all of it
        assert conn.reading_paused
        assert limit < conn.pending_bytes <= limit + 512 * 1024 < offset
        gate.set()
        await peer.writer.drain()
        while (reply := await peer.reply()) != sp.DataAppended(CID, offset):
            assert isinstance(reply, sp.DataAppended)
        assert not conn.reading_paused and conn.pending_bytes == 0
        assert events_of(h, "logs") == bodies
    finally:
        gate.set()
        store.submit_framed = real_submit  # type: ignore[method-assign]
        await h.stop()


async def test_server_stops_reading_all_connections_over_the_listeners_budget(tmp_path: Path) -> None:
    """segment.max_total_pending_bytes holds for the listener's connections together: each is far under its
    own max_pending_bytes, yet all pause once the store is behind on what they sent together, and all read
    again once it has caught up (one whose own appends are all answered included)."""
    limit = 64 * 1024
    h = Hub(hub_config(tmp_path, max_total_pending_bytes=limit), serve_metrics=False)
    await h.start()
    store = h.runtime.store  # type: ignore[union-attr]
    gate, real_submit = hold_appends(store)
    server = h.services["segment"]
    try:
        peers = [await Peer.open(port_of(h)) for _ in range(3)]
        cids = [uuid.UUID(int=i + 1) for i in range(3)]
        for peer, cid, name in zip(peers, cids, ("a", "b", "c"), strict=True):
            await peer.send(sp.SetupAppend(cid, name))
            assert await peer.reply() == sp.AppendSetup(name, cid, 0)
        sent: dict[str, list[bytes]] = {}
        ends = []
        for k, (peer, cid, name) in enumerate(zip(peers, cids, ("a", "b", "c"), strict=True)):
            count = 1 if name == "c" else 400  # c: one block, answered long before a and b are
            sent[name] = [bytes([k]) + i.to_bytes(4, "big") * 2500 for i in range(count)]  # 10 kB blocks
            offset = 0
            for body in sent[name]:
                block = sp.event_messages([body])
                peer.writer.write(sp.encode_block(cid, offset, block))  # no drain: the kernel buffers what it can
                offset += len(block)
            ends.append(offset)
            await asyncio.sleep(0.3)
        conns = list(server.connections)  # type: ignore[attr-defined]
        assert len(conns) == 3
        # every connection paused, each far under its own 32 MiB; together the limit plus a read's worth each
        assert all(c.reading_paused and c.pending_bytes < 4 * 1024 * 1024 for c in conns)
        assert limit < server.pending_bytes <= limit + 3 * 512 * 1024  # type: ignore[attr-defined]
        assert server.paused == set(conns)  # type: ignore[attr-defined]
        gate.set()
        for peer, cid, end in zip(peers, cids, ends, strict=True):
            await peer.writer.drain()
            while (reply := await peer.reply()) != sp.DataAppended(cid, end):
                assert isinstance(reply, sp.DataAppended)
        assert not any(c.reading_paused for c in conns)
        assert server.pending_bytes == 0 and not server.paused  # type: ignore[attr-defined]
        for name, bodies in sent.items():
            assert events_of(h, name) == bodies
    finally:
        gate.set()
        store.submit_framed = real_submit  # type: ignore[method-assign]
        await h.stop()


async def test_block_buffers_are_reused_once_stored_and_what_was_stored_stays_intact(hub: Hub) -> None:
    """Blocks of 64 KiB and more are received into buffers that are taken again once the store has
    written them: two appenders' distinct events, many blocks in flight, all stored as sent."""
    server = hub.services["segment"]
    pool = server.receive_pool  # type: ignore[attr-defined]
    lent: list[int] = []
    real_take = pool.take

    def take(n: int):  # type: ignore[no-untyped-def]
        view = real_take(n)
        lent.append(id(view.obj))
        return view

    pool.take = take
    sent: dict[str, list[bytes]] = {"a": [], "b": []}

    async def appender(segment: str) -> None:
        async with client.SegmentAppender("127.0.0.1", port_of(hub), segment, block_size=256 * 1024,
                                          linger=0.0005) as app:
            for i in range(400):
                body = f"{segment}{i:05d}".encode() * (1000 + i % 7)
                sent[segment].append(body)
                await app.append(body)
                if i % 100 == 99:
                    # every block so far acknowledged: the next ones can only take buffers again, however
                    # slowly a loaded machine's store answers (all blocks in flight at once reuse none)
                    await app.flush()

    await asyncio.gather(appender("a"), appender("b"))
    assert len(lent) > len(set(lent)) > 1  # buffers were taken again
    assert pool.free_bytes > 0
    assert events_of(hub, "a") == sent["a"] and events_of(hub, "b") == sent["b"]


async def test_a_block_whose_append_is_cancelled_keeps_its_buffer_from_the_pool(
        hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store may still write a block whose append was cancelled (the hub stopping): its buffer
    must not go back to the pool, where the next block would overwrite it."""
    from logport.servers.segment import SegmentServerProtocol

    started = asyncio.Event()

    async def never_answered(self, writer, block, before, queued):  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(SegmentServerProtocol, "_store_and_ack", never_answered)
    pool = hub.services["segment"].receive_pool  # type: ignore[attr-defined]
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "logs"))
    assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
    await peer.send(sp.encode_block(CID, 0, sp.event_messages([b"x" * 100_000])))
    await asyncio.wait_for(started.wait(), 5)
    (conn,) = hub.services["segment"].connections  # type: ignore[attr-defined]
    (task,) = conn.writers[CID].inflight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.free_bytes == 0
    await peer.close()


async def test_count_limits_per_connection(hub: Hub) -> None:
    limits = hub.runtime.config.segment
    await hub.runtime.store.create("logs")  # type: ignore[union-attr]
    peer = await Peer.open(port_of(hub))
    limit = limits.max_reads_per_connection
    await peer.send(*[sp.ReadSegment("logs", 0, 100, 5000) for _ in range(limit + 1)])
    while isinstance(reply := await peer.reply(), sp.SegmentRead):
        pass
    assert reply == sp.ProtocolViolation(f"{limit + 1} outstanding ReadSegment requests exceed"
                                         f" max_reads_per_connection {limit}")
    assert await peer.closed()
    peer = await Peer.open(port_of(hub))
    limit = limits.max_writers_per_connection
    await peer.send(b"".join(sp.encode(sp.SetupAppend(uuid.UUID(int=i), "logs")) for i in range(limit + 1)))
    while isinstance(reply := await peer.reply(), sp.AppendSetup):
        pass
    assert reply == sp.ProtocolViolation(f"{limit + 1} connection ids exceed max_writers_per_connection {limit}")


# --- what the client sends back is quoted briefly; a dead control task closes its connection ---

# whole Strings the client may send; quoted in full, the reason would not fit in one
HUGE_NAMES = {"slashes": "/" * 65_500, "NULs": "\x00" * 30_000}  # a NUL is 2 bytes on the wire, 4 in a repr
NAMED_REQUESTS = {
    "SetupAppend": lambda name: sp.SetupAppend(CID, name), "CreateSegment": sp.CreateSegment,
    "SealSegment": sp.SealSegment, "TruncateSegment": lambda name: sp.TruncateSegment(name, 0),
    "ReadSegment": lambda name: sp.ReadSegment(name, 0, 10, 0),
}


@pytest.mark.parametrize("name", list(HUGE_NAMES))
@pytest.mark.parametrize("request_", list(NAMED_REQUESTS))
async def test_a_huge_invalid_name_is_quoted_briefly(hub: Hub, request_: str, name: str) -> None:
    segment = HUGE_NAMES[name]
    peer = await Peer.open(port_of(hub))
    await peer.send(NAMED_REQUESTS[request_](segment))
    reply = await peer.reply()
    assert isinstance(reply, sp.InvalidSegmentName) and reply.segment == segment
    assert f"{len(segment.encode())} bytes exceeds 250" in reply.reason
    assert f"({len(segment)} characters)" in reply.reason and len(reply.reason) < 1000
    await peer.send(sp.ListSegments())  # the connection is still fine
    assert await peer.reply() == sp.SegmentList(())
    await peer.close()


async def test_a_reply_that_cannot_be_encoded_closes_the_connection(
        hub: Hub, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    store = hub.runtime.store  # type: ignore[union-attr]
    await store.create("logs")
    real_info = store.info
    monkeypatch.setattr(store, "info", lambda name: dataclasses.replace(real_info(name), end_offset=1 << 63))
    caplog.set_level(logging.ERROR, logger="logport.segment")
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.GetSegmentInfo("logs"))
    assert await peer.closed()
    (record,) = [r for r in caplog.records if "cannot be encoded" in r.getMessage()]
    assert record.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert "SegmentInfoReply.end_offset" in record.error  # type: ignore[attr-defined]
    monkeypatch.undo()
    peer = await Peer.open(port_of(hub))  # the listener carries on
    await peer.send(sp.ListSegments())
    assert await peer.reply() == sp.SegmentList(("logs",))
    await peer.close()


async def test_a_failed_control_task_closes_its_connection_and_drops_the_blocks_waiting_on_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = Hub(hub_config(tmp_path), serve_metrics=False)
    await h.start()
    store = h.runtime.store  # type: ignore[union-attr]

    async def broken_create(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    store.create = broken_create  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, logger="logport.segment")
    try:
        peer = await Peer.open(port_of(h))
        await peer.send(sp.SetupAppend(CID, "logs"), sp.encode_block(CID, 0, EV))
        assert await peer.closed()
        (record,) = [r for r in caplog.records if "control task failed" in r.getMessage()]
        assert record.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
        assert "disk on fire" in str(record.exc_info[1])
    finally:
        await asyncio.wait_for(h.stop(), 5)


async def test_hub_closes_promptly_while_a_setup_append_is_unanswered(tmp_path: Path) -> None:
    h = Hub(hub_config(tmp_path), serve_metrics=False)
    await h.start()
    store = h.runtime.store  # type: ignore[union-attr]
    entered = asyncio.Event()

    async def stuck_create(*args: object, **kwargs: object) -> None:
        entered.set()
        await asyncio.Event().wait()

    store.create = stuck_create  # type: ignore[method-assign]
    peer = await Peer.open(port_of(h))
    # the block waits for the setup's answer, which never comes
    await peer.send(sp.SetupAppend(CID, "logs"), sp.encode_block(CID, 0, EV))
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.sleep(0.1)  # the block is in too
    await asyncio.wait_for(h.stop(), 5)
    assert await peer.closed()  # and nothing was acknowledged


# --- a full disk: nothing acknowledged, a clear error, the retry stored once ---


async def test_disk_full_gets_operation_failed_not_data_appended_and_the_resent_block_is_stored_once(
        hub: Hub, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING, logger="logport.segment")
    peer = await Peer.open(port_of(hub))
    await peer.send(sp.SetupAppend(CID, "logs"))
    assert await peer.reply() == sp.AppendSetup("logs", CID, 0)
    before = sp.event_messages([b"before"])
    await peer.send(sp.encode_block(CID, 0, before))
    assert await peer.reply() == sp.DataAppended(CID, len(before))

    fill_the_disk(monkeypatch)
    await peer.send(sp.encode_block(CID, len(before), EV))
    reply = await peer.reply()
    assert isinstance(reply, sp.OperationFailed), reply  # no DataAppended: the client keeps the block
    assert reply.segment == "logs" and "No space left on device" in reply.message
    (line,) = [r for r in caplog.records if r.getMessage() == "append refused"]
    assert line.segment == "logs" and line.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert "No space left on device" in line.error  # type: ignore[attr-defined]

    monkeypatch.undo()  # space returns: the client sets up again, finds its ack level unmoved, resends
    await peer.send(sp.SetupAppend(CID, "logs"))
    assert await peer.reply() == sp.AppendSetup("logs", CID, len(before))
    await peer.send(sp.encode_block(CID, len(before), EV), sp.encode_block(CID, len(before), EV))
    assert await peer.reply() == sp.DataAppended(CID, len(before) + len(EV))
    assert await peer.reply() == sp.DataAppended(CID, len(before) + len(EV))  # the second copy: not stored
    await peer.close()
    assert events_of(hub, "logs") == [b"before", b"one", b"two", b"three"]
    assert_segment_files_whole(hub, "logs")


async def test_the_appender_retries_through_a_full_disk_and_delivers_exactly_once(
        hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    store = hub.runtime.store  # type: ignore[union-attr]
    fill_the_disk(monkeypatch)
    app = client.SegmentAppender("127.0.0.1", port_of(hub), "logs", block_size=256, linger=0,
                                 reconnect_delay=0.01, max_reconnect_delay=0.05)
    await app.start()
    for i in range(100):
        await app.append(b"event-%03d" % i)
    for _ in range(500):  # each OperationFailed is retried: a new session, the blocks sent again
        if app.reconnects >= 3:
            break
        await asyncio.sleep(0.01)
    assert app.reconnects >= 3 and app.ack_level == 0  # nothing acknowledged while the disk is full
    assert store.metrics.registry.get_sample_value("logport_store_write_errors_total", {"segment": "logs"}) >= 3

    monkeypatch.undo()
    await asyncio.wait_for(app.flush(), 5)
    await app.close()
    assert events_of(hub, "logs") == [b"event-%03d" % i for i in range(100)]
    assert_segment_files_whole(hub, "logs")


async def test_an_appender_backs_off_from_a_full_disk_and_gives_up_after_retry_for(
        hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session the server sets up only to refuse every block is no working session: the back-off grows
    and retry_for runs out (they were reset each time: a reconnect and a resend of everything unacknowledged
    every reconnect_delay, for as long as the disk stays full)."""
    fill_the_disk(monkeypatch)
    app = client.SegmentAppender("127.0.0.1", port_of(hub), "logs", linger=0, reconnect_delay=0.01,
                                 max_reconnect_delay=0.16, retry_for=0.8)
    await app.start()
    await app.append(b"never stored")
    with pytest.raises(errors.ServerUnavailable, match=r"kept failing: .*No space left.*; gave up after 0.8 s"):
        await asyncio.wait_for(app.flush(), 10)
    # 0.01 + 0.02 + 0.04 + 0.08 + 0.16 + 0.16 ... reach 0.8 s after about 8 sessions (about 80 without it)
    assert 3 <= app.reconnects <= 12
    await app.close()


async def test_an_appender_counts_retry_for_from_the_first_refusal(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """A network failure long ago, then a quiet session, then a full disk: the refusals are retried for
    retry_for from the first of them (the clock of the old failure gave up at the first refusal)."""
    app = client.SegmentAppender("127.0.0.1", port_of(hub), "logs", linger=0, reconnect_delay=0.01,
                                 max_reconnect_delay=0.05, retry_for=0.5)
    await app.start()
    await app.append(b"a")
    await app.flush()
    app.abort_connection()  # a network failure: it reconnects at once
    await asyncio.sleep(0.8)  # then quiet for longer than retry_for
    fill_the_disk(monkeypatch)
    await app.append(b"b")
    await asyncio.sleep(0.25)
    assert app.reconnects >= 3  # still retrying the refused block
    monkeypatch.undo()
    await asyncio.wait_for(app.flush(), 5)
    await app.close()
    assert events_of(hub, "logs") == [b"a", b"b"]


def test_the_listener_has_malloc_keep_the_memory_of_freed_reads() -> None:
    """A read's 2 MiB pieces come from malloc's heap, not a mapping of their own per piece (glibc)."""
    import ctypes

    from logport.servers.segment import keep_freed_memory

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    assert keep_freed_memory()
    mapped = libc.mallinfo2().hblkhd
    piece = bytes(3 * 1024 * 1024)
    assert libc.mallinfo2().hblkhd < mapped + len(piece)  # from the heap: no mapping of its own
    del piece
