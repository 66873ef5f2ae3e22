"""Republishing: follow a segment from its end and publish each new stored event on the logjam PUB.

Works for what any listener stored (Forward, Lumberjack, segment appends that
are batches or JSON objects); app-env and topic come from the tag through
`republish_routes`. Messages the device itself received on ROUTER / PULL were
already published live and are skipped.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson

from logport.batch import BatchDecodeError, decode_batch
from logport.config import LogjamConfig
from logport.errors import DataGivenUp, OffsetTruncated
from logport.protocols import logjam as lj
from logport.routing import compile_pattern
from logport.runtime import Runtime
from logport.servers.logjam_ingest import log
from logport.store import frames

_READ_BYTES = 1 << 20
_WAIT = 1.0


class StreamNames:
    """Tag -> (app-env, topic) by the first matching republish route."""

    def __init__(self, config: LogjamConfig) -> None:
        config.check_republish_names()  # load_config checked them; a section built in code is checked here
        self.routes = [(compile_pattern(r.match), r.app_env.encode(), r.topic.encode()) for r in config.republish_routes]
        self.default_app_env = config.republish_app_env.encode()
        self._cache: dict[str, tuple[bytes, bytes]] = {}

    def for_tag(self, tag: str) -> tuple[bytes, bytes]:
        hit = self._cache.get(tag)
        if hit is None:
            app_env, topic = self.default_app_env, b""
            for pattern, route_app_env, route_topic in self.routes:
                if pattern.match(tag):
                    app_env, topic = route_app_env, route_topic
                    break
            hit = (app_env, topic or lj.topic_for_tag(tag))
            if len(self._cache) < 100_000:
                self._cache[tag] = hit
        return hit


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def messages_of(segment: str, body: bytes) -> list[tuple[str, bytes, int]]:
    """(tag, JSON body, created_ms) of each event in one stored event body; [] for ones already published."""
    try:
        batch = decode_batch(body)
    except BatchDecodeError:
        try:
            record = orjson.loads(body)
        except orjson.JSONDecodeError:
            return []
        return [(segment, body, 0)] if isinstance(record, dict) else []
    if batch.option.get("source") == "logjam" and batch.option.get("received_on") in ("router", "pull"):
        return []
    out = []
    for entry in batch:
        record = entry.record if isinstance(entry.record, dict) else {"message": entry.record}
        json = orjson.dumps(record, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
        out.append((batch.tag, json, entry.seconds * 1000 + entry.nanos // 1_000_000))
    return out


async def run_republisher(runtime: Runtime, segment: str, publisher: Any, names: StreamNames) -> None:
    store = runtime.store
    info = await store.create(segment)
    position = info.end_offset  # new events only: a restart does not replay history to subscribers
    log.info("logjam republishing", extra={"segment": segment, "offset": position})
    while True:
        try:
            result = await store.read_frames(segment, position, _READ_BYTES, wait=_WAIT)
        except OffsetTruncated as e:
            log.warning("republish position truncated", extra={"segment": segment, "value": position,
                                                               "limit": e.start_offset})
            position = e.start_offset
            continue
        except DataGivenUp as e:  # an operator gave the range up (`logport verify --repair`): skipped, said
            log.warning("%s", e, extra={"segment": segment})
            position = e.end
            continue
        if not result.data:
            if result.end_of_segment:
                return
            continue
        for _, frame_type, body in frames.iter_frames(result.data, result.offset):
            if frame_type != frames.EVENT:
                continue
            try:
                messages = messages_of(segment, bytes(body))
            except Exception as e:  # any odd stored event (a raw segment append, a record msgpack allows
                # and JSON does not): skipped and logged, never the end of republishing
                log.warning("event not republished", extra={"segment": segment, "error": repr(e)})
                continue
            for tag, json, created_ms in messages:
                app_env, topic = names.for_tag(tag)
                publisher.publish_json(app_env, topic, json, created_ms)
        position = result.next_offset
        await asyncio.sleep(0)
