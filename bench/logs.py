"""messages/s of the pipeline's log tables (levels, hosts, message patterns) over the test corpus's logs.

The corpus of tests/spark/logcorpus.py (225 templates of nginx, Rails, Java, Go, Python, Kubernetes, journald
and syslog messages, shipped as Fluent Bit, Filebeat and segment-protocol JSON ship them) is stored in a data
directory, then, after a warm-up round on a tenth of it: the `logport` source's read alone, the per-event work in
Spark (fields, level, masks: log_events), the whole of mine_batch (the aggregate, Drain on the driver over the
distinct masked messages), and Drain's share alone; with the distinct masked messages and patterns, CPU-seconds
of the whole session (JVM, Python workers, driver) and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark import session_cpu_seconds  # noqa: E402

from logport.config import StoreConfig  # noqa: E402
from logport.store import SegmentStore  # noqa: E402


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=2_000_000, help="log messages stored (default 2M)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after)")


async def store_corpus(data_dir: str, bodies: dict[str, list[bytes]]) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=data_dir, fsync="never"))
    try:
        for segment, items in bodies.items():
            for i in range(0, len(items), 64):
                await store.append(segment, items[i : i + 64])
    finally:
        await store.close()


def write_corpus(data_dir: Path, events: int, seed: int) -> None:
    from tests.spark.logcorpus import corpus, stored_bodies

    chunk = 200_000  # generated and stored in parts: the corpus of a few million does not fit memory twice
    for part, start in enumerate(range(0, events, chunk)):
        bodies, _ = stored_bodies(list(corpus(min(chunk, events - start), seed=seed + part, minutes=60)))
        asyncio.run(store_corpus(str(data_dir), bodies))


def measure(action: Callable[[], object]) -> tuple[float, float]:
    cpu = session_cpu_seconds()
    started = time.perf_counter()
    action()
    return time.perf_counter() - started, session_cpu_seconds() - cpu


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import logport.spark
    from logport.spark.context import BatchContext, LakeSettings
    from logport.spark.logs import log_events, mine, mine_batch
    from logport.spark.logs.miner import PatternMiner

    work = Path(args.dir or tempfile.mkdtemp(prefix="logport-bench-logs-"))
    try:
        warm, full = work / "warm", work / "data"
        started = time.perf_counter()
        write_corpus(warm, max(args.events // 10, 1000), seed=100)
        write_corpus(full, args.events, seed=1)
        print(f"stored {args.events:,} messages in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        spark = (SparkSession.builder.master(args.master).appName("logport-bench-logs")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        logport.spark.register(spark)
        load_before = os.getloadavg()
        results: dict[str, tuple[float, float]] = {}
        facts: dict[str, int] = {}
        for data, final in ((warm, False), (full, True)):
            events = spark.read.format("logport").option("path", str(data)).load()
            read = measure(lambda: events.write.format("noop").mode("overwrite").save())  # noqa: B023
            per_event = measure(lambda: log_events(events).write.format("noop").mode("overwrite").save())  # noqa: B023
            ctx = BatchContext(spark, 1, LakeSettings(), streaming=False)
            mined: list[object] = []
            whole = measure(lambda: mined.append(mine_batch(events, ctx)))  # noqa: B023
            batch = mined[0]
            groups = (batch.fine.where(F.col("date").isNotNull() & F.col("masked").isNotNull())  # type: ignore[attr-defined]
                      .groupBy("masked", "tag", "level").agg(F.sum("events").alias("events"),
                                                             F.min("first").alias("first"),
                                                             F.max("last").alias("last"),
                                                             F.min_by("sample", "first").alias("sample"))
                      .toArrow().to_pylist())
            drain = measure(lambda: mine(PatternMiner(), groups))  # noqa: B023
            if final:
                results = {"source read": read, "log_events (fields, level, masks)": per_event,
                           "mine_batch (all)": whole, "Drain on the driver": drain}
                facts = {"masked": len({g["masked"] for g in groups}), "patterns": len(batch.patterns)}  # type: ignore[attr-defined]
        spark.stop()
        n = args.events
        print(f"\n{n:,} messages, {facts['masked']:,} distinct masked messages, {facts['patterns']:,} patterns; "
              f"master {args.master}; load average before {load_before}, after {os.getloadavg()}\n")
        print("| step | seconds | messages/s | session CPU-s | CPU-s per million messages |")
        print("|---|---|---|---|---|")
        for name, (seconds, cpu) in results.items():
            count = facts["masked"] if name.startswith("Drain") else n
            unit = "masked/s" if name.startswith("Drain") else ""
            print(f"| {name} | {seconds:.1f} | {count / seconds:,.0f} {unit} | {cpu:.0f} | {cpu / n * 1e6:.0f} |")
        return 0
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
