"""`logport segments` and `logport cat` on awkward data directories: odd opaque events."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgpack
import pytest

from logport.batch import encode_batch
from logport.cli import main
from logport.config import StoreConfig
from logport.store import SegmentStore

# a body that decodes as a [tag, entries] batch whose entries are not msgpack: an opaque event
ODD_BATCH = msgpack.packb(["t", b"\xc1"])


async def append(data_dir: Path, segment: str, bodies: list[bytes]) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    try:
        for body in bodies:
            await store.append(segment, [body])
    finally:
        await store.close()


def test_segments_counts_an_odd_opaque_event_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = encode_batch("app", [(1, 0, {"a": 1}), (2, 0, {"a": 2})], {})  # no size option: entries counted
    asyncio.run(append(tmp_path, "odd", [batch, ODD_BATCH, b"\x00raw"]))
    assert main(["segments", "--data-dir", str(tmp_path), "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["segment"], row["events"]) == ("odd", 4)
    assert main(["segments", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:5:4] == ["odd", "4"]
    assert main(["cat", "odd", "--data-dir", str(tmp_path)]) == 0  # cat prints it as one raw event
    assert len(capsys.readouterr().out.splitlines()) == 4
