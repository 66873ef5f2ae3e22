"""The segment wire protocol (Pravega's proposal, docs/segment-protocol.md), sans-IO.

Messages are an 8-byte header (int32 type, uint32 length, big-endian) and a
body. `Connection` reassembles PartialMessages, assembles append blocks
(BeginAppendBlock, Event*, EndAppendBlock, with an event split across the
block's end) into one `AppendBlock`, and encodes whatever is sent.
"""

from __future__ import annotations

import enum
import struct
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from logport import _native
from logport.errors import LimitExceeded, LocalProtocolError, SegmentProtocolError
from logport.protocols._receivebuffer import NEED_DATA, ReceiveBuffer, _NeedData
from logport.store.frames import HEADER, HEADER_SIZE, iter_frames
from logport.store.frames import is_boundary as is_message_boundary

MAX_MESSAGE_SIZE: Final = (1 << 24) - 1  # 16 MiB - 1, as Pravega
MAX_EVENT_SIZE: Final = 8 * 1024 * 1024
MAX_BLOCK_SIZE: Final = 16 * 1024 * 1024
MAX_STRING: Final = 0xFFFF

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_EVENT_TYPE: Final = 0


# --- strings: 2-byte length + Java modified UTF-8 ---


def encode_modified_utf8(text: str) -> bytes:
    """Java's DataOutput.writeUTF body: NUL as C0 80, characters above U+FFFF as surrogate pairs."""
    if text.isascii() and "\x00" not in text:
        return text.encode("ascii")
    utf16 = text.encode("utf-16-be", "surrogatepass")
    units = struct.unpack(f">{len(utf16) // 2}H", utf16)
    out = bytearray()
    for u in units:
        if 0 < u < 0x80:
            out.append(u)
        elif u < 0x800:
            out += bytes((0xC0 | (u >> 6), 0x80 | (u & 0x3F)))
        else:
            out += bytes((0xE0 | (u >> 12), 0x80 | ((u >> 6) & 0x3F), 0x80 | (u & 0x3F)))
    return bytes(out)


def decode_modified_utf8(data: bytes | memoryview) -> str:
    raw = bytes(data)
    if raw.isascii():
        return raw.decode("ascii")
    if any(b >= 0xF0 for b in raw):
        raise SegmentProtocolError("string is not modified UTF-8: 4-byte sequence or invalid byte")
    try:
        units = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        return units.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    except UnicodeError as e:
        raise SegmentProtocolError(f"string is not modified UTF-8: {e}") from None


# --- messages ---


class PartialKind(enum.IntEnum):
    BEGIN = 0
    MIDDLE = 1
    END = 2


@dataclass(frozen=True, slots=True)
class Message:
    TYPE: ClassVar[int]
    # (field name, kind): kinds are uuid, long, int, str, bool, byte, strings, rest, opt_int
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]


def _message(type_code: int, *spec: tuple[str, str]):  # type: ignore[no-untyped-def]
    def wrap(cls):  # type: ignore[no-untyped-def]
        cls.TYPE = type_code
        cls.FIELDS = spec
        return cls

    return wrap


@_message(0, ("data", "rest"))
@dataclass(frozen=True, slots=True)
class Event(Message):
    data: bytes


@_message(1, ("kind", "byte"), ("data", "rest"))
@dataclass(frozen=True, slots=True)
class PartialMessage(Message):
    kind: PartialKind
    data: bytes


@_message(2, ("data", "rest"))
@dataclass(frozen=True, slots=True)
class KeepAlive(Message):
    data: bytes = b""


@_message(3, ("segment", "str"), ("offset", "long"), ("suggested_length", "int"), ("wait_ms", "opt_int"))
@dataclass(frozen=True, slots=True)
class ReadSegment(Message):
    segment: str
    offset: int
    suggested_length: int
    wait_ms: int | None = None  # logport extension: absent = the server's read_wait; 0 = do not wait


@_message(4, ("segment", "str"), ("offset", "long"), ("flags", "byte"), ("data", "rest"))
@dataclass(frozen=True, slots=True)
class SegmentRead(Message):
    segment: str
    offset: int
    flags: int  # bit 0: at tail, bit 1: end of segment
    data: bytes

    @classmethod
    def make(cls, segment: str, offset: int, at_tail: bool, end_of_segment: bool, data: bytes) -> SegmentRead:
        return cls(segment, offset, (1 if at_tail else 0) | (2 if end_of_segment else 0), data)

    @property
    def at_tail(self) -> bool:
        return bool(self.flags & 1)

    @property
    def end_of_segment(self) -> bool:
        return bool(self.flags & 2)


@_message(5, ("connection_id", "uuid"), ("segment", "str"))
@dataclass(frozen=True, slots=True)
class SetupAppend(Message):
    connection_id: uuid.UUID
    segment: str


@_message(6, ("segment", "str"), ("connection_id", "uuid"), ("ack_level", "long"))
@dataclass(frozen=True, slots=True)
class AppendSetup(Message):
    segment: str
    connection_id: uuid.UUID
    ack_level: int


@_message(7, ("connection_id", "uuid"), ("connection_offset", "long"), ("data_length", "int"))
@dataclass(frozen=True, slots=True)
class BeginAppendBlock(Message):
    connection_id: uuid.UUID
    connection_offset: int  # data written so far by this connection id to its segment
    data_length: int  # bytes that follow before EndAppendBlock


@_message(8, ("connection_id", "uuid"), ("connection_offset", "long"), ("block_length", "int"))
@dataclass(frozen=True, slots=True)
class EndAppendBlock(Message):
    connection_id: uuid.UUID
    connection_offset: int  # after the block
    block_length: int  # bytes of whole Event messages in the block, a split last event included


@_message(9, ("connection_id", "uuid"), ("ack_level", "long"))
@dataclass(frozen=True, slots=True)
class DataAppended(Message):
    connection_id: uuid.UUID
    ack_level: int


# replies the document lacks (errors)


@_message(50, ("segment", "str"))
@dataclass(frozen=True, slots=True)
class NoSuchSegment(Message):
    segment: str


@_message(51, ("segment", "str"))
@dataclass(frozen=True, slots=True)
class SegmentIsSealed(Message):
    segment: str


@_message(52, ("segment", "str"), ("start_offset", "long"))
@dataclass(frozen=True, slots=True)
class SegmentIsTruncated(Message):
    segment: str
    start_offset: int


@_message(53, ("connection_id", "uuid"), ("ack_level", "long"), ("connection_offset", "long"))
@dataclass(frozen=True, slots=True)
class WrongConnectionOffset(Message):
    connection_id: uuid.UUID
    ack_level: int  # what the server has stored for the connection id
    connection_offset: int  # where the refused block started


@_message(54, ("what", "str"), ("size", "long"), ("limit_name", "str"), ("limit", "long"))
@dataclass(frozen=True, slots=True)
class MessageTooLarge(Message):
    what: str
    size: int
    limit_name: str
    limit: int


@_message(55, ("segment", "str"), ("reason", "str"))
@dataclass(frozen=True, slots=True)
class InvalidSegmentName(Message):
    segment: str
    reason: str


@_message(56, ("segment", "str"), ("message", "str"))
@dataclass(frozen=True, slots=True)
class OperationFailed(Message):
    segment: str
    message: str


@_message(57, ("message", "str"))
@dataclass(frozen=True, slots=True)
class ProtocolViolation(Message):
    message: str  # sent just before the server closes the connection


# management


@_message(60, ("segment", "str"))
@dataclass(frozen=True, slots=True)
class CreateSegment(Message):
    segment: str


@_message(61, ("segment", "str"), ("created", "bool"))
@dataclass(frozen=True, slots=True)
class SegmentCreated(Message):
    segment: str
    created: bool  # false: it existed already


@_message(62, ("segment", "str"))
@dataclass(frozen=True, slots=True)
class SealSegment(Message):
    segment: str


@_message(63, ("segment", "str"), ("end_offset", "long"))
@dataclass(frozen=True, slots=True)
class SegmentSealed(Message):
    segment: str
    end_offset: int


@_message(64, ("segment", "str"), ("offset", "long"))
@dataclass(frozen=True, slots=True)
class TruncateSegment(Message):
    segment: str
    offset: int


@_message(65, ("segment", "str"), ("start_offset", "long"))
@dataclass(frozen=True, slots=True)
class SegmentTruncated(Message):
    segment: str
    start_offset: int


@_message(66, ("segment", "str"))
@dataclass(frozen=True, slots=True)
class GetSegmentInfo(Message):
    segment: str


@_message(67, ("segment", "str"), ("start_offset", "long"), ("end_offset", "long"), ("sealed", "bool"))
@dataclass(frozen=True, slots=True)
class SegmentInfoReply(Message):
    segment: str
    start_offset: int
    end_offset: int
    sealed: bool


@_message(68)
@dataclass(frozen=True, slots=True)
class ListSegments(Message):
    pass


@_message(69, ("segments", "strings"))
@dataclass(frozen=True, slots=True)
class SegmentList(Message):
    segments: tuple[str, ...]


# authentication (when the server has a token configured)


@_message(70, ("token", "str"))
@dataclass(frozen=True, slots=True)
class Authenticate(Message):
    token: str


@_message(71)
@dataclass(frozen=True, slots=True)
class Authenticated(Message):
    pass


@_message(72, ("message", "str"))
@dataclass(frozen=True, slots=True)
class AuthenticationFailed(Message):
    message: str


# logport's own: the hub's stable identity (logport.store.identity), which names it among several hubs


@_message(73)
@dataclass(frozen=True, slots=True)
class GetHubInfo(Message):
    pass


@_message(74, ("hub_id", "str"))
@dataclass(frozen=True, slots=True)
class HubInfo(Message):
    hub_id: str


BOTH: Final = (PartialMessage, KeepAlive)
REQUESTS: Final = (Event, ReadSegment, SetupAppend, BeginAppendBlock, EndAppendBlock, CreateSegment,
                   SealSegment, TruncateSegment, GetSegmentInfo, ListSegments, Authenticate, GetHubInfo)
REPLIES: Final = (SegmentRead, AppendSetup, DataAppended, NoSuchSegment, SegmentIsSealed, SegmentIsTruncated,
                  WrongConnectionOffset, MessageTooLarge, InvalidSegmentName, OperationFailed, ProtocolViolation,
                  SegmentCreated, SegmentSealed, SegmentTruncated, SegmentInfoReply, SegmentList, Authenticated,
                  AuthenticationFailed, HubInfo)
MESSAGE_TYPES: Final[dict[int, type[Message]]] = {cls.TYPE: cls for cls in (*BOTH, *REQUESTS, *REPLIES)}
ERROR_REPLIES: Final = (NoSuchSegment, SegmentIsSealed, SegmentIsTruncated, WrongConnectionOffset,
                        MessageTooLarge, InvalidSegmentName, OperationFailed, ProtocolViolation,
                        AuthenticationFailed)


# --- body codec, driven by each message's FIELDS ---


def _encode_string(text: str, parts: list[bytes]) -> None:
    raw = encode_modified_utf8(text)
    if len(raw) > MAX_STRING:
        raise LocalProtocolError(f"string of {len(raw)} bytes exceeds the 65535-byte string limit")
    parts.append(_U16.pack(len(raw)))
    parts.append(raw)


def _encode_strings(texts: tuple[str, ...], parts: list[bytes]) -> None:
    parts.append(_I32.pack(len(texts)))
    for text in texts:
        _encode_string(text, parts)


def _encode_opt_int(value: int | None, parts: list[bytes]) -> None:
    if value is not None:  # absent: the last field of a shorter body
        parts.append(_I32.pack(value))


# how each kind of field is written (as h11's WRITERS): the value, the body's parts so far
WRITERS: Final[dict[str, Callable[[Any, list[bytes]], None]]] = {
    "uuid": lambda value, parts: parts.append(value.bytes),
    "long": lambda value, parts: parts.append(_I64.pack(value)),
    "int": lambda value, parts: parts.append(_I32.pack(value)),
    "opt_int": _encode_opt_int,
    "str": _encode_string,
    "bool": lambda value, parts: parts.append(bytes((int(value),))),
    "byte": lambda value, parts: parts.append(bytes((int(value),))),
    "strings": _encode_strings,
    "rest": lambda value, parts: parts.append(bytes(value)),
}


def encode_body(message: Message) -> bytes:
    parts: list[bytes] = []
    for name, kind in message.FIELDS:
        value = getattr(message, name)
        try:
            WRITERS[kind](value, parts)
        except (struct.error, ValueError, AttributeError, TypeError) as e:
            raise LocalProtocolError(f"{type(message).__name__}.{name} = {value!r:.80} cannot be encoded: {e}") from None
    return b"".join(parts)


def encode(message: Message) -> bytes:
    body = encode_body(message)
    if len(body) > MAX_MESSAGE_SIZE:
        raise LocalProtocolError(
            f"{type(message).__name__} of {len(body)} bytes exceeds the message size limit {MAX_MESSAGE_SIZE}"
        )
    return HEADER.pack(message.TYPE, len(body)) + body


class _BodyReader:
    """Where decoding a message's body has got to: each field kind's reader takes its field from `pos` on."""

    __slots__ = ("cls", "body", "view", "pos", "end")

    def __init__(self, cls: type[Message], body: bytes | memoryview) -> None:
        self.cls = cls
        self.body = body
        self.view = memoryview(body)
        self.pos = 0
        self.end = len(self.view)

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.end:
            raise SegmentProtocolError(f"{self.cls.__name__} of {self.end} bytes is too short for its {what}")

    def read_uuid(self, name: str) -> uuid.UUID:
        self.need(16, name)
        self.pos += 16
        return uuid.UUID(bytes=bytes(self.view[self.pos - 16 : self.pos]))

    def read_long(self, name: str) -> int:
        self.need(8, name)
        self.pos += 8
        return _I64.unpack_from(self.view, self.pos - 8)[0]

    def read_int(self, name: str) -> int:
        self.need(4, name)
        self.pos += 4
        return _I32.unpack_from(self.view, self.pos - 4)[0]

    def read_opt_int(self, name: str) -> int | None:
        return None if self.pos == self.end else self.read_int(name)

    def read_str(self, what: str) -> str:
        self.need(2, what)
        (n,) = _U16.unpack_from(self.view, self.pos)
        self.need(2 + n, what)
        text = decode_modified_utf8(self.view[self.pos + 2 : self.pos + 2 + n])
        self.pos += 2 + n
        return text

    def read_bool(self, name: str) -> bool:
        self.need(1, name)
        value = self.view[self.pos]
        if value > 1:
            raise SegmentProtocolError(f"{self.cls.__name__}.{name} is {value}, not a boolean 0 or 1")
        self.pos += 1
        return bool(value)

    def read_byte(self, name: str) -> int:
        self.need(1, name)
        self.pos += 1
        return self.view[self.pos - 1]

    def read_strings(self, name: str) -> tuple[str, ...]:
        self.need(4, name)
        (count,) = _I32.unpack_from(self.view, self.pos)
        self.pos += 4
        if count < 0 or count * 2 > self.end - self.pos:
            raise SegmentProtocolError(f"{self.cls.__name__} announces {count} strings in {self.end - self.pos} bytes")
        return tuple(self.read_str(name) for _ in range(count))

    def read_rest(self, name: str) -> bytes:
        body = self.body
        value = body if self.pos == 0 and isinstance(body, bytes) else bytes(self.view[self.pos :])
        self.pos = self.end
        return value


# how each kind of field is read (as h11's READERS)
READERS: Final[dict[str, Callable[[_BodyReader, str], Any]]] = {
    "uuid": _BodyReader.read_uuid,
    "long": _BodyReader.read_long,
    "int": _BodyReader.read_int,
    "opt_int": _BodyReader.read_opt_int,
    "str": _BodyReader.read_str,
    "bool": _BodyReader.read_bool,
    "byte": _BodyReader.read_byte,
    "strings": _BodyReader.read_strings,
    "rest": _BodyReader.read_rest,
}


def decode_body(type_code: int, body: bytes | memoryview) -> Message:
    """One message from its type and body; a body of the wrong shape is the peer's error."""
    cls = MESSAGE_TYPES.get(type_code)
    if cls is None:
        raise SegmentProtocolError(f"unknown message type {type_code}")
    reader = _BodyReader(cls, body)
    values: list[Any] = [READERS[kind](reader, name) for name, kind in cls.FIELDS]
    pos, end = reader.pos, reader.end
    if pos != end:
        raise SegmentProtocolError(f"{cls.__name__} has {end - pos} bytes after its last field")
    if cls is PartialMessage:
        if values[0] > PartialKind.END:
            raise SegmentProtocolError(f"PartialMessage kind {values[0]} is not Begin (0), Middle (1) or End (2)")
        values[0] = PartialKind(values[0])
    if cls is SegmentRead and values[2] > 3:
        raise SegmentProtocolError(f"SegmentRead flags {values[2]:#x} has unknown bits")
    message = cls(*values)
    _check_values(message)
    return message


def segment_read_fields(body: bytes | bytearray | memoryview) -> int:
    """Where a SegmentRead body's data begins (after its segment name, offset and flags); 0 when the body
    is too short to tell (decode_body then says what is wrong)."""
    if len(body) < 2:
        return 0
    end = 2 + _U16.unpack_from(body, 0)[0] + 8 + 1
    return end if end <= len(body) else 0


def decode_segment_read(body: bytearray | memoryview) -> SegmentRead:
    """A SegmentRead whose data is a view of `body`, not a copy (a reply carries up to 2 MiB): the fields are
    checked as decode_body checks them. The caller must not change `body` while the data is in use."""
    fields = segment_read_fields(body)
    view = memoryview(body)
    if not fields:
        message = decode_body(SegmentRead.TYPE, view)
        assert isinstance(message, SegmentRead)
        return message
    head = decode_body(SegmentRead.TYPE, view[:fields])
    assert isinstance(head, SegmentRead)
    return SegmentRead(head.segment, head.offset, head.flags, view[fields:])  # type: ignore[arg-type]


def _check_values(message: Message) -> None:
    if isinstance(message, ReadSegment):
        if message.offset < 0 or message.suggested_length < 0 or (message.wait_ms or 0) < 0:
            raise SegmentProtocolError(f"negative offset, length or wait in {message!r:.200}")
    elif isinstance(message, BeginAppendBlock | EndAppendBlock):
        length = message.data_length if isinstance(message, BeginAppendBlock) else message.block_length
        if message.connection_offset < 0 or length < 0:
            raise SegmentProtocolError(f"negative offset or length in {type(message).__name__}")
    elif isinstance(message, TruncateSegment) and message.offset < 0:
        raise SegmentProtocolError(f"negative offset in {message!r:.200}")


def event_messages(bodies: list[bytes] | tuple[bytes, ...]) -> bytes:
    """Event messages back to back: exactly the frames the store keeps."""
    pending: list[bytes] = []
    append_event_frames(pending, bodies)
    return b"".join(pending)


def append_event_frames_in_python(pending: list[bytes], bodies: list[bytes] | tuple[bytes, ...]) -> int:
    """Append each body's Event header and the body (as bytes: they are kept, so they must not change)
    to `pending`; returns the bytes added. On an error (a body that is not a buffer), none are."""
    pack = HEADER.pack
    added = 0
    before = len(pending)
    try:
        for body in bodies:
            if type(body) is not bytes:
                body = bytes(memoryview(body))  # a buffer (bytes(5) would be five zero bytes)
            pending.append(pack(_EVENT_TYPE, len(body)))
            pending.append(body)
            added += HEADER_SIZE + len(body)
    except BaseException:
        del pending[before:]
        raise
    return added


WALK_TOO_LARGE: Final = 1  # walk_events' stops: an Event longer than max_event_size
WALK_CROSSES: Final = 2  # an Event that crosses the end of its block


def walk_events_in_python(data: bytes | bytearray | memoryview, start: int, avail: int, remaining: int,
                          max_event: int) -> tuple[int, int, int]:
    """The whole Event messages at `data[start:start + avail]` that fit in the `remaining` bytes of
    their block: (bytes taken, events, stop). `stop` is 0, or WALK_TOO_LARGE / WALK_CROSSES for the
    Event at `start + taken`. It stops at anything else (a PartialMessage, an incomplete event)."""
    pos = 0
    unpack = HEADER.unpack_from
    events = 0
    while remaining and pos + HEADER_SIZE <= avail:
        type_code, length = unpack(data, start + pos)
        if type_code != _EVENT_TYPE:
            break
        if length > max_event:
            return pos, events, WALK_TOO_LARGE
        size = HEADER_SIZE + length
        if size > remaining:
            return pos, events, WALK_CROSSES
        if pos + size > avail:
            break
        pos += size
        remaining -= size
        events += 1
    return pos, events, 0


# The same loops in C (setup.py builds it; it is optional): for 1 KiB events, 435 us per MiB
# walked in Python and 342 us framed (the client's per-event loop), against a few us in C.
_scan = _native.load("logport.protocols._segment_scan")
append_event_frames = _scan.append_event_frames if _scan else append_event_frames_in_python
walk_events = _scan.walk_events if _scan else walk_events_in_python


def encode_block(connection_id: uuid.UUID, connection_offset: int, events: bytes, *, split_at: int | None = None,
                 fragment: int = 0) -> bytes:
    """BeginAppendBlock + Event messages + EndAppendBlock for `events` (whole Event messages).

    With `split_at` (an offset inside the last event message), the block ends there:
    the last event goes out as PartialMessage Begin inside the block and as
    PartialMessage End after EndAppendBlock, as the protocol document describes.
    `fragment` > 0 cuts the split event further into Middle fragments of that size.
    """
    end = connection_offset + len(events)
    if split_at is None:
        return (encode(BeginAppendBlock(connection_id, connection_offset, len(events))) + events
                + encode(EndAppendBlock(connection_id, end, len(events))))
    # the last event message starts at `last`; its first `split_at - last` bytes go into the block
    last = max((at for at, _, _ in iter_frames(events)), default=0)
    if not last < split_at < len(events):
        raise LocalProtocolError(f"split_at {split_at} is not inside the last event message ({last}..{len(events)})")
    head, tail = events[last:split_at], events[split_at:]
    pieces: list[bytes] = []
    if fragment > 0:
        pieces = [tail[i : i + fragment] for i in range(0, len(tail), fragment)]
    else:
        pieces = [tail]
    inside = events[:last] + encode(PartialMessage(PartialKind.BEGIN, head))
    after = b"".join(
        encode(PartialMessage(PartialKind.END if i == len(pieces) - 1 else PartialKind.MIDDLE, piece))
        for i, piece in enumerate(pieces)
    )
    return (encode(BeginAppendBlock(connection_id, connection_offset, len(inside))) + inside
            + encode(EndAppendBlock(connection_id, end, len(events))) + after)


def split_into_partials(message: Message, size: int) -> bytes:
    """`message` sent as PartialMessage fragments of `size` bytes each."""
    whole = encode(message)
    pieces = [whole[i : i + size] for i in range(0, len(whole), size)]
    if len(pieces) == 1:
        return encode(PartialMessage(PartialKind.BEGIN, pieces[0])) + encode(PartialMessage(PartialKind.END, b""))
    kinds = [PartialKind.BEGIN] + [PartialKind.MIDDLE] * (len(pieces) - 2) + [PartialKind.END]
    return b"".join(encode(PartialMessage(k, p)) for k, p in zip(kinds, pieces, strict=True))


# --- the connection state machine ---


@dataclass(frozen=True, slots=True)
class AppendBlock:
    """A whole append block as the server receives it: the Event messages, ready to store."""

    connection_id: uuid.UUID
    start_offset: int  # connection offset before the block
    end_offset: int  # connection offset after it
    # the block's Event messages (frames in the store's format), never changed; received in place, it is
    # the buffer the connection's `allocate` gave (the listener takes it back once the store wrote it)
    data: bytes | bytearray | memoryview
    event_count: int


@dataclass(frozen=True)
class Limits:
    max_message_size: int = MAX_MESSAGE_SIZE
    max_event_size: int = MAX_EVENT_SIZE
    max_block_size: int = MAX_BLOCK_SIZE


class Role(enum.Enum):
    CLIENT = "client"  # receives replies
    SERVER = "server"  # receives requests


class State(enum.Enum):
    IDLE = "idle"  # between messages
    IN_BLOCK = "in block"  # reading the data of an append block
    BLOCK_DATA_DONE = "block data done"  # EndAppendBlock must come next
    SPLIT_EVENT = "split event"  # EndAppendBlock came; the split last event is still partial


# the legal transitions of the server side (a client only ever reads IDLE -> IDLE)
TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.IDLE, "BeginAppendBlock"): State.IN_BLOCK,
    (State.IDLE, "BeginAppendBlock (empty)"): State.BLOCK_DATA_DONE,
    (State.IN_BLOCK, "Event"): State.IN_BLOCK,
    (State.IN_BLOCK, "PartialMessage"): State.IN_BLOCK,
    (State.IN_BLOCK, "last byte of the block"): State.BLOCK_DATA_DONE,
    (State.BLOCK_DATA_DONE, "EndAppendBlock"): State.IDLE,
    (State.BLOCK_DATA_DONE, "EndAppendBlock (split event open)"): State.SPLIT_EVENT,
    (State.SPLIT_EVENT, "PartialMessage Middle"): State.SPLIT_EVENT,
    (State.SPLIT_EVENT, "PartialMessage End"): State.IDLE,
    (State.SPLIT_EVENT, "any other message but BeginAppendBlock"): State.SPLIT_EVENT,
}


@dataclass
class _Block:
    begin: BeginAppendBlock
    remaining: int  # bytes of the block's data still to come (the split event's rest not counted)
    # pieces of immutable received bytes (no copy until the one join at the end)
    chunks: list[bytes | memoryview] = field(default_factory=list)
    filled: int = 0  # bytes of whole Event messages so far
    events: int = 0
    end: EndAppendBlock | None = None
    # receiving in place (get_buffer): the block's bytes land here; [0, filled) are whole events,
    # [filled, filled + tail) the start of the next one
    region: bytearray | memoryview | None = None
    tail: int = 0
    in_place_ok: bool = True  # false once a PartialMessage showed up inside the block

    def add(self, chunk: bytes | memoryview) -> None:
        self.chunks.append(chunk)
        self.filled += len(chunk)

    def data(self) -> bytes | bytearray | memoryview:
        if self.region is not None:
            return self.region  # whole: filled == len(region) once the block's data is in
        return b"".join(self.chunks)


_SCRATCH = threading.local()

# Between two append blocks received in place, the next read takes just an EndAppendBlock and a
# BeginAppendBlock (36 bytes each), so that the following block's data lands in its own buffer: a
# 256 KiB read into the scratch buffer carried the next block's first 256 KiB with it, which were then
# copied four times (out of the scratch, into the receive buffer, out as whole events, into the block's
# buffer); with 1 MiB blocks, a quarter of every byte. Only after a block of at least _LARGE_BLOCK bytes
# (one more read per such block costs nothing); after smaller ones, reads stay large.
_BETWEEN_BLOCKS_READ: Final = 2 * (HEADER_SIZE + 16 + 8 + 4)
_LARGE_BLOCK: Final = 64 * 1024


def _scratch() -> memoryview:
    """The receive buffer outside blocks, one per thread (not per connection: 10k idle connections
    would hold 2.5 GiB). Safe to share: the event loop fills it and calls buffer_updated, which
    copies the bytes out, in one step."""
    view: memoryview | None = getattr(_SCRATCH, "view", None)
    if view is None:
        view = _SCRATCH.view = memoryview(bytearray(256 * 1024))
    return view


class Connection:
    """One end of a segment-protocol connection; `role` says which messages it receives.

    `allocate(n)` gives the writable buffer of exactly n bytes that an append block is received
    into (a server's pool of them); the default is a new bytearray.
    """

    def __init__(self, role: Role, limits: Limits | None = None,
                 allocate: Callable[[int], bytearray | memoryview] = bytearray) -> None:
        self.role = role
        self.limits = limits or Limits()
        self._allocate = allocate
        self.state = State.IDLE
        self._buffer = ReceiveBuffer()
        self._block: _Block | None = None
        self._partial: bytearray | None = None  # an open PartialMessage's data so far
        self._partial_in_block = False
        self._closed = False
        self._incoming = REQUESTS if role is Role.SERVER else REPLIES
        self._into_region = False  # the last get_buffer handed out the block's own buffer
        self._after_large_block = False  # the last block came in place and was large: see _BETWEEN_BLOCKS_READ

    # -- receiving --

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            self._closed = True
            return
        if self.state is State.IN_BLOCK and not self._buffer:
            block = self._block
            assert block is not None
            if block.region is not None:  # receiving in place: copy in as get_buffer would have
                view = self._region_view(block)
                n = min(len(view), len(data))
                view[:n] = memoryview(data)[:n]
                self._region_filled(block, n)
                if n < len(data):
                    self._buffer += memoryview(data)[n:]
                return
            # the hot path: whole events go straight from the received bytes into the block, one copy
            taken = self._take_events(block, data, 0, len(data))
            if taken < len(data):
                self._buffer += memoryview(data)[taken:]
            return
        self._buffer += data

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """For `asyncio.BufferedProtocol`: where the next received bytes should go.

        Inside an append block with nothing else pending, that is the block's own
        buffer, so its events are received in place and stored with no copy.
        """
        block = self._block
        if self.state is State.IN_BLOCK and block is not None and block.in_place_ok and self._only_an_event_start():
            if block.region is None:
                block.region = self._allocate(block.filled + block.remaining)
                at = 0
                for chunk in block.chunks:
                    block.region[at : at + len(chunk)] = chunk
                    at += len(chunk)
                block.chunks = []
            if self._buffer:  # the start of the next event: it continues in place
                start = block.filled + block.tail
                pending = self._buffer.extract_all()
                block.region[start : start + len(pending)] = pending
                block.tail += len(pending)
            view = self._region_view(block)
            if view:
                self._into_region = True
                return view
        self._into_region = False
        if self._between_large_blocks():
            return _scratch()[:_BETWEEN_BLOCKS_READ]
        return _scratch()

    def _between_large_blocks(self) -> bool:
        """A large block came in place (or its data just did), and no other message came after it."""
        state = self.state
        if state is State.IDLE:
            return self._after_large_block
        if state is State.BLOCK_DATA_DONE:
            block = self._block
            return block is not None and block.region is not None and block.filled >= _LARGE_BLOCK
        return False

    def buffer_updated(self, nbytes: int) -> None:
        """For `asyncio.BufferedProtocol`: `nbytes` were written into the last get_buffer()."""
        if self._into_region:
            self._into_region = False
            block = self._block
            assert block is not None
            self._region_filled(block, nbytes)
        elif nbytes:
            self.receive_data(bytes(_scratch()[:nbytes]))

    def _only_an_event_start(self) -> bool:
        """The receive buffer holds nothing, or just the beginning of one Event of the current block."""
        n = len(self._buffer)
        if n == 0:
            return True
        block = self._block
        assert block is not None
        if n >= block.remaining - block.tail:
            return False
        header = self._buffer.peek_header()
        return header is None or header[0] == _EVENT_TYPE

    @staticmethod
    def _region_view(block: _Block) -> memoryview:
        assert block.region is not None
        start = block.filled + block.tail
        return memoryview(block.region)[start : block.filled + block.remaining]

    def _region_filled(self, block: _Block, nbytes: int) -> None:
        """Check the events that arrived in place; anything but Events goes to the receive buffer."""
        region = block.region
        assert region is not None
        block.tail += nbytes
        taken = self._take_events(block, region, block.filled, block.tail, in_place=True)
        block.tail -= taken
        if block.tail >= HEADER_SIZE and HEADER.unpack_from(region, block.filled)[0] != _EVENT_TYPE:
            # a PartialMessage inside the block: from here on, the ordinary (copying) path
            self._buffer += memoryview(region)[block.filled : block.filled + block.tail]
            block.chunks = [memoryview(region)[: block.filled]]
            block.region = None
            block.tail = 0
            block.in_place_ok = False

    def _take_events(self, block: _Block, data: bytes | bytearray | memoryview, start: int, avail: int,
                     in_place: bool = False) -> int:
        """Copy the whole Event messages at `data[start:start + avail]` into the block; returns the bytes taken.

        Stops at anything else (a PartialMessage, an incomplete event) for the slow path to look at.
        `in_place`: they are in the block's own buffer already, only check them.
        """
        remaining = block.remaining
        pos, events, stop = walk_events(data, start, avail, remaining, self.limits.max_event_size)
        if stop:
            length = HEADER.unpack_from(data, start + pos)[1]
            if stop == WALK_TOO_LARGE:
                raise LimitExceeded("event", length, "max_event_size", self.limits.max_event_size)
            raise SegmentProtocolError(f"Event of {HEADER_SIZE + length} bytes crosses the end of its block "
                                       f"({remaining - pos} bytes left); use PartialMessage")
        if pos:
            if in_place:
                block.filled += pos
            elif isinstance(data, bytes):
                block.add(data if pos == len(data) else memoryview(data)[start : start + pos])
            else:  # a buffer that will change: copy out
                block.add(bytes(memoryview(data)[start : start + pos]))
            block.events += events
            block.remaining = remaining = remaining - pos
            if remaining == 0:
                self._move("last byte of the block")
        return pos

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def next_event(self) -> Message | AppendBlock | _NeedData:
        """The next whole message (or assembled AppendBlock), or NEED_DATA."""
        while True:
            if self.state is State.IN_BLOCK:
                result = self._read_block_data()
                if result is not None:
                    return result
                continue
            header = self._buffer.peek_header()
            if header is None:
                return self._need_data()
            type_code, length = header
            self._check_length(type_code, length)
            if len(self._buffer) < HEADER_SIZE + length:
                return self._need_data()
            buf = self._buffer
            with memoryview(buf.raw) as view:  # one copy of the body (a SegmentRead carries up to 2 MiB)
                body = bytes(view[buf.start + HEADER_SIZE : buf.start + HEADER_SIZE + length])
            buf.consumed(HEADER_SIZE + length)
            message = decode_body(type_code, body)
            result = self._receive_message(message)
            if result is not None:
                return result

    def _move(self, label: str) -> None:
        new = TRANSITIONS.get((self.state, label))
        if new is None:
            raise SegmentProtocolError(f"{label} is not allowed in state {self.state.value!r}")
        self.state = new

    def _need_data(self) -> _NeedData:
        if self._closed and self._buffer:
            raise SegmentProtocolError(f"connection closed inside a message ({len(self._buffer)} bytes pending)")
        return NEED_DATA

    def _check_length(self, type_code: int, length: int) -> None:
        limit = self.limits.max_message_size
        if type_code == _EVENT_TYPE:
            if length > self.limits.max_event_size:
                raise LimitExceeded("event", length, "max_event_size", self.limits.max_event_size)
        elif length > limit:
            raise LimitExceeded("message", length, "max_message_size", limit)

    def _receive_message(self, message: Message) -> Message | AppendBlock | None:
        if isinstance(message, PartialMessage):
            return self._receive_partial(message, in_block=False)
        if isinstance(message, KeepAlive):
            return message
        if not isinstance(message, self._incoming):
            raise SegmentProtocolError(f"{type(message).__name__} is not a message a {self.role.value} receives")
        if isinstance(message, Event):
            raise SegmentProtocolError("Event outside an append block")
        if isinstance(message, BeginAppendBlock):
            if self.state is State.SPLIT_EVENT:
                raise SegmentProtocolError("BeginAppendBlock before the split last event of the previous block ended")
            if self._partial is not None:
                raise SegmentProtocolError("BeginAppendBlock while a PartialMessage is open")
            if message.data_length > self.limits.max_block_size:
                raise LimitExceeded("append block", message.data_length, "max_block_size", self.limits.max_block_size)
            if 0 < message.data_length < HEADER_SIZE:
                raise SegmentProtocolError(f"BeginAppendBlock data length {message.data_length} cannot hold a message")
            self._move("BeginAppendBlock" if message.data_length else "BeginAppendBlock (empty)")
            self._block = _Block(message, message.data_length)
            return None
        if isinstance(message, EndAppendBlock):
            return self._end_block(message)
        self._after_large_block = False  # another request: the next reads take what comes
        if self.state is State.BLOCK_DATA_DONE:
            raise SegmentProtocolError(f"{type(message).__name__} where EndAppendBlock must follow the block's data")
        if self.state is State.SPLIT_EVENT:
            self._move("any other message but BeginAppendBlock")
        return message

    def _end_block(self, end: EndAppendBlock) -> AppendBlock | None:
        block = self._block
        if self.state is not State.BLOCK_DATA_DONE or block is None:
            raise SegmentProtocolError(f"EndAppendBlock without a BeginAppendBlock (state {self.state.value!r})")
        begin = block.begin
        if end.connection_id != begin.connection_id:
            raise SegmentProtocolError(
                f"EndAppendBlock for connection {end.connection_id} ends a block of {begin.connection_id}"
            )
        if end.connection_offset != begin.connection_offset + end.block_length:
            raise SegmentProtocolError(
                f"EndAppendBlock offset {end.connection_offset} != block start {begin.connection_offset}"
                f" + block length {end.block_length}"
            )
        if end.block_length > self.limits.max_block_size + self.limits.max_event_size + HEADER_SIZE:
            raise LimitExceeded("append block", end.block_length, "max_block_size", self.limits.max_block_size)
        block.end = end
        if self._partial is not None:
            missing = end.block_length - block.filled
            if missing <= len(self._partial):
                raise SegmentProtocolError(
                    f"EndAppendBlock length {end.block_length} leaves no room for the split event"
                )
            self._move("EndAppendBlock (split event open)")
            return None
        if block.filled != end.block_length:
            raise SegmentProtocolError(
                f"EndAppendBlock says {end.block_length} bytes of events; the block held {block.filled}"
            )
        return self._finish_block("EndAppendBlock")

    def _finish_block(self, label: str) -> AppendBlock:
        block = self._block
        assert block is not None and block.end is not None
        self._move(label)
        self._block = None
        self._after_large_block = block.region is not None and block.filled >= _LARGE_BLOCK
        return AppendBlock(block.begin.connection_id, block.begin.connection_offset, block.end.connection_offset,
                           block.data(), block.events)

    def _receive_partial(self, message: PartialMessage, *, in_block: bool) -> Message | AppendBlock | None:
        kind = message.kind
        if kind is PartialKind.BEGIN:
            if self._partial is not None:
                raise SegmentProtocolError("PartialMessage Begin before the previous partial message ended")
            self._partial = bytearray(message.data)
            self._partial_in_block = in_block
        else:
            if self._partial is None:
                raise SegmentProtocolError(f"PartialMessage {kind.name.title()} without a Begin")
            if in_block and not self._partial_in_block:
                raise SegmentProtocolError("a partial message begun outside a block continues inside one")
            if self._partial_in_block and not in_block and self.state is not State.SPLIT_EVENT:
                raise SegmentProtocolError("the split event of a block continues before its EndAppendBlock")
            self._partial += message.data
            if self.state is State.SPLIT_EVENT and kind is PartialKind.MIDDLE:
                self._move("PartialMessage Middle")
        limit = self.limits.max_message_size + HEADER_SIZE
        if self._partial_in_block:
            limit = self.limits.max_event_size + HEADER_SIZE
        if len(self._partial) > limit:
            raise LimitExceeded("reassembled partial message", len(self._partial), "max_message_size", limit - HEADER_SIZE)
        if kind is not PartialKind.END:
            return None
        whole = bytes(self._partial)
        self._partial = None
        if len(whole) < HEADER_SIZE:
            raise SegmentProtocolError(f"reassembled partial message of {len(whole)} bytes has no whole header")
        type_code, length = HEADER.unpack_from(whole, 0)
        if length != len(whole) - HEADER_SIZE:
            raise SegmentProtocolError(
                f"reassembled partial message says {length} bytes but holds {len(whole) - HEADER_SIZE}"
            )
        if self._partial_in_block:
            if type_code != _EVENT_TYPE:
                raise SegmentProtocolError(f"a partial message inside a block holds type {type_code}, not an Event")
            self._check_length(type_code, length)
            block = self._block
            assert block is not None
            block.add(whole)
            block.events += 1
            if self.state is State.SPLIT_EVENT:
                assert block.end is not None
                if block.filled != block.end.block_length:
                    raise SegmentProtocolError(
                        f"EndAppendBlock says {block.end.block_length} bytes of events;"
                        f" the block held {block.filled}"
                    )
                return self._finish_block("PartialMessage End")
            return None
        self._check_length(type_code, length)
        inner = decode_body(type_code, memoryview(whole)[HEADER_SIZE:])
        if isinstance(inner, PartialMessage):
            raise SegmentProtocolError("a partial message holds another partial message")
        return self._receive_message(inner)

    def _read_block_data(self) -> Message | AppendBlock | None | _NeedData:
        """Consume the block's messages that are wholly here; None when the state moved on."""
        block = self._block
        assert block is not None
        buf = self._buffer
        taken = self._take_events(block, buf.raw, buf.start, len(buf))  # whole events, copied in one go
        if taken:
            buf.consumed(taken)
        remaining = block.remaining
        if remaining == 0:
            return None
        if remaining < HEADER_SIZE:
            raise SegmentProtocolError(f"{remaining} bytes left in the block cannot hold a message header")
        header = buf.peek_header()
        if header is None:
            return self._need_data()
        type_code, length = header
        if type_code == _EVENT_TYPE:
            return self._need_data()  # an event still arriving
        if type_code != PartialMessage.TYPE:
            raise SegmentProtocolError(f"message type {type_code} inside an append block")
        self._check_length(type_code, length)
        if HEADER_SIZE + length > remaining:
            raise SegmentProtocolError(
                f"PartialMessage of {HEADER_SIZE + length} bytes crosses the end of its block ({remaining} bytes left)"
            )
        if len(buf) < HEADER_SIZE + length:
            return self._need_data()
        buf.skip(HEADER_SIZE)
        message = decode_body(type_code, buf.extract(length))
        block.remaining -= HEADER_SIZE + length
        assert isinstance(message, PartialMessage)
        self._move("PartialMessage")
        result = self._receive_partial(message, in_block=True)
        if block.remaining == 0:
            self._move("last byte of the block")
        return result

    # -- sending --

    def send(self, message: Message) -> bytes:
        allowed: tuple[type[Message], ...]
        if self.role is Role.CLIENT:
            allowed = (*REQUESTS, *BOTH)
        else:
            allowed = (*REPLIES, *BOTH)
        if not isinstance(message, allowed):
            raise LocalProtocolError(f"a {self.role.value} does not send {type(message).__name__}")
        return encode(message)


__all__ = [
    "NEED_DATA", "AppendBlock", "Connection", "Limits", "Role", "SegmentProtocolError", "State",
    "encode", "decode_body", "encode_block", "event_messages", "append_event_frames", "split_into_partials",
    "is_message_boundary",
    *(cls.__name__ for cls in MESSAGE_TYPES.values()),
]
