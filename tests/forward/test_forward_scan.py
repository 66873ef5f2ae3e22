"""The C pass of PackedForward's scan against the Python scan it stands in for.

The C pass may answer -1 (let Python decide) for anything; a count it gives must be what the
Python scan gives, for any bytes, and it must give one for every stream of valid entries it covers.
"""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.protocols import forward as fp

try:
    from logport.protocols._forward_scan import count_entries
except ImportError:  # pragma: no cover - the test below says what is missing
    count_entries = None  # type: ignore[assignment]


def test_the_c_scan_is_built() -> None:
    assert count_entries is not None, (
        "logport.protocols._forward_scan was not built: install a C compiler and the Python headers, "
        "then `pip install -e .` again (make setup does both)")


def c_count(data: bytes) -> int:
    assert count_entries is not None
    return count_entries(data)


def agrees(data: bytes) -> int:
    """The C answer, checked against the Python scan whenever it is a count."""
    count = c_count(data)
    if count >= 0:
        assert fp.scan_entries_in_python(data) == (data, count, 0)
    return count


# times in every form the C pass takes: integers of every width, EventTime as fixext8 and as ext8
uint = st.integers(0, 2**64 - 1)
times = st.one_of(
    st.integers(-2**63, 2**64 - 1).map(msgpack.packb),
    uint.map(lambda v: b"\xcf" + struct.pack(">Q", v)),
    st.integers(0, 255).map(lambda v: b"\xcc" + bytes([v])),
    st.integers(-2**31, 2**31 - 1).map(lambda v: b"\xd2" + struct.pack(">i", v)),
    st.binary(min_size=8, max_size=8).map(lambda b: b"\xd7\x00" + b),
    st.binary(min_size=8, max_size=8).map(lambda b: b"\xc7\x08\x00" + b),
)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(), st.text(max_size=40),
                   st.binary(max_size=300), st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=20)))
values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                      st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                      max_leaves=20)


def map16(record: dict[str, object]) -> bytes:
    body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in record.items())
    return b"\xde" + struct.pack(">H", len(record)) + body


records = st.one_of(
    st.dictionaries(st.text(max_size=10), values, max_size=8).map(msgpack.packb),
    st.dictionaries(st.text(max_size=10), values, max_size=4).map(map16),
    st.dictionaries(st.text(max_size=4), st.integers(-2**63, 2**64 - 1), min_size=16, max_size=20).map(msgpack.packb),
)
entries = st.lists(st.tuples(times, records).map(lambda e: b"\x92" + e[0] + e[1]), max_size=30)


@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    agrees(data)


@given(entries)
def test_a_stream_of_valid_entries_is_counted_in_c(stream: list[bytes]) -> None:
    assert agrees(b"".join(stream)) == len(stream)


@settings(max_examples=300)
@given(entries.filter(bool), st.data())
def test_a_damaged_stream_is_left_to_python_or_counted_alike(stream: list[bytes], data: st.DataObject) -> None:
    whole = bytearray(b"".join(stream))
    how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    at = data.draw(st.integers(0, len(whole) - 1))
    if how == "flip":
        whole[at] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del whole[at:]
    else:
        whole[at:at] = data.draw(st.binary(min_size=1, max_size=9))
    agrees(bytes(whole))


@pytest.mark.parametrize("form", [
    msgpack.packb([[1, {}], {"a": 1}]),  # v1.5 [[time, meta], record]: the Python scan's to judge
    msgpack.packb([1.5, {"a": 1}]),  # a float time
    msgpack.packb([True, {"a": 1}]),
    msgpack.packb([1, [1]]),  # a record that is not a map
    msgpack.packb([1, {"a": 1}, 2]),
    b"\x92\xd7\x01" + bytes(8) + b"\x80",  # ext type 1 is not an EventTime
    b"\x92\xc7\x07\x00" + bytes(7) + b"\x80",  # nor an ext of 7 bytes
    b"\x92\x01\x81\xc1\x01",  # 0xc1 is never used
    b"\x92\x01\x81\xa1a\xdb\xff\xff\xff\xff",  # a str32 that claims 4 GiB
    b"\x92\x01\x81\xa1a\xdd\xff\xff\xff\xff\x01",  # an array32 that claims 4 billion elements
    b"\x92\x01",
])
def test_what_the_c_pass_leaves_to_python(form: bytes) -> None:
    stream = msgpack.packb([1, {"x": 1}]) + form
    assert c_count(stream) == -1
    assert fp.scan_entries(stream) == fp.scan_entries_in_python(stream)


def nested(containers: int) -> bytes:
    """An entry whose record's innermost value is inside `containers` containers, the record's map included."""
    return b"\x92\x01\x81\xa1v" + b"\x91" * (containers - 1) + b"\x01"


@pytest.mark.parametrize("containers", [1, 2, 63, 64])
def test_nesting_up_to_64_deep_is_counted_in_c(containers: int) -> None:
    assert agrees(nested(containers) * 3) == 3


@pytest.mark.parametrize("containers", [65, 200, 5000])
def test_deeper_nesting_is_left_to_python(containers: int) -> None:
    assert c_count(nested(containers)) == -1
    assert fp.scan_entries(nested(containers)) == fp.scan_entries_in_python(nested(containers))


def test_any_buffer_is_scanned() -> None:
    stream = msgpack.packb([1, {"a": 1}]) * 4
    assert c_count(stream) == c_count(bytearray(stream)) == c_count(memoryview(stream)) == 4
    with pytest.raises(TypeError):
        c_count("text")  # type: ignore[arg-type]
