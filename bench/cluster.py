"""rows/s of one batch read of two hubs on Spark's standalone cluster (2 workers x 1 core) beside local[2], and
the time a streaming query takes from a lost worker to its next committed micro-batch.

The hubs and the workers are hosts of their own (network namespaces on one LAN, as
tests/multihub/test_cluster.py makes them; needs root and iproute2), the master and this driver here.
The executors run logport from `logport spark-package` (spark.archives). Every read reads every column
over the segment protocol into Spark's `noop` sink: first on the cluster, round after round after a
warm-up, then the same with local[2] (its source reads the same hubs over the same LAN). Then, on the
cluster again, a streaming query over the same events in micro-batches of --max-bytes-per-trigger:
worker 1 (its JVM, its executor and their Python workers) is SIGKILLed while a micro-batch runs, and
the time from the kill to that micro-batch's commit is the recovery time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark import make_batches, store_batches  # bench/spark.py

HUBS = ["hub1", "hub2"]
WORKERS = ["worker1", "worker2"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=400_000, help="events stored, half on each hub")
    p.add_argument("--batch-size", type=int, default=500, help="events per stored batch")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per side (best counts), after a warm-up")
    p.add_argument("--max-bytes-per-trigger", type=int, default=4 << 20,
                   help="the streaming query's micro-batch size (stored bytes, over both hubs)")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after)")


def best_read(spark, servers: str, rounds: int) -> float:  # type: ignore[no-untyped-def]
    def read() -> float:
        started = time.perf_counter()
        spark.read.format("logport").option("server", servers).load().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    read()  # warm-up: JIT, Python workers
    return min(read() for _ in range(rounds))


def recovery_seconds(spark, cluster, servers: str, checkpoint: Path, max_bytes: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """(seconds from worker 1's kill to the commit of the micro-batch it ran in, that micro-batch)."""
    def listed(kind: str) -> set[int]:
        folder = checkpoint / kind
        return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()

    query = (spark.readStream.format("logport").option("server", servers).option("maxBytesPerTrigger", max_bytes)
             .load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="1 second").start())
    try:
        while not listed("commits"):  # one committed micro-batch: executors up on both workers
            time.sleep(0.05)
        while not (listed("offsets") - listed("commits")):
            time.sleep(0.02)
        batch = min(listed("offsets") - listed("commits"))
        killed = time.monotonic()
        cluster.kill_worker("worker1")
        while max(listed("commits"), default=-1) < batch:
            if not query.isActive:
                raise SystemExit(f"the streaming query stopped: {query.exception()}")
            time.sleep(0.02)
        return time.monotonic() - killed, batch
    finally:
        query.stop()


def run(args: argparse.Namespace) -> int:
    from logport.spark.package import ENV_NAME, pack
    from logport.store.identity import ensure_hub_identity
    from tests.multihub.netns import Lan, start_hub, stop_hub, wait_for_port
    from tests.multihub.standalone import standalone_cluster

    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise SystemExit("logport bench cluster: network namespaces need root and iproute2's ip")
    work = Path(args.dir or tempfile.mkdtemp(prefix="logport-bench-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    try:
        print(f"generating {args.events:,} events ...", file=sys.stderr)
        bodies = make_batches(args.events, args.batch_size)
        for k, hub in enumerate(HUBS):
            shutil.rmtree(work / hub, ignore_errors=True)
            asyncio.run(store_batches(str(work / hub), bodies[k :: len(HUBS)]))
            ensure_hub_identity(work / hub)
        del bodies
        print("packing logport for the executors ...", file=sys.stderr)
        packed = pack(work / "job")
        with Lan.create([*HUBS, *WORKERS]) as lan:
            hubs = [start_hub(lan.namespace(h), lan.addresses[h], work / h) for h in HUBS]
            try:
                for hub in hubs:
                    wait_for_port(hub.address, 12345, hub.process)
                servers = ",".join(h.server() for h in hubs)
                with standalone_cluster(lan, WORKERS, work / "spark") as cluster:
                    figures = measure(args, lan, cluster, servers, work, packed.archive, ENV_NAME)
            finally:
                for hub in hubs:
                    stop_hub(hub)
    finally:
        os.chdir(here)
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print_figures(args, figures)
    return 0


def measure(args, lan, cluster, servers: str, work: Path, archive: Path, env_name: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    import logport.spark

    load_before = os.getloadavg()
    # The driver here, on the LAN's address; Spark plans the source with the executors' Python, from the
    # driver's working directory: the package's (its logport-env is there too).
    os.environ["SPARK_LOCAL_IP"] = lan.gateway
    os.chdir(archive.parent)
    os.environ["PYSPARK_PYTHON"] = f"./{env_name}/bin/python"

    def session(master: str, **conf: str):  # type: ignore[no-untyped-def]
        builder = (SparkSession.builder.master(master).appName("logport-bench-cluster")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.host", lan.gateway))
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        logport.spark.register(spark)
        return spark

    spark = session(cluster.master_url, **{"spark.archives": f"{archive.as_uri()}#{env_name}",
                                           "spark.sql.shuffle.partitions": "2"})
    rows = spark.read.format("logport").option("server", servers).load().count()
    cluster_seconds = best_read(spark, servers, args.rounds)
    recovery, batch = recovery_seconds(spark, cluster, servers, work / "checkpoint", args.max_bytes_per_trigger)
    spark.stop()
    del os.environ["PYSPARK_PYTHON"]
    spark = session("local[2]")
    local_seconds = best_read(spark, servers, args.rounds)
    spark.stop()
    return {"rows": rows, "cluster": cluster_seconds, "local": local_seconds, "recovery": recovery,
            "batch": batch, "load_before": load_before[0], "load_after": os.getloadavg()[0]}


def print_figures(args: argparse.Namespace, f: dict[str, float]) -> None:
    rows = f["rows"]
    print(f"\n{rows:,.0f} events on 2 hubs, read over the segment protocol; best of {args.rounds} rounds; "
          f"load average before {f['load_before']:.1f}, after {f['load_after']:.1f}\n")
    print("| master | seconds | rows/s |\n|---|---:|---:|")
    print(f"| standalone cluster, 2 workers x 1 core | {f['cluster']:.2f} | {rows / f['cluster']:,.0f} |")
    print(f"| local[2] | {f['local']:.2f} | {rows / f['local']:,.0f} |")
    print(f"\nstreaming, maxBytesPerTrigger {args.max_bytes_per_trigger}: worker 1 killed in micro-batch "
          f"{f['batch']:.0f}, committed {f['recovery']:.1f} s later")
    print(f"\ncommand: logport bench cluster --events {args.events} --batch-size {args.batch_size} "
          f"--rounds {args.rounds} --max-bytes-per-trigger {args.max_bytes_per_trigger}")
