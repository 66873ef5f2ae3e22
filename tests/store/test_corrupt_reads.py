"""Corrupt stored bytes reach no client: the segment listener answers the read with an error naming the
range, counts it, and serves what is sound on either side of it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from logport.clients.segment import BlockingSegmentClient
from logport.config import Config
from logport.errors import CorruptData
from logport.store.files import SEGMENTS_DIR, chunk_path
from logport.store.groups import COMMIT_SIZE, ChunkLayout, walk_chunk
from tests.support import hub_config, running_hub

BODIES = [f"event {i:03d} ".encode() * 8 for i in range(30)]


async def stored_then_damaged(config: Config, event: int) -> tuple[Path, ChunkLayout, int, int]:
    """BODIES stored through a hub, one append each, which stops; then a bit of event `event` flipped: (the chunk
    file, its layout before, the range of the damaged group)."""
    async with running_hub(config) as hub:
        assert hub.runtime is not None
        for body in BODIES:
            await hub.runtime.store.append("s", [body])
    path = chunk_path(Path(config.store.data_dir) / SEGMENTS_DIR / "s", 0)
    layout = walk_chunk(path.read_bytes(), 0)
    start = layout.groups[event]
    end = layout.groups[event + 1] if event + 1 < len(layout.groups) else layout.end
    data = bytearray(path.read_bytes())
    data[start + COMMIT_SIZE + 12] ^= 0x10
    path.write_bytes(bytes(data))
    return path, layout, start, end


async def test_the_segment_listener_refuses_a_corrupt_range_and_serves_the_rest(tmp_path: Path) -> None:
    config = hub_config(tmp_path / "data", ["segment"])
    path, layout, bad_start, bad_end = await stored_then_damaged(config, 10)  # a bit of the 11th event

    async with running_hub(config) as hub:
        assert hub.runtime is not None

        def read_all() -> tuple[list[bytes], CorruptData]:
            client = BlockingSegmentClient("127.0.0.1", config.segment.port)
            try:
                got = [bytes(body) for _, t, body in client.iter_frames("s", 0, bad_start) if t == 0]
                with pytest.raises(CorruptData) as caught:
                    list(client.iter_frames("s", bad_start, layout.end))
                got += [bytes(body) for _, t, body in client.iter_frames("s", caught.value.end, layout.end) if t == 0]
                return got, caught.value
            finally:
                client.close()

        got, error = await asyncio.to_thread(read_all)
        assert got == BODIES[:10] + BODIES[11:]  # never a changed event; the rest is served
        assert (error.start, error.end, error.path) == (bad_start, bad_end, str(path))
        assert "checksum mismatch" in str(error)
        count = hub.metrics.registry.get_sample_value("logport_store_corrupt_reads_total", {"segment": "s"})
        assert count is not None and count >= 1


async def test_the_listener_refuses_a_range_kept_below_the_recovery_point_then_skips_it_once_given_up(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The last group damaged after a clean stop: the hub keeps it (quarantined) and answers reads of it with an
    error naming it; once `logport verify --repair` gave it up, a reader skips it with a warning."""
    from logport.clients.segment import SegmentReader
    from logport.store.repair import give_up

    config = hub_config(tmp_path / "data", ["segment"])
    path, _, bad_start, bad_end = await stored_then_damaged(config, len(BODIES) - 1)  # a bit of the last event

    async def read_all() -> list[bytes]:
        reader = SegmentReader("127.0.0.1", config.segment.port)
        try:
            return [bytes(body) async for _, body in reader.events("s")]
        finally:
            await reader.close()

    async with running_hub(config) as hub:
        with pytest.raises(CorruptData) as caught:
            await read_all()
        assert (caught.value.start, caught.value.end, caught.value.path) == (bad_start, bad_end, str(path))
        assert "below the recovery point" in caught.value.reason
    give_up(tmp_path / "data", ["s"])
    caplog.set_level(logging.WARNING, logger="logport.segment.client")
    async with running_hub(config) as hub:
        assert hub.runtime is not None
        await hub.runtime.store.append("s", [b"after"])
        assert await read_all() == BODIES[:-1] + [b"after"]
    (skipped,) = [r for r in caplog.records if "were given up at" in r.getMessage()]
    assert f"bytes {bad_start}..{bad_end} of {path}" in skipped.getMessage()
