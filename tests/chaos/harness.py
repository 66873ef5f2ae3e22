"""Runs the hub as a child process (`python -m logport.cli serve`) that tests kill with SIGKILL and restart.

Every port is a free port, fsync is "always", the hub logs (JSON lines) to a file
in its directory. `check_store` then verifies a data directory after the crashes:
whole frames only, and the store reopens (recovery succeeds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logport.config import StoreConfig
from logport.store import SegmentStore
from logport.store.reader import DirectoryReader
from logport.store.verify import verify
from tests.conftest import REPO, free_port

LISTENERS = ("forward", "lumberjack", "segment", "logjam")
START_TIMEOUT = 30.0


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"no TOML form for {value!r}")


def render_toml(sections: dict[str, dict[str, Any]]) -> str:
    lines: list[str] = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in keys.items())
        lines.append("")
    return "\n".join(lines)


@dataclass
class HubProcess:
    """One hub child process over one data directory; kill() and start() as often as needed."""

    workdir: Path
    listeners: tuple[str, ...]  # the listeners to enable; the others are off
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # extra config keys per section
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    start_seconds: list[float] = field(default_factory=list)  # spawn -> every port accepts
    data_dir: Path | None = None  # default: workdir/data; a power-loss run puts it on a LazyFS mount
    power_cut: Callable[[], None] | None = None  # called after each SIGKILL: the machine loses its power too

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.data_dir is None:
            self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "hub.log"
        self.config_path = self.workdir / "logport.toml"
        sections: dict[str, dict[str, Any]] = {
            "hub": {"log_level": "info", "log_format": "json", "hostname": "chaos-hub"},
            "store": {"fsync": "always"},
            "metrics": {"enabled": True, "port": free_port()},
        }
        self.ports["metrics"] = sections["metrics"]["port"]
        for name in LISTENERS:
            section: dict[str, Any] = {"enabled": name in self.listeners}
            if name in self.listeners:
                if name == "logjam":
                    for key in ("router_port", "pull_port", "pub_port"):
                        section[key] = self.ports[f"logjam.{key}"] = free_port()
                else:
                    section["port"] = self.ports[name] = free_port()
            sections[name] = section
        for name, keys in self.settings.items():
            sections.setdefault(name, {}).update(keys)
        self.config_path.write_text(render_toml(sections))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def tcp_ports(self) -> list[int]:
        return [port for key, port in self.ports.items() if key != "logjam.pub_port"]

    async def start(self) -> None:
        """Spawn the hub and wait until every listener (and /metrics) accepts connections."""
        assert self.proc is None or self.proc.poll() is not None, "hub already running"
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f'{{"chaos": "start {self.starts + 1}"}}\n'.encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "logport.cli", "serve", "--config", str(self.config_path),
                 "--data-dir", str(self.data_dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=REPO,
            )
        self.starts += 1
        deadline = began + START_TIMEOUT
        for port in self.tcp_ports():
            while not await _accepts(port):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"hub exited with {self.proc.returncode} at start; log:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"hub port {port} not accepting after {START_TIMEOUT}s; log:\n{self.log_tail()}")
                await asyncio.sleep(0.02)
        self.start_seconds.append(time.monotonic() - began)

    def kill(self) -> None:
        """SIGKILL: no shutdown code of the hub runs."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills += 1
        with open(self.log_path, "ab") as log:
            log.write(f'{{"chaos": "SIGKILL {self.kills}"}}\n'.encode())
        if self.power_cut is not None:
            self.power_cut()

    def stop(self) -> int:
        """SIGTERM and wait for a clean exit (returns the exit code)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc is not None else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    # --- /proc figures of the running hub ---

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def metrics_text(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=10) as r:
            return str(r.read().decode())


async def _accepts(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


def metric_value(text: str, name: str, labels: str = "") -> float:
    """Sum of the samples of `name` (whose label set contains `labels`) in Prometheus text."""
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        metric, _, label_part = key.partition("{")
        if metric == name and labels in label_part:
            total += float(value)
            found = True
    if not found:
        raise KeyError(f"metric {name}{{{labels}}} not found")
    return total


@dataclass
class KillFigures:
    kills: int = 0
    uptimes: list[float] = field(default_factory=list)


async def kill_loop(hub: HubProcess, kills: int, *, min_up: float, max_up: float, rng: random.Random,
                    progress: Any = None) -> KillFigures:
    """Let the hub run a random time in [min_up, max_up], SIGKILL it, restart it; `kills` times.

    `progress()` (optional) returns a number that must grow while the hub is up: each
    cycle waits for it to move first, so every kill lands on a hub that was serving.
    """
    figures = KillFigures()
    for _ in range(kills):
        up_since = time.monotonic()
        if progress is not None:
            before = progress()
            deadline = up_since + 20.0
            while progress() == before:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no progress for 20 s after restart {hub.starts}; log:\n{hub.log_tail()}")
                await asyncio.sleep(0.01)
        await asyncio.sleep(rng.uniform(min_up, max_up))
        hub.kill()
        figures.kills += 1
        figures.uptimes.append(time.monotonic() - up_since)
        await asyncio.sleep(rng.uniform(0.0, 0.2))  # clients see refused connections for a moment
        await hub.start()
    return figures


# --- verifying a data directory after crashes ---


async def check_store(data_dir: Path) -> dict[str, int]:
    """Every chunk passes `logport verify` (checksums, frames, writer records, chunk continuity), and
    SegmentStore.open recovers the directory to the same ends.

    Run on a directory whose hub is stopped. Returns the bytes of each segment.
    """
    sizes = await asyncio.to_thread(_check_chunks, data_dir)
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    try:
        for name, size in sizes.items():
            info = store.info(name)
            assert info.end_offset - info.start_offset == size, (name, info, size)
    finally:
        await store.close()
    return sizes


def _check_chunks(data_dir: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    reader = DirectoryReader(data_dir)
    for report in verify(data_dir):
        assert not report.bad, f"{report.segment}: {report.bad}"
        start, end, _ = reader.bounds(report.segment)
        sizes[report.segment] = end - start
    return sizes


def stored_events(data_dir: Path, segment: str) -> list[bytes]:
    """Every Event body of `segment`, in order (read with DirectoryReader, as `logport cat` does)."""
    reader = DirectoryReader(data_dir)
    if segment not in reader.segment_names():
        return []
    return [bytes(body) for _, body in reader.iter_events(segment)]


def free_tcp_port() -> int:
    return free_port()


def raise_nofile(wanted: int) -> int:
    """Raise this process's RLIMIT_NOFILE soft limit towards `wanted`; returns the new soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard if hard != resource.RLIM_INFINITY else wanted)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connect_raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


@dataclass
class Crash:
    """How a chaos test's hub goes down: SIGKILL alone, or SIGKILL and a power loss of its data directory's
    file system (a LazyFS mount that loses whatever was not synced, each time in the next way)."""

    kind: str
    data_dir: Path | None = None
    power_cut: Callable[[], None] | None = None
    losses: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def crash_of_kind(kind: str, tmp_path: Path, seed: int = 0) -> Iterator[Crash]:
    if kind == "sigkill":
        yield Crash(kind)
        return
    from tests.powerloss.lazyfs import MODES, LazyFS, fuse_skip_reason

    reason = fuse_skip_reason()
    if reason:
        import pytest

        pytest.skip(reason)
    rng = random.Random(seed)
    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as fs:
        crash = Crash(kind, fs.mountpoint / "data")

        def power_cut() -> None:
            mode = MODES[sum(crash.losses.values()) % len(MODES)]
            fs.power_loss(mode, seed=rng.randrange(1 << 30), block=rng.choice([0, 512, 4096]))
            crash.losses[mode] = crash.losses.get(mode, 0) + 1

        crash.power_cut = power_cut
        yield crash
