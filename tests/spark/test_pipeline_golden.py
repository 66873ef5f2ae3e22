"""Batch and streaming give the same lake: the same stored events (the log corpus of every shipper, and logjam
requests counted in traffic), once through `logport pipeline batch` and once through `logport pipeline stream
--available-now` in several micro-batches, give equal tables (traffic, the log tables, events) after a reader
merges each key's rows as lake/tables.py says. Then late events: those inside the watermark are counted in their
minute as a batch run counts them; those outside it are not (the log entry counts them as `late`), and the
`events` table keeps them."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from logport.lake.log import LakeLog
from logport.lake.tables import PROVENANCE, Table, all_tables
from logport.spark import pipeline
from logport.spark.traffic import EVENTS, TRAFFIC
from tests.spark.logcorpus import BASE_S, Shipped, corpus, stored_bodies
from tests.spark.sample import build_sample, write_bodies

pytestmark = pytest.mark.slow  # two lakes, a few micro-batches each

CONTRACT = {**all_tables(), TRAFFIC.name: TRAFFIC, EVENTS.name: EVENTS}
WATERMARK_S = 3600
LATE_S = 3 * 3600  # the late events outside the watermark: this long before the first ones


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    pipeline.add_arguments(parser)
    return pipeline.main(parser.parse_args([*argv, "--quiet", "--master", "local[2]"]))


# logjam's tables are left out for time: with them a micro-batch of this test took some ten minutes on the shared
# 2-core machine (load 15-20); test_logjam.py checks them against a plain-Python reference
OUTPUTS = "traffic,logs,events"


def rows(out: Path, table: str) -> list[dict[str, Any]]:
    """The rows of the files the commit log lists, with their hive partition columns."""
    found = []
    for path in LakeLog(out).files(table):
        parts = dict(p.split("=", 1) for p in path.relative_to(out / table).parts[:-1])
        values = {k: None if v == "__HIVE_DEFAULT_PARTITION__" else v for k, v in parts.items()}
        found += [{**r, **values} for r in pq.read_table(path).to_pylist()]
    return found


def _plain(value: Any) -> Any:
    """A value as comparable across lakes: floats to 9 digits (sums in another order), maps as dicts."""
    if isinstance(value, float):
        return float(f"{value:.9g}") if math.isfinite(value) else value
    if isinstance(value, list) and value and isinstance(value[0], tuple) and len(value[0]) == 2:
        return tuple(sorted(value))
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    return value


def _combine(how: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    if how == "max":
        return max(a, b)
    if how == "min":
        return min(a, b)
    if isinstance(a, list):  # a map column (pyarrow: [(key, value), ...]): values of a key add up
        added: Counter[Any] = Counter(dict(a))
        added.update(dict(b))
        return list(added.items())
    return a + b


def merged(out: Path, table: Table, keys: tuple[str, ...] | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """An aggregate table as a reader sees it: key -> its rows combined (`last` columns left out: they are the
    latest batch's, so they depend on how the events were cut into batches)."""
    assert table.merge is not None
    names = keys or tuple(name for name, _ in table.keys)
    values = [name for name, _ in table.values if table.combine(name) != "last" and name not in names]
    result: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows(out, table.name):
        key = tuple(r[name] for name in names)
        held = result.setdefault(key, {})
        for name in values:
            held[name] = _combine(table.combine(name), held.get(name), r[name])
    return {key: {name: _plain(v) for name, v in held.items()} for key, held in result.items()}


def details(out: Path, table: Table) -> Counter[tuple[Any, ...]]:
    """A table of one row per thing, without where it was read (the two lakes' hubs and offsets differ)."""
    skip = {name for name, _ in PROVENANCE} - {"segment"}
    return Counter(tuple((k, _plain(v)) for k, v in sorted(r.items()) if k not in skip) for r in rows(out, table.name))


def events(spark: Any, out: Path) -> Counter[tuple[Any, ...]]:
    """The events table without where each was read, its records as JSON: VARIANT's bytes depend on what else
    was read with a record (the dictionary of its keys is a read batch's), so the lakes' bytes differ."""
    files = [str(p) for p in LakeLog(out).files("events")]
    table = spark.read.option("basePath", str(out / "events")).parquet(*files).selectExpr(
        "segment", "tag", "time", "time_ns", "source", "to_json(record) AS record", "raw")
    return Counter(tuple(sorted(r.asDict().items())) for r in table.collect())


def by_template(out: Path) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """`patterns` and `log_patterns` keyed by the pattern's template rather than its id: Drain numbers its clusters
    in the order it meets them, and the micro-batches meet them in another order."""
    templates = {r["pattern_id"]: r["template"] for r in rows(out, "patterns")}  # the latest (files in log order)
    patterns: dict[Any, Any] = {}
    for key, values in merged(out, CONTRACT["patterns"]).items():
        patterns[templates[key[0]]] = values
    counts: Counter[tuple[Any, ...]] = Counter()
    for (date, minute, tag, level, pattern_id), values in merged(out, CONTRACT["log_patterns"]).items():
        counts[(date, minute, tag, level, templates[pattern_id])] += values["count"]
    return patterns, dict(counts)


def assert_same_lake(batch: Path, stream: Path) -> None:
    tables = {name for entry in LakeLog(batch).entries() for name in entry.files}
    assert tables == {name for entry in LakeLog(stream).entries() for name in entry.files}
    assert {"traffic", "log_minutes", "log_patterns", "patterns", "events"} <= tables
    for name in sorted(tables - {"events", "patterns", "log_patterns"}):
        table = CONTRACT[name]
        if table.merge is None:
            assert details(batch, table) == details(stream, table), name
        else:
            assert merged(batch, table) == merged(stream, table), name
    assert by_template(batch) == by_template(stream)


def store(data_dirs: list[Path], bodies: dict[str, list[bytes]]) -> None:
    for data in data_dirs:
        write_bodies(str(data), bodies)


def segment_bodies(shipped: list[Shipped]) -> dict[str, list[bytes]]:
    return stored_bodies(shipped)[0]


def test_batch_and_streaming_give_the_same_lake_and_late_events(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    both = [tmp_path / "batch-data", tmp_path / "stream-data"]
    lakes = {"batch": tmp_path / "batch-lake", "stream": tmp_path / "stream-lake"}
    first = {**segment_bodies(list(corpus(400, seed=31, minutes=6))),
             "logjam": build_sample(logjam_requests=120).bodies["logjam"]}
    store(both, first)
    largest = max(sum(len(b) + 64 for b in bodies) for bodies in first.values())
    chosen = ["--outputs", OUTPUTS]
    batch = ["batch", "--data-dir", str(both[0]), "--out", str(lakes["batch"]), *chosen]
    # each segment gets a quarter of a micro-batch's bytes: the largest takes two micro-batches or three
    stream = ["stream", "--data-dir", str(both[1]), "--out", str(lakes["stream"]), *chosen, "--available-now",
              "--watermark", f"{WATERMARK_S} seconds", "--max-bytes-per-trigger", str(len(first) * largest // 2)]

    def runs() -> None:
        assert run(*batch) == 0
        assert run(*stream) == 0

    runs()
    assert len(list(LakeLog(lakes["stream"]).entries())) >= 2
    assert_same_lake(lakes["batch"], lakes["stream"])
    assert events(spark, lakes["batch"]) == events(spark, lakes["stream"])

    # Late: inside the watermark (a minute already counted), outside it (hours before everything), and newer.
    # The batch run's data lacks the events outside: the stream leaves them out of every count.
    inside = list(corpus(40, seed=32, start_s=BASE_S + 120, minutes=1))
    # segment-protocol JSON objects have no time the source reads (their time is a field of the object): the
    # watermark cannot tell they are late, so those are counted, whatever their time (docs/pipeline.md)
    outside = [s for s in corpus(40, seed=33, start_s=BASE_S - LATE_S, minutes=1) if s.source is not None]
    newer = list(corpus(60, seed=34, start_s=BASE_S + 360, minutes=2))
    store(both, segment_bodies(inside))
    store(both[1:], segment_bodies(outside))
    store(both, segment_bodies(newer))
    runs()
    late = [e.info["late"] for e in LakeLog(lakes["stream"]).entries()]
    assert sum(late) == len(outside) and late[-1] == len(outside)
    assert all(e.info["late"] == 0 for e in LakeLog(lakes["batch"]).entries())
    assert_same_lake(lakes["batch"], lakes["stream"])
    # the events table keeps them: the watermark finalises counts, it loses no event
    kept = events(spark, lakes["stream"])
    kept.subtract(events(spark, lakes["batch"]))
    extra = [dict(row) for row, n in kept.items() for _ in range(n)]
    assert len(extra) == len(outside) and -kept == Counter()
    assert all(row["time"].timestamp() < BASE_S - LATE_S + 60 for row in extra)
