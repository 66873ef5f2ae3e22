"""Replay the logjam-device recording: same ROUTER replies, and our PUB output has logjam-device's shape."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import zmq
import zmq.asyncio

from logport.protocols import logjam as lj
from tests.conftest import VECTORS
from tests.support import hub_config, running_hub

VECTOR = json.loads((VECTORS / "logjam-device-router-pub.json").read_text())


def frames_of(entry: dict[str, list[str]]) -> list[bytes]:
    return [bytes.fromhex(h) for h in entry["frames_hex"]]


async def test_replay_logjam_device_vector(tmp_path: Path) -> None:
    device_id = VECTOR["device_id"]
    cfg = hub_config(tmp_path, ["logjam"], hub={"hostname": "vm"},
                     logjam={"device_id": device_id, "heartbeat_interval": 0.2})
    ctx = zmq.asyncio.Context()
    try:
        async with running_hub(cfg):
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(f"tcp://127.0.0.1:{cfg.logjam.pub_port}")
            # connected once a heartbeat arrives (no probe message, so the sequences stay the recording's)
            first_beat = await asyncio.wait_for(sub.recv_multipart(), 5)
            assert first_beat[0] == lj.HEARTBEAT
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(f"tcp://127.0.0.1:{cfg.logjam.router_port}")
            for entry in VECTOR["conversation"]:
                if entry["dir"].startswith("producer->device"):
                    await dealer.send_multipart(frames_of(entry))
                else:
                    reply = await asyncio.wait_for(dealer.recv_multipart(), 5)
                    assert reply == frames_of(entry), entry["note"]
            recorded = [frames_of(e) for e in VECTOR["published"]]
            data_recorded = [f for f in recorded if f[0] != lj.HEARTBEAT]
            ours: list[list[bytes]] = []
            deadline = time.monotonic() + 5
            while sum(1 for f in ours if f[0] == lj.HEARTBEAT) < 1 or len(ours) < len(recorded):
                ours.append(await asyncio.wait_for(sub.recv_multipart(), deadline - time.monotonic()))
            data_ours = [f for f in ours if f[0] != lj.HEARTBEAT]
            assert len(data_ours) == len(data_recorded)  # the broken-meta message was not published
            for got, want in zip(data_ours, data_recorded, strict=True):
                assert got[:3] == want[:3]
                g, w = lj.decode_meta(got[3]), lj.decode_meta(want[3])
                assert got[3][:2] == want[3][:2] == b"\xca\xbd"  # the swapped tag is published in network order
                assert (g.compression, g.version, g.device, g.created_ms) == (
                    w.compression, w.version, w.device, w.created_ms)
            beat = next(f for f in ours if f[0] == lj.HEARTBEAT)
            want_beat = next(f for f in recorded if f[0] == lj.HEARTBEAT)
            assert beat[0] == want_beat[0] and beat[2] == want_beat[2]
            assert beat[1] == f"tcp://vm:{cfg.logjam.pub_port}".encode()  # the recording's is tcp://vm:9606
            assert len(beat[3]) == len(want_beat[3])
            assert lj.decode_meta(beat[3]).device == device_id
            # one sequence for data and heartbeats, continuing the first heartbeat's
            seqs = [lj.decode_meta(f[3]).sequence for f in [first_beat, *ours]]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            dealer.close(linger=0)
            sub.close(linger=0)
    finally:
        ctx.destroy(linger=0)
