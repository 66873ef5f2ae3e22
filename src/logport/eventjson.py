"""The JSON form of stored events, as `logport cat` prints them (one object per event)."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import IO, Any

import orjson

from logport.batch import BatchDecodeError, decode_batch


def rfc3339_ns(seconds: int, nanos: int) -> str:
    """`2026-11-22T03:57:03.123456789Z`: UTC, always nine fractional digits."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def event_objects(segment: str, offset: int, body: bytes | memoryview) -> Iterator[dict[str, Any]]:
    """The events of one stored frame: each entry of a batch, or one raw event for opaque bytes.

    `option` is the batch's option map, as the Spark source's `option` column holds it (as JSON text).
    """
    try:
        batch = decode_batch(body)
        entries = list(batch)
    except BatchDecodeError:
        yield {"segment": segment, "offset": offset, "index": 0, "raw": base64.b64encode(bytes(body)).decode()}
        return
    option = batch.option
    source = option.get("source")
    for index, entry in enumerate(entries):
        obj: dict[str, Any] = {
            "segment": segment,
            "offset": offset,
            "index": index,
            "tag": batch.tag,
            "time": rfc3339_ns(entry.seconds, entry.nanos),
            "time_ns": entry.time_ns,
            "record": entry.record,
            "source": source,
        }
        if entry.meta:
            obj["meta"] = entry.meta
        obj["option"] = option
        yield obj


def json_default(value: Any) -> Any:
    """orjson's fallback for record values JSON has no form for (bin as base64, tuples as arrays, anything else as its str)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def dumps_event(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj, default=json_default, option=orjson.OPT_NON_STR_KEYS)


def write_events(out: IO[str], segment: str, offset: int, body: bytes | memoryview) -> None:
    for obj in event_objects(segment, offset, body):
        out.write(dumps_event(obj).decode() + "\n")
    out.flush()
