"""The lumberjack listener in a hub, over real sockets: acks after durability, keep-alives, bad input."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import ssl
import struct
import zlib
from pathlib import Path
from typing import Any

import msgpack
import orjson
import ormsgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.batch import decode_batch
from logport.config import RouteConfig, TLSConfig
from logport.errors import RemoteProtocolError
from logport.protocols.lumberjack import (
    compressed_frame,
    encode_data_v1,
    encode_json,
    encode_window,
)
from logport.servers.lumberjack import MAX_EVENT_DEPTH, build_batches
from tests.conftest import VECTORS
from tests.lumberjack.harness import (
    lumberjack_config,
    running_hub,
    self_signed_cert,
    stored_batches,
    stored_records,
    wait_for_records,
)
from tests.support import assert_segment_files_whole, child_pids, fill_the_disk

VECTOR = json.loads((VECTORS / "go-lumber-client-v2-window.json").read_text())
CLIENT_BYTES = [bytes.fromhex(c["hex"]) for c in VECTOR["conversation"] if c["dir"] == "client->server"]


def ack(seq: int, version: bytes = b"2") -> bytes:
    return version + b"A" + struct.pack(">I", seq)


def window(seqs: range, version: int = 0x32, level: int = 3, extra: dict | None = None) -> bytes:
    frames = b"".join(
        encode_json(s, orjson.dumps({"@timestamp": "2026-11-22T03:25:39.000000001Z", "message": f"m{s}",
                                     **(extra or {})}))
        for s in seqs
    )
    return encode_window(version, len(seqs)) + compressed_frame(version, frames, level)


async def connect(port: int, ssl_context: ssl.SSLContext | None = None):  # type: ignore[no-untyped-def]
    return await asyncio.open_connection("127.0.0.1", port, ssl=ssl_context)


async def read_acks_until(reader: asyncio.StreamReader, seq: int, version: bytes = b"2",
                          timeout: float = 10.0) -> list[int]:
    """Every ack up to the one for `seq`; only keep-alives (0) may come before it."""
    acks: list[int] = []
    while not acks or acks[-1] != seq:
        frame = await asyncio.wait_for(reader.readexactly(6), timeout)
        assert frame[:2] == version + b"A", frame
        acks.append(struct.unpack(">I", frame[2:])[0])
        assert acks[-1] in (0, seq) or acks[-1] < seq, acks
    return acks


async def closed_by_server(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    data = await asyncio.wait_for(reader.read(), timeout)
    return data == b""


async def test_go_lumber_window_is_acknowledged_and_stored_with_nanoseconds(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        for chunk in CLIENT_BYTES:
            writer.write(chunk)
        acks = await read_acks_until(reader, VECTOR["window"])
        assert set(acks[:-1]) <= {0}
        writer.close()
        batches = await stored_batches(hub.runtime.store, "lumberjack")
        assert len(batches) == 1
        batch = batches[0]
        assert batch.tag == "beats"
        assert batch.option["source"] == "lumberjack" and batch.option["size"] == 3
        assert batch.option["peer"].startswith("127.0.0.1:")
        entries = list(batch)
        inner = bytes.fromhex(VECTOR["decompressed_inner_frames_hex"])
        first = json.loads(inner[10 : 10 + struct.unpack(">I", inner[6:10])[0]])
        assert entries[0].record == first
        assert (entries[0].seconds, entries[0].nanos) == (1795317939, 28135265)
        assert [e.nanos for e in entries] == [28135265, 28136537, 28136867]


async def test_vector_fed_one_byte_at_a_time(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        for b in b"".join(CLIENT_BYTES):
            writer.write(bytes([b]))
            await writer.drain()
        await read_acks_until(reader, 3)
        writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 3)) == 3


V1_WINDOW = encode_window(0x31, 3) + compressed_frame(0x31, [encode_data_v1(s, {"line": f"l{s}"}) for s in (1, 2, 3)])


@pytest.mark.parametrize("version,stream", [(b"2", b"".join(CLIENT_BYTES)), (b"1", V1_WINDOW)],
                         ids=["v2-json", "v1-data"])
async def test_keepalive_acks_while_the_window_is_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         version: bytes, stream: bytes) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data", keepalive_interval=0.05)) as hub:
        store = hub.runtime.store
        real_append = store.append

        async def slow_append(*args, **kwargs):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.4)
            return await real_append(*args, **kwargs)

        monkeypatch.setattr(store, "append", slow_append)
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(stream)
        replies = [await asyncio.wait_for(reader.readexactly(6), 5)]
        while replies[-1] != ack(3, version):
            replies.append(await asyncio.wait_for(reader.readexactly(6), 5))
        keepalive = version + b"A\0\0\0\0"  # in the window's version: a v1 writer reads only v1 frames
        assert len(replies) >= 4 and set(replies[:-1]) == {keepalive}, replies
        writer.close()


async def test_keepalive_acks_while_a_decode_worker_has_the_window(tmp_path: Path) -> None:
    config = lumberjack_config(tmp_path / "data", keepalive_interval=0.05, decode_offload_bytes=0,
                               max_window_size=200_000, decode_workers=2)
    async with running_hub(config) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(window(range(1, 2)))  # the workers are started by now
        await read_acks_until(reader, 1)
        # a duplicate key: the C pass leaves the window to the Python path, a second or so in the workers
        # (storing it takes far less)
        frames = b"".join(encode_json(s, b'{"m":1,"m":2}') for s in range(1, 150_001))
        writer.write(encode_window(0x32, 150_000) + compressed_frame(0x32, frames, 3))
        replies = await read_acks_until(reader, 150_000)
        assert replies.count(0) >= 3, replies
        writer.close()
        registry = hub.runtime.metrics.registry
        assert registry.get_sample_value("logport_lumberjack_worker_windows_total") == 2


@pytest.mark.parametrize("restart", [True, False], ids=["filebeat-seqs", "growing-seqs"])
async def test_sequences_restarting_or_growing(tmp_path: Path, restart: bool) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        for w in range(3):
            seqs = range(1, 5) if restart else range(1 + 4 * w, 5 + 4 * w)
            writer.write(window(seqs))
            assert (await read_acks_until(reader, seqs[-1]))[-1] == seqs[-1]
        writer.close()
        records = await wait_for_records(hub.runtime.store, "lumberjack", 12)
        assert len(records) == 12


async def test_empty_window_is_acknowledged_with_zero(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(encode_window(0x32, 0))
        assert await asyncio.wait_for(reader.readexactly(6), 5) == ack(0)
        writer.write(window(range(1, 3)))
        assert (await read_acks_until(reader, 2))[-1] == 2
        writer.close()


async def test_window_spread_over_c_frames_uncompressed_and_nested(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        j = [encode_json(s, orjson.dumps({"message": f"m{s}"})) for s in range(1, 7)]
        nested = compressed_frame(0x32, compressed_frame(0x32, j[3:5]))
        writer.write(encode_window(0x32, 6) + compressed_frame(0x32, j[:2]) + j[2] + nested)
        await asyncio.sleep(0.05)  # the window is not complete yet: no ack
        writer.write(compressed_frame(0x32, j[5:], 9))
        assert (await read_acks_until(reader, 6))[-1] == 6
        writer.close()
        records = await wait_for_records(hub.runtime.store, "lumberjack", 6)
        assert [r.record["message"] for r in records] == [f"m{s}" for s in range(1, 7)]


async def test_v1_data_frames_acknowledged_in_v1(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        frames = [encode_data_v1(s, {"line": f"hello {s}", "host": "h1"}) for s in (1, 2)]
        writer.write(encode_window(0x31, 2) + frames[0] + compressed_frame(0x31, frames[1]))
        assert await asyncio.wait_for(reader.readexactly(6), 5) == ack(2, b"1")
        writer.close()
        records = await wait_for_records(hub.runtime.store, "lumberjack", 2)
        assert [r.record for r in records] == [{"line": "hello 1", "host": "h1"}, {"line": "hello 2", "host": "h1"}]


async def test_partial_window_is_stored_and_acknowledged_after_a_pause(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data", partial_window_delay=0.1)) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(encode_window(0x31, 1000) + b"".join(encode_data_v1(s, {"line": "x"}) for s in (1, 2, 3)))
        assert await asyncio.wait_for(reader.readexactly(6), 5) == ack(3, b"1")
        writer.write(encode_data_v1(4, {"line": "y"}))
        assert await asyncio.wait_for(reader.readexactly(6), 5) == ack(4, b"1")
        writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 4)) == 4


async def test_metadata_goes_to_the_option_and_can_name_the_tag(tmp_path: Path) -> None:
    config = lumberjack_config(tmp_path / "data", tag_from_beat=True)
    config.routes = [RouteConfig(match="filebeat", segment="files")]
    async with running_hub(config) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        meta = {"beat": "filebeat", "type": "_doc", "version": "9.0.0"}
        frames = [encode_json(1, orjson.dumps({"@metadata": meta, "message": "a"})),
                  encode_json(2, orjson.dumps({"@metadata": meta, "message": "b"})),
                  encode_json(3, orjson.dumps({"@metadata": {"beat": "winlogbeat"}, "message": "c"})),
                  encode_json(4, orjson.dumps({"message": "d", "@timestamp": "not a time"}))]
        writer.write(encode_window(0x32, 4) + compressed_frame(0x32, frames))
        await read_acks_until(reader, 4)
        writer.close()
        store = hub.runtime.store
        (files,) = await stored_batches(store, "files")
        assert files.tag == "filebeat" and files.option["@metadata"] == meta and files.option["size"] == 2
        assert [e.record for e in files] == [{"message": "a"}, {"message": "b"}]
        other = await stored_batches(store, "lumberjack")
        assert [b.tag for b in other] == ["winlogbeat", "beats"]
        assert "@metadata" not in other[1].option
        (d,) = list(other[1])
        assert d.record == {"message": "d", "@timestamp": "not a time"} and d.seconds > 1_700_000_000


# --- bad input: each closes only its own connection ---


def zlib_bomb(size: int) -> bytes:
    return zlib.compress(b"2J" + b"\0" * size, 9)


def nested(depth: int) -> bytes:
    """A JSON event `depth` levels deep, its own object included."""
    return b'{"message":"m","a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def nested_metadata(depth: int) -> bytes:
    """A JSON event whose @metadata is `depth` levels deep."""
    return b'{"message":"m","@metadata":' + b"[" * depth + b"]" * depth + b"}"


BAD_INPUT = {
    "invalid frame type": (b"2X\0\0\0\0", "invalid lumberjack frame type 0x58"),
    "invalid version": (b"9W\0\0\0\1", "invalid lumberjack version byte 0x39"),
    "huge J length": (b"2J\0\0\0\1\xff\xff\xff\xf0", "J frame of 4294967280 bytes"),
    "huge C length": (b"2C\xff\xff\xff\xf0", "C frame of 4294967280 bytes"),
    "zlib bomb": (encode_window(0x32, 1) + b"2C" + struct.pack(">I", len(zlib_bomb(50_000_000)))
                  + zlib_bomb(50_000_000), "decompressed C frame of 1048577 bytes"),
    "nested C frames over the limit together": (
        encode_window(0x32, 3) + compressed_frame(0x32, compressed_frame(0x32, encode_json(
            1, b'{"message":"' + b"x" * 700_000 + b'"}')) * 3),
        "decompressed C frame (with its nested C frames) of 1048577 bytes from 127.0.0.1:"),
    "truncated C frame": (b"2C" + struct.pack(">I", 20) + zlib.compress(encode_json(1, b"{}") * 50)[:20],
                          "truncated C frame"),
    "truncated frame inside C": (compressed_frame(0x32, encode_json(1, b"{}")[:-1]), "truncated frame inside a C frame"),
    "not zlib": (b"2C\0\0\0\4abcd", "not valid zlib"),
    "bad json": (encode_json(1, b"{nope"), "not valid JSON"),
    "json array": (encode_json(1, b"[1,2]"), "not an object"),
    "window too large": (encode_window(0x32, 10_000_000), "window of 10000000 events"),
    "ack from client": (b"2A\0\0\0\1", "only the server acknowledges"),
    "tls on plaintext port": (bytes.fromhex("16030100c8010000c40303") + b"\0" * 200, "TLS handshake (first byte 0x16)"),
    "event nested too deep": (encode_window(0x32, 1) + encode_json(1, nested(513)),
                              "event seq 1 is nested 513 deep, over the limit of 512"),
    "metadata nested too deep": (encode_window(0x32, 2) + encode_json(1, nested_metadata(1000)) * 2,
                                 "@metadata of event seq 1 is nested 1000 deep, over the limit of 511"),
    "json nested past orjson's limit": (encode_window(0x32, 1) + encode_json(1, b"[" * 100_000), "not valid JSON"),
}


# what a decode worker sees (a C frame right after its W frame), run once more with every such frame sent to one
IN_A_WORKER = ["zlib bomb", "nested C frames over the limit together", "bad json in a window",
               "event nested too deep in a window", "not zlib after a window"]
BAD_INPUT.update({
    "bad json in a window": (encode_window(0x32, 2) + compressed_frame(0x32, [
        encode_json(1, b'{"a":1}'), encode_json(2, b"{nope")]), "J frame seq 2 is not valid JSON"),
    "event nested too deep in a window": (encode_window(0x32, 1) + compressed_frame(0x32, encode_json(1, nested(513))),
                                          "event seq 1 is nested 513 deep, over the limit of 512"),
    "not zlib after a window": (encode_window(0x32, 1) + b"2C\0\0\0\4abcd", "not valid zlib"),
})


@pytest.mark.parametrize("name,offload", [(name, False) for name in BAD_INPUT] + [(name, True) for name in IN_A_WORKER],
                         ids=[*BAD_INPUT, *(f"{name} (worker)" for name in IN_A_WORKER)])
async def test_bad_input_closes_only_that_connection(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     name: str, offload: bool) -> None:
    bad, message = BAD_INPUT[name]
    config = lumberjack_config(tmp_path / "data", max_decompressed_size=1 << 20, max_payload_size=8 << 20,
                               max_window_size=100_000, decode_offload_bytes=0 if offload else 1 << 30,
                               decode_workers=2 if offload else 0)
    caplog.set_level(logging.WARNING, logger="logport.lumberjack")
    async with running_hub(config) as hub:
        port = hub.config.lumberjack.port
        good_reader, good_writer = await connect(port)
        good_writer.write(window(range(1, 3)))
        await read_acks_until(good_reader, 2)

        bad_reader, bad_writer = await connect(port)
        bad_writer.write(bad)
        assert await closed_by_server(bad_reader)
        bad_writer.close()
        assert any(message in r.getMessage() and "127.0.0.1:" in r.getMessage() for r in caplog.records), \
            [r.getMessage() for r in caplog.records]
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]  # expected, not a crash

        good_writer.write(window(range(1, 4)))
        await read_acks_until(good_reader, 3)
        good_writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 5)) == 5


def big_event(seq: int) -> bytes:
    return encode_json(seq, b'{"message":"' + b"x" * 100_000 + b'"}')


async def test_a_window_over_max_window_bytes_closes_only_that_connection(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    frame = len(big_event(1))
    limit = 3 * frame
    config = lumberjack_config(tmp_path / "data", max_window_bytes=limit, partial_window_delay=0.5)
    caplog.set_level(logging.WARNING, logger="logport.lumberjack")
    async with running_hub(config) as hub:
        port = hub.config.lumberjack.port
        good_reader, good_writer = await connect(port)
        # exactly the limit, in three C frames
        good_writer.write(encode_window(0x32, 3) + b"".join(compressed_frame(0x32, big_event(s)) for s in (1, 2, 3)))
        await read_acks_until(good_reader, 3)

        bad_reader, bad_writer = await connect(port)
        bad_writer.write(encode_window(0x32, 4) + b"".join(compressed_frame(0x32, big_event(s)) for s in range(1, 5)))
        assert await closed_by_server(bad_reader)
        bad_writer.close()
        (record,) = [r for r in caplog.records if "closing connection" in r.getMessage()]
        assert record.limit == "max_window_bytes" and record.value == 4 * frame  # type: ignore[attr-defined]
        assert record.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
        assert f"window of {4 * frame} bytes from 127.0.0.1:" in record.getMessage()
        assert f"exceeds max_window_bytes {limit}" in record.getMessage()

        # one C frame over the limit, spilling past its W: each window counts only its own events
        good_writer.write(encode_window(0x32, 2) + compressed_frame(0x32, [big_event(s) for s in range(1, 5)]))
        assert (await read_acks_until(good_reader, 2))[-1] == 2
        assert (await read_acks_until(good_reader, 4))[-1] == 4  # the rest, after partial_window_delay
        good_writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 7)) == 7


async def test_events_nested_deeper_than_ormsgpack_packs_are_stored(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        payloads = [nested(300), nested(MAX_EVENT_DEPTH), nested(3)]
        writer.write(encode_window(0x32, 3) + b"".join(encode_json(i, p) for i, p in enumerate(payloads, 1)))
        await read_acks_until(reader, 3)
        writer.close()
        records = await wait_for_records(hub.runtime.store, "lumberjack", 3)
        assert [r.record for r in records] == [orjson.loads(p) for p in payloads]


async def test_limit_log_line_names_peer_limit_and_value(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="logport.lumberjack")
    async with running_hub(lumberjack_config(tmp_path / "data", max_payload_size=1000)) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(b"2J\0\0\0\1\0\0\x03\xe9")
        assert await closed_by_server(reader)
        (record,) = [r for r in caplog.records if "closing connection" in r.getMessage()]
        assert record.limit == "max_payload_size" and record.value == 1001  # type: ignore[attr-defined]
        assert record.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
        assert "J frame of 1001 bytes from 127.0.0.1:" in record.getMessage()


async def test_idle_connection_is_closed(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data", idle_timeout=0.3)) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(window(range(1, 2)))
        await read_acks_until(reader, 1)
        started = asyncio.get_running_loop().time()
        assert await closed_by_server(reader)
        assert asyncio.get_running_loop().time() - started >= 0.25


async def test_connection_limit(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data", max_connections=1)) as hub:
        port = hub.config.lumberjack.port
        r1, w1 = await connect(port)
        w1.write(window(range(1, 2)))
        await read_acks_until(r1, 1)
        r2, w2 = await connect(port)
        assert await closed_by_server(r2)
        w1.write(window(range(1, 2)))
        await read_acks_until(r1, 1)
        w1.close()
        await asyncio.sleep(0.1)
        r3, w3 = await connect(port)
        w3.write(window(range(1, 2)))
        await read_acks_until(r3, 1)
        w3.close()


async def test_tls_listener(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    config = lumberjack_config(tmp_path / "data", tls=TLSConfig(cert=str(cert), key=str(key)))
    async with running_hub(config) as hub:
        ctx = ssl.create_default_context(cafile=str(cert))
        reader, writer = await connect(hub.config.lumberjack.port, ctx)
        writer.write(b"".join(CLIENT_BYTES))
        await read_acks_until(reader, 3)
        writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 3)) == 3


async def test_back_pressure_pauses_reading_while_the_store_is_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        store = hub.runtime.store
        gate = asyncio.Event()
        real_append = store.append

        async def gated_append(*args, **kwargs):  # type: ignore[no-untyped-def]
            await gate.wait()
            return await real_append(*args, **kwargs)

        monkeypatch.setattr(store, "append", gated_append)
        reader, writer = await connect(hub.config.lumberjack.port)
        for _ in range(10):
            writer.write(window(range(1, 3)))
        await asyncio.sleep(0.2)
        (conn,) = hub.services["lumberjack"].connections  # type: ignore[attr-defined]
        assert conn.paused and not conn.transport.is_reading()
        gate.set()
        for _ in range(10):
            await read_acks_until(reader, 2)
        assert not conn.paused
        writer.close()
        assert len(await wait_for_records(store, "lumberjack", 20)) == 20


async def test_two_windows_inside_one_c_frame(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data")) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        inner = b"".join(
            encode_window(0x32, 2) + encode_json(1, b'{"w":1}') + encode_json(2, b'{"w":1}')
            for _ in range(2)
        )
        writer.write(compressed_frame(0x32, inner))
        assert await asyncio.wait_for(reader.readexactly(12), 5) == ack(2) + ack(2)
        writer.close()
        batches = await stored_batches(hub.runtime.store, "lumberjack")
        assert [b.option["size"] for b in batches] == [2, 2]


async def test_an_event_the_store_refuses_closes_the_connection_unacknowledged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = lumberjack_config(tmp_path / "data")
    config.store.max_frame_size = 4096
    caplog.set_level(logging.WARNING, logger="logport.lumberjack")
    async with running_hub(config) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(encode_window(0x32, 1) + encode_json(1, orjson.dumps({"message": "x" * 10_000})))
        assert await closed_by_server(reader)
        assert any("exceeds max_frame_size 4096" in r.getMessage() for r in caplog.records)
        assert await stored_batches(hub.runtime.store, "lumberjack") == []


async def test_disk_full_no_ack_clear_error_and_the_resent_window_is_stored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    config = lumberjack_config(tmp_path / "data")
    caplog.set_level(logging.WARNING, logger="logport.lumberjack")
    async with running_hub(config) as hub:
        port = hub.config.lumberjack.port
        reader, writer = await connect(port)
        writer.write(window(range(1, 3)))
        await read_acks_until(reader, 2)
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 2)) == 2  # written before the disk fills
        fill_the_disk(monkeypatch)
        writer.write(window(range(1, 4)))
        replies = b""
        try:
            while data := await asyncio.wait_for(reader.read(1024), 5):
                replies += data
        except ConnectionResetError:
            pass  # closed with an abort
        assert replies.replace(ack(0), b"") == b""  # no A 3, only keep-alives at most: the window is resent
        writer.close()
        (line,) = [r for r in caplog.records if r.name == "logport.lumberjack" and "No space" in r.getMessage()]
        assert "closing connection" in line.getMessage() and "segment 'lumberjack'" in line.getMessage()
        assert line.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]

        monkeypatch.undo()  # space returns: the Beats client resends the unacknowledged window
        reader, writer = await connect(port)
        writer.write(window(range(1, 4)))
        await read_acks_until(reader, 3)
        writer.close()
        # at least once is the protocol's promise; the failed attempt itself left nothing behind
        records = await stored_records(hub.runtime.store, "lumberjack")
        assert [r.record["message"] for r in records] == ["m1", "m2", "m1", "m2", "m3"]
        assert_segment_files_whole(hub, "lumberjack")


async def test_a_window_larger_than_a_store_frame_is_stored_as_several_batches(tmp_path: Path) -> None:
    config = lumberjack_config(tmp_path / "data")
    config.store.max_frame_size = 16 * 1024
    async with running_hub(config) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        payloads = [orjson.dumps({"message": f"{i:04d}" + "y" * 1000}) for i in range(1, 41)]
        writer.write(encode_window(0x32, 40) + compressed_frame(0x32, [encode_json(i, p) for i, p in enumerate(payloads, 1)]))
        await read_acks_until(reader, 40)
        writer.close()
        batches = await stored_batches(hub.runtime.store, "lumberjack")
        assert len(batches) >= 3 and sum(b.option["size"] for b in batches) == 40
        assert [e.record["message"][:4] for b in batches for e in b] == [f"{i:04d}" for i in range(1, 41)]


async def test_tls_with_required_client_certificates(tmp_path: Path) -> None:
    server_cert, server_key = self_signed_cert(tmp_path, "localhost")
    client_cert, client_key = self_signed_cert(tmp_path, "beat-client")
    tls = TLSConfig(cert=str(server_cert), key=str(server_key), client_ca=str(client_cert), verify_client=True)
    async with running_hub(lumberjack_config(tmp_path / "data", tls=tls)) as hub:
        port = hub.config.lumberjack.port
        anonymous = ssl.create_default_context(cafile=str(server_cert))
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await connect(port, anonymous)
            writer.write(window(range(1, 2)))
            await read_acks_until(reader, 1)
        with_cert = ssl.create_default_context(cafile=str(server_cert))
        with_cert.load_cert_chain(str(client_cert), str(client_key))
        reader, writer = await connect(port, with_cert)
        writer.write(window(range(1, 2)))
        await read_acks_until(reader, 1)
        writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 1)) == 1


async def test_tls_with_optional_client_certificates(tmp_path: Path) -> None:
    """client_ca without verify_client (CERT_OPTIONAL): clients with and without a certificate both get in;
    a certificate that is presented is still checked against client_ca."""
    server_cert, server_key = self_signed_cert(tmp_path, "localhost")
    client_cert, client_key = self_signed_cert(tmp_path, "beat-client")
    stranger_cert, stranger_key = self_signed_cert(tmp_path, "stranger")
    tls = TLSConfig(cert=str(server_cert), key=str(server_key), client_ca=str(client_cert))
    async with running_hub(lumberjack_config(tmp_path / "data", tls=tls)) as hub:
        port = hub.config.lumberjack.port
        anonymous = ssl.create_default_context(cafile=str(server_cert))
        with_cert = ssl.create_default_context(cafile=str(server_cert))
        with_cert.load_cert_chain(str(client_cert), str(client_key))
        for seq, ctx in enumerate((anonymous, with_cert), 1):
            reader, writer = await connect(port, ctx)
            writer.write(window(range(seq, seq + 1)))
            assert (await read_acks_until(reader, seq))[-1] == seq
            writer.close()
        untrusted = ssl.create_default_context(cafile=str(server_cert))
        untrusted.load_cert_chain(str(stranger_cert), str(stranger_key))
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await connect(port, untrusted)
            writer.write(window(range(3, 4)))
            await read_acks_until(reader, 3)
        records = await wait_for_records(hub.runtime.store, "lumberjack", 2)
        assert [r.record["message"] for r in records] == ["m1", "m2"]


async def test_v1_frames_without_a_window_frame_are_acknowledged_in_v1(tmp_path: Path) -> None:
    async with running_hub(lumberjack_config(tmp_path / "data", partial_window_delay=0.05)) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(b"".join(encode_data_v1(s, {"line": f"l{s}"}) for s in (1, 2)))
        assert await asyncio.wait_for(reader.readexactly(6), 5) == ack(2, b"1")
        writer.close()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(st.dictionaries(st.text(), JSON_VALUES, max_size=8))
def test_fast_packing_of_json_events_is_msgpack_byte_for_byte(event: dict[str, Any]) -> None:
    """build_batches packs orjson's dicts with ormsgpack: the stored bytes must be msgpack's own."""
    encoded = orjson.dumps(event)
    (batch,) = [b for _, b, _ in build_batches([(1, encoded)], tag="t", tag_from_beat=False, peer="p",
                                                max_body=1 << 30, received_ns=0)]
    (entry,) = list(decode_batch(batch))
    fields = orjson.loads(encoded)
    fields.pop("@metadata", None)
    assert ormsgpack.packb(fields) == msgpack.packb(fields, use_bin_type=True)
    assert entry.record == fields


DEEP_EVENTS = {
    "over ormsgpack's 255 levels": ([nested(300)], None),
    "at the limit": ([nested(MAX_EVENT_DEPTH)], None),
    "metadata at the limit": ([nested_metadata(MAX_EVENT_DEPTH - 1)] * 2, None),
    "over the limit": ([nested(3), nested(MAX_EVENT_DEPTH + 1)], "event seq 2 is nested 513 deep, over the limit of 512"),
    "at orjson's limit": ([nested(1024)], "event seq 1 is nested 1024 deep, over the limit of 512"),
    "past orjson's limit": ([nested(100_000)], "J frame seq 1 is not valid JSON: depth limit exceeded"),
    "brackets only": ([b"[" * 100_000], "J frame seq 1 is not valid JSON: depth limit exceeded"),
    "metadata over the limit": ([nested_metadata(MAX_EVENT_DEPTH)],
                                "@metadata of event seq 1 is nested 512 deep, over the limit of 511"),
    "metadata beyond what a batch unpacks": ([nested_metadata(1023)], "@metadata of event seq 1 is nested 1023 deep"),
    "metadata too deep to compare": ([nested_metadata(1000)] * 2, "@metadata of event seq 1 is nested 1000 deep"),
}


@pytest.mark.parametrize("name", list(DEEP_EVENTS))
def test_deep_events_are_stored_readable_or_refused_as_protocol_errors(name: str) -> None:
    payloads, error = DEEP_EVENTS[name]
    events = [(seq, p) for seq, p in enumerate(payloads, 1)]
    if error is not None:
        with pytest.raises(RemoteProtocolError) as info:
            build_batches(events, tag="t", tag_from_beat=False, peer="p", max_body=1 << 30, received_ns=0)
        assert error in str(info.value)
        return
    (body,) = [b for _, b, _ in build_batches(events, tag="t", tag_from_beat=False, peer="p", max_body=1 << 30,
                                                received_ns=0)]
    batch = decode_batch(body)
    events_back = [orjson.loads(p) for p in payloads]
    assert batch.option.get("@metadata") == events_back[0].pop("@metadata", None)
    for event in events_back:
        event.pop("@metadata", None)
    assert [e.record for e in batch] == events_back


# --- decode workers: a C frame holding the window its W frame announced is decoded in another process ---


def beat_event(seq: int, beat: str = "filebeat") -> bytes:
    return encode_json(seq, orjson.dumps({
        "@timestamp": f"2026-11-22T04:{seq // 60 % 60:02d}:{seq % 60:02d}.{seq:09d}Z",
        "@metadata": {"beat": beat, "type": "_doc"}, "message": f"line {seq}", "log": {"offset": seq * 10}}))


def mixed_stream() -> tuple[bytes, bytes]:
    """Windows a worker takes and windows it must hand back, with frames that follow them; then one more,
    sent after their acks, big enough to be split between the workers."""
    parts = [
        encode_window(0x32, 300) + compressed_frame(0x32, [beat_event(s) for s in range(1, 301)]),  # a worker's
        encode_window(0x32, 2) + compressed_frame(0x32, [beat_event(1), beat_event(2, "winlogbeat")]),
        encode_window(0x32, 4) + compressed_frame(0x32, [beat_event(s) for s in (1, 2)])  # fewer than announced
        + beat_event(3) + compressed_frame(0x32, beat_event(4)),
        encode_window(0x32, 2) + compressed_frame(0x32, [beat_event(s) for s in (1, 2, 3)]),  # more: splits
        encode_window(0x32, 1) + compressed_frame(0x32, beat_event(4)),
        encode_window(0x32, 2) + compressed_frame(0x32, encode_window(0x32, 1) + beat_event(1))  # a W inside
        + beat_event(1) + beat_event(2),
        encode_window(0x31, 2) + compressed_frame(0x31, [encode_data_v1(s, {"line": f"v1 {s}"}) for s in (1, 2)]),
        encode_window(0x32, 700) + compressed_frame(0x32, [beat_event(s, "heartbeat" if s < 400 else "filebeat")
                                                           for s in range(1, 701)]),  # split between the workers
    ]
    return b"".join(parts[:-1]), parts[-1]


# the C frame of 3 in a window of 2 ends it, its third frame starts one the next W frame ends; so does the W 1
# inside a C frame, its J 1 then two frames that the v1 W frame ends
STREAM_ACKS = [(b"2", 300), (b"2", 2), (b"2", 4), (b"2", 2), (b"2", 3), (b"2", 4), (b"2", 1), (b"2", 2), (b"1", 2),
               (b"2", 700)]


async def _acks_and_records(config_dir: Path, **lumberjack: Any) -> tuple[list[bytes], list[tuple], int,
                                                                         float | None]:
    config = lumberjack_config(config_dir, partial_window_delay=0.1, tag_from_beat=True, **lumberjack)
    stream, last = mixed_stream()
    async with running_hub(config) as hub:
        reader, writer = await connect(hub.config.lumberjack.port)
        writer.write(stream)
        acks = [await asyncio.wait_for(reader.readexactly(6), 10) for _ in STREAM_ACKS[:-1]]
        writer.write(last)
        acks.append(await asyncio.wait_for(reader.readexactly(6), 10))
        writer.close()
        batches = await stored_batches(hub.runtime.store, "lumberjack")
        # entry by entry: where batches end may differ (a worker packs its part of a window in batches of its own)
        records = [(b.tag, {k: v for k, v in b.option.items() if k not in ("peer", "size")},
                    (e.seconds, e.nanos, e.record) if "@timestamp" in e.record else e.record)
                   for b in batches for e in b]
        in_workers = hub.runtime.metrics.registry.get_sample_value("logport_lumberjack_worker_windows_total")
    return acks, records, len(batches), in_workers


async def test_decode_workers_acknowledge_and_store_what_the_event_loop_does(tmp_path: Path) -> None:
    loop_acks, loop_records, loop_batches, none = await _acks_and_records(tmp_path / "loop", decode_workers=0)
    worker_acks, worker_records, worker_batches, in_workers = await _acks_and_records(
        tmp_path / "workers", decode_workers=2, decode_offload_bytes=0)
    assert (none, in_workers) == (0, 5)  # 300, 2 (two tags), 1, v1 2, 700: the others hold more, less, or a W
    assert loop_acks == [ack(seq, version) for version, seq in STREAM_ACKS]
    assert worker_acks == loop_acks
    assert worker_records == loop_records
    assert len(worker_records) == 300 + 2 + 4 + 3 + 1 + 1 + 2 + 2 + 700
    assert worker_batches == loop_batches + 1  # the 700 events in two parts: the first run of 399 split at 350


async def test_a_decode_worker_that_dies_closes_only_its_connection_and_is_replaced(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with running_hub(lumberjack_config(tmp_path / "data", decode_offload_bytes=0, decode_workers=2)) as hub:
        port = hub.config.lumberjack.port
        reader, writer = await connect(port)
        writer.write(window(range(1, 3)))
        await read_acks_until(reader, 2)
        workers = child_pids(os.getpid(), "spawn_main")  # started as needed: one, for one window at a time
        assert workers
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        writer.write(window(range(1, 3)))
        assert await closed_by_server(reader)
        writer.close()
        messages = [r.getMessage() for r in caplog.records]
        assert any("closing connection: a lumberjack decode worker died" in m for m in messages), messages
        assert any("a decode worker died; starting new ones" in m for m in messages), messages

        reader, writer = await connect(port)
        writer.write(window(range(1, 4)))
        await read_acks_until(reader, 3)
        writer.close()
        assert len(await wait_for_records(hub.runtime.store, "lumberjack", 5)) == 5
        assert sorted(child_pids(os.getpid(), "spawn_main")) != sorted(workers)
