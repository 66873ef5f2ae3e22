"""Read replies written to the socket by the listener (servers/segment.py `_send_direct`) from checked views
of the chunk files' mappings (store/verified.py `checked_view`): the same bytes as the store's reads, each
range checked once per read pass (a check counts for one second), corruption refused, other replies held until a reply is out, and a reply whose chunk
is truncated away while it waits for the socket cut off with the connection, never sent from a recycled file."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from logport import errors
from logport.config import Config, StoreConfig
from logport.errors import CorruptData
from logport.hub import Hub
from logport.protocols import segment as sp
from logport.servers import segment as listener
from logport.store import SegmentStore, groups, verified
from logport.store.files import SEGMENTS_DIR, chunk_path
from tests.conftest import free_port

MiB = 1024 * 1024


def bodies(count: int, size: int) -> list[bytes]:
    return [i.to_bytes(4, "big") + os.urandom(size - 4) for i in range(count)]


async def open_store(data_dir: Path, **store: object) -> SegmentStore:
    config = StoreConfig(data_dir=str(data_dir))
    for key, value in store.items():
        setattr(config, key, value)
    return await SegmentStore.open(config)


async def test_a_checked_view_is_the_stored_bytes_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path)
    try:
        for _ in range(3):  # three groups
            await store.append("s", bodies(20, 5000))
        end = store.info("s").end_offset
        expected = chunk_path(tmp_path / SEGMENTS_DIR / "s", 0).read_bytes()[:end]  # one chunk, base 0
        checks: list[int] = []
        verify = groups.verify_span
        monkeypatch.setattr(groups, "verify_span", lambda data, start, starts: checks.append(start)
                            or verify(data, start, starts))
        segment = store.segment("s")
        offset = 0
        while offset < end:
            read = await segment.read_checked(offset, 7000)
            assert isinstance(read.data, memoryview) and read.stored()
            assert bytes(read.data) == expected[offset : offset + len(read.data)]
            offset += len(read.data)
        assert read.at_tail and not read.end_of_segment
        assert len(checks) == 3  # each group once, though read in pieces of 7000 bytes
        again = await segment.read_checked(0, end)  # the range kept is the last read's: checked again
        assert len(checks) == 4 and bytes(again.data) == expected[: len(again.data)]
        monkeypatch.setattr(verified, "CHECK_REUSE", 0.0)  # a check older than CHECK_REUSE is made again
        for _ in range(2):
            await segment.read_checked(0, 7000)
        assert len(checks) == 6
    finally:
        await store.close()


async def test_a_group_changed_on_disk_before_it_is_read_is_refused_and_the_rest_served(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        for _ in range(3):
            await store.append("s", bodies(10, 3000))
        layout = store.segment("s").verified.last  # type: ignore[union-attr]
        assert layout is not None
        bad_start, bad_end = layout.groups[1], layout.groups[2]
        with open(chunk_path(tmp_path / SEGMENTS_DIR / "s", 0), "r+b") as f:
            f.seek(bad_start + groups.COMMIT_SIZE + 100)
            byte = f.read(1)
            f.seek(bad_start + groups.COMMIT_SIZE + 100)
            f.write(bytes([byte[0] ^ 0x20]))
        segment = store.segment("s")
        first = await segment.read_checked(0, 10 * MiB)
        assert len(first.data) == bad_start and not first.at_tail  # what is sound before it is served
        with pytest.raises(CorruptData) as caught:
            await segment.read_checked(bad_start, 10 * MiB)
        assert (caught.value.start, caught.value.end) == (bad_start, bad_end)
        assert "checksum mismatch" in str(caught.value)
        after = await segment.read_checked(bad_end, 10 * MiB)
        assert after.at_tail and bytes(after.data) == (await store.read("s", bad_end, 10 * MiB)).data
    finally:
        await store.close()


def hub_config(tmp_path: Path, **store: object) -> Config:
    config = Config()
    config.store = StoreConfig(data_dir=str(tmp_path / "data"))
    for key, value in store.items():
        setattr(config.store, key, value)
    config.forward.enabled = config.lumberjack.enabled = config.logjam.enabled = False
    config.metrics.enabled = False
    config.segment.port = free_port()
    return config


def slow_peer(port: int) -> socket.socket:
    """A connection that takes little at a time: the hub's replies wait for its socket."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


async def receive_all(sock: socket.socket, timeout: float = 10.0) -> bytes:
    loop = asyncio.get_running_loop()
    got = bytearray()
    while True:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), timeout)
        except (ConnectionError, TimeoutError):
            break
        if not data:
            break
        got += data
    return bytes(got)


def replies(data: bytes) -> tuple[list[sp.Message], sp.Connection]:
    """The whole messages in `data`, and the connection that holds what follows them."""
    conn = sp.Connection(sp.Role.CLIENT)
    conn.receive_data(data)
    out = []
    while (event := conn.next_event()) is not sp.NEED_DATA:
        assert isinstance(event, sp.Message)
        out.append(event)
    return out, conn


async def wait_for_full_socket(hub: Hub) -> listener.SegmentServerProtocol:
    for _ in range(500):
        for conn in hub.services["segment"].connections:  # type: ignore[attr-defined]
            if conn._socket_full:
                return conn  # type: ignore[no-any-return]
        await asyncio.sleep(0.01)
    raise AssertionError("no read reply waited for the socket")


async def test_replies_made_while_a_read_reply_waits_for_the_socket_follow_it(tmp_path: Path) -> None:
    hub = Hub(hub_config(tmp_path), serve_metrics=False)
    await hub.start()
    try:
        assert hub.runtime is not None
        events = bodies(64, 64 * 1024)
        await hub.runtime.store.append("s", events)
        end = hub.runtime.store.info("s").end_offset
        sock = slow_peer(hub.config.segment.port)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, sp.encode(sp.ReadSegment("s", 0, end, 0)))
        await wait_for_full_socket(hub)
        # a KeepAlive is not echoed while the peer does not read; a request is answered after the reply
        # being sent (replies are whole messages: never within one)
        await loop.sock_sendall(sock, sp.encode(sp.KeepAlive(b"dropped")) + sp.encode(sp.ListSegments()))
        await asyncio.sleep(0.1)
        got, _ = replies(await receive_all(sock, timeout=1.0))
        sock.close()
        reads = [m for m in got if isinstance(m, sp.SegmentRead)]
        assert [m for m in got if not isinstance(m, sp.SegmentRead)] == [sp.SegmentList(("s",))]  # between replies
        assert b"".join(bytes(m.data) for m in reads) == (await hub.runtime.store.read("s", 0, end)).data
        assert reads[-1].at_tail
    finally:
        await hub.stop()


async def test_a_reply_whose_chunk_is_truncated_away_meanwhile_is_cut_off_with_the_connection(tmp_path: Path) -> None:
    hub = Hub(hub_config(tmp_path, chunk_size=12 * MiB, max_frame_size=MiB), serve_metrics=False)
    await hub.start()
    try:
        assert hub.runtime is not None
        store = hub.runtime.store
        for _ in range(14):
            await store.append("s", bodies(16, 64 * 1024))
        second_chunk = store.segment("s").reader.bases[1]  # type: ignore[union-attr]
        expected = chunk_path(tmp_path / "data" / SEGMENTS_DIR / "s", 0).read_bytes()[:second_chunk]
        sock = slow_peer(hub.config.segment.port)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, sp.encode(sp.ReadSegment("s", 0, second_chunk, 0)))
        await wait_for_full_socket(hub)
        await store.truncate("s", second_chunk)  # the first chunk is dropped (its file recycled)
        got = await receive_all(sock)
        sock.close()
        whole, conn = replies(got)
        assert all(isinstance(m, sp.SegmentRead) for m in whole)
        sent = b"".join(bytes(m.data) for m in whole if isinstance(m, sp.SegmentRead))
        assert len(sent) < second_chunk and expected.startswith(sent)  # what came before the cut is the stored bytes
        conn.receive_data(b"")
        with pytest.raises(errors.RemoteProtocolError):  # the stream ends in the middle of a reply
            conn.next_event()
    finally:
        await hub.stop()


async def test_chunks_before_the_last_are_walked_through_their_mapping_and_corruption_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(tmp_path, chunk_size=MiB, max_frame_size=256 * 1024)
    for _ in range(24):  # groups of 240 kB, four to a chunk
        await store.append("s", bodies(4, 60_000))
    bases = store.segment("s").reader.bases  # type: ignore[union-attr]
    end = store.info("s").end_offset
    await store.close()
    assert len(bases) >= 4
    seg_dir = tmp_path / SEGMENTS_DIR / "s"
    stored = b"".join(chunk_path(seg_dir, base).read_bytes()[: stop - base]
                      for base, stop in zip(bases, [*bases[1:], end], strict=True))
    second = groups.walk_chunk(chunk_path(seg_dir, bases[1]).read_bytes()[: bases[2] - bases[1]], bases[1])
    bad_start, bad_end = second.groups[1], second.groups[2]
    with open(chunk_path(seg_dir, bases[1]), "r+b") as f:  # a bit of a group in the second chunk
        f.seek(bad_start - bases[1] + groups.COMMIT_SIZE + 10)
        byte = f.read(1)
        f.seek(bad_start - bases[1] + groups.COMMIT_SIZE + 10)
        f.write(bytes([byte[0] ^ 0x01]))
    store = await open_store(tmp_path, chunk_size=MiB, max_frame_size=256 * 1024)
    try:
        preads: list[int] = []
        reader = store.segment("s").reader
        assert reader is not None
        pread = reader.pread
        monkeypatch.setattr(reader, "pread", lambda offset, n, stop: preads.append(n) or pread(offset, n, stop))
        segment = store.segment("s")
        offset = 0
        while offset < bases[1]:  # the first chunk, walked through its mapping: no byte read by pread
            read = await segment.read_checked(offset, 300_000)
            assert isinstance(read.data, memoryview) and bytes(read.data) == stored[offset : offset + len(read.data)]
            offset += len(read.data)
        assert preads == []
        sound = await segment.read_checked(bases[1], 10 * MiB)  # up to the corrupt group
        assert bases[1] + len(sound.data) == bad_start and bytes(sound.data) == stored[bases[1] : bad_start]
        with pytest.raises(CorruptData) as caught:
            await segment.read_checked(bad_start, 10 * MiB)
        assert (caught.value.start, caught.value.end) == (bad_start, bad_end)
        offset = bad_end
        while offset < end:
            read = await segment.read_checked(offset, 300_000)
            assert bytes(read.data) == stored[offset : offset + len(read.data)]
            offset += len(read.data)
    finally:
        await store.close()
