"""The stored payload codec: PackedForward `[tag, entries, option]` with EventTime."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.batch import (
    BatchDecodeError,
    Entry,
    decode_batch,
    encode_batch,
    encode_batch_pieces,
    event_time,
    iter_entries,
    pack_entries,
    pack_entry,
)


def test_round_trip_keeps_nanoseconds() -> None:
    body = encode_batch("app.web", [(1700000000, 123456789, {"msg": "hi"}), (1, 0, {"n": 1})],
                        {"size": 2, "source": "forward"})
    batch = decode_batch(body)
    assert batch.tag == "app.web" and batch.size == 2 and batch.option["source"] == "forward"
    assert list(batch) == [Entry(1700000000, 123456789, {"msg": "hi"}), Entry(1, 0, {"n": 1})]


def test_stored_form_is_a_valid_packed_forward_message() -> None:
    body = encode_batch("t", [(5, 6, {"k": "v"})], {"size": 1})
    tag, entries, option = msgpack.unpackb(body, raw=False)
    assert tag == "t" and isinstance(entries, bytes) and option == {"size": 1}
    (time_, record) = msgpack.unpackb(entries, raw=False)
    assert time_ == msgpack.ExtType(0, b"\x00\x00\x00\x05\x00\x00\x00\x06") and record == {"k": "v"}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (msgpack.packb([1234, {"a": 1}]), Entry(1234, 0, {"a": 1})),  # integer seconds
        (msgpack.packb([event_time(7, 8), {"a": 1}]), Entry(7, 8, {"a": 1})),  # fixext8
        (b"\x92\xc7\x08\x00" + b"\x00\x00\x00\x07\x00\x00\x00\x08" + msgpack.packb({}), Entry(7, 8, {})),  # ext8
        (msgpack.packb([[event_time(9, 1), {"otlp": 1}], {"b": 2}]), Entry(9, 1, {"b": 2}, {"otlp": 1})),  # v1.5
    ],
)
def test_entry_forms(entry: bytes, expected: Entry) -> None:
    assert list(iter_entries(entry)) == [expected]


def test_str_payload_is_treated_as_binary() -> None:
    entries = pack_entry(1, 2, {"x": "y"})
    body = msgpack.packb(["t", entries.decode("latin-1"), {}], use_bin_type=False)
    # a str32 payload (as Fluentd's out_forward sends) is not UTF-8 text; raw bytes survive
    raw = msgpack.packb(["t", msgpack.ExtType(1, b"")], use_bin_type=True)  # not a batch
    with pytest.raises(BatchDecodeError):
        decode_batch(raw)
    assert decode_batch(msgpack.packb(["t", entries, {}], use_bin_type=True)).tag == "t"
    del body


def test_an_entry_time_of_another_ext_type_is_refused() -> None:
    entry = msgpack.packb([msgpack.ExtType(5, b"12345678"), {"a": 1}])
    with pytest.raises(BatchDecodeError, match="neither EventTime nor an integer"):
        list(iter_entries(entry))


@pytest.mark.parametrize("body", [b"", b"\xc1", msgpack.packb(1), msgpack.packb(["t"]), msgpack.packb([1, b"", {}])])
def test_not_a_batch(body: bytes) -> None:
    with pytest.raises(BatchDecodeError):
        decode_batch(body)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_batch_errors(data: bytes) -> None:
    try:
        list(decode_batch(data))
    except BatchDecodeError:
        pass
    try:
        list(iter_entries(data))
    except BatchDecodeError:
        pass


def test_records_that_are_not_utf8_or_have_array_keys_still_read() -> None:
    bad_string = b"\x92" + msgpack.packb(event_time(1, 2)) + b"\x81\xa1k\xa2\xff\xfe"  # {"k": <invalid UTF-8>}
    array_key = b"\x92" + msgpack.packb(event_time(3, 4)) + b"\x81\x91\x01\xa1v"  # {[1]: "v"}
    good = pack_entry(5, 6, {"ok": True})
    assert list(iter_entries(bad_string + array_key + good)) == [
        Entry(1, 2, {"k": "\ufffd\ufffd"}), Entry(3, 4, {"[1]": "v"}), Entry(5, 6, {"ok": True})]


def test_a_tag_that_was_not_utf8_is_stored_as_the_peer_sent_it() -> None:
    tag = b"app.\xff".decode("utf-8", "surrogateescape")
    body = encode_batch(tag, [(1, 0, {})], {})
    assert msgpack.unpackb(body, raw=True)[0] == b"app.\xff"
    assert decode_batch(body).tag == "app.\ufffd"


@pytest.mark.parametrize(("seconds", "nanos"), [(0, 0), (1795317939, 28135265), (2**32 - 1, 999_999_999)])
def test_the_fast_entry_packing_is_msgpacks_own(seconds: int, nanos: int) -> None:
    record = {"message": "x", "n": [1, 2], "nested": {"a": None}, "t": event_time(1, 2)}
    expected = msgpack.packb([event_time(seconds, nanos), record], use_bin_type=True)
    assert pack_entry(seconds, nanos, record) == expected
    assert pack_entries([(seconds, nanos, record)] * 2) == expected * 2


@given(st.text(max_size=20), st.lists(st.binary(max_size=60), max_size=4), st.sampled_from([0, 255, 256, 65535, 65536]),
       st.dictionaries(st.text(max_size=5), st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=5))))
def test_pieces_are_stored_as_msgpack_packs_the_joined_entries(tag: str, pieces: list[bytes], total: int,
                                                               option: dict[str, object]) -> None:
    """Every bin width (8, 16 and 32 bit lengths), at its edges, against msgpack's own packing."""
    pieces = [*pieces, b"x" * max(0, total - sum(map(len, pieces)))]
    expected = msgpack.packb([tag, b"".join(pieces), option], use_bin_type=True)
    assert encode_batch_pieces(tag, pieces, option) == expected
    assert encode_batch_pieces(tag, [memoryview(p) for p in pieces], option) == expected
