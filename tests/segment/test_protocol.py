"""Sans-IO tests of the segment protocol: bytes in, messages out, and back."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.errors import LimitExceeded, LocalProtocolError, RemoteProtocolError
from logport.protocols import segment as sp

CID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
CID_BYTES = bytes.fromhex("00112233445566778899aabbccddeeff")


def h(type_code: int, body: bytes) -> bytes:
    return struct.pack(">iI", type_code, len(body)) + body


def s(text: bytes) -> bytes:
    return struct.pack(">H", len(text)) + text


def q(value: int) -> bytes:
    return struct.pack(">q", value)


def i(value: int) -> bytes:
    return struct.pack(">i", value)


# every message, byte for byte: (message, its wire form)
MESSAGES: list[tuple[sp.Message, bytes]] = [
    (sp.Event(b"hello"), h(0, b"hello")),
    (sp.PartialMessage(sp.PartialKind.BEGIN, b"ab"), h(1, b"\x00ab")),
    (sp.PartialMessage(sp.PartialKind.MIDDLE, b""), h(1, b"\x01")),
    (sp.PartialMessage(sp.PartialKind.END, b"z"), h(1, b"\x02z")),
    (sp.KeepAlive(), h(2, b"")),
    (sp.KeepAlive(b"ping"), h(2, b"ping")),
    (sp.ReadSegment("logs", 4096, 65536), h(3, s(b"logs") + q(4096) + i(65536))),
    (sp.ReadSegment("logs", 0, 10, 250), h(3, s(b"logs") + q(0) + i(10) + i(250))),
    (sp.SegmentRead.make("logs", 7, True, False, b"data"), h(4, s(b"logs") + q(7) + b"\x01data")),
    (sp.SegmentRead.make("logs", 7, True, True, b""), h(4, s(b"logs") + q(7) + b"\x03")),
    (sp.SegmentRead.make("logs", 7, False, False, b"x"), h(4, s(b"logs") + q(7) + b"\x00x")),
    (sp.SetupAppend(CID, "logs"), h(5, CID_BYTES + s(b"logs"))),
    (sp.AppendSetup("logs", CID, 123), h(6, s(b"logs") + CID_BYTES + q(123))),
    (sp.BeginAppendBlock(CID, 100, 26), h(7, CID_BYTES + q(100) + i(26))),
    (sp.EndAppendBlock(CID, 126, 26), h(8, CID_BYTES + q(126) + i(26))),
    (sp.DataAppended(CID, 126), h(9, CID_BYTES + q(126))),
    (sp.NoSuchSegment("x"), h(50, s(b"x"))),
    (sp.SegmentIsSealed("x"), h(51, s(b"x"))),
    (sp.SegmentIsTruncated("x", 64), h(52, s(b"x") + q(64))),
    (sp.WrongConnectionOffset(CID, 10, 20), h(53, CID_BYTES + q(10) + q(20))),
    (sp.MessageTooLarge("event", 9, "max_event_size", 8), h(54, s(b"event") + q(9) + s(b"max_event_size") + q(8))),
    (sp.InvalidSegmentName("a/b", "bad"), h(55, s(b"a/b") + s(b"bad"))),
    (sp.OperationFailed("x", "disk full"), h(56, s(b"x") + s(b"disk full"))),
    (sp.ProtocolViolation("no"), h(57, s(b"no"))),
    (sp.CreateSegment("x"), h(60, s(b"x"))),
    (sp.SegmentCreated("x", True), h(61, s(b"x") + b"\x01")),
    (sp.SealSegment("x"), h(62, s(b"x"))),
    (sp.SegmentSealed("x", 99), h(63, s(b"x") + q(99))),
    (sp.TruncateSegment("x", 5), h(64, s(b"x") + q(5))),
    (sp.SegmentTruncated("x", 5), h(65, s(b"x") + q(5))),
    (sp.GetSegmentInfo("x"), h(66, s(b"x"))),
    (sp.SegmentInfoReply("x", 1, 2, False), h(67, s(b"x") + q(1) + q(2) + b"\x00")),
    (sp.ListSegments(), h(68, b"")),
    (sp.SegmentList(("a", "bc")), h(69, i(2) + s(b"a") + s(b"bc"))),
    (sp.SegmentList(()), h(69, i(0))),
    (sp.Authenticate("t0k"), h(70, s(b"t0k"))),
    (sp.Authenticated(), h(71, b"")),
    (sp.AuthenticationFailed("wrong token"), h(72, s(b"wrong token"))),
    (sp.GetHubInfo(), h(73, b"")),
    (sp.HubInfo("0d5e0000-0000-4000-8000-000000000000"), h(74, s(b"0d5e0000-0000-4000-8000-000000000000"))),
]


def test_every_message_type_is_in_the_table() -> None:
    assert {type(m) for m, _ in MESSAGES} == set(sp.MESSAGE_TYPES.values())
    assert sp.Event.TYPE == 0  # the same as the store's Event frames


@pytest.mark.parametrize(("message", "wire"), MESSAGES, ids=lambda v: type(v).__name__ if isinstance(v, sp.Message) else "")
def test_encode_and_decode(message: sp.Message, wire: bytes) -> None:
    assert sp.encode(message) == wire
    type_code, length = struct.unpack_from(">iI", wire)
    assert length == len(wire) - 8
    assert sp.decode_body(type_code, wire[8:]) == message


def received(role: sp.Role, wire: bytes, step: int | None = None, limits: sp.Limits | None = None) -> list:
    conn = sp.Connection(role, limits)
    out = []
    step = step or max(1, len(wire))
    for at in range(0, len(wire), step):
        conn.receive_data(wire[at : at + step])
        while (event := conn.next_event()) is not sp.NEED_DATA:
            out.append(event)
    return out


@pytest.mark.parametrize(("message", "wire"), [(m, w) for m, w in MESSAGES if isinstance(m, sp.REPLIES + sp.BOTH)
                                               and not isinstance(m, sp.PartialMessage)])
def test_client_receives_each_reply_byte_by_byte(message: sp.Message, wire: bytes) -> None:
    assert received(sp.Role.CLIENT, wire, step=1) == [message]


@pytest.mark.parametrize(("message", "wire"), [(m, w) for m, w in MESSAGES if isinstance(m, sp.REQUESTS)
                                               and not isinstance(m, sp.Event | sp.BeginAppendBlock | sp.EndAppendBlock)])
def test_server_receives_each_request_byte_by_byte(message: sp.Message, wire: bytes) -> None:
    assert received(sp.Role.SERVER, wire, step=1) == [message]


# --- strings: Java modified UTF-8 ---

UTF8_CASES = [
    ("", b""),
    ("abc", b"abc"),
    ("\x00", b"\xc0\x80"),  # NUL is two bytes
    ("é", b"\xc3\xa9"),
    ("€", b"\xe2\x82\xac"),
    ("\U0001f600", b"\xed\xa0\xbd\xed\xb8\x80"),  # a surrogate pair, three bytes each
]


@pytest.mark.parametrize(("text", "raw"), UTF8_CASES)
def test_modified_utf8(text: str, raw: bytes) -> None:
    assert sp.encode_modified_utf8(text) == raw
    assert sp.decode_modified_utf8(raw) == text


@pytest.mark.parametrize("raw", [b"\xf0\x9f\x98\x80", b"\xc3", b"\xff", b"\xe2\x82"])
def test_modified_utf8_refuses_invalid(raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        sp.decode_modified_utf8(raw)


@given(st.text())
def test_modified_utf8_round_trip(text: str) -> None:
    assert sp.decode_modified_utf8(sp.encode_modified_utf8(text)) == text


def test_string_longer_than_65535_bytes_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        sp.encode(sp.NoSuchSegment("x" * 65536))


# --- malformed bodies ---

BAD_BODIES = [
    (3, s(b"logs") + q(0), "too short"),
    (3, s(b"logs") + q(0) + i(1) + i(2) + b"!", "after its last field"),
    (3, s(b"logs") + q(-1) + i(10), "negative"),
    (5, CID_BYTES[:10], "too short"),
    (1, b"\x03abc", "kind 3"),
    (4, s(b"x") + q(0) + b"\x04", "unknown bits"),
    (61, s(b"x") + b"\x02", "not a boolean"),
    (69, i(1000) + s(b"a"), "announces 1000 strings"),
    (69, i(-1), "announces -1"),
    (999, b"", "unknown message type 999"),
    (3, b"\x00\x05ab", "too short"),
    (7, CID_BYTES + q(0) + i(-5), "negative"),
]


@pytest.mark.parametrize(("type_code", "body", "needle"), BAD_BODIES)
def test_malformed_bodies(type_code: int, body: bytes, needle: str) -> None:
    with pytest.raises(RemoteProtocolError, match=needle):
        sp.decode_body(type_code, body)


# --- blocks ---

EVENTS = sp.event_messages([b"first", b"second event", b"3"])
SETUP = sp.encode(sp.SetupAppend(CID, "logs"))


def test_block_is_assembled_from_events() -> None:
    wire = SETUP + sp.encode_block(CID, 1000, EVENTS)
    setup, block = received(sp.Role.SERVER, wire)
    assert setup == sp.SetupAppend(CID, "logs")
    assert block == sp.AppendBlock(CID, 1000, 1000 + len(EVENTS), EVENTS, 3)


def test_block_wire_layout_matches_the_document() -> None:
    wire = sp.encode_block(CID, 0, EVENTS)
    assert wire == (h(7, CID_BYTES + q(0) + i(len(EVENTS))) + h(0, b"first") + h(0, b"second event") + h(0, b"3")
                    + h(8, CID_BYTES + q(len(EVENTS)) + i(len(EVENTS))))


def test_split_event_layout_partial_end_after_end_append_block() -> None:
    last = len(EVENTS) - (8 + 1)  # the last event message starts here
    wire = sp.encode_block(CID, 0, EVENTS, split_at=last + 4)
    inside = EVENTS[:last] + h(1, b"\x00" + EVENTS[last : last + 4])
    assert wire == (h(7, CID_BYTES + q(0) + i(len(inside))) + inside
                    + h(8, CID_BYTES + q(len(EVENTS)) + i(len(EVENTS)))
                    + h(1, b"\x02" + EVENTS[last + 4 :]))


def _split_points() -> list[tuple[int, int]]:
    last = len(EVENTS) - 9
    return [(at, frag) for at in range(last + 1, len(EVENTS)) for frag in (0, 1, 2)]


@pytest.mark.parametrize(("split_at", "fragment"), _split_points())
def test_event_split_across_the_end_of_a_block_at_every_point(split_at: int, fragment: int) -> None:
    wire = SETUP + sp.encode_block(CID, 0, EVENTS, split_at=split_at, fragment=fragment) + sp.encode(sp.KeepAlive())
    for step in (1, 3, len(wire)):
        events = received(sp.Role.SERVER, wire, step)
        assert events[1] == sp.AppendBlock(CID, 0, len(EVENTS), EVENTS, 3)
        assert events[2] == sp.KeepAlive()


def test_other_requests_may_come_between_end_append_block_and_the_split_rest() -> None:
    last = len(EVENTS) - 9
    wire = sp.encode_block(CID, 0, EVENTS, split_at=last + 3)
    cut = wire.rindex(sp.encode(sp.PartialMessage(sp.PartialKind.END, EVENTS[last + 3 :])))
    wire = SETUP + wire[:cut] + sp.encode(sp.GetSegmentInfo("logs")) + wire[cut:]
    events = received(sp.Role.SERVER, wire)
    assert events == [sp.SetupAppend(CID, "logs"), sp.GetSegmentInfo("logs"),
                      sp.AppendBlock(CID, 0, len(EVENTS), EVENTS, 3)]


def test_several_connection_ids_on_one_connection() -> None:
    other = uuid.UUID(int=7)
    a = sp.event_messages([b"a" * 10])
    b = sp.event_messages([b"b" * 20, b"bb"])
    wire = (SETUP + sp.encode(sp.SetupAppend(other, "other")) + sp.encode_block(CID, 0, a)
            + sp.encode_block(other, 50, b) + sp.encode_block(CID, len(a), b))
    blocks = [e for e in received(sp.Role.SERVER, wire, 5) if isinstance(e, sp.AppendBlock)]
    assert blocks == [sp.AppendBlock(CID, 0, len(a), a, 1), sp.AppendBlock(other, 50, 50 + len(b), b, 2),
                      sp.AppendBlock(CID, len(a), len(a) + len(b), b, 2)]


def test_empty_block() -> None:
    wire = sp.encode_block(CID, 40, b"")
    assert received(sp.Role.SERVER, wire) == [sp.AppendBlock(CID, 40, 40, b"", 0)]


@pytest.mark.parametrize("size", [1, 2, 5, 16])
def test_partial_reassembly_of_any_message_at_every_split_point(size: int) -> None:
    for message in (sp.ReadSegment("logs", 12, 34, 5), sp.GetSegmentInfo("x"), sp.SetupAppend(CID, "logs")):
        wire = sp.split_into_partials(message, size)
        for step in (1, 7, len(wire)):
            assert received(sp.Role.SERVER, wire, step) == [message]
    reply = sp.SegmentRead.make("x", 1, True, False, b"y" * 40)
    assert received(sp.Role.CLIENT, sp.split_into_partials(reply, size)) == [reply]


def test_every_split_of_a_message_into_begin_and_end() -> None:
    whole = sp.encode(sp.ReadSegment("segment-name", 99, 1000))
    for cut in range(len(whole) + 1):
        wire = (sp.encode(sp.PartialMessage(sp.PartialKind.BEGIN, whole[:cut]))
                + sp.encode(sp.PartialMessage(sp.PartialKind.END, whole[cut:])))
        assert received(sp.Role.SERVER, wire) == [sp.ReadSegment("segment-name", 99, 1000)]


# --- protocol errors ---

PB = sp.PartialKind.BEGIN
PM = sp.PartialKind.MIDDLE
PE = sp.PartialKind.END


def partial(kind: sp.PartialKind, data: bytes) -> bytes:
    return sp.encode(sp.PartialMessage(kind, data))


def begin(offset: int, length: int, cid: uuid.UUID = CID) -> bytes:
    return sp.encode(sp.BeginAppendBlock(cid, offset, length))


def end(offset: int, length: int, cid: uuid.UUID = CID) -> bytes:
    return sp.encode(sp.EndAppendBlock(cid, offset, length))


ONE = sp.event_messages([b"abc"])  # 11 bytes

ERRORS = [
    (h(0, b"x"), "Event outside an append block"),
    (end(0, 0), "without a BeginAppendBlock"),
    (begin(0, 11) + ONE + sp.encode(sp.GetSegmentInfo("x")), "EndAppendBlock must follow"),
    (begin(0, 11) + ONE + end(12, 12), "block held 11"),
    (begin(0, 11) + ONE + end(12, 11), "!= block start"),
    (begin(0, 11) + ONE + end(11, 11, uuid.UUID(int=5)), "ends a block of"),
    (begin(0, 10) + ONE, "crosses the end of its block"),
    (begin(0, 20) + ONE + sp.encode(sp.KeepAlive()), "message type 2 inside an append block"),
    (begin(0, 4), "cannot hold a message"),
    (begin(0, 13) + ONE + b"\x00\x00", "cannot hold a message header"),
    (partial(PM, b"x"), "Middle without a Begin"),
    (partial(PE, b"x"), "End without a Begin"),
    (partial(PB, b"x") + partial(PB, b"y"), "before the previous partial message ended"),
    (partial(PB, b"") + partial(PE, b"abc"), "no whole header"),
    (partial(PB, h(66, s(b"x"))[:5]) + partial(PE, h(66, s(b"x"))[5:] + b"!"), "says 3 bytes but holds 4"),
    (partial(PB, partial(PB, b"")) + partial(PE, b""), "holds another partial message"),
    (partial(PB, h(0, b"abc")) + partial(PE, b""), "Event outside an append block"),
    (partial(PB, ONE[:5]) + begin(0, 0), "while a PartialMessage is open"),
    (begin(0, 14) + partial(PB, ONE[:5]) + end(11, 11) + begin(11, 0), "before the split last event"),
    (begin(0, 14) + partial(PB, ONE[:5]) + end(5, 5), "leaves no room for the split event"),
    (begin(0, 14) + partial(PB, ONE[:5]) + end(11, 11) + partial(PE, ONE[5:] + b"x"), "says 3 bytes but holds 4"),
    (begin(0, 14) + partial(PB, ONE[:5]) + end(30, 30) + partial(PE, ONE[5:]), "EndAppendBlock says 30"),
    (begin(0, 14) + partial(PB, h(2, b"abc")[:5]) + end(11, 11) + partial(PE, h(2, b"abc")[5:]), "holds type 2"),
    (begin(0, 29) + partial(PB, ONE[:5]) + partial(PE, ONE[5:]), None),  # incomplete: no error, no event
    (h(9, CID_BYTES + q(1)), "DataAppended is not a message a server receives"),
]


@pytest.mark.parametrize(("wire", "needle"), ERRORS, ids=[str(n) for _, n in ERRORS])
def test_protocol_errors(wire: bytes, needle: str | None) -> None:
    if needle is None:
        assert not [e for e in received(sp.Role.SERVER, wire) if isinstance(e, sp.AppendBlock)]
        return
    with pytest.raises(RemoteProtocolError, match=needle):
        received(sp.Role.SERVER, wire)


def test_client_refuses_requests() -> None:
    with pytest.raises(RemoteProtocolError, match="ReadSegment is not a message a client receives"):
        received(sp.Role.CLIENT, sp.encode(sp.ReadSegment("x", 0, 1)))


def test_send_refuses_the_wrong_direction() -> None:
    with pytest.raises(LocalProtocolError):
        sp.Connection(sp.Role.SERVER).send(sp.ReadSegment("x", 0, 1))
    with pytest.raises(LocalProtocolError):
        sp.Connection(sp.Role.CLIENT).send(sp.DataAppended(CID, 0))
    assert sp.Connection(sp.Role.CLIENT).send(sp.KeepAlive()) == h(2, b"")


def test_connection_closed_inside_a_message() -> None:
    conn = sp.Connection(sp.Role.SERVER)
    conn.receive_data(sp.encode(sp.GetSegmentInfo("x"))[:5])
    assert conn.next_event() is sp.NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="closed inside a message"):
        conn.next_event()


# --- limits: each one hit ---

SMALL = sp.Limits(max_message_size=100, max_event_size=50, max_block_size=200)


@pytest.mark.parametrize(("wire", "limit_name", "value"), [
    (h(66, s(b"x" * 99)), "max_message_size", 101),
    (begin(0, 60) + h(0, b"e" * 51), "max_event_size", 51),
    (begin(0, 201), "max_block_size", 201),
    (partial(PB, b"x" * 60) + partial(PM, b"x" * 50), "max_message_size", 110),
    (begin(0, 100) + partial(PB, b"x" * 40) + partial(PM, b"x" * 40), "max_message_size", 80),
    (partial(PB, h(0, b"e" * 60)) + partial(PE, b""), "max_event_size", 60),
])
def test_limits(wire: bytes, limit_name: str, value: int) -> None:
    with pytest.raises(LimitExceeded) as info:
        received(sp.Role.SERVER, wire, limits=SMALL)
    assert info.value.limit_name == limit_name
    assert info.value.value == value


def test_default_limits_are_pravegas() -> None:
    limits = sp.Limits()
    assert limits.max_message_size == (1 << 24) - 1
    with pytest.raises(LimitExceeded, match="16777216 bytes exceeds max_message_size 16777215"):
        received(sp.Role.CLIENT, struct.pack(">iI", 4, 1 << 24))


def test_length_with_upper_bits_set_is_refused_before_buffering() -> None:
    conn = sp.Connection(sp.Role.SERVER)
    conn.receive_data(struct.pack(">iI", 3, 0xFFFFFFFF))
    with pytest.raises(LimitExceeded):
        conn.next_event()


# --- hypothesis: arbitrary bytes never raise anything but the protocol's error, never hang ---


@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64), st.sampled_from(list(sp.Role)))
def test_arbitrary_bytes(data: bytes, step: int, role: sp.Role) -> None:
    conn = sp.Connection(role, SMALL)
    try:
        for at in range(0, len(data), step):
            conn.receive_data(data[at : at + step])
            for _ in range(len(data) + 2):  # each call consumes bytes or asks for more
                if conn.next_event() is sp.NEED_DATA:
                    break
            else:
                raise AssertionError("next_event did not stop")
        assert conn.buffered <= len(data)
    except RemoteProtocolError:
        pass


def _valid_stream() -> st.SearchStrategy[bytes]:
    requests = st.sampled_from([m for m, _ in MESSAGES if isinstance(m, sp.REQUESTS)
                                and not isinstance(m, sp.Event | sp.BeginAppendBlock | sp.EndAppendBlock)])
    pieces = st.one_of(
        requests.map(sp.encode),
        st.lists(st.binary(max_size=30), min_size=1, max_size=4).map(
            lambda bodies: sp.encode_block(CID, 0, sp.event_messages(bodies))),
    )
    return st.lists(pieces, max_size=6).map(b"".join)


@given(_valid_stream(), st.integers(min_value=0, max_value=10_000), st.binary(min_size=1, max_size=3))
def test_mutated_valid_streams(stream: bytes, at: int, junk: bytes) -> None:
    at = at % (len(stream) + 1)
    data = stream[:at] + junk + stream[at + len(junk) :]
    try:
        received(sp.Role.SERVER, data, 5)
    except RemoteProtocolError:
        pass


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6), st.integers(min_value=0, max_value=400),
       st.integers(min_value=0, max_value=5), st.integers(min_value=1, max_value=50))
def test_blocks_with_a_split_event_round_trip(bodies: list[bytes], cut: int, fragment: int, step: int) -> None:
    events = sp.event_messages(bodies)
    last = len(events) - 8 - len(bodies[-1])
    split = last + 1 + cut % (len(events) - last - 1) if len(events) - last > 1 else None
    wire = sp.encode_block(CID, 5, events, split_at=split, fragment=fragment)
    assert received(sp.Role.SERVER, wire, step) == [sp.AppendBlock(CID, 5, 5 + len(events), events, len(bodies))]


# --- receiving in place (asyncio.BufferedProtocol): the same results as receive_data ---


def received_in_place(wire: bytes, sizes: list[int], limits: sp.Limits | None = None,
                      allocate: Callable[[int], bytearray | memoryview] = bytearray) -> list:
    """Feed `wire` through get_buffer/buffer_updated, each read at most the next of `sizes` bytes."""
    conn = sp.Connection(sp.Role.SERVER, limits, allocate)
    out = []
    at = 0
    i = 0
    while at < len(wire):
        view = conn.get_buffer(-1)
        assert len(view) > 0
        n = min(len(view), sizes[i % len(sizes)], len(wire) - at)
        i += 1
        view[:n] = wire[at : at + n]
        at += n
        conn.buffer_updated(n)
        while (event := conn.next_event()) is not sp.NEED_DATA:
            out.append(event)
    return out


def test_a_block_is_received_in_place_and_not_copied() -> None:
    events = sp.event_messages([b"a" * 1000, b"b" * 3000])
    wire = SETUP + sp.encode_block(CID, 0, events)
    conn = sp.Connection(sp.Role.SERVER)
    head = len(SETUP) + 8 + 28
    view = conn.get_buffer(-1)
    view[:head] = wire[:head]
    conn.buffer_updated(head)
    assert conn.next_event() == sp.SetupAppend(CID, "logs")
    assert conn.next_event() is sp.NEED_DATA
    region = conn.get_buffer(-1)
    assert len(region) == len(events)  # the block's own buffer, exactly its data
    region[:1500] = wire[head : head + 1500]
    conn.buffer_updated(1500)
    assert conn.next_event() is sp.NEED_DATA
    rest = wire[head + 1500 :]
    region = conn.get_buffer(-1)
    region[: len(events) - 1500] = rest[: len(events) - 1500]
    conn.buffer_updated(len(events) - 1500)
    view = conn.get_buffer(-1)
    tail = rest[len(events) - 1500 :]
    view[: len(tail)] = tail
    conn.buffer_updated(len(tail))
    block = conn.next_event()
    assert block == sp.AppendBlock(CID, 0, len(events), events, 2)
    assert isinstance(block.data, bytearray)  # type: ignore[union-attr]  # the buffer received into


@given(st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=5), min_size=1, max_size=4),
       st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=8), st.integers(min_value=0, max_value=3),
       st.integers(min_value=0, max_value=10_000))
def test_in_place_matches_receive_data(blocks: list[list[bytes]], sizes: list[int], fragment: int, cut: int) -> None:
    wire = SETUP
    expected: list = [sp.SetupAppend(CID, "logs")]
    offset = 0
    for i, bodies in enumerate(blocks):
        events = sp.event_messages(bodies)
        last = len(events) - 8 - len(bodies[-1])
        split = None
        if i % 2 and len(events) - last > 1:  # every other block ends in a split event
            split = last + 1 + cut % (len(events) - last - 1)
        wire += sp.encode_block(CID, offset, events, split_at=split, fragment=fragment)
        wire += sp.encode(sp.GetSegmentInfo("x"))
        expected += [sp.AppendBlock(CID, offset, offset + len(events), events, len(bodies)), sp.GetSegmentInfo("x")]
        offset += len(events)
    assert received_in_place(wire, sizes) == expected
    assert received(sp.Role.SERVER, wire, sizes[0]) == expected


def dirty(n: int) -> memoryview:
    """A buffer as a pool gives it back: larger than asked for, and holding an earlier block's bytes."""
    return memoryview(bytearray(b"\xa5" * (n + 64)))[:n]


def test_a_block_is_received_into_the_buffer_allocate_gives() -> None:
    events = sp.event_messages([b"a" * 1000, b"b" * 3000])
    given: list[memoryview] = []

    def allocate(n: int) -> memoryview:
        given.append(dirty(n))
        return given[-1]

    (setup, block) = received_in_place(SETUP + sp.encode_block(CID, 0, events), [700], allocate=allocate)
    assert block == sp.AppendBlock(CID, 0, len(events), events, 2)
    assert [len(v) for v in given] == [len(events)] and block.data is given[0]


@given(st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=5), min_size=1, max_size=4),
       st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=8), st.integers(min_value=0, max_value=3))
def test_in_place_into_dirty_buffers_matches_receive_data(blocks: list[list[bytes]], sizes: list[int],
                                                         fragment: int) -> None:
    """Reused buffers hold an earlier block's bytes: nothing may read a byte of one before it arrived."""
    wire = SETUP
    offset = 0
    for i, bodies in enumerate(blocks):
        events = sp.event_messages(bodies)
        split = len(events) - len(bodies[-1]) // 2 - 1 if i % 2 and len(bodies[-1]) > 1 else None
        wire += sp.encode_block(CID, offset, events, split_at=split, fragment=fragment)
        offset += len(events)
    assert received_in_place(wire, sizes, allocate=dirty) == received(sp.Role.SERVER, wire, sizes[0])


def test_between_large_blocks_a_read_takes_just_their_end_and_begin() -> None:
    """After a block of 64 KiB or more received in place, the next read is one EndAppendBlock and one
    BeginAppendBlock long, so the next block's data lands in its own buffer, not in the scratch buffer
    (from where it was copied four times); after a small block, or any other message, reads are large."""
    large = sp.event_messages([bytes([i]) * 20_000 for i in range(4)])  # 80,032 bytes
    small = sp.event_messages([b"s" * 100])
    between = len(sp.encode(sp.EndAppendBlock(CID, 0, 0))) + len(sp.encode(sp.BeginAppendBlock(CID, 0, 0)))
    wire = (SETUP + sp.encode_block(CID, 0, large) + sp.encode_block(CID, len(large), large)
            + sp.encode_block(CID, 2 * len(large), small) + sp.encode_block(CID, 2 * len(large) + len(small), large)
            + sp.encode(sp.GetSegmentInfo("x")) + sp.encode_block(CID, 3 * len(large) + len(small), small))
    given: list[memoryview] = []

    def allocate(n: int) -> memoryview:
        given.append(dirty(n))
        return given[-1]

    conn = sp.Connection(sp.Role.SERVER, allocate=allocate)
    out: list = []
    reads: list[tuple[int, bool]] = []  # (bytes read, whether into a block's own buffer) of each read
    at = 0
    while at < len(wire):
        view = conn.get_buffer(-1)
        n = min(len(view), len(wire) - at, len(SETUP) + 36 if at == 0 else len(wire))  # the first: up to the data
        view[:n] = wire[at : at + n]
        reads.append((len(view), any(view.obj is g.obj for g in given)))
        at += n
        conn.buffer_updated(n)
        while (event := conn.next_event()) is not sp.NEED_DATA:
            out.append(event)
    blocks = [e for e in out if isinstance(e, sp.AppendBlock)]
    assert [b.data for b in blocks] == [large, large, small, large, small]
    assert out[-2] == sp.GetSegmentInfo("x")
    # the second large block: after the first one's data, one read of its end and the next's begin, then
    # the data in place into the buffer allocate gave, wholly
    assert blocks[0].data is given[0] and blocks[1].data is given[1] and between == 72
    small_reads = [i for i, (size, _) in enumerate(reads) if size == between]
    assert len(small_reads) == 2  # after each large block but the last (a GetSegmentInfo follows it)
    for i in small_reads:
        assert reads[i - 1][1] and not reads[i][1]  # a large block's data came in place before it
    assert reads[small_reads[0] + 1] == (len(large), True)  # the next block's data, all of it in one read
    assert reads[small_reads[1] + 1][0] > between  # after the small block: a scratch read of the usual size
    # after the last large block, its EndAppendBlock and the GetSegmentInfo: large reads again
    assert all(size > between for size, _ in reads[small_reads[1] + 3 :])


@given(st.lists(st.sampled_from([1, 20_000, 70_000]), min_size=1, max_size=4),
       st.lists(st.integers(min_value=3000, max_value=100_000), min_size=1, max_size=6), st.booleans())
def test_large_blocks_in_place_match_receive_data(sizes_of: list[int], sizes: list[int], other: bool) -> None:
    """Blocks small and large (past the size after which reads between blocks are small), with other
    messages between them or not, read in any cut: the same messages as receive_data gives."""
    wire = SETUP
    offset = 0
    for i, size in enumerate(sizes_of):
        events = sp.event_messages([bytes([i % 256]) * size, b"e" * (i + 1)])
        wire += sp.encode_block(CID, offset, events)
        if other:
            wire += sp.encode(sp.KeepAlive(b"k")) + sp.encode(sp.GetSegmentInfo("x"))
        offset += len(events)
    assert received_in_place(wire, sizes, allocate=dirty) == received(sp.Role.SERVER, wire, sizes[0])


@given(st.binary(max_size=400), st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=4))
def test_arbitrary_bytes_in_place(data: bytes, sizes: list[int]) -> None:
    for allocate in (bytearray, dirty):
        try:
            received_in_place(SETUP + sp.encode(sp.BeginAppendBlock(CID, 0, 200)) + data, sizes, SMALL, allocate)
        except RemoteProtocolError:
            pass
