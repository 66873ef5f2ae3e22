"""README.md runs as printed: its fenced sh/bash and python blocks, in order, in an empty directory.

Each of them runs unless the line before it is `<!-- readme-test: skip (why) -->`. A block marked
`<!-- readme-test: background (why) -->` (the hub's `logport serve`) is started in the background;
the test waits until the hub's ports take connections and stops it at the end. The README's hub
listens on the default ports, so the test is skipped when one of them is taken (another hub here).
Shell blocks see the venv on PATH, as the README asks; Python blocks run with the venv's Python but
without the venv on PATH (`.venv/bin/python example.py`), and no block sees the test run's Spark
settings (PYSPARK_PYTHON and the like), as in a new user's shell.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from logport.config import Config
from tests.conftest import REPO

# a hub and two Spark JVMs running every table builder: 184 s on a quiet 2-core machine, near the default 300 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

README = REPO / "README.md"
SHELLS = {"sh", "bash", "shell"}
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARK = re.compile(r"<!--\s*readme-test:\s*(?P<mark>\w+)\s*(?P<why>\(.*\))?\s*-->")
MARKS = {"skip", "background"}
SPARK_NOISE = ("NativeCodeLoader", "MacAddressUtil", "Truncated the string representation")
BLOCK_TIMEOUT = 240.0  # seconds; a Spark block takes 15-30 s on a busy 2-core machine


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    mark: str  # "" (run it), "skip" or "background"
    why: str

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang}{', ' + self.mark if self.mark else ''})"


def readme_blocks(text: str) -> list[Block]:
    blocks = []
    for m in FENCE.finditer(text):
        line_before = text[: m.start()].rstrip("\n").rpartition("\n")[2]
        mark = MARK.search(line_before) if "readme-test" in line_before else None
        if "readme-test" in line_before and (mark is None or mark["mark"] not in MARKS):
            raise AssertionError(f"README.md:{text.count(chr(10), 0, m.start()) + 1}: unknown marker "
                                 f"{line_before!r}; known: {', '.join(sorted(MARKS))}")
        blocks.append(Block(line=text.count("\n", 0, m.start()) + 1, lang=m["lang"].lower(), code=m["code"],
                            mark=mark["mark"] if mark else "", why=(mark["why"] or "") if mark else ""))
    return blocks


def hub_ports() -> list[tuple[str, int, int]]:
    """(listener, port, socket type) of a hub with the default config: the README's "Ports"."""
    c = Config()
    tcp, udp = socket.SOCK_STREAM, socket.SOCK_DGRAM
    return [("forward", c.forward.port, tcp), ("forward udp", c.forward.port, udp),
            ("lumberjack", c.lumberjack.port, tcp), ("segment", c.segment.port, tcp),
            ("logjam router", c.logjam.router_port, tcp), ("logjam pull", c.logjam.pull_port, tcp),
            ("logjam pub", c.logjam.pub_port, tcp), ("metrics", c.metrics.port, tcp)]


def port_taken(port: int, kind: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the hub binds: TIME_WAIT is no conflict
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def block_env(venv_on_path: bool) -> dict[str, str]:
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_")) and k != "VIRTUAL_ENV"}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != venv_bin]
    env["PATH"] = os.pathsep.join([str(venv_bin), *path] if venv_on_path else path)
    return env


def command(block: Block, cwd: Path) -> list[str]:
    if block.lang == "python":
        script = cwd / f"readme_block_{block.line}.py"
        script.write_text(block.code, encoding="utf-8")
        return [sys.executable, script.name]
    return ["bash", "-euo", "pipefail", "-c", block.code]


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-chars:] if path.exists() else ""


def wait_for_hub(hub: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    waiting = [(name, port) for name, port, kind in hub_ports() if kind == socket.SOCK_STREAM]
    deadline = time.monotonic() + timeout
    while waiting:
        if hub.poll() is not None:
            if "Address already in use" in tail(log):  # taken between the check and the start
                pytest.skip(f"a default port of the README's hub was taken as it started: {tail(log, 300)}")
            raise AssertionError(f"the README's hub exited with {hub.returncode}:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the README's hub did not open {waiting} in {timeout:.0f} s:\n{tail(log)}")
        name, port = waiting[0]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                waiting.pop(0)
        except OSError:
            time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the block's process group (bash and what it started), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


def test_readme_blocks_are_marked_and_the_hub_starts_first() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert any(b.lang == "python" and not b.mark for b in blocks)
    for block in blocks:  # blocks in other languages (toml, text, ...) are not run
        assert block.mark != "skip" or block.why, f"{block}: say why it is skipped: readme-test: skip (why)"
    runs = [b for b in blocks if b.lang in SHELLS | {"python"} and b.mark != "skip"]
    assert runs[0].mark == "background" and "logport serve" in runs[0].code, \
        "the first block the test runs starts the hub the others talk to"


def test_readme_runs_as_printed(tmp_path: Path) -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    taken = [f"{name} {port}" for name, port, kind in hub_ports() if port_taken(port, kind)]
    if taken:
        pytest.skip(f"the README's hub needs the default ports, and these are in use: {', '.join(taken)}")
    background: list[subprocess.Popen[bytes]] = []
    try:
        for block in blocks:
            if block.mark == "skip" or block.lang not in SHELLS | {"python"}:
                continue
            env = block_env(venv_on_path=block.lang != "python")
            log = tmp_path / f"readme_block_{block.line}.log"
            with log.open("wb") as out:
                if block.mark == "background":
                    background.append(subprocess.Popen(command(block, tmp_path), cwd=tmp_path, env=env,
                                                       stdout=out, stderr=subprocess.STDOUT,
                                                       start_new_session=True))
                    wait_for_hub(background[-1], log)
                    continue
                started = time.monotonic()
                try:
                    done = subprocess.run(command(block, tmp_path), cwd=tmp_path, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{block} ran over {BLOCK_TIMEOUT:.0f} s:\n{block.code}\n--- output:\n{tail(log)}")
            assert done.returncode == 0, (f"{block} exited with {done.returncode} after "
                                          f"{time.monotonic() - started:.1f} s:\n{block.code}\n--- output:\n{tail(log)}")
            if "logport pipeline" in block.code:  # the Spark JVM's warnings nobody can act on are silenced
                noise = [w for w in SPARK_NOISE if w in log.read_text(errors="replace")]
                assert not noise, f"{block} printed Spark's {noise}:\n{tail(log)}"
    finally:
        for process in background:
            stop(process)
