"""record, meta and option as VARIANT: the same values `logport cat` prints, in Spark and without it;
typed columns from option("fields"); the pipeline's statistics from VARIANT paths equal those from JSON."""

from __future__ import annotations

import base64
import decimal
import math
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import VariantVal

from logport.batch import encode_batch, pack_entry
from logport.eventjson import dumps_event, event_objects
from logport.spark.columns import FIELD_CONVERTERS, Layout, LayoutOptionError, frames_to_batches
from logport.spark.variant import SIZE_LIMIT, VARIANT_TYPE, VariantTooLarge, encode_variant
from tests.spark.sample import BASE_S, build_sample, write_bodies
from tests.spark.test_columns import records


def as_json_value(value: Any) -> Any:
    """A variant's Python value as `logport cat`'s JSON has it: bin as base64, exact decimals as ints,
    infinities as null (orjson writes them so)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, decimal.Decimal):
        return int(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: as_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json_value(v) for v in value]
    return value


def variant_value(cell: dict[str, bytes] | None) -> Any:
    if cell is None:
        return None
    return as_json_value(VariantVal(cell["value"], cell["metadata"]).toPython())


def assert_variants_as_cat(body: bytes) -> None:
    rows = [row for rb in frames_to_batches("s", [(0, 0, body)]) for row in rb.to_pylist()]
    cat = [orjson.loads(dumps_event(obj)) for obj in event_objects("s", 0, body)]
    assert len(rows) == len(cat)
    for row, obj in zip(rows, cat, strict=True):
        if "raw" in obj:
            assert row["record"] is None and base64.b64encode(row["raw"]).decode() == obj["raw"]
            continue
        assert variant_value(row["record"]) == obj["record"]
        assert variant_value(row["meta"]) == obj.get("meta")
        assert variant_value(row["option"]) == obj["option"]


def test_sample_records_as_variants_are_what_cat_prints() -> None:
    for bodies in build_sample(logjam_requests=45).bodies.values():
        for body in bodies:
            assert_variants_as_cat(body)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 999_999_999), records), max_size=20),
       st.booleans())
def test_any_records_as_variants_are_what_cat_prints(entries, with_size) -> None:  # type: ignore[no-untyped-def]
    option = {"size": len(entries), "source": "forward"} if with_size else {"size": len(entries) + 1}
    assert_variants_as_cat(encode_batch("t", entries, option))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_as_variant_rows_never_error(body: bytes) -> None:
    batches = list(frames_to_batches("s", [(0, 0, body)]))
    assert sum(rb.num_rows for rb in batches) == len(list(event_objects("s", 0, body)))


def test_encoding_chooses_the_smallest_form() -> None:
    assert encode_variant(None) == (b"\x00", b"\x01\x00\x00")
    assert encode_variant(True)[0] == b"\x04" and encode_variant(False)[0] == b"\x08"
    assert encode_variant(-1)[0] == b"\x0c\xff"  # int8
    assert encode_variant(300)[0] == b"\x10\x2c\x01"  # int16
    assert encode_variant(2**64 - 1)[0] == b"\x28\x00" + (2**64 - 1).to_bytes(16, "little")  # decimal16, scale 0
    assert encode_variant("ab")[0] == b"\x09ab"  # short string
    assert encode_variant("x" * 64)[0] == b"\x40" + (64).to_bytes(4, "little") + b"x" * 64  # long string
    # {"b": 1, "a": 2}: dictionary in first-use order (a sorted object's ids: a=0, b=1), values by name.
    value, metadata = encode_variant({"b": 1, "a": 2})
    assert metadata == b"\x01\x02\x00\x01\x02ab"
    assert value == b"\x02\x02\x00\x01\x00\x02\x04\x0c\x02\x0c\x01"
    big = {str(i): i for i in range(300)}  # more than 255 fields: a large object
    assert VariantVal(*encode_variant(big)).toPython() == big


def test_a_record_at_sparks_size_limit_is_kept_as_msgpack_in_raw() -> None:
    with pytest.raises(VariantTooLarge, match=f"Spark's limit of {SIZE_LIMIT} bytes"):
        encode_variant("x" * SIZE_LIMIT)
    huge = {"message": "x" * SIZE_LIMIT}
    body = encode_batch("t", [(BASE_S, 0, {"n": 1}), (BASE_S, 1, huge)], {"size": 2})
    rows = [row for rb in frames_to_batches("s", [(0, 0, body)]) for row in rb.to_pylist()]
    assert variant_value(rows[0]["record"]) == {"n": 1} and rows[0]["raw"] is None
    assert rows[1]["record"] is None and msgpack.unpackb(rows[1]["raw"]) == huge
    assert rows[1]["time_ns"] == BASE_S * 1_000_000_000 + 1


def test_layout_options() -> None:
    assert Layout.from_options({}) == Layout("variant")
    layout = Layout.from_options({"record": "JSON", "fields": "host:string, total_time:double,code:long"})
    assert layout == Layout("json", (("host", "string"), ("total_time", "double"), ("code", "long")))
    assert layout.spark_schema().endswith("raw binary, hub string, host string, total_time double, code bigint")
    assert "record variant" in Layout().spark_schema() and "option variant" in Layout().spark_schema()
    assert Layout().arrow_schema().field("record").type == VARIANT_TYPE
    for options, message in [({"record": "xml"}, "option record='xml' is not one of variant, json"),
                             ({"fields": "host"}, "'host' is not NAME:TYPE"),
                             ({"fields": "a.b:string"}, "'a.b:string' is not NAME:TYPE"),
                             ({"fields": "host:date"}, "'host:date' is not NAME:TYPE"),
                             ({"fields": "tag:string"}, "'tag' is already a column"),
                             ({"fields": "x:int,x:double"}, "'x' is already a column")]:
        with pytest.raises(LayoutOptionError, match=message):
            Layout.from_options(options)


@pytest.mark.parametrize(("kind", "value", "expected"), [
    ("string", "h1", "h1"), ("string", 5, "5"), ("string", {"a": [1]}, '{"a":[1]}'), ("string", None, None),
    ("double", 1.5, 1.5), ("double", 3, 3.0), ("double", "2.5", 2.5), ("double", "x", None), ("double", True, None),
    ("bigint", 7, 7), ("bigint", 7.0, 7), ("bigint", 7.5, None), ("bigint", " 12", 12), ("bigint", 2**63, None),
    ("int", 2**31 - 1, 2**31 - 1), ("int", 2**31, None), ("boolean", False, False), ("boolean", "true", True),
    ("boolean", 1, None), ("double", [1], None),
])
def test_field_conversions(kind: str, value: Any, expected: Any) -> None:
    assert FIELD_CONVERTERS[kind](value) == expected


def test_fields_become_typed_columns() -> None:
    body = encode_batch("t", [(BASE_S, 0, {"host": "a", "total_time": 12}), (BASE_S, 1, {"host": 3}),
                              (BASE_S, 2, {"total_time": "slow"})], {"size": 3})
    layout = Layout.from_options({"fields": "host:string,total_time:double"})
    (batch,) = frames_to_batches("s", [(0, 0, body), (len(body) + 8, 0, b"opaque")], layout=layout)
    assert batch.schema.field("total_time").type == pa.float64()
    assert batch.column("host").to_pylist() == ["a", "3", None, None]
    assert batch.column("total_time").to_pylist() == [12.0, None, None, None]


# --- in Spark ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_variant_get_on_every_sources_records(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data_dir = str(tmp_path / "data")
    sample = build_sample(logjam_requests=60)
    write_bodies(data_dir, sample.bodies)
    df = spark.read.format("logport").option("path", data_dir).load()
    assert dict(df.dtypes)["record"] == "variant"
    rows = df.selectExpr("segment", "source", "to_json(record) AS record", "to_json(option) AS option",
                         "variant_get(option, '$.source', 'string') AS option_source",
                         "variant_get(record, '$.action', 'string') AS action",
                         "try_variant_get(record, '$.total_time', 'double') AS total_time",
                         "record:message::string AS message").collect()
    expected = {}
    for segment, bodies in sample.bodies.items():
        for body in bodies:
            for obj in event_objects(segment, 0, body):
                if "record" in obj:
                    expected.setdefault(segment, []).append(orjson.loads(dumps_event(obj))["record"])
    by_source: dict[str, list[Any]] = {}
    for row in rows:
        if row.record is not None:
            by_source.setdefault(row.segment, []).append(row)
            assert row.option_source == row.source
    assert set(by_source) == {"forward", "lumberjack", "logjam"}
    for segment, got in by_source.items():
        # Spark's JSON of the variant parses to the record `logport cat` prints (bin as base64 in both)
        assert sorted(orjson.dumps(orjson.loads(r.record), option=orjson.OPT_SORT_KEYS) for r in got) == sorted(
            orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in expected[segment])
    logjam = {(r.action, r.total_time) for r in by_source["logjam"] if r.action is not None}
    assert logjam == {(rec["action"], rec.get("total_time")) for _, _, rec in sample.logjam}
    assert all(r.message is not None for r in by_source["lumberjack"])
    assert sum(r.message is not None for r in by_source["forward"]) > 0


@pytest.mark.slow
def test_fields_option_in_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data_dir = str(tmp_path / "data")
    write_bodies(data_dir, {"app": [encode_batch("t", pack_entry(BASE_S, 0, {"host": "h", "total_time": 2.5}),
                                                 {"size": 1})]})
    df = (spark.read.format("logport").option("path", data_dir).option("fields", "host:string,total_time:double")
          .load())
    assert df.select("host", "total_time").collect() == [("h", 2.5)]


# --- the C pass (logport/spark/_variant_encode.c) against its Python reference ----------------------

c_encode = pytest.importorskip("logport.spark._variant_encode").encode_entries


def c_rows(entries: bytes) -> list[tuple[int, bytes, bytes]] | None:
    """(time_ns, value, metadata) of each entry as the C pass encodes it; None when it leaves them to Python."""
    out = c_encode(entries)
    if out is None:
        return None
    n, times, values, value_offsets, metadata, metadata_offsets = out
    t = memoryview(times).cast("q")
    vo, mo = memoryview(value_offsets).cast("i"), memoryview(metadata_offsets).cast("i")
    assert len(t) == n and len(vo) == len(mo) == n + 1 and vo[n] == len(values) and mo[n] == len(metadata)
    return [(t[i], values[vo[i]:vo[i + 1]], metadata[mo[i]:mo[i + 1]]) for i in range(n)]


def python_rows(entries: bytes) -> list[tuple[int, bytes, bytes]]:
    unpacker = msgpack.Unpacker(raw=False, use_list=False, unicode_errors="replace", ext_hook=slice,
                                strict_map_key=False, max_buffer_size=0)
    unpacker.feed(entries)
    out = []
    for time, record in unpacker:
        seconds, nanos = int.from_bytes(time.stop[:4], "big"), int.from_bytes(time.stop[4:], "big")
        out.append((seconds * 1_000_000_000 + nanos, *encode_variant(record)))
    return out


c_keys = st.text(max_size=8).filter(lambda k: all(ord(c) <= 0xFFFF for c in k))
c_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
             | st.floats(width=32, allow_nan=False) | st.text(max_size=70) | st.binary(max_size=10))
c_values = st.recursive(c_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(c_keys, inner, max_size=4),
                        max_leaves=16)


def pack_entries(entries: list[tuple[int, int, Any]], float32: bool) -> bytes:
    """The entries; with float32, floats as msgpack float32 where every one of a record fits."""
    def pack(record: Any) -> bytes:
        try:
            return msgpack.packb(record, use_bin_type=True, use_single_float=float32)
        except OverflowError:
            return msgpack.packb(record, use_bin_type=True)
    return b"".join(pack_entry(s, ns, None)[:-1] + pack(r) for s, ns, r in entries)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 999_999_999),
                          st.dictionaries(c_keys, c_values, max_size=6) | c_values), max_size=8), st.booleans())
def test_c_pass_equals_the_python_encoder(entries, float32) -> None:  # type: ignore[no-untyped-def]
    packed = pack_entries(entries, float32)
    assert c_rows(packed) == python_rows(packed)


@pytest.mark.parametrize("record", [
    b"\x81\xa1k\xa2\xff\xfe",  # a str that is not UTF-8 (Python replaces)
    b"\x81\x92\x01\x02\xa1v",  # an array key
    b"\x82\xa1a\x01\xa1a\x02",  # a duplicate key (Python keeps the last)
    b"\x81\xa1e\xd4\x05\x01",  # an ext that is not an EventTime
    b"\x81\xa4\xf0\x9f\x98\x80\x01",  # a key outside the BMP (Spark orders keys as UTF-16)
    b"\x91" * 70 + b"\xc0",  # nesting deeper than the C pass goes
])
def test_c_pass_leaves_the_odd_records_to_python(record: bytes) -> None:
    entry = pack_entry(BASE_S, 0, None)[:-1] + record
    assert c_rows(pack_entry(BASE_S, 0, {"ok": 1}) + entry) is None
    body = encode_batch("t", entry, {"size": 1})
    assert_variants_as_cat(body)  # through the Python path, as before


def test_c_pass_leaves_other_entry_forms_to_python() -> None:
    assert c_rows(b"") == []
    for entries in [msgpack.packb([BASE_S, {"a": 1}]),  # an integer time
                    msgpack.packb([[msgpack.ExtType(0, bytes(8)), {"m": 1}], {"a": 1}]),  # v1.5 metadata
                    pack_entry(BASE_S, 0, {"a": 1})[:-3]]:  # cut short
        assert c_rows(entries) is None


@given(st.binary(max_size=300))
def test_c_pass_on_arbitrary_bytes_answers_or_declines(data: bytes) -> None:
    rows = c_rows(data)
    if rows is not None:
        assert rows == python_rows(data)


def test_python_path_alone_gives_the_same_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from logport.spark import columns

    bodies = [body for items in build_sample(logjam_requests=45).bodies.values() for body in items]
    with_c = [rb.to_pylist() for body in bodies for rb in frames_to_batches("s", [(0, 0, body)])]
    monkeypatch.setattr(columns, "VariantColumn", None)
    without = [rb.to_pylist() for body in bodies for rb in frames_to_batches("s", [(0, 0, body)])]
    assert with_c == without


frame_kinds = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["a", "b", "web.access"]), st.sampled_from([None, "forward", "logjam", 7]),
                  st.integers(0, 5), st.integers(0, 3)),
        st.binary(max_size=30),  # opaque
    ),
    min_size=1, max_size=12)


@given(frame_kinds, st.integers(1, 40))
def test_many_frames_in_one_batch_keep_each_rows_tag_source_option_and_time(kinds, rows_per_batch) -> None:  # type: ignore[no-untyped-def]
    """The columns a frame's rows share (offset, index, tag, source, option) are built per frame, and a time
    of an opaque row is null: across frames of different kinds, batches cut anywhere, as `logport cat`."""
    stored = []
    offset = 0
    for k, kind in enumerate(kinds):
        if isinstance(kind, bytes):
            body = kind
        else:
            tag, source, n, seq = kind
            option = {"size": n, "sequence": seq} | ({} if source is None else {"source": source})
            body = encode_batch(tag, [(1_795_000_000 + k, i, {"k": k, "i": i}) for i in range(n)], option)
        stored.append((offset, 0, body))
        offset += 8 + len(body)
    cat = [orjson.loads(dumps_event(obj)) for o, _, body in stored for obj in event_objects("s", o, body)]
    for layout in (None, Layout("json")):
        rows = [row for rb in frames_to_batches("s", stored, rows_per_batch, layout) for row in rb.to_pylist()]
        assert len(rows) == len(cat)
        for row, obj in zip(rows, cat, strict=True):
            assert (row["segment"], row["offset"], row["index"]) == (obj["segment"], obj["offset"], obj["index"])
            if "raw" in obj:
                assert row["time_ns"] is None and row["time"] is None and row["tag"] is None
                assert row["source"] is None and row["option"] is None
                continue
            assert (row["tag"], row["time_ns"], row["source"]) == (obj["tag"], obj["time_ns"],
                                                                   obj["option"].get("source") if isinstance(
                                                                       obj["option"].get("source"), str) else None)
            option = variant_value(row["option"]) if layout is None else orjson.loads(row["option"])
            assert option == obj["option"]


# --- the C column: records of many frames on one set of buffers, key sets shared between records ------

VariantColumn = pytest.importorskip("logport.spark._variant_encode").VariantColumn


def split_column(taken: tuple[int, bytes, bytes, bytes, bytes]) -> list[tuple[bytes, bytes]]:
    n, values, value_offsets, metadata, metadata_offsets = taken
    vo, mo = memoryview(value_offsets).cast("i"), memoryview(metadata_offsets).cast("i")
    assert len(vo) == len(mo) == n + 1 and vo[0] == mo[0] == 0
    assert vo[n] == len(values) and mo[n] == len(metadata)
    return [(values[vo[i]:vo[i + 1]], metadata[mo[i]:mo[i + 1]]) for i in range(n)]


@st.composite
def frames_with_shared_keys(draw: st.DrawFn) -> list[bytes]:
    """Frames of entries whose records mostly share a few key sets (as a log's records do), the keys in the
    same order or another, nested maps with the same keys or new ones; now and then an entry the C pass
    leaves to Python (a duplicate key, invalid UTF-8) in the middle of a frame."""
    key_sets = draw(st.lists(st.lists(c_keys, max_size=6, unique=True), min_size=1, max_size=3))
    frames = []
    for _ in range(draw(st.integers(1, 5))):
        entries = []
        for _ in range(draw(st.integers(0, 6))):
            seconds, nanos = draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 999_999_999))
            if draw(st.integers(0, 9)) == 0:
                odd = draw(st.sampled_from([b"\x82\xa1a\x01\xa1a\x02", b"\x81\xa1k\xa2\xff\xfe"]))
                entries.append(pack_entry(seconds, nanos, None)[:-1] + odd)
                continue
            keys = list(draw(st.sampled_from(key_sets)))
            if draw(st.booleans()):
                keys = draw(st.permutations(keys))
            nested = st.dictionaries(st.sampled_from(keys) | c_keys, c_scalars, max_size=3) if keys else c_scalars
            record = {key: draw(c_values | nested) for key in keys}
            entries.append(pack_entry(seconds, nanos, None)[:-1] + msgpack.packb(record, use_bin_type=True))
        frames.append(b"".join(entries))
    return frames


@given(frames_with_shared_keys(), st.lists(st.booleans(), min_size=5, max_size=5))
def test_c_column_equals_the_python_encoder_across_frames(frames: list[bytes], takes: list[bool]) -> None:
    """VariantColumn.add per frame and take() at any frame boundary give, row for row, the Python encoder's
    bytes; a frame it declines (exactly those encode_entries alone declines) adds no row."""
    column = VariantColumn()
    expected: list[tuple[bytes, bytes]] = []
    got: list[tuple[bytes, bytes]] = []
    for entries, take in zip(frames, takes, strict=False):
        times = column.add(entries)
        assert (times is None) == (c_encode(entries) is None)
        if times is not None:
            rows = python_rows(entries)
            assert list(memoryview(times).cast("q")) == [t for t, _, _ in rows]
            expected += [(value, metadata) for _, value, metadata in rows]
        if take:
            got += split_column(column.take())
            assert column.rows == 0
    assert column.rows == len(expected) - len(got)
    got += split_column(column.take())
    assert got == expected


def test_c_column_refuses_what_is_not_bytes_and_keeps_its_rows() -> None:
    column = VariantColumn()
    entries = pack_entry(BASE_S, 0, {"a": 1, "b": {"a": 2, "c": 3}}) * 2
    assert column.add(entries) is not None and column.rows == 2
    with pytest.raises(TypeError):
        column.add("not bytes")  # type: ignore[arg-type]
    assert column.add(entries[:-1]) is None and column.rows == 2  # cut short: declined, nothing added
    assert split_column(column.take()) == [(v, m) for _, v, m in python_rows(entries)]
    assert split_column(column.take()) == []


@given(st.dictionaries(c_keys, c_values, max_size=6) | st.dictionaries(st.integers(-(2**63), 2**64 - 1), c_scalars,
                                                                     max_size=3))
def test_an_option_through_the_c_pass_is_the_python_encoders(option: dict[Any, Any]) -> None:
    """A frame's option as decode_batch hands it over (packed and read back as stored), through the C pass
    or, when it declines (a non-string key), the Python encoder: the same bytes either way."""
    from logport.batch import decode_batch
    from logport.spark.columns import encode_option
    from logport.spark.variant import VariantEncoder

    stored = decode_batch(encode_batch("t", b"", option)).option
    assert encode_option(stored, VariantEncoder()) == encode_variant(stored)


def test_an_option_the_c_pass_cannot_take_goes_the_python_way() -> None:
    from logport.spark.columns import encode_option
    from logport.spark.variant import VariantEncoder

    for option in [{"t": (1, 2), "x": msgpack.ExtType(5, b"ab")}, {1: "int key"}, {"k": "\udcff"}]:
        assert encode_option(option, VariantEncoder()) == encode_variant(option)
