"""Chunk marks: what a segment's store knows durable of each of its chunks, in one small file per segment.

A mark says: the chunk at `base` holds durable data up to `end`, where the commit group starting at
`last_group` ends (its stored CRC `last_crc`, so that a reader checks the mark against the chunk with one
read of that group's COMMIT frame), and `groups` commit groups and `events` events (as `logport segments`
counts them, store/counting.py) before it. The last chunk's mark is the segment's **recovery point**: every
group below it was durable when the mark was written, so after a crash a group below it that fails its check
is damage (corruption, kept and reported), never a write the crash tore (which only a group above it can be).

The file (`DATA/segments/<name>/marks`) is replaced whole: written to `marks.tmp`, fdatasynced, renamed over
(no directory sync: a rename a power loss undoes leaves the marks before it, each of which was true when it
was written, and a recovery point that is too low only narrows what is told apart). It is written at each
chunk roll (the chunk that rolled gets its final mark), at each clean stop, after recovery on open, and at
most every store.recovery_point_interval seconds while the segment grows: never on an append's path.

    magic "LPMK", u16 version (1), u16 flags (0), u32 count
    count x: u64 base, u64 end, u64 last_group, u32 last_crc, u32 groups, u32 flags, i64 events
    u32 CRC32C of everything before it
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from crc32c import crc32c

from logport.store import counting, groups
from logport.store.files import replace_durably

MARKS_FILE: Final = "marks"
_TMP: Final = "marks.tmp"
_MAGIC: Final = b"LPMK"
_VERSION: Final = 1
_HEAD = struct.Struct(">4sHHI")
_MARK = struct.Struct(">QQQIIIq")
_U32 = struct.Struct(">I")
SEALED: Final = 1  # the chunk rolled: `end` is where the next chunk starts
CLEAN: Final = 2  # written by a clean stop at the segment's end
_I64 = (-(2**63), 2**63 - 1)

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class ChunkMark:
    base: int
    end: int
    last_group: int  # where the group that ends at `end` starts (`base`: none, the chunk's header ends there)
    last_crc: int  # that group's stored CRC (the chunk header's); -1 until read from the chunk (`fill_crc`)
    groups: int
    events: int
    flags: int = 0

    @property
    def sealed(self) -> bool:
        return bool(self.flags & SEALED)


@dataclass(slots=True)
class Marks:
    """A segment's marks by chunk base; `error` says why the file was not read (its marks are then unknown)."""

    by_base: dict[int, ChunkMark] = field(default_factory=dict)
    error: str | None = None

    def recovery_point(self, first_base: int) -> ChunkMark | None:
        """The mark with the highest end among the chunks from `first_base` (the segment's first) on."""
        live = [m for m in self.by_base.values() if m.base >= first_base]
        return max(live, key=lambda m: m.end) if live else None


def load(seg_dir: Path) -> Marks:
    path = seg_dir / MARKS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Marks()
    if len(data) < _HEAD.size + 4 or crc32c(data[:-4]) != _U32.unpack_from(data, len(data) - 4)[0]:
        return Marks(error=f"{path} fails its check")
    magic, version, _, count = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC or version != _VERSION or len(data) != _HEAD.size + count * _MARK.size + 4:
        return Marks(error=f"{path} is not a marks file of version {_VERSION}")
    marks = Marks()
    for i in range(count):
        base, end, last_group, last_crc, group_count, flags, events = _MARK.unpack_from(data, _HEAD.size + i * _MARK.size)
        marks.by_base[base] = ChunkMark(base, end, last_group, last_crc, group_count, events, flags)
    return marks


def save(seg_dir: Path, marks: Iterable[ChunkMark]) -> None:
    """Replace the segment's marks file (see the module's docstring): one fdatasync."""
    ordered = sorted(marks, key=lambda m: m.base)
    body = [_HEAD.pack(_MAGIC, _VERSION, 0, len(ordered))]
    for m in ordered:
        assert m.last_crc >= 0, m
        body.append(_MARK.pack(m.base, m.end, m.last_group, m.last_crc, m.groups, m.flags,
                               min(max(m.events, _I64[0]), _I64[1])))
    data = b"".join(body)
    replace_durably(seg_dir / MARKS_FILE, data + _U32.pack(crc32c(data)))


def clear_leftovers(seg_dir: Path) -> None:
    (seg_dir / _TMP).unlink(missing_ok=True)


Pread = Callable[[int, int], bytes]  # (chunk file position, bytes) of one chunk file


def fill_crc(mark: ChunkMark, pread: Pread) -> ChunkMark:
    """The mark with its group's stored CRC, read from the chunk (a group written and durable: it stays)."""
    if mark.last_crc >= 0:
        return mark
    if mark.last_group == mark.base:
        return replace(mark, last_crc=groups.chunk_header(mark.base)[1])
    head = pread(mark.last_group - mark.base, groups.COMMIT_SIZE)
    return replace(mark, last_crc=_U32.unpack_from(head, groups.COMMIT_SIZE - 4)[0])


def matches(mark: ChunkMark, pread: Pread) -> bool:
    """Whether the chunk holds what the mark says at its end: a COMMIT frame at `last_group` naming its
    offset, the group's length up to `end`, and the CRC (or the chunk's header, for a mark at it)."""
    if mark.last_group == mark.base:
        head = pread(0, groups.CHUNK_HEADER_SIZE)
        return (mark.end == mark.base + groups.CHUNK_HEADER_SIZE and groups.chunk_version(head, mark.base) == groups.VERSION
                and groups.chunk_header(mark.base)[1] == mark.last_crc)
    head = pread(mark.last_group - mark.base, groups.COMMIT_SIZE)
    extent = groups.group_extent(head, mark.last_group)
    return (extent is not None and mark.last_group + extent == mark.end
            and _U32.unpack_from(head, groups.COMMIT_SIZE - 4)[0] == mark.last_crc)


def below_recovery_point(layout: groups.ChunkLayout, mark: ChunkMark | None, why: str) -> groups.Corrupt | None:
    """The range of a chunk's walked `layout` (its last chunk's, or a chunk the mark says ends later) that
    lies below the recovery point `mark` and past where the walk found the data to end: durable, so not
    torn by a crash, and failing its check (`why`, the check that stopped the walk): corruption."""
    if mark is None or mark.end <= layout.end:
        return None
    return groups.Corrupt(layout.end, mark.end, f"{why}, below the recovery point {mark.end}: durable when the hub "
                                                f"recorded it, so damaged since, not torn by a crash")


def mark_of(layout: groups.ChunkLayout, events: int, flags: int = 0) -> ChunkMark:
    """A chunk's mark at the end of its layout (walked, or as the writer wrote it, its last_crc set)."""
    if layout.groups:
        return ChunkMark(layout.base, layout.end, layout.groups[-1], layout.last_crc, len(layout.groups), events, flags)
    return ChunkMark(layout.base, layout.end, layout.base, groups.chunk_header(layout.base)[1], 0, events, flags)


def count_layout(data: Buffer, layout: groups.ChunkLayout, mark: ChunkMark | None = None) -> int:
    """Events in the valid data of a chunk whose bytes (from its base) are `data` and whose walk is `layout`:
    from `mark`'s count on, when the mark is of this chunk, ends within the walk and the chunk's bytes
    there are what it says (the live chunk walked from its last count); else all of it."""
    base = layout.base
    view = memoryview(data)
    start, events = base, 0
    if (mark is not None and mark.base == base and mark.end <= layout.end
            and matches(mark, lambda pos, n: bytes(view[pos : pos + n]))):
        start, events = mark.end, mark.events
    if layout.version == 1 or not layout.corrupt:  # the chunk header and COMMIT frames are frames: skipped
        return events + counting.count_frames(view[start - base : layout.end - base])
    for at in layout.groups:
        if at >= start:
            extent = groups.group_extent(view[at - base : at - base + groups.COMMIT_SIZE], at)
            assert extent is not None  # a valid group's
            events += counting.count_frames(view[at - base + groups.COMMIT_SIZE : at - base + extent])
    return events
