"""Runtime.submit_routed, through which the Forward listener stores its chunks without a task each: in the order
they were made, whether their segment exists, is being created or cannot be; a frame without a writer stored as
store.append stores it (no atomic-group record)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from logport.config import Config, RouteConfig, StoreConfig
from logport.errors import LogportError
from logport.metrics import Metrics
from logport.routing import Router
from logport.runtime import Runtime
from logport.store import SegmentStore, WriterCondition, frames


async def open_runtime(tmp_path: Path) -> Runtime:
    config = Config(store=StoreConfig(data_dir=str(tmp_path)))
    store = await SegmentStore.open(config.store)
    routes = [RouteConfig(match="other.**", segment="other"), RouteConfig(match="bad.**", segment="bad/name")]
    return Runtime(config, store, Metrics(), Router(routes))


async def frames_of(store: SegmentStore, segment: str) -> list[tuple[int, bytes]]:
    """(type, body) of every frame but the store's own chunk and commit records."""
    info = store.info(segment)
    out: list[tuple[int, bytes]] = []
    offset = info.start_offset
    while offset < info.end_offset:
        r = await store.read(segment, offset, 1 << 20)
        out += [(t, bytes(b)) for _, t, b in frames.iter_frames(r.data, offset) if t in (frames.EVENT,
                                                                                        frames.WRITER_RECORD)]
        offset = r.next_offset
    return out


def writer(n: int) -> WriterCondition:
    return WriterCondition(key=b"fwd:%d" % n, end=1)


async def test_appends_are_stored_in_the_order_made_across_a_segments_creation(tmp_path: Path) -> None:
    runtime = await open_runtime(tmp_path)
    try:
        submit = runtime.submit_routed
        # the first ones wait for "other" to be created, plain ones among them; the rest in line behind
        futures = [submit("forward", "other.x", [frames.frame(b"%d" % i)], writer(i) if i % 3 else None)
                   for i in range(12)]
        assert not runtime.store.exists("other") and not futures[0].done()
        await asyncio.sleep(0)  # the creation under way: these go in line behind the first
        futures += [submit("forward", "other.x", [frames.frame(b"%d" % i)], writer(i) if i % 3 else None)
                    for i in range(12, 18)]
        await asyncio.gather(*futures)
        futures = [submit("forward", "other.x", [frames.frame(b"%d" % i)], writer(i) if i % 3 else None)
                   for i in range(18, 24)]
        await asyncio.gather(*futures)
        stored = [body for t, body in await frames_of(runtime.store, "other") if t == frames.EVENT]
        assert stored == [b"%d" % i for i in range(24)]
    finally:
        await runtime.store.close()


async def test_a_frame_without_a_writer_gets_no_record(tmp_path: Path) -> None:
    """submit_framed makes every append an atomic group (a 20-byte record): one frame without a writer does not
    need it, and a Message-mode event without a chunk id is not much larger than that."""
    runtime = await open_runtime(tmp_path)
    try:
        submit = runtime.submit_routed
        await submit("forward", "t", [frames.frame(b"plain")])
        await submit("forward", "t", [frames.frame(b"keyed")], writer(1))
        await submit("forward", "t", [frames.frame(b"one"), frames.frame(b"two")], None, frames=2)
        kinds = [(t, body if t == frames.EVENT else b"") for t, body in await frames_of(runtime.store, "forward")]
        assert kinds == [(frames.EVENT, b"plain"), (frames.WRITER_RECORD, b""), (frames.EVENT, b"keyed"),
                         (frames.WRITER_RECORD, b""), (frames.EVENT, b"one"), (frames.EVENT, b"two")]
    finally:
        await runtime.store.close()


async def test_a_segment_that_cannot_be_created_fails_its_appends_only(tmp_path: Path) -> None:
    runtime = await open_runtime(tmp_path)
    try:
        refused = runtime.submit_routed("forward", "bad.x", [frames.frame(b"lost")], writer(1))
        kept = runtime.submit_routed("forward", "t", [frames.frame(b"kept")], writer(2))
        with pytest.raises(LogportError, match="bad/name"):
            await refused
        await kept
        assert [body for t, body in await frames_of(runtime.store, "forward") if t == frames.EVENT] == [b"kept"]
    finally:
        await runtime.store.close()
