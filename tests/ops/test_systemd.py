"""systemd: the unit file passes `systemd-analyze verify` (and its offline security review), and the hub's
notifications (READY=1, WATCHDOG=1 from the event loop, STOPPING=1) reach a NOTIFY_SOCKET the test binds."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from logport.hub import Hub
from logport.systemd import Notifier
from tests.chaos.harness import HubProcess
from tests.conftest import REPO
from tests.support import hub_config

UNIT = REPO / "packaging" / "systemd" / "logport.service"


def unit_with_our_logport(tmp_path: Path) -> Path:
    """The unit, its ExecStart pointed at this environment's `logport` (verify checks that it is executable)."""
    logport = Path(sys.executable).parent / "logport"
    assert logport.exists(), logport
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/logport serve " in text
    unit = tmp_path / "logport.service"
    unit.write_text(text.replace("/usr/local/bin/logport", str(logport)))
    return unit


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing: `make test` installs Debian's systemd package"
    unit = unit_with_our_logport(tmp_path)
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, cwd=tmp_path)
    # verify exits 0 on unknown keys too, and only warns: any output is a finding
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done


def test_the_unit_is_hardened(tmp_path: Path) -> None:
    text = UNIT.read_text()
    for line in ("Type=notify", "WatchdogSec=", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "ReadWritePaths=/var/lib/logport", "KillSignal=SIGTERM"):
        assert line in text, line
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", text, re.M)[1])  # type: ignore[index]
    assert stop > 30, "TimeoutStopSec must exceed hub.shutdown_grace (30 s by default)"
    analyze = shutil.which("systemd-analyze")
    assert analyze
    done = subprocess.run([analyze, "security", "--offline=true", str(unit_with_our_logport(tmp_path))],
                          capture_output=True, text=True, cwd=tmp_path)
    level = re.search(r"Overall exposure level for logport.service: ([0-9.]+)", done.stdout)
    assert level, done.stdout[-2000:] + done.stderr
    assert float(level[1]) <= 2.0, done.stdout  # "OK" in systemd's scale (0 safest .. 10 unsafe)


class NotifySocket:
    """A bound AF_UNIX datagram socket that records every notification with its arrival time."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode().split("\n")))

    def wait_for(self, field: str, timeout: float = 30.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for stamp, fields in list(self.messages):
                if field in fields:
                    return stamp
            time.sleep(0.01)
        raise AssertionError(f"no {field} within {timeout} s: {self.messages}")

    def stamps(self, field: str) -> list[float]:
        return [stamp for stamp, fields in self.messages if field in fields]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def test_ready_watchdog_stopping_reach_the_notify_socket(tmp_path: Path) -> None:
    notify = NotifySocket(str(tmp_path / "notify"))
    hub = HubProcess(tmp_path / "hub", ("forward", "segment"))
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "1000000"}
    proc = subprocess.Popen([sys.executable, "-m", "logport.cli", "serve", "--config", str(hub.config_path),
                             "--data-dir", str(tmp_path / "data")], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ready = notify.wait_for("READY=1")
        for name in ("forward", "segment"):  # READY=1 means serving: every listener accepts at once
            socket.create_connection(("127.0.0.1", hub.ports[name]), timeout=1).close()
        time.sleep(1.6)
        pings = [s for s in notify.stamps("WATCHDOG=1") if s > ready]
        assert len(pings) >= 2, notify.messages  # every 0.5 s (WATCHDOG_USEC / 2)
        assert not notify.stamps("STOPPING=1")
        proc.send_signal(signal.SIGTERM)
        stopping = notify.wait_for("STOPPING=1")
        assert proc.wait(timeout=30) == 0
        assert stopping > ready
        status = [f for _, fields in notify.messages for f in fields if f.startswith("STATUS=")]
        assert any(s.startswith("STATUS=serving") for s in status) and any("draining" in s for s in status)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()


async def test_a_stuck_event_loop_sends_no_watchdog(tmp_path: Path) -> None:
    notify = NotifySocket(str(tmp_path / "notify"))
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "400000"})
    assert notifier.watchdog_interval == 0.2
    hub = Hub(hub_config(tmp_path / "data", ["forward"]), serve_metrics=False, notifier=notifier)
    await hub.start()
    try:
        await asyncio.sleep(1.2)
        blocked = time.monotonic()
        time.sleep(1.5)  # the loop does not turn
        resumed = time.monotonic()
        await asyncio.sleep(1.2)
    finally:
        await hub.stop()
        notifier.close()
        notify.close()
    pings = notify.stamps("WATCHDOG=1")
    before = [s for s in pings if s < blocked]
    during = [s for s in pings if blocked + 0.05 < s < resumed]
    after = [s for s in pings if s > resumed]
    assert len(before) >= 2 and not during and len(after) >= 2, (before, during, after)


def test_notifier_abstract_socket_and_no_socket() -> None:
    name = f"logport-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        server.settimeout(5)
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready("up")
        assert server.recv(100) == b"READY=1\nSTATUS=up"
        notifier.close()
    quiet = Notifier({})
    assert not quiet.enabled and not quiet.ready() and quiet.watchdog_interval == 0
    other = Notifier({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert other.watchdog_interval == 0  # the watchdog is another process's
    other.close()
