"""The one SparkSession of the test run (local[2], no UI, few shuffle partitions), and a hub to read over
the segment protocol."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from logport.config import Config, StoreConfig
from logport.hub import Hub
from tests.conftest import free_port


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import logport.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("logport-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    logport.spark.register(session)
    yield session
    session.stop()


@contextmanager
def serving_hub(data_dir: str) -> Iterator[tuple[str, asyncio.AbstractEventLoop, Hub]]:
    """A hub serving only the segment protocol on 127.0.0.1 at a free port, in a thread of its own."""
    config = Config()
    config.store = StoreConfig(data_dir=data_dir, fsync="never")
    config.forward.enabled = config.lumberjack.enabled = config.logjam.enabled = False
    config.metrics.enabled = False
    config.segment.port = free_port()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="hub", daemon=True)
    thread.start()
    hub = Hub(config, serve_metrics=False)
    asyncio.run_coroutine_threadsafe(hub.start(), loop).result(30)
    try:
        yield f"127.0.0.1:{config.segment.port}", loop, hub
    finally:
        asyncio.run_coroutine_threadsafe(hub.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def running_hub(tmp_path: Path) -> Iterator[tuple[str, str, asyncio.AbstractEventLoop, Hub]]:
    data_dir = str(tmp_path / "data")
    with serving_hub(data_dir) as (server, loop, hub):
        yield data_dir, server, loop, hub
