"""Every `logport send` as a user runs it, against one hub process: behind `tail -F` a new line is stored within
2 s; Ctrl-C in a real terminal (tmux) and SIGTERM stop it mid-stream with one summary line (lines read,
acknowledged, not) and the command that sends the rest, exit 130 / 143, no traceback; that command, run on the
same input, stores the rest, and every line ends up stored exactly once. `kill -INT` of `send segment` works
(it once went unnoticed while the sender sat in a blocking read of stdin)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from logport.batch import BatchDecodeError, decode_batch
from logport.store.reader import DirectoryReader
from tests.chaos.harness import HubProcess
from tests.support import child_pids

pytestmark = pytest.mark.slow

SENDERS = ("forward", "lumberjack", "segment", "logjam")
VENV_BIN = str(Path(sys.executable).parent)
SUMMARY = re.compile(r"logport send (?P<sender>\w+): stopped by (?P<signal>SIG\w+): (?P<read>[\d,]+) lines? read, "
                     r"(?P<acked>[\d,]+) acknowledged, (?P<unacked>[\d,]+) not acknowledged.*?: "
                     r"(?P<resume>logport send .*?) < the same input")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    hub = HubProcess(tmp_path_factory.mktemp("hub"), SENDERS)
    asyncio.run(hub.start())
    try:
        yield hub
    finally:
        hub.stop()


@dataclass
class Run:
    """One sender's part of a scenario: its lines ({"run", "n"} JSON), where they are stored, its command."""

    sender: str
    run: str
    hub: HubProcess

    @property
    def segment(self) -> str:
        return self.run if self.sender == "segment" else self.sender

    def argv(self) -> list[str]:
        ports = self.hub.ports
        if self.sender == "segment":
            return ["send", "segment", self.segment, "--server", f"127.0.0.1:{ports['segment']}"]
        port = ports["logjam.router_port"] if self.sender == "logjam" else ports[self.sender]
        return ["send", self.sender, "--server", f"127.0.0.1:{port}"]

    def command(self) -> str:
        return "logport " + shlex.join(self.argv())

    def line(self, n: int) -> str:
        return json.dumps({"run": self.run, "n": n}) + "\n"

    def stored(self) -> list[int]:
        """The numbers of this run's lines the hub stored, in order (each once, when all is well)."""
        reader = DirectoryReader(self.hub.data_dir)
        try:
            if self.segment not in reader.segment_names():
                return []
            numbers = []
            for _, body in reader.iter_events(self.segment):
                try:
                    records = [entry.record for entry in decode_batch(body)]
                except BatchDecodeError:  # the segment sender's opaque lines
                    records = [json.loads(bytes(body))]
                numbers += [r["n"] for r in records if isinstance(r, dict) and r.get("run") == self.run]
            return numbers
        finally:
            reader.close()


def shell_env() -> dict[str, str]:
    """The user's shell: the venv's `logport` on PATH."""
    return {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def wait_until(what: str, done: Callable[[], bool], timeout: float = 60.0) -> float:
    began = time.monotonic()
    while not done():
        assert time.monotonic() - began < timeout, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.05)
    return time.monotonic() - began


def resume(runs: dict[str, Run], summaries: dict[str, str], inputs: dict[str, Path], total: int) -> None:
    """Run each printed resume command on the same input; then each line is stored exactly once."""
    procs = {}
    for sender in runs:
        match = SUMMARY.search(summaries[sender])
        assert match is not None, summaries[sender]
        assert match["sender"] == sender
        read, acked = int(match["read"].replace(",", "")), int(match["acked"].replace(",", ""))
        assert acked == read and int(match["unacked"].replace(",", "")) == 0, summaries[sender]  # drained
        if sender == "segment":
            assert "--connection-id" in match["resume"] and "exactly once" in summaries[sender]
        else:
            assert match["resume"].endswith(f"--skip-lines {acked}"), summaries[sender]
        procs[sender] = subprocess.Popen(["bash", "-c", f"{match['resume']} < {shlex.quote(str(inputs[sender]))}"],
                                         env=shell_env(), stderr=subprocess.PIPE, text=True)
    for sender, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Traceback" not in err, (sender, err)
    for sender, run in runs.items():
        assert run.stored() == list(range(total)), f"{sender}: not each line once"


def test_tail_f_stores_each_line_within_2_s_and_sigterm_stops_then_resumes(hub: HubProcess, tmp_path: Path) -> None:
    runs = {sender: Run(sender, f"tail-{sender}", hub) for sender in SENDERS}
    inputs = {sender: tmp_path / f"{sender}.log" for sender in SENDERS}
    for sender, run in runs.items():
        inputs[sender].write_text("".join(run.line(n) for n in range(100)))
    shells = {sender: subprocess.Popen(
        ["bash", "-c", f"tail -n +1 -F {shlex.quote(str(inputs[sender]))} | {run.command()}"], env=shell_env(),
        stderr=subprocess.PIPE, text=True, start_new_session=True) for sender, run in runs.items()}
    try:
        wait_until("the first 100 lines stored", lambda: all(len(r.stored()) == 100 for r in runs.values()))
        began = time.monotonic()
        for sender, run in runs.items():
            with inputs[sender].open("a") as f:
                f.write(run.line(100))
        took = {}
        while len(took) < len(runs) and time.monotonic() - began < 10:
            for sender, run in runs.items():
                if sender not in took and len(run.stored()) == 101:
                    took[sender] = time.monotonic() - began
            time.sleep(0.02)
        assert len(took) == len(runs) and max(took.values()) < 2.0, f"seconds until stored: {took}"
        for sender, run in runs.items():  # mid-stream: lines come as the signal does
            with inputs[sender].open("a") as f:
                f.write("".join(run.line(n) for n in range(101, 400)))
        senders = {sender: child_pids(shell.pid, "logport") for sender, shell in shells.items()}
        assert all(len(pids) == 1 for pids in senders.values()), senders
        for (pid,) in senders.values():
            os.kill(pid, signal.SIGTERM)
        for pids in senders.values():
            wait_until("the sender to stop", lambda pids=pids: not os.path.exists(f"/proc/{pids[0]}"), 30)
    finally:
        for shell in shells.values():
            os.killpg(shell.pid, signal.SIGKILL)  # tail -F, which follows for ever
    summaries = {sender: shell.communicate(timeout=30)[1] for sender, shell in shells.items()}
    for said in summaries.values():
        assert "Traceback" not in said and "stopped by SIGTERM" in said, said
    resume(runs, summaries, inputs, 400)


# writes the lines of a file to stdout: the first 300 at once, then one every 10 ms; immune to the terminal's
# Ctrl-C, which stops the sender it feeds (so the sender, not a closed pipe, ends the stream)
PRODUCER = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
for i, line in enumerate(open(sys.argv[1])):
    sys.stdout.write(line)
    sys.stdout.flush()
    if i >= 300:
        time.sleep(0.01)
"""


def tmux(server: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True, check=True).stdout


def test_ctrl_c_in_a_terminal_stops_each_sender_mid_stream_then_it_resumes(hub: HubProcess, tmp_path: Path) -> None:
    assert shutil.which("tmux"), "tmux missing: `make test` installs it"
    total = 3000  # 30 s of input after the first 300 lines: the stream is going on when Ctrl-C comes
    runs = {sender: Run(sender, f"ctrl-c-{sender}", hub) for sender in SENDERS}
    inputs = {sender: tmp_path / f"{sender}.jsonl" for sender in SENDERS}
    producer = tmp_path / "producer.py"
    producer.write_text(PRODUCER)
    server = f"logport-send-{os.getpid()}"
    for sender, run in runs.items():
        inputs[sender].write_text("".join(run.line(n) for n in range(total)))
        script = tmp_path / f"{sender}.sh"
        script.write_text(f"export PATH={shlex.quote(VENV_BIN)}:$PATH\n"
                          f"{shlex.quote(sys.executable)} {producer} {inputs[sender]} | {run.command()}\n"
                          f"echo EXITED $?\nsleep 120\n")
        tmux(server, "new-session", "-d", "-s", sender, "-x", "250", "-y", "20", f"bash {script}")
    try:
        wait_until("300 lines stored", lambda: all(len(r.stored()) >= 300 for r in runs.values()))
        for sender in runs:
            tmux(server, "send-keys", "-t", sender, "C-c")
        screens: dict[str, str] = {}

        def exited() -> bool:
            for sender in runs:
                screens[sender] = tmux(server, "capture-pane", "-p", "-J", "-t", sender)
            return all("EXITED" in screen for screen in screens.values())

        wait_until("each sender to exit", exited, 30)
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True)
    for sender, screen in screens.items():
        assert "EXITED 130" in screen and "Traceback" not in screen, screen
        assert len(runs[sender].stored()) < total, f"{sender}: the input ended before Ctrl-C"
    resume(runs, screens, inputs, total)


def test_kill_int_stops_send_segment(hub: HubProcess) -> None:
    """The signal to the sender alone (not a terminal's process group), while it waits for more input."""
    run = Run("segment", "kill-int", hub)
    proc = subprocess.Popen([sys.executable, "-m", "logport.cli", *run.argv()], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.write("".join(run.line(n) for n in range(10)))
    proc.stdin.flush()
    wait_until("10 lines stored", lambda: len(run.stored()) == 10)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)  # stdin still open: the signal, not an end of input, stops it
    finally:
        proc.kill()
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stdin.close()
    assert proc.returncode == 130, err
    (line,) = err.splitlines()
    match = SUMMARY.search(line)
    assert match is not None and (match["read"], match["acked"]) == ("10", "10"), line
