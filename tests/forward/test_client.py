"""The Forward sender against the logport server and against Fluent Bit's recorded in_forward replies."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from logport.batch import pack_entries
from logport.clients import forward as fc
from logport.errors import PeerUnavailable
from logport.protocols import forward as fp
from tests.conftest import VECTORS, free_port
from tests.forward.helpers import forward_config, make_certificate, running_hub, stored_events

EVENTS = [(1700000000 + i, i * 1000 + 7, {"i": i, "s": "ü" * (i % 3)}) for i in range(20)]


@pytest.mark.parametrize("mode,compress", [
    (fp.Mode.MESSAGE, ""), (fp.Mode.FORWARD, ""), (fp.Mode.PACKED_FORWARD, ""), (fp.Mode.PACKED_FORWARD, "gzip"),
    (fp.Mode.PACKED_FORWARD, "zstd")])
async def test_sender_modes_to_logport_with_handshake(tmp_path: Path, mode: fp.Mode, compress: str) -> None:
    config = forward_config(tmp_path, shared_key="k", users={"u": "p"})
    async with running_hub(config) as hub:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", config.forward.port)], mode=mode,
                              compress=compress, shared_key="k", username="u", password="p", hostname="cli")
        async with fc.ForwardSender(cfg) as sender:
            await sender.send("t.x", EVENTS[:10])
            await sender.send("t.x", EVENTS[10:])
        got = [(s, ns, rec) for _, s, ns, rec, _ in await stored_events(hub)]
        assert got == EVENTS


async def test_failover_to_standby_and_back(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    dead = fc.ServerAddress("127.0.0.1", free_port())  # nothing listens there
    async with running_hub(config) as hub:
        cfg = fc.SenderConfig(servers=[dead, fc.ServerAddress("127.0.0.1", config.forward.port, standby=True)],
                              retry_wait=0.01, connect_timeout=2)
        async with fc.ForwardSender(cfg) as sender:
            await sender.send("t", EVENTS[:5])
            await sender.send("t", EVENTS[5:])
            assert not sender.available(dead)  # marked down after the failed connect
        assert len(await stored_events(hub)) == len(EVENTS)


async def test_wrong_key_against_logport_is_an_authentication_failure(tmp_path: Path) -> None:
    config = forward_config(tmp_path, shared_key="right")
    async with running_hub(config) as hub:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", config.forward.port)], shared_key="wrong",
                              hostname="cli", retries=1)
        async with fc.ForwardSender(cfg) as sender:
            with pytest.raises(PeerUnavailable, match="shared_key mismatch"):
                await sender.send("t", EVENTS[:1])
        assert await stored_events(hub) == []


async def test_ack_timeout_then_retry_is_stored_once(tmp_path: Path) -> None:
    """A lost ack: the sender resends the same chunk; logport acks it again and stores it once."""
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", config.forward.port)], ack_timeout=5,
                              retry_wait=0.01)
        sender = fc.ForwardSender(cfg)
        messages = sender.messages("t", pack_entries(EVENTS), len(EVENTS))
        link = await sender._link(cfg.servers[0])
        link.data_received = lambda data: None  # type: ignore[method-assign]  # the first ack is lost
        link.config = fc.SenderConfig(ack_timeout=0.3)
        with pytest.raises(TimeoutError):
            await link.send(messages)
        await sender.send_messages(messages)  # a new connection, the same chunk id
        await sender.close()
        assert len(await stored_events(hub)) == len(EVENTS)


async def test_tls_with_client_certificate_verification(tmp_path: Path) -> None:
    from logport import tls

    server_cert, server_key = make_certificate(tmp_path, "localhost")
    client_cert, client_key = make_certificate(tmp_path, "client.example")
    config = forward_config(tmp_path)
    config.forward.tls.cert, config.forward.tls.key = server_cert, server_key
    config.forward.tls.client_ca, config.forward.tls.verify_client = client_cert, True
    async with running_hub(config) as hub:
        address = fc.ServerAddress("127.0.0.1", config.forward.port)
        good = fc.SenderConfig(servers=[address], server_hostname="localhost",
                               tls=tls.client_context(server_cert, client_cert, client_key))
        async with fc.ForwardSender(good) as sender:
            await sender.send("tls", EVENTS[:5])
        anonymous = fc.SenderConfig(servers=[address], server_hostname="localhost", retries=1,
                                    tls=tls.client_context(server_cert), ack_timeout=3)
        async with fc.ForwardSender(anonymous) as sender:
            with pytest.raises(PeerUnavailable):  # no client certificate: the server refuses the TLS session
                await sender.send("tls", EVENTS[5:])
        assert [(s, ns, rec) for _, s, ns, rec, _ in await stored_events(hub)] == EVENTS[:5]


def test_choose_by_weight_then_standby() -> None:
    heavy, light, standby = (fc.ServerAddress("h", 1, 90), fc.ServerAddress("l", 2, 10),
                             fc.ServerAddress("s", 3, standby=True))
    sender = fc.ForwardSender(fc.SenderConfig(servers=[heavy, light, standby]))
    picks = [sender.choose() for _ in range(2000)]
    assert standby not in picks and 0.85 < picks.count(heavy) / len(picks) < 0.95
    sender.down_until[id(heavy)] = sender.down_until[id(light)] = float("inf")
    assert sender.choose() is standby  # every primary down: the standby
    sender.down_until[id(standby)] = float("inf")
    assert sender.choose() in (heavy, light, standby)  # all down: still try one


def test_failure_detector_phi() -> None:
    fd = fc.FailureDetector(threshold=8, hard_timeout=60)
    for t in range(20):
        fd.heartbeat(100.0 + t)
    assert fd.available(119.5) and fd.phi(119.5) < 1
    assert not fd.available(140.0)
    never = fc.FailureDetector(8, hard_timeout=5, now=0.0)  # never heard from: silent since its start
    assert never.available(4.9) and never.phi(4.9) == 0 and not never.available(5.1)
    once = fc.FailureDetector(8, hard_timeout=5, now=0.0)
    once.heartbeat(4.0)  # the first heartbeat starts the silence again; it makes no interval
    assert not once.intervals and once.available(8.9) and not once.available(9.1)
    hard = fc.FailureDetector(1e9, hard_timeout=5)
    hard.heartbeat(0.0)
    hard.heartbeat(1.0)
    assert not hard.available(10.0)


async def heartbeats_heard(detector: fc.FailureDetector, beats: int, tries: int) -> None:
    """Wait (tries x 50 ms at most) until the detector has `beats` intervals between heartbeat replies."""
    for _ in range(tries):
        if len(detector.intervals) >= beats:
            return
        await asyncio.sleep(0.05)


async def test_udp_and_transport_heartbeats_feed_the_detector(tmp_path: Path) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config):
        for kind in ("udp", "transport"):
            server = fc.ServerAddress("127.0.0.1", config.forward.port)
            cfg = fc.SenderConfig(servers=[server], heartbeat=kind, heartbeat_interval=0.05)
            async with fc.ForwardSender(cfg) as sender:
                detector = sender.detectors[id(server)]
                await heartbeats_heard(detector, 3, tries=100)
                assert len(detector.intervals) >= 3 and sender.available(server), kind


async def test_server_that_never_answers_heartbeats_is_down_after_hard_timeout(tmp_path: Path) -> None:
    """As Fluentd's detector, silence counts from the start: a primary whose heartbeats never get a reply
    (it accepts TCP, never acks) gives way to the standby after hard_timeout."""
    connections = 0

    async def never_acks(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await r.read()
        w.close()

    silent = await asyncio.start_server(never_acks, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", port))  # heartbeat datagrams arrive and are never answered
        config = forward_config(tmp_path)
        async with silent, running_hub(config) as hub:
            primary = fc.ServerAddress("127.0.0.1", port)
            standby = fc.ServerAddress("127.0.0.1", config.forward.port, standby=True)
            cfg = fc.SenderConfig(servers=[primary, standby], heartbeat="udp", heartbeat_interval=0.05,
                                  hard_timeout=0.5, ack_timeout=2, retry_wait=0.01)
            async with fc.ForwardSender(cfg) as sender:
                assert sender.choose() is primary  # not suspected yet
                await asyncio.sleep(0.8)
                assert not sender.available(primary) and sender.available(standby)
                assert all(sender.choose() is standby for _ in range(50))
                await sender.send("t", EVENTS)
            assert connections == 0  # the batch went to the standby at once
            assert len(await stored_events(hub)) == len(EVENTS)


async def test_transport_heartbeat_to_a_tls_port_is_a_verified_tls_handshake(tmp_path: Path) -> None:
    from logport import tls

    cert, key = make_certificate(tmp_path, "forward.example")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []

    def record_name(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = record_name
    handshakes = 0

    async def after_handshake(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal handshakes
        handshakes += 1
        w.close()

    server = await asyncio.start_server(after_handshake, "127.0.0.1", 0, ssl=context)
    address = fc.ServerAddress("127.0.0.1", server.sockets[0].getsockname()[1])
    async with server:
        for ca, heard in ((cert, True), ("", False)):  # our CA, then the system's, which do not know it
            cfg = fc.SenderConfig(servers=[address], heartbeat="transport", heartbeat_interval=0.05,
                                  hard_timeout=0.5, tls=tls.client_context(ca), server_hostname="forward.example")
            async with fc.ForwardSender(cfg) as sender:
                detector = sender.detectors[id(address)]
                await heartbeats_heard(detector, 2, tries=40)
                assert detector.heard is heard and sender.available(address) is heard, ca
        assert handshakes >= 3 and set(names) == {"forward.example"}


# --- Fluent Bit in_forward, replayed from its recording ---

async def replay_server(doc: dict[str, Any]) -> tuple[asyncio.AbstractServer, int, asyncio.Future[bytes]]:
    """Plays the recorded server side: each recorded reply once the client sent what preceded it."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[bytes] = loop.create_future()
    conv = doc["conversation"]

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got = b""
        try:
            for entry in conv:
                data = bytes.fromhex(entry["hex"])
                if entry["dir"] == "server->client":
                    w.write(data)
                    await w.drain()
                else:
                    want = len(got) + len(data)
                    while len(got) < want:
                        more = await asyncio.wait_for(r.read(want - len(got)), 5)
                        if not more:
                            break
                        got += more
        finally:
            if not received.done():
                received.set_result(got)
            w.close()  # after the last recorded entry Fluent Bit's side is done (or closes on a wrong key)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], received


def recorded_client(doc: dict[str, Any], port: int) -> tuple[fc.SenderConfig, bytes]:
    """A sender set up as the recorded client was (key, user, hostname, salt), and the bytes it sent."""
    cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", port)], shared_key=doc["shared_key_used"],
                          username="alice", password=doc["users"]["alice"], hostname=doc["client_hostname"],
                          salt=doc["client_salt"], retries=1, ack_timeout=5)
    sent = b"".join(bytes.fromhex(c["hex"]) for c in doc["conversation"] if c["dir"] == "client->server")
    return cfg, sent


async def test_fluent_bit_server_recording_handshake_and_ack() -> None:
    doc = json.loads((VECTORS / "fluent-bit-in_forward-secure-ack.json").read_text())
    server, port, received = await replay_server(doc)
    async with server:
        cfg, client_bytes = recorded_client(doc, port)
        events = [(0x692125A0, 5, {"k": k}) for k in range(3)]
        async with fc.ForwardSender(cfg) as sender:
            await sender.send("cap.tag", events, {"chunk": "Y2FwdHVyZS1jaHVuay0wMQ=="})  # returns: acked
        assert await received == client_bytes  # our PING and chunk byte for byte what Fluent Bit accepted


async def test_fluent_bit_server_recording_wrong_key_closes_without_pong() -> None:
    doc = json.loads((VECTORS / "fluent-bit-in_forward-wrong-key.json").read_text())
    server, port, received = await replay_server(doc)
    async with server:
        cfg, client_bytes = recorded_client(doc, port)
        async with fc.ForwardSender(cfg) as sender:
            with pytest.raises(PeerUnavailable, match="closed the connection during the handshake"):
                await sender.send("cap.tag", EVENTS[:1])
            assert not sender.available(cfg.servers[0])  # an authentication failure marks the server down
        assert await received == client_bytes


async def test_concurrent_sends_share_one_kept_connection(tmp_path: Path) -> None:
    config = forward_config(tmp_path, shared_key="k")
    async with running_hub(config) as hub:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", config.forward.port)], shared_key="k",
                              hostname="cli")
        async with fc.ForwardSender(cfg) as sender:
            await asyncio.gather(*(sender.send(f"t.{n}", EVENTS[n:n + 1]) for n in range(20)))
            assert len(sender.links) == 1
            server = hub.services["forward"]
            assert len(server.connections) == 1  # type: ignore[attr-defined]  # one connection, one handshake
        assert sorted(e[3]["i"] for e in await stored_events(hub)) == list(range(20))


class CountingServer:
    """A Forward server that acks every chunk and counts connections: opened in all, and open now."""

    def __init__(self) -> None:
        self.opened = 0
        self.open = 0

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.opened += 1
        self.open += 1
        conn = fp.ServerConnection()
        try:
            while data := await r.read(65536):
                conn.receive_data(data)
                while (event := conn.next_event()) is not fp.NEED_DATA:
                    if isinstance(event, fp.EventBatch) and event.chunk is not None:
                        w.write(conn.send(fp.Ack(event.chunk)))
        finally:
            self.open -= 1
            w.close()

    async def wait_closed(self, timeout: float = 5.0) -> None:
        """Until the server saw every connection closed."""
        for _ in range(int(timeout / 0.02)):
            if not self.open:
                return
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("keepalive,connections", [(False, 5), (True, 1)])
async def test_keepalive_off_is_one_connection_per_send(keepalive: bool, connections: int) -> None:
    counting = CountingServer()
    server = await asyncio.start_server(counting.handle, "127.0.0.1", 0)
    async with server:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", server.sockets[0].getsockname()[1])],
                              keepalive=keepalive, ack_timeout=5)
        async with fc.ForwardSender(cfg) as sender:
            for n in range(5):
                await sender.send("t", EVENTS[n:n + 1])
            await counting.wait_closed(1.0 if keepalive else 5.0)
            assert counting.opened == connections
            assert counting.open == (1 if keepalive else 0)  # without keepalive each is closed after its ack
            assert len(sender.links) == (1 if keepalive else 0)


async def test_idle_kept_connection_is_closed_after_keepalive_timeout() -> None:
    counting = CountingServer()
    server = await asyncio.start_server(counting.handle, "127.0.0.1", 0)
    async with server:
        address = fc.ServerAddress("127.0.0.1", server.sockets[0].getsockname()[1])
        cfg = fc.SenderConfig(servers=[address], keepalive_timeout=0.4, ack_timeout=5)
        async with fc.ForwardSender(cfg) as sender:
            for n in range(3):  # sends closer together than keepalive_timeout keep the connection
                await sender.send("t", EVENTS[n:n + 1])
                await asyncio.sleep(0.2)
            assert (counting.opened, counting.open) == (1, 1)
            await counting.wait_closed(2.0)
            assert counting.open == 0 and sender.links[id(address)].closed  # we closed it, idle, unasked
            await sender.send("t", EVENTS[3:4])
            assert (counting.opened, counting.open) == (2, 1)  # the next send connects again


async def test_a_handshake_that_times_out_closes_its_connection() -> None:
    """A server that accepts but never sends HELO: the sender gives up after connect_timeout and closes the
    connection instead of leaving it half open on the server."""
    closed = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client closes
        closed.set()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", port)], shared_key="k", hostname="cli",
                          connect_timeout=0.2)
    sender = fc.ForwardSender(cfg)
    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        await sender._link(cfg.servers[0])
    await asyncio.wait_for(closed.wait(), 5)
    await sender.close()
    server.close()
    await server.wait_closed()
