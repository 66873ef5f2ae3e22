"""Segment store: round trips, rolling, writer state, sealing, truncation, retention, tail waits."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.errors import (
    InvalidSegmentName,
    NoSuchSegment,
    OffsetTruncated,
    SegmentSealed,
    StoreError,
    StoreLimitExceeded,
    WriterOffsetMismatch,
)
from logport.store import AppendResult, SegmentStore, WriterCondition, frames
from logport.store.chunkwriter import ChunkWriter
from logport.store.files import chunk_path, list_chunk_bases
from logport.store.groups import CHUNK_HEADER_SIZE, COMMIT_SIZE, walk_chunk
from logport.store.reader import DirectoryReader
from logport.store.segment import Segment
from logport.store.writers import WriterState

# format v2: a segment's first chunk starts with its header, and every commit group with a COMMIT frame
# (store records, skipped by readers as every negative frame type): the first event is at FIRST
FIRST = CHUNK_HEADER_SIZE + COMMIT_SIZE


def events_of(data: bytes, base: int = 0) -> list[tuple[int, bytes]]:
    return [(o, bytes(b)) for o, t, b in frames.iter_frames(data, base) if t == frames.EVENT]


async def read_all(store: SegmentStore, name: str, read_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
    """(offset, body) of every event of the segment, read through the store in reads of `read_bytes`."""
    info = store.info(name)
    out: list[tuple[int, bytes]] = []
    offset = info.start_offset
    while offset < info.end_offset:
        r = await store.read_frames(name, offset, read_bytes)
        out += events_of(r.data, offset)
        offset = r.next_offset
    return out


@pytest.mark.parametrize(
    "bodies",
    [
        [b""],
        [b"a"],
        [b"x" * 1000, b"y", b""],
        [bytes(range(256)) * 10],
        [b"z" * 65536] * 3,
    ],
)
async def test_append_and_read_round_trip(store: SegmentStore, bodies: list[bytes]) -> None:
    result = await store.append("s", bodies)
    # several frames are preceded by a 20-byte record that makes the append all-or-nothing
    group = 20 if len(bodies) > 1 else 0
    assert result.offset == FIRST + group
    assert result.end_offset == FIRST + group + sum(8 + len(b) for b in bodies)
    assert [b for _, b in await read_all(store, "s")] == bodies
    raw = await store.read("s", result.offset, 1 << 20)
    assert raw.data == frames.frame_events(bodies)
    assert raw.at_tail and not raw.end_of_segment


async def test_offsets_are_byte_positions(store: SegmentStore) -> None:
    a = await store.append("s", [b"abc"])
    b = await store.append("s", [b"defg"])
    assert (a.offset, a.end_offset) == (FIRST, FIRST + 11)
    # the next group's COMMIT frame follows right where the last one ended, then its event
    assert (b.offset, b.end_offset) == (a.end_offset + COMMIT_SIZE, a.end_offset + COMMIT_SIZE + 12)
    r = await store.read("s", a.end_offset, 100)  # from the end of the last append: the next one, at its offset
    assert frames.HEADER.unpack_from(r.data, 0)[0] == frames.COMMIT
    assert events_of(r.data, a.end_offset) == [(b.offset, b"defg")]
    r = await store.read("s", b.offset, 100)
    assert events_of(r.data, b.offset) == [(b.offset, b"defg")]


async def test_concurrent_appends_are_group_committed(store: SegmentStore) -> None:
    results = await asyncio.gather(*(store.append("s", [f"e{i}".encode()]) for i in range(200)))
    offsets = sorted(r.offset for r in results)
    assert len(set(offsets)) == 200
    assert store.metrics.fsyncs._value.get() < 200  # many appends shared an fdatasync
    got = await read_all(store, "s")
    assert sorted(b for _, b in got) == sorted(f"e{i}".encode() for i in range(200))


async def test_chunks_roll_and_survive_reopen(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=1024, max_frame_size=512)
    store = await SegmentStore.open(cfg)
    bodies = [bytes([i]) * 100 for i in range(50)]
    for body in bodies:
        await store.append("s", [body])
    assert store.info("s").chunks > 4
    await store.close()
    seg_dir = tmp_path / "segments" / "s"
    bases = list_chunk_bases(seg_dir)
    assert bases[0] == 0
    for base, nxt in zip(bases, bases[1:], strict=False):
        # byte-addressed, no gaps: a chunk's data (not its file, which may be written ahead) ends where the
        # next chunk starts, every group of it valid
        layout = walk_chunk(chunk_path(seg_dir, base).read_bytes(), base)
        assert (layout.end, layout.corrupt) == (nxt, [])
        assert nxt - base <= 1024
    store = await SegmentStore.open(cfg)
    assert [b for _, b in await read_all(store, "s")] == bodies
    await store.close()


async def test_an_append_larger_than_a_chunk_gets_a_chunk_of_its_own(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=256, max_frame_size=200)
    store = await SegmentStore.open(cfg)
    await store.append("s", [b"a" * 100])
    await store.append("s", [b"b" * 150] * 3)  # 474 bytes: over a chunk, kept whole
    assert [len(b) for _, b in await read_all(store, "s")] == [100, 150, 150, 150]
    await store.close()


async def test_frame_size_limit(store: SegmentStore) -> None:
    limit = store.config.max_frame_size
    with pytest.raises(StoreLimitExceeded, match=f"event of {limit + 1} bytes .* exceeds max_frame_size {limit}"):
        await store.append("s", [b"x" * (limit + 1)])


@pytest.mark.parametrize("name", ["", "a/b", "..", "a b", "é", "x" * 251])
async def test_segment_names_are_validated(store: SegmentStore, name: str) -> None:
    with pytest.raises(InvalidSegmentName):
        await store.append(name, [b"x"])


async def test_segment_count_limit(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_segments=2))
    await store.append("a", [b"x"])
    await store.append("b", [b"x"])
    with pytest.raises(StoreLimitExceeded, match="max_segments 2"):
        await store.append("c", [b"x"])
    await store.close()


async def test_a_create_whose_caller_went_away_still_makes_the_segment(store: SegmentStore,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that goes away while its segment is being made cancels its wait, not the making: the directory
    is made in a thread either way, and a later create of the name gets the segment (it got FileExistsError)."""
    opened = threading.Event()
    open_sync = Segment.open_sync

    def slow_open(segment: Segment, create: bool) -> None:
        opened.set()
        time.sleep(0.2)
        open_sync(segment, create)

    monkeypatch.setattr(Segment, "open_sync", slow_open)
    gone = asyncio.ensure_future(store.create("orders"))
    await asyncio.get_running_loop().run_in_executor(None, opened.wait)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert (await store.create("orders")).name == "orders"
    await store.append("orders", [b"kept"])
    assert [b for _, b in await read_all(store, "orders")] == [b"kept"]


async def test_unknown_segment(store: SegmentStore) -> None:
    with pytest.raises(NoSuchSegment):
        await store.read("nope", 0, 10)
    with pytest.raises(NoSuchSegment):
        await store.append("nope", [b"x"], create=False)


# --- writer state (exactly-once appends) ---


async def test_writer_condition_deduplicates_and_refuses_gaps(store: SegmentStore) -> None:
    w = b"conn-1"
    first = await store.append("s", [b"a"], writer=WriterCondition(w, end=10, start=0))
    assert not first.duplicate and first.writer_offset == 10
    retry = await store.append("s", [b"a"], writer=WriterCondition(w, end=10, start=0))
    assert retry.duplicate and retry.writer_offset == 10
    with pytest.raises(WriterOffsetMismatch, match="stored offset is 10"):
        await store.append("s", [b"c"], writer=WriterCondition(w, end=30, start=20))
    second = await store.append("s", [b"b"], writer=WriterCondition(w, end=20, start=10))
    assert not second.duplicate
    assert [b for _, b in await read_all(store, "s")] == [b"a", b"b"]
    assert store.writer_offset("s", w) == 20
    assert store.writer_offset("s", b"other") == 0


async def test_writer_conditions_within_one_group_commit(store: SegmentStore) -> None:
    w = b"chunk-x"
    results = await asyncio.gather(*(store.append("s", [b"once"], writer=WriterCondition(w, end=1)) for _ in range(20)))
    assert sum(not r.duplicate for r in results) == 1
    assert [b for _, b in await read_all(store, "s")] == [b"once"]


async def test_writer_state_survives_reopen_and_rolls(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=512, max_frame_size=256)
    store = await SegmentStore.open(cfg)
    for i in range(1, 40):
        await store.append("s", [b"e" * 50], writer=WriterCondition(b"w%d" % (i % 3), end=i))
    await store.close()
    store = await SegmentStore.open(cfg)
    assert {k: store.writer_offset("s", k) for k in (b"w0", b"w1", b"w2")} == {b"w0": 39, b"w1": 37, b"w2": 38}
    dup = await store.append("s", [b"e"], writer=WriterCondition(b"w1", end=37))
    assert dup.duplicate
    await store.close()


async def test_a_chunk_started_inside_a_group_has_the_groups_earlier_writers(tmp_path: Path) -> None:
    """Recovery reads the writer state from the last chunk alone: the table a chunk starts with must hold
    what the appends before it in the same group wrote, or their retries would be stored twice."""
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=1024, max_frame_size=512)
    store = await SegmentStore.open(cfg)
    await asyncio.gather(*(store.append("s", [b"e" * 300], writer=WriterCondition(b"w%d" % i, end=i + 1))
                           for i in range(8)))  # one group, rolling two or three times
    assert len(list_chunk_bases(tmp_path / "segments" / "s")) >= 3
    await store.close()
    store = await SegmentStore.open(cfg)
    assert [store.writer_offset("s", b"w%d" % i) for i in range(8)] == [i + 1 for i in range(8)]
    await store.close()


async def test_writer_state_limit_keeps_the_most_recent(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), writer_state_limit=3))
    for i in range(5):
        await store.append("s", [b"x"], writer=WriterCondition(b"w%d" % i, end=1))
    assert [store.writer_offset("s", b"w%d" % i) for i in range(5)] == [0, 0, 1, 1, 1]
    await store.close()


# --- sealing, truncation, retention ---


async def test_seal(store: SegmentStore) -> None:
    await store.append("s", [b"a"])
    info = await store.seal("s")
    assert info.sealed
    with pytest.raises(SegmentSealed):
        await store.append("s", [b"b"])
    r = await store.read("s", 0, 100)
    assert r.at_tail and r.end_of_segment
    t0 = time.monotonic()
    r = await store.read("s", info.end_offset, 100, wait=5)
    assert r.end_of_segment and r.data == b"" and time.monotonic() - t0 < 1  # no long poll on a sealed tail


async def test_seal_survives_reopen(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path))
    store = await SegmentStore.open(cfg)
    await store.append("s", [b"a"])
    await store.seal("s")
    await store.close()
    store = await SegmentStore.open(cfg)
    assert store.info("s").sealed
    with pytest.raises(SegmentSealed):
        await store.append("s", [b"b"])
    await store.close()


async def test_truncate_moves_start_and_deletes_whole_chunks(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=300, max_frame_size=200)
    store = await SegmentStore.open(cfg)
    results = [await store.append("s", [b"%03d" % i * 30]) for i in range(10)]
    cut = results[5].offset
    info = await store.truncate("s", cut)
    assert info.start_offset == cut
    with pytest.raises(OffsetTruncated, match=f"starts at {cut}"):
        await store.read("s", results[0].offset, 100)
    assert [b for _, b in await read_all(store, "s")] == [b"%03d" % i * 30 for i in range(5, 10)]
    bases = list_chunk_bases(tmp_path / "segments" / "s")
    assert bases[0] <= cut and all(b > results[0].offset for b in bases)
    with pytest.raises(StoreError, match="not a frame boundary"):
        await store.truncate("s", results[7].offset + 3)
    await store.close()
    store = await SegmentStore.open(cfg)
    assert store.info("s").start_offset == cut
    await store.close()


async def test_retention_by_size(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=1000, max_frame_size=500, retention_bytes=2500)
    store = await SegmentStore.open(cfg)
    for _ in range(50):
        await store.append("s", [b"r" * 92])  # 100-byte frames, a group each: 7 a chunk, after its header
    await store.enforce_retention()
    info = store.info("s")
    group = COMMIT_SIZE + 100
    per_chunk = (1000 - CHUNK_HEADER_SIZE) // group
    chunk_bytes = CHUNK_HEADER_SIZE + per_chunk * group
    assert per_chunk == 7
    assert info.end_offset == 50 // per_chunk * chunk_bytes + CHUNK_HEADER_SIZE + 50 % per_chunk * group
    assert 2500 - chunk_bytes <= info.bytes <= 2500 + chunk_bytes  # whole chunks only
    assert info.start_offset % chunk_bytes == 0 and info.start_offset in list_chunk_bases(tmp_path / "segments" / "s")
    await store.close()


async def test_retention_by_age(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=1000, max_frame_size=500, retention_age=60)
    store = await SegmentStore.open(cfg)
    for _ in range(30):
        await store.append("s", [b"r" * 92])
    seg_dir = tmp_path / "segments" / "s"
    bases = list_chunk_bases(seg_dir)
    chunk_bytes = CHUNK_HEADER_SIZE + 7 * (COMMIT_SIZE + 100)  # 7 groups of one 100-byte frame a chunk
    assert bases[:3] == [0, chunk_bytes, 2 * chunk_bytes]
    old = time.time() - 3600
    for base in bases[:2]:
        os.utime(chunk_path(seg_dir, base), (old, old))
    await store.enforce_retention()
    assert store.info("s").start_offset == bases[2]
    assert list_chunk_bases(seg_dir)[0] == bases[2]
    await store.close()


# --- tail reads ---


async def test_tail_read_waits_for_the_next_append(store: SegmentStore) -> None:
    await store.append("s", [b"first"])
    end = store.info("s").end_offset

    async def later() -> None:
        await asyncio.sleep(0.05)
        await store.append("s", [b"second"])

    task = asyncio.create_task(later())
    t0 = time.monotonic()
    r = await store.read("s", end, 100, wait=5)
    elapsed = time.monotonic() - t0
    await task
    assert events_of(r.data, end) == [(end + COMMIT_SIZE, b"second")]  # after its group's COMMIT frame
    assert 0.03 < elapsed < 2


async def test_tail_read_times_out_empty(store: SegmentStore) -> None:
    await store.append("s", [b"x"])
    t0 = time.monotonic()
    r = await store.read("s", store.info("s").end_offset, 100, wait=0.1)
    assert r.data == b"" and r.at_tail and 0.09 < time.monotonic() - t0 < 2


async def test_read_frames_returns_a_whole_frame_larger_than_asked(store: SegmentStore) -> None:
    first = await store.append("s", [b"big" * 1000])
    await store.append("s", [b"next"])
    r = await store.read_frames("s", first.offset, 10)
    assert events_of(r.data) == [(0, b"big" * 1000)]


# --- back-pressure ---


async def test_appends_wait_while_too_much_is_pending(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_pending_bytes=10_000))
    results = await asyncio.gather(*(store.append("s", [b"p" * 3000]) for _ in range(30)))
    assert len({r.offset for r in results}) == 30
    await store.close()


# --- the read-only directory reader ---


async def test_directory_reader_matches_the_store(tmp_path: Path) -> None:
    cfg = StoreConfig(data_dir=str(tmp_path), chunk_size=400, max_frame_size=300)
    store = await SegmentStore.open(cfg)
    bodies = [bytes([65 + i % 26]) * (i * 7 % 200) for i in range(40)]
    for i, b in enumerate(bodies):
        await store.append("s", [b], writer=WriterCondition(b"w", end=i + 1))
    expected = await read_all(store, "s")
    reader = DirectoryReader(tmp_path)
    assert reader.segment_names() == ["s"]
    assert [(o, bytes(b)) for o, b in reader.iter_events("s")] == expected
    assert reader.describe("s")["events"] == 40
    await store.close()


# --- fsync policies and write failures ---


async def test_fsync_interval_acknowledges_after_write_and_syncs_later(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), fsync="interval", fsync_interval=0.05))
    await store.append("s", [b"x"])
    assert store.metrics.fsyncs._value.get() == 0
    await asyncio.sleep(0.2)
    assert store.metrics.fsyncs._value.get() >= 1
    await store.close()


async def test_fsync_interval_syncs_while_chunks_roll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval fdatasync runs in a thread of its own while the writer thread rolls chunks and
    closes the descriptors it replaces: it syncs a duplicate taken under the roll's lock, so it
    never meets a closed descriptor (an error it would swallow, to retry at the next interval)."""
    errors: list[OSError] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        try:
            real(fd)
        except OSError as e:
            errors.append(e)
            raise

    config = StoreConfig(data_dir=str(tmp_path), fsync="interval", fsync_interval=0.001, chunk_size=4096,
                         max_frame_size=1024)
    store = await SegmentStore.open(config)
    await store.create("s")
    monkeypatch.setattr(os, "fdatasync", recording)
    for i in range(300):
        await store.append("s", [bytes([i % 256]) * 1000])
        if i % 20 == 0:
            await asyncio.sleep(0.002)  # let the interval sync run between rolls
    await store.close()
    assert errors == []
    assert store.metrics.fsyncs._value.get() > 15 and len(list_chunk_bases(tmp_path / "segments" / "s")) > 50
    store = await SegmentStore.open(config)
    assert [b[0] for _, b in await read_all(store, "s")] == [i % 256 for i in range(300)]
    await store.close()


async def test_fsync_never_leaves_it_to_the_os(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), fsync="never"))
    for _ in range(10):
        await store.append("s", [b"x"])
    assert store.metrics.fsyncs._value.get() == 0
    await store.close()


async def test_a_failed_write_acknowledges_nothing_and_the_store_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.errors import StoreWriteFailed

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.append("s", [b"before"])
    real_pwritev = os.pwritev

    def disk_full(fd: int, buffers: list[bytes], offset: int) -> int:
        real_pwritev(fd, [b"\xff" * 3], offset)  # a partial write lands before the error
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", disk_full)
    with pytest.raises(StoreWriteFailed, match="No space left on device"):
        await store.append("s", [b"lost"], writer=WriterCondition(b"w", end=5))
    assert store.writer_offset("s", b"w") == 0
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    after = await store.append("s", [b"after"])
    # the failed bytes were written over, not left in the middle: the next group starts where "before" ended
    assert after.offset == FIRST + 14 + COMMIT_SIZE
    assert [b for _, b in await read_all(store, "s")] == [b"before", b"after"]
    await store.close()
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    assert [b for _, b in await read_all(store, "s")] == [b"before", b"after"]
    await store.close()


async def test_a_retry_in_the_same_group_as_a_failed_write_fails_with_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.errors import StoreWriteFailed

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.create("s")

    def disk_full(fd: int, buffers: list[bytes], offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", disk_full)
    first, retry = await asyncio.gather(store.append("s", [b"x"], writer=WriterCondition(b"w", end=1)),
                                        store.append("s", [b"x"], writer=WriterCondition(b"w", end=1)),
                                        return_exceptions=True)
    assert isinstance(first, StoreWriteFailed)
    assert isinstance(retry, StoreWriteFailed)  # not acknowledged as a duplicate of what was never stored
    monkeypatch.undo()
    again = await store.append("s", [b"x"], writer=WriterCondition(b"w", end=1))
    assert not again.duplicate
    # the writer thread may still be finishing its job: an append made meanwhile is answered inside the call
    # (see _enqueue), and the metric counts it a turn of the loop later; wait for the thread to be idle
    await until(lambda: not store.segment("s")._writing)
    assert (await store.append("s", [b"x"], writer=WriterCondition(b"w", end=1))).duplicate
    sample = store.metrics.registry.get_sample_value
    assert sample("logport_store_write_errors_total", {"segment": "s"}) == 2
    assert sample("logport_store_append_duplicates_total", {"segment": "s"}) == 1
    await store.close()


async def test_a_failed_write_after_a_roll_removes_the_new_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.errors import StoreWriteFailed

    config = StoreConfig(data_dir=str(tmp_path), chunk_size=4096)
    store = await SegmentStore.open(config)
    await store.append("s", [b"a" * 3000], writer=WriterCondition(b"w", end=1))  # new chunks get a writer table
    bases = list_chunk_bases(tmp_path / "segments" / "s")

    def disk_full(fd: int, buffers: list[bytes], offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", disk_full)
    with pytest.raises(StoreWriteFailed):
        await store.append("s", [b"b" * 3000])
    assert list_chunk_bases(tmp_path / "segments" / "s") == bases
    monkeypatch.undo()
    await store.append("s", [b"c" * 3000])
    await store.close()
    store = await SegmentStore.open(config)
    assert [b[:1] for _, b in await read_all(store, "s")] == [b"a", b"c"]
    await store.close()


async def test_a_writer_key_too_long_for_the_chunk_table_is_refused(store: SegmentStore) -> None:
    with pytest.raises(StoreError, match="writer key of 70000 bytes .* limit of 1024"):
        await store.append("s", [b"x"], writer=WriterCondition(b"k" * 70000, end=1))
    assert not (await store.append("s", [b"y"], writer=WriterCondition(b"k" * 1024, end=1))).duplicate


async def test_an_unexpected_error_fails_its_group_and_the_store_goes_on(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.errors import StoreWriteFailed

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.create("s")
    real = ChunkWriter.write

    def broken(self: ChunkWriter, accepted: list, writers: object) -> list[int]:  # type: ignore[type-arg]
        monkeypatch.setattr(ChunkWriter, "write", real)
        raise RuntimeError("a bug")

    monkeypatch.setattr(ChunkWriter, "write", broken)
    with pytest.raises(StoreWriteFailed, match="a bug"):
        await store.append("s", [b"x"])
    assert not (await store.append("s", [b"y"])).duplicate
    await store.close()


async def test_a_group_failing_after_its_write_leaves_nothing_behind(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug past the pwritev (here in the fsync) fails the group: its bytes must not become readable
    with the next append, nor its writer offset stored, or the client's retry would be stored twice."""
    from logport.errors import StoreWriteFailed

    config = StoreConfig(data_dir=str(tmp_path))
    store = await SegmentStore.open(config)
    await store.create("s")
    real = ChunkWriter.sync

    def broken(self: ChunkWriter) -> None:
        monkeypatch.setattr(ChunkWriter, "sync", real)
        raise RuntimeError("a bug after the write")

    monkeypatch.setattr(ChunkWriter, "sync", broken)
    with pytest.raises(StoreWriteFailed, match="a bug after the write"):
        await store.append("s", [b"lost"], writer=WriterCondition(b"w", end=1))
    retry = await store.append("s", [b"lost"], writer=WriterCondition(b"w", end=1))
    assert not retry.duplicate
    assert [b for _, b in await read_all(store, "s")] == [b"lost"]
    await store.close()
    store = await SegmentStore.open(config)
    assert [b for _, b in await read_all(store, "s")] == [b"lost"]
    await store.close()


async def test_a_stored_retry_is_a_duplicate_even_when_its_group_fails(store: SegmentStore,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.errors import StoreWriteFailed

    await store.append("s", [b"a"], writer=WriterCondition(b"w", end=10))

    def disk_full(fd: int, buffers: list[bytes], offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", disk_full)
    more = asyncio.create_task(store.append("s", [b"b"], writer=WriterCondition(b"w", end=20, start=10)))
    old = asyncio.create_task(store.append("s", [b"a"], writer=WriterCondition(b"w", end=5)))
    results = await asyncio.gather(more, old, return_exceptions=True)  # one group: queued in one turn
    assert isinstance(results[0], StoreWriteFailed)
    assert isinstance(results[1], AppendResult) and results[1].duplicate and results[1].writer_offset == 10


async def test_a_cancelled_retry_does_not_stop_the_commit_loop(store: SegmentStore) -> None:
    await store.append("s", [b"x"], writer=WriterCondition(b"w", end=1))
    # with the writer thread still finishing its job, the retry would be answered inside the call (see
    # _enqueue), before it could be cancelled: the retry must wait in the queue for the commit loop
    await until(lambda: not store.segment("s")._writing)
    retry = asyncio.create_task(store.append("s", [b"x"], writer=WriterCondition(b"w", end=1)))
    await asyncio.sleep(0)
    retry.cancel()
    assert (await store.append("s", [b"y"])).offset > 0
    with pytest.raises(asyncio.CancelledError):
        await retry


async def test_pending_bytes_gauge_follows_the_queue(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.create("s")
    gauge = store.metrics.registry.get_sample_value
    tasks = [asyncio.create_task(store.append("s", [b"q" * 1000])) for _ in range(10)]
    await asyncio.sleep(0)  # queued, not yet written
    assert gauge("logport_store_pending_bytes", {"segment": "s"}) == 10 * 1008
    await asyncio.gather(*tasks)
    assert gauge("logport_store_pending_bytes", {"segment": "s"}) == 0
    await store.close()


async def test_appends_waiting_for_room_are_served_in_order(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_pending_bytes=4096))
    await store.create("s")
    sizes = [3000, 100, 5000, 10, 2000, 700, 4000, 1]  # big ones would overtake small ones if unordered
    tasks = []
    for i, size in enumerate(sizes * 5):
        tasks.append(asyncio.create_task(store.append("s", [bytes([i % 256]) * size])))
        await asyncio.sleep(0)  # each append arrives after the one before
    results = await asyncio.gather(*tasks)
    offsets = [r.offset for r in results]
    assert offsets == sorted(offsets)
    assert store.segment("s").pending_bytes == 0
    await store.close()


async def test_waiting_appends_are_refused_when_the_store_closes(tmp_path: Path) -> None:
    from logport.errors import StoreClosed

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_pending_bytes=1000))
    await store.create("s")
    tasks = [asyncio.create_task(store.append("s", [b"c" * 900])) for _ in range(20)]
    await asyncio.sleep(0)
    await store.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert any(isinstance(r, StoreClosed) for r in results)
    assert all(isinstance(r, StoreClosed) or not r.duplicate for r in results)


async def test_a_cancelled_waiter_gives_its_room_back(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_pending_bytes=1000))
    await store.create("s")
    tasks = [asyncio.create_task(store.append("s", [b"c" * 900])) for _ in range(10)]
    await asyncio.sleep(0)
    tasks[5].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(r, asyncio.CancelledError) for r in done) == 1
    assert store.segment("s").pending_bytes == 0
    await store.append("s", [b"after"])
    await store.close()


async def test_sealing_refuses_waiting_appends_and_keeps_those_already_queued(tmp_path: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_pending_bytes=1000))
    await store.create("s")
    tasks = [asyncio.create_task(store.append("s", [b"c" * 900])) for _ in range(20)]
    await asyncio.sleep(0)
    info = await asyncio.wait_for(store.seal("s"), 10)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stored = [r for r in results if not isinstance(r, BaseException)]
    assert stored and all(isinstance(r, SegmentSealed) for r in results if isinstance(r, BaseException))
    assert info.sealed and len(await read_all(store, "s")) == len(stored)
    await store.close()


@pytest.mark.parametrize(("fsync", "writeback_bytes", "sliced"),
                         [("always", 8192, True), ("interval", 8192, True), ("never", 8192, False),
                          ("always", 0, False), ("always", 1 << 20, False)])
async def test_a_large_group_goes_to_the_disk_in_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str,
                                                       writeback_bytes: int, sliced: bool) -> None:
    """Of a group larger than store.writeback_bytes, each whole slice is handed to writeback as it is
    written, and the last is left to the fdatasync, as is the page of the group's COMMIT frame (written
    last); the bytes are the same either way."""
    import logport.store.chunkwriter as segment_module
    from logport.store.files import start_writeback

    started: list[tuple[int, int]] = []

    def recording(fd: int, offset: int, length: int) -> None:
        started.append((offset, length))
        start_writeback(fd, offset, length)

    monkeypatch.setattr(segment_module, "start_writeback", recording)
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), fsync=fsync,  # type: ignore[arg-type]
                                                writeback_bytes=writeback_bytes))
    await store.create("s")
    bodies = [bytes([i]) * 4000 for i in range(10)]
    await asyncio.gather(*(store.append("s", [b]) for b in bodies))  # one group of 10 frames, 40,080 bytes
    if sliced:
        # the buffers written: each frame's header and body, from after the group's COMMIT frame; a slice
        # ends at the first of them that takes it to writeback_bytes: three frames (12,024 bytes) here
        at = CHUNK_HEADER_SIZE + COMMIT_SIZE
        slices = [(at + i * 12024, 12024) for i in range(3)]
        # the first slice's kick starts past the COMMIT frame's page, which the frame is written to last
        assert started == [(4096, at + 12024 - 4096), *slices[1:]]
        group_end = at + 10 * 4008
        assert 0 < group_end - sum(started[-1]) < writeback_bytes  # the last slice is not
    else:
        assert started == []
    assert [b for _, b in await read_all(store, "s")] == bodies
    await store.close()


async def test_a_group_is_written_frames_first_and_its_commit_frame_last(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread writes a group's frames (folding them into the CRC as it goes) and only then its
    COMMIT frame, before the one fdatasync: until that frame is there, the group is no valid group, so a
    reader (or recovery after a crash in between) never takes frames whose COMMIT frame is missing."""
    import logport.store.chunkwriter as segment_module

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), writeback_bytes=8192))
    await store.create("s")
    seg = store.segment("s")
    assert seg.chunk_writer is not None
    writer = seg.chunk_writer
    seen: list[tuple[str, int, int]] = []  # (what, file position, length), as written and synced
    real_pwritev, real_sync = segment_module.ChunkWriter._pwritev_all, segment_module.ChunkWriter.sync

    def pwritev(self: ChunkWriter, batch: list[bytes], size: int, at: int) -> None:
        real_pwritev(self, batch, size, at)
        seen.append(("write", at, size))
        if size == COMMIT_SIZE:  # the COMMIT frame: every frame of its group is written already
            data = chunk_path(seg.dir, 0).read_bytes()[: at + COMMIT_SIZE + 40080]
            assert walk_chunk(data, 0).end == at + COMMIT_SIZE + 40080
        else:  # frames without their COMMIT frame: the chunk's valid data ends before them
            data = chunk_path(seg.dir, 0).read_bytes()
            assert walk_chunk(data, 0).end == CHUNK_HEADER_SIZE

    def sync(self: ChunkWriter) -> None:
        real_sync(self)
        seen.append(("sync", 0, 0))

    monkeypatch.setattr(segment_module.ChunkWriter, "_pwritev_all", pwritev)
    monkeypatch.setattr(segment_module.ChunkWriter, "sync", sync)
    bodies = [bytes([i]) * 4000 for i in range(10)]
    await asyncio.gather(*(store.append("s", [b]) for b in bodies))
    at = CHUNK_HEADER_SIZE + COMMIT_SIZE
    assert seen == [("write", at + i * 12024, 12024) for i in range(3)] + [
        ("write", at + 3 * 12024, 4008), ("write", CHUNK_HEADER_SIZE, COMMIT_SIZE), ("sync", 0, 0)]
    assert writer.layout.groups == [CHUNK_HEADER_SIZE]
    await store.close()
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    assert [b for _, b in await read_all(store, "s")] == bodies
    await store.close()


def test_start_writeback_names_the_error() -> None:
    from logport.store.files import start_writeback

    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError, match="sync_file_range: Bad file descriptor"):
        start_writeback(w, 0, 4096)


async def test_a_writeback_error_fails_its_group_and_leaves_nothing_behind(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import logport.store.chunkwriter as segment_module
    from logport.errors import StoreWriteFailed

    config = StoreConfig(data_dir=str(tmp_path), writeback_bytes=1024)
    store = await SegmentStore.open(config)
    await store.create("s")
    await store.append("s", [b"a" * 3000])

    def broken(fd: int, offset: int, length: int) -> None:
        raise OSError(5, "sync_file_range: Input/output error")

    monkeypatch.setattr(segment_module, "start_writeback", broken)
    # two events: the first slice goes to writeback, the last is left to the fdatasync
    with pytest.raises(StoreWriteFailed, match="Input/output error"):
        await store.append("s", [b"b" * 3000, b"c" * 3000], writer=WriterCondition(b"w", end=1))
    monkeypatch.undo()
    assert not (await store.append("s", [b"b" * 3000, b"c" * 3000], writer=WriterCondition(b"w", end=1))).duplicate
    await store.close()
    store = await SegmentStore.open(config)
    assert [b[:1] for _, b in await read_all(store, "s")] == [b"a", b"b", b"c"]
    await store.close()


async def test_a_commit_frame_that_cannot_be_written_fails_its_group_and_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The group's frames are written, its COMMIT frame (written last) is not: its appenders hear that
    nothing was written, the COMMIT frame's place is zeroed, and neither the hub nor a reopened store
    ever serves those frames; the retry is stored once."""
    import logport.store.chunkwriter as segment_module
    from logport.errors import StoreWriteFailed

    config = StoreConfig(data_dir=str(tmp_path))
    store = await SegmentStore.open(config)
    await store.create("s")
    await store.append("s", [b"a" * 3000])
    seg = store.segment("s")
    with open(chunk_path(seg.dir, 0), "r+b") as f:  # what a spare's place holds: not zeros
        f.seek(seg.end)
        f.write(b"\xff" * COMMIT_SIZE)
    real_pwritev = segment_module.ChunkWriter._pwritev_all
    failing_at: list[int] = []

    def pwritev(self: ChunkWriter, batch: list[bytes], size: int, at: int) -> None:
        if size == COMMIT_SIZE:
            failing_at.append(at)
            raise OSError(28, "No space left on device")
        real_pwritev(self, batch, size, at)

    monkeypatch.setattr(segment_module.ChunkWriter, "_pwritev_all", pwritev)
    with pytest.raises(StoreWriteFailed, match="No space left on device"):
        await store.append("s", [b"b" * 3000, b"c" * 3000], writer=WriterCondition(b"w", end=1))
    monkeypatch.undo()
    data = chunk_path(seg.dir, 0).read_bytes()
    assert failing_at == [seg.end] and data[seg.end : seg.end + COMMIT_SIZE] == bytes(COMMIT_SIZE)
    assert b"b" * 3000 in data  # the frames were written, and are not a group
    assert [b[:1] for _, b in await read_all(store, "s")] == [b"a"]
    await store.close()
    store = await SegmentStore.open(config)
    assert [b[:1] for _, b in await read_all(store, "s")] == [b"a"]
    assert not (await store.append("s", [b"b" * 3000, b"c" * 3000], writer=WriterCondition(b"w", end=1))).duplicate
    assert [b[:1] for _, b in await read_all(store, "s")] == [b"a", b"b", b"c"]
    await store.close()


# --- the writer thread: groups staged while it writes, in order, and failing together ---


def gated_write(monkeypatch: pytest.MonkeyPatch, fail_first: bool = False,
                writers_seen: list[dict[bytes, int]] | None = None) -> tuple[threading.Event, list[int]]:
    """Hold the writer thread's first write until the gate opens (then fail it, if asked); count
    the appends each write carries, and keep the writer state each write starts from."""

    gate = threading.Event()
    sizes: list[int] = []
    real = ChunkWriter.write

    def write(self: ChunkWriter, accepted: list, writers: WriterState) -> list[int]:  # type: ignore[type-arg]
        sizes.append(len(accepted))
        if writers_seen is not None:
            writers_seen.append(dict(writers.stored))
        if len(sizes) == 1:
            assert gate.wait(10)
            if fail_first:
                raise OSError(5, "Input/output error")
        return real(self, accepted, writers)

    monkeypatch.setattr(ChunkWriter, "write", write)
    return gate, sizes


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_groups_staged_while_the_thread_writes_go_in_its_next_commit(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread goes on to what was staged meanwhile without waiting for the event loop:
    two groups staged behind a slow write are written together, in the same job, starting from the
    writer state the first one left (a chunk rolled there gets it in its table; see the reopen)."""
    from logport.store.segment import Segment

    config = StoreConfig(data_dir=str(tmp_path), chunk_size=2048, max_frame_size=2000)
    store = await SegmentStore.open(config)
    await store.create("s")
    await store.append("s", [b"x" * 1990])  # the second write starts a chunk, before "c"
    await until(lambda: not store.segment("s")._writing)  # that job is over: the next write is a new one
    jobs: list[int] = []
    real_job = Segment._write_staged
    monkeypatch.setattr(Segment, "_write_staged", lambda self, loop: (jobs.append(1), real_job(self, loop))[1])
    seen: list[dict[bytes, int]] = []
    gate, sizes = gated_write(monkeypatch, writers_seen=seen)
    first = asyncio.create_task(store.append("s", [b"a"], writer=WriterCondition(b"v", end=1)))
    await until(lambda: sizes == [1])
    second = asyncio.create_task(store.append("s", [b"b"]))
    await asyncio.sleep(0.01)  # its own group
    third = asyncio.create_task(store.append("s", [b"c"], writer=WriterCondition(b"w", end=1)))
    await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(first, second, third)
    assert sizes == [1, 2] and len(jobs) == 1
    assert seen == [{}, {b"v": 1}]
    assert [r.offset for r in results] == sorted(r.offset for r in results)
    assert [b for _, b in await read_all(store, "s")][1:] == [b"a", b"b", b"c"]
    await store.close()
    store = await SegmentStore.open(config)  # recovery reads the writers from the last chunk
    assert len(list_chunk_bases(tmp_path / "segments" / "s")) == 2
    assert (store.writer_offset("s", b"v"), store.writer_offset("s", b"w")) == (1, 1)
    await store.close()


async def test_a_failed_write_fails_the_groups_staged_behind_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A group checked against a claim still on its way (here: a writer's next append, start=1) must not
    be written once that claim failed: it fails with it, and the writer starts again from 0."""
    from logport.errors import StoreWriteFailed

    config = StoreConfig(data_dir=str(tmp_path))
    store = await SegmentStore.open(config)
    await store.create("s")
    gate, sizes = gated_write(monkeypatch, fail_first=True)
    first = asyncio.create_task(store.append("s", [b"one"], writer=WriterCondition(b"w", end=1, start=0)))
    await until(lambda: sizes == [1])
    behind = asyncio.create_task(store.append("s", [b"two"], writer=WriterCondition(b"w", end=2, start=1)))
    retry = asyncio.create_task(store.append("s", [b"one"], writer=WriterCondition(b"w", end=1)))
    await asyncio.sleep(0.01)
    gate.set()
    for task in (first, behind, retry):
        with pytest.raises(StoreWriteFailed):
            await task
    assert sizes == [1]  # the group behind was never written
    with pytest.raises(WriterOffsetMismatch):  # the claim of 1 is gone with its group
        await store.append("s", [b"two"], writer=WriterCondition(b"w", end=2, start=1))
    assert not (await store.append("s", [b"one"], writer=WriterCondition(b"w", end=1, start=0))).duplicate
    assert not (await store.append("s", [b"two"], writer=WriterCondition(b"w", end=2, start=1))).duplicate
    await store.close()
    store = await SegmentStore.open(config)
    assert [b for _, b in await read_all(store, "s")] == [b"one", b"two"]
    assert store.writer_offset("s", b"w") == 2
    await store.close()


async def test_appends_made_while_their_segment_is_created_keep_their_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One connection's appends to a segment that does not exist yet: those made while it is created
    wait in line, and those made once it exists (before the line has moved) go behind them."""
    from logport.store.segment import Segment

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    gate = threading.Event()
    real = Segment.open_sync

    def slow_open(self: Segment, create: bool) -> None:
        assert gate.wait(10)
        real(self, create)

    monkeypatch.setattr(Segment, "open_sync", slow_open)
    appends = [asyncio.create_task(store.append("s", [b"%d" % i])) for i in range(20)]
    await asyncio.sleep(0.01)
    gate.set()
    while not store.exists("s") and len(appends) < 5000:  # appends made as the creation ends, a turn each
        appends.append(asyncio.create_task(store.append("s", [b"%d" % len(appends)])))
        await asyncio.sleep(0)
    appends += [asyncio.create_task(store.append("s", [b"%d" % (len(appends) + i)])) for i in range(20)]
    await asyncio.gather(*appends)
    assert [int(b) for _, b in await read_all(store, "s")] == list(range(len(appends)))
    await store.close()


async def test_an_append_waiting_for_its_segment_can_be_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.store.segment import Segment

    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    gate = threading.Event()
    real = Segment.open_sync
    monkeypatch.setattr(Segment, "open_sync", lambda self, create: (gate.wait(10), real(self, create))[1])
    kept = asyncio.create_task(store.append("s", [b"kept"]))
    gone = asyncio.create_task(store.append("s", [b"gone"]))
    await asyncio.sleep(0.01)
    gone.cancel()
    gate.set()
    await kept
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert [b for _, b in await read_all(store, "s")] == [b"kept"]
    await store.close()


async def test_appends_made_while_the_thread_writes_are_staged_at_once_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the writer thread is busy, an append is staged by the call that makes it (a segment-protocol
    block from its transport callback), not on the commit loop's next turn; in the order of the calls,
    each checked against the claims of those before it."""
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.create("s")
    segment = store.segment("s")
    gate, sizes = gated_write(monkeypatch)
    first = store.submit_framed("s", frames.frame(b"one"), writer=WriterCondition(b"w", end=1, start=0))
    await until(lambda: sizes == [1])
    second = store.submit_framed("s", frames.frame(b"two"), writer=WriterCondition(b"w", end=2, start=1))
    third = store.submit_framed("s", frames.frame(b"three"), writer=WriterCondition(b"w", end=3, start=2))
    assert len(segment._staged) == 2 and not segment._queue  # staged by the calls themselves
    gate.set()
    results = await asyncio.gather(first, second, third)
    assert [r.writer_offset for r in results] == [1, 2, 3] and sizes == [1, 2]
    assert [b for _, b in await read_all(store, "s")] == [b"one", b"two", b"three"]
    await store.close()


async def test_appends_made_in_one_turn_while_the_thread_is_idle_make_one_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the writer thread idle, the commit loop's turn gathers what this turn of the event loop
    appends (the store bench's writers, each acknowledged together, append again together)."""
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.create("s")
    gate, sizes = gated_write(monkeypatch)
    gate.set()
    await asyncio.gather(*(store.append("s", [b"%d" % i]) for i in range(16)))
    assert sizes == [16]
    await store.close()


async def test_close_waits_for_the_writer_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
    await store.create("s")
    gate, sizes = gated_write(monkeypatch)
    append = asyncio.create_task(store.append("s", [b"a"]))
    await until(lambda: sizes == [1])
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    gate.set()
    await closing
    assert (await append).end_offset == FIRST + 9


async def test_pipelined_writers_under_failing_fsyncs_store_each_item_once_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight exactly-once writers, three appends in flight each (so groups are staged behind groups
    whose claims they were checked against), chunks rolling, and one fdatasync in five failing: after
    every failure a writer resumes from what was acknowledged. Each writer's items are stored once,
    in order, without gaps, and the store says so again after a reopen."""
    import random

    from logport.errors import StoreWriteFailed

    rng = random.Random(7)
    real = ChunkWriter.sync
    failures = [0]

    def flaky(self: ChunkWriter) -> None:
        if rng.random() < 0.2:
            failures[0] += 1
            raise OSError(5, "Input/output error")
        real(self)

    # new chunk files, not ones written ahead: a commit into those is one direct write and no fdatasync
    config = StoreConfig(data_dir=str(tmp_path), chunk_size=8192, max_frame_size=1024, prewrite_chunks=False)
    store = await SegmentStore.open(config)
    await store.create("s")
    monkeypatch.setattr(ChunkWriter, "sync", flaky)
    items = 60

    async def writer(w: int) -> None:
        key = b"writer-%d" % w
        acked = 0
        while acked < items:
            window = range(acked + 1, min(acked + 3, items) + 1)
            results = await asyncio.gather(
                *(store.append("s", [b"%d:%d" % (w, n) + b"." * 200], writer=WriterCondition(key, end=n, start=n - 1))
                  for n in window), return_exceptions=True)
            for n, result in zip(window, results, strict=True):
                if isinstance(result, (StoreWriteFailed, WriterOffsetMismatch)):
                    break
                assert isinstance(result, AppendResult), result
                acked = n
            assert store.writer_offset("s", key) == acked

    await asyncio.gather(*(writer(w) for w in range(8)))
    monkeypatch.undo()
    assert failures[0] > 10

    def check(stored: list[tuple[int, bytes]]) -> None:
        seen: dict[int, list[int]] = {}
        for _, body in stored:
            w, n = body.split(b".", 1)[0].split(b":")
            seen.setdefault(int(w), []).append(int(n))
        assert seen == {w: list(range(1, items + 1)) for w in range(8)}

    check(await read_all(store, "s"))
    await store.close()
    store = await SegmentStore.open(config)
    check(await read_all(store, "s"))
    assert all(store.writer_offset("s", b"writer-%d" % w) == items for w in range(8))
    await store.close()


async def test_appends_made_while_the_thread_writes_wait_once_max_pending_bytes_is_reached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Staged at once while the writer thread is busy, appends still count against max_pending_bytes: past
    it they wait their turn (before 2026-11-26 the limit held only for the commit loop's queue, so a busy
    writer thread let any number of bytes be staged behind it)."""
    store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path), max_pending_bytes=2000))
    await store.create("s")
    segment = store.segment("s")
    gate, sizes = gated_write(monkeypatch)
    first = asyncio.create_task(store.append("s", [b"1" * 1500]))
    await until(lambda: sizes == [1])
    second = asyncio.create_task(store.append("s", [b"2" * 1500]))  # under the limit: staged
    third = asyncio.create_task(store.append("s", [b"3" * 1500]))  # past it: waits
    await asyncio.sleep(0.01)
    assert len(segment._staged) == 1 and len(segment._waiters) == 1
    gate.set()
    results = await asyncio.gather(first, second, third)
    assert [r.offset for r in results] == sorted(r.offset for r in results)
    assert [b[:1] for _, b in await read_all(store, "s")] == [b"1", b"2", b"3"]
    await store.close()
