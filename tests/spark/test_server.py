"""The `server` option: the same rows over the segment protocol from a running hub as from its data directory."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from logport.config import Config, StoreConfig
from logport.hub import Hub
from tests.conftest import free_port
from tests.spark.sample import build_sample, forward_batches

pytestmark = pytest.mark.slow  # a Spark job each: seconds, even on the shared session


@pytest.fixture
def running_hub(tmp_path: Path) -> Iterator[tuple[str, str, asyncio.AbstractEventLoop, Hub]]:
    config = Config()
    config.store = StoreConfig(data_dir=str(tmp_path / "data"), fsync="never")
    config.forward.enabled = config.lumberjack.enabled = config.logjam.enabled = False
    config.metrics.enabled = False
    config.segment.port = free_port()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="hub", daemon=True)
    thread.start()
    hub = Hub(config, serve_metrics=False)
    asyncio.run_coroutine_threadsafe(hub.start(), loop).result(30)
    try:
        yield config.store.data_dir, f"127.0.0.1:{config.segment.port}", loop, hub
    finally:
        asyncio.run_coroutine_threadsafe(hub.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_server_reads_equal_directory_reads(spark, running_hub) -> None:  # type: ignore[no-untyped-def]
    data_dir, server, loop, hub = running_hub
    sample = build_sample(logjam_requests=120)

    async def store_all() -> None:
        for name, bodies in sample.bodies.items():
            for body in bodies:
                await hub.runtime.store.append(name, [body])

    asyncio.run_coroutine_threadsafe(store_all(), loop).result(60)
    columns = ["segment", "offset", "`index`", "tag", "time_ns", "record", "source", "meta", "option", "raw"]

    def rows(**options: str) -> list:  # type: ignore[type-arg]
        reader = spark.read.format("logport")
        for key, value in options.items():
            reader = reader.option(key, value)
        return sorted(reader.load().selectExpr(*columns).collect())

    by_dir = rows(path=data_dir)
    by_server = rows(server=server, partitionBytes="4096")
    # forward (4 odd entries, 1 opaque), lumberjack, logjam (one event per stored batch)
    assert len(by_dir) == 6 * 25 + 4 + 1 + 5 * 30 + len(sample.bodies["logjam"])
    assert by_server == by_dir


def test_stream_over_server_follows_appends(spark, running_hub) -> None:  # type: ignore[no-untyped-def]
    _, server, loop, hub = running_hub
    bodies = forward_batches(6, 10)

    def store(items: list[bytes]) -> None:
        async def append() -> None:
            for body in items:
                await hub.runtime.store.append("app", [body])
        asyncio.run_coroutine_threadsafe(append(), loop).result(60)

    store(bodies[:3])
    df = spark.readStream.format("logport").option("server", server).option("maxBytesPerTrigger", "5000").load()
    query = df.selectExpr("segment", "offset", "`index`").writeStream.format("memory").queryName("over_server").start()
    try:
        query.processAllAvailable()
        store(bodies[3:])
        query.processAllAvailable()
        rows = spark.sql("SELECT * FROM over_server").collect()
    finally:
        query.stop()
    keys = [(r.segment, r.offset, r["index"]) for r in rows]
    assert len(keys) == len(set(keys)) == 60
