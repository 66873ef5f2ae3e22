"""The read-only directory reader: event counts, and the end of what it reads beside a writer or a crash.

Format v2 (store/groups.py): a chunk's data ends at its last valid commit group, whatever the file holds after
it (a group not all written, zeros written ahead, a group the hub undid: its COMMIT frame zeroed).
"""

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
from logport.store.groups import CHUNK_HEADER_SIZE, COMMIT_SIZE, commit_frame, walk_chunk
from logport.store.reader import DirectoryReader, count_events
from tests.support import as_after_a_crash


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
    """Append each (bodies, with a writer); the segment's end after each. The last chunk's recovery point is
    then dropped, as a crash before the hub recorded one leaves it: the tests tear or rewrite its tail as a
    crash, or a hub undoing a write, would."""
    store = await SegmentStore.open(cfg)
    ends = []
    try:
        for i, (bodies, with_writer) in enumerate(appends):
            writer = WriterCondition(b"w", end=i + 1) if with_writer else None
            ends.append((await store.append("s", bodies, writer=writer)).end_offset)
    finally:
        await store.close()
    as_after_a_crash(Path(cfg.data_dir) / "segments" / "s")
    return ends


async def reopen(cfg: StoreConfig) -> tuple[int, list[bytes]]:
    store = await SegmentStore.open(cfg)
    try:
        end = store.info("s").end_offset
        r = await store.read_frames("s", 0, 1 << 30)
        return end, [bytes(b) for _, t, b in frames.iter_frames(r.data) if t == frames.EVENT]
    finally:
        await store.close()


def torn(whole: bytes, cut: int, zeros: bool) -> bytes:
    """`whole` written up to `cut`: the file cut there, or (a chunk written ahead) zeros from there on."""
    return whole[:cut] + bytes(len(whole) - cut) if zeros else whole[:cut]


@pytest.mark.parametrize("zeros", [False, True], ids=["cut", "zeros"])
@pytest.mark.parametrize("with_writer", [False, True])
def test_a_torn_multi_frame_append_is_not_read_before_recovery_cuts_it(tmp_path: Path, with_writer: bool,
                                                                       zeros: bool) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path))
    first, last = asyncio.run(write(cfg, [([b"a"], False), ([b"b" * 10, b"c" * 10, b"d" * 10], with_writer)]))
    path = chunk_path(tmp_path / "segments" / "s", 0)
    whole = path.read_bytes()
    assert len(whole) == last
    reader = DirectoryReader(tmp_path)  # one reader beside the writer, as `cat --follow` or a stream
    for cut in [*range(first, last), *reversed(range(first, last))]:
        path.write_bytes(torn(whole, cut, zeros))  # e.g. 5 bytes short: the frames of b and c are whole
        assert reader.bounds("s") == (0, first, False)
        assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a"]
        assert DirectoryReader(tmp_path).describe("s") == {
            "segment": "s", "start_offset": 0, "end_offset": first, "bytes": first, "events": 1, "sealed": False,
            "corrupt": [], "given_up": []}
    path.write_bytes(whole)  # the rest of the append arrives
    assert reader.bounds("s")[1] == last
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a", b"b" * 10, b"c" * 10, b"d" * 10]
    with open(path, "r+b") as f:  # the hub undid it (its fsync failed): its COMMIT frame zeroed
        f.seek(first)
        f.write(bytes(COMMIT_SIZE))
    assert reader.bounds("s")[1] == first  # the reader that had read it drops it
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a"]
    assert asyncio.run(reopen(cfg)) == (first, [b"a"])  # recovery keeps what the reader showed
    path.write_bytes(torn(whole, last - 5, zeros))  # or a crash lost the end of the group
    assert asyncio.run(reopen(cfg)) == (first, [b"a"])
    assert DirectoryReader(tmp_path).bounds("s")[1] == reader.bounds("s")[1] == first


def undo_and_rewrite(path: Path, at: int, parts: list[bytes]) -> bytes:
    """What the hub does when a commit fails after its write (store/segment.py _undo): the group at `at` is
    undone (its COMMIT frame zeroed), then the next commit writes its group over it (at the same offset,
    continuing the same chain). Returns what was written."""
    data = path.read_bytes()
    prev = walk_chunk(data[:at], 0).last_crc
    group = commit_frame(at, prev, parts)[0] + b"".join(parts)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(COMMIT_SIZE))
        f.seek(at)
        f.write(group)
    return group


@pytest.mark.parametrize("size", [100, 48, 2], ids=["longer", "as-long", "shorter"])
def test_a_reader_notices_the_tail_rewritten_over_what_it_walked(tmp_path: Path, size: int) -> None:
    """A write the hub undid (its fsync failed) and another one over the same bytes, between two reads."""
    cfg = StoreConfig(data_dir=str(tmp_path))
    first, last = asyncio.run(write(cfg, [([b"a"], False), ([b"b" * 10, b"c" * 10], False)]))
    path = chunk_path(tmp_path / "segments" / "s", 0)
    reader = DirectoryReader(tmp_path)
    assert reader.bounds("s")[1] == last
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a", b"b" * 10, b"c" * 10]
    group = undo_and_rewrite(path, first, [frames.frame_events([b"x" * size])])
    if size == 48:
        assert len(group) == last - first  # the new group is as long as the one the reader had read
    assert reader.bounds("s")[1] == first + COMMIT_SIZE + 8 + size
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a", b"x" * size]


def test_a_reader_does_not_stall_on_a_tail_rewritten_into_another_layout(tmp_path: Path) -> None:
    """The reader walked a group whose data was still being written; the hub undid that write and wrote other
    groups over the same bytes, with the frame it walked last at the same place. Walked on from the old state,
    the new layout looks broken and the reader stopped at the old group for good (until the chunk rolled)."""
    cfg = StoreConfig(data_dir=str(tmp_path))
    first, _ = asyncio.run(write(cfg, [([b"a"], False), ([b"b"], False)]))
    path = chunk_path(tmp_path / "segments" / "s", 0)
    ten = [b"0123456789"]
    prev = walk_chunk(path.read_bytes()[:first], 0).last_crc
    parts = [frames.writer_record(b"k", 1, 2 * 18), frames.frame_events(ten * 2)]  # a group of 2 events
    before = (commit_frame(first, prev, parts)[0] + b"".join(parts))[: -18]  # the 2nd not written yet
    with open(path, "r+b") as f:  # over the group of "b"
        f.seek(first)
        f.write(before)
    reader = DirectoryReader(tmp_path)
    assert reader.bounds("s")[1] == first  # the group is not whole: not shown
    one = [frames.writer_record(b"k", 2, 18), frames.frame_events(ten)]  # same record size, 1 event
    group, crc = commit_frame(first, prev, one)
    after = group + b"".join(one)
    two = [frames.writer_record(b"k", 3, 18), frames.frame_events(ten)]  # where the old group had its 2nd event
    after += commit_frame(first + len(after), crc, two)[0] + b"".join(two)
    with open(path, "r+b") as f:
        f.seek(first)
        f.write(after)
    assert reader.bounds("s")[1] == first + len(after)
    layout = walk_chunk(path.read_bytes(), 0)  # the chunk starts at 0
    assert reader.bounds("s")[1] == layout.end and layout.corrupt == [] and layout.writers == {b"k": 3}
    assert [bytes(b) for _, b in reader.iter_events("s")] == [b"a", *ten, *ten]


appends_strategy = st.lists(
    st.tuples(st.lists(st.binary(max_size=30), min_size=1, max_size=3), st.booleans()), min_size=1, max_size=5)


@settings(max_examples=30)
@given(appends=appends_strategy, data=st.data())
def test_the_reader_ends_where_recovery_would_cut(appends: list[tuple[list[bytes], bool]], data: st.DataObject) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        cfg = StoreConfig(data_dir=str(root), chunk_size=150, max_frame_size=60)
        ends = asyncio.run(write(cfg, appends))
        seg_dir = root / "segments" / "s"
        base = list_chunk_bases(seg_dir)[-1]
        path = chunk_path(seg_dir, base)
        whole = path.read_bytes()  # its data, then zeros if it is a chunk written ahead
        layout = walk_chunk(whole, base)
        assert layout.end == ends[-1] and layout.corrupt == []
        # where the valid data of a torn chunk may end: at its base (its header torn), after its header, or
        # after one of its groups, each append's among them (the head group, with the writer table, is not one)
        boundaries = sorted({base, base + CHUNK_HEADER_SIZE, *layout.groups, layout.end})
        assert {e for e in ends if e > base} <= set(boundaries)
        appended = [g for g, stop in zip(layout.groups, [*layout.groups[1:], layout.end], strict=True) if stop in ends]
        reader = DirectoryReader(root)
        shown = base  # where the reader's last answer ended
        now = b""
        # the last chunk growing (a live hub), torn (a crash; the file cut, or a chunk written ahead holding zeros
        # from the cut on), a group the reader had read undone (a failed fsync: the hub zeroes its COMMIT frame,
        # store/segment.py _undo) and written again
        steps = data.draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.booleans()), min_size=1, max_size=12))
        for raw, zeros in steps:
            cut = raw % (len(whole) + 1)  # the file's length varies (a spare taken or not): not the draws
            undone = [g for g in appended if g < shown]
            if cut < shown - base and undone:  # bytes the reader has read change only so
                at = undone[-1] - base
                now = now[:at] + bytes(COMMIT_SIZE) + now[at + COMMIT_SIZE :]
            else:
                # (a chunk file of zeros alone, no header, is test_recovery's "zeros" chunk torn as it was started)
                now = torn(whole, max(cut, shown - base), zeros and cut > 0)
            path.write_bytes(now)
            # recovery keeps the groups whose bytes are all there, as written (zeros where zeros were written)
            keep = max(b for b in boundaries if now[: b - base] == whole[: b - base])
            assert walk_chunk(now, base).end == keep  # as recovery walks it
            shown = reader.bounds("s")[1]
            assert shown == keep
            events = [bytes(b) for o, b in reader.iter_events("s") if o >= base]
            assert events == [bytes(b) for _, t, b in frames.iter_frames(whole[: keep - base]) if t == frames.EVENT]
    finally:
        shutil.rmtree(root)
