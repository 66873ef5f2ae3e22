"""`logport serve` as `make run` starts it: every listener up, metrics served, a clean SIGTERM stop,
and `logport segments` / `logport cat` working against its data directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import free_port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"logport serve exited with {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"port {port} never opened")


def test_serve_all_listeners_then_stop(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("forward", "lumberjack", "segment", "router", "pull", "pub", "metrics")}
    config = tmp_path / "logport.toml"
    config.write_text(f"""
[hub]
log_format = "json"
[forward]
port = {ports['forward']}
[lumberjack]
port = {ports['lumberjack']}
[segment]
port = {ports['segment']}
[logjam]
router_port = {ports['router']}
pull_port = {ports['pull']}
pub_port = {ports['pub']}
[metrics]
port = {ports['metrics']}
""")
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "logport.cli", "serve", "--config", str(config), "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for name in ("forward", "lumberjack", "segment", "router", "pull", "pub", "metrics"):
            wait_for_port(ports[name], proc)
        # a PackedForward message from a raw socket: the simplest real Forward client
        import msgpack

        from logport.batch import pack_entry

        with socket.create_connection(("127.0.0.1", ports["forward"])) as s:
            s.sendall(msgpack.packb(["smoke.test", pack_entry(1700000000, 42, {"hello": "world"}), {"chunk": "c1"}]))
            s.settimeout(10)
            assert msgpack.unpackb(s.recv(100)) == {"ack": "c1"}
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics").read().decode()
        assert 'logport_store_appends_total{segment="forward"} 1.0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(line["msg"] == "logport stopping" for line in lines), stderr[-2000:]
    env = dict(os.environ)
    segments = subprocess.run([sys.executable, "-m", "logport.cli", "segments", "--json", "--data-dir", str(data)],
                              capture_output=True, text=True, check=True, env=env).stdout
    row = json.loads(segments.splitlines()[0])
    assert (row["segment"], row["events"]) == ("forward", 1)
    cat = subprocess.run([sys.executable, "-m", "logport.cli", "cat", "forward", "--data-dir", str(data)],
                         capture_output=True, text=True, check=True).stdout
    event = json.loads(cat)
    assert (event["tag"], event["time"], event["record"]) == ("smoke.test", "2023-11-14T22:13:20.000000042Z", {"hello": "world"})
