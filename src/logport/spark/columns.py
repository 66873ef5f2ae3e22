"""Stored frames -> Arrow record batches with the columns of the `logport` Spark source.

The values are those `logport cat` prints (logport.eventjson.event_objects):
`record`, `meta` and `option` are VARIANT (logport.spark.variant) or, with
option("record", "json"), the same JSON text orjson writes there; an opaque
(non-batch) event is one row with its bytes in `raw`. The hot loop stays in C
where it can: as VARIANT, one pass of _variant_encode.c turns a batch's entries
into Arrow buffers; as JSON, they are unpacked by one msgpack call and dumped by
orjson; the columns are built as whole Arrow arrays. option("fields",
"host:string,...") adds typed columns of top-level record fields.
"""

from __future__ import annotations

import array
import functools
import logging
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from logport.batch import BatchDecodeError, decode_batch, ext_hook, iter_entries
from logport.errors import LogportError
from logport.eventjson import json_default
from logport.spark.variant import VARIANT_TYPE, VariantEncoder, VariantTooLarge, record_msgpack
from logport.store import frames

try:  # the C pass (setup.py builds it; without a compiler the Python path does the same, slower)
    from logport.spark._variant_encode import VariantColumn, encode_entries
except ImportError:  # pragma: no cover
    VariantColumn = encode_entries = None

log = logging.getLogger("logport.spark")

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
    ("hub", pa.string()),
])

# The same schema for Spark (DDL); its Arrow form (UTC timestamps) is ARROW_SCHEMA.
SPARK_SCHEMA = (
    "segment string, offset bigint, index int, tag string, time timestamp, time_ns bigint, "
    "record string, source string, meta string, option string, raw binary, hub string"
)

RECORD_FORMATS = ("variant", "json")
# The types option("fields") extracts a top-level record field as: Spark's name -> Arrow type.
FIELD_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "double": pa.float64(), "bigint": pa.int64(), "long": pa.int64(),
    "int": pa.int32(), "boolean": pa.bool_(),
}
_SPARK_FIELD_TYPES = {"long": "bigint"}
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class LayoutOptionError(LogportError):
    """option("record") or option("fields") of the `logport` source is malformed."""


@dataclass(frozen=True)
class Layout:
    """The source's columns for a set of options: record/meta/option as VARIANT or JSON text, typed fields."""

    record: str = "variant"
    fields: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Layout:
        record = (options.get("record") or "variant").strip().lower()
        if record not in RECORD_FORMATS:
            raise LayoutOptionError(f"option record={options.get('record')!r} is not one of {', '.join(RECORD_FORMATS)}")
        fields: list[tuple[str, str]] = []
        for item in (options.get("fields") or "").split(","):
            if not item.strip():
                continue
            name, _, kind = (part.strip() for part in item.partition(":"))
            kind = kind.lower()
            if not _FIELD_NAME.match(name) or kind not in FIELD_TYPES:
                raise LayoutOptionError(f"option fields: {item.strip()!r} is not NAME:TYPE with a top-level field "
                                        f"name and a type of {', '.join(FIELD_TYPES)}")
            if name.lower() in {n.lower() for n in ARROW_SCHEMA.names} | {n.lower() for n, _ in fields}:
                raise LayoutOptionError(f"option fields: {name!r} is already a column")
            fields.append((name, kind))
        return cls(record, tuple(fields))

    @property
    def variant(self) -> bool:
        return self.record == "variant"

    def arrow_schema(self) -> pa.Schema:
        schema = ARROW_SCHEMA
        if self.variant:
            for name in ("record", "meta", "option"):
                schema = schema.set(schema.get_field_index(name), pa.field(name, VARIANT_TYPE))
        for name, kind in self.fields:
            schema = schema.append(pa.field(name, FIELD_TYPES[kind]))
        return schema

    def spark_schema(self) -> str:
        ddl = SPARK_SCHEMA
        if self.variant:
            for name in ("record", "meta", "option"):
                ddl = ddl.replace(f"{name} string", f"{name} variant")
        return ddl + "".join(f", {name} {_SPARK_FIELD_TYPES.get(kind, kind)}" for name, kind in self.fields)


def _as_string(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return dumps_record(value).decode()


def _as_double(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _as_integer(bits: int) -> Callable[[Any], int | None]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(value: Any) -> int | None:
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, float):
            value = int(value) if value.is_integer() else None
        elif isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                return None
        return value if isinstance(value, int) and lo <= value <= hi else None

    return convert


def _as_boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


# As try_variant_get casts: a value of another type that converts exactly, else null.
FIELD_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _as_string, "double": _as_double, "bigint": _as_integer(64), "long": _as_integer(64),
    "int": _as_integer(32), "boolean": _as_boolean,
}

ROWS_PER_BATCH = 8192  # smaller batches measured faster end to end (JVM side) than 32k
_NANOS = 1_000_000_000
# typed: pyarrow infers an untyped Python int's type by trying `import dateutil` first, which fails (it is not
# a dependency) and so searches the whole sys.path again on every call, once per batch (2-4% of a worker's CPU)
_MICROS = pa.scalar(1000, pa.int64())
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


_OPTION_ENTRY = b"\x92\xd7\x00" + bytes(8)  # [EventTime 0, ...]: an option packed again, as the C pass's one entry


def encode_option(option: dict[str, Any], encoder: VariantEncoder) -> tuple[bytes, bytes]:
    """A frame's option as a VARIANT (value, metadata): packed again and through the C pass (a tenth of the
    Python encoder's time), or by `encoder` when the C pass declines it or is absent; the same bytes."""
    if encode_entries is not None:
        try:
            encoded = encode_entries(_OPTION_ENTRY + msgpack.packb(option, use_bin_type=True))
        except (TypeError, ValueError, OverflowError):  # not msgpack as it is (an ExtType's tuple, ...)
            encoded = None
        if encoded is not None:
            return encoded[2], encoded[4]  # one row: the whole value and metadata buffers
    return encoder.encode(option)


_INDEXES = array.array("i", range(1 << 16))  # 0, 1, 2, ...: a frame's `index` column is a slice of it


def _int_array(values: array.array[int], kind: pa.DataType) -> pa.Array:
    """An Arrow array over an array.array's memory (no Python int per row)."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


class _Runs:
    """A column whose rows come in runs of one value (a frame's tag, source or option on each of its rows):
    the distinct values once, and an int32 index per row, added with C loops; `take` builds it in Arrow."""

    def __init__(self) -> None:
        self.values: dict[Any, int] = {}
        self.indexes = array.array("i")

    def add(self, value: Any, n: int) -> None:
        k = self.values.get(value)
        if k is None:
            k = self.values[value] = len(self.values)
        self.indexes += array.array("i", (k,)) * n

    def array(self, kind: pa.DataType, convert: Callable[[Any], Any] | None = None) -> pa.Array:
        distinct = list(self.values) if convert is None else [convert(v) for v in self.values]
        return pa.array(distinct, kind).take(_int_array(self.indexes, pa.int32()))


class ColumnBuilder:
    """Collects the rows of one segment's frames; `take()` returns them as an Arrow RecordBatch."""

    def __init__(self, segment: str, layout: Layout | None = None, hub: str | None = None) -> None:
        self.segment = segment
        self.hub = hub
        self.layout = layout or Layout()
        self.schema = self.layout.arrow_schema()
        self._encoder = VariantEncoder()
        # the C pass: the records of a batch's frames go onto one set of column buffers (one Arrow array per
        # batch, no concatenation); it keeps what records with the same keys share across batches
        self._column = VariantColumn() if VariantColumn is not None and self.layout.variant else None
        self._clear()

    def _clear(self) -> None:
        self.rows = 0
        self.offset = array.array("q")
        self.index = array.array("i")
        self.tag = _Runs()
        self.time_ns = array.array("q")
        self.time_nulls: list[int] = []  # rows whose time is null (opaque events)
        # JSON text; as VARIANT, the three columns are kept as Arrow arrays of a frame's rows each
        self.record: list[Any] = []
        self.source = _Runs()
        self.option_runs = _Runs()  # as VARIANT: (value, metadata) of each frame's option
        self.meta: list[Any] = []
        self.option: list[Any] = []
        self.chunks: dict[str, list[pa.Array]] = {"record": [], "meta": [], "option": []}
        self._meta_nulls = 0  # meta rows of null since the last chunk of meta (frames without v1.5 meta)
        self.raw: list[bytes | None] = []
        self.fields: list[list[Any]] = [[] for _ in self.layout.fields]
        self._meta_all_none = True
        self._raw_all_none = True

    def add_frame(self, offset: int, body: bytes | memoryview) -> int:
        """Add the rows of one stored Event; returns how many."""
        try:
            batch = decode_batch(body)
        except BatchDecodeError:
            self._add_opaque(offset, body)
            return 1
        variant = self.layout.variant
        if variant and not self.layout.fields and self._column is not None:
            times = self._column.add(batch.entries)  # the C pass: None when the Python path must decide
            if times is not None:
                return self._add_encoded(offset, batch.tag, batch.option, times)
        try:
            times, records, metas = _split_items(_unpack_entries(batch.entries, batch.size))
            values: list[Any] = self._variants(records) if variant else list(map(dumps_record, records))
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException) as e:
            if isinstance(e, VariantTooLarge):
                raise
            try:
                times, records, metas = _codec_entries(batch.entries)
            except BatchDecodeError:  # as `logport cat`: a batch whose entries do not decode is opaque
                self._add_opaque(offset, body)
                return 1
            values = self._variants(records) if variant else list(map(dumps_json, records))
        n = len(records)
        if n == 0:
            return 0
        source = batch.option.get("source")
        self._add_runs(offset, n, batch.tag, source)
        self.time_ns.extend(times)
        raw: list[bytes | None] = [None] * n
        for i, value in enumerate(values):
            if value is None:  # too large for a VARIANT: its msgpack bytes in `raw`, as an opaque event's
                raw[i] = record_msgpack(records[i])
                self._raw_all_none = False
        self.raw.extend(raw)
        if variant:
            self._add_record_chunk(_variant_pairs(values))
            self.option_runs.add(encode_option(batch.option, self._encoder), n)
            if metas is None:
                self._meta_nulls += n
            else:
                self._add_meta_chunk(_variant_pairs([self._encoder.encode(m) if m else None for m in metas]))
        else:
            self.record.extend(values)
            self.option.extend([dumps_json(batch.option)] * n)
            if metas is None:
                self.meta.extend([None] * n)
            else:
                self.meta.extend(dumps_json(m) if m else None for m in metas)
                self._meta_all_none = False
        for column, (name, kind) in zip(self.fields, self.layout.fields, strict=True):
            convert = FIELD_CONVERTERS[kind]
            column.extend(convert(r.get(name)) if isinstance(r, dict) else None for r in records)
        self.rows += n
        return n

    def _add_encoded(self, offset: int, tag: str, option: dict[str, Any], times: bytes) -> int:
        """The rows of a frame whose records the C pass added to its column (`times`: their int64 times)."""
        n = len(times) // 8
        if n == 0:
            return 0
        source = option.get("source")
        self._add_runs(offset, n, tag, source)
        self.time_ns.frombytes(times)
        self.raw.extend([None] * n)
        self.option_runs.add(encode_option(option, self._encoder), n)
        self._meta_nulls += n
        self.rows += n
        return n

    def _flush_column(self) -> None:
        """The C pass's rows so far become a chunk of `record`, before a chunk from elsewhere follows them."""
        if self._column is not None and self._column.rows:
            self.chunks["record"].append(_variant_buffers(*self._column.take()))

    def _add_record_chunk(self, chunk: pa.Array) -> None:
        self._flush_column()
        self.chunks["record"].append(chunk)

    def _add_meta_chunk(self, chunk: pa.Array) -> None:
        if self._meta_nulls:
            self.chunks["meta"].append(pa.nulls(self._meta_nulls, VARIANT_TYPE))
            self._meta_nulls = 0
        self.chunks["meta"].append(chunk)

    def _add_runs(self, offset: int, n: int, tag: Any, source: Any) -> None:
        """The columns one frame's n rows share: offset, tag, source; and index 0..n-1."""
        self.offset += array.array("q", (offset,)) * n
        self.index += _INDEXES[:n] if n <= len(_INDEXES) else array.array("i", range(n))
        self.tag.add(tag, n)
        self.source.add(source if isinstance(source, str) else None, n)

    def _variants(self, records: Sequence[Any]) -> list[tuple[bytes, bytes] | None]:
        """Each record's (value, metadata); None for one Spark would refuse as too large."""
        encode = self._encoder.encode
        out: list[tuple[bytes, bytes] | None] = []
        for record in records:
            try:
                out.append(encode(record))
            except VariantTooLarge as e:
                log.warning("segment %s: a record is kept as msgpack in `raw`, not as `record`: %s", self.segment, e)
                out.append(None)
        return out

    def _add_opaque(self, offset: int, body: bytes | memoryview) -> None:
        self._add_runs(offset, 1, None, None)
        self.time_nulls.append(len(self.time_ns))
        self.time_ns.append(0)
        columns: list[list[Any]] = [self.record, self.meta, self.option, *self.fields]
        for column in columns:
            column.append(None)
        if self.layout.variant:
            self._add_record_chunk(pa.nulls(1, VARIANT_TYPE))
            self._meta_nulls += 1
        self.option_runs.add(None, 1)
        self.raw.append(bytes(body))
        self._raw_all_none = False
        self.rows += 1

    def _text_or_variant(self, name: str, values: list[Any], all_none: bool = False) -> pa.Array:
        if self.layout.variant:
            if name == "option":
                return self.option_runs.array(VARIANT_TYPE, _variant_struct)
            if name == "record":
                self._flush_column()
            elif self._meta_nulls and self.chunks["meta"]:
                self._add_meta_chunk(pa.nulls(0, VARIANT_TYPE))  # the null rows since the last meta
            chunks = self.chunks[name]
            if name == "meta" and not chunks:  # no meta in any frame: one null array
                return pa.nulls(self._meta_nulls, VARIANT_TYPE)
            if len(chunks) == 1:  # the C pass's whole batch: no copy
                return chunks[0]
            return pa.concat_arrays(chunks)
        n = len(values)
        return pa.nulls(n, pa.string()) if all_none else pa.array(values, pa.string())

    def take(self) -> pa.RecordBatch:
        n = self.rows
        time_ns = _int_array(self.time_ns, pa.int64())
        if self.time_nulls:
            mask = [False] * n
            for row in self.time_nulls:
                mask[row] = True
            time_ns = pc.if_else(pa.array(mask, pa.bool_()), pa.scalar(None, pa.int64()), time_ns)
        columns = [
            pa.repeat(pa.scalar(self.segment, pa.string()), n),
            _int_array(self.offset, pa.int64()),
            _int_array(self.index, pa.int32()),
            self.tag.array(pa.string()),
            pc.divide(time_ns, _MICROS).cast(ARROW_SCHEMA.field("time").type),
            time_ns,
            self._text_or_variant("record", self.record),
            self.source.array(pa.string()),
            self._text_or_variant("meta", self.meta, self._meta_all_none),
            self._text_or_variant("option", self.option),
            pa.nulls(n, pa.binary()) if self._raw_all_none else pa.array(self.raw, pa.binary()),
            pa.repeat(pa.scalar(self.hub, pa.string()), n),
        ]
        columns += [pa.array(values, FIELD_TYPES[kind]) for values, (_, kind) in zip(self.fields, self.layout.fields,
                                                                                     strict=True)]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _variant_struct(pair: tuple[bytes, bytes] | None) -> dict[str, bytes] | None:
    return None if pair is None else {"value": pair[0], "metadata": pair[1]}


def _variant_pairs(values: Sequence[tuple[bytes, bytes] | None]) -> pa.Array:
    """A VARIANT array of (value, metadata) pairs, None a null."""
    mask = [v is None for v in values]
    pairs = [(b"", b"\x01\x00\x00") if v is None else v for v in values]
    value, metadata = zip(*pairs, strict=True) if pairs else ((), ())
    return pa.StructArray.from_arrays([pa.array(value, pa.binary()), pa.array(metadata, pa.binary())],
                                      fields=list(VARIANT_TYPE), mask=pa.array(mask, pa.bool_()))


def _variant_buffers(n: int, values: bytes, value_offsets: bytes, metadata: bytes, metadata_offsets: bytes) -> pa.Array:
    """A VARIANT array over the C pass's buffers (no copy)."""
    value = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)])
    meta = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(metadata_offsets), pa.py_buffer(metadata)])
    return pa.StructArray.from_arrays([value, meta], fields=list(VARIANT_TYPE))


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
                      rows_per_batch: int = ROWS_PER_BATCH, layout: Layout | None = None,
                      hub: str | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches of the Event frames in `stored` ((offset, type, body) triples of one segment)."""
    builder = ColumnBuilder(segment, layout, hub)
    for offset, frame_type, body in stored:
        if frame_type != frames.EVENT:
            continue
        builder.add_frame(offset, body)
        if builder.rows >= rows_per_batch:
            yield builder.take()
    if builder.rows:
        yield builder.take()
