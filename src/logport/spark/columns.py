"""Stored frames -> Arrow record batches with the columns of the `logport` Spark source.

The values are those `logport cat` prints (logport.eventjson.event_objects):
`record`, `meta` and `option` are the same JSON text orjson writes there, and an
opaque (non-batch) event is one row with its bytes in `raw`. The hot loop stays
in C: a batch's entries are unpacked by one msgpack call, records are turned
into JSON by orjson via map(), and the columns are built as whole Arrow arrays.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgpack
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from logport.batch import BatchDecodeError, decode_batch, ext_hook, iter_entries
from logport.eventjson import json_default
from logport.store import frames

ARROW_SCHEMA = pa.schema([
    ("segment", pa.string()),
    ("offset", pa.int64()),
    ("index", pa.int32()),
    ("tag", pa.string()),
    ("time", pa.timestamp("us", tz="UTC")),
    ("time_ns", pa.int64()),
    ("record", pa.string()),
    ("source", pa.string()),
    ("meta", pa.string()),
    ("option", pa.string()),
    ("raw", pa.binary()),
])

# The same schema for Spark (DDL); its Arrow form (UTC timestamps) is ARROW_SCHEMA.
SPARK_SCHEMA = (
    "segment string, offset bigint, index int, tag string, time timestamp, time_ns bigint, "
    "record string, source string, meta string, option string, raw binary"
)

ROWS_PER_BATCH = 8192  # smaller batches measured faster end to end (JVM side) than 32k
_NANOS = 1_000_000_000
_ARRAY32 = b"\xdd"

# Exactly what eventjson.dumps_event does to every value it prints.
dumps_json = functools.partial(orjson.dumps, default=json_default, option=orjson.OPT_NON_STR_KEYS)


def _ext_default(value: Any) -> Any:
    """orjson's fallback for records unpacked with ext_hook=slice: each ext as batch.ext_hook makes it."""
    if type(value) is slice:
        return ext_hook(value.start, value.stop)
    return json_default(value)


# Records from the fast path carry exts as slice(code, data); they print as `logport cat` prints them.
dumps_record = functools.partial(orjson.dumps, default=_ext_default, option=orjson.OPT_NON_STR_KEYS)


def _unpack_entries(entries: bytes, count: int | None) -> Sequence[Any]:
    """All `[time, record]` items of a batch with one C call when `size` is right; else item by item.

    ext_hook=slice keeps msgpack in C for every EventTime: slice(code, data) is a builtin
    that holds both; _split_items reads the times from it in bulk and dumps_record turns
    any ext inside a record into what batch.ext_hook returns. use_list=False: tuples are
    cheaper to build than lists, and orjson writes both as arrays. Anything unusual raises
    (ValueError, TypeError, UnpackException) and the caller takes the codec's own path.
    """
    if count is not None and 0 <= count < 1 << 32:
        try:
            items = msgpack.unpackb(_ARRAY32 + count.to_bytes(4, "big") + entries, raw=False, use_list=False,
                                    unicode_errors="replace", ext_hook=slice, strict_map_key=False)
            if isinstance(items, tuple):
                return items
        except ValueError:
            pass  # `size` does not match the entries (or they are broken): one by one below
    unpacker = msgpack.Unpacker(raw=False, use_list=False, unicode_errors="replace", ext_hook=slice,
                                strict_map_key=False, max_buffer_size=0)
    unpacker.feed(entries)
    return list(unpacker)


def _codec_entries(entries: bytes) -> tuple[list[int], list[Any], list[Any] | None]:
    """(time_ns, records, metas or None) by logport.batch's own decoder: integer times, v1.5
    `[[time, meta], record]` entries, array map keys; BatchDecodeError for what is not an entry."""
    parsed = list(iter_entries(entries))
    metas = [e.meta for e in parsed]
    return [e.time_ns for e in parsed], [e.record for e in parsed], metas if any(metas) else None


class ColumnBuilder:
    """Collects the rows of one segment's frames; `take()` returns them as an Arrow RecordBatch."""

    def __init__(self, segment: str) -> None:
        self.segment = segment
        self._clear()

    def _clear(self) -> None:
        self.rows = 0
        self.offset: list[int] = []
        self.index: list[int] = []
        self.tag: list[str | None] = []
        self.time_ns: list[int | None] = []
        self.record: list[bytes | None] = []
        self.source: list[str | None] = []
        self.meta: list[bytes | None] = []
        self.option: list[bytes | None] = []
        self.raw: list[bytes | None] = []
        self._meta_all_none = True
        self._raw_all_none = True

    def add_frame(self, offset: int, body: bytes | memoryview) -> int:
        """Add the rows of one stored Event; returns how many."""
        try:
            batch = decode_batch(body)
        except BatchDecodeError:
            self._add_opaque(offset, body)
            return 1
        try:
            times, records, metas = _split_items(_unpack_entries(batch.entries, batch.size))
            jsons = list(map(dumps_record, records))
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException):
            try:
                times, records, metas = _codec_entries(batch.entries)
            except BatchDecodeError:  # as `logport cat`: a batch whose entries do not decode is opaque
                self._add_opaque(offset, body)
                return 1
            jsons = list(map(dumps_json, records))
        n = len(records)
        if n == 0:
            return 0
        source = batch.option.get("source")
        self.offset.extend([offset] * n)
        self.index.extend(range(n))
        self.tag.extend([batch.tag] * n)
        self.time_ns.extend(times)
        self.record.extend(jsons)
        self.source.extend([source if isinstance(source, str) else None] * n)
        self.option.extend([dumps_json(batch.option)] * n)
        if metas is None:
            self.meta.extend([None] * n)
        else:
            self.meta.extend(dumps_json(m) if m else None for m in metas)
            self._meta_all_none = False
        self.raw.extend([None] * n)
        self.rows += n
        return n

    def _add_opaque(self, offset: int, body: bytes | memoryview) -> None:
        self.offset.append(offset)
        self.index.append(0)
        for column in (self.tag, self.time_ns, self.record, self.source, self.meta, self.option):
            column.append(None)
        self.raw.append(bytes(body))
        self._raw_all_none = False
        self.rows += 1

    def take(self) -> pa.RecordBatch:
        n = self.rows
        time_ns = pa.array(self.time_ns, pa.int64())
        columns = [
            pa.repeat(pa.scalar(self.segment, pa.string()), n),
            pa.array(self.offset, pa.int64()),
            pa.array(self.index, pa.int32()),
            pa.array(self.tag, pa.string()),
            pc.divide(time_ns, 1000).cast(ARROW_SCHEMA.field("time").type),
            time_ns,
            pa.array(self.record, pa.string()),
            pa.array(self.source, pa.string()),
            pa.nulls(n, pa.string()) if self._meta_all_none else pa.array(self.meta, pa.string()),
            pa.array(self.option, pa.string()),
            pa.nulls(n, pa.binary()) if self._raw_all_none else pa.array(self.raw, pa.binary()),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _split_items(items: Sequence[Any]) -> tuple[list[int], Sequence[Any], None]:
    """(time_ns per entry, records, no metas) when every item is `[EventTime, record]`; else ValueError."""
    n = len(items)
    times, records = zip(*items, strict=True) if n else ((), ())
    # Every time an EventTime (ext 0, 8 bytes: uint32 BE seconds, uint32 BE nanos), as slice(0, data).
    stops = [t.stop for t in times]
    if [t.start for t in times].count(0) != n or not set(map(len, stops)) <= {8}:
        raise ValueError("not every entry time is an EventTime")
    pairs = struct.unpack(f">{2 * n}I", b"".join(stops))
    return [s * _NANOS + ns for s, ns in zip(pairs[0::2], pairs[1::2], strict=True)], records, None


def frames_to_batches(segment: str, stored: Iterable[tuple[int, int, bytes | memoryview]],
                      rows_per_batch: int = ROWS_PER_BATCH) -> Iterator[pa.RecordBatch]:
    """Record batches of the Event frames in `stored` ((offset, type, body) triples of one segment)."""
    builder = ColumnBuilder(segment)
    for offset, frame_type, body in stored:
        if frame_type != frames.EVENT:
            continue
        builder.add_frame(offset, body)
        if builder.rows >= rows_per_batch:
            yield builder.take()
    if builder.rows:
        yield builder.take()
