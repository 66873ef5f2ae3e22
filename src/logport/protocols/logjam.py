"""Logjam over ZeroMQ, sans-IO: meta frame, body codecs, message rules, replies, gap counting.

ZeroMQ already delimits messages into frames, so this module works on lists of
frames: `read_router_message` / `read_pull_message` / `read_sub_message` turn
frames into events, `data_frames` / `router_reply` / `heartbeat_frames` build
frames, `GapCounter` follows the sequence numbers of each device. `Connection`
is one socket's side of it, as the other protocols' cores are (multipart
messages in, events out; replies in, frames out). No sockets.
"""

from __future__ import annotations

import enum
import re
import struct
import zlib
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import cramjam

from logport.errors import (
    InvalidMessage,
    LimitExceeded,
    LocalProtocolError,
    ProtocolError,
)
from logport.names import LOGJAM_APP_ENV, LOGJAM_TOPIC
from logport.protocols._receivebuffer import NEED_DATA

META: Final = struct.Struct("!HBBIQQ")  # tag, compression, version, device, created_ms, sequence
META_SIZE: Final = META.size  # 24
TAG: Final = 0xCABD
TAG_SWAPPED: Final = 0xBDCA  # producers that pack the tag in host order on little-endian machines
VERSION: Final = 1

NO_COMPRESSION: Final = 0
ZLIB: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
COMPRESSION_NAMES: Final = {"none": NO_COMPRESSION, "zlib": ZLIB, "snappy": SNAPPY, "lz4": LZ4}

SEQUENCE_WRAP: Final = 1 << 64
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

_LZ4_SIZE = struct.Struct("!I")

ACCEPTED: Final = b"202 Accepted"
BAD_REQUEST: Final = b"400 Bad Request"
OK: Final = b"200 OK"
PING: Final = b"ping"
HEARTBEAT: Final = b"heartbeat"

# app-env = application "-" environment; application = ALPHA *(ALPHA / "_" / "-");
# environment = ALPHA *(ALPHA / "_"). The environment is what follows the last "-".
_APP_ENV = LOGJAM_APP_ENV  # written once, in names.py; the config checks the republisher's names with them too
_TOPIC = LOGJAM_TOPIC


# --- events ---


@dataclass(frozen=True, slots=True)
class Meta:
    compression: int
    device: int
    created_ms: int
    sequence: int
    version: int = VERSION

    def pack(self) -> bytes:
        return META.pack(TAG, self.compression, self.version, self.device, self.created_ms, self.sequence)


@dataclass(frozen=True, slots=True)
class DataMessage:
    """app-env, topic, the body as sent (possibly compressed) and the meta (None if 3 frames)."""

    app_env: bytes
    topic: bytes
    body: bytes
    meta: Meta | None
    sync: bool = False  # a ROUTER message with the empty frame: the sender waits for a reply

    @property
    def compression(self) -> int:
        return self.meta.compression if self.meta is not None else NO_COMPRESSION


@dataclass(frozen=True, slots=True)
class PingRequest:
    """`ping`: answered `200 OK` + host name (sync) and never forwarded."""

    app_env: bytes
    sync: bool


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A device's heartbeat as a subscriber sees it."""

    endpoint: bytes
    meta: Meta


# --- meta frame ---


def decode_meta(frame: bytes) -> Meta:
    if len(frame) != META_SIZE:
        raise InvalidMessage("meta", f"meta frame of {len(frame)} bytes (a meta frame has {META_SIZE})")
    tag, compression, version, device, created_ms, sequence = META.unpack(frame)
    if tag not in (TAG, TAG_SWAPPED):
        raise InvalidMessage("meta", f"meta frame tag 0x{tag:04X} is neither 0xCABD nor 0xBDCA")
    if compression > LZ4:
        raise InvalidMessage("compression", f"unknown compression method {compression}")
    if version != VERSION:
        raise InvalidMessage("meta", f"meta frame version {version} (only {VERSION} is known)")
    return Meta(compression, device, created_ms, sequence, version)


# --- bodies ---


def decompress(body: bytes, method: int, limit: int) -> bytes:
    """The JSON bytes of a body; raises LimitExceeded past `limit` bytes (max_decompressed_size)."""
    if method == NO_COMPRESSION:
        if len(body) > limit:
            raise LimitExceeded("body", len(body), "max_decompressed_size", limit)
        return body
    if method == ZLIB:
        return _inflate(body, limit)
    if method == SNAPPY:
        try:
            size = int(cramjam.snappy.decompress_raw_len(body))
        except Exception as e:
            raise InvalidMessage("compression", f"snappy body is not a raw snappy block: {e}") from None
        if size > limit:
            raise LimitExceeded("decompressed body", size, "max_decompressed_size", limit)
        try:
            return bytes(cramjam.snappy.decompress_raw(body))
        except Exception as e:
            raise InvalidMessage("compression", f"snappy body is not a raw snappy block: {e}") from None
    if method == LZ4:
        if len(body) < _LZ4_SIZE.size:
            raise InvalidMessage("compression", f"lz4 body of {len(body)} bytes has no size prefix")
        (size,) = _LZ4_SIZE.unpack_from(body, 0)
        if size > limit:
            raise LimitExceeded("decompressed body", size, "max_decompressed_size", limit)
        if size == 0:
            return b""
        out = bytearray(size)
        try:
            n = int(cramjam.lz4.decompress_block_into(bytes(memoryview(body)[4:]), out))
        except Exception as e:
            raise InvalidMessage("compression", f"lz4 body is not a raw lz4 block of {size} bytes: {e}") from None
        if n != size:
            raise InvalidMessage("compression", f"lz4 body declares {size} bytes but holds {n}")
        return bytes(out)
    raise InvalidMessage("compression", f"unknown compression method {method}")


def _inflate(body: bytes, limit: int) -> bytes:
    # wbits 47 = 32 + 15: zlib (RFC 1950) or gzip (the Ruby agent), detected from the header
    inflater = zlib.decompressobj(47)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as e:
        raise InvalidMessage("compression", f"zlib body does not inflate: {e}") from None
    if len(out) > limit:
        raise LimitExceeded("decompressed body", len(out), "max_decompressed_size", limit)
    if not inflater.eof:
        raise InvalidMessage("compression", "zlib body is truncated")
    return out


def compress(data: bytes, method: int) -> bytes:
    if method == NO_COMPRESSION:
        return data
    if method == ZLIB:
        return zlib.compress(data)
    if method == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if method == LZ4:
        return _LZ4_SIZE.pack(len(data)) + bytes(cramjam.lz4.compress_block(data, store_size=False))
    raise LocalProtocolError(f"unknown compression method {method}")


# --- stream and topic names ---


def valid_app_env(app_env: bytes) -> bool:
    return _APP_ENV.match(app_env) is not None


def valid_topic(topic: bytes) -> bool:
    return _TOPIC.match(topic) is not None


_valid_names: set[tuple[bytes, bytes]] = set()  # pairs already checked: a stream repeats its names


def check_names(app_env: bytes, topic: bytes) -> None:
    if (app_env, topic) in _valid_names:
        return
    if not valid_app_env(app_env):
        raise InvalidMessage("app_env", f"app-env {app_env[:80]!r} is not application-environment")
    if not valid_topic(topic):
        raise InvalidMessage("topic", f"topic {topic[:80]!r} is not a logjam topic")
    if len(_valid_names) < 10_000:
        _valid_names.add((app_env, topic))


def topic_for_tag(tag: str) -> bytes:
    """A valid `logs.*` topic from an event tag: each part made of letters, `_` and `-`."""
    parts = [b"logs"]
    for part in tag.split("."):
        cleaned = re.sub(r"[^A-Za-z_-]", "_", part)
        if cleaned:
            parts.append(cleaned.encode() if cleaned[0].isalpha() else b"t" + cleaned.encode())
    return b".".join(parts)


# --- the record's time ---


def event_time_of(record: dict[str, Any], created_ms: int) -> tuple[int, int]:
    """(seconds, nanos) of a JSON body: `started_at` (ISO 8601), else `started_ms`, else created_ms."""
    started_at = record.get("started_at")
    if isinstance(started_at, str):
        try:
            moment = datetime.fromisoformat(started_at)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:  # the agent writes local time with an offset; bare means UTC
                moment = moment.replace(tzinfo=UTC)
            delta = moment - _EPOCH
            micros = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
            if micros >= 0:
                return micros // 1_000_000, (micros % 1_000_000) * 1000
    started_ms = record.get("started_ms")
    if isinstance(started_ms, int | float) and not isinstance(started_ms, bool) and 0 <= started_ms < 1 << 52:
        ms = int(started_ms)
        return ms // 1000, (ms % 1000) * 1_000_000
    return created_ms // 1000, (created_ms % 1000) * 1_000_000


# --- reading messages ---


def read_router_message(frames: list[bytes]) -> DataMessage | PingRequest:
    """Frames after the routing id. An empty first frame asks for a reply."""
    sync = bool(frames) and len(frames[0]) == 0
    return _read(frames[1:] if sync else frames, sync)


def read_pull_message(frames: list[bytes]) -> DataMessage | PingRequest:
    return _read(frames, False)


def _read(frames: list[bytes], sync: bool) -> DataMessage | PingRequest:
    n = len(frames)
    if n and frames[0] == PING:
        if n != 4:
            raise InvalidMessage("frames", f"ping of {n} frames (a ping has 4)")
        decode_meta(frames[3])
        return PingRequest(frames[1], sync)
    if n == 4:
        meta: Meta | None = decode_meta(frames[3])
    elif n == 3 and not sync:
        meta = None  # PULL and async ROUTER may omit the meta frame
    else:
        raise InvalidMessage("frames", f"message of {n} frames (a data message has {'4' if sync else '3 or 4'})")
    check_names(frames[0], frames[1])
    return DataMessage(frames[0], frames[1], frames[2], meta, sync)


def read_sub_message(frames: list[bytes]) -> DataMessage | Heartbeat:
    """A message a SUB socket received from a device: always 4 frames."""
    if len(frames) != 4:
        raise InvalidMessage("frames", f"published message of {len(frames)} frames (it has 4)")
    meta = decode_meta(frames[3])
    if frames[0] == HEARTBEAT:
        return Heartbeat(frames[1], meta)
    check_names(frames[0], frames[1])
    return DataMessage(frames[0], frames[1], frames[2], meta)


# --- writing messages ---


def router_reply(request_first_frame: bytes, status: bytes, hostname: bytes | None = None) -> list[bytes]:
    """A sync reply as logjam-device sends it (after the routing id): first request frame, status, [host]."""
    reply = [request_first_frame, status]
    if hostname is not None:
        reply.append(hostname)
    return reply


def data_frames(app_env: bytes, topic: bytes, body: bytes, meta: Meta) -> list[bytes]:
    return [app_env, topic, body, meta.pack()]


def heartbeat_frames(endpoint: bytes, meta: Meta) -> list[bytes]:
    return [HEARTBEAT, endpoint, b"{}", meta.pack()]


class Sequencer:
    """A publisher's sequence numbers: 1, 2, ... and 1 again after 2**64 - 1."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last = self.last + 1 if self.last < SEQUENCE_WRAP - 1 else 1
        return self.last


# --- consumer side: lost messages ---


@dataclass(frozen=True, slots=True)
class SequenceObservation:
    lost: int  # messages missing just before this one
    restarted: bool  # the sequence went back (device restart or wrap): a new baseline


class GapCounter:
    """Lost messages per device: the first message is a baseline, device 0 is not counted.

    A sequence at or below the last one means the device restarted (or wrapped
    around): it becomes the new baseline and nothing is counted as lost.
    """

    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self.lost: dict[int, int] = {}
        self.restarts: dict[int, int] = {}

    def observe(self, device: int, sequence: int) -> SequenceObservation:
        if device == 0:
            return SequenceObservation(0, False)
        last = self.last.get(device)
        self.last[device] = sequence
        if last is None:
            return SequenceObservation(0, False)
        if sequence <= last:
            self.restarts[device] = self.restarts.get(device, 0) + 1
            return SequenceObservation(0, True)
        lost = sequence - last - 1
        if lost:
            self.lost[device] = self.lost.get(device, 0) + lost
        return SequenceObservation(lost, False)

    @property
    def total_lost(self) -> int:
        return sum(self.lost.values())


# --- one socket's side: Connection ---


@dataclass(frozen=True, slots=True)
class Received:
    """A message a ROUTER, PULL or SUB socket took: the event, and for ROUTER the routing id to reply to."""

    event: DataMessage | PingRequest | Heartbeat
    route: bytes = b""


@dataclass(frozen=True, slots=True)
class Refused:
    """A message that breaks the protocol. ZeroMQ keeps no connection to close: the socket goes on, and a
    sync sender (ROUTER, `sync`) is owed a `BadRequest`."""

    error: ProtocolError
    first_frame: bytes  # the first frame after the routing id and the empty frame: what the reply echoes
    sync: bool
    route: bytes = b""


@dataclass(frozen=True, slots=True)
class Accept:
    """`202 Accepted` for a sync data message, sent once it is stored."""

    route: bytes
    app_env: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    """`200 OK` and our host name for a sync ping."""

    route: bytes
    hostname: bytes


@dataclass(frozen=True, slots=True)
class BadRequest:
    """`400 Bad Request` for a sync message that was refused."""

    route: bytes
    first_frame: bytes


Reply = Accept | Pong | BadRequest
SocketKind = Literal["router", "pull", "sub"]


class Owed(enum.Enum):
    """What a ROUTER peer is owed for each sync message: nothing until one arrives, then one reply."""

    NOTHING = "nothing"
    REPLY = "reply"


# (what a sync message was, the reply sent) -> whether that reply answers it; looked up in one place
REPLIES_FOR: Final[dict[tuple[type, type], bool]] = {
    (DataMessage, Accept): True,  # once stored; not stored, it gets none (`forgo_reply`): the sender resends
    (DataMessage, BadRequest): True,  # its body did not decode (decompression, JSON, a limit)
    (PingRequest, Pong): True,
    (Refused, BadRequest): True,
}

# which events each kind of socket may yield
EVENTS_OF: Final[dict[SocketKind, tuple[type, ...]]] = {
    "router": (DataMessage, PingRequest), "pull": (DataMessage, PingRequest), "sub": (DataMessage, Heartbeat),
}


class Connection:
    """One ROUTER, PULL or SUB socket's side of logjam: `receive_message(frames)` queues a multipart message,
    `next_event()` answers `Received`, `Refused` or NEED_DATA, `send(reply)` gives the frames of a reply
    (ROUTER only, and only one per sync message: a sender waits for exactly one)."""

    def __init__(self, socket: SocketKind) -> None:
        if socket not in EVENTS_OF:
            raise LocalProtocolError(f"no logjam socket kind {socket!r} (router, pull or sub)")
        self.socket = socket
        self._queue: deque[list[bytes]] = deque()
        # routing id -> what each unanswered sync message was; every one is answered or forgone, so this holds
        # only the sync messages on their way to the store
        self._owed: dict[bytes, deque[type]] = {}

    def receive_message(self, frames: list[bytes]) -> None:
        self._queue.append(frames)

    def next_event(self) -> Received | Refused | Any:
        if not self._queue:
            return NEED_DATA
        frames = self._queue.popleft()
        route = b""
        if self.socket == "router":
            if not frames:
                return Refused(InvalidMessage("frames", "message without a routing id"), b"", False)
            route, frames = frames[0], frames[1:]
        sync = self.socket == "router" and bool(frames) and not frames[0]
        try:
            event: DataMessage | PingRequest | Heartbeat
            if self.socket == "sub":
                event = read_sub_message(frames)
            elif self.socket == "router":
                event = read_router_message(frames)
            else:
                event = read_pull_message(frames)
        except ProtocolError as e:
            body = frames[1:] if sync else frames
            refused = Refused(e, body[0] if body else b"", sync, route)
            if sync:
                self._owe(route, Refused)
            return refused
        if sync:
            self._owe(route, type(event))
        return Received(event, route)

    def expect_reply(self, route: bytes, kind: type = DataMessage) -> None:
        """A sync message from `route` taken without next_event (the listener's batch C pass): owe its reply."""
        self._owe(route, kind)

    def _owe(self, route: bytes, kind: type) -> None:
        owed = self._owed.get(route)
        if owed is None:
            owed = self._owed[route] = deque()
        owed.append(kind)

    def forgo_reply(self, route: bytes) -> None:
        """The oldest sync message from `route` gets no reply (it was not stored: the sender's timeout resends)."""
        owed = self._owed.get(route)
        if not owed:
            raise LocalProtocolError(f"no reply owed to {route!r} to forgo")
        owed.popleft()
        if not owed:
            del self._owed[route]

    def owed(self, route: bytes) -> Owed:
        return Owed.REPLY if self._owed.get(route) else Owed.NOTHING

    def send(self, reply: Reply) -> list[bytes]:
        """The frames of a reply, routing id first; LocalProtocolError for a reply nobody is owed."""
        owed = self._owed.get(reply.route)
        if self.socket != "router" or not owed:
            raise LocalProtocolError(f"{type(reply).__name__} to {reply.route!r}, which is owed no reply on "
                                     f"this {self.socket} socket")
        if not REPLIES_FOR.get((owed[0], type(reply)), False):
            raise LocalProtocolError(f"{type(reply).__name__} does not answer a {owed[0].__name__}")
        owed.popleft()
        if not owed:
            del self._owed[reply.route]
        if isinstance(reply, Accept):
            return [reply.route, *router_reply(reply.app_env, ACCEPTED)]
        if isinstance(reply, Pong):
            return [reply.route, *router_reply(PING, OK, reply.hostname)]
        return [reply.route, *router_reply(reply.first_frame, BAD_REQUEST)]
