"""Shared by the Forward tests: a hub with only the Forward listener, and reading back what it stored."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from logport.batch import decode_batch
from logport.config import Config, ForwardConfig, StoreConfig
from logport.hub import Hub
from logport.store import frames
from tests.conftest import free_port


def forward_config(tmp_path: Path, **forward: Any) -> Config:
    config = Config(store=StoreConfig(data_dir=str(tmp_path / "data")))
    config.forward = ForwardConfig(port=free_port(), **forward)
    config.lumberjack.enabled = False
    config.segment.enabled = False
    config.logjam.enabled = False
    config.metrics.enabled = False
    return config


@contextlib.asynccontextmanager
async def running_hub(config: Config) -> AsyncIterator[Hub]:
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


async def stored_events(hub: Hub, segment: str = "forward") -> list[tuple[str, int, int, Any, dict[str, Any]]]:
    """(tag, seconds, nanos, record, option) of every stored event, in order."""
    assert hub.runtime is not None
    store = hub.runtime.store
    if not store.exists(segment):
        return []
    info = store.info(segment)
    out = []
    offset = info.start_offset
    while offset < info.end_offset:
        result = await store.read_frames(segment, offset, 1 << 26)
        for _, t, body in frames.iter_frames(result.data, result.offset):
            if t == frames.EVENT:
                batch = decode_batch(bytes(body))
                out.extend((batch.tag, e.seconds, e.nanos, e.record, batch.option) for e in batch)
        offset = result.next_offset
    return out


async def wait_for_events(hub: Hub, count: int, segment: str = "forward", timeout: float = 15.0) -> list[Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = await stored_events(hub, segment)
        if len(events) >= count or asyncio.get_running_loop().time() > deadline:
            return events
        await asyncio.sleep(0.05)


def make_certificate(directory: Path, name: str = "localhost") -> tuple[str, str]:
    """A self-signed certificate (its own CA) for `name` and 127.0.0.1: (cert path, key path)."""
    import subprocess

    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name},IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)
