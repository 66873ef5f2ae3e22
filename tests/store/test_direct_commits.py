"""Commits into a recycled or pre-written chunk go as one O_DIRECT|O_DSYNC write of whole pages
(store.direct_io): the same bytes as the write + fdatasync path, up to the end of the last group, across
rolls, reopenings and a mix of both paths in one chunk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.config import StoreConfig
from logport.store import SegmentStore, chunkwriter, engine
from logport.store.files import SEGMENTS_DIR, chunk_path, list_chunk_bases
from logport.store.groups import walk_chunk
from logport.store.reader import DirectoryReader

CHUNK = 16384

# each step: the bodies of the appends made at once (one commit group when they meet the writer together),
# then whether the store is closed and opened again after them
steps = st.lists(st.tuples(st.lists(st.integers(0, 3000), min_size=1, max_size=6), st.booleans()),
                 min_size=1, max_size=25)


async def run(data_dir: Path, plan: list[tuple[list[int], bool]], direct_io: bool) -> list[bytes]:
    config = StoreConfig(data_dir=str(data_dir), chunk_size=CHUNK, max_frame_size=4096, spare_chunks=3,
                         direct_io=direct_io)
    store = await SegmentStore.open(config)
    bodies: list[bytes] = []
    try:
        await store.create("s")
        for i, (sizes, reopen) in enumerate(plan):
            batch = [bytes([(i + j) % 251 + 1]) * n for j, n in enumerate(sizes)]
            await asyncio.gather(*(store.append("s", [b]) for b in batch))
            bodies += batch
            if i % 4 == 3:  # retention drops the chunks below the end: they become the spares rolls take
                await store.truncate("s", store.info("s").end_offset)
                bodies = []
            if reopen:
                await store.close()
                store = await SegmentStore.open(config)
    finally:
        await store.close()
    return bodies


def stored_groups(data_dir: Path) -> list[bytes]:
    """Every chunk's bytes up to the end of its last valid group."""
    seg_dir = data_dir / SEGMENTS_DIR / "s"
    out = []
    for base in list_chunk_bases(seg_dir):
        data = chunk_path(seg_dir, base).read_bytes()
        layout = walk_chunk(data, base)
        out.append(data[: layout.end - base])
    return out


def events_and_layouts(data_dir: Path) -> tuple[list[bytes], list[int]]:
    """Every stored event, and each chunk's base, checking that no chunk has a corrupt range."""
    seg_dir = data_dir / SEGMENTS_DIR / "s"
    bases = list_chunk_bases(seg_dir)
    for base in bases:
        assert not walk_chunk(chunk_path(seg_dir, base).read_bytes(), base).corrupt
    return [bytes(b) for _, b in DirectoryReader(data_dir).iter_events("s")], bases


@settings(max_examples=40, deadline=None)
@given(plan=steps)
def test_direct_commits_store_what_write_and_fdatasync_do(tmp_path_factory: pytest.TempPathFactory,
                                                          plan: list[tuple[list[int], bool]]) -> None:
    """Through the writer thread, a direct commit is the bytes of a buffered one; through the commit engine
    (the loop adds each append on its own, the engine's thread takes what is there), the same events in
    other groups."""
    direct_calls = 0
    write_group_direct = chunkwriter.ChunkWriter._write_group_direct

    def counting(self: chunkwriter.ChunkWriter, *args: object) -> int:
        nonlocal direct_calls
        direct_calls += 1
        return write_group_direct(self, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunkwriter.ChunkWriter, "_write_group_direct", counting)
        buffered, threaded = tmp_path_factory.mktemp("buffered"), tmp_path_factory.mktemp("threaded")
        expected = asyncio.run(run(buffered, plan, False))
        assert direct_calls == 0  # direct_io = false never writes directly
        m.setattr(engine, "Engine", None)  # no commit engine: direct commits in the writer thread
        assert asyncio.run(run(threaded, plan, True)) == expected
    assert stored_groups(threaded) == stored_groups(buffered)
    dirs = [buffered, threaded]
    if engine.available():
        through_engine = tmp_path_factory.mktemp("engine")
        assert asyncio.run(run(through_engine, plan, True)) == expected
        dirs.append(through_engine)
    for d in dirs:
        assert events_and_layouts(d)[0] == expected


def test_commits_into_a_recycled_chunk_are_direct_and_into_a_new_file_are_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    write_group_direct = chunkwriter.ChunkWriter._write_group_direct

    def counting(self: chunkwriter.ChunkWriter, start: int, *args: object) -> int:
        calls.append(start)
        return write_group_direct(self, start, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(chunkwriter.ChunkWriter, "_write_group_direct", counting)
    monkeypatch.setattr(engine, "Engine", None)  # every direct commit in the writer thread, counted
    # two chunks' worth in new files (never direct), then dropped: the next two rolls take them as spares
    plan = [([3000, 3000], False)] * 3 + [([3000, 3000], False)] + [([3000, 3000], False)] * 6
    asyncio.run(run(tmp_path, plan, True))
    assert calls, "no commit went directly into a recycled chunk"
    assert min(calls) >= 4 * 6016 - CHUNK  # none before the first truncation made spares


@pytest.mark.skipif(not engine.available(), reason="the commit engine (a C extension) is not built")
def test_the_commit_engine_takes_the_commits_into_a_recycled_chunk(tmp_path: Path) -> None:
    async def go() -> int:
        config = StoreConfig(data_dir=str(tmp_path), chunk_size=CHUNK, max_frame_size=4096, spare_chunks=3,
                             direct_io=True)
        store = await SegmentStore.open(config)
        await store.create("s")
        for i in range(36):
            await asyncio.gather(*(store.append("s", [bytes([i + 1]) * 3000]) for _ in range(2)))
            if i % 8 == 7:
                await store.truncate("s", store.info("s").end_offset)
        line = store.segment("s")._engine
        assert line is not None
        written = line.groups_written
        await store.close()
        return written

    assert asyncio.run(go()) > 10
    assert len(events_and_layouts(tmp_path)[0]) == 2 * 4  # the appends after the last truncation


@pytest.mark.parametrize("direct_io", [True, False])
def test_a_clean_restart_in_a_recycled_chunk_warns_of_no_interrupted_write(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, direct_io: bool) -> None:
    # the old bytes of the recycled chunk follow the last group; close() zeroes the next COMMIT frame's place
    plan = [([3000, 3000], False)] * 4 + [([3000, 100], True), ([5], True)]
    with caplog.at_level("WARNING", logger="logport.store"):
        asyncio.run(run(tmp_path, plan, direct_io))
    assert not [r for r in caplog.records if "recovery ends the segment" in r.getMessage()]
