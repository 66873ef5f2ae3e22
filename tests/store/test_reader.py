"""The read-only directory reader: event counts, and the end of what it reads beside a writer or a crash."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.batch import encode_batch
from logport.config import StoreConfig
from logport.store import SegmentStore, WriterCondition, frames
from logport.store.files import chunk_path, list_chunk_bases
from logport.store.reader import DirectoryReader, count_events


@pytest.mark.parametrize(("body", "events"), [
    (encode_batch("t", [(1, 0, {"a": 1})] * 3, {"size": 3}), 3),
    (encode_batch("t", [(1, 0, {"a": 1})] * 2, {}), 2),  # no size option: the entries are counted
    (b"", 1),
    (b"\x00raw", 1),
    (msgpack.packb(["t", b"\xc1"]), 1),  # a batch whose entries are not msgpack
    (msgpack.packb(["t", msgpack.packb(1)]), 1),  # entries that are not [time, record]
    (msgpack.packb(["t", msgpack.packb([1, {}]) + b"\xc1"]), 1),  # a good entry, then garbage
])
def test_count_events(body: bytes, events: int) -> None:
    assert count_events(body) == events


async def write(cfg: StoreConfig, appends: list[tuple[list[bytes], bool]]) -> list[int]:
    """Append each (bodies, with a writer); the segment's end after each."""
    store = await SegmentStore.open(cfg)
    ends = []
    try:
        for i, (bodies, with_writer) in enumerate(appends):
            writer = WriterCondition(b"w", end=i + 1) if with_writer else None
            ends.append((await store.append("s", bodies, writer=writer)).end_offset)
    finally:
        await store.close()
    return ends


async def reopen(cfg: StoreConfig) -> tuple[int, list[bytes]]:
    store = await SegmentStore.open(cfg)
    try:
        end = store.info("s").end_offset
        r = await store.read_frames("s", 0, 1 << 30)
        return end, [bytes(b) for _, t, b in frames.iter_frames(r.data) if t == frames.EVENT]
    finally:
        await store.close()


@pytest.mark.parametrize("with_writer", [False, True])
def test_a_torn_multi_frame_append_is_not_read_before_recovery_cuts_it(tmp_path: Path, with_writer: bool) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path))
    first, last = asyncio.run(write(cfg, [([b"a"], False), ([b"b" * 10, b"c" * 10, b"d" * 10], with_writer)]))
    path = chunk_path(tmp_path / "segments" / "s", 0)
    whole = path.read_bytes()
    reader = DirectoryReader(tmp_path)  # one reader beside the writer, as `cat --follow` or a stream
    for cut in [*range(first, last), *reversed(range(first, last))]:
        path.write_bytes(whole[:cut])  # e.g. 5 bytes short: the frames of b and c are whole
        assert reader.bounds("s") == (0, first, False)
        assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a"]
        assert DirectoryReader(tmp_path).describe("s") == {
            "segment": "s", "start_offset": 0, "end_offset": first, "bytes": first, "events": 1, "sealed": False}
    path.write_bytes(whole)  # the rest of the append arrives
    assert reader.bounds("s")[1] == last
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a", b"b" * 10, b"c" * 10, b"d" * 10]
    path.write_bytes(whole[: last - 5])
    assert asyncio.run(reopen(cfg)) == (first, [b"a"])  # recovery keeps what the reader showed
    assert reader.bounds("s")[1] == first


def test_a_reader_notices_the_tail_rewritten_over_what_it_walked(tmp_path: Path) -> None:
    """A write the hub undid (its fsync failed) and another one over the same bytes, between two reads."""
    cfg = StoreConfig(data_dir=str(tmp_path))
    first, last = asyncio.run(write(cfg, [([b"a"], False), ([b"b" * 10, b"c" * 10], False)]))
    path = chunk_path(tmp_path / "segments" / "s", 0)
    reader = DirectoryReader(tmp_path)
    assert reader.bounds("s")[1] == last
    with open(path, "r+b") as f:
        f.truncate(first)
        f.seek(first)
        f.write(frames.frame_events([b"x" * 100]))
    assert reader.bounds("s")[1] == first + 108
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a", b"x" * 100]


def test_a_reader_does_not_stall_on_a_tail_rewritten_into_another_layout(tmp_path: Path) -> None:
    """The reader walked a group whose data was still being written; the hub undid that write and wrote other
    groups over the same bytes, with the frame it walked last at the same place. Walked on from the old state,
    the new layout looks broken and the reader stopped at the old group for good (until the chunk rolled)."""
    cfg = StoreConfig(data_dir=str(tmp_path))
    first, _ = asyncio.run(write(cfg, [([b"a"], False), ([b"b"], False)]))
    path = chunk_path(tmp_path / "segments" / "s", 0)
    ten = [b"0123456789"]
    before = frames.writer_record(b"k", 1, 2 * 18) + frames.frame_events(ten)  # a group of 2 events, 1 written
    with open(path, "r+b") as f:
        f.truncate(first)
        f.seek(first)
        f.write(before)
    reader = DirectoryReader(tmp_path)
    assert reader.bounds("s")[1] == first  # the group is not whole: not shown
    after = (frames.writer_record(b"k", 2, 18) + frames.frame_events(ten)  # same record size, 1 event
             + frames.writer_record(b"k", 3, 18) + frames.frame_events(ten))  # where the old group had its 2nd
    with open(path, "r+b") as f:
        f.truncate(first)
        f.seek(first)
        f.write(after)
    assert reader.bounds("s")[1] == first + len(after)
    assert reader.bounds("s")[1] == frames.recover_chunk(path.read_bytes())[0]  # the chunk starts at 0


appends_strategy = st.lists(
    st.tuples(st.lists(st.binary(max_size=30), min_size=1, max_size=3), st.booleans()), min_size=1, max_size=5)


@settings(max_examples=30)
@given(appends=appends_strategy, data=st.data())
def test_the_reader_ends_where_recovery_would_cut(appends: list[tuple[list[bytes], bool]], data: st.DataObject) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        cfg = StoreConfig(data_dir=str(root), chunk_size=150, max_frame_size=60)
        asyncio.run(write(cfg, appends))
        seg_dir = root / "segments" / "s"
        base = list_chunk_bases(seg_dir)[-1]
        path = chunk_path(seg_dir, base)
        whole = path.read_bytes()
        reader = DirectoryReader(root)
        # the last chunk growing (a live hub), cut again (a failed write undone), torn (a crash)
        for cut in data.draw(st.lists(st.integers(0, len(whole)), min_size=1, max_size=12)):
            path.write_bytes(whole[:cut])
            keep, _ = frames.recover_chunk(whole[:cut])
            assert reader.bounds("s")[1] == base + keep
            events = [bytes(b) for o, b in reader.iter_events("s") if o >= base]
            assert events == [bytes(b) for _, t, b in frames.iter_frames(whole[:keep]) if t == frames.EVENT]
    finally:
        shutil.rmtree(root)
