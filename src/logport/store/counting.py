"""How many events stored frames hold, as `logport segments` counts them: one per opaque event, a stored
batch's entries (its `size` option when it has one). `count_events` is the reference; the others give its
number without decoding what need not be: a body whose first byte opens no msgpack array is opaque, and a
batch as the listeners store it is counted from its option alone (its entries are not copied out). The store
keeps these counts per chunk (store/marks.py), so that `logport segments` need not walk the data.
"""

from __future__ import annotations

import struct
from typing import Final

import msgpack

from logport.batch import BatchDecodeError, decode_batch, ext_hook, iter_entries
from logport.store import frames

Buffer = bytes | bytearray | memoryview

ARRAY_HEADS: Final = frozenset((0x92, 0x93, 0xDC, 0xDD))  # a body that starts otherwise is no [tag, entries, option]
_OPTION_FAST_BYTES = 512  # an option this short nests too shallow for msgpack's depth limit, alone or in its body
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def count_events(body: bytes | memoryview) -> int:
    """Entries of a batch (its `size` option when it has one); 1 for an opaque event.

    A body that decodes as a batch but whose entries do not is opaque too: `logport cat` prints it as one
    raw event, so it counts as one.
    """
    try:
        batch = decode_batch(body)
        if batch.size is not None:
            return batch.size
        return sum(1 for _ in iter_entries(batch.entries))
    except BatchDecodeError:
        return 1


def count_body(body: Buffer) -> int:
    """count_events(body), fast for an opaque body and for a batch `[str, bin, {..."size": int...}]`."""
    if not body or body[0] not in ARRAY_HEADS:
        return 1
    size = _option_size(body)
    return size if size is not None else count_events(body if not isinstance(body, bytearray) else bytes(body))


def _option_size(body: Buffer) -> int | None:
    """The `size` of a `[tag, entries, option]` body whose tag is a str, its entries bin and its option a
    short map, read from the option alone; None for any other body (count_events decides)."""
    if body[0] != 0x93 or len(body) < 2:
        return None
    head = body[1]
    pos = 2
    try:
        if 0xA0 <= head <= 0xBF:
            pos += head & 0x1F
        elif head == 0xD9:
            pos += 1 + _U8.unpack_from(body, pos)[0]
        elif head == 0xDA:
            pos += 2 + _U16.unpack_from(body, pos)[0]
        elif head == 0xDB:
            pos += 4 + _U32.unpack_from(body, pos)[0]
        else:
            return None
        kind = body[pos]
        if kind == 0xC4:
            pos += 2 + _U8.unpack_from(body, pos + 1)[0]
        elif kind == 0xC5:
            pos += 3 + _U16.unpack_from(body, pos + 1)[0]
        elif kind == 0xC6:
            pos += 5 + _U32.unpack_from(body, pos + 1)[0]
        else:
            return None
    except (struct.error, IndexError):
        return None
    if not 0 < len(body) - pos <= _OPTION_FAST_BYTES:
        return None
    try:  # decode_batch's options: whatever it would refuse in the option, this refuses too
        option = msgpack.unpackb(bytes(body[pos:]), raw=False, unicode_errors="replace", ext_hook=ext_hook,
                                 strict_map_key=False)
    except Exception:
        return None
    size = option.get("size") if isinstance(option, dict) else None
    return size if isinstance(size, int) else None


def scan_frames_in_python(data: Buffer) -> tuple[int, list[tuple[int, int]], int]:
    """The reference of `_eventscan.scan_frames`: over the whole frames of `data`, (Event frames whose body is
    opaque by its first byte, (offset, length) of every other Event body, where the whole frames end)."""
    view = memoryview(data)
    plain = 0
    others: list[tuple[int, int]] = []
    pos = 0
    end = len(view)
    unpack = frames.HEADER.unpack_from
    while pos + frames.HEADER_SIZE <= end:
        frame_type, length = unpack(view, pos)
        stop = pos + frames.HEADER_SIZE + length
        if stop > end:
            break
        if frame_type == frames.EVENT:
            if length and view[pos + frames.HEADER_SIZE] in ARRAY_HEADS:
                others.append((pos + frames.HEADER_SIZE, length))
            else:
                plain += 1
        pos = stop
    return plain, others, pos


try:
    from logport.store._eventscan import scan_frames
except ImportError:  # built without a C compiler: the same walk in Python (slower)
    scan_frames = scan_frames_in_python


def count_frames(data: Buffer) -> int:
    """Events in the whole frames of `data` (store records, and a torn frame at its end, count nothing)."""
    return count_whole_frames(data)[0]


def count_whole_frames(data: Buffer) -> tuple[int, int]:
    """(events in the whole frames of `data`, where those frames end)."""
    plain, others, end = scan_frames(data)
    if not others:
        return plain, end
    view = memoryview(data)
    return plain + sum(count_body(view[at : at + length]) for at, length in others), end


def scan_parts_in_python(parts: list[Buffer]) -> tuple[int, list[tuple[int, int, int]]] | None:
    """The reference of `_eventscan.scan_parts`: scan_frames over an append's buffers, one buffer of frames or a
    header then a body per frame (`others` as (buffer index, offset, length)); None for any other cut."""
    if len(parts) == 1:
        plain, found, _ = scan_frames_in_python(parts[0])
        return plain, [(0, at, length) for at, length in found]
    if len(parts) % 2:
        return None
    plain = 0
    others: list[tuple[int, int, int]] = []
    for i in range(0, len(parts), 2):
        head, body = parts[i], parts[i + 1]
        if len(head) != frames.HEADER_SIZE or frames.HEADER.unpack_from(head, 0)[1] != len(body):
            return None
        if frames.HEADER.unpack_from(head, 0)[0] == frames.EVENT:
            if len(body) and body[0] in ARRAY_HEADS:
                others.append((i + 1, 0, len(body)))
            else:
                plain += 1
    return plain, others


try:
    from logport.store._eventscan import scan_parts
except ImportError:
    scan_parts = scan_parts_in_python


def count_parts(parts: list[Buffer]) -> int:
    """Events in an append's whole frames given as buffers: one buffer of frames, or a header then a body
    per frame (SegmentStore.append); any other cut is joined first (a copy)."""
    scanned = scan_parts(parts)
    if scanned is None:
        return count_frames(b"".join(parts))
    plain, others = scanned
    if not others:
        return plain
    return plain + sum(count_body(memoryview(parts[i])[at : at + length]) for i, at, length in others)
