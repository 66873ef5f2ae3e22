"""rows/s of spark.read.format("logport") beside Spark's JSON reader over the same events as JSON lines.

Every side reads every column (written to Spark's `noop` sink) in the same run,
on the same SparkSession, in turn, round after round. The JSON lines are what
`logport cat` prints. The source is timed with records as VARIANT (its default)
and as JSON text (option record=json); with --baseline REV, also as a commit
REV's source reads it (VARIANT), registered on the same session with Python
workers of its own that import that commit's logport. Beside rows/s, rows per
CPU-second of the whole session (JVM, Python workers and driver, from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import store_batches, timed, write_json_lines  # noqa: E402

from logport.batch import encode_batch

BASE_S = 1_795_000_000
ACTIONS = ["Orders#index", "Orders#show", "Carts#update", "Search#query", "Users#login", "Health#ping"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=1_000_000, help="events stored (default 1M)")
    p.add_argument("--batch-size", type=int, default=500, help="events per stored batch")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per side (best counts), after a warm-up")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    p.add_argument("--baseline", default="", help="a git revision whose source (built from git with its C "
                   "extensions) reads the same events beside this checkout's, e.g. 92071ee")


def make_batches(events: int, batch_size: int) -> list[bytes]:
    rng = random.Random(1)
    bodies = []
    for start in range(0, events, batch_size):
        n = min(batch_size, events - start)
        triples = []
        for i in range(start, start + n):
            total = round(rng.lognormvariate(4.5, 1.2), 3)
            record = {"action": ACTIONS[i % len(ACTIONS)], "started_ms": (BASE_S + i // 50) * 1000,
                      "total_time": total, "db_time": round(total * 0.4, 3), "view_time": round(total * 0.2, 3),
                      "code": 500 if i % 97 == 0 else 200, "severity": 1, "request_id": f"{i:016x}",
                      "host": "web-1", "message": f"request {i} done"}
            triples.append((BASE_S + i // 50, (i % 50) * 20_000_000, record))
        bodies.append(encode_batch("logs.shop.production", triples,
                                   {"size": n, "source": "logjam", "app_env": "shop-production",
                                    "peer": "127.0.0.1:5000", "sequence": start // batch_size + 1}))
    return bodies


def baseline_python(rev: str, work: Path) -> str:
    """An executable that runs this venv's Python with commit `rev`'s logport (built by pip) first on its path:
    the Python the baseline's Spark workers run."""
    from _hubproc import build_baseline

    site = build_baseline(rev, work)
    wrapper = work / f"python-{rev}"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    import subprocess

    where = subprocess.run([str(wrapper), "-c", "import logport.spark.columns as c; print(c.__file__)"],
                           check=True, capture_output=True, text=True).stdout.strip()
    if not where.startswith(str(site)):
        raise SystemExit(f"baseline {rev}: its Python imports logport from {where}, not from {site}")
    return str(wrapper)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import logport.spark
    from logport.spark.source import session_data_source

    work = Path(args.dir or tempfile.mkdtemp(prefix="logport-bench-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(f"generating {args.events:,} events in batches of {args.batch_size} ...", file=sys.stderr)
        bodies = make_batches(args.events, args.batch_size)
        data_dir, jsonl = str(work / "data"), work / "events.jsonl"
        # a --dir kept from an earlier run would be appended to: the source would read more rows than the
        # JSON reader and the ratio would compare different data
        shutil.rmtree(data_dir, ignore_errors=True)
        old_python = baseline_python(args.baseline, work) if args.baseline else None
        asyncio.run(store_batches(data_dir, bodies))
        write_json_lines(jsonl, bodies)
        stored = sum(8 + len(b) for b in bodies)
        del bodies

        load_before = os.getloadavg()
        spark = (SparkSession.builder.master(args.master).appName("logport-bench-spark")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        logport.spark.register(spark)
        context = spark.sparkContext
        new_python = sys.executable  # what register() runs a local session's source with

        def use(python: str) -> None:
            """The `logport` source registered anew, its Python workers running `python` (this checkout's,
            or the baseline's): Spark keeps the Python a source was registered with."""
            with logport.spark.python_exec(context, python):
                spark.dataSource.register(session_data_source(context.defaultParallelism))

        def logport_read() -> None:
            use(new_python)
            spark.read.format("logport").option("path", data_dir).load().write.format("noop").mode("overwrite").save()

        def logport_read_baseline() -> None:
            assert old_python is not None
            use(old_python)
            spark.read.format("logport").option("path", data_dir).load().write.format("noop").mode("overwrite").save()

        def logport_read_json() -> None:
            use(new_python)
            (spark.read.format("logport").option("path", data_dir).option("record", "json").load()
             .write.format("noop").mode("overwrite").save())

        def json_read() -> None:  # schema inference is part of spark.read.json: a user pays it too
            spark.read.json(str(jsonl)).write.format("noop").mode("overwrite").save()

        json_schema = spark.read.json(str(jsonl)).schema

        def json_read_with_schema() -> None:
            spark.read.schema(json_schema).json(str(jsonl)).write.format("noop").mode("overwrite").save()

        sides = {"logport source (record VARIANT)": logport_read, "logport source (record JSON)": logport_read_json,
                 "JSON reader (inferred schema)": json_read, "JSON reader (schema given)": json_read_with_schema}
        if old_python is not None:
            sides[f"logport source (record VARIANT), baseline {args.baseline}"] = logport_read_baseline
        for action in sides.values():  # warm-up: JIT, Python workers
            action()
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for r in range(args.rounds):  # alternated, in both orders, so a change in load falls on every side
            for name, action in (sides.items() if r % 2 == 0 else reversed(sides.items())):
                times[name].append(timed(action))
        best = {name: min(values) for name, values in times.items()}  # the fastest round, with its CPU
        spark.stop()

        n = args.events
        base = best["logport source (record VARIANT)"]
        print(f"\n{n:,} events; stored {stored / 1e6:.1f} MB, JSON lines {jsonl.stat().st_size / 1e6:.1f} MB; "
              f"master {args.master}; best of {args.rounds}\n")
        print(f"load average before: {load_before}, after: {os.getloadavg()}")
        print("| reader | seconds | rows/s | logport (VARIANT) rows/s / this rows/s | CPU-s | rows per CPU-s |"
              "\n|---|---:|---:|---:|---:|---:|")
        for name, (seconds, cpu) in best.items():
            print(f"| {name} | {seconds:.2f} | {n / seconds:,.0f} | {seconds / base[0]:.2f}x | {cpu:.2f} | "
                  f"{n / cpu:,.0f} |")
        print(f"\ncommand: logport bench spark --events {n} --batch-size {args.batch_size} "
              f"--master '{args.master}' --rounds {args.rounds}" + (f" --baseline {args.baseline}" if args.baseline
                                                                     else ""))
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0
