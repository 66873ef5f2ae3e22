"""The frame -> Arrow decoder on its own (no Spark): the same values as `logport cat`, any bytes accepted."""

from __future__ import annotations

import base64

import msgpack
import orjson
from hypothesis import given
from hypothesis import strategies as st

from logport.batch import encode_batch, event_time, pack_entry
from logport.eventjson import dumps_event, event_objects
from logport.spark.columns import ARROW_SCHEMA, Layout, frames_to_batches
from tests.spark.sample import build_sample

keys = st.text(max_size=8)
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(
    max_size=20) | st.binary(max_size=10)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=12)
records = st.dictionaries(keys, values, max_size=6)


JSON = Layout("json")


def rows_of(body: bytes, segment: str = "s", offset: int = 0) -> list[dict]:
    return [row for rb in frames_to_batches(segment, [(offset, 0, body)], layout=JSON) for row in rb.to_pylist()]


def assert_same_as_cat(body: bytes) -> None:
    rows = rows_of(body)
    cat = [orjson.loads(dumps_event(obj)) for obj in event_objects("s", 0, body)]
    assert len(rows) == len(cat)
    for row, obj in zip(rows, cat, strict=True):
        assert (row["segment"], row["offset"], row["index"]) == (obj["segment"], obj["offset"], obj["index"])
        if "raw" in obj:
            assert base64.b64encode(row["raw"]).decode() == obj["raw"]
            continue
        assert row["time_ns"] == obj["time_ns"]
        assert orjson.loads(row["record"]) == obj["record"]
        assert row["tag"] == obj["tag"]
        assert (orjson.loads(row["meta"]) if row["meta"] else None) == obj.get("meta")
        assert orjson.loads(row["option"]) == obj["option"]  # cat prints the batch's option too


def test_sample_bodies_decode_as_cat_prints_them() -> None:
    for bodies in build_sample(logjam_requests=45).bodies.values():
        for body in bodies:
            assert_same_as_cat(body)


def test_records_msgpack_allows_and_json_does_not_decode_as_cat_prints_them() -> None:
    time = b"\x92\xd7\x00" + (1_795_000_000).to_bytes(4, "big") + (7).to_bytes(4, "big")
    records = [
        b"\x81\xa1k\xa2\xff\xfe",  # {"k": <str that is not UTF-8>}
        b"\x81\x92\x01\x02\xa1v",  # {[1, 2]: "v"}: an array key
        b"\x81\x81\xa1a\x01\xa1v",  # {{"a": 1}: "v"}: a map key
        b"\x81\xa1e\xd4\x05\x01",  # {"e": ext 5}
    ]
    for record in records:
        for size in (1, 2):
            body = encode_batch("t", time + record, {"size": size})
            assert_same_as_cat(body)
            assert rows_of(body)[0]["raw"] is None
    # A batch whose entry time is an ext of another type is opaque, as `logport cat` shows it.
    body = encode_batch("t", b"\x92\xd4\x05\x01\x80", {"size": 1})
    assert_same_as_cat(body)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 999_999_999), records), max_size=20),
       st.booleans())
def test_any_records_decode_as_cat_prints_them(entries, with_size) -> None:  # type: ignore[no-untyped-def]
    option = {"size": len(entries), "source": "forward"} if with_size else {"size": len(entries) + 1}
    assert_same_as_cat(encode_batch("t", entries, option))


@given(st.lists(records, max_size=5), st.integers(0, 2**32 - 1))
def test_mixed_time_forms_decode_as_cat_prints_them(recs, seconds) -> None:  # type: ignore[no-untyped-def]
    packed = b"".join(
        msgpack.packb([seconds, r], use_bin_type=True) if i % 3 == 0
        else msgpack.packb([[event_time(seconds, i), {"m": i}], r], use_bin_type=True) if i % 3 == 1
        else pack_entry(seconds, i, r)
        for i, r in enumerate(recs))
    assert_same_as_cat(encode_batch("t", packed, {"size": len(recs)}))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_become_rows_never_errors(body: bytes) -> None:
    stored = [(0, 0, body), (len(body) + 8, -1, b"writer record")]
    batches = list(frames_to_batches("s", stored, layout=JSON))
    assert all(rb.schema.equals(ARROW_SCHEMA) for rb in batches)
    assert sum(rb.num_rows for rb in batches) == len(list(event_objects("s", 0, body)))
    variants = list(frames_to_batches("s", stored))
    assert all(rb.schema.equals(Layout().arrow_schema()) for rb in variants)
    assert sum(rb.num_rows for rb in variants) == sum(rb.num_rows for rb in batches)
