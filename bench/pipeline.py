"""rows/s and CPU-seconds per million requests of `logport pipeline` (a batch run, and a streaming run with
--available-now) on logjam requests, beside the job a PySpark user would write by hand over the same requests.

The requests (several apps, envs, modules and pages, a dozen resources, local time zones, response codes,
severities, some exceptions, log lines) go through the logjam listener's own decoder into a data directory, one
stored batch each as a hub stores them, and into JSON lines as `logport cat` prints them. The hand-written job
reads those lines with Spark's JSON reader and a schema, and computes in DataFrame code what the pipeline's logjam
tables hold: `minutes` and `totals` per action, module and all_pages (count, every resource's sum, sum of squares
and maximum, apdex, response and severity counts) and the `quants` (logjam's buckets per page and resource),
written as Parquet. The three run on one SparkSession, round after round in alternating order; each is timed
from the start of its run to its last file, and its CPU from /proc (the driver, the JVM, the Python workers).
The pipeline runs the table builders this logport has (its first line says which).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import load_average, store_batches, table, timed, write_json_lines  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

BASE_S = 1_795_000_000  # 2026-11-18
# app-env -> (UTC offset of its servers' local time, share of the requests)
STREAMS = {"shop-production": (1, 0.55), "shop-preview": (1, 0.05), "api-production": (-5, 0.3),
           "admin-production": (9, 0.1)}
PAGES = {
    "shop": ["Orders#index", "Orders#show", "Orders#create", "Carts#show", "Carts#update", "Search#query",
             "Products#index", "Products#show", "Users#login", "Users#show", "Checkout::Payments#create",
             "Checkout::Payments#show", "Checkout::Shipping#update", "Health#ping"],
    "api": ["Api::V1::Products#index", "Api::V1::Products#show", "Api::V1::Orders#create", "Api::V2::Search#query",
            "Api::V2::Users#show", "Health#ping"],
    "admin": ["Admin::Reports#index", "Admin::Reports#show", "Admin::Users#update", "Admin::Imports#create"],
}
CODES = [200] * 40 + [201, 204, 302, 302, 304, 304, 400, 404, 404, 422, 500, 503]
EXCEPTIONS = ["ActiveRecord::RecordNotFound", "Timeout::Error", "NoMethodError", "Redis::CannotConnectError"]
WARM_UP = 20_000  # requests each job runs once before the timed rounds
HAND = "hand-written PySpark (JSON reader, schema given)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=2_000_000, help="logjam requests stored (default 2M)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the three jobs, in alternating order (the "
                                                         "fastest of each counts)")
    p.add_argument("--max-bytes-per-trigger", type=int, default=128 << 20,
                   help="the streaming run's micro-batch size (stored bytes)")
    p.add_argument("--dir", help="work directory, kept (default: a temporary one, removed after); its stored "
                                 "requests are used again when there are as many")


def request(rng: random.Random, n: int, total: int) -> tuple[str, dict[str, Any]]:
    """The n-th of `total` requests: its app-env and the message the agent sends (6 hours of traffic)."""
    app_env = rng.choices(list(STREAMS), [share for _, share in STREAMS.values()])[0]
    offset_h = STREAMS[app_env][0]
    started_ms = BASE_S * 1000 + n * 6 * 3600 * 1000 // total + rng.randrange(1000)
    local = datetime.fromtimestamp(started_ms / 1000, UTC).astimezone(timezone(timedelta(hours=offset_h)))
    page = rng.choice(PAGES[app_env.partition("-")[0]])
    total_time = round(rng.lognormvariate(4.0, 1.1), 3)
    db_calls = rng.randrange(0, 40)
    record: dict[str, Any] = {
        "action": page, "started_at": local.isoformat(timespec="milliseconds"), "started_ms": started_ms,
        "code": rng.choice(CODES), "request_id": f"{rng.getrandbits(128):032x}", "host": f"web-{rng.randrange(8)}",
        "total_time": total_time, "db_time": round(total_time * rng.random() * 0.5, 3), "db_calls": db_calls,
        "view_time": round(total_time * rng.random() * 0.3, 3), "gc_time": round(total_time * rng.random() * 0.05, 3),
        "gc_calls": rng.randrange(0, 3), "memcache_calls": rng.randrange(0, 12), "memcache_misses": rng.randrange(0, 3),
        "memcache_time": round(rng.random() * 4, 3), "redis_calls": rng.randrange(0, 6),
        "redis_time": round(rng.random() * 2, 3), "allocated_objects": rng.randrange(10_000, 400_000),
        "allocated_bytes": rng.randrange(1 << 20, 64 << 20), "heap_size": 1_500_000 + rng.randrange(100_000),
        "live_data_set_size": 900_000 + rng.randrange(50_000),
        "lines": [[1, local.isoformat(), f"Started GET /{page.lower().replace('#', '/')}"],
                  [1, local.isoformat(), f"Completed {total_time:.1f}ms ({db_calls} queries)"]],
    }
    record["allocated_memory"] = record["allocated_bytes"] + 40 * record["allocated_objects"]
    if app_env.startswith("api"):
        record["api_calls"] = rng.randrange(0, 3)
        record["api_time"] = round(total_time * rng.random() * 0.2, 3)
        record["caller_id"] = rng.choice(["shop-production-web", "mobile-production-ios"])
        record["caller_action"] = rng.choice(PAGES["shop"])
    if rng.random() < 0.3:
        record["wait_time"] = round(rng.random() * 20, 3)
    if record["code"] >= 500 or rng.random() < 0.01:
        record["exceptions"] = rng.sample(EXCEPTIONS, 1)
        record["severity"] = 3
    elif rng.random() < 0.05:
        record["severity"] = 2
    else:
        record["severity"] = 1
    return app_env, record


def stored_requests(count: int) -> list[bytes]:
    """Each request as the logjam listener stores it: the agent's four frames through its decoder."""
    import orjson

    from logport.config import LogjamConfig
    from logport.protocols import logjam as lj
    from logport.servers.logjam_ingest import MessageDecoder

    rng = random.Random(28)
    decoder = MessageDecoder(LogjamConfig())
    bodies = []
    for n in range(count):
        app_env, record = request(rng, n, count)
        topic = "logs." + app_env.replace("-", ".")
        frames = [app_env.encode(), topic.encode(), orjson.dumps(record),
                  lj.Meta(lj.NO_COMPRESSION, 1, record["started_ms"], n + 1).pack()]
        message = lj.read_pull_message(frames)
        assert isinstance(message, lj.DataMessage)
        bodies.append(decoder.accept(message, "127.0.0.1:5000", "pull").stored)
    return bodies


# --- the job a PySpark user would write --------------------------------------------------------

def hand_written_job(spark: SparkSession, jsonl: str, out: str) -> None:
    """minutes, totals and quants from the JSON lines, in DataFrame code, written as Parquet."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from logport.lake.resources import DEFAULT_RESOURCES
    from logport.lake.sketch import HIST_BOUNDS

    resources = DEFAULT_RESOURCES.names
    record = StructType([StructField("action", StringType()), StructField("started_at", StringType()),
                         StructField("code", LongType()), StructField("severity", LongType()),
                         StructField("exceptions", ArrayType(StringType())),
                         *[StructField(r, DoubleType()) for r in resources]])
    schema = StructType([StructField("record", record),
                         StructField("option", StructType([StructField("app_env", StringType()),
                                                           StructField("topic", StringType())]))])
    r = spark.read.schema(schema).json(jsonl).where(F.col("option.topic").startswith("logs."))
    page = F.coalesce(F.col("record.action"), F.lit("Unknown#unknown_method"))
    total = F.col("record.total_time")
    requests = r.select(
        F.regexp_extract("option.app_env", r"^(.*)-([^-]*)$", 1).alias("app"),
        F.regexp_extract("option.app_env", r"^(.*)-([^-]*)$", 2).alias("env"),
        F.substring("record.started_at", 1, 10).alias("date"),
        (F.substring("record.started_at", 12, 2).cast("int") * 60
         + F.substring("record.started_at", 15, 2).cast("int")).cast("smallint").alias("minute"),
        page.alias("page"), F.concat(F.lit("::"), F.regexp_extract(page, r"^([^:#]*)", 1)).alias("module"),
        F.coalesce(F.col("record.code"), F.lit(500)).cast("string").alias("code"),
        F.coalesce(F.col("record.severity"), F.lit(1)).cast("string").alias("severity"),
        *[(F.when(total.isNull() | (total == 0), 1.0).otherwise(total) if name == "total_time"
           else F.col(f"record.{name}")).alias(name) for name in resources])
    scoped = requests.withColumn("scoped", F.explode(F.array(
        F.struct(F.lit("action").alias("scope"), F.col("page").alias("page")),
        F.struct(F.lit("module").alias("scope"), F.col("module").alias("page")),
        F.struct(F.lit("all").alias("scope"), F.lit("all_pages").alias("page"))))
    ).select("*", "scoped.scope").withColumn("page", F.col("scoped.page")).drop("scoped", "module").persist()
    t = F.col("total_time")
    values: list[Column] = [F.count(F.lit(1)).alias("count")]
    for name in resources:
        values += [F.sum(name).alias(name), F.sum(F.col(name) * F.col(name)).alias(f"{name}_sq"),
                   F.max(name).alias(f"{name}_max")]
    values += [F.sum((t < 100).cast("long")).alias("apdex_happy"), F.sum((t < 500).cast("long")).alias(
        "apdex_satisfied"), F.sum(((t >= 500) & (t < 2000)).cast("long")).alias("apdex_tolerating"),
               F.sum((t >= 2000).cast("long")).alias("apdex_frustrated")]

    def counts(keys: list[str], column: str) -> DataFrame:
        per = scoped.groupBy(*keys, column).agg(F.count(F.lit(1)).alias("n"))
        return per.groupBy(*keys).agg(F.map_from_entries(F.collect_list(F.struct(column, "n"))).alias(column))

    for name, keys in (("minutes", ["app", "env", "date", "minute", "scope", "page"]),
                       ("totals", ["app", "env", "date", "scope", "page"])):
        rows = (scoped.groupBy(*keys).agg(*values).join(counts(keys, "code"), keys).join(counts(keys, "severity"),
                                                                                        keys))
        rows.write.mode("overwrite").partitionBy("date").parquet(f"{out}/{name}")
    bucket = F.lit(HIST_BOUNDS[-1])
    for bound in reversed(HIST_BOUNDS[:-1]):
        bucket = F.when(F.col("value") <= bound, F.lit(bound)).otherwise(bucket)
    kinds = [("t", n) for n in resources if n.endswith("_time")] + [("m", n) for n in ("allocated_memory",
                                                                                      "allocated_bytes")]
    quants = (scoped.where(F.col("scope") != "module").select(
        "app", "env", "date", "page", F.explode(F.array(*[
            F.struct(F.lit(kind).alias("kind"), F.lit(name).alias("resource"),
                     (F.col(name) / 1024 if kind == "m" else F.col(name)).alias("value")) for kind, name in kinds
        ])).alias("q")).select("app", "env", "date", "page", "q.*").where(F.col("value") > 0)
        .withColumn("quant", bucket).groupBy("app", "env", "date", "page", "kind", "resource", "quant")
        .agg(F.count(F.lit(1)).alias("count")))
    quants.write.mode("overwrite").partitionBy("date").parquet(f"{out}/quants")
    scoped.unpersist()


# --- the run -----------------------------------------------------------------------------------

def prepare(work: Path, count: int) -> tuple[str, Path, int]:
    """(data directory, JSON lines, stored bytes) of `count` requests under `work`, made now unless it has them."""
    work.mkdir(parents=True, exist_ok=True)
    data_dir, jsonl, marker = work / "data", work / "requests.jsonl", work / "requests.json"
    if marker.exists() and json.loads(marker.read_text()).get("requests") == count:
        print(f"using the {count:,} requests stored in {work}", file=sys.stderr)
        return str(data_dir), jsonl, int(json.loads(marker.read_text())["stored_bytes"])
    shutil.rmtree(data_dir, ignore_errors=True)
    print(f"generating {count:,} logjam requests ...", file=sys.stderr)
    bodies = stored_requests(count)
    asyncio.run(store_batches(str(data_dir), bodies))
    write_json_lines(jsonl, bodies)
    stored = sum(8 + len(b) for b in bodies)
    marker.write_text(json.dumps({"requests": count, "stored_bytes": stored}))
    return str(data_dir), jsonl, stored


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from logport.spark import pipeline

    work = Path(args.dir or tempfile.mkdtemp(prefix="logport-bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data_dir, jsonl, stored = prepare(work, args.requests)
        warm_dir, warm_jsonl, _ = prepare(work / "warm-up", min(WARM_UP, args.requests))
        spark = pipeline.spark_session(args.master, "logport-bench-pipeline")
        spark.sparkContext.setLogLevel("ERROR")
        parser = argparse.ArgumentParser()
        pipeline.add_arguments(parser)

        def jobs(data: str, lines: Path, out: Path) -> dict[str, Callable[[], object]]:
            common = ["--data-dir", data, "--rebuild", "--quiet", "--master", args.master]
            batch = parser.parse_args(["batch", *common, "--out", str(out / "lake-batch")])
            stream = parser.parse_args(["stream", *common, "--out", str(out / "lake-stream"), "--available-now",
                                        "--max-bytes-per-trigger", str(args.max_bytes_per_trigger)])
            return {"logport pipeline batch": lambda: pipeline.main(batch),
                    "logport pipeline stream --available-now": lambda: pipeline.main(stream),
                    HAND: lambda: hand_written_job(spark, str(lines), str(out / "hand"))}

        for action in jobs(warm_dir, warm_jsonl, work / "warm-up").values():  # the JVM's JIT, Python workers
            action()
        load_before = load_average()
        built = [name for name in pipeline.DEFAULT_OUTPUTS if pipeline.load_builder(name) is not None]
        sides = jobs(data_dir, jsonl, work)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for r in range(args.rounds):
            for name, action in (sides.items() if r % 2 == 0 else reversed(sides.items())):
                times[name].append(timed(action))
                print(f"round {r + 1}: {name}: {times[name][-1][0]:.1f} s", file=sys.stderr)
        spark.stop()
        n = args.requests
        best = {name: min(values) for name, values in times.items()}
        hand = best[HAND]
        print(f"# {n:,} logjam requests: stored {stored / 1e6:.0f} MB, JSON lines {jsonl.stat().st_size / 1e6:.0f} MB; "
              f"master {args.master}; best of {args.rounds} rounds")
        print(f"# the pipeline's table builders: {', '.join(built)}")
        print(f"# load average before: {load_before}, after: {load_average()}")
        table(["job", "seconds", "requests/s", "x hand-written", "CPU-s", "CPU-s per 1M requests"],
              [[name, seconds, n / seconds, hand[0] / seconds, cpu, cpu * 1e6 / n]
               for name, (seconds, cpu) in best.items()])
        print(f"\ncommand: logport bench pipeline --requests {n} --master '{args.master}' --rounds {args.rounds}")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0
