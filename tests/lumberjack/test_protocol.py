"""Sans-IO lumberjack: bytes in, events out (tables), bytes out, and arbitrary bytes never misbehave."""

from __future__ import annotations

import json
import struct
import zlib

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.errors import LimitExceeded, LocalProtocolError, RemoteProtocolError
from logport.protocols import lumberjack
from logport.protocols._receivebuffer import NEED_DATA
from logport.protocols.lumberjack import (
    Ack,
    Compressed,
    Connection,
    DataFrames,
    Limits,
    Role,
    TLSOnPlaintextPort,
    WindowSize,
    compressed_frame,
    encode_data_v1,
    encode_json,
    encode_window,
    format_timestamp,
    inflate_frames,
    json_fields,
    parse_timestamp,
)
from tests.conftest import VECTORS

V1, V2 = 0x31, 0x32


def events_of(data: bytes, role: Role = Role.SERVER, limits: Limits | None = None, chunk: int = 0) -> list:
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    out: list = []
    decode_into(out, Connection(role, limits, peer="10.0.0.1:4000"), pieces)
    return out


def decode_into(out: list, conn: Connection, pieces: list[bytes]) -> None:
    """Feed `pieces` one receive_data each, appending the events to `out` (a deferred C frame's where it came)."""
    for piece in pieces:
        conn.receive_data(piece)
        while (received := conn.next_event()) is not NEED_DATA:
            for event in conn.inflate(received) if isinstance(received, Compressed) else [received]:
                if out and isinstance(event, DataFrames) and isinstance(out[-1], DataFrames) \
                        and out[-1].version == event.version:
                    # how frames are grouped depends on how the bytes arrived; compare the frames
                    out[-1] = DataFrames(event.version, out[-1].frames + event.frames)
                else:
                    out.append(event)


def Data(version: int, seq: int, fields: dict) -> DataFrames:  # noqa: N802 - reads like an event in tables
    return DataFrames(version, [(seq, fields)])


def frames(version: int, *pairs: tuple[int, dict]) -> DataFrames:
    return DataFrames(version, list(pairs))


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


J1 = encode_json(1, b'{"a":1}')
D1 = b"1D" + u32(7) + u32(2) + u32(1) + b"k" + u32(1) + b"v" + u32(4) + b"host" + u32(2) + b"h1"
BIG_J = encode_json(1, b'{"m":"' + b"x" * 980 + b'"}')  # 998 bytes: inside the error table's max_payload_size
D_DUPLICATE_KEYS = b"1D" + u32(8) + u32(3) + (u32(1) + b"k" + u32(1) + b"a") * 2 + u32(1) + b"k" + u32(1) + b"b"

DECODE_TABLE = [
    ("window v2", b"2W" + u32(5), [WindowSize(V2, 5)]),
    ("window v1", b"1W" + u32(0), [WindowSize(V1, 0)]),
    ("json", J1, [Data(V2, 1, {"a": 1})]),
    ("v1 data", D1, [Data(V1, 7, {"k": "v", "host": "h1"})]),
    ("v1 data, no pairs", b"1D" + u32(3) + u32(0), [Data(V1, 3, {})]),
    ("v1 data, duplicate keys", D_DUPLICATE_KEYS + D1, [frames(V1, (8, {"k": "b"}), (7, {"k": "v", "host": "h1"}))]),
    ("v1 data, compressed then not", compressed_frame(V1, D1) + D1,
     [frames(V1, (7, {"k": "v", "host": "h1"}), (7, {"k": "v", "host": "h1"}))]),
    ("compressed", compressed_frame(V2, [J1, encode_json(2, b"{}")]), [frames(V2, (1, {"a": 1}), (2, {}))]),
    ("v1 then v2", D1 + J1, [Data(V1, 7, {"k": "v", "host": "h1"}), Data(V2, 1, {"a": 1})]),
    ("window splits runs", J1 + encode_window(V2, 1) + J1, [Data(V2, 1, {"a": 1}), WindowSize(V2, 1), Data(V2, 1, {"a": 1})]),
    ("compressed level 0", compressed_frame(V2, J1, 0), [Data(V2, 1, {"a": 1})]),
    ("nested compressed", compressed_frame(V2, compressed_frame(V2, J1)), [Data(V2, 1, {"a": 1})]),
    ("window inside compressed", compressed_frame(V2, encode_window(V2, 1) + J1), [WindowSize(V2, 1), Data(V2, 1, {"a": 1})]),
    ("empty compressed", compressed_frame(V2, b""), []),
    ("utf-8 json", encode_json(9, '{"m":"€"}'.encode()), [Data(V2, 9, {"m": "€"})]),
    ("incomplete", b"2J" + u32(1) + u32(10) + b"{}", []),
]


@pytest.mark.parametrize("data,expected", [(d, e) for _, d, e in DECODE_TABLE], ids=[n for n, _, _ in DECODE_TABLE])
@pytest.mark.parametrize("chunk", [0, 1, 3], ids=["whole", "bytewise", "by3"])
def test_decode_table(data: bytes, expected: list, chunk: int) -> None:
    assert events_of(data, chunk=chunk) == expected


@pytest.mark.parametrize("chunk", [0, 1, 3], ids=["whole", "bytewise", "by3"])
def test_data_frames_size_is_their_bytes_as_received_after_inflating(chunk: int) -> None:
    """What a window holds, counted per run: the same however the bytes arrive (D frames in pieces included)."""
    stream = J1 + compressed_frame(V2, [BIG_J, compressed_frame(V2, J1)]) + D1 + encode_window(V1, 1) + D1 + BIG_J
    conn, sizes = Connection(Role.SERVER), []
    for piece in [stream[i : i + chunk] for i in range(0, len(stream), chunk)] if chunk else [stream]:
        conn.receive_data(piece)
        while (event := conn.next_event()) is not NEED_DATA:
            if isinstance(event, DataFrames):
                sizes.append(event.size)
    assert sum(sizes) == 2 * len(J1) + 2 * len(BIG_J) + 2 * len(D1)


ERROR_TABLE = [
    ("tls first byte", bytes.fromhex("160301"), TLSOnPlaintextPort, "TLS handshake"),
    ("bad version", b"3W" + u32(1), RemoteProtocolError, "version byte 0x33"),
    ("bad type", b"2Z" + u32(1), RemoteProtocolError, "frame type 0x5a"),
    ("ack from writer", b"2A" + u32(1), RemoteProtocolError, "only the server acknowledges"),
    ("huge json", b"2J" + u32(1) + u32(2000), LimitExceeded, "J frame of 2000 bytes from 10.0.0.1:4000 exceeds max_payload_size 1000"),
    ("huge compressed", b"2C" + u32(1001), LimitExceeded, "C frame of 1001 bytes"),
    ("huge pair count", b"1D" + u32(1) + u32(1000), LimitExceeded, "D frame of 8000 bytes"),
    ("huge key", b"1D" + u32(1) + u32(1) + u32(5000), LimitExceeded, "D frame of 5014 bytes"),
    ("huge value", b"1D" + u32(1) + u32(1) + u32(1) + b"k" + u32(5000), LimitExceeded, "D frame of 5019 bytes"),
    ("big window", b"2W" + u32(11), LimitExceeded, "window of 11 events from 10.0.0.1:4000 exceeds max_window_size 10"),
    ("bomb", b"2C" + u32(len(zlib.compress(b"\0" * 100_000))) + zlib.compress(b"\0" * 100_000), LimitExceeded,
     "decompressed C frame of 4097 bytes from 10.0.0.1:4000 exceeds max_decompressed_size 4096"),
    ("nested bomb", compressed_frame(V2, compressed_frame(V2, b"2J" + b"\0" * 5000, 9)), LimitExceeded,
     "max_decompressed_size 4096"),
    # the limit covers a top-level C frame with everything nested in it, not each C frame on its own
    ("nested C frames side by side", compressed_frame(V2, compressed_frame(V2, BIG_J * 3) * 3), LimitExceeded,
     "decompressed C frame (with its nested C frames) of 4097 bytes from 10.0.0.1:4000 exceeds max_decompressed_size 4096"),
    ("nested C frames 2 deep", compressed_frame(V2, compressed_frame(V2, compressed_frame(V2, BIG_J * 3) * 2)),
     LimitExceeded, "of 4097 bytes from 10.0.0.1:4000 exceeds max_decompressed_size 4096"),
    ("frames then a nested C frame", compressed_frame(V2, BIG_J * 3 + compressed_frame(V2, BIG_J * 2)), LimitExceeded,
     "of 4097 bytes from 10.0.0.1:4000 exceeds max_decompressed_size 4096"),
    ("truncated zlib", b"2C" + u32(10) + zlib.compress(J1 * 20)[:10], RemoteProtocolError, "truncated C frame"),
    ("truncated inner", compressed_frame(V2, J1[:-2]), RemoteProtocolError, "truncated frame inside a C frame"),
    ("garbage after zlib", b"2C" + u32(len(zlib.compress(J1)) + 3) + zlib.compress(J1) + b"xyz", RemoteProtocolError, "after its zlib stream"),
    ("not zlib", b"2C" + u32(4) + b"abcd", RemoteProtocolError, "not valid zlib"),
    ("bad json", encode_json(1, b"{"), RemoteProtocolError, "not valid JSON"),
    ("json string", encode_json(1, b'"x"'), RemoteProtocolError, "JSON str, not an object"),
    ("too deep", compressed_frame(V2, compressed_frame(V2, compressed_frame(V2, compressed_frame(V2, compressed_frame(V2, J1))))),
     RemoteProtocolError, "nested more than 4 deep"),
]


@pytest.mark.parametrize("data,error,message", [(d, e, m) for _, d, e, m in ERROR_TABLE], ids=[n for n, *_ in ERROR_TABLE])
def test_error_table(data: bytes, error: type[Exception], message: str) -> None:
    limits = Limits(max_payload_size=1000, max_decompressed_size=4096, max_window_size=10)
    with pytest.raises(error) as info:
        events_of(data, limits=limits)
    assert message in str(info.value)
    assert info.value.peer == "10.0.0.1:4000"  # type: ignore[attr-defined]


def test_nested_c_frames_share_their_top_level_frames_budget() -> None:
    """Everything under one top-level C frame counts against max_decompressed_size together: exactly the limit
    decodes, one byte less is refused naming the total, and the next top-level C frame gets a fresh budget."""
    inner_a, inner_c = BIG_J * 2, BIG_J
    c_a, c_c = compressed_frame(V2, inner_a), compressed_frame(V2, inner_c)
    c_b = compressed_frame(V2, c_c)
    outer = BIG_J + c_a + c_b
    total = len(outer) + len(inner_a) + len(c_c) + len(inner_c)
    top = compressed_frame(V2, outer)
    events = events_of(top * 2, limits=Limits(max_decompressed_size=total))
    assert [seq for event in events for seq in event.seqs] == [1] * 8
    with pytest.raises(LimitExceeded) as info:
        events_of(top, limits=Limits(max_decompressed_size=total - 1))
    assert (info.value.limit_name, info.value.limit, info.value.value) == ("max_decompressed_size", total - 1, total)


@pytest.mark.parametrize("payload", [b"[" * 100_000, b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
                         ids=["brackets", "object"])
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
def test_json_nested_past_orjsons_limit_is_a_protocol_error(payload: bytes, compressed: bool) -> None:
    frame = encode_json(1, payload)
    with pytest.raises(RemoteProtocolError, match="J frame seq 1 is not valid JSON: depth limit exceeded"):
        events_of(compressed_frame(V2, frame) if compressed else frame)


def test_events_before_an_error_come_out_first_and_the_error_sticks() -> None:
    conn = Connection(Role.SERVER)
    conn.receive_data(J1 + b"2Z")
    assert conn.next_event() == Data(V2, 1, {"a": 1})
    for _ in range(2):
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
    conn.receive_data(J1)  # ignored once broken
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_a_data_frame_arriving_in_small_reads_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read resumes the incomplete D frame where the last one stopped: O(pairs + reads), not O(pairs * reads)."""
    fields = {f"key{i:05d}": f"value {i}" for i in range(20_000)}
    frame = encode_data_v1(7, fields)
    pieces = [frame[i : i + 7] for i in range(0, len(frame), 7)]
    read_pair = lumberjack._read_pair
    calls = 0

    def counting_read_pair(*args: object) -> object:
        nonlocal calls
        calls += 1
        assert calls <= len(fields) + len(pieces), "the D frame was parsed again from its start"
        return read_pair(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(lumberjack, "_read_pair", counting_read_pair)
    out: list = []
    decode_into(out, Connection(Role.SERVER), pieces)
    assert out == [Data(V1, 7, fields)]


def test_tls_byte_only_matters_first() -> None:
    conn = Connection(Role.SERVER)
    conn.receive_data(b"2W" + u32(1))
    assert conn.next_event() == WindowSize(V2, 1)
    conn.receive_data(b"\x16\x03")
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert not isinstance(info.value, TLSOnPlaintextPort)


def test_go_lumber_vector_decodes_to_its_recorded_inner_frames() -> None:
    vector = json.loads((VECTORS / "go-lumber-client-v2-window.json").read_text())
    stream = bytes.fromhex(vector["conversation"][0]["hex"])
    events = events_of(stream)
    inner = bytes.fromhex(vector["decompressed_inner_frames_hex"])
    assert events[0] == WindowSize(V2, 3)
    assert events[1:] == events_of(inner)
    assert events[1].seqs == [1, 2, 3]
    # the client side reads the recorded replies: a keep-alive, then the ack
    replies = b"".join(bytes.fromhex(c["hex"]) for c in vector["conversation"] if c["dir"] == "server->client")
    assert events_of(replies, Role.CLIENT) == [Ack(V2, 0), Ack(V2, 3)]


SEND_TABLE = [
    (Role.SERVER, Ack(V2, 3), b"2A" + u32(3)),
    (Role.SERVER, Ack(V1, 0), b"1A" + u32(0)),
    (Role.CLIENT, WindowSize(V2, 2048), b"2W" + u32(2048)),
    (Role.CLIENT, Data(V2, 1, {"a": 1}), J1),
    (Role.CLIENT, Data(V1, 7, {"k": "v", "host": "h1"}), D1),
    (Role.CLIENT, frames(V2, (1, {"a": 1}), (2, {})), J1 + encode_json(2, b"{}")),
]


@pytest.mark.parametrize("role,event,expected", SEND_TABLE)
def test_send_table(role: Role, event: object, expected: bytes) -> None:
    assert Connection(role).send(event) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("role,event", [
    (Role.CLIENT, Ack(V2, 1)),
    (Role.SERVER, WindowSize(V2, 1)),
    (Role.SERVER, Data(V2, 1, {})),
    (Role.SERVER, Ack(0x33, 1)),
    (Role.SERVER, Ack(V2, 1 << 32)),
    (Role.CLIENT, frames(0x33, (1, {}))),
])
def test_send_refuses(role: Role, event: object) -> None:
    with pytest.raises(LocalProtocolError):
        Connection(role).send(event)  # type: ignore[arg-type]


def test_client_refuses_anything_but_acks() -> None:
    with pytest.raises(RemoteProtocolError, match="only 'A'"):
        events_of(b"2W" + u32(1), Role.CLIENT)


def test_v1_values_that_are_not_strings_are_sent_as_json() -> None:
    frame = encode_data_v1(1, {"n": 5, "s": "x", "d": {"a": [1]}})
    assert events_of(frame) == [Data(V1, 1, {"n": "5", "s": "x", "d": '{"a":[1]}'})]


TIMESTAMPS = [
    ("2026-11-22T03:25:39.028135265Z", (1795317939, 28135265)),
    ("2026-11-22T03:25:39Z", (1795317939, 0)),
    ("2026-11-22T03:25:39.5Z", (1795317939, 500000000)),
    ("2026-11-22T03:25:39.1234567891234Z", (1795317939, 123456789)),
    ("2026-11-22T04:25:39.000000001+01:00", (1795317939, 1)),
    ("2026-11-22T02:25:39-01:00", (1795317939, 0)),
    ("2026-11-22 03:25:39.028Z", (1795317939, 28000000)),
    ("2026-11-22T03:25:39", None),
    ("2026-13-22T03:25:39Z", None),
    ("yesterday", None),
    ("2026-11-22T03:25:39.Z", None),
    (1795317939, None),
    (None, None),
]


@pytest.mark.parametrize("value,expected", TIMESTAMPS)
def test_parse_timestamp(value: object, expected: tuple[int, int] | None) -> None:
    assert parse_timestamp(value) == expected


@given(st.integers(0, 2**32 - 1), st.integers(0, 999_999_999))
def test_timestamp_round_trip(seconds: int, nanos: int) -> None:
    assert parse_timestamp(format_timestamp(seconds, nanos)) == (seconds, nanos)


@given(st.text(alphabet="0123456789+-_ .Z\u0661\u00b2", max_size=12))
def test_timestamp_fast_path_agrees_with_the_full_parse(fraction: str) -> None:
    value = f"2026-11-22T03:25:39.{fraction}Z"
    lumberjack._second_cache.clear()
    slow = parse_timestamp(value)  # nothing cached: the regular expression decides
    assert parse_timestamp(value) == slow  # cached: the fast path, where it applies, says the same
    assert parse_timestamp("2026-11-22T03:25:39.028Z") == (1795317939, 28_000_000)  # libbeat's milliseconds


# --- property tests ---

SMALL = Limits(max_payload_size=4096, max_decompressed_size=16384, max_window_size=1000)


def _consume(role: Role, data: bytes, splits: list[int], decode_json: bool = True) -> None:
    conn = Connection(role, SMALL, decode_json=decode_json)
    pos = 0
    try:
        for n in [*splits, len(data)]:
            conn.receive_data(data[pos : pos + n])
            pos += n
            steps = 0
            while (event := conn.next_event()) is not NEED_DATA:
                steps += 1
                assert steps < 100_000
                if isinstance(event, DataFrames):
                    for seq, fields in event.frames:
                        if not decode_json and isinstance(fields, bytes):
                            assert isinstance(json_fields(seq, fields), dict)
                        else:
                            assert isinstance(fields, dict)
    except RemoteProtocolError:
        pass


@given(st.binary(max_size=2048), st.lists(st.integers(1, 64), max_size=8), st.booleans())
def test_arbitrary_bytes_raise_only_protocol_errors_server(data: bytes, splits: list[int], decode: bool) -> None:
    _consume(Role.SERVER, data, splits, decode)


@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_protocol_errors_client(data: bytes) -> None:
    _consume(Role.CLIENT, data, [])


frame_strategy = st.one_of(
    st.builds(lambda n: encode_window(V2, n), st.integers(0, 5000)),
    st.builds(lambda s, d: encode_json(s, orjson.dumps(d)), st.integers(0, 2**32 - 1),
              st.dictionaries(st.text(max_size=5), st.one_of(st.integers(-10, 10), st.text(max_size=8)), max_size=4)),
    st.builds(lambda s, d: encode_data_v1(s, d), st.integers(0, 2**32 - 1),
              st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=4)),
)


@given(st.lists(frame_strategy, max_size=8), st.data())
def test_valid_streams_with_mutations_never_misbehave(frames: list[bytes], data: st.DataObject) -> None:
    stream = bytearray(b"".join(frames))
    if data.draw(st.booleans()):
        stream = bytearray(compressed_frame(V2, bytes(stream)))
    for _ in range(data.draw(st.integers(0, 3))):
        if stream:
            i = data.draw(st.integers(0, len(stream) - 1))
            stream[i] = data.draw(st.integers(0, 255))
    _consume(Role.SERVER, bytes(stream), data.draw(st.lists(st.integers(1, 32), max_size=5)), data.draw(st.booleans()))


@given(st.lists(frame_strategy, min_size=1, max_size=8))
def test_valid_streams_decode_the_same_compressed_or_not(frames: list[bytes]) -> None:
    plain = b"".join(frames)
    limits = Limits(max_window_size=10_000)
    assert events_of(plain, limits=limits) == events_of(compressed_frame(V2, plain), limits=limits)


@pytest.mark.parametrize("chunk", [0, 1])
def test_raw_json_mode_hands_out_the_json_bytes(chunk: int) -> None:
    stream = J1 + compressed_frame(V2, [encode_json(2, b'{"b":2}'), encode_json(3, b"[1]")])
    conn = Connection(Role.SERVER, decode_json=False)
    got: list = []
    for piece in ([stream[i : i + 1] for i in range(len(stream))] if chunk else [stream]):
        conn.receive_data(piece)
        while (event := conn.next_event()) is not NEED_DATA:
            got.extend(event.frames)
    assert got == [(1, b'{"a":1}'), (2, b'{"b":2}'), (3, b"[1]")]
    assert json_fields(2, got[1][1]) == {"b": 2}
    with pytest.raises(RemoteProtocolError, match="J frame seq 3 holds JSON list"):
        json_fields(3, got[2][1])


def outcome(data: bytes, sizes: list[int], defer_compressed: bool = False) -> list:
    """The events, then the error if any, of `data` fed in pieces of `sizes` (then the rest)."""
    pieces, pos = [], 0
    for n in [*sizes, len(data)]:
        pieces.append(data[pos : pos + n])
        pos += n
    out: list = []
    try:
        decode_into(out, Connection(Role.SERVER, SMALL, peer="10.0.0.1:4000", defer_compressed=defer_compressed),
                    pieces)
    except RemoteProtocolError as e:
        out.append(f"{type(e).__name__}: {e}")
    return out


@given(st.lists(frame_strategy, max_size=8), st.data())
def test_how_the_bytes_are_split_never_changes_what_they_decode_to(frames: list[bytes], data: st.DataObject) -> None:
    stream = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(0, 2))):
        if stream:
            stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    stream += data.draw(st.binary(max_size=16))
    sizes = data.draw(st.lists(st.integers(1, 24), max_size=64))
    assert outcome(bytes(stream), sizes) == outcome(bytes(stream), [])


# --- deferred C frames (what the server hands to its decode workers) ---


@given(st.lists(frame_strategy, max_size=8), st.data())
def test_deferred_c_frames_decode_as_if_parsed_where_they_came(frames: list[bytes], data: st.DataObject) -> None:
    parts = [compressed_frame(V2, f) if data.draw(st.booleans()) else f for f in frames]
    if parts and data.draw(st.booleans()):
        parts = [compressed_frame(V2, b"".join(parts))]
    stream = bytearray(b"".join(parts))
    for _ in range(data.draw(st.integers(0, 2))):
        if stream:
            stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    sizes = data.draw(st.lists(st.integers(1, 64), max_size=4))
    plain, deferred = outcome(bytes(stream), sizes), outcome(bytes(stream), sizes, defer_compressed=True)
    if plain and isinstance(plain[-1], str):
        # the same error; a C frame that fails hands out none of its events (inline: those before the error)
        assert deferred[-1] == plain[-1]
        assert len(deferred) <= len(plain)
    else:
        assert deferred == plain


@given(st.binary(max_size=2048), st.integers(0, 10))
def test_inflate_frames_of_arbitrary_bytes_raises_only_protocol_errors(payload: bytes, expected: int) -> None:
    try:
        inflate_frames(Compressed(V2, payload), SMALL, expected)
    except RemoteProtocolError:
        pass
    try:
        inflate_frames(Compressed(V2, zlib.compress(payload)), SMALL, expected)
    except RemoteProtocolError:
        pass


def test_inflate_frames_takes_exactly_the_window_and_nothing_else() -> None:
    j = [encode_json(s, orjson.dumps({"m": s})) for s in (1, 2, 3)]
    three = Compressed(V2, zlib.compress(b"".join(j)))
    frames, size = inflate_frames(three, SMALL, 3)  # type: ignore[misc]
    assert frames == [(1, b'{"m":1}'), (2, b'{"m":2}'), (3, b'{"m":3}')]
    assert size == sum(map(len, j))
    assert inflate_frames(three, SMALL, 2) is None  # more than the window: the event loop splits it
    assert inflate_frames(three, SMALL, 4) is None  # less: the window goes on after it
    assert inflate_frames(Compressed(V2, zlib.compress(encode_window(V2, 1) + j[0])), SMALL, 1) is None
    v1 = Compressed(V1, zlib.compress(encode_data_v1(7, {"line": "x"})))
    assert inflate_frames(v1, SMALL, 1) == ([(7, {"line": "x"})], len(encode_data_v1(7, {"line": "x"})))
    with pytest.raises(LimitExceeded, match="decompressed C frame of"):
        inflate_frames(Compressed(V2, zlib.compress(b"2J" + b"\0" * 2_000_000)), SMALL, 1)
