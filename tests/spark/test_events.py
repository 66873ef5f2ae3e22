"""`logport pipeline --outputs events`: every event to Parquet, record as VARIANT, partitioned by date and
segment; exactly once in streaming across restarts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from logport.eventjson import dumps_event, event_objects
from tests.spark.sample import build_sample, write_bodies
from tests.spark.test_pipeline import run

pytestmark = pytest.mark.slow  # Spark jobs


def stored_events(bodies: dict[str, list[bytes]]) -> int:
    return sum(len(list(event_objects(segment, 0, body))) for segment, items in bodies.items() for body in items)


def test_streaming_events_are_landed_exactly_once_across_restarts(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bodies = build_sample(logjam_requests=200).bodies
    first = {name: items[: len(items) // 2] for name, items in bodies.items()}
    rest = {name: items[len(items) // 2:] for name, items in bodies.items()}
    data, out = str(tmp_path / "data"), str(tmp_path / "out")
    args = ["stream", "--data-dir", data, "--out", out, "--available-now", "--outputs", "events",
            "--max-bytes-per-trigger", "20000"]
    write_bodies(data, first)
    assert run(*args) == 0
    assert spark.read.parquet(out + "/events").count() == stored_events(first)
    write_bodies(data, rest)
    assert run(*args) == 0
    table = spark.read.parquet(out + "/events")
    assert dict(table.dtypes)["record"] == "variant"
    rows = table.selectExpr("hub", "segment", "offset", "`index`", "date", "to_json(record) AS record").collect()
    keys = [(r.hub, r.segment, r.offset, r["index"]) for r in rows]
    assert len(keys) == len(set(keys)) == stored_events(bodies)  # none twice, none missing
    assert {r.segment for r in rows} == set(bodies)
    # partition discovery reads date=2026-11-18 back as a date; the opaque event has none
    assert {None if r.date is None else str(r.date) for r in rows} == {"2026-11-18", None}
    assert sorted(p.name for p in (Path(out) / "events").glob("date=2026-11-18/*")) == [
        f"segment={name}" for name in sorted(bodies)]
    # the records are those `logport cat` prints
    def canonical(record: object) -> bytes:
        return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)

    expected = Counter(canonical(orjson.loads(dumps_event(obj))["record"]) for segment, items in bodies.items()
                       for body in items for obj in event_objects(segment, 0, body) if "record" in obj)
    assert Counter(canonical(orjson.loads(r.record)) for r in rows if r.record is not None) == expected


def test_batch_events_table(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bodies = build_sample(logjam_requests=50).bodies
    data, out = str(tmp_path / "data"), str(tmp_path / "out")
    write_bodies(data, bodies)
    assert run("batch", "--data-dir", data, "--out", out, "--outputs", "events,traffic") == 0
    assert spark.read.parquet(out + "/events").count() == stored_events(bodies)
    assert (Path(out) / "traffic").is_dir()
