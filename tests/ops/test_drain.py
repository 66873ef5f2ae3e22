"""SIGTERM under load on every protocol at once, with real clients: the hub stops accepting, answers what it
received after its commit, exits 0 within hub.shutdown_grace, and every event any client saw acknowledged
(before or during the drain) is in the store.

Clients: logport's ForwardSender and @fluent-org/logger (npm) on Forward, pylogbeat on Lumberjack, logport's
exactly-once SegmentAppender on the segment protocol, logport's LogjamProducer (pyzmq) with sync sends.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import threading
import time
from pathlib import Path

import pylogbeat
import pytest

from logport.batch import decode_batch
from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress
from logport.clients.logjam import LogjamProducer
from logport.clients.segment import SegmentAppender
from logport.errors import LogportError
from tests.chaos.harness import LISTENERS, HubProcess, check_store, stored_events
from tests.conftest import NODE_MODULES

GRACE = 10.0
NODE_SCRIPT = Path(__file__).parent.parent / "chaos" / "node" / "forward_acked_stream.js"
SEGMENT = "drain-seg"


class ForwardWriter:
    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.sender = ForwardSender(SenderConfig(servers=[ServerAddress("127.0.0.1", port)], ack_timeout=5.0,
                                                 connect_timeout=1.0, retries=3, retry_wait=0.05,
                                                 hostname="drain-client"))
        self.acked = 0

    async def run(self) -> None:
        await self.sender.start()
        try:
            while True:
                now = int(time.time())
                await self.sender.send("drain.logport", [(now, 0, {"w": self.index, "seq": self.acked + i})
                                                         for i in range(20)])
                self.acked += 20
        finally:
            await self.sender.close()


class BeatWriter:
    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.port = port
        self.acked = 0
        self.failed = ""

    def run(self, stop: threading.Event) -> None:
        client = pylogbeat.PyLogBeatClient("127.0.0.1", self.port, timeout=5.0, use_logging=True)
        try:
            client.connect()
            while not stop.is_set():
                client.send([{"w": self.index, "seq": self.acked + i, "message": "x" * 40} for i in range(50)])  # returns once acked
                self.acked += 50
        except Exception as e:  # the hub closed the connection before an ack: the window was not acknowledged
            self.failed = type(e).__name__
        finally:
            try:
                client.close()
            except Exception:
                pass


class SegmentWriter:
    def __init__(self, port: int) -> None:
        self.appender = SegmentAppender("127.0.0.1", port, SEGMENT, linger=0.002, max_unacked_bytes=256 * 1024,
                                        reconnect_delay=0.05, retry_for=2.0)
        self.appended = 0

    def acked(self) -> int:
        level = self.appender.ack_level
        return 0 if level is None else level // (8 + 24)

    async def run(self) -> None:
        while True:
            await self.appender.append_many([f"seq:{self.appended + i:020d}".encode() for i in range(20)])
            self.appended += 20
            await asyncio.sleep(0.001)


class LogjamWriter:
    def __init__(self, index: int, port: int) -> None:
        self.index = index
        self.producer = LogjamProducer(f"tcp://127.0.0.1:{port}", app_env="drain-production", topic="logs.drain")
        self.accepted = 0

    async def run(self) -> None:
        while True:
            try:
                await self.producer.send_sync({"w": self.index, "seq": self.accepted, "action": "Drain#send"}, timeout=2.0)
            except LogportError:
                return  # no answer: the hub is gone
            self.accepted += 1


@pytest.mark.slow
async def test_sigterm_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None and (NODE_MODULES / "@fluent-org" / "logger").is_dir(), "node peers not installed"
    hub = HubProcess(tmp_path / "hub", LISTENERS, settings={"hub": {"shutdown_grace": GRACE}})
    await hub.start()
    assert hub.data_dir is not None and hub.proc is not None

    forward = [ForwardWriter(i, hub.ports["forward"]) for i in range(2)]
    beats = [BeatWriter(i, hub.ports["lumberjack"]) for i in range(2)]
    segments = [SegmentWriter(hub.ports["segment"])]
    logjams = [LogjamWriter(i, hub.ports["logjam.router_port"]) for i in range(2)]
    for s in segments:
        await s.appender.start()
    npm = await asyncio.create_subprocess_exec(
        node, str(NODE_SCRIPT), json.dumps({"port": hub.ports["forward"], "tag": "drain.npm", "inflight": 100,
                                            "ackTimeout": 5000}),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"NODE_PATH": str(NODE_MODULES), "PATH": "/usr/bin:/bin"})
    assert npm.stdout is not None
    npm_acked: set[int] = set()

    async def read_npm() -> None:
        assert npm.stdout is not None
        async for raw in npm.stdout:
            line = raw.decode().split()
            if line and line[0] == "A":
                npm_acked.add(int(line[1]))

    stop = threading.Event()
    threads = [threading.Thread(target=b.run, args=(stop,), daemon=True) for b in beats]
    for t in threads:
        t.start()
    tasks = [asyncio.create_task(w.run()) for w in (*forward, *segments, *logjams)]
    tasks.append(asyncio.create_task(read_npm()))

    def progress() -> list[int]:
        return [sum(w.acked for w in forward), len(npm_acked), sum(b.acked for b in beats),
                sum(s.acked() for s in segments), sum(j.accepted for j in logjams)]

    try:
        deadline = time.monotonic() + 30
        while min(progress()) < 200:  # every protocol under load
            assert time.monotonic() < deadline, f"no load on every protocol: {progress()}\n{hub.log_tail()}"
            await asyncio.sleep(0.05)
        at_term = progress()
        began = time.monotonic()
        hub.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(hub.proc.wait, GRACE + 10)
        took = time.monotonic() - began
    finally:
        stop.set()
        await asyncio.sleep(0.5)  # the clients take in the last acks the hub wrote before it closed
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if npm.returncode is None:
            npm.kill()
            await npm.wait()
        for s in segments:
            await s.appender.close(flush=False)
        for t in threads:
            t.join(10)
        if hub.alive():
            hub.kill()
    assert code == 0, hub.log_tail()
    assert took <= GRACE + 2, f"SIGTERM took {took:.1f} s, hub.shutdown_grace {GRACE}"
    logs = [json.loads(line) for line in hub.log_lines() if line.startswith("{\"ts\"")]
    drained = {line["listener"]: line for line in logs if line.get("msg") == "listener drained"}
    assert set(drained) == {"forward", "lumberjack", "segment", "logjam"}, drained
    assert all(line["unsettled"] == 0 for line in drained.values()), drained
    assert any(line.get("msg") == "drained" for line in logs)

    # every acknowledged event is stored
    def lost(segment: str, acked: dict[int, int], source: str = "") -> list[tuple[int, int]]:
        stored: set[tuple[int, int]] = set()
        for body in stored_events(hub.data_dir, segment):
            batch = decode_batch(body)
            if source and batch.tag != source:
                continue
            for entry in batch:
                record = entry.record if isinstance(entry.record, dict) else json.loads(entry.record)
                stored.add((record.get("w", -1), record["seq"]))
        return [(w, n) for w, count in acked.items() for n in range(count) if (w, n) not in stored]

    assert not lost("forward", {w.index: w.acked for w in forward}, "drain.logport")
    npm_lost = sorted(npm_acked - {seq for _, seq in _pairs(hub.data_dir, "drain.npm")})
    assert not npm_lost, f"npm: acknowledged events not stored, e.g. {npm_lost[:5]}"
    assert not lost("lumberjack", {b.index: b.acked for b in beats})
    assert not lost("logjam", {j.index: j.accepted for j in logjams})
    seg = [int(e.split(b":")[1]) for e in stored_events(hub.data_dir, SEGMENT)]
    assert seg[:segments[0].acked()] == list(range(segments[0].acked())), "segment: an acknowledged append lost"
    await check_store(hub.data_dir)
    print(f"\ndrain: SIGTERM at {at_term} acked (forward, npm, lumberjack, segment, logjam), exit 0 after "
          f"{took:.2f} s; acked in the end {progress()}; drained {drained}")


def _pairs(data_dir: Path, tag: str) -> list[tuple[int, int]]:
    out = []
    for body in stored_events(data_dir, "forward"):
        batch = decode_batch(body)
        if batch.tag == tag:
            out.extend((-1, entry.record["seq"]) for entry in batch)
    return out
