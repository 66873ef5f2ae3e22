"""logport as a logjam consumer: SUB to a device, exact app-env matching, lost messages counted exactly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import zmq
import zmq.asyncio

from logport.hub import Hub
from logport.protocols import logjam as lj
from tests.conftest import free_port
from tests.logjam.helpers import APP_ENV, TOPIC, AgentProducer, record
from tests.support import hub_config, running_hub, stored_batches


def sample(hub: Hub, name: str, **labels: str) -> float:
    assert hub.runtime is not None
    return hub.runtime.metrics.registry.get_sample_value(name, labels) or 0.0


class FakeDevice:
    """A PUB socket that publishes as logjam-device does, with sequence numbers chosen by the test."""

    def __init__(self, ctx: zmq.asyncio.Context, device: int = 3) -> None:
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.endpoint)
        self.device = device
        self.sequence = 0

    def meta(self) -> bytes:
        self.sequence += 1
        return lj.Meta(0, self.device, int(time.time() * 1000), self.sequence).pack()

    async def heartbeat(self) -> None:
        await self.sock.send_multipart([lj.HEARTBEAT, self.endpoint.encode(), b"{}", self.meta()])

    async def data(self, i: int, app_env: bytes = APP_ENV) -> None:
        await self.sock.send_multipart([app_env, TOPIC, orjson.dumps(record(i)), self.meta()])

    def drop(self) -> None:
        """Lose the next message on purpose: its sequence number is used but nothing is sent."""
        self.sequence += 1

    async def until_heard(self, hub: Hub, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while sample(hub, "logport_logjam_messages_received_total", socket="sub") == 0:
            assert time.monotonic() < deadline, "the consumer never connected"
            await self.heartbeat()
            await asyncio.sleep(0.05)

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
async def zctx() -> AsyncIterator[zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    yield ctx
    ctx.destroy(linger=0)


async def wait_for(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


async def test_gap_counting_is_exact(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    device = FakeDevice(zctx)
    cfg = hub_config(tmp_path, [], logjam={"subscribe": [device.endpoint], "subscribe_segment": "consumed"})
    cfg.logjam.enabled = True
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        await device.until_heard(hub)
        dropped = {3, 4, 17, 40, 41, 42, 99}
        sent = []
        for i in range(100):
            if i in dropped:
                device.drop()
            else:
                await device.data(i)
                sent.append(i)
        await device.heartbeat()
        await wait_for(lambda: sample(hub, "logport_logjam_messages_stored_total", socket="sub") == len(sent))
        await asyncio.sleep(0.1)
        assert sample(hub, "logport_logjam_lost_messages_total", endpoint=device.endpoint) == len(dropped)
        stored = [b for _, b in await stored_batches(hub.runtime.store, "consumed")]
        assert [next(iter(b)).record["i"] for b in stored] == sent
        assert {b.option["device"] for b in stored} == {3}
        assert stored[0].option["received_on"] == "sub" and stored[0].option["peer"] == device.endpoint
        # the device restarts: numbering from 1 again is a new baseline, not a loss
        device.sequence = 0
        await device.data(1000)
        await device.data(1001)
        await wait_for(lambda: sample(hub, "logport_logjam_messages_stored_total", socket="sub") == len(sent) + 2)
        assert sample(hub, "logport_logjam_lost_messages_total", endpoint=device.endpoint) == len(dropped)
        assert sample(hub, "logport_logjam_sequence_restarts_total", endpoint=device.endpoint) == 1
    device.close()


async def test_an_invalid_published_message_is_no_gap(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    """A message that arrived but is refused (a bad app-env, a body that is not JSON) used its sequence
    number: it is counted invalid, not lost."""
    device = FakeDevice(zctx)
    cfg = hub_config(tmp_path, [], logjam={"subscribe": [device.endpoint], "subscribe_segment": "consumed"})
    cfg.logjam.enabled = True
    async with running_hub(cfg) as hub:
        await device.until_heard(hub)
        await device.data(0)
        await device.data(1, app_env=b"not an app env")  # refused by the name check
        await device.sock.send_multipart([APP_ENV, TOPIC, b"{not json", device.meta()])  # refused by the decoder
        await device.data(3)
        await wait_for(lambda: sample(hub, "logport_logjam_messages_stored_total", socket="sub") == 2)
        await device.heartbeat()
        await asyncio.sleep(0.1)
        assert sample(hub, "logport_logjam_invalid_messages_total", reason="app_env") == 1
        assert sample(hub, "logport_logjam_invalid_messages_total", reason="json") == 1
        assert sample(hub, "logport_logjam_lost_messages_total", endpoint=device.endpoint) == 0
    device.close()


async def test_device_zero_is_not_counted(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    device = FakeDevice(zctx, device=0)
    cfg = hub_config(tmp_path, [], logjam={"subscribe": [device.endpoint]})
    cfg.logjam.enabled = True
    async with running_hub(cfg) as hub:
        await device.until_heard(hub)
        device.drop()
        device.drop()
        await device.data(1)
        await wait_for(lambda: sample(hub, "logport_logjam_messages_stored_total", socket="sub") == 1)
        assert sample(hub, "logport_logjam_lost_messages_total", endpoint=device.endpoint) == 0
    device.close()


async def test_app_env_subscription_matches_exactly(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    device = FakeDevice(zctx)
    cfg = hub_config(tmp_path, [], logjam={"subscribe": [device.endpoint],
                                           "subscribe_app_envs": ["myapp-production"]})
    cfg.logjam.enabled = True
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        await device.until_heard(hub)  # heartbeats are subscribed too
        await device.data(1, b"myapp-productionx")  # ZeroMQ's prefix match lets this through
        await device.data(2, b"other-production")  # this one ZeroMQ filters
        await device.data(3)
        await wait_for(lambda: sample(hub, "logport_logjam_messages_stored_total", socket="sub") == 1)
        await asyncio.sleep(0.2)
        stored = [b for _, b in await stored_batches(hub.runtime.store, "logjam")]
        assert [next(iter(b)).record["i"] for b in stored] == [3]
    device.close()


async def test_reconnects_after_silence(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    device = FakeDevice(zctx)
    cfg = hub_config(tmp_path, [], logjam={"subscribe": [device.endpoint], "silence_timeout": 0.2})
    cfg.logjam.enabled = True
    async with running_hub(cfg) as hub:
        await device.until_heard(hub)
        await wait_for(lambda: sample(hub, "logport_logjam_reconnects_total", endpoint=device.endpoint) >= 2)
        before = sample(hub, "logport_logjam_messages_received_total", socket="sub")
        deadline = time.monotonic() + 5
        while sample(hub, "logport_logjam_messages_received_total", socket="sub") == before:
            assert time.monotonic() < deadline
            await device.heartbeat()
            await asyncio.sleep(0.05)
    device.close()


async def test_logport_consumes_another_logport(tmp_path: Path, zctx: zmq.asyncio.Context) -> None:
    upstream_cfg = hub_config(tmp_path / "up", ["logjam"], logjam={"device_id": 11, "heartbeat_interval": 0.1})
    async with running_hub(upstream_cfg):
        endpoint = f"tcp://127.0.0.1:{upstream_cfg.logjam.pub_port}"
        cfg = hub_config(tmp_path / "down", ["logjam"], logjam={"subscribe": [endpoint]})
        async with running_hub(cfg) as hub:
            assert hub.runtime is not None
            await wait_for(lambda: sample(hub, "logport_logjam_messages_received_total", socket="sub") > 0)
            producer = AgentProducer(zctx, upstream_cfg.logjam.router_port)
            for i in range(20):
                await producer.send_async([APP_ENV, TOPIC, orjson.dumps(record(i)),
                                           lj.Meta(0, 0, 1795316400000, i + 1).pack()])
            await wait_for(lambda: sample(hub, "logport_logjam_messages_stored_total", socket="sub") == 20)
            stored = [b for _, b in await stored_batches(hub.runtime.store, "logjam")]
            assert [next(iter(b)).record["i"] for b in stored] == list(range(20))
            assert {b.option["device"] for b in stored} == {11}
            assert sample(hub, "logport_logjam_lost_messages_total", endpoint=endpoint) == 0
            producer.close()
