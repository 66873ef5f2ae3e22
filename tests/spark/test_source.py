"""The `logport` source against `logport cat`, and its streaming offsets, restarts and admission control."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from logport.batch import BatchDecodeError, decode_batch
from logport.eventjson import dumps_event, event_objects
from logport.spark.columns import dumps_json
from logport.store.reader import DirectoryReader
from tests.spark.sample import build_sample, forward_batches, layout, write_bodies

pytestmark = pytest.mark.slow  # a Spark job each: seconds, even on the shared session

TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"


def cat_lines(data_dir: str) -> dict[tuple[str, int, int], tuple[dict, str, bytes]]:
    """(segment, offset, index) -> (the object `logport cat` prints, its line, the stored body)."""
    reader = DirectoryReader(data_dir)
    out = {}
    for name in reader.segment_names():
        for segment, offset, body in reader.follow(name):
            for obj in event_objects(segment, offset, body):
                line = dumps_event(obj).decode()
                out[(segment, offset, obj["index"])] = (orjson.loads(line), line, bytes(body))
    return out


def read_rows(spark, data_dir: str, **options: str) -> list:  # type: ignore[no-untyped-def]
    reader = spark.read.format("logport").option("path", data_dir).option("record", "json")  # `logport cat`'s text
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    return df.selectExpr("*", f"date_format(time, \"{TIME_FORMAT}\") AS time_text").collect()


def test_batch_read_equals_logport_cat_column_by_column(spark, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    write_bodies(data_dir, build_sample(logjam_requests=300).bodies)
    expected = cat_lines(data_dir)
    df = spark.read.format("logport").option("path", data_dir).option("partitionBytes", "8192").load()
    assert df.rdd.getNumPartitions() > 3  # three segments, the large ones split on frame boundaries
    rows = read_rows(spark, data_dir, partitionBytes="8192")
    got = {(r.segment, r.offset, r["index"]): r for r in rows}
    assert len(got) == len(rows) == len(expected)
    assert set(got) == set(expected)
    for key, (obj, line, body) in expected.items():
        row = got[key]
        if "raw" in obj:
            assert base64.b64encode(row.raw).decode() == obj["raw"]
            assert (row.tag, row.time, row.time_ns, row.record, row.source, row.option) == (None,) * 6
            continue
        assert row.raw is None
        assert row.tag == obj["tag"]
        assert row.time_ns == obj["time_ns"]
        assert row.time_text == obj["time"][:26]  # Spark timestamps hold microseconds
        assert orjson.loads(row.record) == obj["record"]
        assert row.record in line  # the same JSON text, byte for byte
        assert row.source == obj["source"]
        assert (orjson.loads(row.meta) if row.meta else None) == obj.get("meta")
        try:
            option = decode_batch(body).option
        except BatchDecodeError:
            pytest.fail("a batch row from a body that is not a batch")
        assert row.option == dumps_json(option).decode()
        assert orjson.loads(row.option) == obj["option"]  # `logport cat` prints the same option


def test_batch_read_selects_segments_and_offsets(spark, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    sample = build_sample(logjam_requests=4)
    write_bodies(data_dir, sample.bodies)
    expected = cat_lines(data_dir)
    rows = read_rows(spark, data_dir, segments="lumber*, logjam,nothing")
    assert {r.segment for r in rows} == {"logjam", "lumberjack"}
    offsets = sorted({k[1] for k in expected if k[0] == "logjam"})
    start, end = offsets[1], offsets[3]
    rows = read_rows(spark, data_dir, segments="logjam",
                     startingOffsets=f'{{"logjam": {start}}}', endingOffsets=f'{{"logjam": {end}}}')
    assert sorted({r.offset for r in rows}) == offsets[1:3]
    assert len(rows) == 2  # the logjam listener stores one event per batch
    # Inside a frame: refused while planning, the option, segment and offset named through Spark's error.
    with pytest.raises(Exception, match=f"startingOffsets: offset {start + 1} of segment 'logjam' is not where a frame"):
        read_rows(spark, data_dir, segments="logjam", startingOffsets=f'{{"logjam": {start + 1}}}')


def test_bad_options_are_refused(spark, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="exactly one of the options path"):
        spark.read.format("logport").load().collect()
    with pytest.raises(Exception, match="(?i)startingoffsets"):
        spark.read.format("logport").option("path", str(tmp_path)).option("startingOffsets", "soon").load().collect()
    with pytest.raises(Exception, match="is not a directory"):
        spark.read.format("logport").option("path", str(tmp_path / "nowhere")).load().collect()


def test_an_empty_data_directory_reads_as_no_rows(spark, tmp_path: Path) -> None:
    assert read_rows(spark, str(tmp_path)) == []


def test_chunked_and_truncated_segment(spark, tmp_path: Path) -> None:
    import asyncio

    from logport.config import StoreConfig
    from logport.store import SegmentStore

    data_dir = str(tmp_path / "data")
    bodies = forward_batches(10, 20)
    results = write_bodies(data_dir, {"app": bodies}, chunk_size=4000)["app"]  # a chunk every couple of batches
    written = layout(results, bodies)
    assert len(written.chunk_bases) > 2
    starts = written.events  # truncated at an event: its chunk (header, commit frame) stays, below the start

    async def truncate() -> None:
        store = await SegmentStore.open(StoreConfig(data_dir=data_dir, fsync="never", chunk_size=4000))
        try:
            await store.truncate("app", starts[4])
        finally:
            await store.close()

    asyncio.run(truncate())
    first = DirectoryReader(data_dir).bounds("app")[0]
    assert 0 < first <= starts[4]
    expected = cat_lines(data_dir)
    rows = read_rows(spark, data_dir, partitionBytes="10000")
    assert sorted((r.segment, r.offset, r["index"]) for r in rows) == sorted(expected)
    assert min(r.offset for r in rows) == first
    with pytest.raises(Exception, match="(?i)truncat"):
        read_rows(spark, data_dir, startingOffsets='{"app": 0}')
    rows = read_rows(spark, data_dir, startingOffsets='{"app": 0}', failOnDataLoss="false")
    assert sorted((r.segment, r.offset, r["index"]) for r in rows) == sorted(expected)
