"""The Forward listener over real sockets: acks after the store, exactly-once retries, bad input, limits."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from logport.batch import pack_entries
from logport.config import RouteConfig
from logport.protocols import forward as fp
from tests.conftest import VECTORS
from tests.forward.helpers import forward_config, running_hub, stored_events, wait_for_events
from tests.support import assert_segment_files_whole, fill_the_disk

P = msgpack.Packer(use_bin_type=True)


def entries(count: int, start: int = 0, size: int = 0) -> bytes:
    return pack_entries((1700000000 + i, i, {"i": i, "pad": "x" * size}) for i in range(start, start + count))


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def send_chunk(port: int, chunk: str, data: bytes, tag: str = "t") -> object:
    r, w = await connect(port)
    w.write(fp.encode_packed_forward(tag, data, {"chunk": chunk}))
    unpacker = msgpack.Unpacker()
    while True:
        data = await asyncio.wait_for(r.read(65536), 10)
        if not data:
            raise ConnectionError("closed without a reply")
        unpacker.feed(data)
        for reply in unpacker:
            w.close()
            return reply


async def closed_without_reply(r: asyncio.StreamReader, timeout: float = 10) -> None:
    """The server closed the connection (FIN, or RST when our unread bytes were still queued) and sent nothing."""
    try:
        assert await asyncio.wait_for(r.read(100), timeout) == b""
    except ConnectionResetError:
        pass


async def good_client_works(port: int, n: int) -> None:
    """Another client of the same server: stored and acked while the bad one misbehaves."""
    assert await send_chunk(port, f"good-{n}", entries(3)) == {"ack": f"good-{n}"}


async def test_ack_only_after_store_and_nothing_without_chunk(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        w.write(fp.encode_packed_forward("t", entries(2)))  # no chunk: no reply
        w.write(fp.encode_message("t", 5, {"m": 1}, {"chunk": "c1"}))
        reply = msgpack.unpackb(await asyncio.wait_for(r.read(100), 5))
        assert reply == {"ack": "c1"}
        events = await stored_events(hub)
        assert [e[3] for e in events] == [{"i": 0, "pad": ""}, {"i": 1, "pad": ""}, {"m": 1}]
        w.close()


async def test_retried_chunk_is_acked_not_stored_twice_also_after_restart(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        assert await send_chunk(config.forward.port, "chunk-A\n", entries(5)) == {"ack": "chunk-A\n"}
        assert await send_chunk(config.forward.port, "chunk-A\n", entries(5)) == {"ack": "chunk-A\n"}
        assert len(await stored_events(hub)) == 5
    async with running_hub(config) as hub:  # restarted: the chunk id is in the durable store
        assert await send_chunk(config.forward.port, "chunk-A\n", entries(5)) == {"ack": "chunk-A\n"}
        assert await send_chunk(config.forward.port, "chunk-B\n", entries(2)) == {"ack": "chunk-B\n"}
        assert len(await stored_events(hub)) == 7
        assert hub.runtime is not None
        assert hub.runtime.metrics.registry.get_sample_value("logport_forward_duplicate_chunks_total") == 1


async def test_a_long_chunk_id_is_deduplicated_by_its_hash(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    config.store.chunk_size = 64 * 1024  # rolls: every new chunk file holds the writer table
    long_id = "L" * 70_000  # kept as its hash: too long for the writer table of every chunk file
    async with running_hub(config) as hub:
        for _ in range(2):
            assert await send_chunk(config.forward.port, long_id, entries(50, size=1000)) == {"ack": long_id}
        assert await send_chunk(config.forward.port, "after", entries(1)) == {"ack": "after"}
        assert len(await stored_events(hub)) == 51


async def test_bin_chunk_is_acked_as_bin(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config):
        r, w = await connect(config.forward.port)
        w.write(P.pack(["t", entries(1), {"chunk": b"\x01\x02"}]))
        assert await asyncio.wait_for(r.read(100), 5) == b"\x81\xa3ack\xc4\x02\x01\x02"
        w.close()


async def test_json_chunk_is_acked_in_json(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        w.write(b'["t", [[1700000000, {"k": "v"}]], {"chunk": "json-1"}]')
        assert await asyncio.wait_for(r.read(100), 5) == b'{"ack":"json-1"}'
        assert [e[3] for e in await stored_events(hub)] == [{"k": "v"}]
        w.close()


async def test_routing_tag_prefix_and_source_keys(tmp_path: Path) -> None:
    config = forward_config(tmp_path, add_tag_prefix="edge", source_address_key="src_ip",
                            source_hostname_key="src_host")
    config.routes = [RouteConfig(match="edge.app.**", segment="apps")]
    async with running_hub(config) as hub:
        await send_chunk(config.forward.port, "c1", entries(2), tag="app.web")
        await send_chunk(config.forward.port, "c2", entries(1), tag="other")
        apps = await stored_events(hub, "apps")
        assert [(e[0], e[3]["i"], e[3]["src_ip"]) for e in apps] == [("edge.app.web", 0, "127.0.0.1"),
                                                                     ("edge.app.web", 1, "127.0.0.1")]
        assert all(e[3]["src_host"] for e in apps)
        (other,) = await stored_events(hub, "forward")
        assert other[0] == "edge.other" and other[4]["peer"].startswith("127.0.0.1:")


async def test_nothing_is_read_before_the_peer_s_name_is_known(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With source_hostname_key, batches that waited for the name could be stored after ones that came
    once it was known: the connection reads nothing until then, and its events keep their order."""
    import logport.servers.forward as forward_server

    gate = asyncio.Event()

    async def slow_resolve(host: str, port: int) -> str:
        await gate.wait()
        return "peer.example"

    monkeypatch.setattr(forward_server, "_resolve", slow_resolve)
    config = forward_config(tmp_path, source_hostname_key="src_host")
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        for i in range(50):
            w.write(P.pack(["t", 1700000000, {"i": i}]))
        await w.drain()
        await asyncio.sleep(0.2)
        assert hub.services["forward"].inflight == 0  # type: ignore[attr-defined]
        gate.set()
        for i in range(50, 100):
            w.write(P.pack(["t", 1700000000, {"i": i}]))
        events = await wait_for_events(hub, 100)
        assert [e[3]["i"] for e in events] == list(range(100))
        assert {e[3]["src_host"] for e in events} == {"peer.example"}
        w.close()


async def test_invalid_entries_skipped_valid_ones_stored(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        bad = entries(1) + P.pack([1.5, {"float": "time"}]) + P.pack([1, "not a map"]) + entries(1, start=1)
        assert await send_chunk(config.forward.port, "c", bad) == {"ack": "c"}
        events = await stored_events(hub)
        assert [e[3]["i"] for e in events] == [0, 1] and events[0][4]["size"] == 2
        assert hub.runtime is not None
        assert hub.runtime.metrics.registry.get_sample_value("logport_forward_invalid_events_total") == 2


async def test_large_batch_is_split_to_fit_store_frames(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    config.store.max_frame_size = 64 * 1024
    async with running_hub(config) as hub:
        assert await send_chunk(config.forward.port, "big", entries(2000, size=100)) == {"ack": "big"}
        assert await send_chunk(config.forward.port, "big", entries(2000, size=100)) == {"ack": "big"}
        events = await stored_events(hub)
        assert [e[3]["i"] for e in events] == list(range(2000))
        assert len({e[4]["size"] for e in events}) > 1  # several stored batches, one atomic append


async def test_udp_heartbeat_and_transport_heartbeat(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config):
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", config.forward.port))
            await loop.sock_sendall(s, b"\x00")
            assert await asyncio.wait_for(loop.sock_recv(s, 10), 5) == b"\x00"
        r, w = await connect(config.forward.port)
        w.write(b"\xc0\xc0" + fp.encode_message("t", 1, {"a": 1}, {"chunk": "h"}))
        assert msgpack.unpackb(await asyncio.wait_for(r.read(100), 5)) == {"ack": "h"}
        w.close()


# --- bad input: each gets its error; another client of the same server keeps working ---

async def test_oversize_frame_is_dropped_without_ack(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = forward_config(tmp_path, chunk_size_limit=256 * 1024)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        w.write(fp.encode_packed_forward("t", entries(5000, size=100), {"chunk": "huge"}))
        await good_client_works(config.forward.port, 1)
        await closed_without_reply(r, 5)  # closed, no ack
        await good_client_works(config.forward.port, 2)
        assert len(await stored_events(hub)) == 6
        (line,) = [r for r in caplog.records if "chunk_size_limit" in r.getMessage()]
        assert "127.0.0.1:" in line.getMessage() and "exceeds chunk_size_limit 262144" in line.getMessage()
        assert line.limit == "chunk_size_limit" and line.value > 262144  # type: ignore[attr-defined]


async def test_gzip_bomb(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = forward_config(tmp_path, decompression_size_limit=1 << 20)
    async with running_hub(config) as hub:
        bomb = gzip.compress(P.pack([1, {"x": "0" * (16 << 20)}]))
        assert len(bomb) < 100_000
        r, w = await connect(config.forward.port)
        w.write(P.pack(["t", bomb, {"compressed": "gzip", "chunk": "bomb"}]))
        await good_client_works(config.forward.port, 1)
        await closed_without_reply(r, 10)
        assert len(await stored_events(hub)) == 3
        assert any("decompression_size_limit" in r.getMessage() for r in caplog.records)


async def test_wrong_shared_key_gets_pong_false_and_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = forward_config(tmp_path, shared_key="right")
    async with running_hub(config) as hub:
        good = fp.ClientConnection(shared_key="right", hostname="good")
        gr, gw = await connect(config.forward.port)
        good.receive_data(await gr.read(1000))
        assert isinstance(good.next_event(), fp.Helo)
        gw.write(good.ping())

        bad = fp.ClientConnection(shared_key="wrong", hostname="bad")
        r, w = await connect(config.forward.port)
        bad.receive_data(await r.read(1000))
        bad.next_event()
        w.write(bad.ping())
        reply = msgpack.unpackb(await asyncio.wait_for(r.read(1000), 5))
        assert reply[:2] == ["PONG", False] and "shared_key" in reply[2]
        await closed_without_reply(r, 5)
        assert any("handshake refused" in r.getMessage() and r.peer for r in caplog.records)  # type: ignore[attr-defined]

        good.receive_data(await gr.read(1000))
        assert isinstance(good.next_event(), fp.Pong)
        gw.write(good.send(fp.EventBatch("t", entries(2), {"chunk": "ok"}, 2)))
        good.receive_data(await asyncio.wait_for(gr.read(1000), 5))
        assert good.next_event() == fp.Ack("ok")
        assert len(await stored_events(hub)) == 2
        gw.close()


@pytest.mark.parametrize("wire", [
    P.pack(["PING", "cli"]),  # a malformed PING
    fp.encode_message("t", 1, {"a": 1}, {"chunk": "early"}),  # an event before the PING
], ids=["short PING", "event before PING"])
async def test_anything_but_a_ping_gets_pong_false_and_counts_as_a_failed_handshake(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, wire: bytes) -> None:
    config = forward_config(tmp_path, shared_key="right")
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        assert msgpack.unpackb(await asyncio.wait_for(r.read(1000), 5))[0] == "HELO"
        w.write(wire)
        await closed_without_reply_after_pong(r, ["PONG", False, "invalid ping message", "", ""])
        (line,) = [rec for rec in caplog.records if "handshake refused" in rec.getMessage()]
        assert "invalid ping message: expected PING" in line.getMessage()
        assert line.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]
        server = hub.services["forward"]
        assert server.handshake_failures.failures == 1  # type: ignore[attr-defined]
        assert len(await stored_events(hub)) == 0
        w.close()


async def test_undecodable_bytes_before_the_ping_are_a_protocol_error_not_a_handshake(tmp_path: Path) -> None:
    config = forward_config(tmp_path, shared_key="right")
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        await asyncio.wait_for(r.read(1000), 5)  # HELO
        w.write(b"\xc1")
        await closed_without_reply(r, 5)
        assert hub.runtime is not None
        assert hub.runtime.metrics.registry.get_sample_value(
            "logport_forward_errors_total", {"reason": "ForwardProtocolError"}) == 1
        assert hub.services["forward"].handshake_failures.failures == 0  # type: ignore[attr-defined]
        w.close()


async def test_garbage_bytes(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        w.write(b"\xc1\xc1 this is not msgpack")
        await closed_without_reply(r, 5)
        r2, w2 = await connect(config.forward.port)
        w2.write(b"GET / HTTP/1.1\r\n\r\n")  # "G" is a positive fixint: a non-array message
        await good_client_works(config.forward.port, 1)
        await closed_without_reply(r2, 5)
        assert len(await stored_events(hub)) == 3
        assert hub.runtime is not None
        assert hub.runtime.metrics.registry.get_sample_value(
            "logport_forward_errors_total", {"reason": "ForwardProtocolError"}) == 2


async def test_half_a_frame_then_silence_hits_idle_timeout(tmp_path: Path) -> None:
    config = forward_config(tmp_path, idle_timeout=0.5)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        frame = fp.encode_packed_forward("t", entries(10), {"chunk": "half"})
        w.write(frame[: len(frame) // 2])
        await good_client_works(config.forward.port, 1)
        await closed_without_reply(r, 5)
        await good_client_works(config.forward.port, 2)
        assert len(await stored_events(hub)) == 6


async def test_max_connections(tmp_path: Path) -> None:
    config = forward_config(tmp_path, max_connections=2)
    async with running_hub(config):
        held = [await connect(config.forward.port) for _ in range(2)]
        await asyncio.sleep(0.05)
        r, w = await connect(config.forward.port)
        await closed_without_reply(r, 5)  # refused
        w.close()
        held[0][1].close()
        await asyncio.sleep(0.1)
        await good_client_works(config.forward.port, 1)
        for _, hw in held[1:]:
            hw.close()


async def test_pipelined_chunks_with_back_pressure_all_acked(tmp_path: Path) -> None:
    config = forward_config(tmp_path, max_inflight_bytes=64 * 1024)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        for n in range(50):
            w.write(fp.encode_packed_forward("t", entries(100, start=n * 100, size=50), {"chunk": f"c{n}"}))
        up = msgpack.Unpacker()
        acks: list[str] = []
        while len(acks) < 50:
            up.feed(await asyncio.wait_for(r.read(65536), 10))
            acks.extend(a["ack"] for a in up)
        assert sorted(acks) == sorted(f"c{n}" for n in range(50))
        assert [e[3]["i"] for e in await stored_events(hub)] == list(range(5000))
        assert hub.runtime is not None
        pauses = hub.runtime.metrics.registry.get_sample_value("logport_forward_read_pauses_total")
        assert pauses and pauses >= 1  # the connection did stop reading while the store caught up
        w.close()


# --- Fluent Bit's out_forward recording replayed against the running server ---

async def test_fluent_bit_client_recording_against_server(tmp_path: Path) -> None:
    doc = json.loads((VECTORS / "fluent-bit-out_forward-secure-gzip-ack.json").read_text())
    config = forward_config(tmp_path, shared_key=doc["shared_key"], users=doc["users"],
                            self_hostname=doc["server_hostname"])
    async with running_hub(config) as hub:
        # the recorded PING was computed from the recorded nonce and salt: inject them
        hub.services["forward"].fixed_nonce = (  # type: ignore[attr-defined]
            bytes.fromhex(doc["server_nonce_hex"]), bytes.fromhex(doc["server_auth_salt_hex"]))
        expected = b"".join(bytes.fromhex(c["hex"]) for c in doc["conversation"] if c["dir"] == "server->client")
        r, w = await connect(config.forward.port)
        got = b""
        for entry in doc["conversation"]:
            if entry["dir"] == "client->server":
                w.write(bytes.fromhex(entry["hex"]))  # one recorded write at a time, as Fluent Bit split them
                await w.drain()
                await asyncio.sleep(0.01)
        while len(got) < len(expected):
            got += await asyncio.wait_for(r.read(4096), 5)
        assert got == expected  # HELO, PONG and the str ack byte for byte
        events = await stored_events(hub)
        record = {"message": "GET /index.html 200", "status": 200, "bytes": 512}
        assert [(e[0], e[1], e[2], e[3]) for e in events] == [
            ("app.access", 1795317898, ns, record) for ns in (659249343, 696716055, 796741645)]
        assert all(e[4]["fluent_signal"] == 0 and "compressed" not in e[4] for e in events)
        w.close()


async def test_repeated_wrong_keys_are_throttled_per_address(tmp_path: Path) -> None:
    config = forward_config(tmp_path, shared_key="right")
    async with running_hub(config) as hub:
        refused_before_helo = 0
        for attempt in range(14):
            r, w = await connect(config.forward.port)
            helo = await asyncio.wait_for(r.read(1000), 5)
            if not helo:  # refused before any handshake: the address used up its failures
                refused_before_helo += 1
                continue
            bad = fp.ClientConnection(shared_key=f"guess-{attempt}", hostname="bad")
            bad.receive_data(helo)
            bad.next_event()
            w.write(bad.ping())
            await closed_without_reply_after_pong(r)
        assert refused_before_helo >= 3  # 10 failures in a row, then the bucket is empty
        assert hub.runtime is not None
        assert hub.runtime.metrics.registry.get_sample_value(
            "logport_forward_errors_total", {"reason": "handshake_failures"}) == refused_before_helo


async def closed_without_reply_after_pong(r: asyncio.StreamReader, pong: list[object] | None = None) -> None:
    """The server sent PONG false (`pong` exactly, when given), nothing else, and closed."""
    data = b""
    while chunk := await asyncio.wait_for(r.read(1000), 5):
        data += chunk
    assert data, "closed without a PONG"
    reply = msgpack.unpackb(data)
    assert reply == pong if pong is not None else reply[:2] == ["PONG", False]


async def test_listener_wide_inflight_budget_pauses_and_resumes_every_connection(tmp_path: Path) -> None:
    config = forward_config(tmp_path, max_total_inflight_bytes=32 * 1024)
    async with running_hub(config) as hub:

        async def client(c: int) -> list[str]:
            r, w = await connect(config.forward.port)
            for n in range(10):
                start = (c * 10 + n) * 50
                w.write(fp.encode_packed_forward("t", entries(50, start=start, size=50), {"chunk": f"{c}-{n}"}))
            up = msgpack.Unpacker()
            acks: list[str] = []
            while len(acks) < 10:
                up.feed(await asyncio.wait_for(r.read(65536), 10))
                acks.extend(a["ack"] for a in up)
            w.close()
            return acks

        results = await asyncio.gather(*(client(c) for c in range(6)))
        assert all(sorted(acks) == sorted(f"{c}-{n}" for n in range(10)) for c, acks in enumerate(results))
        assert sorted(e[3]["i"] for e in await stored_events(hub)) == list(range(3000))
        assert hub.runtime is not None
        server = hub.services["forward"]
        assert server.inflight == 0 and not server.paused  # type: ignore[attr-defined]
        assert (hub.runtime.metrics.registry.get_sample_value("logport_forward_read_pauses_total") or 0) >= 1


async def test_acks_still_sent_after_the_client_half_closes(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        r, w = await connect(config.forward.port)
        for n in range(5):
            w.write(fp.encode_packed_forward("t", entries(200, start=n * 200, size=20), {"chunk": f"h{n}"}))
        w.write_eof()  # shutdown(SHUT_WR): no more data, but the acks are still wanted
        data = b""
        while chunk := await asyncio.wait_for(r.read(65536), 10):
            data += chunk
        up = msgpack.Unpacker()
        up.feed(data)
        assert sorted(a["ack"] for a in up) == [f"h{n}" for n in range(5)]
        assert len(await stored_events(hub)) == 1000
        w.close()


async def test_disk_full_no_ack_clear_error_and_the_resent_chunk_is_stored_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    config = forward_config(tmp_path)
    caplog.set_level(logging.ERROR, logger="logport.forward")
    async with running_hub(config) as hub:
        assert hub.runtime is not None
        port = config.forward.port
        assert await send_chunk(port, "before", entries(2)) == {"ack": "before"}
        assert len(await wait_for_events(hub, 2)) == 2  # written before the disk fills
        fill_the_disk(monkeypatch)
        r, w = await connect(port)
        w.write(fp.encode_packed_forward("t", entries(3, start=2), {"chunk": "full"}))
        await closed_without_reply(r, 5)  # no {"ack": "full"}: the client keeps the chunk and resends it
        w.close()
        (line,) = [rec for rec in caplog.records if "store refused a batch" in rec.getMessage()]
        assert "segment 'forward'" in line.getMessage() and "No space left on device" in line.getMessage()
        assert line.peer.startswith("127.0.0.1:")  # type: ignore[attr-defined]

        monkeypatch.undo()  # space returns: the resent chunk is stored, its second resend only acked
        assert await send_chunk(port, "full", entries(3, start=2)) == {"ack": "full"}
        assert await send_chunk(port, "full", entries(3, start=2)) == {"ack": "full"}
        assert [e[3]["i"] for e in await stored_events(hub)] == [0, 1, 2, 3, 4]
        assert_segment_files_whole(hub, "forward")


async def test_an_unexpected_error_storing_a_chunk_closes_the_connection_without_an_ack(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug while storing must not leave the client waiting on a live connection for an ack that never comes."""
    from logport.servers import forward as server_module

    config = forward_config(tmp_path)
    caplog.set_level(logging.ERROR, logger="logport.forward")
    async with running_hub(config):
        port = config.forward.port

        def broken(*args: object, **kwargs: object) -> tuple[list[bytes], int, int]:
            raise RuntimeError("a bug")

        monkeypatch.setattr(server_module, "frame_batch", broken)
        r, w = await connect(port)
        w.write(fp.encode_packed_forward("t", entries(2), {"chunk": "c1"}))
        await closed_without_reply(r, 5)
        w.close()
        (line,) = [rec for rec in caplog.records if "storing a batch failed" in rec.getMessage()]
        assert line.peer.startswith("127.0.0.1:") and "a bug" in (line.exc_text or "")  # type: ignore[attr-defined]
        monkeypatch.undo()
        assert await send_chunk(port, "c1", entries(2)) == {"ack": "c1"}  # the listener goes on


@pytest.mark.parametrize("encode", [bytes.hex, lambda b: base64.b64encode(b).decode()], ids=["hex", "base64"])
async def test_message_mode_messages_sharing_fluent_bits_empty_hash_id_are_all_stored(
        tmp_path: Path, encode: Callable[[bytes], str]) -> None:
    """Fluent Bit's out_forward in Message mode (a dynamic Tag) with Require_ack_response sends every message with
    the chunk id of SHA-512 over zero bytes: that id identifies nothing, so every message is stored, a repeated
    line with the same second-precision time too (at least once, as Fluentd)."""
    empty_hash_id = encode(hashlib.sha512(b"").digest()[:16])
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        port = config.forward.port

        async def send(record: dict[str, object]) -> object:
            r, w = await connect(port)
            w.write(fp.encode_message("app.a", 1700000000, record, {"chunk": empty_hash_id}))
            reply = msgpack.unpackb(await asyncio.wait_for(r.read(100), 10))
            w.close()
            return reply

        for record in ({"i": 0}, {"i": 1}, {"i": 0}, {"i": 2}):  # the second {"i": 0} is the same line again
            assert await send(record) == {"ack": empty_hash_id}
        assert [e[3]["i"] for e in await stored_events(hub)] == [0, 1, 0, 2]
