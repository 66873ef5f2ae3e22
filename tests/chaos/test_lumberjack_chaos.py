"""Lumberjack (Beats) through >= 10 SIGKILLs of the hub, sent by the real pylogbeat client.

A window that was not acknowledged (connection lost, refused, cut mid-ack) is sent again on a new
connection, as Filebeat does: at-least-once. Every acknowledged event must be stored.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
from pathlib import Path

import pylogbeat
import pytest

from logport.batch import decode_batch
from tests.chaos.harness import Crash, HubProcess, check_store, kill_loop, stored_events
from tests.support import child_pids

KILLS = 12
WRITERS = 2
WINDOW = 50


class BeatWriter:
    """One thread: windows of WINDOW events {"w", "seq"} through pylogbeat, resent until acknowledged."""

    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.port = port
        self.acked = 0  # events acknowledged (a prefix of seq)
        self.resends = 0
        self.errors: collections.Counter[str] = collections.Counter()

    def run(self, stop: threading.Event) -> None:
        client: pylogbeat.PyLogBeatClient | None = None
        window: list[dict[str, object]] = []
        while not stop.is_set() or window:
            if not window:
                window = [{"w": self.index, "seq": self.acked + i, "message": "x" * 40} for i in range(WINDOW)]
            try:
                if client is None:
                    client = pylogbeat.PyLogBeatClient("127.0.0.1", self.port, timeout=5.0, use_logging=True)
                    client.connect()
                client.send(window)  # returns once the whole window is acknowledged
                self.acked += len(window)
                window = []
            except Exception as e:  # refused, reset, cut mid-ack (struct.error on a short read), timeout
                self.errors[type(e).__name__] += 1
                self.resends += 1
                if client is not None:
                    try:
                        client.close()
                    except Exception:
                        pass
                    client = None
                time.sleep(0.02)
        if client is not None:
            client.close()


@pytest.mark.slow
async def test_lumberjack_windows_survive_sigkill_at_least_once(tmp_path: Path, crash: Crash) -> None:
    rng = random.Random(5044)
    # every window (pylogbeat sends W, then one C of it) goes to a decode worker: kills land there too
    hub = HubProcess(tmp_path / "hub", ("lumberjack",),
                     settings={"lumberjack": {"decode_offload_bytes": 0, "decode_workers": 2}},
                     data_dir=crash.data_dir, power_cut=crash.power_cut)
    await hub.start()
    began = time.monotonic()
    stop = threading.Event()
    writers = [BeatWriter(i, hub.ports["lumberjack"]) for i in range(WRITERS)]
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in writers]
    for t in threads:
        t.start()
    try:
        figures = await kill_loop(hub, KILLS, min_up=0.3, max_up=1.0, rng=rng,
                                  progress=lambda: sum(w.acked for w in writers))
    finally:
        stop.set()
        for t in threads:
            await asyncio.to_thread(t.join, 60)
        hub.stop()
    elapsed = time.monotonic() - began
    assert not any(t.is_alive() for t in threads), "a pylogbeat writer did not finish its last window"

    stored: collections.Counter[tuple[int, int]] = collections.Counter()
    for body in stored_events(hub.data_dir, "lumberjack"):
        batch = decode_batch(body)
        assert batch.option.get("source") == "lumberjack"
        for entry in batch:
            stored[(entry.record["w"], entry.record["seq"])] += 1
    assert figures.kills >= 10
    for w in writers:
        assert w.acked > 0
        missing = [s for s in range(w.acked) if stored[(w.index, s)] == 0]
        assert not missing, f"writer {w.index}: {len(missing)} acknowledged events not stored, e.g. {missing[:5]}"
    extra = [key for key in stored if key[1] >= writers[key[0]].acked]
    assert not extra, f"events stored that were never sent: {extra[:5]}"
    duplicates = sum(n - 1 for n in stored.values() if n > 1)
    sizes = await check_store(hub.data_dir)
    assert sizes["lumberjack"] > 0
    print(f"\nlumberjack chaos: {figures.kills} SIGKILLs in {elapsed:.1f}s; pylogbeat {sum(w.acked for w in writers)} "
          f"acknowledged events all stored, {duplicates} stored twice (at-least-once); resends "
          f"{sum(w.resends for w in writers)} ({dict(sum((w.errors for w in writers), collections.Counter()))})")


def _running(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # an orphan its new parent has not reaped yet is gone all the same


def _send_window(port: int) -> None:
    with pylogbeat.PyLogBeatClient("127.0.0.1", port, timeout=5.0) as client:
        client.send([{"message": f"event {i}"} for i in range(50)])


async def test_decode_workers_die_with_a_killed_hub(tmp_path: Path) -> None:
    """A SIGKILLed hub runs no shutdown code: its decode workers must go by themselves, holding nothing."""
    hub = HubProcess(tmp_path / "hub", ("lumberjack",),
                     settings={"lumberjack": {"decode_offload_bytes": 0, "decode_workers": 2}})
    await hub.start()
    try:
        for _ in range(2):
            await asyncio.to_thread(_send_window, hub.ports["lumberjack"])
            workers = child_pids(hub.pid, "spawn_main")
            assert workers, "the window was not decoded by a worker"
            hub.kill()
            deadline = time.monotonic() + 5
            while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not [pid for pid in workers if _running(pid)], "decode workers outlived the hub"
            await hub.start()  # the port and the data directory are free again
        await asyncio.to_thread(_send_window, hub.ports["lumberjack"])
    finally:
        hub.stop()
