"""Sans-IO logjam: meta frame, compression methods, stream and topic rules, replies, gap counting."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.errors import LimitExceeded, RemoteProtocolError
from logport.protocols import logjam as lj

# --- meta frame ---

META_CASES = [
    # (frame, expected Meta or error reason)
    (bytes.fromhex("cabd0101000000000000019aa97af97b0000000000000001"), lj.Meta(1, 0, 0x19AA97AF97B, 1)),
    (bytes.fromhex("bdca0001000000000000019aa97af97b0000000000000002"), lj.Meta(0, 0, 0x19AA97AF97B, 2)),
    (bytes.fromhex("cabd000100000007000001a2014e92380000000000000008"), lj.Meta(0, 7, 0x1A2014E9238, 8)),
    (struct.pack("!HBBIQQ", 0xCABD, 3, 1, 0xFFFFFFFF, 2**64 - 1, 2**64 - 1), lj.Meta(3, 0xFFFFFFFF, 2**64 - 1, 2**64 - 1)),
    (bytes(10), "meta"),  # the vector's broken 10-byte meta
    (bytes(25), "meta"),
    (b"", "meta"),
    (struct.pack("!HBBIQQ", 0xCABE, 0, 1, 0, 0, 0), "meta"),  # wrong tag
    (struct.pack("!HBBIQQ", 0xCABD, 4, 1, 0, 0, 0), "compression"),  # unknown method
    (struct.pack("!HBBIQQ", 0xCABD, 0, 2, 0, 0, 0), "meta"),  # unknown version
]


@pytest.mark.parametrize("frame, expected", META_CASES)
def test_decode_meta(frame: bytes, expected: lj.Meta | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(lj.InvalidMessage) as e:
            lj.decode_meta(frame)
        assert e.value.reason == expected
    else:
        assert lj.decode_meta(frame) == expected


def test_meta_pack_always_writes_the_network_order_tag() -> None:
    swapped = bytes.fromhex("bdca0001000000000000019aa97af97b0000000000000002")
    assert lj.decode_meta(swapped).pack() == bytes.fromhex("cabd0001000000000000019aa97af97b0000000000000002")


# --- compression ---

JSON = b'{"action": "Users#show", "code": 200, "lines": "' + b"abc" * 300 + b'"}'

COMPRESSED = [
    (lj.NO_COMPRESSION, JSON),
    (lj.ZLIB, zlib.compress(JSON)),
    (lj.ZLIB, gzip.compress(JSON)),  # what the Ruby agent sends
    (lj.SNAPPY, bytes(cramjam.snappy.compress_raw(JSON))),
    (lj.LZ4, struct.pack("!I", len(JSON)) + bytes(cramjam.lz4.compress_block(JSON, store_size=False))),
]


@pytest.mark.parametrize("method, body", COMPRESSED)
def test_decompress_each_method(method: int, body: bytes) -> None:
    assert lj.decompress(body, method, 1 << 20) == JSON


@pytest.mark.parametrize("method", [lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4])
def test_compress_round_trip(method: int) -> None:
    assert lj.decompress(lj.compress(JSON, method), method, len(JSON)) == JSON


def test_lz4_size_prefix_is_big_endian() -> None:
    body = lj.compress(JSON, lj.LZ4)
    assert struct.unpack("!I", body[:4])[0] == len(JSON)


@pytest.mark.parametrize("method, body", COMPRESSED)
def test_decompressed_size_cap(method: int, body: bytes) -> None:
    with pytest.raises(LimitExceeded) as e:
        lj.decompress(body, method, len(JSON) - 1)
    assert e.value.limit_name == "max_decompressed_size"
    assert e.value.limit == len(JSON) - 1


def test_zlib_bomb_is_stopped_at_the_cap() -> None:
    bomb = zlib.compress(bytes(50 * 1024 * 1024))
    with pytest.raises(LimitExceeded):
        lj.decompress(bomb, lj.ZLIB, 1 << 20)


def test_lz4_declared_size_over_the_cap_is_refused_before_decompressing() -> None:
    body = struct.pack("!I", 1 << 31) + b"\x00" * 10
    with pytest.raises(LimitExceeded) as e:
        lj.decompress(body, lj.LZ4, 1 << 20)
    assert e.value.value == 1 << 31


BROKEN = [
    (lj.ZLIB, b"not zlib at all"),
    (lj.ZLIB, zlib.compress(JSON)[:-5]),  # truncated
    (lj.SNAPPY, b"\xff\xff\xff\xff\x0fgarbage"),
    (lj.LZ4, b"\x00\x00"),  # no size prefix
    (lj.LZ4, struct.pack("!I", 100) + b"\xff\xff\xff"),
    (lj.LZ4, struct.pack("!I", len(JSON) + 5) + bytes(cramjam.lz4.compress_block(JSON, store_size=False))),
]


@pytest.mark.parametrize("method, body", BROKEN)
def test_broken_bodies(method: int, body: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        lj.decompress(body, method, 1 << 20)


@given(st.binary(max_size=512), st.integers(min_value=0, max_value=5))
def test_decompress_arbitrary_bytes(body: bytes, method: int) -> None:
    try:
        out = lj.decompress(body, method, 4096)
    except RemoteProtocolError:
        return
    assert len(out) <= 4096


@given(st.binary(min_size=20, max_size=30))
def test_decode_meta_arbitrary_bytes(frame: bytes) -> None:
    try:
        meta = lj.decode_meta(frame)
    except lj.InvalidMessage:
        return
    assert len(frame) == lj.META_SIZE and meta.compression <= lj.LZ4


# --- stream and topic names ---

APP_ENVS = [
    (b"myapp-production", True),
    (b"my_app-pre_production", True),
    (b"my-app-production", True),  # the application may contain "-"
    (b"a-b", True),
    (b"myapp", False),
    (b"myapp-", False),
    (b"-production", False),
    (b"myapp-prod1", False),
    (b"1app-production", False),
    (b"myapp-prod-", False),
    (b"my app-production", False),
    (b"myapp-production\n", False),
    (b"", False),
]


@pytest.mark.parametrize("app_env, ok", APP_ENVS)
def test_app_env_rule(app_env: bytes, ok: bool) -> None:
    assert lj.valid_app_env(app_env) is ok


TOPICS = [
    (b"logs", True),
    (b"logs.myapp.production", True),
    (b"logs.my-app.pre_prod", True),
    (b"javascript", True),
    (b"javascript.errors", True),
    (b"events.deploy", True),
    (b"frontend.page", True),
    (b"frontend.ajax", True),
    (b"mobile", True),
    (b"frontend", False),
    (b"frontend.other", False),
    (b"mobile.x", False),
    (b"logs.", False),
    (b"logs.1a", False),
    (b"logs..a", False),
    (b"logsx", False),
    (b"other.topic", False),
    (b"", False),
]


@pytest.mark.parametrize("topic, ok", TOPICS)
def test_topic_rule(topic: bytes, ok: bool) -> None:
    assert lj.valid_topic(topic) is ok


@pytest.mark.parametrize("tag, topic", [
    ("app.web", b"logs.app.web"), ("app.web1", b"logs.app.web_"), ("9.x", b"logs.t_.x"), ("", b"logs"),
])
def test_topic_for_tag_is_always_valid(tag: str, topic: bytes) -> None:
    assert lj.topic_for_tag(tag) == topic
    assert lj.valid_topic(topic)


@given(st.text(max_size=40))
def test_topic_for_any_tag_is_valid(tag: str) -> None:
    assert lj.valid_topic(lj.topic_for_tag(tag))


# --- message classification ---

M = lj.Meta(0, 0, 1, 1).pack()
A, T, B = b"myapp-production", b"logs.myapp", b"{}"

ROUTER_CASES = [
    ([A, T, B, M], lj.DataMessage(A, T, B, lj.Meta(0, 0, 1, 1), False)),
    ([b"", A, T, B, M], lj.DataMessage(A, T, B, lj.Meta(0, 0, 1, 1), True)),
    ([A, T, B], lj.DataMessage(A, T, B, None, False)),
    ([b"", lj.PING, A, B, M], lj.PingRequest(A, True)),
    ([lj.PING, A, B, M], lj.PingRequest(A, False)),
    ([b"", A, T, B], "frames"),  # a sync message needs its meta frame
    ([b"", lj.PING, A, B], "frames"),
    ([b"", lj.PING, A, B, bytes(10)], "meta"),
    ([A, T], "frames"),
    ([A, T, B, M, M], "frames"),
    ([], "frames"),
    ([b""], "frames"),
    ([b"bad", T, B, M], "app_env"),
    ([A, b"bad", B, M], "topic"),
    ([b"", A, T, B, bytes(10)], "meta"),
]


@pytest.mark.parametrize("frames, expected", ROUTER_CASES)
def test_read_router_message(frames: list[bytes], expected: object) -> None:
    if isinstance(expected, str):
        with pytest.raises(lj.InvalidMessage) as e:
            lj.read_router_message(frames)
        assert e.value.reason == expected
    else:
        assert lj.read_router_message(frames) == expected


def test_pull_accepts_three_or_four_frames() -> None:
    assert lj.read_pull_message([A, T, B]).meta is None  # type: ignore[union-attr]
    assert lj.read_pull_message([A, T, B, M]).meta == lj.Meta(0, 0, 1, 1)  # type: ignore[union-attr]
    with pytest.raises(lj.InvalidMessage):
        lj.read_pull_message([b"", A, T, B, M])  # no empty frame on PULL


def test_read_sub_message() -> None:
    hb = lj.heartbeat_frames(b"tcp://vm:9606", lj.Meta(0, 7, 5, 9))
    assert lj.read_sub_message(hb) == lj.Heartbeat(b"tcp://vm:9606", lj.Meta(0, 7, 5, 9))
    assert lj.read_sub_message([A, T, B, M]) == lj.DataMessage(A, T, B, lj.Meta(0, 0, 1, 1))
    with pytest.raises(lj.InvalidMessage):
        lj.read_sub_message([A, T, B])


@given(st.lists(st.binary(max_size=40), max_size=7))
def test_read_router_message_arbitrary_frames(frames: list[bytes]) -> None:
    try:
        lj.read_router_message(frames)
    except lj.InvalidMessage:
        pass


def test_replies_as_logjam_device_sends_them() -> None:
    assert lj.router_reply(A, lj.ACCEPTED) == [A, b"202 Accepted"]
    assert lj.router_reply(A, lj.BAD_REQUEST) == [A, b"400 Bad Request"]
    assert lj.router_reply(lj.PING, lj.OK, b"vm") == [b"ping", b"200 OK", b"vm"]


# --- sequences ---


def test_sequencer_starts_at_one_and_wraps() -> None:
    s = lj.Sequencer()
    assert [s.next(), s.next()] == [1, 2]
    s.last = 2**64 - 2
    assert [s.next(), s.next()] == [2**64 - 1, 1]


GAP_CASES = [
    # (device, sequences seen, lost, restarts)
    (7, [5, 6, 7], 0, 0),  # first message is the baseline, whatever its number
    (7, [1, 2, 5, 6, 10], 5, 0),
    (0, [1, 5, 100], 0, 0),  # device 0 is never counted
    (7, [100, 101, 1, 2, 4], 1, 1),  # restart: new baseline
    (7, [2**64 - 2, 2**64 - 1, 1, 2], 0, 1),  # wrap
    (7, [10, 10], 0, 1),  # a repeated number is a restart, not a negative gap
]


@pytest.mark.parametrize("device, sequences, lost, restarts", GAP_CASES)
def test_gap_counter(device: int, sequences: list[int], lost: int, restarts: int) -> None:
    g = lj.GapCounter()
    for s in sequences:
        g.observe(device, s)
    assert g.total_lost == lost
    assert g.restarts.get(device, 0) == restarts


def test_gap_counter_keeps_devices_apart() -> None:
    g = lj.GapCounter()
    for device, seq in [(1, 1), (2, 50), (1, 3), (2, 51), (2, 60)]:
        g.observe(device, seq)
    assert g.lost == {1: 1, 2: 8}


# --- event time ---


@pytest.mark.parametrize("record, created_ms, expected", [
    ({"started_at": "2026-11-22T03:00:00+00:00"}, 0, (1795316400, 0)),
    ({"started_at": "2026-11-22T04:00:00.250+01:00"}, 0, (1795316400, 250_000_000)),
    ({"started_at": "nonsense", "started_ms": 1795316400123}, 0, (1795316400, 123_000_000)),
    ({}, 1795316400999, (1795316400, 999_000_000)),
    ({"started_ms": True}, 5000, (5, 0)),
])
def test_event_time_of(record: dict[str, object], created_ms: int, expected: tuple[int, int]) -> None:
    assert lj.event_time_of(record, created_ms) == expected


@given(st.lists(st.binary(max_size=40), min_size=4, max_size=4))
def test_read_sub_message_arbitrary_frames(frames: list[bytes]) -> None:
    try:
        lj.read_sub_message(frames)
    except lj.InvalidMessage:
        pass


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=3))
def test_message_decoder_arbitrary_bodies(body: bytes, method: int) -> None:
    from logport.config import LogjamConfig
    from logport.servers.logjam_ingest import MessageDecoder

    decoder = MessageDecoder(LogjamConfig(max_decompressed_size=2048))
    message = lj.DataMessage(b"myapp-production", b"logs", body, lj.Meta(method, 0, 1, 1))
    try:
        accepted = decoder.accept(message, "peer", "router")
    except RemoteProtocolError:
        return
    assert accepted.json and len(accepted.json) <= 2048
