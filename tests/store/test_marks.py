"""Chunk marks (store/marks.py): the counts `logport segments` prints from them are what reading every event
counts, for every protocol's data, with the hub running (the live chunk walked from its last mark) and after it
stopped (nothing walked); the recovery point moves per fsync policy; a data directory written before the marks
is counted all the same and gets its marks on its first start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from logport.batch import encode_batch
from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress
from logport.clients.logjam import LogjamProducer
from logport.clients.lumberjack import LumberjackClient
from logport.clients.segment import SegmentAppender
from logport.config import StoreConfig
from logport.store import SegmentStore, marks
from logport.store.files import SEGMENTS_DIR, list_chunk_bases
from logport.store.reader import DirectoryReader
from logport.store.summary import summarize
from tests.support import hub_config, running_hub

SEGMENTS = ("forward", "lumberjack", "logjam", "segment")


def counted(data_dir: Path) -> dict[str, tuple[int, int, int]]:
    """Per segment: (events from the marks, events read one by one, bytes read beyond the marks)."""
    out = {}
    for name in DirectoryReader(data_dir).segment_names():
        fast = summarize(DirectoryReader(data_dir), name)
        exact = summarize(DirectoryReader(data_dir), name, exact=True)
        assert (fast.start_offset, fast.end_offset, fast.corrupt) == (exact.start_offset, exact.end_offset, []), name
        out[name] = (fast.events, exact.events, fast.walked_bytes)
    return out


async def test_the_counts_kept_for_every_protocol_are_what_reading_counts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = hub_config(data_dir, SEGMENTS, store={"chunk_size": 65536, "max_frame_size": 60000})
    async with running_hub(config):
        forward = ForwardSender(SenderConfig(servers=[ServerAddress("127.0.0.1", config.forward.port)]))
        await forward.start()
        for i in range(30):
            await forward.send("app", [(1700000000 + i, j, {"i": i, "j": j, "pad": "x" * 100}) for j in range(20)])
        await forward.close()
        beats = LumberjackClient("127.0.0.1", config.lumberjack.port, window_size=50)
        await beats.send([{"message": f"line {i}", "pad": "y" * 80} for i in range(250)])
        await beats.close()
        producer = LogjamProducer(f"tcp://127.0.0.1:{config.logjam.router_port}")
        for i in range(25):
            await producer.send_sync({"action": "A#b", "n": i}, timeout=10)
        producer.close()
        async with SegmentAppender("127.0.0.1", config.segment.port, "segment") as appender:
            # opaque events, and one that is a batch of 7 entries: counted as 7, as `logport cat` prints them
            await appender.append_many([b"raw %d" % i + b"z" * 200 for i in range(400)])
            await appender.append_many([encode_batch("t", [(1, 0, {"k": 1})] * 7, {})])
            await appender.flush()
        running = counted(data_dir)
    stopped = counted(data_dir)
    expected = {"forward": 600, "lumberjack": 250, "logjam": 25, "segment": 407}
    assert {name: fast for name, (fast, _, _) in running.items()} == expected
    assert {name: exact for name, (_, exact, _) in running.items()} == expected
    assert {name: (fast, exact) for name, (fast, exact, _) in stopped.items()} == {
        name: (n, n) for name, n in expected.items()}
    assert all(walked == 0 for _, _, walked in stopped.values())  # a clean stop's marks: nothing left to walk
    assert len(list_chunk_bases(data_dir / SEGMENTS_DIR / "forward")) > 1  # sealed chunks counted from marks


async def _live_mark(store: SegmentStore, name: str) -> int:
    seg_dir = Path(store.config.data_dir) / SEGMENTS_DIR / name
    point = marks.load(seg_dir).recovery_point(list_chunk_bases(seg_dir)[0])
    return point.end if point is not None else -1


@pytest.mark.parametrize("fsync", ["always", "interval", "never"])
async def test_the_recovery_point_follows_what_is_durable(tmp_path: Path, fsync: str) -> None:
    """always: at most every recovery_point_interval, the end; interval: what the last interval fsync made
    durable; never: only at chunk rolls (and the stop)."""
    config = StoreConfig(data_dir=str(tmp_path), fsync=fsync, fsync_interval=0.05,  # type: ignore[arg-type]
                         recovery_point_interval=0.05, chunk_size=4096, max_frame_size=1024)
    store = await SegmentStore.open(config)
    try:
        await store.append("s", [b"x" * 100])
        opened = await _live_mark(store, "s")  # recorded as the segment was made
        end = (await store.append("s", [b"y" * 100])).end_offset
        deadline = time.monotonic() + 5
        while await _live_mark(store, "s") != end and time.monotonic() < deadline and fsync != "never":
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        assert await _live_mark(store, "s") == (end if fsync != "never" else opened)
        for _ in range(60):  # past a roll: the chunk that rolled is marked sealed, durable
            end = (await store.append("s", [b"z" * 200])).end_offset
        await asyncio.sleep(0.2)
        seg_dir = tmp_path / SEGMENTS_DIR / "s"
        bases = list_chunk_bases(seg_dir)
        found = marks.load(seg_dir).by_base
        assert all(found[b].sealed and found[b].end == n for b, n in zip(bases, bases[1:], strict=False))
        assert (await _live_mark(store, "s") >= bases[-1]) and (fsync == "never" or await _live_mark(store, "s") == end)
    finally:
        await store.close()
    live = marks.load(seg_dir).by_base[list_chunk_bases(seg_dir)[-1]]
    assert live.end == end and live.flags & marks.CLEAN  # the stop's


async def test_a_directory_written_before_the_marks_is_counted_and_marked_on_its_first_start(tmp_path: Path) -> None:
    config = StoreConfig(data_dir=str(tmp_path), chunk_size=4096, max_frame_size=1024)
    store = await SegmentStore.open(config)
    try:
        for i in range(80):
            await store.append("s", [encode_batch("t", [(1, 0, {"i": i})] * 3, {"size": 3}), b"raw"])
    finally:
        await store.close()
    seg_dir = tmp_path / SEGMENTS_DIR / "s"
    (seg_dir / marks.MARKS_FILE).unlink()  # as a v2 directory from before the marks
    before = summarize(DirectoryReader(tmp_path), "s")
    assert before.events == 80 * 4 and before.walked_bytes == before.end_offset - before.start_offset
    store = await SegmentStore.open(config)
    try:
        bases = list_chunk_bases(seg_dir)
        assert marks.load(seg_dir).by_base.keys() == {bases[-1]}  # the live chunk's, from its first start
        deadline = time.monotonic() + 10
        while marks.load(seg_dir).by_base.keys() != set(bases) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the older chunks walked and marked in the background
    finally:
        await store.close()
    after = summarize(DirectoryReader(tmp_path), "s")
    assert (after.events, after.end_offset, after.walked_bytes) == (80 * 4, before.end_offset, 0)
