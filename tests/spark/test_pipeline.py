"""`logport pipeline`: its statistics against the same numbers computed in plain Python, streaming and the report."""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import logport
from logport.spark import pipeline
from tests.spark.sample import TIME_METRICS, build_sample, layout, write_bodies

pytestmark = pytest.mark.slow  # a Spark job each: seconds, even on the shared session

MINUTE_NS = 60 * 1_000_000_000
SEVERITIES = ["debug", "info", "warn", "error", "fatal", "unknown"]


def run(*argv: str, quiet: bool = True) -> int:
    parser = argparse.ArgumentParser()
    pipeline.add_arguments(parser)
    return pipeline.main(parser.parse_args([*argv, *(["--quiet"] if quiet else []), "--master", "local[2]"]))


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def expected_requests(logjam: list[tuple[str, int, dict[str, Any]]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for app_env, time_ns, record in logjam:
        groups[(app_env, record["action"], time_ns // MINUTE_NS * 60)].append(record)
    out = {}
    for key, records in groups.items():
        row: dict[str, Any] = {"count": len(records)}
        for m in TIME_METRICS:
            values = [r[m] for r in records if m in r]
            if values:
                row[f"{m}_mean"] = sum(values) / len(values)
                row[f"{m}_max"] = max(values)
                for p in (0.5, 0.95, 0.99):
                    row[f"{m}_p{int(p * 100)}"] = nearest_rank(values, p)
        totals = [r["total_time"] for r in records if "total_time" in r]  # a request without it is in no bucket
        row["apdex_happy"] = sum(t < 100 for t in totals)
        row["apdex_satisfied"] = sum(100 <= t < 500 for t in totals)
        row["apdex_tolerating"] = sum(500 <= t < 2000 for t in totals)
        row["apdex_frustrated"] = sum(t >= 2000 for t in totals)
        row["apdex"] = (row["apdex_happy"] + row["apdex_satisfied"] + row["apdex_tolerating"] / 2) / len(records)
        codes = Counter(r["code"] // 100 for r in records)
        for c in range(1, 6):
            row[f"code_{c}xx"] = codes.get(c, 0)
        severities = Counter(r["severity"] for r in records)
        for i, name in enumerate(SEVERITIES):
            row[f"severity_{name}"] = severities.get(i, 0)
        row["with_exceptions"] = sum(bool(r.get("exceptions")) for r in records)
        out[key] = row
    return out


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: Counter[str] = Counter()
        self.text: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.links.append(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def sample_run(spark, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("pipeline")
    sample = build_sample(logjam_requests=2000)
    write_bodies(str(root / "data"), sample.bodies)
    assert run("batch", "--data-dir", str(root / "data"), "--out", str(root / "out")) == 0
    return root, sample


def test_request_statistics_match_plain_python(spark, sample_run) -> None:  # type: ignore[no-untyped-def]
    root, sample = sample_run
    expected = expected_requests(sample.logjam)
    rows = spark.read.parquet(str(root / "out" / "requests")).collect()
    got = {(r.app_env, r.action, int(r.minute.timestamp())): r.asDict() for r in rows}
    assert set(got) == set(expected)
    for key, want in expected.items():
        row = got[key]
        for name, value in want.items():
            if isinstance(value, float):
                assert row[name] == pytest.approx(value, rel=1e-9), (key, name)
            else:
                assert row[name] == value, (key, name)
        assert str(row["date"]) == "2026-11-18"


def test_traffic_and_exceptions_match_plain_python(spark, sample_run) -> None:  # type: ignore[no-untyped-def]
    root, sample = sample_run
    traffic = spark.read.parquet(str(root / "out" / "traffic")).collect()
    per_segment = Counter()
    for r in traffic:
        per_segment[r.segment] += r.events
        assert r.events == r.forward_events + r.lumberjack_events + r.logjam_events + r.opaque_events
    logjam = 2000 + sample.logjam_other
    assert per_segment == {"forward": 6 * 25 + 4 + 1, "lumberjack": 5 * 30, "logjam": logjam}
    assert sum(r.logjam_events for r in traffic) == logjam
    # As the logjam listener tags them: logjam.<app-env>.<topic>.
    assert {r.tag for r in traffic if r.segment == "logjam"} == {
        f"logjam.{app_env}.{topic}" for app_env in ("shop-production", "admin-preview")
        for topic in ("logs." + app_env.replace("-", "."), "frontend.page")}
    exceptions = Counter()
    for app_env, time_ns, record in sample.logjam:
        for name in set(record.get("exceptions", [])):
            exceptions[(app_env, record["action"], time_ns // MINUTE_NS * 60, name)] += 1
    rows = spark.read.parquet(str(root / "out" / "exceptions")).collect()
    assert {(r.app_env, r.action, int(r.minute.timestamp()), r.exception): r["count"] for r in rows} == exceptions


def test_report_is_self_contained_html_with_charts(sample_run) -> None:  # type: ignore[no-untyped-def]
    root, sample = sample_run
    page = _Page()
    page.feed((root / "out" / "report.html").read_text(encoding="utf-8"))
    assert page.tags["svg"] >= 4 and page.tags["polyline"] >= 5
    assert not page.links  # nothing to fetch: no scripts, images or stylesheets from anywhere
    text = " ".join(page.text)
    for heading in ("Request rate", "Latency percentiles", "Error rates", "Slowest actions", "Top exceptions"):
        assert heading in text
    top = Counter(e for _, _, r in sample.logjam for e in set(r.get("exceptions", []))).most_common(1)[0][0]
    assert top in text


def test_opaque_events_are_filed_without_a_date_and_left_out_of_the_charts(spark, sample_run) -> None:  # type: ignore[no-untyped-def]
    root, _ = sample_run
    traffic = root / "out" / "traffic"
    assert sorted(p.name for p in traffic.glob("date=*")) == ["date=2026-11-18", "date=__HIVE_DEFAULT_PARTITION__"]
    rows = spark.read.parquet(str(traffic)).collect()
    # The sample's one opaque event (in `forward`, no tag): a row of its own, without minute or date.
    untimed = [r for r in rows if r.minute is None]
    assert [(r.segment, r.tag, r.events, r.opaque_events, r.date) for r in untimed] == [("forward", "", 1, 1, None)]
    assert all(r.opaque_events == 0 and str(r.date) == "2026-11-18" for r in rows if r.minute is not None)
    page = _Page()
    page.feed((root / "out" / "report.html").read_text(encoding="utf-8"))
    text = " ".join(page.text)
    assert "1 event without a time" in text and "left out of the charts" in text
    assert "1970" not in text


def test_streaming_run_is_exactly_once_across_restarts(spark, tmp_path: Path) -> None:
    sample = build_sample(logjam_requests=600)
    bodies = sample.bodies["logjam"]
    half = len(bodies) // 2
    data, out = str(tmp_path / "data"), str(tmp_path / "out")
    args = ["stream", "--data-dir", data, "--out", out, "--segments", "logjam", "--available-now",
            "--watermark", "1 minute", "--outputs", "requests"]
    write_bodies(data, {"logjam": bodies[:half]})
    assert run(*args) == 0
    first = spark.read.parquet(out + "/requests").count()
    write_bodies(data, {"logjam": bodies[half:]})
    assert run(*args) == 0
    rows = spark.read.parquet(out + "/requests").collect()
    assert len(rows) > first > 0
    keys = [(r.app_env, r.action, int(r.minute.timestamp())) for r in rows]
    assert len(keys) == len(set(keys))  # no window written twice
    expected = expected_requests(sample.logjam)
    # Every window the watermark has passed is written once, with the batch numbers.
    last = max(t for _, t, _ in sample.logjam) // 1_000_000_000 - 60
    closed = {k: v for k, v in expected.items() if k[2] + 60 <= last}
    got = {k: r for k, r in zip(keys, rows, strict=True)}
    assert set(closed) <= set(got) <= set(expected)
    for key, want in closed.items():
        assert got[key]["count"] == want["count"]
        assert got[key]["total_time_p95"] == want["total_time_p95"]


def test_batch_progress_lines_follow_every_stage_to_its_last_task(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  spark) -> None:  # type: ignore[no-untyped-def]
    bodies = build_sample(logjam_requests=160).bodies["logjam"]
    stored = len(bodies)  # the logjam listener stores one event per batch: as many rows as batches
    data, out = str(tmp_path / "data"), tmp_path / "out"
    write_bodies(data, {"logjam": bodies})
    assert run("batch", "--data-dir", data, "--out", str(out), "--outputs", "traffic", quiet=False) == 0
    err = capsys.readouterr().err
    assert f"read {stored} rows from {stored} stored batches" in err
    assert f"wrote {out / 'traffic'}" in err
    assert re.search(r"^\[ *\d+\.\ds\] report: ", err, re.MULTILINE)
    stages: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for stage, done, total in re.findall(r"stage (\d+): (\d+)/(\d+) tasks", err):
        stages[int(stage)].append((int(done), int(total)))
    # The read and the traffic table: a job each, a stage or more each. Every stage's last line has
    # all of its tasks done, also a stage that started and ended between two polls; counts only grow.
    assert len(stages) >= 2, err
    for stage, counts in stages.items():
        assert counts[-1][0] == counts[-1][1] > 0, (stage, counts, err)
        assert counts == sorted(counts), (stage, counts, err)


def test_stream_progress_lines_name_rows_read_and_batches_done(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               spark) -> None:  # type: ignore[no-untyped-def]
    bodies = build_sample(logjam_requests=160).bodies["logjam"]
    stored = len(bodies)
    data, out = str(tmp_path / "data"), tmp_path / "out"
    results = write_bodies(data, {"logjam": bodies})["logjam"]
    append_bytes = max(layout(results, bodies).added)  # an event, its commit frame (the first: the chunk header)
    assert run("stream", "--data-dir", data, "--out", str(out / "stream"), "--outputs", "requests",
               "--available-now", "--max-bytes-per-trigger", str(append_bytes * (stored // 3 + 1)), quiet=False) == 0
    err = capsys.readouterr().err
    # While it runs and once it stopped: micro-batches done and rows read so far, the last line all of them.
    done = [(int(n), int(rows)) for n, rows in re.findall(r"logport_requests: (\d+) batches, (\d+) rows read$",
                                                           err, re.MULTILINE)]
    assert done and done == sorted(done), err
    assert done[-1][0] >= 3 and done[-1][1] == stored, err


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
