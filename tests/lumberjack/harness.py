"""Lumberjack test helpers over tests/support: a hub with only this listener, stored records, a certificate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from logport.batch import StoredBatch
from logport.config import Config
from logport.store import SegmentStore
from tests.support import hub_config, running_hub, self_signed_cert
from tests.support import stored_batches as support_batches

__all__ = ["lumberjack_config", "running_hub", "self_signed_cert", "stored_batches", "stored_records",
           "wait_for_records"]


def lumberjack_config(data_dir: Path, **lumberjack: Any) -> Config:
    """Only the lumberjack listener, on a free port; `lumberjack` sets keys of its section."""
    return hub_config(data_dir, ["lumberjack"], lumberjack=lumberjack)


async def stored_batches(store: SegmentStore, segment: str) -> list[StoredBatch]:
    """Every batch stored in `segment` so far, decoded."""
    return [batch for _, batch in await support_batches(store, segment)]


async def stored_records(store: SegmentStore, segment: str) -> list[Any]:
    return [entry for batch in await stored_batches(store, segment) for entry in batch]


async def wait_for_records(store: SegmentStore, segment: str, count: int, timeout: float = 10.0) -> list[Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        records = await stored_records(store, segment)
        if len(records) >= count or asyncio.get_running_loop().time() > deadline:
            return records
        await asyncio.sleep(0.05)
