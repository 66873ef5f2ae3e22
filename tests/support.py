"""Test support shared by every protocol's tests: a hub with chosen listeners on free ports,
and the batches a segment holds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from logport.batch import StoredBatch, decode_batch
from logport.config import Config
from logport.hub import Hub
from logport.store import SegmentStore, frames
from tests.conftest import free_port

LISTENERS = ("forward", "lumberjack", "segment", "logjam")
LOGJAM_PORTS = ("router_port", "pull_port", "pub_port")


def hub_config(data_dir: Path | str, enable: Iterable[str], **sections: dict[str, Any]) -> Config:
    """A config with only the `enable`d listeners, each on free ports, metrics off.

    `sections` set further keys: `hub_config(tmp, ["forward"], forward={"shared_key": "k"})`.
    """
    config = Config()
    config.store.data_dir = str(data_dir)
    config.metrics.enabled = False
    enabled = set(enable)
    for name in LISTENERS:
        section = getattr(config, name)
        section.enabled = name in enabled
        if name == "logjam":
            for key in LOGJAM_PORTS:
                setattr(section, key, free_port())
        else:
            section.port = free_port()
    for name, values in sections.items():
        target = getattr(config, name)
        for key, value in values.items():
            setattr(target, key, value)
    return config


@contextlib.asynccontextmanager
async def running_hub(config: Config) -> AsyncIterator[Hub]:
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


async def stored_batches(store: SegmentStore, segment: str) -> list[tuple[int, StoredBatch]]:
    """(offset, batch) of every Event frame in a segment, in order."""
    if not store.exists(segment):
        return []
    info = store.info(segment)
    out: list[tuple[int, StoredBatch]] = []
    offset = info.start_offset
    while offset < info.end_offset:
        r = await store.read_frames(segment, offset, 1 << 24)
        for frame_offset, frame_type, body in frames.iter_frames(r.data, offset):
            if frame_type == frames.EVENT:
                out.append((frame_offset, decode_batch(body)))
        offset = r.next_offset
    return out
