"""`logport top`: the figures from two scrapes (tables of cases), and the live view in a real terminal
(tmux: send-keys, capture-pane) against a hub under Forward load; `q` quits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest

from logport.batch import pack_entry
from logport.top import Snapshot, build_view, quantile, render
from tests.chaos.harness import HubProcess, connect_raw

INF = float("inf")


@pytest.mark.parametrize(("buckets", "q", "expected"), [
    ([(0.001, 0.0), (0.002, 10.0), (INF, 10.0)], 0.5, 0.0015),  # all in (1, 2] ms: interpolated
    ([(0.001, 10.0), (0.002, 10.0), (INF, 10.0)], 0.99, 0.00099),
    ([(0.001, 0.0), (0.002, 0.0), (INF, 4.0)], 0.99, 0.002),  # above the last bound: the last bound
    ([(0.001, 0.0), (INF, 0.0)], 0.5, None),  # nothing observed
    ([], 0.5, None),
])
def test_quantile(buckets: list[tuple[float, float]], q: float, expected: float | None) -> None:
    got = quantile(buckets, q)
    assert got == pytest.approx(expected) if expected is not None else got is None


OLD = """
logport_forward_events_total{mode="PackedForward"} 1000
logport_listener_up{listener="forward"} 1
logport_listener_connections{listener="forward"} 2
logport_listener_refused_connections_total{listener="forward"} 1
logport_store_appends_total{segment="forward"} 10
logport_store_append_bytes_total{segment="forward"} 1000000
logport_store_fsyncs_total 10
logport_store_fsync_seconds_bucket{le="0.001"} 5
logport_store_fsync_seconds_bucket{le="0.002"} 10
logport_store_fsync_seconds_bucket{le="+Inf"} 10
logport_output_lag_bytes{output="down",segment="forward"} 0
logport_forward_output_events_total{output="down"} 0
"""
NEW = """
logport_forward_events_total{mode="PackedForward"} 3000
logport_listener_up{listener="forward"} 1
logport_listener_connections{listener="forward"} 3
logport_listener_refused_connections_total{listener="forward"} 5
logport_store_appends_total{segment="forward"} 30
logport_store_append_bytes_total{segment="forward"} 5000000
logport_store_fsyncs_total 30
logport_store_fsync_seconds_bucket{le="0.001"} 5
logport_store_fsync_seconds_bucket{le="0.002"} 30
logport_store_fsync_seconds_bucket{le="+Inf"} 30
logport_output_lag_bytes{output="down",segment="forward"} 4096
logport_output_lag_events{output="down",segment="forward"} 7
logport_output_last_success_timestamp_seconds{output="down",segment="forward"} 0
logport_forward_output_events_total{output="down"} 100
"""


def test_view_of_two_scrapes_two_seconds_apart() -> None:
    view = build_view(Snapshot.parse(OLD, 100.0), Snapshot.parse(NEW, 102.0), "READY")
    assert view.listeners == [("forward", "1,000/s", "3", "5 (2/s)", "events")]
    assert view.segments == [("forward", "10/s", "2.00")]
    assert view.outputs == [("down", "50/s", "4,096", "7", "never")]
    # the 20 fsyncs of the interval all fell in (1, 2] ms
    assert view.fsync == "10/s  p50 1.50 ms  p99 1.99 ms"
    text = "\n".join(render(view, "http://h:1", 100))
    assert "LISTENERS" in text and "OUTPUTS" in text and "READY" in text


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", f"logport-top-{os.getpid()}", *args], capture_output=True, text=True,
                          check=True).stdout


def test_logport_top_in_a_real_terminal(tmp_path: Path) -> None:
    assert shutil.which("tmux"), "tmux missing: `make test` installs it"
    import asyncio

    hub = HubProcess(tmp_path / "hub", ("forward",))
    asyncio.run(hub.start())
    stop = threading.Event()

    def load() -> None:  # Forward messages with acks, one after another
        with connect_raw(hub.ports["forward"]) as s:
            n = 0
            while not stop.is_set():
                n += 1
                entries = b"".join(pack_entry(1700000000, 0, {"n": n, "i": i}) for i in range(100))
                s.sendall(msgpack.packb(["top.test", entries, {"chunk": f"c{n}"}]))
                s.recv(100)

    sender = threading.Thread(target=load, daemon=True)
    sender.start()
    session = "top"
    command = (f"{sys.executable} -m logport.cli top --metrics 127.0.0.1:{hub.ports['metrics']} --interval 0.5; "
               f"echo EXITED $?; sleep 60")
    tmux("new-session", "-d", "-s", session, "-x", "150", "-y", "45", command)
    try:
        deadline = time.monotonic() + 30
        screen = ""
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session)
            forward = [line for line in screen.splitlines() if line.strip().startswith("forward ")]
            if "LISTENERS" in screen and forward and "READY" in screen and not forward[0].split()[1].startswith("0/"):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no live figures on the screen:\n{screen}\n{hub.log_tail()}")
        live = screen
        assert "SEGMENTS" in screen and "FSYNC" in screen and "q quits" in screen
        assert "p99" in screen  # fsyncs happened in the interval
        tmux("send-keys", "-t", session, "q")
        while "EXITED" not in screen:
            assert time.monotonic() < deadline + 10, screen
            time.sleep(0.1)
            screen = tmux("capture-pane", "-p", "-t", session)
        assert "EXITED 0" in screen
        print(live)
    finally:
        stop.set()
        subprocess.run(["tmux", "-L", f"logport-top-{os.getpid()}", "kill-server"], capture_output=True)
        sender.join(5)
        hub.stop()
