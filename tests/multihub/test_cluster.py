"""`logport pipeline` on Spark's own cluster manager, its workers on other hosts, surviving a lost worker.

Two hubs, two Spark workers (one core each) and the driver, each a host of its own (a network
namespace) on one LAN; the master here. logport reaches the executors as README "The job" says
(`logport spark-package`), and the README's cluster blocks run as printed, with this LAN's addresses:

1. a batch run over both hubs: its `events` and `traffic` tables equal what the hubs stored;
2. a streaming run while a shipper keeps sending to both hubs: one worker is SIGKILLed (its JVM, its
   executor, their Python workers) in the middle of a micro-batch and the query goes on on the other
   (the time from the kill to the next committed micro-batch is printed); then hub 2's link goes down
   for longer than --timeout, and the run fails naming it;
3. the link back, the driver restarted: it resumes from its checkpoint, and the `events` table holds
   every event the hubs stored exactly once (keyed by hub, segment, offset, index), `traffic` agrees.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from logport.spark.package import base_interpreter
from logport.store.identity import read_hub_identity
from tests.multihub.netns import (
    NEEDS_NETNS,
    SEGMENT,
    HubProcess,
    Lan,
    descendants,
    send_forward,
    start_hub,
    stop_hub,
    wait_for_port,
)
from tests.multihub.standalone import StandaloneCluster, spark_env, spark_home, standalone_cluster
from tests.test_readme import README, readme_blocks

pytestmark = [pytest.mark.slow, NEEDS_NETNS, pytest.mark.timeout(900)]

HUBS = ["hub1", "hub2"]
WORKERS = ["worker1", "worker2"]
README_MARK = "tests/multihub/test_cluster.py"  # in the skip reason of the README blocks this test runs
# what the README prints for the cluster's addresses, and what they are here
PRINTED_MASTER, PRINTED_HUBS, PRINTED_LAKE = "spark://spark-master:7077", "10.0.0.11:12345,10.0.0.12:12345", "/shared/lake"
TEST_SETTINGS = " --trigger-seconds 2 --timeout 5"  # appended to the README's stream command (the last one wins)
START_TIME = 1_795_000_000  # event i's time is START_TIME + i seconds: minutes close as the shipper goes on


class Shipper:
    """The project's Forward client over both hubs in a thread of its own, 10 events a batch, until stopped."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.acked: Counter[str] = Counter()
        self.ids: set[str] = set()
        self.next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def send(self, count: int) -> None:
        asyncio.run(send_forward(self.addresses, self.next, count, 10, self.acked, self.ids, start_time=START_TIME))
        self.next += count

    def start(self) -> None:
        def paced(start: int) -> bool:
            self.next = start
            time.sleep(0.2)  # 50 events a second
            return not self._stop.is_set()

        def run() -> None:
            try:
                asyncio.run(send_forward(self.addresses, self.next, 10**9, 10, self.acked, self.ids,
                                         before_each=paced, start_time=START_TIME))
            except BaseException as e:  # noqa: BLE001 (reported by stop())
                self.error = e

        self._thread = threading.Thread(target=run, name="shipper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)
        assert self.error is None, f"the shipper failed: {self.error!r}"


@contextmanager
def hubs_on(lan: Lan, work: Path) -> Iterator[list[HubProcess]]:
    started = [start_hub(lan.namespace(h), lan.addresses[h], work / h) for h in HUBS]
    try:
        for hub in started:
            wait_for_port(hub.address, SEGMENT, hub.process)
        yield started
    finally:
        for hub in started:
            stop_hub(hub)


def cluster_blocks() -> list[str]:
    """The README's cluster blocks, which tests/test_readme.py skips (it has no cluster)."""
    return [b.code.rstrip() for b in readme_blocks(README.read_text(encoding="utf-8"))
            if b.mark == "skip" and README_MARK in b.why]


def here(code: str, substitutions: dict[str, str]) -> str:
    """A README block with this LAN's addresses for the printed ones."""
    for printed, actual in substitutions.items():
        code = code.replace(printed, actual)
    assert not any(printed in code for printed in ("spark-master", "10.0.0.", "/shared/")), code
    return code


class Driver:
    """Shell blocks on the driver's host, as a user's shell there: the venv's commands and Spark's on PATH,
    no Spark settings but where Spark is and the host's address. What is still running at the end (a
    test that failed half-way) is stopped, with everything it started."""

    def __init__(self, lan: Lan) -> None:
        self.lan = lan
        self.runs: list[subprocess.Popen[bytes]] = []

    def run(self, code: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        env = spark_env(self.lan.addresses["driver"])
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(spark_home() / "bin"),
                                       env.get("PATH", "")])
        with log.open("ab") as out:
            self.runs.append(subprocess.Popen([*self.lan.exec("driver"), "bash", "-euo", "pipefail", "-c", code],
                                              cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        return self.runs[-1]

    def stop(self) -> None:
        for run in self.runs:
            if run.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(run.pid, signal.SIGKILL)
                run.wait(30)


def finished(process: subprocess.Popen[bytes], log: Path, seconds: float) -> int:
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running after {seconds:.0f} s:\n{log.read_text(errors='replace')[-5000:]}")


def batches(checkpoint: Path, kind: str) -> set[int]:
    """The micro-batches a query's checkpoint lists as planned (`offsets`) or committed (`commits`)."""
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


def wait_for(condition: Any, seconds: float, what: str, log: Path, run: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if run.poll() is not None:
            pytest.fail(f"the run exited with {run.returncode} waiting for {what}:\n"
                        f"{log.read_text(errors='replace')[-5000:]}")
        time.sleep(0.05)
    pytest.fail(f"no {what} after {seconds:.0f} s:\n{log.read_text(errors='replace')[-5000:]}")


def stored_per_hub(spark: Any, servers: str, address_of: dict[str, str]) -> Counter[str]:
    rows = spark.read.format("logport").option("server", servers).load().groupBy("hub").count().collect()
    return Counter({address_of[r["hub"]]: r["count"] for r in rows})


def check_tables(spark: Any, out: Path, stored: Counter[str], address_of: dict[str, str], ids: set[str],
                 streaming: bool) -> None:
    """`events` holds every stored event once; `traffic` counts them per segment, tag and minute (streaming:
    each minute the watermark passed)."""
    from pyspark.sql import functions as F

    events = spark.read.parquet(str(out / "events"))
    keys = events.groupBy("hub", "segment", "offset", "index").count()
    assert keys.where("count > 1").count() == 0  # nothing counted twice
    per_hub = Counter({address_of[r["hub"]]: r["count"] for r in events.groupBy("hub").count().collect()})
    assert per_hub == stored  # nothing lost
    seen = {f"{r.shipper}-{r.seq}" for r in events.selectExpr("record:shipper::string AS shipper",
                                                              "record:seq::int AS seq").collect()}
    assert seen >= ids  # every acknowledged event
    minutes = {(r.segment, r.tag, r.minute): r["count"] for r in events.groupBy(
        "segment", "tag", F.window("time", "1 minute").start.alias("minute")).count().collect()}
    # a minute's row per batch that counted some of its events: the lake's readers add them up
    traffic = {(r.segment, r.tag, r.minute): r.events for r in spark.read.parquet(str(out / "traffic")).groupBy(
        "segment", "tag", "minute").agg(F.sum("events").alias("events")).collect()}
    assert all(traffic[key] == minutes.get(key) for key in traffic), "traffic disagrees with events"
    if not streaming:
        assert traffic == minutes
        return
    # The watermark (2 minutes) has passed every minute that ended 2 minutes before the last event.
    last = events.agg(F.max("time")).first()[0]
    closed = {key for key in minutes if (last - key[2]).total_seconds() >= 180}
    assert closed and closed <= set(traffic), sorted(closed - set(traffic))[:5]


def test_pipeline_on_a_standalone_cluster(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    begun = time.monotonic()

    def say(what: str) -> None:  # the phases' wall times (pytest -s shows them)
        print(f"[{time.monotonic() - begun:6.1f}s] {what}", flush=True)

    # executors must get logport from the shipped environment: the interpreter it links to has none
    assert subprocess.run([base_interpreter(), "-c", "import logport"], capture_output=True).returncode != 0
    package, batch, stream = cluster_blocks()
    with Lan.create([*HUBS, *WORKERS, "driver"]) as lan:
        driver = Driver(lan)
        try:
            log = tmp_path / "driver.log"
            packing = driver.run(here(package, {}), tmp_path, log)  # meanwhile the hubs and the cluster start
            with hubs_on(lan, tmp_path) as hubs, standalone_cluster(lan, WORKERS, tmp_path / "spark") as cluster:
                say("hosts, hubs and the standalone cluster up")
                assert finished(packing, log, 300) == 0
                assert (tmp_path / "logport-job" / "logport-env.tar.gz").is_file()
                say("logport spark-package")
                run_on_cluster(spark, tmp_path, driver, hubs, cluster, batch, stream, say)
        finally:
            driver.stop()


def run_on_cluster(spark: Any, tmp_path: Path, driver: Driver, hubs: list[HubProcess], cluster: StandaloneCluster,
                   batch: str, stream: str, say: Any) -> None:
    lan = driver.lan
    servers = ",".join(h.server() for h in hubs)
    address_of = {read_hub_identity(h.data_dir) or "": h.address for h in hubs}
    lake = tmp_path / "lake"
    printed = {PRINTED_MASTER: cluster.master_url, PRINTED_HUBS: servers, PRINTED_LAKE: str(lake)}
    batch, stream = here(batch, printed), here(stream, printed)
    shipper = Shipper([h.address for h in hubs])
    shipper.send(1000)
    # 1. batch
    batch_log = tmp_path / "batch.log"
    assert finished(driver.run(batch, tmp_path, batch_log), batch_log, 400) == 0, batch_log.read_text()
    stored = stored_per_hub(spark, servers, address_of)
    assert sum(stored.values()) == sum(shipper.acked.values()) == 1000
    say("batch run")
    check_tables(spark, lake / "batch", stored, address_of, shipper.ids, streaming=False)
    say("batch run checked")

    # 2. streaming, while the shipper sends; a worker dies mid-micro-batch, then hub 2's link goes down
    shipper.start()
    run_log = tmp_path / "stream-1.log"
    run = driver.run(stream + TEST_SETTINGS, tmp_path, run_log)
    checkpoint = lake / "stream" / "_checkpoints"
    wait_for(lambda: batches(checkpoint, "commits"), 300, "committed micro-batch", run_log, run)
    say("streaming run: first micro-batch committed")
    # the executors run the shipped environment's Python, unpacked in their working directories
    worker2 = cluster.workers["worker2"].process.pid
    assert any("logport-env/bin/python" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
               for p in descendants(worker2) if Path(f"/proc/{p}/cmdline").exists())
    in_flight = wait_for(lambda: batches(checkpoint, "offsets") - batches(checkpoint, "commits"), 120,
                         "micro-batch in flight", run_log, run)
    killed_at = time.monotonic()
    executors = cluster.executors("worker1")
    cluster.kill_worker("worker1")
    assert executors, "worker1 ran no executor"
    wait_for(lambda: max(batches(checkpoint, "commits"), default=-1) >= min(in_flight), 300,
             "micro-batch committed after the kill", run_log, run)
    recovery = time.monotonic() - killed_at
    say(f"worker1 killed in micro-batch {min(in_flight)}: committed {recovery:.1f} s after the kill")
    lan.set_link("hub2", up=False)
    assert finished(run, run_log, 300) != 0
    say("hub2's link down: the run failed")
    first_run = run_log.read_text(errors="replace")
    lan.set_link("hub2", up=True)

    # 3. the driver restarted from the checkpoint, after the shipper stopped
    time.sleep(2)
    shipper.stop()
    resumed_log = tmp_path / "stream-2.log"
    resumed = driver.run(stream + TEST_SETTINGS + " --available-now", tmp_path, resumed_log)
    assert finished(resumed, resumed_log, 400) == 0, resumed_log.read_text()
    second_run = resumed_log.read_text(errors="replace")
    say("the driver restarted from the checkpoint: done")

    # the runs' logs name each fault they met: the lost worker, the hub that did not answer (the run's
    # last word), the checkpoint it resumed from
    assert re.search(rf"Lost executor \d+ on {re.escape(lan.addresses['worker1'])}", first_run), first_run[-5000:]
    failure = [line for line in first_run.splitlines() if line.startswith("logport pipeline: ")]
    assert failure and f"hub {hubs[1].server()} " in failure[-1], first_run[-5000:]
    assert re.search(r"logport_pipeline: resumed from its checkpoint at micro-batch [1-9]", second_run), second_run
    stored = stored_per_hub(spark, servers, address_of)
    assert sum(stored.values()) >= sum(shipper.acked.values()) > 1000
    check_tables(spark, lake / "stream", stored, address_of, shipper.ids, streaming=True)
