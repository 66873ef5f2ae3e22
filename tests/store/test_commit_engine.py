"""The direct commit engine (store/engine.py, _commitengine.c): its CRC32C is the crc32c package's; the
groups it writes are format v2 groups that recovery and readers take; a write that fails fails its
appends and every one after it, leaves nothing readable, and the store goes on."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.config import StoreConfig
from logport.errors import StoreWriteFailed
from logport.store import SegmentStore, WriterCondition, engine, frames
from logport.store.files import SEGMENTS_DIR, chunk_path
from logport.store.groups import COMMIT_SIZE, chunk_header, walk_chunk
from tests.store.test_segment_store import read_all

pytestmark = pytest.mark.skipif(not engine.available(), reason="the commit engine (a C extension) is not built")

if engine.available():
    from logport.store import _commitengine


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=5000), seed=st.integers(0, 2**32 - 1))
def test_the_engines_crc32c_is_the_crc32c_packages(data: bytes, seed: int) -> None:
    assert _commitengine.crc32c(data, seed) == crc32c(data, seed)


def test_its_groups_are_v2_groups_that_hold_the_events(tmp_path: Path) -> None:
    """Appends of random sizes, some placed while a group is being written, into a file holding other
    bytes (a recycled chunk's): every group walks as valid, the chain unbroken, the events in order."""
    path = tmp_path / "chunk"
    size = 4 << 20
    path.write_bytes(random.Random(1).randbytes(size))
    head, crc = chunk_header(0)
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, head, 0)
    os.fsync(fd)
    direct = os.open(path, os.O_WRONLY | getattr(os, "O_DIRECT", 0) | os.O_DSYNC)
    eng = _commitengine.Engine(1 << 20)
    try:
        eng.start(direct, 0, len(head), crc, head, size)
        rng = random.Random(2)
        bodies = []
        for _ in range(400):
            body = rng.randbytes(rng.choice([0, 1, 100, 4088, 4089, rng.randint(0, 70000)]))
            placed = eng.add([frames.HEADER.pack(frames.EVENT, len(body)), body], 8 + len(body))
            if placed is None:
                break
            bodies.append(body)
            if rng.random() < 0.1:
                time.sleep(0.001)
        deadline = time.monotonic() + 10
        while eng.state()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        done, failure = eng.completed()
        assert failure is None and len(done) > 10 and len(bodies) > 50
        end = eng.state()[1]
    finally:
        eng.close()
        os.close(direct)
        os.close(fd)
    data = path.read_bytes()
    layout = walk_chunk(data, 0)
    assert not layout.corrupt and layout.end == end and layout.groups == [start for _, start, *_ in done]
    events = [bytes(b) for _, t, b in frames.iter_frames(memoryview(data)[: layout.end]) if t == frames.EVENT]
    assert events == bodies


def test_a_group_larger_than_its_buffer_or_past_the_limit_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "chunk"
    path.write_bytes(bytes(1 << 20))
    head, crc = chunk_header(0)
    direct = os.open(path, os.O_WRONLY | getattr(os, "O_DIRECT", 0) | os.O_DSYNC)
    eng = _commitengine.Engine(64 << 10)
    try:
        eng.start(direct, 0, len(head), crc, head, 100_000)
        assert eng.add([b"x" * 70_000], 70_000) is None  # more than a buffer
        with pytest.raises(ValueError, match="parts hold 3 bytes, not the 4 given"):
            eng.add([b"abc"], 4)
        placed = [eng.add([b"y" * 30_000], 30_000) for _ in range(4)]
        assert placed[:3] == [p for p in placed[:3] if p is not None] and placed[3] is None  # the limit
    finally:
        eng.close()
        os.close(direct)


async def open_warm(data_dir: Path) -> SegmentStore:
    """A store whose segment writes into recycled chunks, through the engine."""
    config = StoreConfig(data_dir=str(data_dir), chunk_size=1 << 20, spare_chunks=4, direct_io=True)
    store = await SegmentStore.open(config)
    await store.create("s")
    for _ in range(3):
        await asyncio.gather(*(store.append("s", [b"w" * 60_000]) for _ in range(20)))
    await store.truncate("s", store.info("s").end_offset)  # the chunks below become spares
    await asyncio.gather(*(store.append("s", [b"w" * 60_000]) for _ in range(20)))  # rolls into one
    return store


async def test_a_failed_write_fails_its_appends_and_those_after_and_the_store_goes_on(tmp_path: Path) -> None:
    store = await open_warm(tmp_path)
    seg = store.segment("s")
    await store.append("s", [b"a" * 3000])
    line, writer = seg._engine, seg.chunk_writer
    assert line is not None and writer is not None and writer._direct_fd >= 0
    written = line.groups_written
    direct_fd = writer._direct_fd
    readonly = os.open(chunk_path(seg.dir, writer.base), os.O_RDONLY)
    saved = os.dup(direct_fd)
    os.dup2(readonly, direct_fd)  # the engine's next pwrite: EBADF
    try:
        results = await asyncio.gather(
            store.append("s", [b"b" * 3000], writer=WriterCondition(b"w", end=1)),
            *(store.append("s", [bytes([99 + i]) * 3000]) for i in range(5)), return_exceptions=True)
    finally:
        os.dup2(saved, direct_fd)
        os.close(saved)
        os.close(readonly)
    assert all(isinstance(r, StoreWriteFailed) and "direct commit" in str(r) for r in results), results
    assert line.groups_written == written
    assert [b[:1] for _, b in await read_all(store, "s")][-1:] == [b"a"]
    end = seg.end
    data = chunk_path(seg.dir, writer.base).read_bytes()
    assert data[end - writer.base : end - writer.base + COMMIT_SIZE] == bytes(COMMIT_SIZE)
    # the retry is stored once, through the engine again
    assert not (await store.append("s", [b"b" * 3000], writer=WriterCondition(b"w", end=1))).duplicate
    assert line.groups_written > written
    await store.close()
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), chunk_size=1 << 20))
    assert [b[:1] for _, b in await read_all(store, "s")][-2:] == [b"a", b"b"]
    await store.close()
    seg_dir = tmp_path / SEGMENTS_DIR / "s"
    for chunk in seg_dir.glob("*.log"):
        assert not walk_chunk(chunk.read_bytes(), int(chunk.stem)).corrupt
