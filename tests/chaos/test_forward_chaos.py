"""Forward with chunk ids through >= 10 SIGKILLs of the hub.

Two real clients send at once:
- @fluent-org/logger's FluentClient (npm, requireAckResponse): it gives a retried event a NEW chunk id,
  so per event it is at-least-once; per chunk id exactly once (no acknowledged chunk lost or doubled);
- logport's ForwardSender: it resends a chunk with the SAME id until acked, so the server's chunk-id
  dedup makes it exactly-once per event.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import shutil
import time
from pathlib import Path

import pytest

from logport.batch import decode_batch
from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress
from tests.chaos.harness import Crash, HubProcess, check_store, kill_loop, stored_events
from tests.conftest import NODE_MODULES

KILLS = 12
SENDERS = 3  # logport ForwardSender tasks
BATCH = 20
NODE_SCRIPT = Path(__file__).parent / "node" / "forward_acked_stream.js"


class LogportForwardWriter:
    """Sends batches of BATCH events {"w": index, "seq": n} with logport's sender; counts the acked ones."""

    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.sender = ForwardSender(SenderConfig(
            servers=[ServerAddress("127.0.0.1", port)], ack_timeout=2.0, connect_timeout=1.0,
            retries=10_000, retry_wait=0.02, hostname="chaos-client"))
        self.acked = 0  # events

    async def run(self, stop: asyncio.Event) -> None:
        await self.sender.start()
        seq = 0
        try:
            while not stop.is_set():
                now = int(time.time())
                events = [(now, i, {"w": self.index, "seq": seq + i}) for i in range(BATCH)]
                await self.sender.send("chaos.logport", events)  # returns once acked (same chunk id on retries)
                seq += BATCH
                self.acked = seq
        finally:
            await self.sender.close()


@pytest.mark.slow
async def test_forward_chunks_survive_sigkill(tmp_path: Path, crash: Crash) -> None:
    node = shutil.which("node")
    assert node is not None and (NODE_MODULES / "@fluent-org" / "logger").is_dir(), "node peers not installed"
    rng = random.Random(24224)
    hub = HubProcess(tmp_path / "hub", ("forward",), data_dir=crash.data_dir, power_cut=crash.power_cut)
    await hub.start()
    began = time.monotonic()
    port = hub.ports["forward"]

    npm = await asyncio.create_subprocess_exec(
        node, str(NODE_SCRIPT), json.dumps({"port": port, "tag": "chaos.npm", "inflight": 200, "ackTimeout": 1500}),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"NODE_PATH": str(NODE_MODULES), "PATH": "/usr/bin:/bin"})
    assert npm.stdin is not None and npm.stdout is not None and npm.stderr is not None
    npm_acked: collections.Counter[int] = collections.Counter()
    npm_done: list[str] = []

    async def read_npm() -> None:
        assert npm.stdout is not None
        async for raw in npm.stdout:
            line = raw.decode().split()
            if line and line[0] == "A":
                npm_acked[int(line[1])] += 1
            elif line and line[0] == "DONE":
                npm_done.append(raw.decode().strip())

    npm_reader = asyncio.create_task(read_npm())
    stop = asyncio.Event()
    writers = [LogportForwardWriter(i, port) for i in range(SENDERS)]
    tasks = [asyncio.create_task(w.run(stop)) for w in writers]

    def progress() -> int:
        return sum(w.acked for w in writers) + sum(npm_acked.values())

    try:
        figures = await kill_loop(hub, KILLS, min_up=0.3, max_up=1.0, rng=rng, progress=progress)
        stop.set()
        npm.stdin.write(b"stop\n")
        await npm.stdin.drain()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await asyncio.wait_for(npm.wait(), 60)
        await npm_reader
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        if npm.returncode is None:
            npm.kill()
            await npm.wait()
        hub.stop()
    stderr = (await npm.stderr.read()).decode(errors="replace")
    elapsed = time.monotonic() - began
    assert npm.returncode == 0 and npm_done, f"npm client failed: {stderr[-2000:]}"

    chunks: collections.Counter[str] = collections.Counter()
    logport_events: collections.Counter[tuple[int, int]] = collections.Counter()
    npm_events: collections.Counter[int] = collections.Counter()
    bodies = stored_events(hub.data_dir, "forward")
    for body in bodies:
        batch = decode_batch(body)
        chunk = batch.option.get("chunk")
        chunks[chunk.decode() if isinstance(chunk, bytes) else str(chunk)] += 1
        for entry in batch:
            record = entry.record
            if batch.tag == "chaos.logport":
                logport_events[(record["w"], record["seq"])] += 1
            else:
                npm_events[record["seq"]] += 1

    assert figures.kills >= 10
    doubled = [c for c, n in chunks.items() if n > 1]
    assert not doubled, f"{len(doubled)} chunk ids stored more than once, e.g. {doubled[:3]}"
    # logport's sender: every acknowledged event exactly once
    for w in writers:
        assert w.acked > 0
        counts = [logport_events[(w.index, s)] for s in range(w.acked)]
        assert counts.count(1) == w.acked, (
            f"writer {w.index}: of {w.acked} acknowledged events {counts.count(0)} missing, "
            f"{sum(1 for c in counts if c > 1)} stored more than once")
    # npm FluentClient: every acknowledged event at least once (a retry carries a new chunk id)
    missing = [s for s in npm_acked if npm_events[s] == 0]
    assert not missing, f"{len(missing)} acknowledged npm events not stored, e.g. {missing[:5]}"
    npm_duplicates = sum(n - 1 for s, n in npm_events.items() if n > 1)
    sizes = await check_store(hub.data_dir)
    assert sizes["forward"] > 0
    deduped = sum(1 for line in hub.log_lines() if "retried chunk acknowledged again" in line)
    print(f"\nforward chaos: {figures.kills} SIGKILLs in {elapsed:.1f}s; logport sender "
          f"{sum(w.acked for w in writers)} events exactly once; npm FluentClient {len(npm_acked)} acked events "
          f"all stored ({npm_duplicates} stored twice after a lost ack: at-least-once), {npm_done[0]}; "
          f"{len(chunks)} chunks, none doubled; {deduped} resent chunks recognised by id and not stored again")
