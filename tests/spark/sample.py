"""Generated stored data for the Spark tests: batches from every source, odd entries, an opaque event."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import msgpack

from logport.batch import encode_batch, event_time, pack_entry
from logport.config import StoreConfig
from logport.store import SegmentStore

BASE_S = 1_795_000_000  # 2026-11-18, a fixed day so the expected minutes are stable
ACTIONS = ["Orders#index", "Orders#show", "Carts#update", "Search#query", "Users#login", "Health#ping"]
CODES = [200, 200, 200, 200, 201, 302, 304, 404, 422, 500, 503]
EXCEPTIONS = ["ActiveRecord::RecordNotFound", "Timeout::Error", "NoMethodError"]
TIME_METRICS = ["total_time", "db_time", "view_time", "api_time"]


@dataclass
class Sample:
    """What was written: per segment the stored bodies in order; the logjam records."""

    bodies: dict[str, list[bytes]] = field(default_factory=dict)
    logjam: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # (app_env, time_ns, record)


def logjam_record(rng: random.Random, started_ms: int) -> dict[str, Any]:
    total = round(rng.lognormvariate(4.5, 1.2), 3)
    record: dict[str, Any] = {
        "action": rng.choice(ACTIONS),
        "started_at": "2026-11-18T00:00:00+00:00",
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
    return record


def build_sample(seed: int = 7, logjam_batches: int = 40, per_batch: int = 50) -> Sample:
    rng = random.Random(seed)
    sample = Sample()
    fwd: list[bytes] = []
    for b in range(6):
        triples = [(BASE_S + b * 37 + i, i * 1001, {"message": f"line {b}-{i}", "level": rng.choice(["info", "warn"]),
                                                     "n": i, "blob": bytes([b, i]), "nested": {"k": [1, 2.5, None]}})
                   for i in range(25)]
        fwd.append(encode_batch("app.web", triples, {"size": 25, "source": "forward", "peer": "127.0.0.1:50000",
                                                     "chunk": f"chunk-{b}"}))
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

    lj: list[bytes] = []
    for b in range(5):
        triples = [(BASE_S + 60 * b + i, 0, {"@timestamp": "2026-11-18T00:00:00Z", "message": f"beat {b}/{i}",
                                           "host": {"name": "web-1"}, "log": {"offset": i * 100}})
                   for i in range(30)]
        lj.append(encode_batch("filebeat", triples, {"size": 30, "source": "lumberjack", "peer": "127.0.0.1:50002",
                                                     "@metadata": {"beat": "filebeat", "version": "8.15.0"}}))
    sample.bodies["lumberjack"] = lj

    logjam: list[bytes] = []
    for b in range(logjam_batches):
        app_env = "shop-production" if b % 3 else "admin-preview"
        triples = []
        for i in range(per_batch):
            started_ms = (BASE_S + b * 20 + i) * 1000 + rng.randrange(1000)
            record = logjam_record(rng, started_ms)
            seconds, ms = divmod(started_ms, 1000)
            triples.append((seconds, ms * 1_000_000, record))
            sample.logjam.append((app_env, started_ms * 1_000_000, record))
        logjam.append(encode_batch(f"logs.{app_env.replace('-', '.')}", triples,
                                   {"size": per_batch, "source": "logjam", "peer": "127.0.0.1:50003",
                                    "app_env": app_env, "topic": f"logs.{app_env}", "device": 1,
                                    "sequence": b + 1, "created_ms": BASE_S * 1000}))
    sample.bodies["logjam"] = logjam
    return sample


async def _write(data_dir: str, bodies: dict[str, list[bytes]], chunk_size: int) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=data_dir, fsync="never", chunk_size=chunk_size))
    try:
        for name, items in bodies.items():
            for body in items:  # one append per body: one frame each, like the listeners
                await store.append(name, [body])
    finally:
        await store.close()


def write_bodies(data_dir: str, bodies: dict[str, list[bytes]], chunk_size: int = 64 * 1024 * 1024) -> None:
    asyncio.run(_write(data_dir, bodies, chunk_size))
