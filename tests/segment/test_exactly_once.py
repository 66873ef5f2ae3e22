"""Exactly-once appends across SIGKILLs of the hub and connections cut at random moments."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from logport.clients.segment import SegmentAppender
from logport.store.reader import DirectoryReader
from tests.conftest import free_port

EVENTS = 100_000
KILLS = 4


class HubProcess:
    """`logport serve` as a child process, with only the segment listener and fsync = always."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.data_dir = tmp_path / "data"
        self.config = tmp_path / "hub.toml"
        self.config.write_text(
            f'[store]\ndata_dir = "{self.data_dir}"\nfsync = "always"\n'
            "[metrics]\nenabled = false\n[forward]\nenabled = false\n[lumberjack]\nenabled = false\n"
            f"[logjam]\nenabled = false\n[segment]\nport = {self.port}\n"
            '[hub]\nlog_level = "warning"\n'
        )
        self.log = tmp_path / "hub.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "logport.cli", "serve", "--config", str(self.config)],
                                         stdout=log, stderr=log)
        self.starts += 1

    async def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                await asyncio.sleep(0.05)
        raise TimeoutError(f"hub did not listen on {self.port}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def body(i: int) -> bytes:
    return b"event %06d " % i + b"." * (i % 150)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_exactly_once_across_sigkill_and_cut_connections(tmp_path: Path) -> None:
    rng = random.Random(5)
    hub = HubProcess(tmp_path)
    hub.start()
    await hub.wait_ready()
    cid = uuid.uuid4()
    app = SegmentAppender("127.0.0.1", hub.port, "exactly-once", connection_id=cid, block_size=32 * 1024,
                          linger=0.001, max_unacked_bytes=512 * 1024, reconnect_delay=0.02,
                          max_reconnect_delay=0.1, retry_for=30.0)
    await app.start()
    appended = 0
    done = asyncio.Event()
    unacked_at_kill: list[int] = []
    hold_cuts = asyncio.Event()

    async def killer() -> None:
        for k in range(KILLS):
            target = (k + 1) * EVENTS // (KILLS + 1)
            while appended < target and not done.is_set():
                await asyncio.sleep(0.005)
            await asyncio.sleep(rng.uniform(0, 0.05))
            if k % 2:
                # stopped first: the blocks sent from now on reach a socket nobody reads, so the kill loses them
                # for certain and the client must send them again (a kill while the hub runs may find it has
                # stored everything it was sent: nothing to resend). No cut meanwhile: a client reconnecting to
                # a stopped hub waits for its AppendSetup and sends nothing; then the hub runs on and stops again
                hold_cuts.set()
                for _ in range(20):
                    hub.stop()
                    sent_before = app._high_water
                    for _ in range(500):
                        if app._high_water > sent_before or done.is_set():
                            break
                        await asyncio.sleep(0.001)
                    if app._high_water > sent_before or done.is_set():
                        break
                    hub.resume()
                    await asyncio.sleep(0.05)
                hold_cuts.clear()
            else:
                for _ in range(200):  # kill mid-stream: while blocks are unacknowledged (acks come fast)
                    if app._unacked_bytes > 0 or done.is_set():
                        break
                    await asyncio.sleep(0.001)
            unacked_at_kill.append(app._unacked_bytes)
            hub.kill()
            await asyncio.sleep(rng.uniform(0, 0.2))
            hub.start()
            await hub.wait_ready()

    async def cutter() -> None:
        while not done.is_set():
            await asyncio.sleep(rng.uniform(0.02, 0.3))
            if not hold_cuts.is_set():
                app.abort_connection()

    tasks = [asyncio.create_task(killer()), asyncio.create_task(cutter())]
    try:
        for i in range(EVENTS):
            await app.append(body(i))
            appended = i + 1
            if i % 2000 == 0:
                await asyncio.sleep(0.01)  # keep the appends spread over the kills
        await tasks[0]
        await app.flush()
    finally:
        done.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await app.close(flush=False)
        hub.kill()
    reconnects = app.reconnects
    got = [bytes(b) for _, b in DirectoryReader(hub.data_dir).iter_events("exactly-once")]
    assert hub.starts == KILLS + 1
    assert reconnects >= KILLS
    assert sum(1 for n in unacked_at_kill if n > 0) >= KILLS // 2, unacked_at_kill  # killed mid-stream
    assert app.retransmitted_bytes > 0
    assert len(got) == EVENTS, f"{len(got)} events stored, {len(set(got))} distinct"
    assert got == [body(i) for i in range(EVENTS)]
    print(f"\n{EVENTS} events exactly once across {KILLS} SIGKILLs (unacked bytes at each: {unacked_at_kill})"
          f" and {reconnects} reconnects; {app.retransmitted_bytes} bytes sent again")
