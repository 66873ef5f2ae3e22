"""Chunks written ahead and recycled: a roll takes a spare file (zeros written ahead, or a chunk that
retention dropped), whose old bytes are never read; and without either, chunk files hold only their data."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from logport.config import StoreConfig
from logport.store import SegmentStore
from logport.store.files import SEGMENTS_DIR, ChunkFiles, chunk_path, list_chunk_bases
from logport.store.groups import VERSION, walk_chunk
from logport.store.reader import DirectoryReader
from logport.store.verify import verify_segment

CHUNK = 4096


def config(data_dir: Path, **kw: object) -> StoreConfig:
    return StoreConfig(data_dir=str(data_dir), chunk_size=CHUNK, max_frame_size=1024, **kw)  # type: ignore[arg-type]


async def wait_for_spares(files: ChunkFiles, n: int) -> None:
    for _ in range(400):
        if len(files.spares()) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} spare chunks never appeared: {files.spares()}")


async def test_a_chunk_written_ahead_is_zeros_of_chunk_size_and_the_next_roll_takes_it(tmp_path: Path) -> None:
    store = await SegmentStore.open(config(tmp_path, prewrite_chunks=True))
    try:
        await store.create("s")
        files = store.segment("s").files
        bodies = [os.urandom(300) for _ in range(20)]
        await store.append("s", [bodies[0]])
        await asyncio.sleep(0.1)
        assert not files.spares()  # nothing written ahead for a chunk less than a quarter full
        for body in bodies[1:4]:
            await store.append("s", [body])
        await wait_for_spares(files, 1)
        (spare,) = files.spares()
        assert spare.stat().st_size == CHUNK and spare.read_bytes() == bytes(CHUNK)
        inode = spare.stat().st_ino
        for body in bodies[4:]:
            await store.append("s", [body])
        seg_dir = tmp_path / SEGMENTS_DIR / "s"
        bases = list_chunk_bases(seg_dir)
        assert len(bases) >= 2 and chunk_path(seg_dir, bases[1]).stat().st_ino == inode
        await wait_for_spares(files, 1)  # and the next is written ahead again
    finally:
        await store.close()
    assert [bytes(b) for _, _, b in DirectoryReader(tmp_path).follow("s")] == bodies
    assert not verify_segment(tmp_path, "s").bad


async def test_retention_recycles_dropped_chunks_and_their_old_bytes_are_never_read(tmp_path: Path) -> None:
    store = await SegmentStore.open(config(tmp_path, prewrite_chunks=False, spare_chunks=2,
                                           retention_bytes=3 * CHUNK))
    seg_dir = tmp_path / SEGMENTS_DIR / "s"
    try:
        await store.create("s")
        sent = []
        spare_inodes: set[int] = set()
        chunk_inodes: set[int] = set()
        files = store.segment("s").files
        for i in range(90):
            body = (b"%04d" % i) * 75
            sent.append(body)
            await store.append("s", [body])
            await store.enforce_retention()
            spares = files.spares()
            assert len(spares) <= 2
            spare_inodes |= {p.stat().st_ino for p in spares}
            chunk_inodes |= {chunk_path(seg_dir, b).stat().st_ino for b in list_chunk_bases(seg_dir)}
        assert len(spare_inodes & chunk_inodes) >= 3  # dropped chunks became chunks again
        start = store.info("s").start_offset
    finally:
        await store.close()
    read = [bytes(b) for _, _, b in DirectoryReader(tmp_path).follow("s")]
    assert read == sent[len(sent) - len(read) :] and len(read) >= 20  # stale bytes never read as events
    for base in list_chunk_bases(seg_dir):
        data = chunk_path(seg_dir, base).read_bytes()
        layout = walk_chunk(data, base)
        assert layout.version == VERSION and not layout.corrupt
        assert len(data) >= layout.end - base  # recycled files are longer than their data: the end is the walk's
    store = await SegmentStore.open(config(tmp_path, prewrite_chunks=False))
    try:
        assert store.info("s").start_offset == start
        await store.append("s", [b"after reopen"])
    finally:
        await store.close()
    assert bytes(list(DirectoryReader(tmp_path).follow("s"))[-1][2]) == b"after reopen"


async def test_without_spares_chunk_files_hold_only_their_data(tmp_path: Path) -> None:
    store = await SegmentStore.open(config(tmp_path, prewrite_chunks=False, spare_chunks=0, retention_bytes=2 * CHUNK))
    try:
        for _ in range(40):
            await store.append("s", [b"x" * 300])
            await store.enforce_retention()
        files = store.segment("s").files
        assert files.spares() == []
    finally:
        await store.close()
    seg_dir = tmp_path / SEGMENTS_DIR / "s"
    bases = list_chunk_bases(seg_dir)
    for base, nxt in zip(bases, bases[1:], strict=False):
        assert base + chunk_path(seg_dir, base).stat().st_size == nxt


async def test_truncations_at_once_take_turns(tmp_path: Path) -> None:
    """Retention and a client's TruncateSegment at the same moment: both wrote state.json.tmp and one's
    rename found it gone (FileNotFoundError, found by the power-loss test's writers)."""
    store = await SegmentStore.open(config(tmp_path, spare_chunks=1))
    try:
        ends = [(await store.append("s", [b"x" * 300])).end_offset for _ in range(60)]
        bases = list_chunk_bases(tmp_path / SEGMENTS_DIR / "s")
        cuts = bases[1:]
        assert len(cuts) >= 3 and set(cuts) <= set(ends)  # chunks start where an append ended
        await asyncio.gather(*(store.truncate("s", cut) for cut in cuts for _ in range(4)))
        assert store.info("s").start_offset == max(cuts)
        assert len(store.segment("s").files.spares()) <= 1
    finally:
        await store.close()
    assert [bytes(b) for _, _, b in DirectoryReader(tmp_path).follow("s")] == [b"x" * 300] * len(
        [e for e in ends if e > max(cuts)])


async def test_a_follower_beside_the_hub_reads_across_rolls(tmp_path: Path) -> None:
    """A DirectoryReader following a segment whose chunks roll under it: it had walked a chunk only partly
    when the hub rolled, and the layout it kept of it ended early, so it stopped there for good."""
    import threading

    store = await SegmentStore.open(config(tmp_path))
    await store.create("s")
    bodies = [b"%05d" % i + b"." * 200 for i in range(200)]
    got: list[bytes] = []
    done = threading.Event()

    def follow() -> None:
        for _, _, body in DirectoryReader(tmp_path).follow("s", follow=True, poll=0.001):
            got.append(bytes(body))
            if len(got) == len(bodies) or done.is_set():
                return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        for body in bodies:
            await store.append("s", [body])
            await asyncio.sleep(0)
        for _ in range(500):
            if len(got) == len(bodies):
                break
            await asyncio.sleep(0.01)
    finally:
        done.set()
        await store.close()
    assert len(list_chunk_bases(tmp_path / SEGMENTS_DIR / "s")) >= 5
    assert got == bodies
