"""logport as a logjam-device over real ZeroMQ sockets: agent-style producer -> logport -> store and SUB."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import zmq
import zmq.asyncio

from logport.batch import encode_batch
from logport.hub import Hub
from logport.protocols import logjam as lj
from tests.logjam.helpers import (
    APP_ENV,
    TOPIC,
    AgentProducer,
    RawSubscriber,
    agent_frames,
    meta,
    record,
    until_connected,
)
from tests.support import hub_config, running_hub, stored_batches

METHODS = [lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4]


@pytest.fixture
async def zctx() -> AsyncIterator[zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    yield ctx
    ctx.destroy(linger=0)


def sample(hub: Hub, name: str, **labels: str) -> float:
    assert hub.runtime is not None
    return hub.runtime.metrics.registry.get_sample_value(name, labels) or 0.0


async def data_batches(hub: Hub, segment: str = "logjam") -> list[Any]:
    assert hub.runtime is not None
    return [b for _, b in await stored_batches(hub.runtime.store, segment) if b.option.get("app_env") != "probe"]


async def test_agent_to_store_and_subscriber(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"device_id": 9, "heartbeat_interval": 60.0})
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        probes = await until_connected(sub, producer)
        sent = []
        for i, method in enumerate(METHODS * 3):
            frames = agent_frames(i, method, size=1000)
            sent.append(frames)
            if i % 2:
                await producer.send_async(frames)
            else:
                assert await producer.send_sync(frames) == [APP_ENV, b"202 Accepted"]
        seqs = []
        for frames in sent:
            got = await sub.recv_data()
            assert got[:3] == frames[:3]  # app-env, topic and the body exactly as sent
            m = lj.decode_meta(got[3])
            assert got[3][:2] == b"\xca\xbd"
            assert (m.compression, m.device, m.created_ms) == (lj.decode_meta(frames[3]).compression, 9, 1795316400000)
            assert orjson.loads(lj.decompress(got[2], m.compression, 1 << 20))["i"] == len(seqs)
            seqs.append(m.sequence)
        assert seqs == list(range(probes + 1, probes + 1 + len(sent)))  # one sequence, no gaps, from 1
        stored = await data_batches(hub)
        stored = [b for b in stored if b.option.get("sequence")]
        assert len(stored) == len(sent)
        for i, batch in enumerate(stored):
            (entry,) = list(batch)
            assert entry.record == record(i, size=1000)
            assert (entry.seconds, entry.nanos) == (1795316400, 0)  # started_at
            assert batch.tag == "logjam.myapp-production.logs.myapp.production"
            assert batch.option["source"] == "logjam"
            assert batch.option["app_env"] == "myapp-production"
            assert batch.option["topic"] == "logs.myapp.production"
            assert batch.option["sequence"] == i + 1
            assert batch.option["device"] == 0
            assert batch.option["created_ms"] == 1795316400000
            assert batch.option["received_on"] == "router"
            assert batch.option["peer"] == "127.0.0.1"  # libzmq's Peer-Address (it has no port)
        producer.close()
        sub.close()


async def test_sync_reply_comes_after_the_message_is_stored(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"])
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        for i in range(5):
            assert (await producer.send_sync(agent_frames(i)))[-1] == lj.ACCEPTED
            # read the data directory itself: the reply implies the append is durable
            assert len(await stored_batches(hub.runtime.store, "logjam")) == i + 1
        producer.close()


async def test_ping(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], hub={"hostname": "logport-host"})
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        assert await producer.ping() == [b"ping", b"200 OK", b"logport-host"]
        assert sample(hub, "logport_logjam_pings_total") == 1
        assert await data_batches(hub) == []  # pings are never stored
        producer.close()


INVALID = [
    ([b"", APP_ENV, TOPIC, b"{}", bytes(10)], "meta"),
    ([b"", b"noenv", TOPIC, b"{}", meta(1)], "app_env"),
    ([b"", APP_ENV, b"other.topic", b"{}", meta(1)], "topic"),
    ([b"", APP_ENV, TOPIC, b"{not json", meta(1)], "json"),
    ([b"", APP_ENV, TOPIC, b"[1, 2]", meta(1)], "json"),
    ([b"", APP_ENV, TOPIC, b"garbage", meta(1, compression=lj.ZLIB)], "compression"),
    ([b"", APP_ENV, TOPIC, zlib.compress(b'{"a": "' + b"x" * 5000 + b'"}'), meta(1, compression=lj.ZLIB)], "limit"),
    ([b"", APP_ENV, TOPIC, b"{}"], "frames"),
]


async def test_invalid_messages_are_counted_answered_and_neither_stored_nor_published(
        tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"max_decompressed_size": 4096, "heartbeat_interval": 60.0})
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        probes = await until_connected(sub, producer)
        for frames, reason in INVALID:
            reply = await producer.send_sync(frames[1:])
            assert reply == [frames[1], lj.BAD_REQUEST], reason
            assert sample(hub, "logport_logjam_invalid_messages_total", reason=reason) >= 1
        # async and PULL: nobody is answered, the message is still counted and dropped
        await producer.send_async([b"bad", TOPIC, b"{}", meta(1)])
        push = zctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(f"tcp://127.0.0.1:{cfg.logjam.pull_port}")
        await push.send_multipart([APP_ENV, TOPIC, b"{}", bytes(24)])
        await asyncio.sleep(0.3)
        assert sample(hub, "logport_logjam_invalid_messages_total", reason="app_env") == 2
        assert sample(hub, "logport_logjam_invalid_messages_total", reason="meta") == 2
        total = sum(sample(hub, "logport_logjam_invalid_messages_total", reason=r) for r in {r for _, r in INVALID})
        assert total == len(INVALID) + 2
        assert len(await data_batches(hub)) == probes  # only the probes
        with pytest.raises(TimeoutError):
            await sub.recv_data(0.3)
        push.close()
        producer.close()
        sub.close()


async def test_pull_three_and_four_frames(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"device_id": 4})
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        await until_connected(sub, producer)
        push = zctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(f"tcp://127.0.0.1:{cfg.logjam.pull_port}")
        before = time.time() * 1000
        await push.send_multipart([APP_ENV, TOPIC, orjson.dumps(record(1))])
        await push.send_multipart(agent_frames(2, lj.SNAPPY))
        first, second = await sub.recv_data(), await sub.recv_data()
        m1, m2 = lj.decode_meta(first[3]), lj.decode_meta(second[3])
        assert m1.created_ms >= before - 1  # no meta: stamped with the time of sending
        assert m2.created_ms == 1795316400000 and m2.compression == lj.SNAPPY
        assert m2.sequence == m1.sequence + 1 and m1.device == m2.device == 4
        stored = [b for b in await data_batches(hub) if b.option["received_on"] == "pull"]
        assert [next(iter(b)).record["i"] for b in stored] == [1, 2]
        assert {b.option["peer"] for b in stored} == {"127.0.0.1"}
        push.close()
        producer.close()
        sub.close()


@pytest.mark.parametrize("method", ["zlib", "snappy", "lz4"])
async def test_publish_compression(tmp_path: Path, zctx: zmq.asyncio.Context, method: str) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"publish_compression": method})
    async with running_hub(cfg):
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        await until_connected(sub, producer)
        await producer.send_sync(agent_frames(5, lj.NO_COMPRESSION, size=1000))
        await producer.send_sync(agent_frames(6, lj.SNAPPY, size=1000))
        plain, already = await sub.recv_data(), await sub.recv_data()
        m = lj.decode_meta(plain[3])
        assert m.compression == lj.COMPRESSION_NAMES[method]
        assert len(plain[2]) < 1000
        assert orjson.loads(lj.decompress(plain[2], m.compression, 1 << 20)) == record(5, size=1000)
        assert lj.decode_meta(already[3]).compression == lj.SNAPPY  # kept as the producer compressed it
        producer.close()
        sub.close()


async def test_heartbeats(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], hub={"hostname": "hb-host"},
                     logjam={"device_id": 3, "heartbeat_interval": 0.1})
    async with running_hub(cfg):
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        beats = [await sub.recv(2.0) for _ in range(3)]
        for frames in beats:
            assert frames[:3] == [b"heartbeat", f"tcp://hb-host:{cfg.logjam.pub_port}".encode(), b"{}"]
            m = lj.decode_meta(frames[3])
            assert (m.device, m.compression) == (3, 0)
            assert abs(m.created_ms - time.time() * 1000) < 5000
        seqs = [lj.decode_meta(f[3]).sequence for f in beats]
        assert seqs == list(range(seqs[0], seqs[0] + 3))
        sub.close()


async def test_max_message_size_drops_the_frame(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"max_message_size": 2048})
    async with running_hub(cfg) as hub:
        big = AgentProducer(zctx, cfg.logjam.router_port)
        with pytest.raises(TimeoutError):
            await big.send_sync(agent_frames(1, size=4000), timeout=0.5)  # libzmq drops the peer
        big.close()
        small = AgentProducer(zctx, cfg.logjam.router_port)
        assert (await small.send_sync(agent_frames(2)))[-1] == lj.ACCEPTED
        assert [next(iter(b)).record["i"] for b in await data_batches(hub)] == [2]
        small.close()


async def test_routes_send_logjam_streams_to_other_segments(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"])
    from logport.config import RouteConfig
    cfg.routes = [RouteConfig(match="logjam.myapp-production.**", segment="myapp")]
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        await producer.send_sync(agent_frames(1))
        await producer.send_sync([b"other-production", TOPIC, b"{}", meta(1)])
        assert [b.option["app_env"] for b in await data_batches(hub, "myapp")] == ["myapp-production"]
        assert [b.option["app_env"] for b in await data_batches(hub, "logjam")] == ["other-production"]
        producer.close()


async def test_republishes_events_stored_by_other_protocols(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"republish": ["forward", "lumberjack"], "device_id": 2})
    from logport.config import LogjamRepublishRoute
    cfg.logjam.republish_routes = [LogjamRepublishRoute(match="web.**", app_env="web-production", topic="logs.web")]
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        store = hub.runtime.store
        # stored before logport started following: not replayed
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        await until_connected(sub, producer)
        await store.append("forward", [encode_batch("web.access", [(1795316400, 5_000_000, {"path": "/a"}),
                                                                   (1795316401, 0, {"path": b"/b"})],
                                                    {"source": "forward", "size": 2})])
        await store.append("lumberjack", [encode_batch("beats", [(1795316402, 0, {"message": "hello"})],
                                                       {"source": "lumberjack", "size": 1})])
        got = [await sub.recv_data() for _ in range(3)]
        by_body = {orjson.loads(f[2]).get("path") or orjson.loads(f[2]).get("message"): f for f in got}
        a = by_body["/a"]
        assert a[:2] == [b"web-production", b"logs.web"]
        ma = lj.decode_meta(a[3])
        assert (ma.device, ma.created_ms, ma.compression) == (2, 1795316400005, 0)
        assert by_body["/b"][:2] == [b"web-production", b"logs.web"]
        hello = by_body["hello"]
        assert hello[:2] == [b"logport-production", b"logs.beats"]
        seqs = sorted(lj.decode_meta(f[3]).sequence for f in got)
        assert seqs == list(range(seqs[0], seqs[0] + 3))
        assert sample(hub, "logport_logjam_messages_published_total", kind="republished") == 3
        producer.close()
        sub.close()


async def test_republish_routes_are_checked_at_start(tmp_path: Path) -> None:
    from logport.config import LogjamRepublishRoute
    from logport.errors import ConfigError

    cfg = hub_config(tmp_path, ["logjam"], logjam={"republish": ["forward"]})
    cfg.logjam.republish_routes = [LogjamRepublishRoute(match="**", app_env="noenv", topic="logs")]
    with pytest.raises(ConfigError, match="republish_routes\\[0\\].app_env"):
        async with running_hub(cfg):
            pass


async def test_a_failed_append_is_neither_acknowledged_nor_published(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    from logport.errors import StoreWriteFailed

    cfg = hub_config(tmp_path, ["logjam"], logjam={"heartbeat_interval": 60.0})
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        store = hub.runtime.store
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        await until_connected(sub, producer)
        real_append, real_submit = store.append, store.submit

        async def failing_append(*args: Any, **kwargs: Any) -> Any:
            raise StoreWriteFailed("disk full (test)")

        def failing_submit(*args: Any, **kwargs: Any) -> asyncio.Future[Any]:
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(StoreWriteFailed("disk full (test)"))
            return failed

        # the Python path appends bodies, the C side's drained batches are submitted framed
        store.append, store.submit = failing_append, failing_submit  # type: ignore[method-assign]
        with pytest.raises(TimeoutError):
            await producer.send_sync(agent_frames(1), timeout=0.5)
        with pytest.raises(TimeoutError):
            await sub.recv_data(0.3)
        assert sample(hub, "logport_logjam_store_errors_total") == 1
        store.append, store.submit = real_append, real_submit  # type: ignore[method-assign]
        producer.close()
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        assert (await producer.send_sync(agent_frames(2)))[-1] == lj.ACCEPTED
        assert orjson.loads((await sub.recv_data())[2])["i"] == 2
        producer.close()
        sub.close()


async def test_a_flood_of_invalid_messages_is_counted_but_logged_once(
        tmp_path: Path, zctx: zmq.asyncio.Context, caplog: pytest.LogCaptureFixture) -> None:
    cfg = hub_config(tmp_path, ["logjam"])
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        with caplog.at_level("WARNING", logger="logport.logjam"):
            for _ in range(50):
                await producer.send_async([b"bad", TOPIC, b"{}", meta(1)])
            assert (await producer.send_sync([b"bad", TOPIC, b"{}", meta(1)]))[-1] == lj.BAD_REQUEST
        assert sample(hub, "logport_logjam_invalid_messages_total", reason="app_env") == 51
        lines = [r for r in caplog.records if r.getMessage() == "invalid logjam message"]
        assert len(lines) == 1 and lines[0].reason == "app_env"  # type: ignore[attr-defined]
        producer.close()


async def test_odd_stored_events_are_skipped_or_published_never_fatal(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    import msgpack

    cfg = hub_config(tmp_path, ["logjam"], logjam={"republish": ["raw"]})
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        await until_connected(sub, producer)
        # a record whose str is not UTF-8: published with replacement characters
        odd_record = msgpack.packb(["t", b"\x92\xd7\x00" + bytes(8) + b"\x81\xa1k\xa2\xff\xfe", {}])
        list_key = msgpack.packb(["t", b"\x92\xd7\x00" + bytes(8) + msgpack.packb({(1, 2): "list key"}), {}])
        await hub.runtime.store.append("raw", [
            b"not json, not msgpack \xff",  # an opaque segment-protocol append
            b"[1, 2]",  # JSON, but not an object
            odd_record,
            list_key,  # a map key JSON cannot hold: published with the key as a string
            b'{"opaque": "json object"}',  # an opaque append that is a JSON object: published
        ])
        assert list(orjson.loads((await sub.recv_data())[2])) == ["k"]
        assert orjson.loads((await sub.recv_data())[2]) == {"[1, 2]": "list key"}
        frames = await sub.recv_data()
        assert orjson.loads(frames[2]) == {"opaque": "json object"}
        assert frames[:2] == [b"logport-production", b"logs.raw"]
        with pytest.raises(TimeoutError):
            await sub.recv_data(0.3)
        producer.close()
        sub.close()


PUB_HWM = 10  # messages the PUB queues per subscriber before it drops
SLOW_MESSAGES = 400  # ~4 KB each: several times what the PUB, the SUB and both kernels' buffers hold between them
SLOW_WINDOW = 50  # sync sends in flight at once (group commits them)


async def test_pub_drops_for_a_slow_subscriber_past_pub_hwm_and_stores_everything(
        tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    """A subscriber that does not read costs it messages (a sequence gap), never the hub memory or a reply.

    libzmq's PUB drops silently past SNDHWM: no error, no event, no per-subscriber count, so the hub has
    no metric of PUB drops (logport_logjam_lost_messages counts gaps a logport *consumer* sees); a
    subscriber sees them as gaps in the sequence numbers, which is what this checks.
    """
    cfg = hub_config(tmp_path, ["logjam"], logjam={"pub_hwm": PUB_HWM, "heartbeat_interval": 60.0})
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        producer = AgentProducer(zctx, cfg.logjam.router_port)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port, rcv_hwm=PUB_HWM, rcv_buf=4096)
        probes = await until_connected(sub, producer)  # connected and subscribed; from here on it does not read
        replies = []
        for start in range(0, SLOW_MESSAGES, SLOW_WINDOW):
            window = range(start, min(start + SLOW_WINDOW, SLOW_MESSAGES))
            for i in window:
                await producer.sock.send_multipart([b"", *agent_frames(i, size=4000)])
            replies += [await asyncio.wait_for(producer.sock.recv_multipart(), 10.0) for _ in window]
        assert replies == [[APP_ENV, lj.ACCEPTED]] * SLOW_MESSAGES  # every sync send answered, none refused

        sequences = []
        while True:
            try:
                frames = await sub.recv_data(1.0)
            except TimeoutError:
                break
            sequences.append(lj.decode_meta(frames[3]).sequence)
        first, last = probes + 1, probes + SLOW_MESSAGES  # the sequence numbers the messages were published with
        assert sequences == sorted(set(sequences)) and set(sequences) <= set(range(first, last + 1))
        # the kernel buffers (the hub's send buffer grows to tcp_wmem's maximum) hold some; PUB drops the rest
        assert 0 < len(sequences) < SLOW_MESSAGES, f"{len(sequences)} of {SLOW_MESSAGES} reached the subscriber"
        gaps = [b - a - 1 for a, b in zip([first - 1, *sequences], sequences, strict=False) if b - a > 1]
        assert gaps, f"no gap in the sequence numbers seen: {sequences[:5]}..."
        # handed to PUB all the same: the published counter does not see what PUB dropped
        assert sample(hub, "logport_logjam_messages_published_total", kind="data") == probes + SLOW_MESSAGES

        stored = [next(iter(b)).record.get("i") for b in await data_batches(hub)]
        assert [i for i in stored if i is not None] == list(range(SLOW_MESSAGES))  # every one stored, once
        producer.close()
        sub.close()
        print(f"\npub_hwm {PUB_HWM}: {len(sequences)} of {SLOW_MESSAGES} reached a subscriber that did not read, "
              f"{len(gaps)} gaps ({sum(gaps)} messages dropped by PUB), all stored")
