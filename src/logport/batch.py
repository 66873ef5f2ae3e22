"""The stored payload: one Fluentd PackedForward message `[tag, entries, option]` per Event.

`entries` is bin: concatenated msgpack `[time, record]`, time an EventTime
(ext 0: uint32 BE seconds, uint32 BE nanoseconds). Decoding also accepts what a
Forward client may have sent and was stored unchanged: integer times and
Forward v1.5 `[[time, meta], record]` entries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from logport.errors import BatchDecodeError, brief

EVENT_TIME_EXT = 0
_EVENT_TIME = struct.Struct(">II")
_NANOS = 1_000_000_000
# How deep a received event may nest in maps and arrays (its outermost is level 1), for every listener
# (Forward's JSON mode, Lumberjack): well inside json.loads' recursion, and what is stored stays well
# inside the 1024 levels msgpack unpacks.
MAX_NESTING_DEPTH = 512


@dataclass(frozen=True, slots=True)
class Entry:
    seconds: int
    nanos: int
    record: Any
    meta: dict[str, Any] | None = None

    @property
    def time_ns(self) -> int:
        return self.seconds * _NANOS + self.nanos


@dataclass(frozen=True, slots=True)
class StoredBatch:
    tag: str
    entries: bytes
    option: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Entry]:
        return iter_entries(self.entries)

    @property
    def size(self) -> int | None:
        size = self.option.get("size")
        return size if isinstance(size, int) else None


def event_time(seconds: int, nanos: int = 0) -> msgpack.ExtType:
    return msgpack.ExtType(EVENT_TIME_EXT, _EVENT_TIME.pack(seconds & 0xFFFFFFFF, nanos))


def split_ns(time_ns: int) -> tuple[int, int]:
    return divmod(time_ns, _NANOS)


# surrogateescape: a tag or string that arrived as invalid UTF-8 (kept with surrogateescape by
# a decoder) is stored as the very bytes the peer sent.
_packer = msgpack.Packer(use_bin_type=True, autoreset=True, unicode_errors="surrogateescape")


# The head of an entry, `[EventTime, ...`: fixarray 2, fixext8 type 0, uint32 seconds, uint32 nanos.
# Listeners' hot paths pack it directly instead of building an ExtType per event.
ENTRY_HEAD = struct.Struct(">BBBII")


def entry_head(seconds: int, nanos: int) -> bytes:
    return ENTRY_HEAD.pack(0x92, 0xD7, EVENT_TIME_EXT, seconds & 0xFFFFFFFF, nanos)


def pack_entry(seconds: int, nanos: int, record: Any) -> bytes:
    """One `[EventTime, record]` entry."""
    return ENTRY_HEAD.pack(0x92, 0xD7, EVENT_TIME_EXT, seconds & 0xFFFFFFFF, nanos) + _packer.pack(record)


def pack_entries(entries: Iterable[tuple[int, int, Any]]) -> bytes:
    """Concatenated `[EventTime, record]` entries from (seconds, nanos, record) triples."""
    head = ENTRY_HEAD.pack
    pack = _packer.pack
    return b"".join(head(0x92, 0xD7, EVENT_TIME_EXT, s & 0xFFFFFFFF, ns) + pack(r) for s, ns, r in entries)


def encode_batch(tag: str, entries: bytes | Iterable[tuple[int, int, Any]], option: dict[str, Any]) -> bytes:
    """The stored body. `entries` is already-packed bytes (stored as they are) or triples to pack."""
    if not isinstance(entries, bytes | bytearray | memoryview):
        entries = pack_entries(entries)
    return encode_batch_pieces(tag, [entries], option)


def encode_batch_pieces(tag: str, pieces: Sequence[bytes | bytearray | memoryview], option: dict[str, Any]) -> bytes:
    """The stored body `[tag, entries, option]`, the entries given as packed pieces in order. One join
    copies them once; msgpack's packer would copy them twice (into its buffer, then out of it), a
    measurable share of a 180 KB Forward chunk's time."""
    head = batch_head(tag, sum(len(p) for p in pieces))
    return b"".join((head, *pieces, _packer.pack(option)))


def batch_head(tag: str, entries_size: int) -> bytes:
    """The stored body's bytes before its entries: `[tag, ` and the bin header of `entries_size` bytes. A listener
    that frames bodies itself joins head, entries and `pack_option(option)` in one copy (servers/forward.py)."""
    bin_type, width = (0xC4, 1) if entries_size < 0x100 else (0xC5, 2) if entries_size < 0x10000 else (0xC6, 4)
    return b"\x93" + _packer.pack(tag) + bytes((bin_type,)) + entries_size.to_bytes(width, "big")


def pack_option(option: dict[str, Any]) -> bytes:
    """The stored body's last element."""
    return _packer.pack(option)


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack's ext_hook for stored records: EventTime as (seconds, nanoseconds), other exts as ExtType."""
    if code == EVENT_TIME_EXT and len(data) == 8:
        return _EVENT_TIME.unpack(data)
    return msgpack.ExtType(code, data)


def decode_batch(body: bytes | memoryview) -> StoredBatch:
    """Read `[tag, entries, option]`; the entries stay packed until iterated."""
    try:
        obj = msgpack.unpackb(body, raw=False, unicode_errors="replace", ext_hook=ext_hook, strict_map_key=False)
    except Exception as e:
        raise BatchDecodeError(f"stored event is not a msgpack batch: {e}") from None
    if not (isinstance(obj, list) and len(obj) in (2, 3) and isinstance(obj[0], str)):
        raise BatchDecodeError("stored event is not a [tag, entries, option] batch")
    entries = obj[1]
    if isinstance(entries, str):  # a str payload is binary all the same (Fluentd sends str32)
        entries = entries.encode("utf-8", "surrogateescape")
    if not isinstance(entries, bytes):
        raise BatchDecodeError("stored batch entries are not bin")
    option = obj[2] if len(obj) == 3 and isinstance(obj[2], dict) else {}
    return StoredBatch(obj[0], entries, option)


def time_of(value: Any) -> tuple[int, int]:
    """(seconds, nanos) of a Forward time: EventTime (decoded by ext_hook) or integer seconds."""
    if type(value) is tuple:  # EventTime as ext_hook decodes it (ExtType is a tuple subclass: not that)
        return value[0], value[1]
    if isinstance(value, int) and not isinstance(value, bool):
        return value, 0
    raise BatchDecodeError(f"entry time {value!r} is neither EventTime nor an integer")


def _hashable_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A map whose keys include arrays or maps (legal msgpack): such keys become their repr."""
    return {k if isinstance(k, str | int | float | bool | bytes | tuple | type(None)) else repr(k): v
            for k, v in pairs}


def _unpacker(entries: bytes, slow: bool) -> msgpack.Unpacker:
    """Strings that are not UTF-8 decode with U+FFFD: readers show them, they never fail on them."""
    extra: dict[str, Any] = {"object_pairs_hook": _hashable_keys} if slow else {}
    unpacker = msgpack.Unpacker(raw=False, unicode_errors="replace", ext_hook=ext_hook, strict_map_key=False,
                                max_buffer_size=0, **extra)
    unpacker.feed(entries)
    return unpacker


def iter_entries(entries: bytes) -> Iterator[Entry]:
    """The entries of a batch; anything that is not `[time, record]` raises BatchDecodeError."""
    done = 0
    slow = False
    while True:
        unpacker = _unpacker(entries, slow)
        try:
            for index, item in enumerate(unpacker):
                if index < done:
                    continue  # already yielded before the switch to the slow path
                yield _entry(item)
                done += 1
            return
        except TypeError:
            if slow:
                raise BatchDecodeError("entry has a map key that cannot be decoded") from None
            slow = True  # an unhashable map key: decode again, turning such keys into strings
        except ValueError as e:  # msgpack's ExtraData / FormatError / StackError
            raise BatchDecodeError(f"entries are not valid msgpack: {e}") from None


def _entry(item: Any) -> Entry:
    if not (isinstance(item, list) and len(item) == 2):
        raise BatchDecodeError(f"entry is not [time, record]: {brief(item, 80)}")
    t, record = item
    meta = None
    if isinstance(t, list) and len(t) == 2:  # Forward v1.5 [[time, meta], record]
        t, meta = t
    seconds, nanos = time_of(t)
    return Entry(seconds, nanos, record, meta if isinstance(meta, dict) else None)
