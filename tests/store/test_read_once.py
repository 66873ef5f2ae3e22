"""Checked reads read each stored byte from its file once: a chunk before the last is walked as far as
it is read, a window at a time, and the window that the walk checked is what is handed out; the last
chunk of a DirectoryReader is walked for its end and read once more. Groups larger than a window,
corruption found part-way through a walk, and a reader that starts in the middle are read as before."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.errors import CorruptData
from logport.store import SegmentStore, frames, verified
from logport.store.files import ChunkReader, chunk_path, list_chunk_bases
from logport.store.groups import COMMIT_SIZE, walk_chunk
from logport.store.reader import DirectoryReader
from tests.store.test_segment_store import read_all

CHUNK = 256 * 1024


def bodies(count: int, size: int) -> list[bytes]:
    return [i.to_bytes(4, "big") + os.urandom(size - 4) for i in range(count)]


async def fill(data_dir: Path, appends: list[list[bytes]]) -> None:
    # chunk files that end where their data does (a chunk written ahead is zeros to chunk_size, and the
    # walk of the last chunk reads up to a window of them past its end: not stored bytes)
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), chunk_size=CHUNK, max_frame_size=CHUNK,
                                                prewrite_chunks=False))
    try:
        for events in appends:
            await store.append("s", events)
    finally:
        await store.close()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Bytes read from each chunk file (by its base), through ChunkReader."""
    read: Counter[int] = Counter()
    pread, pread_into = ChunkReader.pread, ChunkReader.pread_into

    def counting_pread(self: ChunkReader, offset: int, max_bytes: int, end: int) -> bytes:
        data = pread(self, offset, max_bytes, end)
        read[self.chunk_span(offset, end)[0]] += len(data)
        return data

    def counting_pread_into(self: ChunkReader, offset: int, buffer: memoryview, end: int) -> int:
        n = pread_into(self, offset, buffer, end)
        read[self.chunk_span(offset, end)[0]] += n
        return n

    monkeypatch.setattr(ChunkReader, "pread", counting_pread)
    monkeypatch.setattr(ChunkReader, "pread_into", counting_pread_into)
    return read


def group_count(seg_dir: Path, base: int) -> int:
    return len(walk_chunk(chunk_path(seg_dir, base).read_bytes(), base).groups)


def assert_read_once(read: Counter[int], seg_dir: Path, chunks: list[int], times: int = 1) -> None:
    for base in chunks:
        size = walk_chunk(chunk_path(seg_dir, base).read_bytes(), base).end - base  # what it stores
        probes = COMMIT_SIZE * group_count(seg_dir, base)  # the group heads that find a window's end
        if times == 2:
            probes += COMMIT_SIZE  # the last chunk's: the head of its last group, kept to see it rewritten
        assert size * times <= read[base] <= size * times + probes, (base, size, read[base])


async def test_a_directory_reader_reads_each_byte_of_a_chunk_before_the_last_once(tmp_path: Path,
                                                                                  counted: Counter[int]) -> None:
    events = bodies(400, 3000)
    await fill(tmp_path, [events[i : i + 5] for i in range(0, len(events), 5)])
    seg_dir = tmp_path / "segments" / "s"
    bases = list_chunk_bases(seg_dir)
    assert len(bases) >= 4

    got = [bytes(body) for _, body in DirectoryReader(tmp_path).iter_events("s")]

    assert got == events
    assert_read_once(counted, seg_dir, bases[:-1])
    assert_read_once(counted, seg_dir, bases[-1:], times=2)  # walked for the segment's end, then read


async def test_the_store_reads_each_byte_of_a_chunk_before_the_last_once(tmp_path: Path,
                                                                         counted: Counter[int]) -> None:
    events = bodies(400, 3000)
    await fill(tmp_path, [events[i : i + 5] for i in range(0, len(events), 5)])
    seg_dir = tmp_path / "segments" / "s"
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), chunk_size=CHUNK, max_frame_size=CHUNK))
    try:
        counted.clear()  # recovery's walk of the last chunk is not a read
        got = [b for _, b in await read_all(store, "s", 64 * 1024)]
    finally:
        await store.close()
    assert got == events
    assert_read_once(counted, seg_dir, list_chunk_bases(seg_dir)[:-1])


async def test_groups_larger_than_a_window_are_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verified, "WINDOW", 4096)
    events = bodies(60, 7000)
    await fill(tmp_path, [events[i : i + 6] for i in range(0, len(events), 6)])  # groups of about 42 KB
    assert len(list_chunk_bases(tmp_path / "segments" / "s")) >= 2

    reader = DirectoryReader(tmp_path)
    assert [bytes(body) for _, body in reader.iter_events("s")] == events
    offsets = [offset for offset, _ in reader.iter_events("s")]
    for i in (7, 31, 59):  # a new reader that starts in the middle of a chunk, of a group
        assert [bytes(b) for _, b in DirectoryReader(tmp_path).iter_events("s", offsets[i])] == events[i:]


async def test_corruption_found_part_way_through_a_walk_names_its_range_and_the_rest_is_read(tmp_path: Path) -> None:
    events = bodies(400, 3000)
    await fill(tmp_path, [events[i : i + 5] for i in range(0, len(events), 5)])
    seg_dir = tmp_path / "segments" / "s"
    base = list_chunk_bases(seg_dir)[0]
    path = chunk_path(seg_dir, base)
    layout = walk_chunk(path.read_bytes(), base)
    bad = len(layout.groups) * 3 // 4  # past the first windows of the walk
    bad_start, bad_end = layout.groups[bad], layout.groups[bad + 1]
    data = bytearray(path.read_bytes())
    data[bad_start - base + COMMIT_SIZE + 100] ^= 0x01
    path.write_bytes(bytes(data))

    reader = DirectoryReader(tmp_path)
    got = []
    with pytest.raises(CorruptData) as caught:
        for _, body in reader.iter_events("s"):
            got.append(bytes(body))
    assert (caught.value.start, caught.value.end) == (bad_start, bad_end)
    assert got == events[: len(got)] and len(got) == bad * 5
    assert [bytes(b) for _, b in reader.iter_events("s", bad_end)] == events[(bad + 1) * 5 :]


async def test_iter_frames_over_the_last_chunk_without_bounds_walks_it_once(tmp_path: Path,
                                                                          counted: Counter[int]) -> None:
    events = bodies(60, 3000)
    await fill(tmp_path, [events[i : i + 5] for i in range(0, len(events), 5)])
    seg_dir = tmp_path / "segments" / "s"
    last = list_chunk_bases(seg_dir)[-1]
    end = last + chunk_path(seg_dir, last).stat().st_size

    reader = DirectoryReader(tmp_path)  # no bounds() first, as the Spark source's partitions did
    got = [bytes(b) for _, t, b in reader.iter_frames("s", last, end, read_size=16 * 1024) if t == frames.EVENT]

    assert got and got == events[-len(got) :]
    assert_read_once(counted, seg_dir, [last], times=2)  # walked for its end once, then read: not once per read
