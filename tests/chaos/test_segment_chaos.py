"""Segment appends through >= 10 SIGKILLs of the hub: every acknowledged event stored exactly once, in order."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from logport.clients.segment import SegmentAppender
from tests.chaos.harness import Crash, HubProcess, check_store, kill_loop, stored_events

KILLS = 12
WRITERS = 3
SEGMENT = "chaos-seg"


def body(writer: int, seq: int) -> bytes:
    return f"w{writer}:{seq:09d}:".encode() + b"x" * 40  # fixed size: the ack level counts events


FRAME = 8 + len(body(0, 0))


class Writer:
    """One exactly-once appender that keeps appending until told to stop."""

    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.appender = SegmentAppender("127.0.0.1", port, SEGMENT, reconnect_delay=0.02, max_reconnect_delay=0.2,
                                        linger=0.002, max_unacked_bytes=256 * 1024, retry_for=60.0)
        self.appended = 0
        self.base: int | None = None  # ack level at the first setup (0 for a fresh id)

    def acked(self) -> int:
        level = self.appender.ack_level
        if level is None:
            return 0
        if self.base is None:
            self.base = 0
        return (level - self.base) // FRAME

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.appender.append_many([body(self.index, self.appended + i) for i in range(20)])
            self.appended += 20
            await asyncio.sleep(0.001)


@pytest.mark.slow
async def test_segment_appends_survive_sigkill_exactly_once(tmp_path: Path, crash: Crash) -> None:
    rng = random.Random(8)
    hub = HubProcess(tmp_path / "hub", ("segment",), data_dir=crash.data_dir, power_cut=crash.power_cut)
    await hub.start()
    began = time.monotonic()
    writers = [Writer(i, hub.ports["segment"]) for i in range(WRITERS)]
    for w in writers:
        await w.appender.start()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.run(stop)) for w in writers]
    acked_at_kill: list[int] = []

    def progress() -> int:
        acked_at_kill.append(sum(w.acked() for w in writers))
        return acked_at_kill[-1]

    try:
        figures = await kill_loop(hub, KILLS, min_up=0.2, max_up=0.9, rng=rng, progress=progress)
        stop.set()
        await asyncio.gather(*tasks)
        await asyncio.wait_for(asyncio.gather(*(w.appender.flush() for w in writers)), 60)
        acked = [w.acked() for w in writers]
        reconnects = [w.appender.reconnects for w in writers]
    finally:
        stop.set()
        for w in writers:
            await w.appender.close(flush=False)
        hub.stop()
    elapsed = time.monotonic() - began

    assert figures.kills >= 10
    assert all(r >= KILLS for r in reconnects), reconnects  # every kill cut every writer
    for w, n in zip(writers, acked, strict=True):
        assert n == w.appended, f"writer {w.index}: {n} acked of {w.appended} appended after flush"

    events = stored_events(hub.data_dir, SEGMENT)
    per_writer: dict[int, list[int]] = {i: [] for i in range(WRITERS)}
    for event in events:
        writer, seq, _ = event.split(b":", 2)
        per_writer[int(writer[1:])].append(int(seq))
    for w in writers:
        seqs = per_writer[w.index]
        assert seqs == list(range(w.appended)), (
            f"writer {w.index}: {len(seqs)} stored for {w.appended} acknowledged; "
            f"first difference at {next((i for i, s in enumerate(seqs) if s != i), len(seqs))}"
        )
    sizes = await check_store(hub.data_dir)
    assert sizes[SEGMENT] > 0
    print(f"\nsegment chaos: {figures.kills} SIGKILLs, {len(events)} events from {WRITERS} writers "
          f"exactly once in order, reconnects {reconnects}, uptimes {min(figures.uptimes):.2f}.."
          f"{max(figures.uptimes):.2f}s, restart {max(hub.start_seconds):.2f}s max, {elapsed:.1f}s total")
