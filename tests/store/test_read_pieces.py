"""A read's checked span is held in pieces cut at multiples of verified.PIECE: a read of exactly one piece
is handed out as the piece itself (no copy), any other read gets the same bytes as before, and a group
that changed after the walk fails its checksum across the pieces that hold it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.errors import CorruptData
from logport.store import SegmentStore, frames, groups, verified
from logport.store.files import SEGMENTS_DIR, chunk_path
from logport.store.reader import DirectoryReader
from tests.store.test_segment_store import read_all

PIECE = 4096


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verified, "PIECE", PIECE)


def bodies(count: int, size: int) -> list[bytes]:
    return [i.to_bytes(4, "big") + os.urandom(size - 4) for i in range(count)]


async def open_store(data_dir: Path) -> SegmentStore:
    return await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))


async def test_a_read_of_exactly_one_piece_is_the_piece_itself(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.append("s", bodies(40, 1500))  # one group of about 60 KB: 15 pieces
        end = store.info("s").end_offset
        raw = chunk_path(tmp_path / SEGMENTS_DIR / "s", 0).read_bytes()[:end]
        offset = 0
        got = []
        while offset < end:
            n = PIECE - offset % PIECE  # as the segment listener cuts its replies
            first = await store.read("s", offset, n)
            again = await store.read("s", offset, n)
            assert first.data is again.data  # the kept piece, handed out twice, copied never
            got.append(first.data)
            offset = first.next_offset
        assert b"".join(got) == raw
        assert len(got) > 10
    finally:
        await store.close()


@pytest.mark.parametrize("step", [1000, 4096, 5000, 9000, 70000])
async def test_reads_across_pieces_get_the_same_bytes(tmp_path: Path, step: int) -> None:
    events = bodies(40, 1500)
    store = await open_store(tmp_path)
    try:
        await store.append("s", events[:20])
        await store.append("s", events[20:])
        end = store.info("s").end_offset
        raw = chunk_path(tmp_path / SEGMENTS_DIR / "s", 0).read_bytes()[:end]
        offset = 0
        while offset < end:
            r = await store.read("s", offset, step)
            assert r.data == raw[offset : offset + len(r.data)] and r.data
            offset = r.next_offset
        at, _, body = next(f for f in frames.iter_frames(raw) if f[0] < 3 * PIECE < f[0] + 8 + len(f[2]))
        whole = await store.read_frames("s", at, 100)  # the frame that crosses a piece's end, whole
        assert [bytes(b) for _, _, b in frames.iter_frames(whole.data)] == [bytes(body)]
    finally:
        await store.close()


async def test_a_directory_reader_takes_pieces_as_views_and_frames_across_them_whole(tmp_path: Path) -> None:
    events = bodies(40, 1500)
    store = await open_store(tmp_path)
    try:
        await store.append("s", events)
    finally:
        await store.close()
    reader = DirectoryReader(tmp_path)
    assert [bytes(body) for _, body in reader.iter_events("s")] == events


async def test_a_group_changed_after_the_walk_fails_across_its_pieces(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.append("s", bodies(40, 1500))
        middle = store.info("s").end_offset
        await store.append("s", bodies(3, 1500))
        path = chunk_path(tmp_path / SEGMENTS_DIR / "s", 0)
        data = bytearray(path.read_bytes())
        data[5 * PIECE + 100] ^= 0x01  # in the sixth piece of the first group
        with open(path, "r+b") as f:
            f.write(data)
        head = await store.read("s", 0, PIECE)  # the chunk's header, before the group: served
        with pytest.raises(CorruptData) as caught:
            await store.read("s", head.next_offset, PIECE)
        assert (caught.value.start, caught.value.end) == (head.next_offset, middle)
        assert "checksum mismatch" in str(caught.value)
        assert (await store.read("s", middle, PIECE)).data  # the group after it is served
    finally:
        await store.close()


async def test_the_store_keeps_the_layout_of_a_chunk_it_rolled_from(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's own layout of the chunk before the last is kept at a roll: the hub's readers read that
    chunk without walking it again, frame by frame."""
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), chunk_size=256 * 1024))
    try:
        events = bodies(400, 3000)
        for i in range(0, len(events), 10):
            await store.append("s", events[i : i + 10])
        assert len(store.segment("s").reader.bases) >= 4  # type: ignore[union-attr]
        walks: list[int] = []
        walk_chunk = groups.walk_chunk
        monkeypatch.setattr(groups, "walk_chunk", lambda data, base, **kw: walks.append(base) or walk_chunk(data, base, **kw))
        got = [b for _, b in await read_all(store, "s", 64 * 1024)]
        assert got == events
        assert walks == []
    finally:
        await store.close()
