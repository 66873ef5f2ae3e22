"""The C side draining the sockets (logjam_ingest.drain) against the Python path, over real sockets.

The same messages go through a hub whose listener drains ROUTER or PULL in C (and replies and publishes
from C) and through one on the Python path (the reference: pyzmq's frames, accept_batch, then
publish_received): what is stored (byte for byte), the replies each sender gets and what the subscriber
sees (frames, meta, sequence numbers) must be the same. A marker message sent last tells when everything
before it was published.
"""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import orjson
import pytest
import zmq
import zmq.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logport.config import RouteConfig
from logport.protocols import logjam as lj
from logport.servers import logjam as device_module
from logport.servers import logjam_ingest
from logport.store import frames as store_frames
from tests.support import hub_config, running_hub

pytestmark = pytest.mark.skipif(logjam_ingest.drain is None, reason="built without libzmq's headers")

NOW_MS = 1_795_316_400_777
PROBE = b"probe-test"
MARKER = b"marker-test"
TOPIC = b"logs.app"
APP_ENVS = [b"app-production", b"other-staging"]
BODIES = [orjson.dumps({"action": "a#b", "started_at": "2026-11-22T03:00:00+01:00", "code": 200}),
          orjson.dumps({"started_ms": 1_795_316_400_999, "lines": "x" * 300}), b"{}", b"[1]", b"{",
          orjson.dumps({"started_at": "2026-11-22T03:00:00+0100"})]  # the last three: refused, or Python's


def meta(compression: int, created_ms: int) -> bytes:
    return lj.META.pack(lj.TAG, compression, lj.VERSION, 3, created_ms, 9)


DATA = st.builds(lambda app_env, topic, body, compression, created_ms, with_meta: (
    [app_env, topic, lj.compress(body, compression)] + ([meta(compression, created_ms)] if with_meta else [])),
    st.sampled_from(APP_ENVS), st.sampled_from([TOPIC, b"logs.b", b"nologs"]), st.sampled_from(BODIES),
    st.sampled_from([lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4]), st.sampled_from([0, 1_795_316_400_123]),
    st.booleans())
PING = st.just([lj.PING, APP_ENVS[0], b"{}", meta(0, 1)])
FRAME = st.binary(max_size=12) | st.sampled_from([b"", lj.PING, APP_ENVS[0], TOPIC, BODIES[0], meta(0, 5)])
ODD = st.lists(FRAME, min_size=1, max_size=8)  # up to 8 frames: more than a logjam message has, too
MESSAGE = st.tuples(DATA | PING | ODD, st.booleans())  # (frames, sync: sent with the empty frame on ROUTER)


async def stored_bodies(hub: Any, segment: str) -> list[bytes]:
    store = hub.runtime.store
    if not store.exists(segment):
        return []
    info = store.info(segment)
    out = []
    offset = info.start_offset
    while offset < info.end_offset:
        r = await store.read_frames(segment, offset, 1 << 24)
        out += [bytes(body) for _, kind, body in store_frames.iter_frames(r.data, offset) if kind == store_frames.EVENT]
        offset = r.next_offset
    return [b for b in out if PROBE not in b and MARKER not in b]


async def through_a_hub(tmp: Path, messages: list[tuple[list[bytes], bool]], router: bool,
                        publish: str) -> tuple[list[list[bytes]], list[list[bytes]], list[tuple[Any, ...]]]:
    """(stored bodies per segment, replies, published messages with their sequence counted back from the
    marker's). One app-env is routed to a segment of its own: a batch of both is stored in two appends."""
    cfg = hub_config(tmp, ["logjam"], logjam={"heartbeat_interval": 600.0, "publish_compression": publish})
    cfg.routes = [RouteConfig(match="logjam.other-staging.**", segment="other")]
    ctx = zmq.asyncio.Context()
    try:
        async with running_hub(cfg) as hub:
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(f"tcp://127.0.0.1:{cfg.logjam.pub_port}")
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(f"tcp://127.0.0.1:{cfg.logjam.router_port}")
            for _ in range(50):  # slow joiner: probes until the subscriber sees one
                await dealer.send_multipart([b"", PROBE, TOPIC, b"{}", meta(0, 1)])
                await asyncio.wait_for(dealer.recv_multipart(), 5)
                if await sub.poll(200):
                    break
            sender = dealer
            if not router:
                sender = ctx.socket(zmq.PUSH)
                sender.connect(f"tcp://127.0.0.1:{cfg.logjam.pull_port}")
            for frames, sync in messages:
                await sender.send_multipart([b"", *frames] if sync and router else frames)
            await sender.send_multipart([b"", MARKER, TOPIC, b"{}", meta(0, 1)] if router
                                        else [MARKER, TOPIC, b"{}", meta(0, 1)])
            published = []
            while True:
                got = await asyncio.wait_for(sub.recv_multipart(), 5)
                if got[0] != PROBE:
                    published.append(got)
                if got[0] == MARKER:
                    break
            replies = []
            while router:
                reply = await asyncio.wait_for(dealer.recv_multipart(), 5)
                if reply[0] == MARKER:
                    break
                replies.append(reply)
            for sock in (sub, dealer, sender):
                sock.close(linger=0)
            marker = lj.decode_meta(published[-1][3]).sequence
            seen = [(*got[:3], lj.decode_meta(got[3]), marker - lj.decode_meta(got[3]).sequence)
                    for got in published[:-1]]
            return [await stored_bodies(hub, segment) for segment in ("logjam", "other")], replies, seen
    finally:
        ctx.destroy(linger=0)


def both_paths(tmp: Path, messages: list[tuple[list[bytes], bool]], router: bool, publish: str) -> Any:
    """The C side's outcome, held equal to the Python path's."""
    saved = logjam_ingest.drain, logjam_ingest.time, device_module.now_ms
    logjam_ingest.time = types.SimpleNamespace(time=lambda: NOW_MS / 1000)  # type: ignore[assignment]
    device_module.now_ms = lambda: NOW_MS
    drain = saved[0]
    assert drain is not None
    drained: list[int] = []

    def counted(*args: Any) -> Any:
        batch = drain(*args)
        drained.append(batch.count)
        return batch

    logjam_ingest.drain = counted
    try:
        native = asyncio.run(through_a_hub(tmp / "c", messages, router, publish))
        assert sum(drained) >= 2  # the C side took the probe and the marker at least
        logjam_ingest.drain = None
        reference = asyncio.run(through_a_hub(tmp / "python", messages, router, publish))
    finally:
        logjam_ingest.drain, logjam_ingest.time, device_module.now_ms = saved
    assert native[0] == reference[0]  # stored, byte for byte, in each segment
    assert native[1] == reference[1]  # replies
    assert [p[:3] for p in native[2]] == [p[:3] for p in reference[2]]  # published frames
    assert [p[3:] for p in native[2]] == [p[3:] for p in reference[2]]  # meta, and the numbering
    return native


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(MESSAGE, max_size=25), st.booleans(), st.sampled_from(["none", "zlib"]))
def test_the_c_drain_stores_answers_and_publishes_as_the_python_path(
        tmp_path_factory: pytest.TempPathFactory, messages: list[tuple[list[bytes], bool]], router: bool,
        publish: str) -> None:
    both_paths(tmp_path_factory.mktemp("drain"), messages, router, publish)


@pytest.mark.parametrize("router", [True, False])
def test_a_batch_with_every_kind_of_message_is_the_same(tmp_path: Path, router: bool) -> None:
    """Taken messages around ones the C side leaves to Python (a ping, refused ones, one of 8 frames), sync
    and not, every compression: what a property's examples may miss, in one batch."""
    data = [[app_env, TOPIC, lj.compress(BODIES[i % 2], c), meta(c, [0, 7][i % 2])]
            for i, (app_env, c) in enumerate((a, c) for a in APP_ENVS for c in range(4))]
    odd = [[lj.PING, APP_ENVS[0], b"{}", meta(0, 1)], [APP_ENVS[0], TOPIC, b"[1]", meta(0, 1)], [b"x"] * 8,
           [APP_ENVS[0], b"nologs", BODIES[0]]]
    messages = [(frames, i % 3 == 0) for i, frames in enumerate(data[:4] + odd[:2] + data[4:] + odd[2:] + data)]
    stored, replies, published = both_paths(tmp_path, messages, router, "zlib")
    assert all(stored) and len(published) >= len(data) * 2 and (replies or not router)
