"""The C passes of PackedForward against the Python they stand in for.

The C count may answer -1 (let Python decide) for anything; a count it gives must be what the
Python scan gives, for any bytes, and it must give one for every stream of valid entries it covers.
The C frame pass (packed_forward_frame) finds a message's parts where msgpack's unpacker would: a
server connection decodes any stream, split anywhere, to the same events and errors with it and
without it.
"""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.protocols import forward as fp
from tests.forward.test_protocol import mutate

try:
    from logport.protocols._forward_scan import count_entries, packed_forward_frame
except ImportError:  # pragma: no cover - the test below says what is missing
    count_entries = packed_forward_frame = None  # type: ignore[assignment]


def test_the_c_scan_is_built() -> None:
    assert count_entries is not None and packed_forward_frame is not None, (
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


# --- the frame pass: where a PackedForward message's parts lie in the bytes received ---

tags = st.one_of(st.text(max_size=40), st.text(min_size=32, max_size=300))
options = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), values, max_size=4),
                    st.dictionaries(st.text(max_size=3), st.integers(-2**63, 2**64 - 1), min_size=16, max_size=18))


@st.composite
def packed_messages(draw: st.DrawFn) -> bytes:
    """PackedForward messages as clients send them: str or bin entries of every width, with or without option."""
    payload = b"".join(draw(entries))
    entries_as = draw(st.sampled_from(["bin", "str"]))
    packer = msgpack.Packer(use_bin_type=entries_as == "bin")
    head = packer.pack(draw(tags)) + packer.pack(payload)
    if draw(st.booleans()):
        return b"\x92" + head
    return b"\x93" + head + packer.pack(draw(options))


@given(st.binary(max_size=300), st.integers(0, 300))
def test_the_frame_pass_on_arbitrary_bytes(data: bytes, offset: int) -> None:
    offset = min(offset, len(data))
    found = packed_forward_frame(data, offset)
    if isinstance(found, int):
        assert found in (-1, -2) or found > len(data) - offset
        return
    check_frame(data, offset, found)


def check_frame(data: bytes, offset: int, found: tuple[int, int, int, int, int, int]) -> None:
    """What the frame pass found is what msgpack reads there."""
    end, tag_start, tag_end, entries_start, entries_end, option_start = found
    assert offset < tag_start <= tag_end <= entries_start <= entries_end == option_start <= end <= len(data)
    message = msgpack.unpackb(data[offset:end], raw=True, strict_map_key=False)
    assert message[0] == data[tag_start:tag_end] and message[1] == data[entries_start:entries_end]
    assert (len(message) == 3) == (option_start < end)


@given(packed_messages(), st.binary(max_size=20), st.integers(0, 40))
def test_the_frame_pass_finds_every_message_and_asks_for_the_rest(message: bytes, after: bytes, cut: int) -> None:
    data = b"\x00" * 3 + message + after
    check_frame(data, 3, packed_forward_frame(data, 3))  # type: ignore[arg-type]
    short = data[:3 + max(len(message) - 1 - cut, 0)]
    need = packed_forward_frame(short, 3)
    assert isinstance(need, int) and (need == -2 or len(short) - 3 < need <= len(message))


def decode(data: bytes, split: int, frame_pass: bool, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What a server connection makes of `data` fed in pieces of `split` bytes: its events (entries as bytes, the
    option as its repr: a NaN in it equals itself),
    then the type of the error it raised, if any."""
    with monkeypatch.context() as patched:
        if not frame_pass:
            patched.setattr(fp, "_packed_forward_frame", None)
        conn = fp.ServerConnection(peer="fuzz:1", chunk_size_limit=4096, decompression_size_limit=1 << 16)
        out: list[object] = []
        try:
            for i in range(0, len(data), split):
                conn.receive_data(data[i:i + split])
                while (event := conn.next_event()) is not fp.NEED_DATA:
                    if isinstance(event, fp.EventBatch):
                        event = (event.tag, bytes(event.entries), repr(event.option), event.size, event.invalid, event.mode)
                    out.append(event)
        except fp.RemoteProtocolError as e:
            out.append(type(e))
        out.append(conn.buffered)
    return out


MUTATIONS = st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 1 << 16),
                               st.integers(0, 255)), max_size=4)


@given(st.lists(st.one_of(packed_messages(), st.just(b"\xc0"), st.just(msgpack.packb(["t", 1, {"a": 1}]))),
                max_size=5), MUTATIONS, st.integers(1, 700))
def test_the_frame_pass_decodes_as_the_unpacker_does(messages: list[bytes], mutations: list[tuple[str, int, int]],
                                                     split: int) -> None:
    """PackedForward messages between heartbeats and Message-mode messages, damaged or not, split anywhere."""
    data = mutate(b"".join(messages), mutations)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert decode(data, split, True, monkeypatch) == decode(data, split, False, monkeypatch)


def test_a_whole_message_in_one_read_gives_its_entries_as_a_view() -> None:
    conn = fp.ServerConnection()
    stream = msgpack.packb([1, {"a": 1}]) * 3
    conn.receive_data(fp.encode_packed_forward("t", stream, {"chunk": "c"}) * 2)
    first, second = conn.next_event(), conn.next_event()
    assert isinstance(first, fp.EventBatch) and isinstance(first.entries, memoryview)
    assert isinstance(second, fp.EventBatch) and bytes(second.entries) == stream and second.size == 3
    assert conn.next_event() is fp.NEED_DATA and conn.buffered == 0


def test_a_message_over_chunk_size_limit_is_refused_from_its_head() -> None:
    """The declared size of the entries is enough: nothing more is gathered."""
    conn = fp.ServerConnection(chunk_size_limit=1000)
    message = fp.encode_packed_forward("t", msgpack.packb([1, {"a": "x" * 2000}]), {"chunk": "c"})
    conn.receive_data(message[:20])
    with pytest.raises(fp.LimitExceeded, match="chunk_size_limit") as refused:
        conn.next_event()
    assert refused.value.value == fp.declared_frame_size(message) and refused.value.limit == 1000  # as the unpacker says


def test_an_option_without_end_is_bounded_by_chunk_size_limit() -> None:
    """Whole entries, then an option that keeps coming: it goes to the unpacker, which refuses it at the limit."""
    conn = fp.ServerConnection(chunk_size_limit=1000)
    head = b"\x93\xa1t" + msgpack.packb(msgpack.packb([1, {"a": 1}]), use_bin_type=True) + b"\x81\xa1o\xdb\x00\x01\x00\x00"
    conn.receive_data(head)
    assert conn.next_event() is fp.NEED_DATA
    with pytest.raises(fp.LimitExceeded, match="chunk_size_limit"):
        for _ in range(100):
            conn.receive_data(b"x" * 100)
            assert conn.next_event() is fp.NEED_DATA
    assert conn.buffered <= 1000 + 100 + len(head)


def test_a_tag_declared_over_the_limit_is_refused_at_once_by_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """str32 tag of 2 MB (limit 4096), read a byte at a time: the C pass and the unpacker refuse it alike, as soon
    as its length is in (hypothesis found the unpacker waiting for the whole limit's worth)."""
    data = b"\x92\xdb\x00\x20\x30\x30" + b"x" * 31
    assert decode(data, 1, True, monkeypatch) == decode(data, 1, False, monkeypatch) == [fp.LimitExceeded, 6]


def test_entries_declared_over_the_limit_after_a_long_tag_are_refused_at_once_by_both_paths(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 90-byte tag puts the entries' header past the first 64 bytes: the unpacker's path reads on to it, as
    the C pass does, and both refuse the frame when its header is in (hypothesis found the unpacker waiting)."""
    data = b"\x93\xd9\x5a" + b"t" * 90 + b"\xc6\x00\x10\x00\x00" + b"x" * 200
    assert decode(data, 1, True, monkeypatch) == decode(data, 1, False, monkeypatch)
    assert decode(data, 1, False, monkeypatch)[0] is fp.LimitExceeded
