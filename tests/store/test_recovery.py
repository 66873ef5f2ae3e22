"""Recovery: a torn final write is cut at every byte position, and writer state stays in step.

Format v2 (store/groups.py) cuts by ending the segment where its last valid commit group ends, not by
truncating the file: what follows (a torn group, zeros written ahead, garbage) stays in the file, is never
read, and the next append is written over it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.config import StoreConfig
from logport.errors import CorruptData
from logport.store import SegmentStore, WriterCondition, frames
from logport.store.files import chunk_path, list_chunk_bases
from logport.store.groups import (
    CHUNK_HEADER_SIZE,
    COMMIT_SIZE,
    chunk_header,
    commit_frame,
    walk_chunk,
)
from logport.store.reader import DirectoryReader
from tests.support import as_after_a_crash


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
    """Append each (bodies, with_writer); returns the (start, end) offsets of each append's commit group
    (file positions in the first chunk, whose base is 0): its COMMIT frame starts it."""
    store = await SegmentStore.open(cfg)
    await store.create("s")
    spans = []
    for i, (bodies, with_writer) in enumerate(appends):
        before = store.info("s").end_offset
        writer = WriterCondition(b"w", end=i + 1) if with_writer else None
        r = await store.append("s", bodies, writer=writer)
        spans.append((before, r.end_offset))
    await store.close()
    as_after_a_crash(Path(cfg.data_dir) / "segments" / "s")  # the tests tear the tail as a crash would
    return spans


async def _reopen(cfg: StoreConfig, append: bytes | None = None) -> tuple[list[bytes], int, int]:
    """Recover: the events, the end and the writer's offset; then `append` an event, if given, and check
    that it went right where the segment ended (its group's COMMIT frame first)."""
    store = await SegmentStore.open(cfg)
    try:
        events, end, writer = await _events(store, "s"), store.info("s").end_offset, store.writer_offset("s", b"w")
        if append is not None:
            assert (await store.append("s", [append])).offset == end + COMMIT_SIZE
        return events, end, writer
    finally:
        await store.close()


def _read_back(data_dir: Path) -> list[bytes]:
    """The events as a reader of the files finds them (walking the chunks: what recovery keeps)."""
    return [bytes(b) for _, b in DirectoryReader(data_dir).iter_events("s")]


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
        assert len(pristine) == last_end  # the segment's first chunk is a new file: no spare taken
        kept_bodies = [b for bodies, _ in appends[:-1] for b in bodies]
        writer_before = max((i + 1 for i, (_, w) in enumerate(appends[:-1]) if w), default=0)
        for cut in range(last_start, last_end):
            # the file cut short, or (a chunk written ahead) the rest of the group still the zeros it held; unless
            # the rest was zeros (an empty event's header): then the group is whole, as written, not torn
            zeros = pristine[:cut] + bytes(last_end - cut)
            torn = zeros if cut % 2 == 0 and zeros != pristine else pristine[:cut]
            path.write_bytes(torn)
            as_after_a_crash(seg_dir)  # the reopen before stopped cleanly: its recovery point covers the tail
            events, end, writer = asyncio.run(_reopen(cfg, append=b"next"))
            # an incomplete append leaves nothing of itself: not its frames, not its writer offset
            assert end == last_start
            assert writer == writer_before
            # every append is one checksummed group: none of its frames is kept, even whole ones
            assert events == kept_bodies
            # the torn bytes are never read: the next append went where the segment ended, over them
            assert _read_back(root / "data") == [*kept_bodies, b"next"]
        path.write_bytes(pristine)
        as_after_a_crash(seg_dir)
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


def _v2_head(base: int, writers: dict[bytes, int]) -> bytes:
    """A v2 chunk's head as the store writes it: its header, then a group holding the writer table."""
    header, crc = chunk_header(base)
    table = frames.writer_table(writers)
    return header + commit_frame(base + CHUNK_HEADER_SIZE, crc, [table])[0] + table


@pytest.mark.parametrize("torn", [
    lambda base: frames.writer_table({b"w": 5})[:7],  # a v1 chunk's writer table
    lambda base: b"",  # the file created, nothing written
    lambda base: bytes(100),  # the file's length written, not its bytes
    lambda base: chunk_header(base)[0][:20],  # the header
    lambda base: chunk_header(base)[0][:20] + bytes(100),
    lambda base: _v2_head(base, {b"w": 5})[: CHUNK_HEADER_SIZE + COMMIT_SIZE + 5],  # the head group
    lambda base: _v2_head(base, {b"w": 5})[:-1],
    lambda base: _v2_head(base, {b"w": 5})[: CHUNK_HEADER_SIZE + COMMIT_SIZE] + bytes(100),
], ids=["v1-table", "empty", "zeros", "v2-header", "v2-header-zeros", "v2-table", "v2-table-last-byte",
        "v2-table-zeros"])
def test_recovery_cuts_a_chunk_torn_while_it_was_being_started(tmp_path: Path, torn: Callable[[int], bytes]) -> None:
    """A chunk file that does not hold its whole head (a new file, where no spare was taken: see
    ChunkFiles.start_chunk) holds nothing acknowledged: it goes, and the chunk before it is the last one, with
    its writer state (the torn head's table is lost with it)."""
    cfg = StoreConfig(data_dir=str(tmp_path / "data"), chunk_size=200, max_frame_size=100)
    asyncio.run(_write(cfg, [([b"x" * 90], True) for _ in range(5)]))
    seg_dir = tmp_path / "data" / "segments" / "s"
    bases = list_chunk_bases(seg_dir)
    last = chunk_path(seg_dir, bases[-1])
    last.write_bytes(torn(bases[-1]))  # the new chunk's head was torn
    events, end, writer = asyncio.run(_reopen(cfg))
    assert (end, writer, len(events)) == (bases[-1], 4, 4)
    assert not last.exists()


def _group(start: int, prev: int, body: bytes) -> bytes:
    """A commit group of one frame at segment offset `start`, continuing the CRC `prev`."""
    frame = frames.frame(body)
    return commit_frame(start, prev, [frame])[0] + frame


@pytest.mark.parametrize("garbage", [
    lambda at: frames.HEADER.pack(0, 1 << 20) + b"partial" * 20,  # a frame that runs past the file
    lambda at: bytes(4096),  # a chunk written ahead
    lambda at: frames.frame_events([b"ghost"] * 10),  # whole events in no commit group
    lambda at: _group(999, 0, b"stale" * 20),  # a group written at another offset (a recycled chunk's)
    lambda at: _group(at, 0, b"unchained" * 20),  # at the right offset, not continuing the group before
], ids=["partial-frame", "zeros", "bare-events", "stale-group", "broken-chain"])
def test_garbage_after_the_last_frame_is_cut(tmp_path: Path, garbage: Callable[[int], bytes]) -> None:
    """Whatever follows the last valid group is not data: the segment ends before it, no reader finds an event
    in it, and the next append is written at the end, over it (what it does not cover stays unread)."""
    cfg = StoreConfig(data_dir=str(tmp_path / "data"))
    ((_, kept),) = asyncio.run(_write(cfg, [([b"keep"], False)]))
    assert kept == CHUNK_HEADER_SIZE + COMMIT_SIZE + 12
    path = chunk_path(tmp_path / "data" / "segments" / "s", 0)
    tail = garbage(kept)
    with open(path, "ab") as f:
        f.write(tail)
        os.fsync(f.fileno())
    assert _read_back(tmp_path / "data") == [b"keep"]
    events, end, _ = asyncio.run(_reopen(cfg, append=b"next"))
    assert events == [b"keep"] and end == kept
    assert path.stat().st_size == kept + len(tail)  # left in the file, written over where the append went
    assert _read_back(tmp_path / "data") == [b"keep", b"next"]
    events, end, _ = asyncio.run(_reopen(cfg))
    assert events == [b"keep", b"next"] and end == kept + COMMIT_SIZE + 12


UNPARSEABLE_TAILS = pytest.mark.parametrize("tail", [
    frames.frame(b"", frames.WRITER_RECORD),
    frames.frame(b"\x00" * 11, frames.WRITER_RECORD),  # one byte short of offset + covered length
    frames.frame(b"\x00" * 11, frames.WRITER_RECORD) + frames.frame_events([b"after"]),
    frames.writer_record(b"", 0, 11) + frames.frame(b"\x00" * 3, frames.WRITER_RECORD),  # the data of a group
], ids=["empty", "short", "short-then-event", "short-in-group"])


@UNPARSEABLE_TAILS
@pytest.mark.parametrize("how", ["bare", "torn-group"])
def test_a_writer_record_that_does_not_parse_is_cut_as_a_torn_tail(tmp_path: Path, tail: bytes, how: str) -> None:
    """After the last group, bare (no COMMIT frame) or in a group as the store writes one whose last byte did not
    reach the file: no event of it is read, the writer state takes nothing from it, the next append goes over it."""
    cfg = StoreConfig(data_dir=str(tmp_path / "data"))
    ((_, kept),) = asyncio.run(_write(cfg, [([b"keep"], True)]))
    path = chunk_path(tmp_path / "data" / "segments" / "s", 0)
    assert path.stat().st_size == kept
    if how == "torn-group":
        prev = walk_chunk(path.read_bytes(), 0).last_crc
        tail = (commit_frame(kept, prev, [tail])[0] + tail)[:-1]
    with open(path, "ab") as f:
        f.write(tail)
    events, end, writer = asyncio.run(_reopen(cfg, append=b"next"))
    assert events == [b"keep"] and end == kept and writer == 1
    assert _read_back(tmp_path / "data") == [b"keep", b"next"]
    events, end, writer = asyncio.run(_reopen(cfg))
    assert events == [b"keep", b"next"] and end == kept + COMMIT_SIZE + 12 and writer == 1


@UNPARSEABLE_TAILS
def test_a_writer_record_that_does_not_parse_in_a_whole_group_is_refused_not_cut(tmp_path: Path, tail: bytes) -> None:
    """The same bytes in a group that passes its checksum are no torn write (the store wrote them so, a bug, or
    they were forged): the group stays in the chunk as a corrupt range (store/groups.py). Its reads are refused,
    the writer state takes nothing from it, and what is before it reads as before."""
    cfg = StoreConfig(data_dir=str(tmp_path / "data"))
    ((_, kept),) = asyncio.run(_write(cfg, [([b"keep"], True)]))
    path = chunk_path(tmp_path / "data" / "segments" / "s", 0)
    group = commit_frame(kept, walk_chunk(path.read_bytes(), 0).last_crc, [tail])[0] + tail
    with open(path, "ab") as f:
        f.write(group)
    layout = walk_chunk(path.read_bytes(), 0)
    assert [(c.start, c.end) for c in layout.corrupt] == [(kept, kept + len(group))]
    assert layout.writers == {b"w": 1}

    async def check() -> None:
        store = await SegmentStore.open(cfg)
        try:
            assert store.writer_offset("s", b"w") == 1
            assert store.info("s").end_offset == kept + len(group)
            r = await store.read_frames("s", 0, kept)
            assert [bytes(b) for _, t, b in frames.iter_frames(r.data) if t == frames.EVENT] == [b"keep"]
            with pytest.raises(CorruptData):
                await store.read("s", kept, 1 << 20)
        finally:
            await store.close()

    asyncio.run(check())


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
