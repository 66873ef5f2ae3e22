"""A file system that loses what was not fsynced, for power-loss tests (after Jepsen's LazyFS and
CrashMonkey): the Python API that mounts it, cuts its power and unmounts it.

`LazyFS(backing, mountpoint)` mounts, with FUSE, a view of the directory `backing` (the disk) at
`mountpoint`, served by a separate process (fs.py) so that any process may write there, and may be
SIGKILLed meanwhile. Through the mount, writes are kept in memory until the file is fsynced or
fdatasynced, and creates, renames, unlinks, mkdirs and rmdirs until their directory is fsynced;
`power_loss(mode)` then drops what was not made durable (or, by mode, lets a random part of it
through) and the mount shows the disk as after a reboot. The exact model is in model.py's
docstring; the unsynced data of one file is overlay.py's.

    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as fs:
        ...  # start a server writing under fs.mountpoint, SIGKILL it
        fs.power_loss("torn", seed=7)
        ...  # start it again on fs.mountpoint and check what it recovered

Modes: "drop" (nothing unsynced survives), "subset" (each unsynced write, or each `block`-aligned
piece of one with block > 0, survives or not at random), "torn" (the unsynced writes of each file
survive in order up to a random byte, the last one cut there), "reorder" (torn, plus a random piece
of one later write). Randomness is seeded: the same seed and the same unsynced state give the same
result. With namespace="prefix", a random prefix of the unsynced namespace changes survives too.

Processes should be gone (or at least have closed their files) before a power loss: a descriptor
opened before it fails with EIO afterwards, as a stale handle would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from .overlay import MODES, Mode

__all__ = ["MODES", "LazyFS", "LazyFSError", "Mode", "fuse_skip_reason", "is_mounted"]

_SERVER = Path(__file__).with_name("fs.py")


class LazyFSError(RuntimeError):
    pass


def fuse_skip_reason() -> str | None:
    """Why this machine cannot mount the lazy file system, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: no FUSE here"
    if os.geteuid() != 0:
        return "mounting FUSE needs root here"
    return None


def is_mounted(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a mountpoint, even one whose FUSE server is dead (os.path.ismount says
    no there: its stat fails with ENOTCONN)."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            decoded = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
            if decoded == target:
                return True
    return False


class LazyFS:
    """The lazy file system over `backing`, mounted at `mountpoint` while started (a context
    manager: unmounted at exit, whatever happened)."""

    def __init__(self, backing: str | os.PathLike[str], mountpoint: str | os.PathLike[str], *,
                 seed: int = 0, debug: bool = False, timeout: float = 10.0) -> None:
        self.backing = Path(backing).absolute()
        self.mountpoint = Path(mountpoint).absolute()
        self.seed = seed
        self.debug = debug
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._scratch: Path | None = None

    @property
    def control(self) -> Path:
        if self._scratch is None:
            raise LazyFSError("not started")
        return self._scratch / "control.sock"

    @property
    def log(self) -> Path:
        """The file system process's log (its stderr)."""
        if self._scratch is None:
            raise LazyFSError("not started")
        return self._scratch / "lazyfs.log"

    def __enter__(self) -> LazyFS:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> LazyFS:
        """Mount; returns once requests are served."""
        if self._proc is not None:
            raise LazyFSError("already started")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if is_mounted(self.mountpoint):
            raise LazyFSError(f"{self.mountpoint} is a mountpoint already")
        self._scratch = Path(tempfile.mkdtemp(prefix="lazyfs-"))  # short: a socket path's limit
        cmd = [sys.executable, str(_SERVER), "--backing", str(self.backing), "--mount",
               str(self.mountpoint), "--control", str(self.control), "--seed", str(self.seed)]
        if self.debug:
            cmd.append("--debug")
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while True:
            if self._proc.poll() is not None:
                error = LazyFSError(f"the file system exited ({self._proc.returncode}): {self._log_text()}")
                self.stop()
                raise error
            if self.control.exists() and is_mounted(self.mountpoint):
                try:
                    self._call("ping")
                    return self
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise LazyFSError(f"not mounted after {self.timeout}s: {self._log_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Unmount and end the process (lazily unmounted if something still holds it)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    self._call("shutdown", timeout=5)
                except (OSError, LazyFSError):
                    proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if is_mounted(self.mountpoint):
            tool = ["umount", "-l"] if os.geteuid() == 0 else ["fusermount3", "-u", "-z"]
            subprocess.run([*tool, str(self.mountpoint)], check=False, capture_output=True)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def power_loss(self, mode: Mode = "drop", *, seed: int | None = None, block: int = 0,
                   namespace: Literal["revert", "prefix"] = "revert") -> dict[str, Any]:
        """Cut the power: keep what was durable (and, by `mode`, part of what was not), forget the
        rest, and show the disk as after a reboot. Returns what happened: the seed used, and per
        file (path under the mount) how many unsynced ops it had and how many were applied."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        return self._call("power_loss", mode=mode, seed=seed, block=block, namespace=namespace,
                          timeout=120)

    def stats(self) -> dict[str, int]:
        """Counters: fsyncs, fdatasyncs, fsyncdirs, writes, written_bytes, synced_bytes,
        committed_changes, power_losses; and now: pending_bytes, pending_files, pending_changes."""
        return self._call("stats")

    def sync(self) -> None:
        """Make everything durable, as sync(1) would (FUSE does not pass syncfs on)."""
        self._call("sync", timeout=120)

    def _call(self, op: str, timeout: float = 30, **args: Any) -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.control))
            sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise LazyFSError(f"{op}: the file system closed the connection: {self._log_text()}")
                buf += chunk
        reply = json.loads(buf)
        if not reply["ok"]:
            raise LazyFSError(f"{op}: {reply['error']}")
        return reply["result"]

    def _log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except (OSError, LazyFSError):
            return ""


if __name__ == "__main__":  # python -m tests.powerloss.lazyfs --backing D --mount M --control S
    from .fs import main

    main()
