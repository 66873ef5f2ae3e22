"""The `server` option: the same rows over the segment protocol from a running hub as from its data directory."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from logport.clients.segment import BlockingSegmentClient
from logport.spark.segments import ServerSegments, SourceOptionError
from logport.spark.source import LogportBatchReader
from logport.store import AppendResult
from logport.store.reader import DirectoryReader
from tests.spark.sample import build_sample, forward_batches, layout

pytestmark = pytest.mark.slow  # a Spark job each: seconds, even on the shared session


def test_server_reads_equal_directory_reads(spark, running_hub) -> None:  # type: ignore[no-untyped-def]
    data_dir, server, loop, hub = running_hub
    sample = build_sample(logjam_requests=120)

    async def store_all() -> None:
        for name, bodies in sample.bodies.items():
            for body in bodies:
                await hub.runtime.store.append(name, [body])

    asyncio.run_coroutine_threadsafe(store_all(), loop).result(60)
    columns = ["segment", "offset", "`index`", "tag", "time_ns", "record", "source", "meta", "option", "raw"]

    def rows(**options: str) -> list:  # type: ignore[type-arg]
        reader = spark.read.format("logport").option("record", "json")  # comparable rows (VariantVal has no order)
        for key, value in options.items():
            reader = reader.option(key, value)
        return sorted(reader.load().selectExpr(*columns).collect())

    by_dir = rows(path=data_dir)
    by_server = rows(server=server, partitionBytes="4096")
    # forward (4 odd entries, 1 opaque), lumberjack, logjam (one event per stored batch)
    assert len(by_dir) == 6 * 25 + 4 + 1 + 5 * 30 + len(sample.bodies["logjam"])
    assert by_server == by_dir


def test_stream_over_server_follows_appends(spark, running_hub) -> None:  # type: ignore[no-untyped-def]
    _, server, loop, hub = running_hub
    bodies = forward_batches(6, 10)

    def store(items: list[bytes]) -> None:
        async def append() -> None:
            for body in items:
                await hub.runtime.store.append("app", [body])
        asyncio.run_coroutine_threadsafe(append(), loop).result(60)

    store(bodies[:3])
    df = spark.readStream.format("logport").option("server", server).option("maxBytesPerTrigger", "5000").load()
    query = df.selectExpr("segment", "offset", "`index`").writeStream.format("memory").queryName("over_server").start()
    try:
        query.processAllAvailable()
        store(bodies[3:])
        query.processAllAvailable()
        rows = spark.sql("SELECT * FROM over_server").collect()
    finally:
        query.stop()
    keys = [(r.segment, r.offset, r["index"]) for r in rows]
    assert len(keys) == len(set(keys)) == 60


def test_server_offsets_inside_a_frame_are_refused(running_hub) -> None:  # type: ignore[no-untyped-def]
    # No Spark: the check runs where the source plans, over the segment protocol.
    _, server, loop, hub = running_hub
    sample = build_sample(logjam_requests=20)
    small = forward_batches(4, 5)
    big = random.Random(1).randbytes(300_000)  # an opaque event larger than the window the check reads
    segments = {"app": small, "logjam": sample.bodies["logjam"], "big": [small[0], big, *small[1:]]}

    async def store_all() -> dict[str, list[AppendResult]]:
        results: dict[str, list[AppendResult]] = {}
        for name, bodies in segments.items():
            for body in bodies:  # one at a time: a commit group each
                results.setdefault(name, []).append(await hub.runtime.store.append(name, [body]))
        return results

    written = {name: layout(results, segments[name])
               for name, results in asyncio.run_coroutine_threadsafe(store_all(), loop).result(60).items()}
    access = ServerSegments(server)
    try:
        for name, segment in written.items():
            # Every frame: events, and the chunk header and commit frames that readers skip.
            starts = segment.frame_starts
            # Never refuses a frame start (or the end); on these frames no other offset gets through either.
            step = 1 if name != "big" else 997
            tried = sorted({*range(0, starts[-1] + 9, step), *starts})
            assert [o for o in tried if access.could_start_frame(name, o)] == starts
    finally:
        access.close()
    events = written["app"].events
    options = {"server": server, "segments": "app"}
    assert LogportBatchReader({**options, "startingoffsets": json.dumps({"app": events[1]})}).partitions()
    for option, offset in [("startingOffsets", events[1] + 3), ("endingOffsets", events[2] - 1)]:
        reader = LogportBatchReader({**options, option.lower(): json.dumps({"app": offset})})
        with pytest.raises(SourceOptionError, match=f"{option}: offset {offset} of segment 'app' is not where a frame"):
            reader.partitions()


def test_reads_ahead_with_interleaved_replies_and_an_early_stop(running_hub) -> None:  # type: ignore[no-untyped-def]
    """iter_frames asks for several reads at once; split into many small replies, which the server sends
    from concurrent read tasks, they still come out as the segment's frames in order."""
    data_dir, server, loop, hub = running_hub
    bodies = [bytes([i % 251]) * (100 + 37 * i) for i in range(300)]

    async def store() -> None:
        for i in range(0, len(bodies), 10):
            await hub.runtime.store.append("s", bodies[i:i + 10])
    asyncio.run_coroutine_threadsafe(store(), loop).result(60)
    hub.config.segment.read_reply_max = 1000  # a 10,000-byte read: about ten replies
    host, port = server.rsplit(":", 1)
    start, end, _ = DirectoryReader(data_dir).bounds("s")
    expected = [(o, t, bytes(b)) for o, t, b in DirectoryReader(data_dir).iter_frames("s", start, end)]
    with BlockingSegmentClient(host, int(port), read_size=10_000) as client:
        assert [(o, t, bytes(b)) for o, t, b in client.iter_frames("s", start, end)] == expected
        assert client.list_segments() == ["s"]  # every reply taken: the connection is in step
        frames_read = client.iter_frames("s", start, end)
        next(frames_read)
        frames_read.close()  # stopped with reads asked for: their replies would follow, so it closes
        with pytest.raises(OSError):
            client.list_segments()
    access = ServerSegments(server)  # which connects again when that happens
    try:
        frames_read = access.iter_frames("s", start, end)
        next(frames_read)
        frames_read.close()
        assert access.names() == ["s"]
    finally:
        access.close()


def test_server_partitions_equal_directory_partitions(running_hub) -> None:  # type: ignore[no-untyped-def]
    """The planner's walk for each cut stops at the cut: over the network, the reads it asked for beyond are
    not waited for, and the next request (another cut's, the next segment's) goes over a new connection."""
    data_dir, server, loop, hub = running_hub

    async def store_all() -> None:
        for name, count in (("app", 40), ("web", 25)):
            for body in forward_batches(count, 4, tag=name):
                await hub.runtime.store.append(name, [body])

    asyncio.run_coroutine_threadsafe(store_all(), loop).result(60)

    def cuts(**options: str) -> list[tuple[str, int, int]]:
        ranges = LogportBatchReader({"partitionbytes": "2000", **options}).partitions()
        return [(r.segment.rpartition("/")[2], r.start, r.end) for r in ranges]  # type: ignore[attr-defined]

    by_dir = cuts(path=data_dir)
    assert len(by_dir) > 10 and {segment for segment, _, _ in by_dir} == {"app", "web"}
    assert cuts(server=server) == by_dir
