"""Frames: int32 BE type, uint32 BE length, body, as the store keeps them and the segment protocol sends
them (type 0 is an Event; negative types are the store's records, which readers skip). Their header, the
store's records, every walk over whole frames (of a buffer, of a file or a hub read by pieces, across
successive reads), and the rule by which recovery keeps a chunk's frames.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Final

from logport import _native

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

Buffer = bytes | bytearray | memoryview


def frame(body: bytes | memoryview, frame_type: int = EVENT) -> bytes:
    return HEADER.pack(frame_type, len(body)) + bytes(body)


def event_parts(bodies: Iterable[Buffer]) -> list[Buffer]:
    """Each body behind its Event header: the buffers an append writes (the bodies as they are, not copied)."""
    parts: list[Buffer] = []
    pack = HEADER.pack
    for body in bodies:
        parts.append(pack(EVENT, len(body)))
        parts.append(body)
    return parts


def frame_events(bodies: Iterable[Buffer]) -> bytes:
    return b"".join(event_parts(bodies))


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


# --- walks: every loop over whole frames is one of these ---

Frame = tuple[int, int, memoryview]  # (offset, type, body)
Pread = Callable[[int, int, int], Buffer]  # (offset, max_bytes, end) -> the bytes there (fewer at the end)
HEADER_WINDOW: Final = 256 * 1024  # bytes walk_frames reads at a time for the headers


def _whole_frames(view: memoryview, base_offset: int) -> Iterator[Frame]:
    """The one loop in Python: (offset, type, body) of each whole frame `view` starts with."""
    pos = 0
    end = len(view)
    unpack = HEADER.unpack_from
    while end - pos >= HEADER_SIZE:
        frame_type, length = unpack(view, pos)
        stop = pos + HEADER_SIZE + length
        if stop > end:
            return
        yield base_offset + pos, frame_type, view[pos + HEADER_SIZE : stop]
        pos = stop


def frame_list_in_python(data: Buffer, base_offset: int = 0) -> tuple[list[Frame], int]:
    """The reference of `_frames.frame_list`: (offset, type, body) of each whole frame that `data` starts with,
    offsets counted from `base_offset`, each body a view of `data`; and the bytes they take. An incomplete frame
    after them is left out (the next read has its rest)."""
    found = list(_whole_frames(memoryview(data), base_offset))
    if not found:
        return found, 0
    last, _, body = found[-1]
    return found, last - base_offset + HEADER_SIZE + len(body)


def next_record_in_python(data: Buffer, pos: int) -> tuple[int, bool]:
    """The reference of `_frames.next_record`: from `pos` (a frame's start), (offset of the first whole frame
    that is no Event, True), else (where the whole frames end, False)."""
    for offset, frame_type, body in _whole_frames(memoryview(data)[pos:], pos):
        if frame_type != EVENT:
            return offset, True
        pos = offset + HEADER_SIZE + len(body)
    return pos, False


_c = _native.load("logport.store._frames")  # the walks in C: a read of small frames is thousands of them
frame_list = _c.frame_list if _c else frame_list_in_python
next_record = _c.next_record if _c else next_record_in_python


def iter_frames(data: Buffer, base_offset: int = 0) -> Iterator[Frame]:
    """(offset, type, body) of each whole frame in `data`; an incomplete tail is left out."""
    return iter(frame_list(data, base_offset)[0])


def complete_prefix(data: Buffer) -> int:
    """Length of the longest prefix of `data` made of whole frames."""
    pos = 0
    while True:
        pos, found = next_record(data, pos)
        if not found:
            return pos
        pos += HEADER_SIZE + HEADER.unpack_from(data, pos)[1]  # a record, whole: walked past


def is_boundary(data: Buffer, at: int) -> bool:
    """Whether `at` (0 to len(data)) falls between two of the whole frames that `data` starts with."""
    return 0 <= at <= len(data) and complete_prefix(memoryview(data)[:at]) == at


def read_frame(read: Callable[[int, int], Buffer], offset: int, head: Buffer = b"") -> Buffer:
    """The frame at `offset`, header and body in one buffer, for one that a read cut (larger than the read,
    or across the end of a piece): its header taken from `head` (what the read gave), or read; shorter than
    the frame where the bytes end first. `read(offset, n)` reads up to n bytes."""
    if len(head) < HEADER_SIZE:
        head = read(offset, HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            return head
    return read(offset, HEADER_SIZE + HEADER.unpack_from(head, 0)[1])


def walk_frames(pread: Pread, start: int, end: int, with_body: Container[int] = ()) -> Iterator[tuple[int, int, int, Buffer]]:
    """(offset, type, body length, body) of each whole frame in [start, end), `start` a frame's; the body only
    for the types in `with_body` (else b""). `pread` reads the bytes: a chunk file's (ChunkReader.pread) or, for
    the Spark source, a hub's over the segment protocol.

    Small frames come from one buffered window; past a large frame the next header is read on its own, so the
    cost follows the frame count, not the bytes.
    """
    unpack = HEADER.unpack_from
    size = HEADER_SIZE
    pos = start
    window: Buffer = b""
    window_start = start
    while pos + size <= end:
        rel = pos - window_start
        if rel + size > len(window):
            window = pread(pos, HEADER_WINDOW, end)
            window_start, rel = pos, 0
            if len(window) < size:
                return
        frame_type, length = unpack(window, rel)
        stop = pos + size + length
        if stop > end:
            return
        body: Buffer = b""
        if frame_type in with_body:
            body = window[rel + size : rel + size + length]
            if len(body) < length:
                body = pread(pos + size, length, end)
        yield pos, frame_type, length, body
        pos = stop


def reaches(pread: Pread, start: int, offset: int) -> bool:
    """Whether the frames walked from `start` (a frame's start) end exactly at `offset`: a frame starts there, or
    the last whole frame ends there."""
    position = start
    for frame_offset, _, length, _ in walk_frames(pread, start, offset):
        position = frame_offset + HEADER_SIZE + length
    return position == offset


class FrameStitcher:
    """Whole frames out of successive reads, which may end inside a frame: its start waits for the next read."""

    def __init__(self, pos: int) -> None:
        self.pos = pos  # offset of leftover[0], always a frame boundary
        self.leftover = b""

    @property
    def read_at(self) -> int:
        return self.pos + len(self.leftover)

    def feed(self, data: Buffer) -> list[Frame]:
        """The whole frames that `data` (the bytes after the last read's) completes and holds, each body a view
        of `data` (frame_list's cut) but for one begun in the last read."""
        found: list[Frame] = []
        if self.leftover:  # a frame begun in the last read: only its own bytes are joined, not all of `data`
            leftover = self.leftover
            view = memoryview(data)
            if len(leftover) < HEADER_SIZE:
                take = HEADER_SIZE - len(leftover)
                leftover, view = leftover + bytes(view[:take]), view[take:]
            if len(leftover) < HEADER_SIZE:
                self.leftover = leftover
                return found
            frame_type, length = HEADER.unpack_from(leftover, 0)
            take = HEADER_SIZE + length - len(leftover)
            if take > len(view):
                self.leftover = leftover + bytes(view)
                return found
            whole = leftover + bytes(view[:take])
            data = view[take:]
            self.leftover = b""
            found.append((self.pos, frame_type, memoryview(whole)[HEADER_SIZE:]))
            self.pos += len(whole)
        cut, consumed = frame_list(data, self.pos)
        if found:
            found += cut
        else:
            found = cut
        self.leftover = bytes(memoryview(data)[consumed:])
        self.pos += consumed
        return found


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
