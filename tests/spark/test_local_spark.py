"""A local Spark stays where it is told: the job's session on 127.0.0.1 only, its UI off unless asked
for; and register() runs the source with a Python that has logport, or says why it cannot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import logport
import logport.spark
from logport.spark import WorkerPythonError, register

LISTENING = """
import ipaddress, json, os, sys

from logport.spark.pipeline import spark_session


def listening(pid):
    # The TCP sockets the JVM listens on: its socket inodes, looked up in /proc/net/tcp{,6} (state 0A).
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("tcp", 4), ("tcp6", 16)):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    address, port = fields[1].split(":")
                    raw = bytes.fromhex(address)
                    # /proc prints each 32-bit word of the address in host (little-endian) order
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
                    ip = ipaddress.ip_address(raw)
                    ip = getattr(ip, "ipv4_mapped", None) or ip
                    found.append([str(ip), int(port, 16)])
    return found


def describe(spark):
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    return {"master": spark.sparkContext.master, "ui": spark.sparkContext.uiWebUrl, "listening": listening(pid)}


out = {}
spark = spark_session(None)  # as `logport pipeline` builds it
out["default"] = describe(spark)
spark.stop()
spark = spark_session(None, ui=True)  # `logport pipeline --spark-ui`
out["spark_ui"] = describe(spark)
spark.stop()
print("RESULT " + json.dumps(out), flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads listening sockets from Linux /proc")
def test_local_session_listens_on_loopback_only_and_its_ui_only_when_asked(tmp_path: Path) -> None:
    # Its own process and JVM: SPARK_LOCAL_IP only works in the environment the JVM starts with, and
    # the test run's one session is up already. A new user's environment: no Spark settings.
    script = tmp_path / "listening.py"
    script.write_text(LISTENING, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(logport.__file__).parents[1]), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resolves to a loopback address" not in done.stderr  # Spark looked for another address: none
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    default, with_ui = result["default"], result["spark_ui"]
    assert default["master"] == with_ui["master"] == "local[*]"
    assert default["ui"] is None
    assert with_ui["ui"].startswith("http://127.0.0.1:")
    ui_port = int(with_ui["ui"].rsplit(":", 1)[1])
    for session in (default, with_ui):
        assert session["listening"], session  # the driver's RPC and block manager at least
        assert {ip for ip, _ in session["listening"]} == {"127.0.0.1"}, session
    assert ui_port in {port for _, port in with_ui["listening"]}
    assert ui_port not in {port for _, port in default["listening"]}


def fake_session(master: str, python: str, registered: list[Any]) -> Any:
    """What register() looks at of a SparkSession: the master, the workers' Python, the conf, dataSource;
    `registered` gets (source, the Python the context named as it was registered)."""
    conf = SimpleNamespace(get=lambda key, default=None: default)
    context = SimpleNamespace(master=master, pythonExec=python, getConf=lambda: conf, defaultParallelism=3)
    return SimpleNamespace(sparkContext=context, dataSource=SimpleNamespace(
        register=lambda source: registered.append((source, context.pythonExec))))


def python_without_site_packages(tmp_path: Path) -> str:
    """An interpreter as `python3` from PATH often is: the same Python, without the venv's packages."""
    path = tmp_path / "python3"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return str(path)


CASES: list[tuple[str, str, Callable[[Path], str], str | None]] = [
    # (case, master, the session's Python (PYSPARK_PYTHON), what the error says: None when register() registers)
    ("local, this Python", "local[2]", lambda _: sys.executable, None),
    ("local, a Python without logport", "local[*]", python_without_site_packages, None),
    ("local, no such Python", "local", lambda p: str(p / "no-such-python3"), None),
    ("local-cluster: executors on this machine", "local-cluster[2,1,1024]", python_without_site_packages, None),
    ("cluster, a Python with logport here", "spark://spark-master:7077", lambda _: sys.executable, None),
    ("cluster, a Python without logport", "spark://spark-master:7077", python_without_site_packages,
     "No module named 'logport'"),
    ("cluster, the executors' Python is not here", "spark://spark-master:7077",
     lambda p: "./logport-env/bin/python", "No such file"),
]


@pytest.mark.parametrize(("master", "python", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_register_runs_the_source_with_a_python_that_has_logport(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master: str, python: Callable[[Path], str],
        error: str | None) -> None:
    monkeypatch.setattr(logport.spark, "_workers_checked", set())
    monkeypatch.chdir(tmp_path)
    registered: list[Any] = []
    session_python = python(tmp_path)
    session = fake_session(master, session_python, registered)
    if error is None:
        register(session)
        [(source, source_python)] = registered
        assert (source.name(), source.parallelism) == ("logport", 3)  # partitions by the session's cores
        # A local session's source runs this interpreter; a cluster's, the executors' Python (checked here).
        assert source_python == (sys.executable if master.startswith("local") else session_python)
        assert session.sparkContext.pythonExec == session_python  # what the session's UDFs run: unchanged
        return
    with pytest.raises(WorkerPythonError) as raised:
        register(session)
    message = str(raised.value)
    # Names the executors' Python, where it was tried, why it failed, and what to do.
    assert repr(session_python) in message and str(tmp_path) in message and error in message, message
    assert "logport spark-package" in message, message
    assert not registered
