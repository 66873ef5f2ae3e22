"""Lumberjack v1 and v2 (the Beats protocol), sans-IO: frames in, events out, and back.

Frames are a version byte ('1' or '2'), a type byte and big-endian uint32s;
there is no frame length, so after any error the stream cannot resync and the
connection must close. Writer -> reader: `W` window size, `D` (v1 key/value
pairs), `J` (v2 JSON), `C` (zlib of whole frames, may nest). Reader -> writer:
`A` ack of the highest sequence.
"""

from __future__ import annotations

import calendar
import enum
import re
import struct
import time
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from logport.config import LumberjackConfig
from logport.errors import LimitExceeded, LocalProtocolError, RemoteProtocolError
from logport.protocols._receivebuffer import NEED_DATA, ReceiveBuffer, _NeedData

V1 = 0x31  # '1'
V2 = 0x32  # '2'
WINDOW = 0x57  # 'W'
ACK = 0x41  # 'A'
DATA = 0x44  # 'D' (v1)
JSON = 0x4A  # 'J' (v2)
COMPRESSED = 0x43  # 'C'
TLS_HANDSHAKE = 0x16  # first byte of a TLS ClientHello

MAX_NESTING = 4  # C frames inside C frames: go-lumber accepts them, nobody needs more

_U32 = struct.Struct(">I")
_FRAME_U32 = struct.Struct(">BBI")  # version, type, one uint32 (W, A, C length)
_JSON_HEAD = struct.Struct(">BBII")  # version, type, seq, payload length
_U32_PAIR = struct.Struct(">II")


# --- events ---


@dataclass(frozen=True, slots=True)
class WindowSize:
    """`W`: the writer will send up to `size` events before it waits for an ack."""

    version: int
    size: int


@dataclass(frozen=True, slots=True)
class DataFrames:
    """Consecutive data frames of one version, in stream order, as (seq, fields) pairs.

    `D` frames (v1) carry str -> str fields, `J` frames (v2) a JSON object. One
    event per run of frames (all of a C frame, say) keeps Python object churn
    off the per-event path.
    """

    version: int
    frames: list[tuple[int, Any]]  # fields: a dict, or a J frame's JSON bytes with decode_json=False
    # bytes of these frames as received (headers included, after inflating): what a window holds, counted
    # once per run rather than once per event; how bytes arrive splits runs differently, so it is not compared
    size: int = field(default=0, compare=False)

    @property
    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.frames]


@dataclass(frozen=True, slots=True)
class Ack:
    """`A`: every event up to and including `seq` is acknowledged (0: keep-alive)."""

    version: int
    seq: int


@dataclass(frozen=True, slots=True)
class Compressed:
    """A top-level `C` frame, not yet inflated (with defer_compressed=True): `Connection.inflate` turns it
    into the events it holds, or `inflate_frames` does in another process."""

    version: int
    payload: bytes


Event = WindowSize | DataFrames | Ack | Compressed


# --- errors ---


class TLSOnPlaintextPort(RemoteProtocolError):
    """The peer opened with a TLS handshake on a port that does not speak TLS."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection may send; the defaults are the [lumberjack] section's, written once in config.py."""

    max_payload_size: int = LumberjackConfig.max_payload_size  # one J/D/C frame's payload
    max_decompressed_size: int = LumberjackConfig.max_decompressed_size  # what one C frame (with its nested ones) inflates to
    max_window_size: int = LumberjackConfig.max_window_size  # events announced by one W frame


class Role(enum.Enum):
    SERVER = "server"  # the reader (Logstash's side): receives W/D/J/C, sends A
    CLIENT = "client"  # the writer (Beats' side): receives A, sends W/D/J/C


class Connection:
    """One lumberjack connection, either side. Raises only RemoteProtocolError / LocalProtocolError."""

    def __init__(self, role: Role, limits: Limits | None = None, *, peer: str | None = None,
                 decode_json: bool = True, defer_compressed: bool = False) -> None:
        self.role = role
        # False: J frames come out as their JSON bytes, for the caller to decode with `json_fields`
        # right before it is done with each event (short-lived dicts keep the cyclic GC idle)
        self.decode_json = decode_json
        # True: a top-level C frame comes out as a Compressed event, for the caller to inflate where it likes
        self.defer_compressed = defer_compressed
        self.limits = limits or Limits()
        self.peer = peer
        self.version: int | None = None  # the version of the last frame received
        self._buffer = ReceiveBuffer()
        self._events: deque[Event] = deque()
        self._run: list[tuple[int, Any]] = []  # data frames not yet handed out as DataFrames
        self._run_version = V2
        self._run_bytes = 0  # bytes of the frames in _run
        self._error: RemoteProtocolError | None = None
        self._fresh = True
        # the incomplete D frame at the buffer's front: (its bytes parsed, pairs parsed, fields so far)
        self._partial_data: tuple[int, int, dict[str, str]] | None = None
        # what the top-level C frame being parsed may still inflate to, shared by every C frame nested in it
        self._inflate_budget = 0

    # --- receiving ---

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is None:
            self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet parsed into events (part of a frame)."""
        return len(self._buffer)

    def next_event(self) -> Event | _NeedData:
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise self._error
        try:
            self._parse_buffer()
        except RemoteProtocolError as e:
            e.peer = self.peer
            self._error = e
            self._end_run()
            if self._events:  # hand out what came before the error first
                return self._events.popleft()
            raise
        self._end_run()
        if self._events:
            return self._events.popleft()
        return NEED_DATA

    def _parse_buffer(self) -> None:
        buf = self._buffer
        if not buf:
            return
        if self._fresh and buf.peek_byte() == TLS_HANDSHAKE:
            raise TLSOnPlaintextPort(
                "TLS handshake (first byte 0x16) on a plaintext lumberjack port: "
                "the client uses TLS but [lumberjack.tls] is not configured"
            )
        self._fresh = False
        data, start = buf.raw, buf.start
        end = len(data)
        pos = start
        # parse every whole frame in the buffer: one call per TCP read, not per frame
        while True:
            new_pos = self._parse_frame(data, pos, end, 0)
            if new_pos is None:
                break
            pos = new_pos
        buf.consumed(pos - start)

    def _parse_frame(self, data: bytes | bytearray, pos: int, end: int, depth: int) -> int | None:
        """Parse the frame at `pos`, queue its events, return where the next starts (None: incomplete)."""
        if end - pos < 2:
            return None
        version = data[pos]
        kind = data[pos + 1]
        if version != V1 and version != V2:
            raise RemoteProtocolError(
                f"invalid lumberjack version byte 0x{version:02x} (frame type byte 0x{kind:02x}); expected '1' or '2'"
            )
        self.version = version
        if self.role is Role.CLIENT:
            if kind != ACK:
                raise RemoteProtocolError(f"invalid frame type 0x{kind:02x} from a lumberjack server (only 'A')")
            if end - pos < 6:
                return None
            self._events.append(Ack(version, _U32.unpack_from(data, pos + 2)[0]))
            return pos + 6
        if kind == JSON:
            if end - pos < 10:
                return None
            _, _, seq, length = _JSON_HEAD.unpack_from(data, pos)
            if length > self.limits.max_payload_size:
                raise LimitExceeded("J frame", length, "max_payload_size", self.limits.max_payload_size)
            stop = pos + 10 + length
            if stop > end:
                return None
            payload = bytes(data[pos + 10 : stop])
            fields = json_fields(seq, payload) if self.decode_json else payload
            if version != self._run_version:
                self._end_run()
                self._run_version = version
            self._run.append((seq, fields))
            self._run_bytes += stop - pos
            return stop
        if kind == WINDOW:
            if end - pos < 6:
                return None
            size = _U32.unpack_from(data, pos + 2)[0]
            if size > self.limits.max_window_size:
                raise LimitExceeded("window", size, "max_window_size", self.limits.max_window_size, unit="events")
            self._end_run()
            self._events.append(WindowSize(version, size))
            return pos + 6
        if kind == COMPRESSED:
            if end - pos < 6:
                return None
            length = _U32.unpack_from(data, pos + 2)[0]
            if length > self.limits.max_payload_size:
                raise LimitExceeded("C frame", length, "max_payload_size", self.limits.max_payload_size)
            stop = pos + 6 + length
            if stop > end:
                return None
            if depth == 0 and self.defer_compressed:
                self._end_run()
                self._events.append(Compressed(version, bytes(data[pos + 6 : stop])))
            else:
                self._inflate(memoryview(data)[pos + 6 : stop], depth)
            return stop
        if kind == DATA:
            return self._parse_data_frame(data, pos, end, version, depth)
        if kind == ACK:
            raise RemoteProtocolError("'A' frame from a lumberjack client: only the server acknowledges")
        raise RemoteProtocolError(f"invalid lumberjack frame type 0x{kind:02x} (version '{chr(version)}')")

    def _parse_json_run(self, data: bytes, pos: int, end: int) -> int:
        """The hot path: consecutive whole `J` frames of the run's version (what Filebeat's C frames hold).

        Stops at anything else (returning its position) for `_parse_frame` to handle.
        """
        version = self._run_version
        limit = self.limits.max_payload_size
        unpack = _JSON_HEAD.unpack_from
        loads = orjson.loads
        view = memoryview(data)
        run = self._run
        decode = self.decode_json
        start = pos
        while end - pos >= 10 and data[pos + 1] == JSON and data[pos] == version:
            _, _, seq, length = unpack(data, pos)
            stop = pos + 10 + length
            if length > limit or stop > end:
                break  # _parse_frame reports it
            if decode:
                try:
                    fields = loads(view[pos + 10 : stop])
                except orjson.JSONDecodeError:
                    break
                if type(fields) is not dict:
                    break
                run.append((seq, fields))
            else:
                run.append((seq, data[pos + 10 : stop]))
            pos = stop
        if pos > start:
            self.version = version
            self._run_bytes += pos - start
        return pos

    def _end_run(self) -> None:
        if self._run:
            self._events.append(DataFrames(self._run_version, self._run, self._run_bytes))
            self._run = []
            self._run_bytes = 0

    def _parse_data_frame(self, data: bytes | bytearray, pos: int, end: int, version: int,
                          depth: int) -> int | None:
        """A `D` frame has no length to wait for: an incomplete one in the receive buffer (depth 0) keeps
        what it parsed and resumes there, so one arriving in many small reads is parsed once, not once per read.
        """
        limit = self.limits.max_payload_size
        if end - pos < 10:
            return None
        seq, pairs = _U32_PAIR.unpack_from(data, pos + 2)
        if pairs * 8 > limit:
            raise LimitExceeded("D frame", pairs * 8, "max_payload_size", limit)
        if depth == 0 and self._partial_data is not None:
            parsed, first, fields = self._partial_data
            p = pos + parsed
            self._partial_data = None
        else:
            p, first, fields = pos + 10, 0, {}
        for i in range(first, pairs):
            pair = _read_pair(data, p, end, pos, limit)
            if pair is None:
                if depth == 0:
                    self._partial_data = (p - pos, i, fields)
                return None
            key, value, p = pair
            fields[key] = value
        if version != self._run_version:
            self._end_run()
            self._run_version = version
        self._run.append((seq, fields))
        self._run_bytes += p - pos
        return p

    def inflate(self, compressed: Compressed) -> list[Event]:
        """The events a deferred C frame holds, as if it had been parsed where it came."""
        saved = self._events, self._run, self._run_bytes, self._run_version
        self._events, self._run, self._run_bytes = deque(), [], 0
        try:
            self._inflate(memoryview(compressed.payload), 0)
            self._end_run()
            return list(self._events)
        except RemoteProtocolError as e:
            e.peer = self.peer
            raise
        finally:
            self._events, self._run, self._run_bytes, self._run_version = saved

    def _inflate(self, compressed: memoryview, depth: int) -> None:
        """Decompress a C frame without ever holding more than the limit, then parse its frames.

        The limit covers a top-level C frame and everything nested in it together: a nested C frame gets
        only what is left of the budget, else each level of nesting multiplies what one frame inflates to.
        """
        if depth >= MAX_NESTING:
            raise RemoteProtocolError(f"C frames nested more than {MAX_NESTING} deep")
        limit = self.limits.max_decompressed_size
        budget = limit if depth == 0 else self._inflate_budget
        inner = _inflate_bytes(compressed, budget, limit, depth)
        self._inflate_budget = budget - len(inner)
        pos, end = 0, len(inner)
        while pos < end:
            pos = self._parse_json_run(inner, pos, end)
            if pos >= end:
                break
            new_pos = self._parse_frame(inner, pos, end, depth + 1)
            if new_pos is None:
                raise RemoteProtocolError(
                    f"truncated frame inside a C frame: {end - pos} bytes left at offset {pos} of {end}"
                )
            pos = new_pos

    # --- sending ---

    def send(self, event: Event) -> bytes:
        """The bytes of one frame (uncompressed); `compressed_frame` wraps frames in a C frame."""
        if isinstance(event, Ack):
            if self.role is not Role.SERVER:
                raise LocalProtocolError("only the server (reader) sends 'A' frames")
            return encode_ack(event.version, event.seq)
        if self.role is not Role.CLIENT:
            raise LocalProtocolError(f"a lumberjack server cannot send {type(event).__name__}")
        if isinstance(event, WindowSize):
            return encode_window(event.version, event.size)
        if isinstance(event, DataFrames):
            if event.version == V1:
                return b"".join(encode_data_v1(seq, fields) for seq, fields in event.frames)
            if event.version == V2:
                return b"".join(encode_json(seq, orjson.dumps(fields)) for seq, fields in event.frames)
            _check_version(event.version)
        raise LocalProtocolError(f"cannot send {event!r}")


def _inflate_bytes(compressed: memoryview, budget: int, limit: int, depth: int) -> bytes:
    """The zlib payload of a C frame, inflated to at most `budget` bytes (of `limit` for the top-level frame)."""
    inflater = zlib.decompressobj()
    try:
        inner = inflater.decompress(compressed, budget + 1)
    except zlib.error as e:
        raise RemoteProtocolError(f"C frame of {len(compressed)} bytes is not valid zlib: {e}") from None
    if len(inner) > budget:
        what = "decompressed C frame" if depth == 0 else "decompressed C frame (with its nested C frames)"
        raise LimitExceeded(what, limit - budget + len(inner), "max_decompressed_size", limit)
    if not inflater.eof:
        raise RemoteProtocolError(f"truncated C frame: its {len(compressed)} bytes of zlib end mid-stream")
    if inflater.unused_data:
        raise RemoteProtocolError(f"C frame has {len(inflater.unused_data)} bytes after its zlib stream")
    return inner


def inflate_payload(compressed: Compressed, limits: Limits) -> bytes:
    """The frames a top-level C frame holds, inflated (not parsed), or the error `Connection.inflate` raises
    for its zlib: what the C pass (`_lumberjack_scan`) reads."""
    limit = limits.max_decompressed_size
    return _inflate_bytes(memoryview(compressed.payload), limit, limit, 0)


def _read_pair(data: bytes | bytearray, p: int, end: int, frame_start: int,
               limit: int) -> tuple[str, str, int] | None:
    """A `D` frame's key and value (each uint32-length-prefixed) at `p`: (key, value, next position).

    None if the pair is incomplete, before decoding anything: a big pair arriving in many reads
    costs O(1) per read until it is all there.
    """
    if end - p < 4:
        return None
    key_stop = p + 4 + _U32.unpack_from(data, p)[0]
    if key_stop - frame_start > limit:
        raise LimitExceeded("D frame", key_stop - frame_start, "max_payload_size", limit)
    if end - key_stop < 4:
        return None
    stop = key_stop + 4 + _U32.unpack_from(data, key_stop)[0]
    if stop - frame_start > limit:
        raise LimitExceeded("D frame", stop - frame_start, "max_payload_size", limit)
    if stop > end:
        return None
    key = data[p + 4 : key_stop].decode("utf-8", "replace")
    return key, data[key_stop + 4 : stop].decode("utf-8", "replace"), stop


def inflate_frames(compressed: Compressed, limits: Limits, expected: int) -> tuple[list[tuple[int, Any]], int] | None:
    """The data frames of a C frame that holds exactly `expected` of them and nothing else, with their size
    (as DataFrames.size), as a server's Connection would parse them (J frames as bytes); None when it
    holds anything else. A pure function, for a worker process; bad frames raise RemoteProtocolError."""
    frames: list[tuple[int, Any]] = []
    size = 0
    for event in Connection(Role.SERVER, limits, decode_json=False).inflate(compressed):
        if type(event) is not DataFrames:
            return None
        frames.extend(event.frames)
        size += event.size
    return (frames, size) if len(frames) == expected else None


def json_fields(seq: int, payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """A `J` frame's JSON object, or RemoteProtocolError."""
    try:
        fields = orjson.loads(payload)
    except orjson.JSONDecodeError as e:
        raise RemoteProtocolError(f"J frame seq {seq} is not valid JSON: {e}") from None
    if type(fields) is not dict:
        raise RemoteProtocolError(f"J frame seq {seq} holds JSON {type(fields).__name__}, not an object")
    return fields


# --- encoders (shared by Connection.send and the clients' hot path) ---


def _check_version(version: int) -> None:
    if version not in (V1, V2):
        raise LocalProtocolError(f"lumberjack version must be 0x31 or 0x32, not 0x{version:02x}")


def _check_u32(what: str, value: int) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise LocalProtocolError(f"{what} {value} does not fit a uint32")


def encode_ack(version: int, seq: int) -> bytes:
    _check_version(version)
    _check_u32("ack sequence", seq)
    return _FRAME_U32.pack(version, ACK, seq)


def encode_window(version: int, size: int) -> bytes:
    _check_version(version)
    _check_u32("window size", size)
    return _FRAME_U32.pack(version, WINDOW, size)


def encode_json(seq: int, payload: bytes) -> bytes:
    """A `2J` frame around already-serialised JSON."""
    _check_u32("sequence", seq)
    return _JSON_HEAD.pack(V2, JSON, seq, len(payload)) + payload


def encode_data_v1(seq: int, fields: Mapping[str, Any]) -> bytes:
    """A `1D` frame; v1 carries only strings, so other values are sent as their JSON text."""
    _check_u32("sequence", seq)
    parts = [_JSON_HEAD.pack(V1, DATA, seq, len(fields))]
    for key, value in fields.items():
        k = str(key).encode("utf-8")
        v = value.encode("utf-8") if isinstance(value, str) else orjson.dumps(value)
        parts.append(_U32.pack(len(k)))
        parts.append(k)
        parts.append(_U32.pack(len(v)))
        parts.append(v)
    return b"".join(parts)


def compressed_frame(version: int, frames: bytes | Iterable[bytes], level: int = 3) -> bytes:
    """A `C` frame holding whole frames, zlib (RFC 1950) at `level`."""
    _check_version(version)
    raw = frames if isinstance(frames, bytes | bytearray) else b"".join(frames)
    body = zlib.compress(raw, level)
    return _FRAME_U32.pack(version, COMPRESSED, len(body)) + body


# --- @timestamp ---

_second_cache: dict[str, int] = {}
_FRACTION_SCALE = [10 ** (8 - digits) for digits in range(9)]  # nanoseconds per unit of 1 to 9 fraction digits


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))\Z")


def parse_timestamp(value: Any) -> tuple[int, int] | None:
    """(seconds, nanos) of a Beats `@timestamp` (RFC 3339, up to nanoseconds), None if it is not one."""
    if type(value) is not str:
        return None
    # fast path: what Beats write, "2026-11-22T03:25:39.028Z" (libbeat) or with up to nanoseconds (go-lumber)
    n = len(value)
    if 22 <= n <= 30 and value[19] == "." and value[-1] == "Z" and value[10] == "T":
        seconds = _second_cache.get(value[:19])
        if seconds is not None:
            fraction = value[20:-1]
            if fraction.isdigit() and fraction.isascii():
                return seconds, int(fraction) * _FRACTION_SCALE[n - 22]
    m = _TIMESTAMP.match(value)
    if m is None:
        return None
    date, clock, fraction, zulu, sign, hours, minutes = m.groups()
    if not value.isascii():
        return None
    head = f"{date}T{clock}"
    seconds = _second_cache.get(head)
    if seconds is None:
        try:
            seconds = calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return None
        if seconds >= 0:  # the fast path above takes cached heads as they are: only those it may answer with
            if len(_second_cache) >= 4096:
                _second_cache.clear()
            _second_cache[head] = seconds
    if not zulu:
        offset = int(hours) * 3600 + int(minutes) * 60
        seconds += -offset if sign == "+" else offset
    if seconds < 0:
        return None
    return seconds, int(fraction[:9].ljust(9, "0")) if fraction else 0


def format_timestamp(seconds: int, nanos: int) -> str:
    """RFC 3339 UTC with nanoseconds, as go-lumber's Filebeat writes `@timestamp`."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"
