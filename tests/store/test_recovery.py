"""Recovery: a torn final write is cut at every byte position, and writer state stays in step."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from logport.config import StoreConfig
from logport.store import SegmentStore, WriterCondition, frames
from logport.store.files import chunk_path, list_chunk_bases


async def _events(store: SegmentStore, name: str) -> list[bytes]:
    info = store.info(name)
    out: list[bytes] = []
    offset = info.start_offset
    while offset < info.end_offset:
        r = await store.read_frames(name, offset, 1 << 30)
        out += [bytes(b) for _, t, b in frames.iter_frames(r.data) if t == frames.EVENT]
        offset = r.next_offset
    return out


async def _write(cfg: StoreConfig, appends: list[tuple[list[bytes], bool]]) -> list[tuple[int, int]]:
    """Append each (bodies, with_writer); returns (start, end) file positions of each append."""
    store = await SegmentStore.open(cfg)
    spans = []
    for i, (bodies, with_writer) in enumerate(appends):
        before = store.info("s").end_offset if store.exists("s") else 0
        writer = WriterCondition(b"w", end=i + 1) if with_writer else None
        r = await store.append("s", bodies, writer=writer)
        spans.append((before, r.end_offset))
    await store.close()
    return spans


async def _reopen(cfg: StoreConfig) -> tuple[list[bytes], int, int]:
    store = await SegmentStore.open(cfg)
    try:
        return await _events(store, "s"), store.info("s").end_offset, store.writer_offset("s", b"w")
    finally:
        await store.close()


appends_strategy = st.lists(
    st.tuples(st.lists(st.binary(max_size=40), min_size=1, max_size=3), st.booleans()),
    min_size=1,
    max_size=4,
)


@settings(max_examples=25)
@given(appends=appends_strategy)
def test_torn_last_append_is_cut_at_every_byte_position(appends: list[tuple[list[bytes], bool]]) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        cfg = StoreConfig(data_dir=str(root / "data"))
        spans = asyncio.run(_write(cfg, appends))
        seg_dir = root / "data" / "segments" / "s"
        (base,) = list_chunk_bases(seg_dir)
        path = chunk_path(seg_dir, base)
        pristine = path.read_bytes()
        last_start, last_end = spans[-1]
        kept_bodies = [b for bodies, _ in appends[:-1] for b in bodies]
        writer_before = max((i + 1 for i, (_, w) in enumerate(appends[:-1]) if w), default=0)
        for cut in range(last_start, last_end):
            path.write_bytes(pristine[:cut])
            events, end, writer = asyncio.run(_reopen(cfg))
            # an incomplete append leaves nothing of itself: not its frames, not its writer offset
            assert end == last_start
            assert writer == writer_before
            # a multi-frame append without a writer record may keep its whole leading frames
            assert events[: len(kept_bodies)] == kept_bodies
            assert len(path.read_bytes()) == end  # the torn bytes are gone from the file
        path.write_bytes(pristine)
        events, end, writer = asyncio.run(_reopen(cfg))
        assert events == kept_bodies + appends[-1][0]
        assert end == last_end
    finally:
        shutil.rmtree(root)


def test_multi_frame_append_with_writer_is_all_or_nothing(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path / "data"))
    spans = asyncio.run(_write(cfg, [([b"a"], True), ([b"b" * 10, b"c" * 10, b"d" * 10], True)]))
    path = chunk_path(tmp_path / "data" / "segments" / "s", 0)
    data = path.read_bytes()
    start, end = spans[-1]
    # cut right after the second data frame: the frames are whole, but the append is not
    path.write_bytes(data[: end - 18])
    events, stored_end, writer = asyncio.run(_reopen(cfg))
    assert events == [b"a"] and stored_end == start and writer == 1


def test_recovery_cuts_a_chunk_torn_while_it_was_being_started(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path / "data"), chunk_size=200, max_frame_size=100)
    asyncio.run(_write(cfg, [([b"x" * 90], True) for _ in range(5)]))
    seg_dir = tmp_path / "data" / "segments" / "s"
    bases = list_chunk_bases(seg_dir)
    last = chunk_path(seg_dir, bases[-1])
    table = frames.writer_table({b"w": 5})
    last.write_bytes(table[:7])  # the new chunk's writer table was torn
    events, end, writer = asyncio.run(_reopen(cfg))
    assert not last.exists()
    assert end == bases[-1] and writer == 4 and len(events) == 4


def test_garbage_after_the_last_frame_is_cut(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path / "data"))
    asyncio.run(_write(cfg, [([b"keep"], False)]))
    path = chunk_path(tmp_path / "data" / "segments" / "s", 0)
    with open(path, "ab") as f:
        f.write(frames.HEADER.pack(0, 1 << 20) + b"partial")
        os.fsync(f.fileno())
    events, end, _ = asyncio.run(_reopen(cfg))
    assert events == [b"keep"] and end == 12 and path.stat().st_size == 12
