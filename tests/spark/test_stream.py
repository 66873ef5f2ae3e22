"""Streaming reads: a growing segment, a restart from the checkpoint, admission control, AvailableNow."""

from __future__ import annotations

from pathlib import Path

import pytest

from logport.store.identity import read_hub_identity
from tests.spark.sample import build_sample, forward_batches, layout, write_bodies

pytestmark = pytest.mark.slow  # a Spark job each: seconds, even on the shared session


def stream(spark, data_dir: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.readStream.format("logport").option("path", data_dir)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().selectExpr("segment", "offset", "`index`", "record")


def keys_of(rows) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    return [(r.segment, r.offset, r["index"]) for r in rows]


def test_stream_follows_a_growing_segment(spark, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    batches = forward_batches(9, 10)
    write_bodies(data_dir, {"app": batches[:3]})
    query = stream(spark, data_dir).writeStream.format("memory").queryName("growing").start()
    try:
        query.processAllAvailable()
        assert spark.sql("SELECT count(*) FROM growing").first()[0] == 30
        write_bodies(data_dir, {"app": batches[3:7]})
        query.processAllAvailable()
        assert spark.sql("SELECT count(*) FROM growing").first()[0] == 70
        write_bodies(data_dir, {"app": batches[7:], "lumberjack": build_sample(logjam_requests=0).bodies["lumberjack"][:1]})
        query.processAllAvailable()
        rows = spark.sql("SELECT * FROM growing").collect()
    finally:
        query.stop()
    keys = keys_of(rows)
    assert len(keys) == len(set(keys)) == 90 + 30
    assert {k[0] for k in keys} == {"app", "lumberjack"}


def test_restart_from_checkpoint_has_no_duplicate_and_no_gap(spark, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    batches = forward_batches(12, 10)

    def run_once() -> list:  # type: ignore[type-arg]
        query = (stream(spark, data_dir, maxBytesPerTrigger=str(append_bytes * 2)).writeStream.format("parquet")
                 .option("path", out).option("checkpointLocation", checkpoint).start())
        try:
            query.processAllAvailable()
            return [p for p in query.recentProgress if p["numInputRows"]]
        finally:
            query.stop()

    results = write_bodies(data_dir, {"app": batches[:6]})["app"]
    append_bytes = max(layout(results, batches[:6]).added)  # the most one append added: room for 2 per trigger
    first = run_once()
    results += write_bodies(data_dir, {"app": batches[6:]})["app"]
    second = run_once()
    written = layout(results, batches)
    # Admission control: at most 2 events per trigger, so each run took several micro-batches.
    assert len(first) >= 3 and len(second) >= 3
    assert all(p["numInputRows"] <= 20 for p in first + second)
    # Offsets in the checkpoint are sorted JSON maps segment -> byte offset: the first run stopped where
    # the sixth event ends, the second went on from there.
    # keyed HUB/SEGMENT by the hub's identity, kept in its data directory
    key = f"{read_hub_identity(data_dir)}/app"
    assert first[-1]["sources"][0]["endOffset"].replace(" ", "") == f'{{"{key}":{written.ends[5]}}}'
    assert second[0]["sources"][0]["startOffset"].replace(" ", "") == f'{{"{key}":{written.ends[5]}}}'
    rows = spark.read.parquet(out).collect()
    keys = keys_of(rows)
    assert len(keys) == len(set(keys)) == 120
    assert sorted({k[1] for k in keys}) == written.events


def test_admission_by_rows_and_available_now(spark, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    lumberjack = build_sample(logjam_requests=0).bodies["lumberjack"]
    write_bodies(data_dir, {"app": forward_batches(6, 10), "lumberjack": lumberjack[:2]})
    query = (stream(spark, data_dir, maxRowsPerTrigger="25").writeStream.format("memory").queryName("rows_now")
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = spark.sql("SELECT * FROM rows_now").collect()
    keys = keys_of(rows)
    assert len(keys) == len(set(keys)) == 60 + 60
    assert len(progress) >= 4
    # Whole frames only: a batch holds at most 25 rows unless one frame alone is larger (lumberjack: 30).
    assert all(p["numInputRows"] <= 30 for p in progress)
