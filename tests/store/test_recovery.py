"""Recovery: a torn final write is cut at every byte position, and writer state stays in step."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest
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


@pytest.mark.parametrize("tail", [
    frames.frame(b"", frames.WRITER_RECORD),
    frames.frame(b"\x00" * 11, frames.WRITER_RECORD),  # one byte short of offset + covered length
    frames.frame(b"\x00" * 11, frames.WRITER_RECORD) + frames.frame_events([b"after"]),
    frames.writer_record(b"", 0, 11) + frames.frame(b"\x00" * 3, frames.WRITER_RECORD),  # the data of a group
], ids=["empty", "short", "short-then-event", "short-in-group"])
def test_a_writer_record_that_does_not_parse_is_cut_as_a_torn_tail(tmp_path: Path, tail: bytes) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path / "data"))
    asyncio.run(_write(cfg, [([b"keep"], True)]))
    path = chunk_path(tmp_path / "data" / "segments" / "s", 0)
    kept = path.stat().st_size
    with open(path, "ab") as f:
        f.write(tail)
    events, end, writer = asyncio.run(_reopen(cfg))
    assert events == [b"keep"] and end == kept and writer == 1 and path.stat().st_size == kept


@pytest.mark.parametrize("head", [
    frames.frame(b"\x00\x00", frames.WRITER_TABLE),
    frames.frame(b"\x00\x00\x00\x01\x00\x01w\x00\x00", frames.WRITER_TABLE),  # one writer, its offset cut short
    frames.frame(b"\x00\x00\x00\x02\x00\x01w" + bytes(8), frames.WRITER_TABLE),  # says two writers, holds one
], ids=["no-count", "cut-offset", "missing-writer"])
def test_a_writer_table_that_does_not_parse_is_a_chunk_torn_while_it_was_being_started(
        tmp_path: Path, head: bytes) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path / "data"), chunk_size=200, max_frame_size=100)
    asyncio.run(_write(cfg, [([b"x" * 90], True) for _ in range(3)]))
    seg_dir = tmp_path / "data" / "segments" / "s"
    bases = list_chunk_bases(seg_dir)
    last = chunk_path(seg_dir, bases[-1])
    last.write_bytes(head + frames.frame_events([b"x" * 90]))
    events, end, writer = asyncio.run(_reopen(cfg))
    assert not last.exists()
    assert end == bases[-1] and writer == 2 and len(events) == 2


# whole frames of the types the store writes, with bodies that may or may not parse
frame_strategy = st.one_of(
    st.binary(max_size=20).map(frames.frame),
    st.binary(max_size=20).map(lambda b: frames.frame(b, frames.WRITER_RECORD)),
    st.binary(max_size=20).map(lambda b: frames.frame(b, frames.WRITER_TABLE)),
    st.tuples(st.binary(max_size=8), st.integers(0, 2**64 - 1), st.integers(0, 100)).map(
        lambda t: frames.writer_record(*t)),
    st.dictionaries(st.binary(max_size=8), st.integers(0, 2**64 - 1), max_size=3).map(frames.writer_table),
)


@given(st.lists(frame_strategy, max_size=8).map(b"".join), st.binary(max_size=12))
def test_recovery_of_any_bytes_keeps_whole_frames_and_is_stable(chunk: bytes, tail: bytes) -> None:
    data = chunk + tail
    keep, writers = frames.recover_chunk(data)
    assert 0 <= keep <= len(data) and frames.complete_prefix(data[:keep]) == keep
    assert frames.recover_chunk(data[:keep]) == (keep, writers)  # a second recovery cuts nothing more
