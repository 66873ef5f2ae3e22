"""Tail latency: a reader following a segment over the protocol gets each event right after its append."""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
from pathlib import Path

from logport.clients.segment import SegmentReader
from logport.hub import Hub
from tests.segment.test_server import hub_config

COUNT = 200


async def test_follow_latency(tmp_path: Path) -> None:
    config = hub_config(tmp_path, keepalive_interval=1.0)
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    store = hub.runtime.store  # type: ignore[union-attr]
    await store.create("tail")
    received: dict[int, float] = {}
    try:
        async with SegmentReader("127.0.0.1", config.segment.port) as reader:

            async def follow() -> None:
                async for _, body in reader.events("tail", follow=True, wait=5.0):
                    (seq,) = struct.unpack_from(">I", body)
                    received[seq] = time.perf_counter()
                    if seq == COUNT - 1:
                        return

            task = asyncio.create_task(follow())
            await asyncio.sleep(0.05)
            called: dict[int, float] = {}
            acked: dict[int, float] = {}
            for seq in range(COUNT):
                await asyncio.sleep(0.004 + (seq % 5) * 0.002)  # the reader is waiting at the tail each time
                called[seq] = time.perf_counter()
                await store.append("tail", [struct.pack(">I", seq) + b"x" * 200])
                acked[seq] = time.perf_counter()
            await asyncio.wait_for(task, 10)
    finally:
        await hub.stop()
    assert sorted(received) == list(range(COUNT))
    from_call = statistics.median(received[s] - called[s] for s in range(COUNT)) * 1000
    from_ack = statistics.median(received[s] - acked[s] for s in range(COUNT)) * 1000
    print(f"\ntail latency, median over {COUNT} events: {from_call:.2f} ms from the append call "
          f"(fsync included), {from_ack:.2f} ms from the durable append's return")
    assert from_ack < 5.0
    assert from_call < 50.0  # generous: fsync on a shared disk
