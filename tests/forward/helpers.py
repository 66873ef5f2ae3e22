"""Shared by the Forward tests: a hub with only the Forward listener, and reading back what it stored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from logport.config import Config
from logport.hub import Hub
from tests.support import hub_config, running_hub, self_signed_cert, stored_batches

__all__ = ["forward_config", "make_certificate", "running_hub", "stored_events", "wait_for_events"]


def forward_config(tmp_path: Path, **forward: Any) -> Config:
    return hub_config(tmp_path / "data", ["forward"], forward=forward)


async def stored_events(hub: Hub, segment: str = "forward") -> list[tuple[str, int, int, Any, dict[str, Any]]]:
    """(tag, seconds, nanos, record, option) of every stored event, in order."""
    assert hub.runtime is not None
    return [(batch.tag, e.seconds, e.nanos, e.record, batch.option)
            for _, batch in await stored_batches(hub.runtime.store, segment) for e in batch]


async def wait_for_events(hub: Hub, count: int, segment: str = "forward", timeout: float = 15.0) -> list[Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = await stored_events(hub, segment)
        if len(events) >= count or asyncio.get_running_loop().time() > deadline:
            return events
        await asyncio.sleep(0.05)


def make_certificate(directory: Path, name: str = "localhost") -> tuple[str, str]:
    """tests.support's self-signed certificate, as the str paths the Forward config takes."""
    cert, key = self_signed_cert(directory, name)
    return str(cert), str(key)
