"""`logport pipeline`: per-minute traffic and logjam request statistics from stored events, to Parquet + HTML.

Batch (default) or streaming (`--stream`, exactly-once through Spark's
checkpoint), over a data directory (`--data-dir`) or a running hub
(`--server`). Runs unchanged under spark-submit (see README "Spark").
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logport.errors import LogportError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# The time metrics of a logjam request (milliseconds); any of them may be missing from a record.
TIME_METRICS = ["total_time", "db_time", "view_time", "api_time", "gc_time", "memcache_time", "redis_time",
                "search_time"]
PERCENTILES = [0.5, 0.95, 0.99]
# percentile_approx accuracy: the rank error of a percentile is at most 1/ACCURACY of the group's count.
ACCURACY = 10000
# Apdex buckets of total_time (ms), as the logjam importer: happy < 100 <= satisfied < 500 <= tolerating
# < 2000 <= frustrated. score = (happy + satisfied + tolerating / 2) / count.
APDEX_HAPPY_MS, APDEX_SATISFIED_MS, APDEX_TOLERATING_MS = 100.0, 500.0, 2000.0
# Logjam severities (Ruby Logger levels).
SEVERITIES = ["debug", "info", "warn", "error", "fatal", "unknown"]
SOURCES = ["forward", "lumberjack", "logjam"]
OUTPUTS = ["traffic", "requests", "app_minutes", "exceptions"]
# Written only when asked for (--outputs events): every event, so the hubs' retention can be short.
EXTRA_OUTPUTS = ["events"]
PARTITIONS = {"events": ["date", "segment"]}  # the others: by date
LOOPBACK = "127.0.0.1"  # where a local Spark listens (driver, block manager, UI)


def add_arguments(p: argparse.ArgumentParser) -> None:
    # `logport pipeline batch|stream ...`: the leading word also lets `logport pipeline` pass the options on.
    p.add_argument("mode", nargs="?", choices=["batch", "stream"], default="batch",
                   help="batch (default) or stream (the same as --stream)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="read this data directory")
    where.add_argument("--server", action="append",
                       help="read running hubs over the segment protocol: HOST:PORT, repeated or comma-separated "
                            "(several hubs as one source)")
    p.add_argument("--segments", help="segment names or globs, comma-separated (default: all)")
    p.add_argument("--timeout", type=float,
                   help="with --server: seconds a hub that does not answer is tried again before the run fails "
                        "naming it (the source's timeout, default 10)")
    p.add_argument("--out", default="pipeline-out", help="output directory: Parquet tables + report.html")
    p.add_argument("--report", help="HTML report path (default: OUT/report.html)")
    p.add_argument("--stream", action="store_true", help="run as a streaming query with a checkpoint")
    p.add_argument("--checkpoint", help="checkpoint directory (default: OUT/_checkpoints)")
    p.add_argument("--available-now", action="store_true",
                   help="with --stream: process what is stored now (in several batches), then stop")
    p.add_argument("--duration", type=float, default=0.0,
                   help="with --stream: stop after this many seconds (0: run until interrupted)")
    p.add_argument("--trigger-seconds", type=float, default=10.0, help="with --stream: micro-batch interval")
    p.add_argument("--watermark", default="2 minutes",
                   help="with --stream: how late an event may arrive; a minute is written once the watermark passes it")
    p.add_argument("--max-bytes-per-trigger", type=int, help="with --stream: admission control per micro-batch")
    p.add_argument("--partition-bytes", type=int, help="bytes of a segment per Spark partition")
    p.add_argument("--outputs", default=",".join(OUTPUTS),
                   help="tables to compute, comma-separated (default: all of " + ", ".join(OUTPUTS) + "; also: "
                        + ", ".join(EXTRA_OUTPUTS) + ", every event with its record as VARIANT)")
    p.add_argument("--record", choices=["variant", "json"], default="variant",
                   help="how the source hands records over: VARIANT (default) or JSON text (the statistics are the same)")
    p.add_argument("--top-exceptions", type=int, default=20, help="exceptions listed in the report")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--spark-ui", action="store_true",
                   help="with a local master: serve Spark's web UI on 127.0.0.1 (default: no UI)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def configured_master() -> str | None:
    """The master something other than `--master` chose: a running SparkContext's, else the JVM's spark.master.

    The JVM is spark-submit's own when the job runs under it (its --master and --conf are the JVM's
    system properties), else one launched now with PYSPARK_SUBMIT_ARGS and spark-defaults.conf. A
    SparkConf made before any JVM exists holds nothing of these, so the JVM has to come first.
    """
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return active.master
    SparkContext._ensure_initialized()  # pyspark's own first step of creating a context
    return SparkConf().get("spark.master")


def master_set_outside() -> bool:
    """Whether a master may come from outside this process, so only the JVM can tell which.

    Outside are spark-submit's JVM (running already), PYSPARK_SUBMIT_ARGS, MASTER, -Dspark.master in
    SPARK_SUBMIT_OPTS, and the spark-defaults.conf or spark-env.sh that the JVM we launch would read.
    Without any of them the master is ours to choose before a JVM starts, with the environment it
    starts with (SPARK_LOCAL_IP).
    """
    from pyspark import SparkContext
    from pyspark.find_spark_home import _find_spark_home

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return True
    if os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell").split() != ["pyspark-shell"]:
        return True
    if os.environ.get("MASTER") or "spark.master" in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        return True
    conf_dir = Path(os.environ.get("SPARK_CONF_DIR") or Path(_find_spark_home()) / "conf")
    return any((conf_dir / name).exists() for name in ("spark-defaults.conf", "spark-env.sh"))


def spark_session(master: str | None, app_name: str = "logport-pipeline", ui: bool = False) -> SparkSession:
    """The job's session: the master as README "Spark" says; a local one on 127.0.0.1, its UI only with `ui`."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    import logport.spark

    builder = (SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))  # the job prints its own progress lines
    starting = SparkContext._active_spark_context is None
    if master:
        builder = builder.master(master)
    else:
        master = configured_master() if master_set_outside() else None
        if not master:
            master = "local[*]"
            builder = builder.master(master)
    if master.startswith("local"):
        # Local Python workers must be this interpreter (it has logport), not whatever `python3` is.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if starting:
            builder = on_loopback(builder, ui)
    spark = builder.getOrCreate()
    logport.spark.register(spark)
    return spark


def on_loopback(builder: SparkSession.Builder, ui: bool) -> SparkSession.Builder:
    """A local Spark bound to 127.0.0.1, its UI off unless `ui` (SPARK_LOCAL_IP, when set, wins).

    Left alone, Spark binds the driver to the first non-loopback address ("Your hostname resolves to
    a loopback address: 127.0.0.1; using 192.0.2.2 instead") and its UI to every interface, which
    only SPARK_LOCAL_IP changes, and only in the environment the JVM starts with.
    """
    from pyspark import SparkContext

    builder = builder.config("spark.ui.enabled", "true" if ui else "false")
    if "SPARK_LOCAL_IP" in os.environ:
        return builder
    if SparkContext._gateway is None:  # the JVM starts with getOrCreate() and this environment
        os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    elif ui:
        print("logport pipeline: Spark's UI listens on every interface (the JVM started before the master "
              f"was known); set SPARK_LOCAL_IP={LOOPBACK} to keep it on loopback", file=sys.stderr)
    return builder.config("spark.driver.host", LOOPBACK).config("spark.driver.bindAddress", LOOPBACK)


def servers(args: argparse.Namespace) -> list[str]:
    """--server's hubs: each occurrence may list several, comma-separated."""
    value = args.server
    items = [value] if isinstance(value, str) else (value or [])
    return [s.strip() for item in items for s in item.split(",") if s.strip()]


def source_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"path": args.data_dir} if args.data_dir else {"server": ",".join(servers(args))}
    if args.segments:
        options["segments"] = args.segments
    options["record"] = getattr(args, "record", "variant")
    if getattr(args, "timeout", None):
        options["timeout"] = str(args.timeout)
    if args.partition_bytes:
        options["partitionBytes"] = str(args.partition_bytes)
    if args.stream and args.max_bytes_per_trigger:
        options["maxBytesPerTrigger"] = str(args.max_bytes_per_trigger)
    return options


# --- the statistics: DataFrame -> DataFrame, the same for batch and streaming -------------------

def _minute(df: DataFrame) -> Column:
    from pyspark.sql import functions as F

    return F.window(df["time"], "1 minute").start


def traffic(events: DataFrame) -> DataFrame:
    """Per segment, tag and minute: events, bytes (record JSON, or raw bytes when opaque), events per source.

    Opaque events carry no time: a batch run counts them in rows whose minute and date are null (the
    Parquet partition date=__HIVE_DEFAULT_PARTITION__); a streaming run leaves them out (they are always
    behind the watermark).
    """
    from pyspark.sql import functions as F

    text = F.to_json("record") if _is_variant(events, "record") else F.col("record")
    size = F.coalesce(F.octet_length(text), F.octet_length("raw"), F.lit(0))
    per_source = [F.sum(F.when(F.col("source") == s, 1).otherwise(0)).alias(f"{s}_events") for s in SOURCES]
    counts = [F.count(F.lit(1)).alias("events"), F.sum(size).alias("bytes"), *per_source,
              F.sum(F.when(F.col("raw").isNotNull(), 1).otherwise(0)).alias("opaque_events")]
    tag = F.coalesce("tag", F.lit("")).alias("tag")
    # window() drops rows without a time, hence the second aggregate for those.
    timed = _finish(events.groupBy("segment", tag, F.window("time", "1 minute")).agg(*counts))
    if events.isStreaming:
        return timed
    untimed = (events.where(F.col("time").isNull()).groupBy("segment", tag).agg(*counts)
               .withColumn("minute", F.lit(None).cast("timestamp")).withColumn("date", F.lit(None).cast("string")))
    return timed.unionByName(untimed)


def _finish(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return (df.withColumn("minute", F.col("window.start")).drop("window")
            .withColumn("date", F.date_format("minute", "yyyy-MM-dd")))


def _is_variant(df: DataFrame, column: str) -> bool:
    return dict(df.dtypes).get(column) == "variant"


def requests(events: DataFrame) -> DataFrame:
    """Logjam requests, one row each: records with `action` on a logs.* topic or tag, or with `action` and `total_time`.

    Read from the record's paths as VARIANT (the source's default: no JSON parsing, no schema) or, for a
    record given as JSON text, with from_json and the same fields' schema.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    fields = [StructField("action", StringType()), StructField("code", LongType()),
              StructField("severity", LongType()), StructField("exceptions", ArrayType(StringType())),
              StructField("app", StringType()), StructField("env", StringType())]
    fields += [StructField(m, DoubleType()) for m in TIME_METRICS]
    events = events.where(F.col("record").isNotNull())
    if _is_variant(events, "record"):
        parsed = events.withColumn("r", F.struct(*[
            F.try_variant_get("record", f"$.{f.name}", f.dataType.simpleString()).alias(f.name) for f in fields]))
        topic = F.try_variant_get("option", "$.topic", "string")
        option_app_env = F.try_variant_get("option", "$.app_env", "string")
    else:
        parsed = events.withColumn("r", F.from_json("record", StructType(fields), {"mode": "PERMISSIVE"}))
        topic = F.get_json_object("option", "$.topic")
        option_app_env = F.get_json_object("option", "$.app_env")
    # The logjam listener keeps the topic (logs.<app>.<env> for requests) in the option and tags the batch
    # logjam.<app-env>.<topic>; a logs.* tag is what other shippers of logjam requests may use.
    is_request = F.col("r.action").isNotNull() & (
        topic.startswith("logs.") | F.col("tag").startswith("logs.") | F.col("r.total_time").isNotNull())
    app_env = F.coalesce(option_app_env,
                         F.when(F.col("r.app").isNotNull(), F.concat_ws("-", "r.app", "r.env")),
                         F.col("tag"))
    return parsed.where(is_request).select(
        "time", app_env.alias("app_env"), F.col("r.action").alias("action"), F.col("r.code").alias("code"),
        F.col("r.severity").alias("severity"), F.col("r.exceptions").alias("exceptions"),
        *[F.col(f"r.{m}").alias(m) for m in TIME_METRICS])


def _apdex_and_codes(total: Column) -> list[Column]:
    from pyspark.sql import functions as F

    def count_if(cond: Column, name: str) -> Column:
        return F.sum(F.when(cond, 1).otherwise(0)).alias(name)

    code = F.col("code")
    columns = [
        count_if(total < APDEX_HAPPY_MS, "apdex_happy"),
        count_if((total >= APDEX_HAPPY_MS) & (total < APDEX_SATISFIED_MS), "apdex_satisfied"),
        count_if((total >= APDEX_SATISFIED_MS) & (total < APDEX_TOLERATING_MS), "apdex_tolerating"),
        count_if(total >= APDEX_TOLERATING_MS, "apdex_frustrated"),
    ]
    columns += [count_if((code >= c * 100) & (code < c * 100 + 100), f"code_{c}xx") for c in range(1, 6)]
    columns.append(count_if(code.isNull() | (code < 100) | (code >= 600), "code_other"))
    columns += [count_if(F.col("severity") == i, f"severity_{name}") for i, name in enumerate(SEVERITIES)]
    columns.append(count_if(F.size(F.coalesce("exceptions", F.array())) > 0, "with_exceptions"))
    return columns


def _apdex_score(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.withColumn("apdex", (F.col("apdex_happy") + F.col("apdex_satisfied")
                                   + F.col("apdex_tolerating") / 2) / F.col("count"))


def request_stats(reqs: DataFrame) -> DataFrame:
    """Per app-env, action and minute: count; mean/p50/p95/p99/max of each time metric; apdex; codes; severities."""
    from pyspark.sql import functions as F

    metrics: list[Column] = []
    for m in TIME_METRICS:
        metrics += [F.mean(m).alias(f"{m}_mean"), F.max(m).alias(f"{m}_max"),
                    F.percentile_approx(m, PERCENTILES, ACCURACY).alias(f"{m}_pct")]
    out = (reqs.groupBy("app_env", "action", F.window("time", "1 minute"))
           .agg(F.count(F.lit(1)).alias("count"), *metrics, *_apdex_and_codes(F.col("total_time"))))
    for m in TIME_METRICS:
        out = out.select("*", *[F.col(f"{m}_pct")[i].alias(f"{m}_p{int(p * 100)}") for i, p in enumerate(PERCENTILES)]
                         ).drop(f"{m}_pct")
    return _apdex_score(_finish(out))


def app_minute_stats(reqs: DataFrame) -> DataFrame:
    """Per app-env and minute (every action together): count, total_time percentiles, apdex, codes."""
    from pyspark.sql import functions as F

    out = (reqs.groupBy("app_env", F.window("time", "1 minute"))
           .agg(F.count(F.lit(1)).alias("count"), F.mean("total_time").alias("total_time_mean"),
                F.max("total_time").alias("total_time_max"),
                F.percentile_approx("total_time", PERCENTILES, ACCURACY).alias("pct"),
                *_apdex_and_codes(F.col("total_time"))))
    out = out.select("*", *[F.col("pct")[i].alias(f"total_time_p{int(p * 100)}") for i, p in enumerate(PERCENTILES)]
                     ).drop("pct")
    return _apdex_score(_finish(out))


def exception_counts(reqs: DataFrame) -> DataFrame:
    """Per app-env, action, minute and exception class: how many requests raised it."""
    from pyspark.sql import functions as F

    exploded = reqs.where(F.size(F.coalesce("exceptions", F.array())) > 0).select(
        "time", "app_env", "action", F.explode(F.array_distinct("exceptions")).alias("exception"))
    out = exploded.groupBy("app_env", "action", "exception", F.window("time", "1 minute")).agg(
        F.count(F.lit(1)).alias("count"))
    return _finish(out)


def event_rows(events: DataFrame) -> DataFrame:
    """Every event as the source reads it (record as VARIANT), with its date (yyyy-MM-dd, UTC) to partition
    by; opaque events have none (date=__HIVE_DEFAULT_PARTITION__)."""
    from pyspark.sql import functions as F

    return events.withColumn("date", F.date_format("time", "yyyy-MM-dd"))


def statistics(events: DataFrame, outputs: list[str] = OUTPUTS) -> dict[str, DataFrame]:
    """The output tables by name (the lazy DataFrames; nothing runs yet)."""
    reqs = requests(events)
    build = {"traffic": lambda: traffic(events), "requests": lambda: request_stats(reqs),
             "app_minutes": lambda: app_minute_stats(reqs), "exceptions": lambda: exception_counts(reqs),
             "events": lambda: event_rows(events)}
    return {name: build[name]() for name in outputs}


def output_names(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = sorted(set(names) - set(OUTPUTS) - set(EXTRA_OUTPUTS))
    if unknown or not names:
        raise SystemExit(f"logport pipeline: --outputs {spec!r}: choose from {', '.join(OUTPUTS + EXTRA_OUTPUTS)}")
    return names


# --- running it ------------------------------------------------------------------------------

class Progress:
    """Prints progress lines to stderr: tasks of the running stages (batch), rows and batches (streaming)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.started:7.1f}s] {message}", file=sys.stderr, flush=True)

    def watch(self, poll: Callable[[], str | None], interval: float = 2.0, final: bool = False) -> None:
        """Print poll()'s line every `interval` seconds when it changed; with `final`, once more at stop()."""
        def run() -> None:
            last = None
            while True:
                stopping = self._stop.wait(interval)
                if stopping and not final:
                    return
                line = poll()
                if line and line != last:
                    self.say(line)
                    last = line
                if stopping:
                    return
        self._thread = threading.Thread(target=run, name="pipeline-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class StageProgress:
    """Poll for Progress.watch: `stage N: done/total tasks` of every stage running now, and of each
    stage of this run that finished since the last poll with its final count (also one that started
    and finished between two polls)."""

    def __init__(self, spark: SparkSession) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.earlier_jobs = set(self.tracker.getJobIdsForGroup(None))  # not this run's
        self.finished_jobs: set[int] = set()
        self.shown: dict[int, tuple[int, int]] = {}  # running stages: the count last shown
        self.done: set[int] = set()  # stages whose final count is shown

    def _stage_ids(self) -> set[int]:
        """The stages of this run's jobs not done with yet (a job lists all its stages when it starts)."""
        ids: set[int] = set()
        for job_id in self.tracker.getJobIdsForGroup(None):
            if job_id in self.earlier_jobs or job_id in self.finished_jobs:
                continue
            job = self.tracker.getJobInfo(job_id)
            if job is None:
                continue
            ids.update(job.stageIds)
            if job.status != "RUNNING":  # its stages are looked at once more, now
                self.finished_jobs.add(job_id)
        return ids - self.done

    def __call__(self) -> str | None:
        active = set(self.tracker.getActiveStageIds())
        parts = []
        for stage_id in sorted(self._stage_ids() | active | set(self.shown)):
            info = self.tracker.getStageInfo(stage_id)
            if info is None:
                continue
            count = (info.numCompletedTasks, info.numTasks)
            if stage_id in active:
                self.shown[stage_id] = count
            else:
                # Finished: its final count, unless a poll showed it already (a stage stays active for a
                # moment after its last task). Never seen running and no task done: it waits, or it was
                # skipped (its shuffle output was there already).
                last = self.shown.pop(stage_id, None)
                if last is None and not count[0]:
                    continue
                self.done.add(stage_id)
                if last == count:
                    continue
            parts.append(f"stage {stage_id}: {count[0]}/{count[1]} tasks")
        return "; ".join(parts) or None


def run_batch(spark: SparkSession, args: argparse.Namespace, out: Path, progress: Progress) -> dict[str, int]:
    from pyspark.sql import functions as F

    events = spark.read.format("logport").options(**source_options(args)).load()
    progress.watch(StageProgress(spark), interval=0.5, final=True)
    try:
        # Read the events once (the four statistics use them) and count them for the progress line.
        events = events.persist()
        counts = events.agg(F.count(F.lit(1)).alias("rows"), F.countDistinct("segment", "offset").alias("batches")).first()
        assert counts is not None
        progress.say(f"read {counts['rows']} rows from {counts['batches']} stored batches")
        written = {"events": int(counts["rows"])}
        for name, df in statistics(events, output_names(args.outputs)).items():
            df.write.mode("overwrite").partitionBy(*PARTITIONS.get(name, ["date"])).parquet(str(out / name))
            progress.say(f"wrote {out / name}")
        events.unpersist()
    finally:
        progress.stop()
    return written


def run_stream(spark: SparkSession, args: argparse.Namespace, out: Path, progress: Progress) -> dict[str, int]:
    from pyspark.errors import StreamingQueryException

    events = spark.readStream.format("logport").options(**source_options(args)).load()
    events = events.withWatermark("time", args.watermark)
    checkpoint = Path(args.checkpoint) if args.checkpoint else out / "_checkpoints"
    queries = []
    for name, df in statistics(events, output_names(args.outputs)).items():
        writer = (df.writeStream.format("parquet").outputMode("append").partitionBy(*PARTITIONS.get(name, ["date"]))
                  .option("path", str(out / name)).option("checkpointLocation", str(checkpoint / name))
                  .queryName(f"logport_{name}"))
        writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(
            processingTime=f"{args.trigger_seconds} seconds")
        query = writer.start()
        queries.append(query)
        # Start the next query once this one has planned its first batch: each start spawns Python
        # planner processes, and Spark gives a new Python worker only ~10 s to connect back, which
        # several starting at once on a busy machine can miss.
        started = time.monotonic()
        while query.isActive and query.lastProgress is None and time.monotonic() - started < 60:
            time.sleep(0.2)
        first = query.recentProgress[:1]
        if first and first[0]["batchId"] > 0:  # a restart: say where the checkpoint took it up
            progress.say(f"{query.name}: resumed from its checkpoint at micro-batch {first[0]['batchId']}")

    def poll() -> str | None:
        lines = []
        for q in queries:
            done = [p for p in q.recentProgress if p["numInputRows"]]
            if done:
                lines.append(f"{q.name}: {len(done)} batches, {sum(p['numInputRows'] for p in done)} rows read")
        return "; ".join(lines) or None

    progress.watch(poll)
    try:
        deadline = time.monotonic() + args.duration if args.duration > 0 else None
        for q in queries:
            while q.isActive:
                remaining = 5.0 if deadline is None else min(5.0, max(0.0, deadline - time.monotonic()))
                if q.awaitTermination(max(1, int(remaining))):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
    except KeyboardInterrupt:
        progress.say("interrupted: stopping the queries (the checkpoint keeps the position)")
    except StreamingQueryException:  # one failed: the others are stopped, and QueryFailed below says why
        pass
    finally:
        for q in queries:
            q.stop()
        progress.stop()
    written = {}
    for q in queries:
        done = [p for p in q.recentProgress if p["numInputRows"]]
        written[q.name] = rows = sum(p["numInputRows"] for p in done)
        progress.say(f"{q.name}: {len(done)} batches, {rows} rows read")
    failed = [(q.name, q.exception()) for q in queries if q.exception() is not None]
    if failed:  # a query that stopped on an error: the run failed (its checkpoint keeps the position)
        raise QueryFailed("; ".join(f"{name}: {_first_lines(str(e))}" for name, e in failed))
    return written


class QueryFailed(LogportError):
    """A streaming query of `logport pipeline` stopped on an error; a rerun resumes from its checkpoint."""


def _first_lines(text: str, limit: int = 2000) -> str:
    """A Spark error with its Python traceback: the lines that say what happened (the last of the traceback)."""
    lines = [line for line in text.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith((" ", "\t", "Traceback", "JVM stacktrace"))]
    return " | ".join(said)[:limit]


def collect_for_report(spark: SparkSession, out: Path, top_exceptions: int) -> dict[str, list[dict[str, Any]]]:
    """The small aggregates the report draws, read back from the Parquet output."""
    from pyspark.sql import functions as F

    def table(name: str) -> DataFrame | None:
        path = out / name
        return spark.read.parquet(str(path)) if path.exists() and any(path.rglob("*.parquet")) else None

    data: dict[str, list[dict[str, Any]]] = {"minutes": [], "actions": [], "exceptions": [], "traffic": []}
    minutes = table("app_minutes")
    if minutes is not None:
        data["minutes"] = [r.asDict() for r in minutes.groupBy("minute").agg(
            F.sum("count").alias("count"), F.max("total_time_p50").alias("p50"),
            F.max("total_time_p95").alias("p95"), F.max("total_time_p99").alias("p99"),
            F.sum("code_4xx").alias("code_4xx"), F.sum("code_5xx").alias("code_5xx"),
            F.sum("with_exceptions").alias("with_exceptions")).orderBy("minute").collect()]
    reqs = table("requests")
    if reqs is not None:
        data["actions"] = [r.asDict() for r in reqs.groupBy("app_env", "action").agg(
            F.sum("count").alias("count"),
            (F.sum(F.col("total_time_mean") * F.col("count")) / F.sum("count")).alias("mean"),
            F.max("total_time_p95").alias("worst_minute_p95"), F.max("total_time_max").alias("max"),
            ((F.sum("apdex_happy") + F.sum("apdex_satisfied") + F.sum("apdex_tolerating") / 2)
             / F.sum("count")).alias("apdex"),
            F.sum("code_5xx").alias("code_5xx")).orderBy(F.desc("mean")).limit(25).collect()]
    exc = table("exceptions")
    if exc is not None:
        data["exceptions"] = [r.asDict() for r in exc.groupBy("exception").agg(F.sum("count").alias("count"))
                              .orderBy(F.desc("count"), "exception").limit(top_exceptions).collect()]
    traf = table("traffic")
    if traf is not None:
        data["traffic"] = [r.asDict() for r in traf.groupBy("segment", "tag").agg(
            F.sum("events").alias("events"), F.sum("bytes").alias("bytes"),
            *[F.sum(f"{s}_events").alias(s) for s in SOURCES], F.sum("opaque_events").alias("opaque"),
            F.sum(F.when(F.col("minute").isNull(), F.col("events")).otherwise(0)).alias("untimed"),
            F.min("minute").alias("first"), F.max("minute").alias("last")).orderBy("segment", "tag").collect()]
    return data


def main(args: argparse.Namespace) -> int:
    from logport.spark.report import write_report
    from logport.spark.segments import SourceOptionError

    args.stream = args.stream or args.mode == "stream"
    if args.data_dir and not Path(args.data_dir).is_dir():  # say so before Spark starts, not in a task's traceback
        raise SourceOptionError(f"--data-dir {args.data_dir!r} is not a directory (a hub's data directory)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spark = spark_session(args.master, ui=args.spark_ui)
    spark.sparkContext.setLogLevel("WARN")
    progress = Progress(args.quiet)
    mode = "streaming" if args.stream else "batch"
    where = args.data_dir or ", ".join(servers(args))
    progress.say(f"{mode} run over {where}, output in {out}")
    if spark.sparkContext.uiWebUrl:
        progress.say(f"Spark UI: {spark.sparkContext.uiWebUrl}")
    written = run_stream(spark, args, out, progress) if args.stream else run_batch(spark, args, out, progress)
    report = Path(args.report) if args.report else out / "report.html"
    write_report(report, collect_for_report(spark, out, args.top_exceptions),
                 title=f"logport pipeline: {where}", written=written)
    progress.say(f"report: {report}")
    return 0


if __name__ == "__main__":  # spark-submit src/logport/spark/pipeline.py --data-dir ...
    parser = argparse.ArgumentParser(prog="pipeline.py", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
