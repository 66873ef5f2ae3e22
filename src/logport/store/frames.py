"""Frames as the segment store keeps them: int32 BE type, uint32 BE length, body.

Type 0 is an Event (the segment protocol's own Event message); negative types
are the store's own records, which readers skip.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Final

HEADER: Final = struct.Struct(">iI")
HEADER_SIZE: Final = HEADER.size
EVENT: Final = 0
# body: uint64 writer offset, uint32 length of the data frames that follow, writer key.
# The data it covers is all-or-nothing on recovery. An empty key marks an atomic
# group of frames with no writer.
WRITER_RECORD: Final = -1
# body: uint32 count, then per writer: uint16 key length, key, uint64 offset
WRITER_TABLE: Final = -2
# format v2 (store/groups.py): the first frame of a chunk, and the head of each commit group
CHUNK_HEADER: Final = -3
COMMIT: Final = -4
STORED_TYPES: Final = (EVENT, WRITER_RECORD, WRITER_TABLE, CHUNK_HEADER, COMMIT)  # every frame the store writes

_WRITER_RECORD_FIXED = struct.Struct(">QI")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


def frame(body: bytes | memoryview, frame_type: int = EVENT) -> bytes:
    return HEADER.pack(frame_type, len(body)) + bytes(body)


def frame_events(bodies: Iterable[bytes | memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    pack = HEADER.pack
    for body in bodies:
        parts.append(pack(EVENT, len(body)))
        parts.append(body)
    return b"".join(parts)


def writer_record(key: bytes, value: int, data_length: int) -> bytes:
    return frame(_WRITER_RECORD_FIXED.pack(value, data_length) + key, WRITER_RECORD)


def parse_writer_record(body: bytes | memoryview) -> tuple[bytes, int, int]:
    """(key, writer offset, length of the data that the record covers); ValueError if it is too short."""
    if len(body) < _WRITER_RECORD_FIXED.size:
        raise ValueError(f"writer record of {len(body)} bytes is shorter than {_WRITER_RECORD_FIXED.size}")
    value, data_length = _WRITER_RECORD_FIXED.unpack_from(body, 0)
    return bytes(body[_WRITER_RECORD_FIXED.size :]), value, data_length


def writer_table(writers: dict[bytes, int]) -> bytes:
    parts = [_U32.pack(len(writers))]
    for key, value in writers.items():
        parts.append(_U16.pack(len(key)))
        parts.append(key)
        parts.append(_U64.pack(value))
    return frame(b"".join(parts), WRITER_TABLE)


def parse_writer_table(body: bytes | memoryview) -> dict[bytes, int]:
    """The writers of a chunk's head; ValueError if the body ends before the entries it counts."""
    try:
        (count,) = _U32.unpack_from(body, 0)
        pos = 4
        out: dict[bytes, int] = {}
        for _ in range(count):
            (n,) = _U16.unpack_from(body, pos)
            key = bytes(body[pos + 2 : pos + 2 + n])
            (value,) = _U64.unpack_from(body, pos + 2 + n)
            out[key] = value
            pos += 2 + n + 8
    except struct.error:
        raise ValueError(f"writer table of {len(body)} bytes ends inside its entries") from None
    return out


def iter_frames(data: bytes | bytearray | memoryview, base_offset: int = 0) -> Iterator[tuple[int, int, memoryview]]:
    """(offset, type, body) of each whole frame in `data`; an incomplete tail is left out."""
    view = memoryview(data)
    pos = 0
    end = len(view)
    unpack = HEADER.unpack_from
    while pos + HEADER_SIZE <= end:
        frame_type, length = unpack(view, pos)
        stop = pos + HEADER_SIZE + length
        if stop > end:
            return
        yield base_offset + pos, frame_type, view[pos + HEADER_SIZE : stop]
        pos = stop


def complete_prefix(data: bytes | bytearray | memoryview) -> int:
    """Length of the longest prefix of `data` made of whole frames."""
    pos = 0
    end = len(data)
    unpack = HEADER.unpack_from
    while pos + HEADER_SIZE <= end:
        _, length = unpack(data, pos)
        stop = pos + HEADER_SIZE + length
        if stop > end:
            break
        pos = stop
    return pos


def next_record_in_python(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, bool]:
    """The reference of `_eventscan.next_record`: from `pos` (a frame's start), (offset of the first whole frame
    that is no Event, True), else (where the whole frames end, False)."""
    end = len(data)
    unpack = HEADER.unpack_from
    while pos + HEADER_SIZE <= end:
        frame_type, length = unpack(data, pos)
        if pos + HEADER_SIZE + length > end:
            break
        if frame_type != EVENT:
            return pos, True
        pos += HEADER_SIZE + length
    return pos, False


try:  # runs of small Event frames walked in C (store/_eventscan.c)
    from logport.store._eventscan import next_record
except ImportError:  # built without a C compiler
    next_record = next_record_in_python


class ChunkScan:
    """Recovery's rule, fed the whole frames of a chunk one at a time (offsets from the chunk's start).

    `keep` is where what recovery keeps ends so far and `writers` the writer state there. A
    writer/group record (type -1) counts, with its data, only once all the data it covers is
    there. A store record that does not parse, a record inside a group's data or a frame that runs
    past it break the layout (`broken`): nothing from `keep` on is kept, whatever follows.
    """

    __slots__ = ("keep", "writers", "broken", "_pending")

    def __init__(self) -> None:
        self.keep = 0
        self.writers: dict[bytes, int] = {}
        self.broken = False
        self._pending: tuple[int, int, bytes, int] | None = None  # (record start, covered end, key, value)

    def restart(self) -> None:
        """Scan another run of frames (a v2 commit group) from offset 0, keeping the writer state."""
        self.keep = 0
        self.broken = False
        self._pending = None

    @property
    def pending_start(self) -> int | None:
        """Where the group record waiting for the rest of its data starts, if one does."""
        return self._pending[0] if self._pending is not None else None

    def add(self, offset: int, frame_type: int, length: int, body: bytes | memoryview) -> bool:
        """Account for the whole frame at `offset`; False once the layout is broken.

        Only a store record's body is looked at (a writer record, a writer table at 0): `length`
        is enough for any other frame, whose `body` may be left empty.
        """
        if self.broken:
            return False
        stop = offset + HEADER_SIZE + length
        record: tuple[bytes, int, int] | None = None
        try:
            if frame_type == WRITER_TABLE and offset == 0:
                self.writers = parse_writer_table(body)
            elif frame_type == WRITER_RECORD:
                record = parse_writer_record(body)
        except ValueError:
            self.broken = True
            return False
        pending = self._pending
        if pending is not None:
            if record is not None or stop > pending[1]:  # not the layout the store writes
                self.broken = True
                return False
            if stop == pending[1]:
                if pending[2]:
                    self.writers[pending[2]] = pending[3]
                pending = self._pending = None
        if record is not None:
            key, value, data_length = record
            if data_length:
                self._pending = (offset, stop + data_length, key, value)
                return True  # kept only with all of its data: `keep` stays at the record
            if key:
                self.writers[key] = value
        if pending is None:
            self.keep = stop
        return True


    def add_events(self, start: int, stop: int) -> bool | None:
        """Account for a run of whole Event frames [start, stop), as `add` would frame by frame; None when that
        needs the frames one by one (a record's data ends inside the run: not the layout the store writes)."""
        if self.broken:
            return False
        pending = self._pending
        if pending is not None:
            if stop > pending[1]:
                return None
            if stop < pending[1]:
                return True
            if pending[2]:
                self.writers[pending[2]] = pending[3]
            self._pending = None
        self.keep = stop
        return True


def scan_run(data: bytes | bytearray | memoryview, scan: ChunkScan) -> bool:
    """Feed the frames of `data` (offsets from its start: a v2 commit group's) to `scan` from its restart, the
    runs of Events between the store's records walked in C; whether the layout held (not broken). The
    writer state is what a walk of every frame by `add` leaves."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    while pos < end:
        at, found = next_record(view, pos)
        if at > pos:
            added = scan.add_events(pos, at)
            if added is None:  # the frames one by one, from the start (the writer state's changes repeat alike)
                scan.restart()
                for offset, frame_type, body in iter_frames(view):
                    if not scan.add(offset, frame_type, len(body), body):
                        return False
                return True
            if not added:
                return False
        if not found:
            return True  # the whole frames end at `at`
        frame_type, length = HEADER.unpack_from(view, at)
        if not scan.add(at, frame_type, length, view[at + HEADER_SIZE : at + HEADER_SIZE + length]):
            return False
        pos = at + HEADER_SIZE + length
    return True


def recover_chunk(data: bytes | bytearray | memoryview) -> tuple[int, dict[bytes, int]]:
    """Scan a chunk's bytes: (length to keep, writer state at its end).

    A torn final frame is cut. A writer record is valid only when all of the
    data it covers is present; otherwise the record and its data are cut too,
    so the data and the writer offset that acknowledges it stay in step. A
    store record that does not parse is torn all the same: cut there.
    """
    scan = ChunkScan()
    for offset, frame_type, body in iter_frames(data):
        if not scan.add(offset, frame_type, len(body), body):
            break
    return scan.keep, scan.writers
