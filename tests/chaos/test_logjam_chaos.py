"""Logjam sync sends (ROUTER, empty first frame: the `202 Accepted` comes after the store) through
>= 10 SIGKILLs of the hub, with logport's LogjamProducer. A send without a reply in time is sent
again: every accepted message is stored, at least once. (Plain async sends and PUB/SUB are
at-most-once by design: nothing tells the sender what was lost.)
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import time
from pathlib import Path

import pytest

from logport.batch import decode_batch
from logport.clients.logjam import LogjamProducer
from logport.errors import LogportError
from tests.chaos.harness import Crash, HubProcess, check_store, kill_loop, stored_events

KILLS = 12
PRODUCERS = 3


class SyncSender:
    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.producer = LogjamProducer(f"tcp://127.0.0.1:{port}", app_env="chaos-production", topic="logs.chaos")
        self.accepted = 0  # messages answered 202 (a prefix of seq)
        self.resends = 0

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                body = {"w": self.index, "seq": self.accepted, "action": "Chaos#send", "total_time": 1.5}
                try:
                    await self.producer.send_sync(body, timeout=1.0)
                except LogportError:  # no reply in time (the hub died): the same message again
                    self.resends += 1
                    continue
                self.accepted += 1
        finally:
            self.producer.close()


@pytest.mark.slow
async def test_logjam_sync_sends_survive_sigkill(tmp_path: Path, crash: Crash) -> None:
    rng = random.Random(9604)
    hub = HubProcess(tmp_path / "hub", ("logjam",), settings={"logjam": {"heartbeat_interval": 1.0}},
                     data_dir=crash.data_dir, power_cut=crash.power_cut)
    await hub.start()
    began = time.monotonic()
    stop = asyncio.Event()
    senders = [SyncSender(i, hub.ports["logjam.router_port"]) for i in range(PRODUCERS)]
    tasks = [asyncio.create_task(s.run(stop)) for s in senders]
    try:
        figures = await kill_loop(hub, KILLS, min_up=0.3, max_up=1.0, rng=rng,
                                  progress=lambda: sum(s.accepted for s in senders))
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        hub.stop()
    elapsed = time.monotonic() - began

    stored: collections.Counter[tuple[int, int]] = collections.Counter()
    for body in stored_events(hub.data_dir, "logjam"):
        batch = decode_batch(body)
        assert batch.option.get("source") == "logjam"
        for entry in batch:
            record = entry.record if isinstance(entry.record, dict) else json.loads(entry.record)
            stored[(record["w"], record["seq"])] += 1
    assert figures.kills >= 10
    for s in senders:
        assert s.accepted > 0
        missing = [n for n in range(s.accepted) if stored[(s.index, n)] == 0]
        assert not missing, f"producer {s.index}: {len(missing)} accepted messages not stored, e.g. {missing[:5]}"
    duplicates = sum(n - 1 for n in stored.values() if n > 1)
    sizes = await check_store(hub.data_dir)
    assert sizes["logjam"] > 0
    print(f"\nlogjam chaos: {figures.kills} SIGKILLs in {elapsed:.1f}s; {sum(s.accepted for s in senders)} sync "
          f"sends accepted, all stored, {duplicates} stored twice (a lost reply: at-least-once); resends "
          f"{sum(s.resends for s in senders)}")
