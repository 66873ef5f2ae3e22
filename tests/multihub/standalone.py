"""Spark's own cluster manager, as the PySpark distribution starts it: a master
(`spark-class org.apache.spark.deploy.master.Master`) and workers (`...deploy.worker.Worker`), each on
a host of a Lan (tests/multihub/netns.py), the master on this one."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import free_port
from tests.multihub.netns import Lan, descendants, kill_tree, stop_process

DAEMON_MEMORY = "512m"  # the master's and each worker's own JVM (SPARK_DAEMON_MEMORY; default 1g)
READY = {"master": "I have been elected leader! New state: ALIVE", "worker": "Successfully registered with master"}


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def spark_env(local_ip: str) -> dict[str, str]:
    """A Spark process's environment: none of this test run's Spark settings, SPARK_HOME, and the address to
    bind to and to advertise (SPARK_LOCAL_IP: a namespace's hostname resolves to no address of its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_")) and k != "VIRTUAL_ENV"}
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = local_ip
    env["SPARK_DAEMON_MEMORY"] = DAEMON_MEMORY
    return env


@dataclass
class Daemon:
    role: str  # "master" or "worker"
    host: str | None  # the Lan host it runs on; None: this namespace
    process: subprocess.Popen[bytes]
    log: Path

    def wait_ready(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while READY[self.role] not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None:
                raise RuntimeError(f"the Spark {self.role} exited with {self.process.returncode}:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Spark {self.role} was not ready after {seconds} s:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)


@dataclass
class StandaloneCluster:
    lan: Lan
    master: Daemon
    master_url: str
    workers: dict[str, Daemon] = field(default_factory=dict)  # by host

    def executors(self, host: str) -> list[int]:
        """The executor JVMs the worker on `host` runs now (its children)."""
        worker = self.workers[host].process.pid
        return [p for p in descendants(worker)[1:] if _is_executor(p)]

    def kill_worker(self, host: str) -> list[int]:
        """SIGKILL the worker's JVM, its executors and their Python workers at once (the host dies)."""
        return kill_tree(self.workers[host].process.pid)


def _is_executor(pid: int) -> bool:
    try:
        return "CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return False


def _start(role: str, command: list[str], host: str | None, lan: Lan, logs: Path) -> Daemon:
    log = logs / f"spark-{role}-{host or 'here'}.log"
    address = lan.addresses[host] if host else lan.gateway
    prefix = lan.exec(host) if host else []
    env = spark_env(address)
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"  # its REST server would take port 6066
    with log.open("wb") as out:
        process = subprocess.Popen([*prefix, str(spark_home() / "bin" / "spark-class"), *command],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, cwd=logs)
    return Daemon(role, host, process, log)


@contextmanager
def standalone_cluster(lan: Lan, workers: list[str], work: Path, cores: int = 1,
                       memory: str = "1g") -> Iterator[StandaloneCluster]:
    """A master here (on the Lan's gateway address) and a worker of `cores` and `memory` on each of `workers`."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    daemons: list[Daemon] = []
    try:
        master = _start("master", ["org.apache.spark.deploy.master.Master", "--host", lan.gateway, "--port",
                                   str(port), "--webui-port", str(free_port())], None, lan, work)
        daemons.append(master)
        cluster = StandaloneCluster(lan, master, f"spark://{lan.gateway}:{port}")
        master.wait_ready()
        for host in workers:
            worker = _start("worker", ["org.apache.spark.deploy.worker.Worker", "--host", lan.addresses[host],
                                       "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                                       "--work-dir", str(work / f"work-{host}"), cluster.master_url],
                            host, lan, work)
            daemons.append(worker)
            cluster.workers[host] = worker
        for worker in cluster.workers.values():
            worker.wait_ready()
        yield cluster
    finally:
        for daemon in reversed(daemons):  # workers first: each stops its executors
            stop_process(daemon.process)
