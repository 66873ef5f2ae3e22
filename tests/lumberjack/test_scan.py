"""The C pass over a window (`_lumberjack_scan`) against the Python reference, byte for byte and error for error.

`decode_window` runs the C pass and falls back to `decode_window_in_python` (the reference) whenever the C
pass declines; these tests hold the two equal on arbitrary JSON text and bytes, and check that the C pass
itself takes every window it should (so the equality is not only the fallback's).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.errors import LogportError
from logport.protocols.lumberjack import Compressed, Limits, encode_data_v1, encode_json
from logport.servers import lumberjack as server

pytestmark = pytest.mark.skipif(server._scan_window is None, reason="built without the C extensions")

RECEIVED_NS = 1_764_000_000_123_456_789
PEER = "10.0.0.1:5044"


def outcome(fn: Any, inner: bytes, expected: int, *, part: int = 0, parts: int = 1, tag_from_beat: bool = True,
            max_body: int = 1 << 20, limits: Limits | None = None) -> Any:
    """What a decode gives: its result, or its error's type and text."""
    try:
        return fn(Compressed(0x32, zlib.compress(inner, 1)), limits or Limits(), expected, part, parts, "beats",
                  tag_from_beat, PEER, max_body, RECEIVED_NS)
    except LogportError as e:
        return type(e), str(e)


def assert_same(inner: bytes, expected: int, **kwargs: Any) -> Any:
    c = outcome(server.decode_window, inner, expected, **kwargs)
    python = outcome(server.decode_window_in_python, inner, expected, **kwargs)
    assert c == python
    return c


def is_error(result: Any) -> bool:
    return isinstance(result, tuple) and isinstance(result[0], type)


def scanned(inner: bytes, expected: int, *, max_body: int = 1 << 20) -> Any:
    """The C pass alone (None: it declined)."""
    default_s, default_ns = divmod(RECEIVED_NS, 1_000_000_000)
    return server._scan_window(inner, expected, 0, expected, b"beats", True, PEER.encode(), max_body, default_s,
                               default_ns, Limits().max_payload_size)


def dumps(value: Any) -> bytes:
    """JSON text of a value, integers past 64 bits included (orjson refuses to write those)."""
    return json.dumps(value, ensure_ascii=False).encode()


def j_frames(payloads: list[bytes]) -> bytes:
    return b"".join(encode_json(seq, p) for seq, p in enumerate(payloads, 1))


# --- JSON values and JSON text ---

KEYS = st.sampled_from(["a", "b", "message", "@timestamp", "@metadata", "beat", "é", "\u2028", "\U0001f600", ""])
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=5),
                      max_leaves=30)
OBJECTS = st.dictionaries(st.text(max_size=12) | KEYS, VALUES, max_size=8)

WS = st.sampled_from(["", " ", "\n", "\t", "\r", "  \n", "\x0b", "\xa0", "\x0c"])
NUMBER_TEXT = st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
BAD_NUMBERS = st.sampled_from(["NaN", "Infinity", "-Infinity", "01", "1.", ".5", "-", "+1", "1e", "1e400", "-1e400",
                               "0x10", "1_000", "--1", "1.5e+", "nan", "inf", "True", "None", "nul", "tru"])
ESCAPES = st.sampled_from(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0000", "\\u001f", "\\u00e9",
                           "\\uD83D\\uDE00", "\\ud83d\\ude00", "\\uD800", "\\uDC00", "\\uD800\\u0041", "\\uDBFF\\uDFFF",
                           "\\x41", "\\'", "\\u12", "\\uZZZZ", "\\U0001F600", "\\"])
HEX_ESCAPE = st.integers(0, 0xFFFF).map(lambda cp: f"\\u{cp:04x}")
RAW_BYTES = st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80",
                             b"\xef\xbb\xbf", b"\x00", b"\x1f", b"\x7f", b"\xf0\x9f\x98\x80", b"\xc3\xa9"])


@st.composite
def string_text(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.text(max_size=8).map(lambda s: orjson.dumps(s)[1:-1]) | ESCAPES.map(str.encode)
                          | HEX_ESCAPE.map(str.encode) | RAW_BYTES, max_size=6))
    return b'"' + b"".join(parts) + b'"'


def json_text(max_leaves: int = 20) -> st.SearchStrategy[bytes]:
    """JSON text, mostly valid, with every escape, number form, whitespace and some invalid pieces."""
    scalar = (NUMBER_TEXT.map(str.encode) | BAD_NUMBERS.map(str.encode) | string_text()
              | st.sampled_from([b"true", b"false", b"null"]) | VALUES.map(dumps))

    def containers(inner: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
        ws = WS.map(str.encode)
        member = st.tuples(ws, KEYS.map(orjson.dumps) | string_text(), ws, inner, ws).map(
            lambda t: t[0] + t[1] + t[2] + b":" + t[3] + t[4])
        obj = st.tuples(st.lists(member, max_size=5), st.booleans()).map(
            lambda t: b"{" + b",".join(t[0]) + (b"," if t[1] and not t[0] else b"") + b"}")
        arr = st.lists(st.tuples(ws, inner, ws).map(b"".join), max_size=5).map(lambda xs: b"[" + b",".join(xs) + b"]")
        return obj | arr

    return st.recursive(scalar, containers, max_leaves=max_leaves)


@st.composite
def event_text(draw: st.DrawFn) -> bytes:
    """A J frame's payload: usually an object (as Beats send), sometimes anything."""
    ws = WS.map(str.encode)
    members = draw(st.lists(st.tuples(KEYS.map(orjson.dumps) | string_text(), json_text(10)), max_size=6))
    body = b"{" + b",".join(k + draw(ws) + b":" + draw(ws) + v for k, v in members) + b"}"
    return draw(st.sampled_from([b"", b" ", b"\n"])) + body + draw(st.sampled_from([b"", b" ", b"x", b"\n"])) \
        if draw(st.integers(0, 9)) else draw(json_text(10))


@given(st.lists(OBJECTS, min_size=1, max_size=6), st.booleans())
def test_json_objects_pack_as_the_python_path_packs_them(events: list[dict[str, Any]], tag_from_beat: bool) -> None:
    inner = j_frames([dumps(e) for e in events])
    result = assert_same(inner, len(events), tag_from_beat=tag_from_beat)
    assert isinstance(result, tuple) and isinstance(result[0], list)


@given(st.lists(event_text(), min_size=1, max_size=4), st.integers(1, 400))
def test_json_text_gives_the_python_paths_batches_or_its_error(payloads: list[bytes], max_body: int) -> None:
    assert_same(j_frames(payloads), len(payloads), max_body=max_body)


@given(st.binary(max_size=200), st.integers(1, 4))
def test_arbitrary_bytes_give_the_python_paths_answer(inner: bytes, expected: int) -> None:
    assert_same(inner, expected)


@given(st.lists(st.binary(max_size=60), min_size=1, max_size=4))
def test_arbitrary_bytes_as_j_frames(payloads: list[bytes]) -> None:
    assert_same(j_frames(payloads), len(payloads))


@given(st.lists(st.dictionaries(st.text(max_size=6) | KEYS, st.text(max_size=10), max_size=5), min_size=1,
                max_size=4), st.binary(max_size=8))
def test_v1_data_frames(events: list[dict[str, str]], junk: bytes) -> None:
    inner = b"".join(encode_data_v1(seq, e) for seq, e in enumerate(events, 1))
    assert_same(inner, len(events))
    assert_same(inner + junk, len(events))


@given(st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6)), max_size=4))
def test_v1_data_frames_with_any_bytes_and_duplicate_keys(pairs: list[tuple[bytes, bytes]]) -> None:
    frame = struct.pack(">BBII", 0x31, 0x44, 7, len(pairs)) + b"".join(
        struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v for k, v in pairs)
    assert_same(frame, 1)
    assert_same(frame + encode_json(8, b'{"a":1}'), 2)


# --- @timestamp and @metadata ---

TIMESTAMPS = st.from_regex(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,12})?([Zz]|[+-][0-9]{2}:[0-9]{2})",
    fullmatch=True) | st.from_regex(
    r"(19[0-9]{2}|20[0-9]{2}|2[1-9][0-9]{2}|9999|0000|0001)-(0[0-9]|1[0-3])-(0[0-9]|[12][0-9]|3[0-2])T"
    r"(0[0-9]|1[0-9]|2[0-4]):[0-6][0-9]:[0-6][0-9](\.[0-9]{1,10})?(Z|[+-][0-9]{2}:[0-9]{2})", fullmatch=True) \
    | st.text(max_size=32)


@given(st.lists(TIMESTAMPS | st.integers() | st.none() | st.sampled_from([[], {}, [1], {"a": "b"}, 1.5, True]),
                min_size=1, max_size=8))
def test_timestamps_as_the_python_path_reads_them(stamps: list[Any]) -> None:
    inner = j_frames([dumps({"@timestamp": t, "n": i}) for i, t in enumerate(stamps)])
    assert_same(inner, len(stamps))
    v1 = b"".join(encode_data_v1(i, {"@timestamp": t if isinstance(t, str) else "x"}) for i, t in enumerate(stamps))
    assert_same(v1, len(stamps))


METAS = st.none() | st.sampled_from([{"beat": "filebeat", "type": "_doc"}, {"type": "_doc", "beat": "filebeat"},
                                     {"beat": ""}, {"beat": 7}, {"beat": "metricbeat"}, {"a": 1}, {"a": 1.0},
                                     {"a": True}, "filebeat", [1], 0, False, {"beat": "x", "beat2": "y"}])


@given(st.lists(st.tuples(METAS, st.booleans()), min_size=1, max_size=10), st.integers(30, 300))
def test_metadata_runs_and_tags(metas: list[tuple[Any, bool]], max_body: int) -> None:
    docs = []
    for i, (meta, present) in enumerate(metas):
        doc: dict[str, Any] = {"n": i, "message": "x" * (i * 7 % 50)}
        if present:
            doc["@metadata"] = meta
        docs.append(orjson.dumps(doc))
    assert_same(j_frames(docs), len(docs), max_body=max_body)
    assert_same(j_frames(docs), len(docs), max_body=max_body, tag_from_beat=False)


@given(st.integers(1, 5), st.integers(1, 12))
def test_parts_of_a_window(parts: int, size: int) -> None:
    inner = j_frames([orjson.dumps({"n": i, "@metadata": {"beat": "fb"}}) for i in range(size)])
    for part in range(parts):
        if size * part // parts < size * (part + 1) // parts:
            assert_same(inner, size, part=part, parts=parts)


# --- the C pass takes what it should (the equality above is not only the fallback's) ---


def test_the_c_pass_takes_a_filebeat_window() -> None:
    events = [{"@timestamp": f"2026-11-22T04:00:{i % 60:02d}.{i:03d}Z", "@metadata": {"beat": "filebeat"},
               "message": f"line {i}", "n": i, "f": i / 3, "big": 2**64 - 1 - i, "neg": -(2**63) + i,
               "s": "é\u2028\U0001f600\\\"\n", "nested": {"a": [1, {"b": None}], "t": True}} for i in range(300)]
    inner = j_frames([dumps(e) for e in events])
    result = scanned(inner, len(events))
    assert result is not None
    batches, last_seq, size = result
    assert (last_seq, size) == (300, len(inner))
    assert [(t, b, n) for t, b, n in batches] == [
        ("filebeat", b, n) for _, b, n in server.decode_window_in_python(
            Compressed(0x32, zlib.compress(inner)), Limits(), 300, 0, 1, "beats", True, PEER, 1 << 20,
            RECEIVED_NS)[0]]


@given(st.lists(OBJECTS, min_size=1, max_size=4))
def test_the_c_pass_takes_every_json_object_without_duplicate_keys(events: list[dict[str, Any]]) -> None:
    # the same @metadata for all (unequal metas in bytes that may be equal as values are the Python path's)
    for e in events:
        e["@metadata"] = {"beat": "x"}
        if isinstance(e.get("@timestamp"), str):
            e["@timestamp"] = "2026-01-01T00:00:00Z"
    inner = j_frames([dumps(e) for e in events])
    assert scanned(inner, len(events)) is not None
    escaped = j_frames([json.dumps(e).encode() for e in events])  # every non-ASCII character as \u, pairs too
    assert scanned(escaped, len(events)) is not None
    assert_same(escaped, len(events))


@pytest.mark.parametrize("text", [b"-0", b"-0.0", b"0.0", b"1E2", b"1e-400", b"18446744073709551615",
                                  b"18446744073709551616", b"-9223372036854775808", b"-9223372036854775809",
                                  b"123456789012345678901234567890e-10", b"2.2250738585072011e-308",
                                  b"4.9406564584124654e-324", b"1.7976931348623157e308", b"0.1", b"1e22", b"1e23",
                                  b"9007199254740993", b"-1.5E+3", b"3.141592653589793238462643383279"])
def test_numbers_the_c_pass_packs_as_orjson_and_ormsgpack(text: bytes) -> None:
    inner = j_frames([b'{"v":' + text + b"}"])
    assert scanned(inner, 1) is not None
    assert_same(inner, 1)


@pytest.mark.parametrize("text", [b'{"a":1,"a":2}', b'{"@metadata":1,"@metadata":2}', b'{"a":{"k":1,"k":2}}',
                                  b"[]", b'"s"', b"1e400",
                                  b'{"a":"\\ud800"}', b'{"a":"\xff"}', b"{} x", b"\xef\xbb\xbf{}"])
def test_what_the_c_pass_leaves_to_python(text: bytes) -> None:
    inner = j_frames([text])
    assert scanned(inner, 1) is None
    assert_same(inner, 1)


def test_a_timestamp_before_1970_is_never_an_event_time() -> None:
    """parse_timestamp once cached the seconds of a pre-1970 head, and its fast path then answered them (wrapped
    to 32 bits in the entry) for the next such timestamp: the answer depended on what came before."""
    from logport.protocols.lumberjack import parse_timestamp

    for _ in range(2):
        assert parse_timestamp("1969-12-31T23:59:59.5Z") is None
        assert parse_timestamp("1969-12-31T23:59:59Z") is None
    assert parse_timestamp("1969-12-31T23:59:59.5-00:01") == (59, 500_000_000)
    inner = j_frames([b'{"@timestamp":"1969-12-31T23:59:59.5Z"}'] * 2)
    assert scanned(inner, 2) is not None
    assert_same(inner, 2)
    assert_same(inner, 2)


def test_many_keys_with_one_duplicate_far_apart() -> None:
    doc = b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(5000)) + b',"k17":0}'
    assert scanned(j_frames([doc]), 1) is None
    assert_same(j_frames([doc]), 1)
    unique = b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(5000)) + b"}"
    assert scanned(j_frames([unique]), 1) is not None
    assert_same(j_frames([unique]), 1)


# --- limits ---


def nested(depth: int, inner: bytes = b"1") -> bytes:
    """An object `depth` containers deep (the object is the first)."""
    return b'{"a":' + b"[" * (depth - 1) + inner + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize("depth", [1, 2, 255, 256, 300, 511, 512, 513, 1024, 1025, 2000])
def test_record_nesting_to_the_limit(depth: int) -> None:
    inner = j_frames([nested(depth)])
    result = assert_same(inner, 1)
    assert (scanned(inner, 1) is not None) == (depth <= server.MAX_EVENT_DEPTH)
    if depth > server.MAX_EVENT_DEPTH:
        assert is_error(result) and ("nested" in result[1] or "depth" in result[1])


@pytest.mark.parametrize("depth", [1, 510, 511, 512, 1023])
def test_metadata_nesting_to_the_limit(depth: int) -> None:
    meta = b"[" * depth + b"]" * depth
    inner = j_frames([b'{"@metadata":' + meta + b',"a":1}'])
    assert_same(inner, 1)
    assert (scanned(inner, 1) is not None) == (depth <= server.MAX_EVENT_DEPTH - 1)


def test_payload_limits_hold_in_the_c_pass() -> None:
    limits = Limits(max_payload_size=100)
    small, big = b'{"a":"' + b"x" * 80 + b'"}', b'{"a":"' + b"x" * 100 + b'"}'
    assert not is_error(assert_same(j_frames([small]), 1, limits=limits))
    assert is_error(assert_same(j_frames([big]), 1, limits=limits))
    assert is_error(assert_same(encode_data_v1(1, {"k": "v" * 200}), 1, limits=limits))
    assert is_error(assert_same(struct.pack(">BBII", 0x31, 0x44, 1, 20), 1, limits=limits))
    assert assert_same(j_frames([small]), 2) is None  # not the window's count: the event loop parses it


def test_max_body_splits_runs_as_the_python_path() -> None:
    docs = [orjson.dumps({"n": i, "m": "y" * i, "@metadata": {"beat": "fb"}}) for i in range(50)]
    for max_body in (1, 20, 100, 1000):
        result = assert_same(j_frames(docs), 50, max_body=max_body)
        assert sum(n for _, _, n in result[0]) == 50


# --- windows of J frames parsed one by one (no C frame right after its W): build_batches ---


def batches_outcome(fn: Any, events: list[tuple[int, Any]], max_body: int, tag_from_beat: bool) -> Any:
    try:
        return fn(events, tag="beats", tag_from_beat=tag_from_beat, peer=PEER, max_body=max_body,
                  received_ns=RECEIVED_NS)
    except LogportError as e:
        return type(e), str(e)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), event_text() | OBJECTS.map(dumps)), min_size=1, max_size=5),
       st.integers(1, 400), st.booleans())
def test_build_batches_of_j_frames_as_the_python_path(events: list[tuple[int, bytes]], max_body: int,
                                                      tag_from_beat: bool) -> None:
    assert batches_outcome(server.build_batches, events, max_body, tag_from_beat) == \
        batches_outcome(server.build_batches_in_python, events, max_body, tag_from_beat)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), OBJECTS.map(dumps) | st.dictionaries(KEYS, st.text(max_size=5))),
                min_size=1, max_size=5))
def test_build_batches_with_d_frame_fields_among_them(events: list[tuple[int, Any]]) -> None:
    copy = [(s, dict(f) if isinstance(f, dict) else f) for s, f in events]  # build_batches pops @metadata
    assert batches_outcome(server.build_batches, events, 1 << 20, True) == \
        batches_outcome(server.build_batches_in_python, copy, 1 << 20, True)


def test_the_c_pass_takes_a_window_of_j_frames() -> None:
    assert server._scan_events is not None
    events = [(i, dumps({"@timestamp": "2026-11-22T04:00:00.5Z", "@metadata": {"beat": "fb"}, "n": i}))
              for i in range(1, 100)]
    scanned_batches = server._scan_events(events, b"beats", True, PEER.encode(), 1 << 20, 1, 2)
    assert scanned_batches is not None
    assert [(t, b, n) for t, b, n in scanned_batches] == server.build_batches_in_python(
        events, tag="beats", tag_from_beat=True, peer=PEER, max_body=1 << 20, received_ns=1_000_000_002)
    assert server._scan_events([(1, {"a": "b"})], b"beats", True, PEER.encode(), 1 << 20, 1, 2) is None
