"""`logport pipeline`'s runner: incremental batch runs, a retried batch, streaming exactly once with the watermark,
cross-batch state, compaction and the lake's settings, with a small real table builder (tests/spark/counting.py)
counting events per minute against the same counts in plain Python."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import logport
from logport.batch import encode_batch
from logport.lake.log import LakeError, LakeLog
from logport.lake.resources import DEFAULT_RESOURCES
from logport.spark import lakewriter, pipeline
from logport.spark.context import LakeSettings
from tests.spark.sample import BASE_S, build_sample, write_bodies

pytestmark = pytest.mark.slow  # Spark jobs: seconds each, even on the shared session

Key = tuple[str, str, int]  # segment, date, minute


def run(*argv: str, quiet: bool = True) -> int:
    parser = argparse.ArgumentParser()
    pipeline.add_arguments(parser)
    return pipeline.main(parser.parse_args([*argv, *(["--quiet"] if quiet else []), "--master", "local[2]"]))


@pytest.fixture(autouse=True)
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pipeline.BUILDERS, "counts", "tests.spark.counting:count_events")


def timed_bodies(seconds: Iterable[float], per_frame: int = 5, tag: str = "app.web") -> list[bytes]:
    """Forward batches of events at BASE_S + each of `seconds`, `per_frame` events a stored batch."""
    times = list(seconds)
    bodies = []
    for start in range(0, len(times), per_frame):
        triples = [(BASE_S + int(t), int(t % 1 * 1e9), {"message": f"event at {t}", "n": start + i})
                   for i, t in enumerate(times[start:start + per_frame])]
        bodies.append(encode_batch(tag, triples, {"size": len(triples), "source": "forward"}))
    return bodies


def minute_key(segment: str, seconds: float) -> Key:
    when = datetime.fromtimestamp(BASE_S + int(seconds), UTC)
    return segment, when.strftime("%Y-%m-%d"), when.hour * 60 + when.minute


def lake_rows(spark, out: Path, table: str) -> list[Any]:  # type: ignore[no-untyped-def]
    files = LakeLog(out).files(table)
    if not files:
        return []
    return spark.read.option("basePath", str(out / table)).parquet(*map(str, files)).collect()


def per_minute(spark, out: Path) -> Counter[Key]:  # type: ignore[no-untyped-def]
    counts: Counter[Key] = Counter()
    for r in lake_rows(spark, out, "log_minutes"):
        counts[(r.segment, str(r.date), r.minute)] += r.events
    return counts


def held_and_on_disk(out: Path, table: str) -> tuple[set[Path], set[Path]]:
    return set(LakeLog(out).files(table)), set((out / table).rglob("*.parquet"))


def test_batch_runs_add_only_what_is_new_and_hand_state_on(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    sample = build_sample(logjam_requests=60)
    first = {"forward": sample.bodies["forward"], "app": timed_bodies(range(0, 240, 3))}
    data, out = str(tmp_path / "data"), tmp_path / "lake"
    write_bodies(data, first)
    args = ["batch", "--data-dir", data, "--out", str(out), "--outputs", "counts,traffic"]
    assert run(*args, quiet=False) == 0
    err = capsys.readouterr().err
    forward = 6 * 25 + 4 + 1  # the sample's Forward events: 6 batches of 25, 4 odd entries, 1 opaque event
    stored = forward + 80
    assert f"batch 0: {stored} events read; committed" in err
    stages: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for stage, done, total in re.findall(r"stage (\d+): (\d+)/(\d+) tasks", err):
        stages[int(stage)].append((int(done), int(total)))
    assert len(stages) >= 2, err  # every stage's last line has all of its tasks done; counts only grow
    for stage, counts in stages.items():
        assert counts[-1][0] == counts[-1][1] > 0 and counts == sorted(counts), (stage, counts, err)

    later = list(range(240, 400, 2))
    write_bodies(data, {"app": timed_bodies(later), "lumberjack": sample.bodies["lumberjack"]})
    assert run(*args) == 0
    assert run(*args, quiet=False) == 0
    assert "nothing new to read since batch 1" in capsys.readouterr().err

    entries = list(LakeLog(out).entries())
    assert [e.batch for e in entries] == [0, 1]
    expected = Counter(minute_key("app", t) for t in [*range(0, 240, 3), *later])
    got = per_minute(spark, out)
    assert {k: v for k, v in got.items() if k[0] == "app"} == expected
    assert sum(v for k, v in got.items() if k[0] == "lumberjack") == 150
    # cross-batch state: the second batch read the first one's and added to it
    state = entries[-1].info["state"]
    seen = spark.read.parquet(str(out / state["tables"]["seen"])).collect()
    assert {r.segment: r.events for r in seen} == {"forward": forward, "app": 80 + len(later), "lumberjack": 150}
    assert (out / state["blobs"]["batches"]).read_bytes() == b"2"
    assert sorted(p.name for p in (out / "_state").iterdir()) == [f"{1:020d}"]  # the first batch's is gone
    assert entries[-1].info["counters"] == {"built": 1}

    traffic = lake_rows(spark, out, "traffic")
    per_segment: Counter[str] = Counter()
    for r in traffic:
        per_segment[r.segment] += r.events
        assert r.events == r.forward_events + r.lumberjack_events + r.logjam_events + r.opaque_events
    assert per_segment == {"forward": forward, "app": 80 + len(later), "lumberjack": 150}
    # the one opaque event has no time: a row of its own, filed under no date
    assert [(r.segment, r.events, r.opaque_events, r.minute) for r in traffic if r.date is None] == [
        ("forward", 1, 1, None)]
    # files are sorted by the table's keys within
    for path in LakeLog(out).files("log_minutes"):
        rows = pq.read_table(path).to_pylist()
        keys = [(r["segment"], r["tag"], r["source"], r["host"], r["level"], r["minute"]) for r in rows]
        assert keys == sorted(keys)

    assert run(*args, "--rebuild") == 0  # starts over: one batch, the same counts
    assert [e.batch for e in LakeLog(out).entries()] == [0]
    assert {k: v for k, v in per_minute(spark, out).items() if k[0] == "app"} == expected


def test_a_batch_that_did_not_commit_is_redone_without_its_leftovers(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seconds = [t * 7.5 for t in range(80)]
    data, out = str(tmp_path / "data"), tmp_path / "lake"
    write_bodies(data, {"app": timed_bodies(seconds)})
    since, until = "2026-11-18T00:01:00", datetime.fromtimestamp(BASE_S + 420, UTC).isoformat()
    args = ["batch", "--data-dir", data, "--out", str(out), "--outputs", "counts,events", "--since", since,
            "--until", until]
    commit = LakeLog.commit

    def crash(self: LakeLog, entry: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(LakeLog, "commit", crash)
    with pytest.raises(OSError, match="disk gone"):
        run(*args)
    held, on_disk = held_and_on_disk(out, "log_minutes")
    assert not held and on_disk  # written, not committed
    monkeypatch.setattr(LakeLog, "commit", commit)
    assert run(*args) == 0
    for table in ("log_minutes", "events"):
        held, on_disk = held_and_on_disk(out, table)
        assert held == on_disk, table
    start = datetime.fromisoformat(since).replace(tzinfo=UTC).timestamp() - BASE_S
    inside = [t for t in seconds if start <= t < 420]
    assert per_minute(spark, out) == Counter(minute_key("app", t) for t in inside)
    [entry] = LakeLog(out).entries()
    assert entry.batch == 0 and entry.info["outside"] == len(seconds) - len(inside) > 0
    events = lake_rows(spark, out, "events")
    assert len(events) == len({(r.hub, r.segment, r.offset, r["index"]) for r in events}) == len(inside)


def test_streaming_is_exactly_once_with_the_watermark(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lakewriter, "COMPACT_FILES", 3)
    data, out = str(tmp_path / "data"), tmp_path / "lake"
    first = [t * 10.0 for t in range(36)]  # minutes 0..5, in 3 micro-batches of 2 stored batches
    results = write_bodies(data, {"app": timed_bodies(first, per_frame=6)})["app"]
    frame = max(r.end_offset - r.offset for r in results) + 64
    args = ["stream", "--data-dir", data, "--out", str(out), "--outputs", "counts", "--available-now",
            "--watermark", "1 minute", "--max-bytes-per-trigger", str(frame * 2)]
    original = pipeline.LakeRun.run

    def crash_after_commit(self: pipeline.LakeRun, events: Any, batch: int, info: dict[str, Any]) -> Any:
        entry = original(self, events, batch, info)
        if batch == 1:
            raise RuntimeError("driver lost after the lake's commit")
        return entry

    monkeypatch.setattr(pipeline.LakeRun, "run", crash_after_commit)
    with pytest.raises(pipeline.QueryFailed, match="driver lost"):
        run(*args)
    monkeypatch.setattr(pipeline.LakeRun, "run", original)
    assert run(*args, quiet=False) == 0  # replays micro-batch 1: committed in the lake, so skipped
    err = capsys.readouterr().err
    assert "batch 1 (micro-batch 1) is committed already: skipped" in err
    assert per_minute(spark, out) == Counter(minute_key("app", t) for t in first)
    assert any(e.replaces for e in LakeLog(out).entries())  # compacted at 3 files
    held, on_disk = held_and_on_disk(out, "log_minutes")
    assert held == on_disk and len(held) < 3

    # Late: minute 1 is behind the watermark (the latest event so far, 5:50, less 1 minute), minute 5 is not.
    late, newer = [60.0 + t for t in range(0, 60, 12)], [300.0 + t for t in range(0, 60, 12)] + [420.0]
    write_bodies(data, {"app": timed_bodies([*late, *newer], per_frame=20)})
    assert run(*args) == 0
    entries = list(LakeLog(out).entries())
    assert sum(e.info["late"] for e in entries) == len(late)
    assert entries[-1].info["watermark_us"] == (BASE_S + 350 - 60) * 1_000_000
    assert per_minute(spark, out) == Counter(minute_key("app", t) for t in [*first, *newer])

    # A batch run goes on from the stream's offsets; the next stream run starts a new checkpoint after it.
    write_bodies(data, {"app": timed_bodies([430.0, 431.0])})
    assert run("batch", "--data-dir", data, "--out", str(out), "--outputs", "counts") == 0
    write_bodies(data, {"app": timed_bodies([440.0])})
    assert run(*args, quiet=False) == 0
    assert "a new checkpoint starts at the lake's offsets" in capsys.readouterr().err
    assert per_minute(spark, out) == Counter(minute_key("app", t) for t in [*first, *newer, 430.0, 431.0, 440.0])
    batches = [e.batch for e in LakeLog(out).entries()]
    assert batches == list(range(len(batches)))


def test_the_lake_keeps_its_settings_and_one_writer(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data, out = tmp_path / "data", tmp_path / "lake"
    write_bodies(str(data), {"app": timed_bodies([1.0])})
    base = ["batch", "--data-dir", str(data), "--out", str(out), "--outputs", "counts"]
    (tmp_path / "few.yml").write_text("time_resources:\n  - db_time\n")
    assert run(*base, "--time", "utc") == 0
    info = json.loads((out / "_lake.json").read_text())
    assert info["time_basis"] == "utc" and info["sketch"]["gamma"] == 1.02
    assert info["resources"]["time_resources"][:2] == ["gc_time", "wait_time"]
    assert lakewriter.LakeWriter(out).settings(None, None) == LakeSettings("utc", DEFAULT_RESOURCES)
    refused = [
        (["--time", "local"], "files minutes by --time utc, not local"),
        (["--resources", str(tmp_path / "few.yml")], "sums other resources than"),
    ]
    for extra, message in refused:
        with pytest.raises(LakeError, match=re.escape(message)):
            run(*base, *extra)
    old = tmp_path / "old"
    (old / "requests").mkdir(parents=True)
    with pytest.raises(LakeError, match="no _lake.json. but holds requests: an older logport"):
        run("batch", "--data-dir", str(data), "--out", str(old))
    writer = lakewriter.LakeWriter(out)
    writer.lock()
    try:
        with pytest.raises(LakeError, match="is being written by another logport pipeline"):
            run(*base)
    finally:
        writer.close()


@pytest.mark.parametrize(("argv", "message"), [
    (["--watermark", "soon"], "--watermark 'soon' is not an interval"),
    (["--since", "yesterday"], "--since 'yesterday' is not an ISO 8601"),
    (["--since", "2026-11-19", "--until", "2026-11-18"], "--since 2026-11-19 is not before --until 2026-11-18"),
    (["--outputs", "everything"], "choose from traffic, logjam, logs, events"),
    (["--resources", "/nonexistent.yml"], "resources file '/nonexistent.yml'"),
    (["--streams", "/nonexistent.json"], "--streams '/nonexistent.json'"),
])
def test_options_that_cannot_be_used_are_named(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(logport.errors.LogportError, match=re.escape(message)):
        run("stream", "--data-dir", str(tmp_path), "--out", str(tmp_path / "lake"), *argv)


SUBMITTED = """
from logport.spark.pipeline import spark_session

spark = spark_session(None)
print("master:", spark.sparkContext.master, flush=True)
spark.stop()
"""


def test_spark_submit_master_is_kept(tmp_path: Path) -> None:
    # Its own JVM, started by spark-submit exactly as on a cluster: the master reaches the job only
    # as a system property of that JVM.
    script = tmp_path / "submitted.py"
    script.write_text(SUBMITTED, encoding="utf-8")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": str(Path(logport.__file__).parents[1])}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "master: local[1]" in done.stdout.splitlines()
