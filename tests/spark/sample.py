"""Generated stored data for the Spark tests: batches from every source, odd entries, an opaque event.

Logjam messages go through the listener's own path (the agent's frames, `read_pull_message`,
`MessageDecoder.accept`), so they are stored exactly as a running hub stores them: one event per
batch, tagged logjam.<app-env>.<topic>, app_env and topic in the option.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgpack
import orjson

from logport.batch import encode_batch, event_time, pack_entry
from logport.config import LogjamConfig, StoreConfig
from logport.protocols import logjam as lj
from logport.servers.logjam_ingest import MessageDecoder
from logport.store import AppendResult, SegmentStore, frames, groups

BASE_S = 1_795_000_000  # 2026-11-18, a fixed day so the expected minutes are stable
ACTIONS = ["Orders#index", "Orders#show", "Carts#update", "Search#query", "Users#login", "Health#ping"]
CODES = [200, 200, 200, 200, 201, 302, 304, 404, 422, 500, 503]
EXCEPTIONS = ["ActiveRecord::RecordNotFound", "Timeout::Error", "NoMethodError"]
TIME_METRICS = ["total_time", "db_time", "view_time", "api_time"]
AGENT_ZONE = timezone(timedelta(hours=1))  # the agent writes started_at in its local time, with the offset
PAGE_EVERY = 40  # a frontend.page message (not a request) after every this many requests


@dataclass
class Sample:
    """What was written: per segment the stored bodies in order; the logjam requests; the other logjam events."""

    bodies: dict[str, list[bytes]] = field(default_factory=dict)
    logjam: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # (app_env, time_ns, record)
    logjam_other: int = 0  # logjam events on other topics than logs.*: not requests

def logjam_record(rng: random.Random, started_ms: int) -> dict[str, Any]:
    total = round(rng.lognormvariate(4.5, 1.2), 3)
    record: dict[str, Any] = {
        "action": rng.choice(ACTIONS),
        "started_at": (datetime.fromtimestamp(0, UTC) + timedelta(milliseconds=started_ms)).astimezone(
            AGENT_ZONE).isoformat(timespec="milliseconds"),
        "started_ms": started_ms,
        "total_time": total,
        "db_time": round(total * rng.random() * 0.6, 3),
        "view_time": round(total * rng.random() * 0.3, 3),
        "code": rng.choice(CODES),
        "severity": rng.choice([1, 1, 1, 1, 2, 3, 4]),
        "request_id": f"{rng.getrandbits(64):016x}",
    }
    if rng.random() < 0.5:
        record["api_time"] = round(total * rng.random() * 0.1, 3)
    if rng.random() < 0.08:
        record["exceptions"] = rng.sample(EXCEPTIONS, rng.randint(1, 2))
    if rng.random() < 0.03:
        del record["total_time"]  # still a request (its topic says so), without the field that would tell
    return record


def logjam_stored(decoder: MessageDecoder, app_env: str, topic: str, record: dict[str, Any], sequence: int) -> bytes:
    """The body the logjam listener stores for one message of the agent (four frames, on its PULL socket)."""
    frames = [app_env.encode(), topic.encode(), orjson.dumps(record),
              lj.Meta(lj.NO_COMPRESSION, 1, BASE_S * 1000, sequence).pack()]
    message = lj.read_pull_message(frames)
    assert isinstance(message, lj.DataMessage)
    return decoder.accept(message, "127.0.0.1", "pull").stored


def forward_batches(count: int, per_batch: int, tag: str = "app.web", seed: int = 7) -> list[bytes]:
    """Forward batches of `per_batch` events each: frames of many events, for the source's own tests."""
    rng = random.Random(seed)
    out = []
    for b in range(count):
        triples = [(BASE_S + b * 37 + i, i * 1001, {"message": f"line {b}-{i}", "level": rng.choice(["info", "warn"]),
                                                     "n": i, "blob": bytes([b % 256, i % 256]),
                                                     "nested": {"k": [1, 2.5, None]}})
                   for i in range(per_batch)]
        out.append(encode_batch(tag, triples, {"size": per_batch, "source": "forward", "peer": "127.0.0.1:50000",
                                               "chunk": f"chunk-{b}"}))
    return out


def build_sample(seed: int = 7, logjam_requests: int = 2000) -> Sample:
    rng = random.Random(seed)
    sample = Sample()
    fwd = forward_batches(6, 25, seed=seed)
    # Forward variants stored as they came: integer seconds and v1.5 [[time, meta], record] entries, no size.
    odd = (msgpack.packb([BASE_S + 5, {"message": "integer time"}])
           + msgpack.packb([[event_time(BASE_S + 6, 123), {"fluent_signal": 0}], {"message": "with meta"}],
                           use_bin_type=True)
           + pack_entry(BASE_S + 7, 999_999_999, {"message": "last"})
           + pack_entry(BASE_S + 8, 5, {"message": "exts in the record", "when": event_time(BASE_S, 42),
                                        "other": msgpack.ExtType(5, b"xyz"), "list": [event_time(1, 2)]}))
    fwd.append(encode_batch("app.odd", odd, {"source": "forward", "peer": "127.0.0.1:50001"}))
    fwd.append(b"\x00\x01 opaque bytes from a segment-protocol client \xff")
    fwd.append(encode_batch("app.empty", [], {"size": 0, "source": "forward"}))
    sample.bodies["forward"] = fwd

    lj_batches: list[bytes] = []
    for b in range(5):
        triples = [(BASE_S + 60 * b + i, 0, {"@timestamp": "2026-11-18T00:00:00Z", "message": f"beat {b}/{i}",
                                           "host": {"name": "web-1"}, "log": {"offset": i * 100}})
                   for i in range(30)]
        lj_batches.append(encode_batch("filebeat", triples, {"size": 30, "source": "lumberjack",
                                                             "peer": "127.0.0.1:50002",
                                                             "@metadata": {"beat": "filebeat", "version": "8.15.0"}}))
    sample.bodies["lumberjack"] = lj_batches

    decoder = MessageDecoder(LogjamConfig())
    logjam: list[bytes] = []
    for n in range(logjam_requests):
        app_env = "admin-preview" if n % 3 == 0 else "shop-production"
        started_ms = BASE_S * 1000 + n * 400 + rng.randrange(1000)
        record = logjam_record(rng, started_ms)
        logjam.append(logjam_stored(decoder, app_env, "logs." + app_env.replace("-", "."), record, len(logjam) + 1))
        sample.logjam.append((app_env, started_ms * 1_000_000, record))
        if n % PAGE_EVERY == PAGE_EVERY - 1:
            # A page view measured in the browser: a logjam event that is not a request.
            page = {"started_ms": started_ms + 5, "logjam_action": record["action"],
                    "logjam_request_id": f"{app_env}-{record['request_id']}", "rts": [1, 7, 40, 300]}
            logjam.append(logjam_stored(decoder, app_env, "frontend.page", page, len(logjam) + 1))
            sample.logjam_other += 1
    sample.bodies["logjam"] = logjam
    return sample


async def _write(data_dir: str, bodies: dict[str, list[bytes]], chunk_size: int) -> dict[str, list[AppendResult]]:
    store = await SegmentStore.open(StoreConfig(data_dir=data_dir, fsync="never", chunk_size=chunk_size))
    results: dict[str, list[AppendResult]] = {}
    try:
        for name, items in bodies.items():
            for body in items:  # one append per body: one frame each, like the listeners
                results.setdefault(name, []).append(await store.append(name, [body]))
    finally:
        await store.close()
    return results


def write_bodies(data_dir: str, bodies: dict[str, list[bytes]],
                 chunk_size: int = 64 * 1024 * 1024) -> dict[str, list[AppendResult]]:
    """Store each body with an append of its own; the appends' results, per segment."""
    return asyncio.run(_write(data_dir, bodies, chunk_size))


@dataclass(frozen=True)
class Layout:
    """Where the frames of a segment written one body per append are, from the appends' results and
    the format's sizes alone (not from a reader's walk of the files, which the tests check).

    Format v2: an append of one event is one commit group, its COMMIT frame right before the event;
    a chunk starts with a CHUNK_HEADER frame, so the first event of a chunk is CHUNK_HEADER_SIZE +
    COMMIT_SIZE after its base.
    """

    events: list[int]  # each event's offset (the `offset` column), in order
    ends: list[int]  # where each event ends
    chunk_bases: list[int]  # where each chunk that an append started begins
    frame_starts: list[int]  # every frame: chunk headers, commit frames, events; then the end

    @property
    def end(self) -> int:
        return self.frame_starts[-1]

    @property
    def added(self) -> list[int]:
        """The bytes each append added: its event, the commit frame before it, a chunk header it started."""
        return [end - before for end, before in zip(self.ends, [self.frame_starts[0], *self.ends[:-1]], strict=True)]


def layout(results: list[AppendResult], bodies: list[bytes]) -> Layout:
    """The Layout of a new segment's appends of one body each, in order (their results and bodies)."""
    events, ends, bases, starts = [], [], [], []
    position = 0
    for i, (result, body) in enumerate(zip(results, bodies, strict=True)):
        gap = result.offset - position
        if gap == groups.CHUNK_HEADER_SIZE + groups.COMMIT_SIZE:  # the append started a chunk
            bases.append(position)
            starts += [position, position + groups.CHUNK_HEADER_SIZE]
        else:
            assert gap == groups.COMMIT_SIZE, (i, position, result)
            starts.append(position)
        assert result.end_offset == result.offset + frames.HEADER_SIZE + len(body), (i, result)  # one frame
        events.append(result.offset)
        starts.append(result.offset)
        ends.append(result.end_offset)
        position = result.end_offset
    return Layout(events, ends, bases, [*starts, position])
