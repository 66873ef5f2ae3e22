"""Republishing with real peers: fluent-logger (Forward) and pylogbeat (Beats) send to logport, a raw pyzmq
SUB sees each stored event as a logjam message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pylogbeat
import pytest
import zmq
import zmq.asyncio

from logport.config import LogjamRepublishRoute
from logport.protocols import logjam as lj
from tests.support import hub_config, running_hub

pytestmark = pytest.mark.interop


async def test_forward_and_beats_events_are_republished_as_logjam(tmp_path: Path) -> None:
    from fluent import sender

    cfg = hub_config(tmp_path, ["forward", "lumberjack", "logjam"],
                     logjam={"republish": ["forward", "lumberjack"], "device_id": 5, "heartbeat_interval": 0.1,
                             "publish_compression": "snappy"})
    cfg.logjam.republish_routes = [LogjamRepublishRoute(match="shop.**", app_env="shop-production",
                                                        topic="logs.shop")]
    ctx = zmq.asyncio.Context()
    try:
        async with running_hub(cfg):
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(f"tcp://127.0.0.1:{cfg.logjam.pub_port}")
            assert (await asyncio.wait_for(sub.recv_multipart(), 5))[0] == lj.HEARTBEAT  # connected

            def send_forward() -> None:
                s = sender.FluentSender("shop", port=cfg.forward.port, nanosecond_precision=True, timeout=10)
                for i in range(3):
                    assert s.emit_with_time("web", sender.EventTime(1795316400, i * 1_000_000),
                                            {"path": f"/p{i}", "code": 200}), s.last_error
                s.close()

            def send_beats() -> None:
                with pylogbeat.PyLogBeatClient("127.0.0.1", cfg.lumberjack.port, timeout=10) as client:
                    client.send([{"@timestamp": "2026-11-22T04:05:06.000Z", "message": "beat line"}])

            await asyncio.to_thread(send_forward)
            await asyncio.to_thread(send_beats)
            got: list[list[bytes]] = []
            while len(got) < 4:
                frames = await asyncio.wait_for(sub.recv_multipart(), 10)
                if frames[0] != lj.HEARTBEAT:
                    got.append(frames)
            shop = [f for f in got if f[0] == b"shop-production"]
            assert [f[1] for f in shop] == [b"logs.shop"] * 3
            for i, frames in enumerate(shop):
                m = lj.decode_meta(frames[3])
                assert (m.device, m.compression, m.created_ms) == (5, lj.SNAPPY, 1795316400000 + i)
                assert orjson.loads(lj.decompress(frames[2], m.compression, 1 << 20)) == {"path": f"/p{i}",
                                                                                           "code": 200}
            (beat,) = [f for f in got if f[0] != b"shop-production"]
            assert beat[0] == b"logport-production"
            assert lj.valid_topic(beat[1])
            m = lj.decode_meta(beat[3])
            assert orjson.loads(lj.decompress(beat[2], m.compression, 1 << 20))["message"] == "beat line"
            sub.close(linger=0)
    finally:
        ctx.destroy(linger=0)
