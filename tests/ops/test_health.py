"""GET /health and GET /ready on the metrics port: 200 while the loop turns and every listener serves, 503
with a JSON body naming what and why otherwise (a stalled loop, a full disk, a failing write, draining)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgpack

from logport.batch import pack_entry
from logport.health import StoreWatch
from logport.hub import Hub
from logport.metrics import Metrics
from tests.conftest import free_port
from tests.support import LISTENERS, fill_the_disk, hub_config


def get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def aget(port: int, path: str) -> tuple[int, Any]:
    return await asyncio.to_thread(get, port, path)


def metrics_hub(tmp_path: Path, **hub: Any) -> tuple[Hub, int]:
    port = free_port()
    config = hub_config(tmp_path / "data", LISTENERS, metrics={"enabled": True, "port": port}, hub=hub)
    return Hub(config), port


async def test_ready_when_every_listener_serves_then_draining_names_each(tmp_path: Path) -> None:
    hub, port = metrics_hub(tmp_path)
    await hub.start()
    try:
        assert await aget(port, "/health") == (200, {"status": "ok"})
        assert await aget(port, "/ready") == (200, {"status": "ready"})
        metrics = (await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{port}/metrics")).read()
        assert b"logport_ready 1.0" in metrics
        assert b'logport_listener_up{listener="logjam"} 1.0' in metrics
        assert b'logport_listener_connections{listener="segment"} 0.0' in metrics
        assert b'logport_listener_refused_connections_total{listener="forward"} 0.0' in metrics
        await hub.drain(5.0)
        status, body = await aget(port, "/ready")
        assert status == 503
        assert body["problems"][0] == {"hub": "logport", "reason": "draining"}
        assert {p.get("listener") for p in body["problems"][1:]} == set(LISTENERS)
        assert all(p["reason"] == "draining" for p in body["problems"])
        assert (await aget(port, "/health"))[0] == 200  # draining is alive, just not ready
    finally:
        await hub.stop()


async def test_not_ready_on_a_full_disk(tmp_path: Path) -> None:
    hub, port = metrics_hub(tmp_path, ready_min_free_bytes=1 << 62)  # more than any disk has free
    await hub.start()
    try:
        status, body = await aget(port, "/ready")
        assert status == 503
        (problem,) = body["problems"]
        assert problem["store"] == str(tmp_path / "data")
        assert problem["reason"].startswith("disk full: ") and "hub.ready_min_free_bytes 4611686018427387904" in \
            problem["reason"]
    finally:
        await hub.stop()


async def test_health_is_503_while_the_event_loop_is_stuck(tmp_path: Path) -> None:
    hub, port = metrics_hub(tmp_path, health_timeout=0.6)
    await hub.start()
    try:
        assert (await aget(port, "/health"))[0] == 200
        answer: list[tuple[int, Any]] = []

        def probe() -> None:
            time.sleep(1.2)  # asked while the loop is blocked (the HTTP server is a thread of its own)
            answer.append(get(port, "/health"))
            answer.append(get(port, "/ready"))

        thread = threading.Thread(target=probe)
        thread.start()
        time.sleep(2.0)  # the event loop stuck: no await for 2 s
        thread.join()
        assert answer[0][0] == 503 and answer[0][1]["status"] == "stalled", answer
        assert "has not turned for" in answer[0][1]["reason"]
        assert answer[1][0] == 503 and "has not turned" in answer[1][1]["problems"][0]["reason"]
        await asyncio.sleep(0.7)
        assert (await aget(port, "/health"))[0] == 200  # turning again
    finally:
        await hub.stop()


async def test_a_listener_not_serving_is_named(tmp_path: Path) -> None:
    hub, port = metrics_hub(tmp_path)
    await hub.start()
    try:
        hub.services["lumberjack"].stop_accepting()  # type: ignore[attr-defined]
        assert hub.monitor is not None
        hub.monitor.tick()
        status, body = await aget(port, "/ready")
        assert status == 503 and body["problems"] == [{"listener": "lumberjack", "reason": "not bound"}]
    finally:
        await hub.stop()


def test_a_segment_whose_last_write_failed_until_one_succeeds() -> None:
    """From the store's own counters, stamped when they grow: the last error after the last append = failing."""
    metrics = Metrics()
    watch = StoreWatch()
    metrics.appends.labels("a").inc(3)
    assert watch.update(metrics) == set()
    metrics.write_errors.labels("a").inc()
    metrics.write_errors.labels("b").inc()
    assert watch.update(metrics) == {"a", "b"}
    assert watch.update(metrics) == {"a", "b"}  # no news: still failing
    metrics.appends.labels("a").inc()
    assert watch.update(metrics) == {"b"}
    metrics.appends.labels("b").inc()
    metrics.write_errors.labels("b").inc()  # failed after the success: failing again
    assert watch.update(metrics) == {"b"}


async def forward_once(port: int, chunk: str) -> bytes:
    """One acked-mode message; the raw answer (b"" when the hub closed the connection without an ack)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(msgpack.packb(["t", pack_entry(1700000000, 0, {"chunk": chunk}), {"chunk": chunk}]))
    try:
        return await asyncio.wait_for(reader.read(100), 10)
    finally:
        writer.close()


async def test_a_failing_segment_makes_the_hub_not_ready(tmp_path: Path, monkeypatch: Any) -> None:
    """A commit that really fails (every write ENOSPC, in the store's writer): /ready names the segment until
    a write succeeds again."""
    hub, port = metrics_hub(tmp_path, ready_min_free_bytes=0)
    await hub.start()
    fw = hub.config.forward.port
    try:
        assert msgpack.unpackb(await forward_once(fw, "c1")) == {"ack": "c1"}
        fill_the_disk(monkeypatch)
        assert await forward_once(fw, "c2") == b""  # refused: no ack, connection closed
        assert hub.monitor is not None
        hub.monitor.tick()
        status, body = await aget(port, "/ready")
        assert status == 503, body
        assert body["problems"] == [{"segment": "forward", "reason": body["problems"][0]["reason"]}]
        assert body["problems"][0]["reason"].startswith("a write failing")
        monkeypatch.undo()  # space again
        assert msgpack.unpackb(await forward_once(fw, "c3")) == {"ack": "c3"}
        hub.monitor.tick()
        assert await aget(port, "/ready") == (200, {"status": "ready"})
    finally:
        await hub.stop()
