"""The durable Forward output: logport -> logport, surviving restarts of either side, exactly once."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from pathlib import Path
from typing import Any, Literal

import msgpack
import pytest

from logport.batch import event_time, iter_entries, pack_entry
from logport.clients import forward as fc
from logport.config import ForwardOutputConfig, load_config
from logport.errors import ConfigError
from logport.outputs.forward import strip_metadata
from tests.conftest import VECTORS
from tests.forward.helpers import forward_config, running_hub, stored_events, wait_for_events
from tests.support import stored_batches


def events(start: int, count: int) -> list[tuple[int, int, dict[str, int]]]:
    return [(1700000000 + i, i, {"i": i}) for i in range(start, start + count)]


async def send(port: int, evs: list[tuple[int, int, dict[str, int]]]) -> None:
    cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", port)], hostname="test-client")
    async with fc.ForwardSender(cfg) as sender:
        for n in range(0, len(evs), 10):
            await sender.send("app.out", evs[n:n + 10])


async def test_output_survives_restarts_of_either_side_exactly_once(tmp_path: Path) -> None:
    downstream = forward_config(tmp_path / "b", shared_key="k")
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port, shared_key="k",
                                                    self_hostname="hub-a", ack_timeout=5, retry_wait=0.05)]
    async with running_hub(downstream) as b:
        async with running_hub(upstream):
            await send(upstream.forward.port, events(0, 50))
            got = await wait_for_events(b, 50)
            assert [e[3]["i"] for e in got] == list(range(50))
    # both stopped. A crash between the downstream's ack and the checkpoint commit looks like this:
    (Path(upstream.store.data_dir) / "outputs" / "to-b.checkpoint").write_text("0")
    async with running_hub(upstream):
        await send(upstream.forward.port, events(50, 30))  # stored upstream; downstream is down
        await asyncio.sleep(0.3)
        async with running_hub(downstream) as b:
            got = await wait_for_events(b, 80)
            await asyncio.sleep(0.3)  # a resend after the restart would show up as a duplicate here
            got = await stored_events(b)
            assert b.runtime is not None
            duplicates = b.runtime.metrics.registry.get_sample_value("logport_forward_duplicate_chunks_total")
    assert sorted(e[3]["i"] for e in got) == list(range(80))  # every event, once
    assert duplicates == 5  # the 5 resent batches of the first 50 events were recognised, acked, not stored
    first = got[0]
    assert first[0] == "app.out" and first[1:3] == (1700000000, 0)


async def test_output_resends_unacknowledged_after_crash(tmp_path: Path) -> None:
    """Without a commit (as after a kill before the ack) the output starts again from its checkpoint."""
    downstream = forward_config(tmp_path / "b")
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port, retry_wait=0.05)]
    async with running_hub(upstream) as a:
        await send(upstream.forward.port, events(0, 20))
        assert a.runtime is not None
        checkpoint = Path(upstream.store.data_dir) / "outputs" / "to-b.checkpoint"
        assert len(await wait_for_events(a, 20)) == 20
        first_event = (await stored_batches(a.runtime.store, "forward"))[0][0]
        await asyncio.sleep(0.3)
        # nothing acked: downstream is down. Format v2: the checkpoint may pass the store's own records (the
        # chunk header, a COMMIT frame: no event to send), never an event
        assert not checkpoint.exists() or int(checkpoint.read_text()) <= first_event
    async with running_hub(downstream) as b, running_hub(upstream) as a:
        got = await wait_for_events(b, 20)
        assert sorted(e[3]["i"] for e in got) == list(range(20))
        assert a.runtime is not None
        end = a.runtime.store.info("forward").end_offset  # every event acked: committed up to the end
        for _ in range(50):
            if checkpoint.exists() and int(checkpoint.read_text()) == end:
                break
            await asyncio.sleep(0.05)
        assert int(checkpoint.read_text()) == end


async def test_output_over_tls_with_gzip_and_users(tmp_path: Path) -> None:
    from tests.forward.helpers import make_certificate

    cert, key = make_certificate(tmp_path)
    downstream = forward_config(tmp_path / "b", shared_key="k", users={"hub-a": "pw"})
    downstream.forward.tls.cert, downstream.forward.tls.key = cert, key
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(
        name="tls-out", port=downstream.forward.port, shared_key="k", username="hub-a", password="pw",
        self_hostname="hub-a", tls=True, tls_ca=cert, compress="gzip", retry_wait=0.05)]
    async with running_hub(downstream) as b, running_hub(upstream) as a:
        await send(upstream.forward.port, events(0, 40))
        got = await wait_for_events(b, 40)
        assert [(e[1], e[2], e[3]) for e in got] == events(0, 40)
        assert a.runtime is not None
        registry = a.runtime.metrics.registry
        for _ in range(100):  # counted after the checkpoint commit that follows the ack
            if registry.get_sample_value("logport_forward_output_events_total", {"output": "tls-out"}) == 40:
                break
            await asyncio.sleep(0.05)
        assert registry.get_sample_value("logport_forward_output_events_total", {"output": "tls-out"}) == 40


# --- v1.5 `[[time, meta], record]` entries: stripped for receivers that refuse them, or kept ---

FLUENT_BIT_RECORD = {"message": "GET /index.html 200", "status": 200, "bytes": 512}


def fluent_bit_entries() -> bytes:
    """The entries of the chunk Fluent Bit 5.1 sent in its recording: three `[[EventTime, {}], record]`."""
    doc = json.loads((VECTORS / "fluent-bit-out_forward-secure-gzip-ack.json").read_text())
    sent = b"".join(bytes.fromhex(c["hex"]) for c in doc["conversation"] if c["dir"] == "client->server")
    up = msgpack.Unpacker(raw=True)
    up.feed(sent)
    _ping, (_tag, payload, option) = list(up)
    assert option[b"compressed"] == b"gzip"
    return gzip.decompress(payload)


# (seconds, nanos, meta or None, record): v1.5 entries with metadata between plain ones, integer times too
MIXED = [(1700000000, 5, {"trace_id": "t0"}, {"i": 0}), (1700000001, 0, None, {"i": 1, "l": [[1, 2], [3]]}),
         (1700000002, 0, {"k": [1, 2]}, {"i": 2}), (1700000003, 999_999_999, None, {"i": 3})]


def mixed_entries() -> bytes:
    """MIXED packed: a v1.5 entry with an EventTime, one with integer seconds, and plain entries."""
    packed = []
    for seconds, nanos, meta, record in MIXED:
        if meta is None:
            packed.append(pack_entry(seconds, nanos, record))
        else:
            t = event_time(seconds, nanos) if nanos else seconds
            packed.append(msgpack.packb([[t, meta], record], use_bin_type=True))
    return b"".join(packed)


async def feed_metadata_entries(port: int) -> None:
    """Fluent Bit's recorded entries, then MIXED, each as one PackedForward message stored as it came."""
    cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", port)], hostname="test-client")
    async with fc.ForwardSender(cfg) as sender:
        await sender.send_entries("app.access", fluent_bit_entries(), 3)
        await sender.send_entries("app.mixed", mixed_entries(), len(MIXED))


def metadata_expected() -> list[tuple[str, int, int, Any]]:
    """(tag, seconds, nanos, record) of every event feed_metadata_entries sends."""
    fluent_bit = [("app.access", 1795317898, ns, FLUENT_BIT_RECORD) for ns in (659249343, 696716055, 796741645)]
    return fluent_bit + [("app.mixed", s, ns, record) for s, ns, _, record in MIXED]


@pytest.mark.parametrize("entries,expected", [
    (b"", None),
    (pack_entry(1, 2, {"a": [[1, 2]]}) + msgpack.packb([3, {"b": 1}]), None),  # plain ones, a `92 92` inside
    (msgpack.packb([[7, {"m": 1}], {"r": 1}]), msgpack.packb([7, {"r": 1}])),
    (msgpack.packb([[event_time(7, 8), {}], {"r": [[1]]}]) + pack_entry(9, 0, {"p": 1}),
     pack_entry(7, 8, {"r": [[1]]}) + pack_entry(9, 0, {"p": 1})),
    (pack_entry(9, 0, {"p": 1}) + bytes.fromhex("92dc0002") + msgpack.packb(7) + msgpack.packb({}) + b"\x80",
     pack_entry(9, 0, {"p": 1}) + msgpack.packb([7, {}])),  # an inner array16 header
    (msgpack.packb([[1, 2, 3], {}]), None),  # not v1.5: left to the receiver, as stored
    (msgpack.packb([[1, {}], {}])[:-1], None),  # truncated: sent as stored
])
def test_strip_metadata(entries: bytes, expected: bytes | None) -> None:
    assert strip_metadata(entries) == expected


def test_strip_metadata_keeps_every_time_and_record() -> None:
    stripped = strip_metadata(fluent_bit_entries() + mixed_entries())
    assert stripped is not None
    got = [(e.seconds, e.nanos, e.record, e.meta) for e in iter_entries(stripped)]
    assert got == [(s, ns, rec, None) for _, s, ns, rec in metadata_expected()]


def test_metadata_entries_option_is_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "logport.toml"
    path.write_text('[[outputs.forward]]\nmetadata_entries = "keep"\n')
    assert load_config(path).outputs.forward[0].metadata_entries == "keep"
    path.write_text('[[outputs.forward]]\nmetadata_entries = "drop"\n')
    message = "config key 'outputs.forward[0].metadata_entries' has value 'drop'; allowed: 'strip', 'keep'"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


@pytest.mark.parametrize("setting", ["strip", "keep"])
async def test_output_strips_or_keeps_metadata_entries(tmp_path: Path, setting: Literal["strip", "keep"]) -> None:
    downstream = forward_config(tmp_path / "b")
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port, retry_wait=0.05,
                                                    metadata_entries=setting)]
    async with running_hub(downstream) as b, running_hub(upstream):
        await feed_metadata_entries(upstream.forward.port)
        assert len(await wait_for_events(b, 7)) == 7
        assert b.runtime is not None
        got = [(batch.tag, e.seconds, e.nanos, e.record, e.meta)
               for _, batch in await stored_batches(b.runtime.store, "forward") for e in batch]
    metas = [{}] * 3 + [meta for _, _, meta, _ in MIXED]
    if setting == "strip":
        metas = [None] * len(metas)
    assert got == [(*event, meta) for event, meta in zip(metadata_expected(), metas, strict=True)]
