"""Fluentd Forward protocol (v1 and v1.5), sans-IO: server and client connections, every carrier mode.

Bytes in, events out (`receive_data` / `next_event`), events in, bytes out
(`send`). PackedForward entries stay packed bytes: a cheap scan (msgpack's C
`skip`) counts them and drops invalid ones without building any record.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import io
import json
import mmap
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from logport import _native
from logport.batch import MAX_NESTING_DEPTH
from logport.errors import (
    AuthenticationError,
    ForwardProtocolError,
    LimitExceeded,
    LocalProtocolError,
    RemoteProtocolError,
    brief,
)
from logport.protocols._receivebuffer import NEED_DATA, ReceiveBuffer

__all__ = [
    "INVALID_PING", "NEED_DATA", "Ack", "ClientConnection", "EventBatch", "ForwardProtocolError", "Heartbeat",
    "Helo", "Mode", "Ping", "Pong", "ServerConnection", "digest", "encode_forward", "encode_message",
    "encode_packed_forward", "pack_time", "scan_entries",
]

DEFAULT_CHUNK_SIZE_LIMIT = 16 * 1024 * 1024  # as [forward] chunk_size_limit
DEFAULT_DECOMPRESSION_SIZE_LIMIT = 256 * 1024 * 1024
INVALID_PING = "invalid ping message"  # Fluentd in_forward's PONG reason for anything but a well-formed PING
_UNICODE = "surrogateescape"  # str payloads are binary (Fluentd sends entries as str32): keep every byte


class Mode(enum.Enum):
    MESSAGE = "Message"
    FORWARD = "Forward"
    PACKED_FORWARD = "PackedForward"
    COMPRESSED_PACKED_FORWARD = "CompressedPackedForward"
    JSON = "JSON"


# --- events ---


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events of one message. `entries`: concatenated msgpack `[time, record]` (times as sent)."""

    tag: str
    entries: bytes | memoryview  # a received batch's may be a view of the bytes received
    option: dict[str, Any] = field(default_factory=dict)
    size: int = 0  # valid entries in `entries`
    invalid: int = 0  # entries dropped because they were not `[time, record]`
    mode: Mode = Mode.PACKED_FORWARD
    space: ReceiveSpace | None = None  # the receive space `entries` is a view of, until ServerConnection.release

    @property
    def chunk(self) -> str | bytes | None:
        chunk = self.option.get("chunk")
        return chunk if isinstance(chunk, str | bytes) else None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A msgpack `nil` on the stream."""


@dataclass(frozen=True, slots=True)
class Helo:
    nonce: bytes
    auth: bytes = b""  # empty: no user authentication
    keepalive: bool = True


@dataclass(frozen=True, slots=True)
class Ping:
    """The client's PING; with `error` set, what came in its place (answer() refuses it with PONG false)."""

    hostname: str
    salt: str | bytes
    shared_key_digest: str
    username: str = ""
    password_digest: str = ""
    error: str = ""  # why this is no valid PING, for the log; the peer is told INVALID_PING


@dataclass(frozen=True, slots=True)
class Pong:
    auth_result: bool
    reason: str
    hostname: str
    shared_key_digest: str


@dataclass(frozen=True, slots=True)
class Ack:
    chunk: str | bytes  # echoed in the msgpack type it arrived in (Fluent Bit ignores a bin ack for a str chunk)


# --- helpers shared by both sides ---


def as_bytes(value: str | bytes) -> bytes:
    """A str (maybe holding binary via surrogateescape) or bytes, as the bytes that were on the wire."""
    return value.encode("utf-8", _UNICODE) if isinstance(value, str) else value


def digest(*parts: str | bytes) -> str:
    """Lowercase hex SHA-512 of the parts concatenated (the handshake's digests)."""
    h = hashlib.sha512()
    for part in parts:
        h.update(as_bytes(part))
    return h.hexdigest()


def pack_time(seconds: int, nanos: int | None) -> msgpack.ExtType | int:
    """EventTime (ext 0) when nanos is given, else integer seconds."""
    if nanos is None:
        return seconds
    return msgpack.ExtType(0, seconds.to_bytes(4, "big") + nanos.to_bytes(4, "big"))


# what JSON can say and msgpack cannot carry: an integer past 64 bits, a string with a lone surrogate
_UNPACKABLE = (OverflowError, UnicodeEncodeError, ValueError)


def _check_storable(what: str, value: Any) -> None:
    """JSON mode: the tag and the option are stored (the option's chunk is acked), so a value msgpack cannot
    carry there is the peer's error; in an entry it only makes the entry invalid."""
    try:
        _packer().pack(value)
    except _UNPACKABLE as e:
        raise ForwardProtocolError(f"{what} {brief(value)} cannot be stored: {e}") from None


def _packer() -> msgpack.Packer:
    return msgpack.Packer(use_bin_type=True, unicode_errors=_UNICODE)


_ack_packer = msgpack.Packer(use_bin_type=True, unicode_errors=_UNICODE, autoreset=True)
_OPTION_UNPACK: dict[str, Any] = {"raw": False, "unicode_errors": _UNICODE, "strict_map_key": False,
                                  "ext_hook": msgpack.ExtType}
_UNPACK = object()  # _next_packed: this is for msgpack's unpacker


def _unpacker(limit: int) -> msgpack.Unpacker:
    return msgpack.Unpacker(raw=False, unicode_errors=_UNICODE, strict_map_key=False,
                            max_buffer_size=limit + 1024, ext_hook=msgpack.ExtType)


Entries = bytes | memoryview  # packed entries: a received batch's may be a view of the bytes received

# without the C pass (not built, or LOGPORT_PUREPYTHON): the Python scan and msgpack's unpacker do it all
_scan = _native.load("logport.protocols._forward_scan")
_count_entries: Callable[[Entries], int] | None = _scan.count_entries if _scan else None
_packed_forward_frame: Callable[[Entries, int], tuple[int, int, int, int, int, int] | int] | None = (
    _scan.packed_forward_frame if _scan else None)

_MAP_FIRST = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])
_INT_FIRST = frozenset([*range(0x00, 0x80), *range(0xCC, 0xD4), *range(0xE0, 0x100)])


def _is_time(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, msgpack.ExtType) and value.code == 0 and len(value.data) == 8


def scan_entries(data: Entries) -> tuple[Entries, int, int]:
    """Count the `[time, record]` entries of a PackedForward stream without decoding records.

    Returns (entries, valid, invalid): invalid entries are cut out; a stream that
    stops being msgpack counts its undecodable rest as one invalid entry. This is
    the hot path of PackedForward: a stream of nothing but valid entries is counted
    in one C pass (`_forward_scan`, about ten times the Python loop's speed); any other
    goes to `scan_entries_in_python`, the reference, which cuts and counts.
    """
    if _count_entries is not None:
        count = _count_entries(data)
        if count >= 0:
            return data, count, 0
    return scan_entries_in_python(data)


def scan_entries_in_python(data: Entries) -> tuple[Entries, int, int]:
    """scan_entries without the C pass: per entry one C `skip()` and a few byte checks."""
    n = len(data)
    up = msgpack.Unpacker(raw=True, max_buffer_size=max(n, 1), ext_hook=msgpack.ExtType,
                          strict_map_key=False)
    up.feed(data)
    skip, tell, maps = up.skip, up.tell, _MAP_FIRST
    valid = pos = 0
    try:
        # the form clients send, [EventTime (fixext8 type 0), map], in the tightest loop
        while pos < n - 11 and data[pos] == 0x92 and data[pos + 1] == 0xD7 and data[pos + 2] == 0 \
                and data[pos + 11] in maps:
            skip()
            pos = tell()
            valid += 1
    except (msgpack.OutOfData, ValueError, TypeError, msgpack.FormatError, msgpack.StackError):
        return data[:pos], valid, 1
    if pos >= n:
        return data, valid, 0
    return _scan_rest(data, pos, valid, up)


def _scan_rest(data: Entries, pos: int, valid: int, up: msgpack.Unpacker) -> tuple[Entries, int, int]:
    """scan_entries from `pos` on, for any entry form, cutting out the invalid ones."""
    n = len(data)
    invalid = 0
    keep: list[tuple[int, int]] = []  # byte ranges of valid entries, only once one was invalid
    clean_until = pos
    try:
        while pos < n:
            ok = _entry_ok(data, pos, up)
            up.skip()
            end = up.tell()
            if ok:
                valid += 1
                if invalid:
                    keep.append((pos, end))
                else:
                    clean_until = end
            else:
                invalid += 1
            pos = end
    except (msgpack.OutOfData, ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        invalid += 1
    if not invalid:
        return data, valid, 0
    return b"".join([data[:clean_until], *(data[a:b] for a, b in keep)]), valid, invalid


def _entry_ok(data: Entries, pos: int, up: msgpack.Unpacker) -> bool:
    """The general check of one entry at `pos`; leaves `up` at the entry's record (or where it stopped)."""
    n = len(data)
    if data[pos] != 0x92:
        return False
    up.read_array_header()
    first = data[pos + 1] if pos + 1 < n else -1
    if first in _INT_FIRST or (first == 0xD7 and data[pos + 2: pos + 3] == b"\x00") or (
            first == 0xC7 and data[pos + 2: pos + 4] == b"\x08\x00"):
        up.skip()
        ok = True
    else:  # v1.5 [[time, meta], record] or junk: decode only the time part
        t = up.unpack()
        ok = isinstance(t, list) and len(t) == 2 and _is_time(t[0]) and isinstance(t[1], dict)
    rec = up.tell()
    return ok and rec < n and data[rec] in _MAP_FIRST


def _decompress_gzip(data: bytes | memoryview, limit: int) -> bytes:
    """All concatenated gzip members, refusing more than `limit` bytes of output."""
    out = bytearray()
    rest: bytes | memoryview = data
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            piece = d.decompress(rest, limit + 1 - len(out))
            out += piece
            if len(out) > limit:
                raise LimitExceeded("decompressed chunk", len(out), "decompression_size_limit", limit)
            while d.unconsumed_tail:
                out += d.decompress(d.unconsumed_tail, limit + 1 - len(out))
                if len(out) > limit:
                    raise LimitExceeded("decompressed chunk", len(out), "decompression_size_limit", limit)
            if not d.eof:
                raise ForwardProtocolError("gzip payload is truncated")
        except zlib.error as e:
            raise ForwardProtocolError(f"gzip payload is invalid: {e}") from None
        rest = d.unused_data
    return bytes(out)


def _decompress_zstd(data: bytes | memoryview, limit: int) -> bytes:
    import zstandard  # only when a peer sends zstd

    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        out = reader.read(limit + 1)
    except zstandard.ZstdError as e:
        raise ForwardProtocolError(f"zstd payload is invalid: {e}") from None
    if len(out) > limit:
        raise LimitExceeded("decompressed chunk", len(out), "decompression_size_limit", limit)
    return out


_HEAD = 64  # bytes of a frame's start kept to read its declared size
_LENGTH_HEADERS = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}  # str8/16/32, bin8/16/32


def _str_or_bin(head: bytes, pos: int) -> tuple[int, int] | None:
    """(header length, payload length) of the str/bin at `pos`, or None."""
    if pos >= len(head):
        return None
    b = head[pos]
    if 0xA0 <= b <= 0xBF:
        return 1, b & 0x1F
    width = _LENGTH_HEADERS.get(b)
    if width is None or pos + 1 + width > len(head):
        return None
    return 1 + width, int.from_bytes(head[pos + 1:pos + 1 + width], "big")


def declared_frame_size(head: bytes) -> int | None:
    """From the first bytes of a PackedForward frame: the bytes up to the end of its entries; when `head` ends
    inside the tag, the least the frame can be (its tag, and one byte after it, as the C frame pass answers);
    None when neither is known."""
    if not head or head[0] not in (0x92, 0x93, 0x94):
        return None
    tag = _str_or_bin(head, 1)
    if tag is None:
        return None
    pos = 1 + tag[0] + tag[1]
    if pos >= len(head):  # a tag longer than what came: refused at once when it alone is over the limit
        return pos + 1
    entries = _str_or_bin(head, pos)
    if entries is None:
        return None
    return pos + entries[0] + entries[1]


def _frame_head(head: bytes, more: bytes | memoryview) -> bytes:
    """`head` (a frame's first bytes, all of them received so far unless it already holds what
    declared_frame_size reads) extended from `more`, the bytes that follow it, until it holds the tag and the
    entries' header (at least _HEAD bytes, more for a long tag: the C frame pass reads them wherever they lie)."""
    taken = 0
    while taken < len(more):
        want = _HEAD
        if len(head) > 1 and head[0] in (0x92, 0x93, 0x94):
            tag = _str_or_bin(head, 1)
            if tag is not None:
                want = max(_HEAD, 1 + tag[0] + tag[1] + 5)  # the entries' header is at most 5 bytes
        if len(head) >= want:
            break
        add = bytes(more[taken:taken + want - len(head)])
        head += add
        taken += len(add)
    return head


def msgpack_failure(e: Exception, pos: int, byte: int | None) -> str:
    """What msgpack found wrong at stream offset `pos` (its exceptions mostly carry no text at all)."""
    if isinstance(e, msgpack.StackError):
        return f"values nested deeper than msgpack's limit at offset {pos}"
    if isinstance(e, msgpack.FormatError):
        return f"byte {byte:#04x} at offset {pos} is not valid msgpack" if byte is not None else \
            f"a byte that is not valid msgpack at offset {pos}"
    return f"{e or type(e).__name__} at offset {pos}"


_HTTP_METHODS = frozenset([b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE"])
_FOREIGN_STARTS = (*(method + b" " for method in _HTTP_METHODS), b"\x16\x03")


def _may_turn_foreign(opening: bytes) -> bool:
    """The first bytes are too few to tell, but may begin what foreign_protocol knows (b"G" of b"GET ")."""
    return any(len(opening) < len(start) and start.startswith(opening) for start in _FOREIGN_STARTS)


def foreign_protocol(opening: bytes) -> str | None:
    """What a connection's first bytes are, in words, when they are another protocol that Forward ports
    meet (an HTTP request: Fluent Bit's and Fluentd's http outputs; a TLS handshake to a port without TLS)."""
    method, space, rest = opening.partition(b" ")
    if space and method in _HTTP_METHODS:
        target = rest.split(b" ", 1)[0].split(b"\r", 1)[0].decode("ascii", "replace")
        target = target if len(target) <= 60 else target[:57] + "..."
        request = f"{method.decode()} {target}" if target else method.decode()
        return (f"this looks like HTTP ({request}): the Forward port speaks Fluentd's msgpack protocol, not HTTP "
                f"(use a forward output, not http)")
    if opening[:1] == b"\x16" and opening[1:2] == b"\x03":
        return ("this looks like a TLS handshake, and this Forward port has no TLS (forward.tls.cert and "
                "forward.tls.key): connect without TLS, or configure them")
    return None


# --- encoding (client side, and the server's own replies) ---


def encode_message(tag: str, time: int | msgpack.ExtType, record: dict[str, Any],
                   option: dict[str, Any] | None = None) -> bytes:
    body: list[Any] = [tag, time, record]
    if option:
        body.append(option)
    return _packer().pack(body)


def encode_forward(tag: str, entries: Sequence[Sequence[Any]], option: dict[str, Any] | None = None) -> bytes:
    body: list[Any] = [tag, [list(e) for e in entries]]
    if option:
        body.append(option)
    return _packer().pack(body)


def encode_packed_forward(tag: str, entries: bytes | memoryview, option: dict[str, Any] | None = None, *,
                          compressed: str | None = None) -> bytes:
    """PackedForward, or CompressedPackedForward with `compressed` = "gzip" or "zstd"."""
    option = dict(option or {})
    if compressed == "gzip":
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        entries = c.compress(entries) + c.flush()
        option["compressed"] = "gzip"
    elif compressed == "zstd":
        import zstandard

        entries = zstandard.ZstdCompressor().compress(entries)
        option["compressed"] = "zstd"
    elif compressed:
        raise LocalProtocolError(f"unknown compression {compressed!r}")
    p = _packer()
    return p.pack_array_header(3 if option else 2) + p.pack(tag) + p.pack(entries) + (p.pack(option) if option else b"")


# --- the server side ---


_SPACE = 1024 * 1024  # a 180 KB chunk of 1000 events comes in one or two reads, and is never joined
_MIN_READ = 64 * 1024  # a space with less room left than this is replaced before the next read


class ReceiveSpace:
    """Where a server connection's bytes are received (`ServerConnection.get_buffer`): a PackedForward message is
    read where it lies, and its entries are handed on as a view of it, so a message that came in several reads
    is never joined. A space is written again only once no batch handed out of it is held (`held`: batches not
    yet released); until then the connection receives into another one. Anonymous memory: a page costs
    nothing until bytes are received into it, so an idle or handshake-only connection costs a page or two; one
    that streamed keeps its space and a spare (at most 2 MiB of pages) until it closes (forward.idle_timeout)."""

    __slots__ = ("data", "view", "held")

    def __init__(self, size: int) -> None:
        self.data = mmap.mmap(-1, size) if size else bytearray()
        self.view = memoryview(self.data)
        self.held = 0


class ServerState(enum.Enum):
    WAIT_PING = "WAIT_PING"  # HELO sent, shared key configured
    READY = "READY"
    CLOSED = "CLOSED"


# The legal transitions of a server connection: (state, what happened) -> next state.
# Anything the peer does that is not here is a RemoteProtocolError, and every error closes.
SERVER_TRANSITIONS: dict[tuple[ServerState, str], ServerState] = {
    (ServerState.WAIT_PING, "Heartbeat"): ServerState.WAIT_PING,
    (ServerState.WAIT_PING, "Ping"): ServerState.WAIT_PING,  # answer() decides
    (ServerState.WAIT_PING, "PONG true"): ServerState.READY,
    (ServerState.WAIT_PING, "PONG false"): ServerState.CLOSED,
    (ServerState.READY, "Heartbeat"): ServerState.READY,
    (ServerState.READY, "EventBatch"): ServerState.READY,
}


class ServerConnection:
    """One client's connection, as the server sees it.

    With a shared key, `initiate()` gives the HELO to send first; the client's
    PING comes back as a `Ping` event, which `answer(ping)` turns into the PONG.
    """

    def __init__(self, *, peer: str = "", shared_key: str = "", users: dict[str, str] | None = None,
                 hostname: str = "localhost", keepalive: bool = True,
                 chunk_size_limit: int = DEFAULT_CHUNK_SIZE_LIMIT,
                 decompression_size_limit: int = DEFAULT_DECOMPRESSION_SIZE_LIMIT,
                 nonce: bytes | None = None, auth_salt: bytes | None = None) -> None:
        self.peer = peer
        self.shared_key = shared_key
        self.users = users or {}
        self.hostname = hostname
        self.keepalive = keepalive
        self.chunk_size_limit = chunk_size_limit
        self.decompression_size_limit = decompression_size_limit
        self.nonce = nonce if nonce is not None else os.urandom(16)
        self.auth_salt = (auth_salt if auth_salt is not None else os.urandom(16)) if self.users else b""
        self.state = ServerState.WAIT_PING if shared_key else ServerState.READY
        self.username = ""
        self._buffer = ReceiveBuffer()  # JSON mode's bytes
        self._unpacker = _unpacker(chunk_size_limit)
        self._space = ReceiveSpace(0)  # received bytes; [_lo, _hi) not yet turned into events (nor fed)
        self._lo = 0
        self._hi = 0
        self._spare: ReceiveSpace | None = None  # a space no longer held, for the next one needed (a quiet
        # connection keeps it: dropped, the next burst paid a new space's page faults, a few times a second)
        self.pinned = 0  # bytes of replaced spaces still held by batches not yet released
        self._need = 0  # bytes from _lo the message needs at least before it is looked at again
        self._fed = 0  # bytes handed to the unpacker so far
        self._frame_start = 0  # stream offset where the frame being received starts
        self._last_piece: bytes | memoryview = b""
        self._head: bytes | None = b""  # first bytes of the frame being received (None: not known)
        self._opening = b""  # the connection's first bytes: what it speaks, if not Forward (foreign_protocol)
        self._started = False  # an event came: the peer speaks Forward
        self._deferred: RemoteProtocolError | None = None  # raised once the first bytes tell what the peer speaks
        self._json: bool | None = None  # decided by the first byte of the connection
        self._scan = (0, 0, False, False)  # JSON mode: (position, depth, in a string, after a backslash)

    # bytes in

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes received, copied into the receive space (a listener that reads into `get_buffer()` copies none)."""
        if self.state is ServerState.CLOSED:
            raise ForwardProtocolError("data after the connection was closed", peer=self.peer)
        n = len(data)
        space = self._reserve(n)
        space.view[self._hi:self._hi + n] = data
        self.buffer_updated(n)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next bytes received go, as asyncio.BufferedProtocol's get_buffer: the rest of the receive
        space (at least 64 KiB); `buffer_updated(n)` says how many came."""
        space = self._reserve(_MIN_READ)
        return space.view[self._hi:]

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were received into the buffer `get_buffer()` gave."""
        if self.state is ServerState.CLOSED:
            raise ForwardProtocolError("data after the connection was closed", peer=self.peer)
        hi = self._hi
        if len(self._opening) < _HEAD:
            self._opening += bytes(self._space.view[hi:min(hi + nbytes, hi + _HEAD - len(self._opening))])
        self._hi = hi + nbytes

    def release(self, batch: EventBatch) -> None:
        """The batch's entries are no longer read (its append is answered): the space they view may be written
        again once nothing else holds it. A batch never released costs a fresh space, never changed bytes."""
        space = batch.space
        if space is None:
            return
        space.held -= 1
        if space.held:
            return
        if space is not self._space:
            self.pinned -= len(space.data)
            if self._spare is None and len(space.data) == _SPACE:
                self._spare = space

    def _reserve(self, room: int) -> ReceiveSpace:
        """The receive space, with at least `room` bytes free after what was received, and room for all of the
        message being received."""
        space = self._space
        if self._lo == self._hi and not space.held:
            self._lo = self._hi = 0
        size = len(space.data)
        if size - self._hi >= room and self._lo + self._need <= size:
            return space
        keep = self._hi - self._lo  # received, not yet turned into events: moved to the new space's start
        want = max(keep + room, self._need)
        if not space.held and want <= size:
            space.view[:keep] = space.view[self._lo:self._hi]
        else:
            if self._spare is not None and want <= _SPACE:
                new, self._spare = self._spare, None
            else:
                new = ReceiveSpace(max(_SPACE, want))
            new.view[:keep] = space.view[self._lo:self._hi]
            if space.held:
                self.pinned += size
            self._space = space = new
        self._lo, self._hi = 0, keep
        return space

    @property
    def buffered(self) -> int:
        """Bytes received and not yet turned into events."""
        return self._hi - self._lo + len(self._buffer) + self._fed - self._frame_start

    def next_event(self) -> EventBatch | Heartbeat | Ping | Any:
        if self._deferred is not None:
            if _may_turn_foreign(self._opening):
                return NEED_DATA
            raise self._failed(self._deferred)
        if self._json is None:
            if self._lo == self._hi:
                return NEED_DATA
            self._json = self._space.data[self._lo] in (0x7B, 0x5B) and self.state is ServerState.READY
        try:
            obj = self._next_json() if self._json else self._next_msgpack()
            if obj is NEED_DATA:
                return NEED_DATA
            event = obj if type(obj) is EventBatch else self._interpret(obj)
            self.state = self._next_state(type(event).__name__)
        except RemoteProtocolError as e:
            if not self._started and isinstance(e, ForwardProtocolError) and _may_turn_foreign(self._opening):
                self._deferred = e  # b"G" may be the start of b"GET /": the next bytes tell which error it is
                return NEED_DATA
            raise self._failed(e) from None
        self._started = True
        return event

    def _failed(self, e: RemoteProtocolError) -> RemoteProtocolError:
        """The connection is closed; the error names the peer, and says what it speaks if it is no Forward."""
        self.state = ServerState.CLOSED
        foreign = foreign_protocol(self._opening) if not self._started else None
        if foreign and isinstance(e, ForwardProtocolError):
            e = ForwardProtocolError(foreign)
        e.peer = e.peer or self.peer
        return e

    def _next_state(self, happened: str) -> ServerState:
        try:
            return SERVER_TRANSITIONS[self.state, happened]
        except KeyError:
            raise ForwardProtocolError(f"{happened} is not allowed in state {self.state.value}") from None

    def _next_msgpack(self) -> Any:
        if self._fed == self._frame_start and self.state is ServerState.READY and _packed_forward_frame is not None:
            batch = self._next_packed()
            if batch is not _UNPACK:
                return batch
        up = self._unpacker
        limit = self.chunk_size_limit
        while True:
            try:
                obj = up.unpack()
            except msgpack.OutOfData:
                # msgpack consumes a container's elements as they come: count the frame from its start
                frame = self._fed - self._frame_start
                if frame > limit:
                    raise LimitExceeded("frame", frame, "chunk_size_limit", limit) from None
                declared = declared_frame_size(self._head) if self._head is not None else None
                if declared is not None and declared > limit:  # refuse at once, without buffering it
                    raise LimitExceeded("frame", declared, "chunk_size_limit", limit) from None
                room = limit + 1 - frame  # feed no more than one frame can use: memory stays within the limit
                lo = self._lo
                take = min(self._hi - lo, room)
                if not take:
                    return NEED_DATA
                piece = bytes(self._space.view[lo:lo + take])
                self._lo = lo + take
                up.feed(piece)
                self._fed += len(piece)
                self._last_piece = piece
                if self._head is not None:
                    self._head = _frame_head(self._head, piece)
                continue
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
                raise ForwardProtocolError(f"invalid msgpack: {self._msgpack_error(e)}") from None
            self._frame_start = up.tell()
            left = self._fed - self._frame_start  # the next frame's first bytes, at the end of the last piece
            last = self._last_piece
            self._head = _frame_head(b"", last[len(last) - left:]) if left <= len(last) else None
            return obj

    def _next_packed(self) -> EventBatch | Any:
        """A PackedForward message at the start of what is received, its entries a view of the receive space
        (msgpack's unpacker copied them in, then out): NEED_DATA while it is not whole, `_UNPACK` for anything
        else (the unpacker, the reference, reads it; it has nothing buffered, so it starts where this stopped)."""
        lo, hi = self._lo, self._hi
        if hi == lo or hi - lo < self._need:
            return NEED_DATA
        space = self._space
        view = space.view
        assert _packed_forward_frame is not None
        found = _packed_forward_frame(view[:hi], lo)
        limit = self.chunk_size_limit
        if type(found) is int:
            if found < 0:
                self._need = 0
                return _UNPACK
            if found > limit:  # refuse at once, without receiving it
                raise LimitExceeded("frame", found, "chunk_size_limit", limit)
            self._need = found  # the next read goes where the whole message fits (_reserve)
            return NEED_DATA
        end, tag_start, tag_end, entries_start, entries_end, option_start = found  # type: ignore[misc]
        if end - lo > limit:
            raise LimitExceeded("frame", end - lo, "chunk_size_limit", limit)
        try:
            tag = str(view[tag_start:tag_end], "utf-8", _UNICODE)
            option = msgpack.unpackb(view[option_start:end], **_OPTION_UNPACK) if option_start < end else None
        except Exception:  # unhashable keys, say: the unpacker raises what the peer did wrong
            self._need = 0
            return _UNPACK
        self._lo = end
        self._need = 0
        self._head = b""
        return self._packed(tag, view[entries_start:entries_end], option if option is not None else {}, space)

    def _msgpack_error(self, e: Exception) -> str:
        pos = self._unpacker.tell()  # where it stopped: the offending byte
        last = self._last_piece
        first_of_last = self._fed - len(last)
        return msgpack_failure(e, pos, last[pos - first_of_last] if first_of_last <= pos < self._fed else None)

    def _next_json(self) -> Any:
        """One top-level JSON array or object: brackets are matched (outside strings) to find its end."""
        buf = self._buffer
        if self._hi > self._lo:  # JSON is read from the buffer: what the space holds goes there
            buf += self._space.view[self._lo:self._hi]
            self._lo = self._hi
        while buf and buf.peek_byte() in (0x20, 0x09, 0x0A, 0x0D):
            buf.skip(1)
            self._scan = (0, 0, False, False)
        pos, depth, in_string, escaped = self._scan
        raw, start, n = buf.raw, buf.start, len(buf)
        end = -1
        while pos < n:
            c = raw[start + pos]
            pos += 1
            if in_string:
                if escaped:
                    escaped = False
                elif c == 0x5C:
                    escaped = True
                elif c == 0x22:
                    in_string = False
            elif c == 0x22:
                in_string = True
            elif c in (0x5B, 0x7B):
                depth += 1
                if depth > MAX_NESTING_DEPTH:
                    raise ForwardProtocolError(f"JSON nested deeper than the limit of {MAX_NESTING_DEPTH}")
            elif c in (0x5D, 0x7D):
                depth -= 1
                if depth <= 0:
                    end = pos
                    break
            elif depth == 0:
                raise ForwardProtocolError(f"JSON mode expects an array or object, got byte {c:#04x}")
        if end < 0:
            self._scan = (pos, depth, in_string, escaped)
            if n > self.chunk_size_limit:
                raise LimitExceeded("frame", n, "chunk_size_limit", self.chunk_size_limit)
            return NEED_DATA
        self._scan = (0, 0, False, False)
        text = buf.extract(end)
        try:
            return json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise ForwardProtocolError(f"invalid JSON: {e}") from None

    def _interpret(self, obj: Any) -> EventBatch | Heartbeat | Ping:
        if obj is None:
            return Heartbeat()
        if self.state is ServerState.WAIT_PING:
            return self._ping(obj)
        if not isinstance(obj, list) or not 2 <= len(obj) <= 4:
            raise ForwardProtocolError(f"expected a [tag, ...] array, got {brief(obj)}")
        tag = obj[0]
        if not isinstance(tag, str):
            raise ForwardProtocolError(f"tag is not a string: {brief(tag)}")
        if self._json:
            _check_storable("tag", tag)
        second = obj[1]
        if isinstance(second, str | bytes):
            return self._packed(tag, as_bytes(second), self._option(obj, 2))
        if isinstance(second, list):
            option = self._option(obj, 2)
            return self._forward(tag, second, option, Mode.FORWARD)
        if len(obj) < 3:
            raise ForwardProtocolError(f"message mode needs [tag, time, record], got {len(obj)} elements")
        option = self._option(obj, 3)
        batch = self._forward(tag, [[second, obj[2]]], option, Mode.MESSAGE)
        return batch

    def _option(self, obj: list[Any], index: int) -> dict[str, Any]:
        if len(obj) <= index or obj[index] is None:
            return {}
        option = obj[index]
        if not isinstance(option, dict):
            raise ForwardProtocolError(f"option is not a map: {brief(option)}")
        if self._json:
            _check_storable("option", option)
        return option

    def _packed(self, tag: str, payload: bytes | memoryview, option: dict[str, Any],
                space: ReceiveSpace | None = None) -> EventBatch:
        compressed = option.get("compressed")
        mode = Mode.PACKED_FORWARD
        if compressed == "gzip":
            payload = _decompress_gzip(payload, self.decompression_size_limit)
            mode = Mode.COMPRESSED_PACKED_FORWARD
        elif compressed == "zstd":
            payload = _decompress_zstd(payload, self.decompression_size_limit)
            mode = Mode.COMPRESSED_PACKED_FORWARD
        elif compressed not in (None, "text", ""):
            raise ForwardProtocolError(f"unknown compression {brief(compressed)}")
        entries, valid, invalid = scan_entries(payload)
        if mode is Mode.COMPRESSED_PACKED_FORWARD:
            option = {k: v for k, v in option.items() if k != "compressed"}  # what we store is not compressed
        if space is not None and entries is payload:
            space.held += 1
            return EventBatch(tag, entries, option, valid, invalid, mode, space)
        return EventBatch(tag, entries, option, valid, invalid, mode)

    def _forward(self, tag: str, entries: list[Any], option: dict[str, Any], mode: Mode) -> EventBatch:
        if self._json:
            mode = Mode.JSON
        p = _packer()
        parts: list[bytes] = []
        invalid = 0
        for entry in entries:
            if self._json and mode is Mode.JSON and isinstance(entry, list) and len(entry) == 2 \
                    and isinstance(entry[0], float) and 0 <= entry[0] < 2**32:  # EventTime's 4 bytes of seconds
                whole = int(entry[0])  # JSON has no EventTime: a float time is seconds with a fraction
                entry = [pack_time(whole, round((entry[0] - whole) * 1e9) % 1_000_000_000), entry[1]]
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict) and (
                    _is_time(entry[0]) or (isinstance(entry[0], list) and len(entry[0]) == 2
                                           and _is_time(entry[0][0]) and isinstance(entry[0][1], dict))):
                try:
                    parts.append(p.pack(entry))
                except _UNPACKABLE:  # JSON mode: an integer past 64 bits, a lone surrogate
                    invalid += 1
            else:
                invalid += 1
        return EventBatch(tag, b"".join(parts), option, len(parts), invalid, mode)

    # the handshake

    def initiate(self) -> bytes:
        """The HELO to send first (empty when no shared key is configured)."""
        if not self.shared_key:
            return b""
        return _packer().pack(["HELO", {"nonce": self.nonce, "auth": self.auth_salt, "keepalive": self.keepalive}])

    def _ping(self, obj: Any) -> Ping:
        """What came while waiting for the PING. Anything decodable that is no well-formed PING (an event sent
        before it, a short PING, wrong field types) is a Ping with `error`, not a protocol error: as in Fluentd,
        the peer gets PONG false with a reason, and the listener counts it as a failed handshake."""
        if not (isinstance(obj, list) and len(obj) == 6 and obj[0] == "PING"):
            foreign = foreign_protocol(self._opening) if not self._started else None
            return Ping("", "", "", error=foreign or f"expected PING, got {brief(obj)}")
        _, hostname, salt, key_digest, username, password_digest = obj
        if not (isinstance(hostname, str) and isinstance(salt, str | bytes) and isinstance(key_digest, str | bytes)):
            return Ping(hostname if isinstance(hostname, str) else "", "", "",
                        error=f"PING has the wrong field types: {brief(obj)}")
        try:
            return Ping(hostname, salt, _s(key_digest), _s(username or ""), _s(password_digest or ""))
        except AuthenticationError as e:
            return Ping(hostname, salt, "", error=f"PING {e.message}")

    def answer(self, ping: Ping) -> Pong:
        """Check a PING; a failed check gives PONG false and the connection is closed after it."""
        reason = ""
        if ping.error:
            reason = INVALID_PING
        elif ping.hostname == self.hostname:
            reason = "same hostname between input and output: invalid configuration"
        elif not _eq(ping.shared_key_digest, digest(ping.salt, ping.hostname, self.nonce, self.shared_key)):
            reason = "shared_key mismatch"
        elif self.users:
            password = self.users.get(ping.username)
            if password is None or not _eq(ping.password_digest, digest(self.auth_salt, ping.username, password)):
                reason = "username/password mismatch"
        if reason:
            self.state = self._next_state("PONG false")
            return Pong(False, reason, "", "")
        self.username = ping.username
        self.state = self._next_state("PONG true")
        return Pong(True, "", self.hostname, digest(ping.salt, self.hostname, self.nonce, self.shared_key))

    # bytes out

    def send_acks(self, chunks: Sequence[str | bytes]) -> bytes:
        """`send(Ack(chunk))` of each chunk, in one piece (a listener writes the acks of a loop turn at once)."""
        if self._json:
            return b"".join(self.send(Ack(chunk)) for chunk in chunks)
        pack = _ack_packer.pack
        return b"".join([pack({"ack": chunk}) for chunk in chunks])

    def send(self, event: Ack | Pong | Helo) -> bytes:
        if isinstance(event, Ack):
            if self._json:  # a JSON connection is answered in JSON, as Fluentd does (its serializer is to_json)
                chunk = event.chunk if isinstance(event.chunk, str) else event.chunk.decode("utf-8", _UNICODE)
                # ASCII with \u escapes: the peer reads back exactly the string it sent, lone surrogates too
                return json.dumps({"ack": chunk}, separators=(",", ":")).encode("ascii")
            return _packer().pack({"ack": event.chunk})
        if isinstance(event, Pong):
            return _packer().pack(["PONG", event.auth_result, event.reason, event.hostname, event.shared_key_digest])
        if isinstance(event, Helo):
            return _packer().pack(["HELO", {"nonce": event.nonce, "auth": event.auth, "keepalive": event.keepalive}])
        raise LocalProtocolError(f"a server does not send {type(event).__name__}")


def _s(value: object) -> str:
    """A handshake string field, sent as str or bin by different peers."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", _UNICODE)
    raise AuthenticationError(f"handshake field is {type(value).__name__} {brief(value)}, not a string")


def _eq(a: str, b: str) -> bool:
    return hmac.compare_digest(a.lower().encode("utf-8", _UNICODE), b.encode())


# --- the client side ---


class ClientState(enum.Enum):
    WAIT_HELO = "WAIT_HELO"
    WAIT_PONG = "WAIT_PONG"
    READY = "READY"
    CLOSED = "CLOSED"


# The legal transitions of a client connection: (state, what arrived) -> next state.
CLIENT_TRANSITIONS: dict[tuple[ClientState, str], ClientState] = {
    (ClientState.WAIT_HELO, "Helo"): ClientState.WAIT_PONG,
    (ClientState.WAIT_PONG, "Pong"): ClientState.READY,  # only once its digest checked out
    (ClientState.READY, "Ack"): ClientState.READY,
    (ClientState.READY, "Heartbeat"): ClientState.READY,
}


class ClientConnection:
    """The sending side: HELO in, PING out, PONG in (its digest checked), then messages out and acks in."""

    def __init__(self, *, shared_key: str = "", hostname: str = "localhost", username: str = "",
                 password: str = "", salt: str | None = None, peer: str = "",
                 reply_size_limit: int = 1024 * 1024) -> None:
        self.shared_key = shared_key
        self.hostname = hostname
        self.username = username
        self.password = password
        self.salt = salt if salt is not None else os.urandom(16).hex()  # a str: Fluent Bit refuses bin
        self.peer = peer
        self.state = ClientState.WAIT_HELO if shared_key else ClientState.READY
        self.helo: Helo | None = None
        self.server_hostname = ""
        self._reply_size_limit = reply_size_limit
        self._unpacker = _unpacker(reply_size_limit)

    def receive_data(self, data: bytes) -> None:
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull:
            raise LimitExceeded("server reply", len(data), "reply_size_limit", self._reply_size_limit,
                                peer=self.peer) from None

    def next_event(self) -> Helo | Pong | Ack | Heartbeat | Any:
        try:
            obj = self._unpacker.unpack()
        except msgpack.OutOfData:
            return NEED_DATA
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
            raise ForwardProtocolError(f"invalid msgpack from the server: {msgpack_failure(e, self._unpacker.tell(), None)}",
                                       peer=self.peer) from None
        if isinstance(obj, list) and obj and obj[0] == "HELO":
            kind = "Helo"
        elif isinstance(obj, list) and obj and obj[0] == "PONG":
            kind = "Pong"
        elif isinstance(obj, dict) and "ack" in obj:
            kind = "Ack"
        elif obj is None:
            kind = "Heartbeat"
        else:
            raise ForwardProtocolError(f"unexpected reply {brief(obj)} in state {self.state.value}", peer=self.peer)
        next_state = CLIENT_TRANSITIONS.get((self.state, kind))
        if next_state is None:
            raise ForwardProtocolError(f"{kind} is not allowed in state {self.state.value}", peer=self.peer)
        if kind == "Helo":
            self.helo = self._helo(obj)
        elif kind == "Pong":
            pong = self._pong(obj)  # raises AuthenticationError unless it checks out
            self.state = next_state
            return pong
        self.state = next_state
        if kind == "Ack":
            return Ack(obj["ack"])
        return self.helo if kind == "Helo" else Heartbeat()

    def _helo(self, obj: list[Any]) -> Helo:
        if not (len(obj) == 2 and isinstance(obj[1], dict)):
            raise ForwardProtocolError(f"malformed HELO {brief(obj)}", peer=self.peer)
        nonce, auth = obj[1].get("nonce", b""), obj[1].get("auth", b"")
        if not isinstance(nonce, str | bytes) or not isinstance(auth, str | bytes):
            raise ForwardProtocolError("HELO nonce/auth are not strings", peer=self.peer)
        return Helo(as_bytes(nonce), as_bytes(auth), bool(obj[1].get("keepalive", True)))

    def ping(self) -> bytes:
        """The PING answering the HELO received."""
        if self.state is not ClientState.WAIT_PONG or self.helo is None:
            raise LocalProtocolError(f"PING is sent after HELO, not in state {self.state.value}")
        password_digest = digest(self.helo.auth, self.username, self.password) if self.helo.auth else ""
        return _packer().pack(["PING", self.hostname, self.salt,
                               digest(self.salt, self.hostname, self.helo.nonce, self.shared_key),
                               self.username, password_digest])

    def _pong(self, obj: list[Any]) -> Pong:
        if len(obj) != 5:
            raise ForwardProtocolError(f"malformed PONG {brief(obj)}", peer=self.peer)
        _, ok, reason, hostname, key_digest = obj
        self.state = ClientState.CLOSED  # until the checks below pass
        if ok is not True:
            raise AuthenticationError(f"server refused the handshake: {reason}", peer=self.peer)
        hostname, key_digest = _s(hostname), _s(key_digest)
        if hostname == self.hostname:
            raise AuthenticationError("server hostname equals our own (a loop)", peer=self.peer)
        assert self.helo is not None
        if not _eq(key_digest, digest(self.salt, hostname, self.helo.nonce, self.shared_key)):
            raise AuthenticationError("server's PONG digest does not match the shared key", peer=self.peer)
        self.server_hostname = hostname
        return Pong(True, _s(reason or ""), hostname, key_digest)

    def send(self, event: EventBatch | Heartbeat) -> bytes:
        if self.state is not ClientState.READY:
            raise LocalProtocolError(f"cannot send events in state {self.state.value}")
        if isinstance(event, Heartbeat):
            return b"\xc0"
        if isinstance(event, EventBatch):
            if event.mode is Mode.COMPRESSED_PACKED_FORWARD:
                compression = event.option.get("compressed", "gzip")
                option = {k: v for k, v in event.option.items() if k != "compressed"}
                return encode_packed_forward(event.tag, event.entries, option, compressed=compression)
            if event.mode is Mode.PACKED_FORWARD:
                return encode_packed_forward(event.tag, event.entries, event.option)
            entries = _iter_packed(event.entries)
            if event.mode is Mode.MESSAGE:
                if len(entries) != 1:
                    raise LocalProtocolError(f"Message mode carries one event, not {len(entries)}")
                return encode_message(event.tag, entries[0][0], entries[0][1], event.option)
            return encode_forward(event.tag, entries, event.option)
        raise LocalProtocolError(f"a client does not send {type(event).__name__}")


def _iter_packed(entries: Entries) -> list[list[Any]]:
    up = msgpack.Unpacker(raw=False, unicode_errors=_UNICODE, ext_hook=msgpack.ExtType, strict_map_key=False,
                          max_buffer_size=max(len(entries), 1))
    up.feed(entries)
    return list(up)


# --- entry streams: split to fit a store frame, add keys to every record ---


def split_entries(entries: Entries, max_bytes: int) -> list[Entries]:
    """Cut a packed entry stream at entry boundaries into pieces of at most `max_bytes` (one entry may exceed it)."""
    if len(entries) <= max_bytes:
        return [entries]
    up = msgpack.Unpacker(raw=True, max_buffer_size=len(entries), ext_hook=msgpack.ExtType, strict_map_key=False)
    up.feed(entries)
    pieces: list[Entries] = []
    start = 0
    last = 0
    while last < len(entries):
        up.skip()
        end = up.tell()
        if end - start > max_bytes and last > start:
            pieces.append(entries[start:last])
            start = last
        last = end
    pieces.append(entries[start:])
    return pieces


def add_record_keys(entries: Entries, extra: dict[str, Any]) -> bytes:
    """Set `extra` in every record (source address / hostname keys); this one decodes the records."""
    p = _packer()
    return b"".join(p.pack([t, {**record, **extra}]) for t, record in _iter_packed(entries))
