"""`logport pipeline`: the lake of Parquet tables (docs/pipeline.md) from stored events, batch or streaming.

Each batch (a batch run, or a micro-batch of a streaming run) reads the source once and hands the events to the
table builders (logjam statistics, log analytics, traffic, events); the lake writer commits their tables with one
commit log entry. Runs unchanged under spark-submit (README "Spark").
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logport.errors import LogportError
from logport.lake.log import Entry, LakeError
from logport.lake.tables import Table, all_tables
from logport.spark.context import TIME_BASES, BatchContext, LakeSettings
from logport.spark.lakewriter import (
    CHECKPOINT_DIR,
    BatchOutput,
    LakeWriter,
    split_output,
    write_json,
)
from logport.spark.traffic import EVENTS, TRAFFIC

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Builder = Callable[[Any, BatchContext], Mapping[str, Any]]  # (events DataFrame, ctx) -> {table: DataFrame}

# The table builders, by the name --outputs knows them by: module:function, imported when a run asks for them (a
# logport without one of them runs the others).
BUILDERS = {
    "traffic": "logport.spark.traffic:traffic_tables",
    "logjam": "logport.spark.logjam:logjam_tables",
    "logs": "logport.spark.logs:log_tables",
    "events": "logport.spark.traffic:event_tables",
}
DEFAULT_OUTPUTS = ("traffic", "logjam", "logs")  # events only when named: it copies every event
ARCHIVES = {"events"}  # builders that keep events rather than count them: they take late events too
LEGACY_TABLES = ("app_minutes", "exceptions")  # the output of logport before the lake, which --rebuild removes too
REPORT_NEEDS = ("fastapi", "uvicorn", "duckdb", "starlette")  # the UI's libraries, which spark-package leaves out
LOOPBACK = "127.0.0.1"  # where a local Spark listens (driver, block manager, UI)
CHECKPOINT_MARK = "logport-lake.json"  # in a streaming checkpoint: the lake batch id of its micro-batch 0
# An event time further than this ahead of the clock does not move the watermark (a producer's broken clock would
# otherwise drop everything after it)
FUTURE_LIMIT_US = 86_400 * 1_000_000
INTERVAL_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
                  "d": 86400, "day": 86400}


class PipelineOptionError(LogportError):
    """An option of `logport pipeline` that cannot be used (names the option and the value)."""


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
    p.add_argument("--out", default="pipeline-out", help="the lake: Parquet tables, commit log, report.html")
    p.add_argument("--report", help="HTML report path (default: OUT/report.html)")
    p.add_argument("--outputs", default=",".join(DEFAULT_OUTPUTS),
                   help="table builders to run, comma-separated, from " + ", ".join(BUILDERS)
                        + " (events: every event, only when named)")
    p.add_argument("--time", choices=TIME_BASES,
                   help="file logjam requests by the producer's local wall time in started_at (local, as logjam) or "
                        "by the UTC instant; fixed at the lake's first run (default: the lake's, else local)")
    p.add_argument("--resources", metavar="FILE",
                   help="logjam's resource list (logjam_resources.yml's format); fixed at the lake's first run "
                        "(default: the lake's, else logjam_app's)")
    p.add_argument("--streams", metavar="FILE",
                   help="logjam's per-stream settings, the JSON its app serves at /admin/streams; messages of "
                        "streams not in it are dropped (default: every stream, logjam_app's defaults)")
    p.add_argument("--since", help="count only events at or after this time (ISO 8601; UTC unless it has an "
                                   "offset)")
    p.add_argument("--until", help="count only events before this time (ISO 8601; UTC unless it has an offset)")
    p.add_argument("--rebuild", action="store_true",
                   help="remove the lake in --out (tables, log, state, checkpoint) and start over")
    p.add_argument("--stream", action="store_true", help="run as a streaming query with a checkpoint")
    p.add_argument("--checkpoint", help="with --stream: checkpoint directory (default: OUT/_checkpoints)")
    p.add_argument("--available-now", action="store_true",
                   help="with --stream: process what is stored now (in several micro-batches), then stop")
    p.add_argument("--duration", type=float, default=0.0,
                   help="with --stream: stop after this many seconds (0: run until interrupted)")
    p.add_argument("--trigger-seconds", type=float, default=10.0, help="with --stream: micro-batch interval")
    p.add_argument("--watermark", default="2 minutes",
                   help="with --stream: how late an event may arrive: one older than the latest event time of "
                        "earlier micro-batches less this is not counted (its count is in the log entry)")
    p.add_argument("--max-bytes-per-trigger", type=int, help="with --stream: admission control per micro-batch")
    p.add_argument("--partition-bytes", type=int, help="bytes of a segment per Spark partition")
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
    if getattr(args, "timeout", None):
        options["timeout"] = str(args.timeout)
    if args.partition_bytes:
        options["partitionBytes"] = str(args.partition_bytes)
    if args.stream and args.max_bytes_per_trigger:
        options["maxBytesPerTrigger"] = str(args.max_bytes_per_trigger)
    return options


# --- options -----------------------------------------------------------------------------------

def parse_interval(option: str, text: str) -> float:
    """Seconds of an interval such as `2 minutes`, `90 seconds`, `1h`."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*", text.lower())
    if not match or match.group(2) not in INTERVAL_UNITS:
        raise PipelineOptionError(f"{option} {text!r} is not an interval such as '2 minutes', '90 seconds' or '1h'")
    return float(match.group(1)) * INTERVAL_UNITS[match.group(2)]


def parse_instant(option: str, text: str | None) -> int | None:
    """Microseconds since the epoch of an ISO 8601 date or time (UTC unless it has an offset)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise PipelineOptionError(f"{option} {text!r} is not an ISO 8601 date or time (2026-11-18, "
                                  "2026-11-18T10:00, 2026-11-18T10:00:00+01:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round(when.timestamp() * 1_000_000)


def output_names(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BUILDERS))
    if unknown or not names:
        raise PipelineOptionError(f"--outputs {spec!r}: choose from {', '.join(BUILDERS)}")
    return names


def load_builder(name: str) -> Builder | None:
    """The builder `name` of BUILDERS; None when this logport has no such module or function."""
    module_name, _, function = BUILDERS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:  # the builder is there, something it imports is not: a real error
            raise
        return None
    builder: Builder | None = getattr(module, function, None)
    return builder


def builders(spec: str, asked: bool, progress: Progress) -> list[tuple[str, Builder]]:
    """The builders of --outputs; one that this logport lacks is an error when asked for by name, else left out
    with a progress line."""
    found = []
    for name in output_names(spec):
        builder = load_builder(name)
        if builder is not None:
            found.append((name, builder))
        elif asked:
            raise PipelineOptionError(f"--outputs {name}: this logport has no {BUILDERS[name]}")
        else:
            progress.say(f"{name} tables: not built ({BUILDERS[name].partition(':')[0]} is not in this logport)")
    return found


# --- one batch -------------------------------------------------------------------------------

@dataclass
class LakeRun:
    """What every batch of a run shares: the lake and its settings, the builders and what selects the events."""

    writer: LakeWriter
    settings: LakeSettings
    builders: list[tuple[str, Builder]]
    progress: Progress
    streaming: bool
    streams: Mapping[str, Mapping[str, Any]] | None = None
    since_us: int | None = None
    until_us: int | None = None
    watermark_us: int | None = None  # streaming: how far behind the latest event time an event is still counted
    contract: dict[str, Table] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.contract = {**all_tables(self.settings.resources), TRAFFIC.name: TRAFFIC, EVENTS.name: EVENTS}

    def bound_us(self) -> int | None:
        """The watermark now: events before it are not counted (streaming only; None before any event time)."""
        last = self.writer.last
        latest = last.info.get("max_time_us") if last is not None else None
        if self.watermark_us is None or latest is None:
            return None
        return int(latest) - self.watermark_us

    def run(self, events: DataFrame, batch: int, info: dict[str, Any]) -> Entry:
        """Count the batch's events, hand those selected to the builders, commit their tables."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        self.writer.discard_uncommitted()  # what an earlier try of this batch left
        bound = self.bound_us()
        micros = F.unix_micros("time")
        late = F.coalesce(micros < F.lit(bound), F.lit(False)) if bound is not None else F.lit(False)
        inside = F.lit(True)
        if self.since_us is not None:
            inside = inside & (micros >= F.lit(self.since_us))
        if self.until_us is not None:
            inside = inside & (micros < F.lit(self.until_us))
        inside = F.coalesce(inside, F.lit(False))  # an event without a time is in no window
        future = round(time.time() * 1_000_000) + FUTURE_LIMIT_US
        # deserialized: the serialized levels' unroll of VARIANT records ran a 1 GB driver out of heap (2M logjam
        # requests, local[2]), this one spills to disk
        events = events.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        releases: list[Callable[[], object]] = []  # the builders' (ctx.after_commit)
        try:
            counts = events.agg(
                F.count(F.lit(1)).alias("rows"), F.max(F.when(micros <= F.lit(future), micros)).alias("max_time"),
                F.sum(late.cast("int")).alias("late"), F.sum((~late & ~inside).cast("int")).alias("outside"),
            ).first()
            assert counts is not None
            rows, late_rows, outside = counts["rows"], counts["late"] or 0, counts["outside"] or 0
            previous = self.writer.last.info.get("max_time_us") if self.writer.last is not None else None
            latest = max((t for t in (previous, counts["max_time"]) if t is not None), default=None)
            output = BatchOutput(info={**info, "rows": rows, "late": late_rows, "outside": outside,
                                       "max_time_us": latest, "watermark_us": bound,
                                       "committed_at": datetime.now(UTC).isoformat(timespec="seconds")})
            if rows > outside:  # else nothing to build: the state stays as it is
                releases = self._build(events.where(inside), events.where(~late & inside), batch, output)
            entry = self.writer.commit(batch, output)
        finally:
            for release in releases:
                release()
            events.unpersist()
        files = sum(len(v) for v in entry.files.values())
        self.progress.say(f"batch {batch}: {rows} events read" + (f", {late_rows} behind the watermark" if late_rows
                          else "") + (f", {outside} outside --since/--until" if outside else "")
                          + f"; committed {files} files of {len(entry.files)} tables"
                          + (f" (compacted {sum(len(v) for v in entry.replaces.values())} files)"
                             if entry.replaces else ""))
        return entry

    def _build(self, selected: DataFrame, counted: DataFrame, batch: int,
               output: BatchOutput) -> list[Callable[[], object]]:
        """Run the builders: on the events `counted` (in --since/--until, not behind the watermark), archives
        on every one `selected` (late ones too: the watermark finalises counts, it does not lose events). Their
        tables are lazy (the commit writes them); what they persisted for the batch is returned, to release after
        it (ctx.after_commit), also when a builder failed."""
        spark = selected.sparkSession  # a micro-batch's: the streaming query's own session
        state_in, blob_in = self.writer.state_readers(spark)
        ctx = BatchContext(spark, batch, self.settings, self.streaming, self.streams, state_in, blob_in)
        try:
            for name, builder in self.builders:
                built = split_output(name, builder(selected if name in ARCHIVES else counted, ctx), self.contract)
                output.tables.update(built.tables)
                output.state.update(built.state)
        except BaseException:
            for release in ctx.after_commit:
                release()
            raise
        output.blobs.update(ctx.blobs_out)
        output.info["counters"] = dict(ctx.counters)
        return ctx.after_commit


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


# --- batch and streaming runs ------------------------------------------------------------------

def batch_offsets(options: dict[str, str], previous: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(from, to) per HUB/segment for a batch run: from where the lake's last batch ended (the start of a segment
    it never read) to the last whole frame now. Resolved here, so the log entry says exactly what was read."""
    from logport.spark.source import SegmentPlanner

    planner = SegmentPlanner({key.lower(): value for key, value in options.items()})
    try:
        names = planner.segments()
        start = planner.resolve(dict(previous) or "earliest", names, ending=False)
        start = {name: planner.check_start(name, offset) for name, offset in start.items()}
        return start, planner.resolve("latest", names, ending=True)
    finally:
        planner.close()


def run_batch(spark: SparkSession, args: argparse.Namespace, run: LakeRun) -> None:
    options = source_options(args)
    last = run.writer.last
    previous: dict[str, int] = dict(last.info.get("offsets") or {}) if last is not None else {}
    start, end = batch_offsets(options, previous)
    if all(end[name] <= start.get(name, 0) for name in end):
        run.progress.say("nothing new to read" + (f" since batch {last.batch}" if last is not None else ""))
        return
    options.update(startingOffsets=json.dumps(start), endingOffsets=json.dumps(end))
    events = spark.read.format("logport").options(**options).load()
    run.progress.watch(StageProgress(spark), interval=0.5, final=True)
    try:
        run.run(events, run.writer.next_batch(), {"mode": "batch", "offsets": {**previous, **end}})
    finally:
        run.progress.stop()


def stream_base(run: LakeRun, checkpoint: Path) -> int:
    """The lake batch id of the checkpoint's micro-batch 0: kept in the checkpoint while the lake's last batch is
    one of its own (or none came since it started); else the lake moved on (a batch run, --rebuild) and a new
    checkpoint starts from the lake's offsets."""
    mark = checkpoint / CHECKPOINT_MARK
    lake = str(run.writer.root.resolve())
    following = run.writer.next_batch()
    if checkpoint.is_dir() and any(checkpoint.iterdir()):
        try:
            held = json.loads(mark.read_bytes())
        except (OSError, ValueError):
            raise LakeError(f"checkpoint {str(checkpoint)!r} is not one of logport pipeline's (no readable "
                            f"{CHECKPOINT_MARK}): remove it, or choose another --checkpoint") from None
        if held.get("lake") != lake:
            raise LakeError(f"checkpoint {str(checkpoint)!r} is lake {held.get('lake')!r}'s, not {lake!r}: choose "
                            "another --checkpoint")
        last = run.writer.last
        if held["base"] == following or (last is not None and (last.info.get("stream") or {}).get("base")
                                         == held["base"]):
            return int(held["base"])
        run.progress.say(f"the lake has batches since checkpoint {checkpoint} (a batch run?): a new checkpoint "
                         "starts at the lake's offsets")
        shutil.rmtree(checkpoint)
    write_json(mark, {"base": following, "lake": lake})
    return following


def checkpoint_offsets(checkpoint: Path, micro_batch: int) -> dict[str, int]:
    """The source's end offsets of a micro-batch, as Spark's checkpoint holds them (`offsets/<n>`: a version line,
    the batch's metadata, then the source's offset JSON)."""
    lines = (checkpoint / "offsets" / str(micro_batch)).read_text().splitlines()
    offsets: dict[str, int] = json.loads(lines[2]) if len(lines) > 2 and lines[2] != "-" else {}
    return offsets


def run_stream(spark: SparkSession, args: argparse.Namespace, run: LakeRun, checkpoint: Path) -> None:
    from pyspark.errors import StreamingQueryException

    base = stream_base(run, checkpoint)
    options = source_options(args)
    last = run.writer.last
    if last is not None and last.info.get("offsets"):  # a new checkpoint starts where the lake ends
        options["startingOffsets"] = json.dumps(last.info["offsets"])

    def each(events: DataFrame, micro_batch: int) -> None:
        batch = base + micro_batch
        if run.writer.log.is_committed(batch):  # replayed: Spark did not record it done, the lake did
            run.progress.say(f"batch {batch} (micro-batch {micro_batch}) is committed already: skipped")
            return
        previous = (run.writer.last.info.get("offsets") or {}) if run.writer.last is not None else {}
        offsets = {**previous, **checkpoint_offsets(checkpoint, micro_batch)}
        run.run(events, batch, {"mode": "stream", "offsets": offsets, "stream": {"base": base, "batch": micro_batch}})

    writer = (spark.readStream.format("logport").options(**options).load().writeStream.foreachBatch(each)
              .option("checkpointLocation", str(checkpoint)).queryName("logport_pipeline"))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(
        processingTime=f"{args.trigger_seconds} seconds")
    query = writer.start()
    try:
        started = time.monotonic()
        while query.isActive and query.lastProgress is None and time.monotonic() - started < 60:
            time.sleep(0.2)
        first = query.recentProgress[:1]
        if first and first[0]["batchId"] > 0:  # a restart: say where the checkpoint took it up
            run.progress.say(f"{query.name}: resumed from its checkpoint at micro-batch {first[0]['batchId']}")
        deadline = time.monotonic() + args.duration if args.duration > 0 else None
        while query.isActive:
            remaining = 5.0 if deadline is None else min(5.0, max(0.0, deadline - time.monotonic()))
            if query.awaitTermination(max(1, int(remaining))):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
    except StreamingQueryException:
        pass  # query.exception() below says what
    except KeyboardInterrupt:
        run.progress.say("interrupted: stopping the query (the checkpoint and the lake keep the position)")
    finally:
        query.stop()
    failure = query.exception()
    if failure is not None:  # the run failed; the checkpoint and the lake keep the position
        raise QueryFailed(_first_lines(str(failure)))


class QueryFailed(LogportError):
    """A streaming query of `logport pipeline` stopped on an error; a rerun resumes from its checkpoint."""


def _first_lines(text: str, limit: int = 2000) -> str:
    """A Spark error with its Python traceback: the lines that say what happened (the last of the traceback)."""
    lines = [line for line in text.split("=== Streaming Query ===")[0].splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith((" ", "\t", "Traceback", "JVM stacktrace"))]
    return " | ".join(said)[:limit]


def write_report(out: Path, report: Path, progress: Progress) -> None:
    """report.html from the lake, by the UI's report module (logport.ui.report), when the driver has the UI's
    libraries (a spark-package environment leaves them out)."""
    try:
        from logport.ui.report import write_report as write_html
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] not in REPORT_NEEDS:
            raise
        print(f"logport pipeline: no report written: the static report needs {e.name}, which this Python lacks "
              "(the lake is written; draw the report where logport ui runs)", file=sys.stderr)
        return
    write_html(out, report)
    progress.say(f"report: {report}")


def main(args: argparse.Namespace) -> int:
    from logport.lake import resources
    from logport.spark import stream_settings
    from logport.spark.segments import SourceOptionError

    args.stream = args.stream or args.mode == "stream"
    if args.data_dir and not Path(args.data_dir).is_dir():  # say so before Spark starts, not in a task's traceback
        raise SourceOptionError(f"--data-dir {args.data_dir!r} is not a directory (a hub's data directory)")
    since, until = parse_instant("--since", args.since), parse_instant("--until", args.until)
    if since is not None and until is not None and since >= until:
        raise PipelineOptionError(f"--since {args.since} is not before --until {args.until}")
    watermark = round(parse_interval("--watermark", args.watermark) * 1_000_000) if args.stream else None
    chosen_resources = resources.load(args.resources) if args.resources else None
    streams = stream_settings.load(args.streams) if args.streams else None
    out = Path(args.out)
    checkpoint = Path(args.checkpoint) if args.checkpoint else out / CHECKPOINT_DIR
    progress = Progress(args.quiet)
    writer = LakeWriter(out)
    writer.lock()
    try:
        if args.rebuild:
            writer.rebuild([*all_tables(), TRAFFIC.name, EVENTS.name, *LEGACY_TABLES], checkpoint)
        settings = writer.settings(args.time, chosen_resources, resources_from=args.resources or "")
        chosen = builders(args.outputs, args.outputs != ",".join(DEFAULT_OUTPUTS), progress)
        spark = spark_session(args.master, ui=args.spark_ui)
        spark.sparkContext.setLogLevel("WARN")
        mode = "streaming" if args.stream else "batch"
        where = args.data_dir or ", ".join(servers(args))
        progress.say(f"{mode} run over {where}, lake {out} (time {settings.time_basis}; "
                     f"{', '.join(name for name, _ in chosen)})")
        if spark.sparkContext.uiWebUrl:
            progress.say(f"Spark UI: {spark.sparkContext.uiWebUrl}")
        run = LakeRun(writer, settings, chosen, progress, args.stream, streams, since, until, watermark)
        if args.stream:
            run_stream(spark, args, run, checkpoint)
        else:
            run_batch(spark, args, run)
    finally:
        writer.close()
    write_report(out, Path(args.report) if args.report else out / "report.html", progress)
    return 0


if __name__ == "__main__":  # spark-submit src/logport/spark/pipeline.py --data-dir ...
    parser = argparse.ArgumentParser(prog="pipeline.py", description=__doc__)
    add_arguments(parser)
    try:
        sys.exit(main(parser.parse_args()))
    except LogportError as e:
        print(f"logport pipeline: {e}", file=sys.stderr)
        sys.exit(2)
