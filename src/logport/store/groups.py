"""Format v2: checksummed commit groups, and finding where a chunk's valid data ends.

A v2 chunk starts with a CHUNK_HEADER frame (magic, version, the chunk's base offset, a CRC32C of
those). Everything after it is commit groups: a COMMIT frame whose body is

    start offset (u64, the segment offset of this COMMIT frame), length (u32, the group's bytes after
    the frame), prev (u32, the stored CRC of the previous group in the chunk, or the chunk header's),
    crc (u32, CRC32C of the body's first 16 bytes followed by the group's bytes)

followed by `length` bytes of whole frames (events, writer records, the writer table). Readers skip
both store records, as every negative frame type, so offsets and events mean what they did in v1.

The end of a chunk is the end of its last valid group, never the file's size: zeros, a recycled
chunk's old bytes (their start offsets name another base) and a torn write all fail the check. A group
that fails while a valid group follows it is not a torn tail (groups are written one after another, each
synced before the next under fsync=always): it is corruption of stored data, kept in the chunk as a
corrupt range that readers refuse, not cut.

v1 chunks (no chunk header) have no checksums: their end is what `frames.recover_chunk` keeps.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from crc32c import crc32c

from logport.store import frames

VERSION: Final = 2
MAGIC: Final = b"LPC2"
_CHUNK_HEADER_BODY = struct.Struct(">4sHHQ")  # magic, version, flags, base; then the crc
_COMMIT_FIELDS = struct.Struct(">QII")  # start, length, prev; then the crc
_U32 = struct.Struct(">I")
CHUNK_HEADER_SIZE: Final = frames.HEADER_SIZE + _CHUNK_HEADER_BODY.size + 4
COMMIT_SIZE: Final = frames.HEADER_SIZE + _COMMIT_FIELDS.size + 4
_COMMIT_PREFIX: Final = frames.HEADER.pack(frames.COMMIT, COMMIT_SIZE - frames.HEADER_SIZE)
_CHUNK_PREFIX: Final = frames.HEADER.pack(frames.CHUNK_HEADER, CHUNK_HEADER_SIZE - frames.HEADER_SIZE)

Buffer = bytes | bytearray | memoryview


def chunk_header(base: int) -> tuple[bytes, int]:
    """The CHUNK_HEADER frame of a chunk starting at `base`, and its CRC (the first group's `prev`)."""
    fields = _CHUNK_HEADER_BODY.pack(MAGIC, VERSION, 0, base)
    crc = crc32c(fields)
    return _CHUNK_PREFIX + fields + _U32.pack(crc), crc


def chunk_version(head: Buffer, base: int) -> int:
    """2 if `head` (a chunk file's first bytes, CHUNK_HEADER_SIZE + COMMIT_SIZE of them when it has as
    many) is this chunk's valid v2 header; 1 if it is a v1 chunk (no v2 header, and none damaged: a v1
    chunk starts with an event or a writer record or table); 0 if it is a v2 header that fails (torn,
    another chunk's in a recycled file, corrupt), which readers refuse."""
    prefix = bytes(head[: frames.HEADER_SIZE])
    if len(head) >= CHUNK_HEADER_SIZE and prefix == _CHUNK_PREFIX:
        fields = bytes(head[frames.HEADER_SIZE : frames.HEADER_SIZE + _CHUNK_HEADER_BODY.size])
        (crc,) = _U32.unpack_from(head, CHUNK_HEADER_SIZE - 4)
        magic, version, _, header_base = _CHUNK_HEADER_BODY.unpack(fields)
        return version if crc == crc32c(fields) and magic == MAGIC and header_base == base else 0
    damaged_v2 = (prefix == _CHUNK_PREFIX or bytes(head[frames.HEADER_SIZE : frames.HEADER_SIZE + 4]) == MAGIC
                  or bytes(head[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + frames.HEADER_SIZE]) == _COMMIT_PREFIX)
    if damaged_v2 or len(head) < frames.HEADER_SIZE:
        return 0 if head else 1  # an empty file is an empty v1 chunk: a chunk whose creation was cut short
    if not any(head[: 2 * frames.HEADER_SIZE]):
        return 0  # zeros: a chunk whose head was lost, not v1's two empty events in a row
    frame_type = frames.HEADER.unpack_from(head, 0)[0]
    return 1 if frame_type in (frames.EVENT, frames.WRITER_RECORD, frames.WRITER_TABLE) else 0


def commit_frame(start: int, prev: int, parts: Sequence[Buffer]) -> tuple[bytes, int]:
    """The COMMIT frame at segment offset `start` for a group of `parts`, and its CRC."""
    fields, crc = commit_fields(start, sum(len(p) for p in parts), prev)
    for part in parts:
        crc = crc32c(part, crc)
    return commit_record(fields, crc), crc


def commit_fields(start: int, length: int, prev: int) -> tuple[bytes, int]:
    """The first 16 bytes of the body of the COMMIT frame at segment offset `start` for a group of
    `length` bytes, and their CRC: the seed that the group's bytes are folded into, in order, with
    `crc32c(part, crc)` (a writer that folds each part in as it writes it, then `commit_record`)."""
    fields = _COMMIT_FIELDS.pack(start, length, prev)
    return fields, crc32c(fields)


def commit_record(fields: bytes, crc: int) -> bytes:
    """The COMMIT frame with `fields` (from commit_fields) and the group's CRC."""
    return _COMMIT_PREFIX + fields + _U32.pack(crc)


@dataclass(frozen=True, slots=True)
class Corrupt:
    """A byte range of a chunk that fails its checksum, in segment offsets."""

    start: int
    end: int
    reason: str


@dataclass(slots=True)
class ChunkLayout:
    """What a walk of one chunk found, in segment offsets: its version, where its valid data ends, the
    start of each valid group (with its stored CRC), the corrupt ranges, and the writer state at the end."""

    base: int
    version: int
    end: int
    groups: list[int] = field(default_factory=list)
    last_crc: int = 0
    corrupt: list[Corrupt] = field(default_factory=list)
    writers: dict[bytes, int] = field(default_factory=dict)


def _check_group(data: Buffer, pos: int, start: int, prev: int | None) -> tuple[int, int] | str:
    """(end, stored crc) of the valid group whose COMMIT frame is at `pos` of `data` (segment offset
    `start`), else why not. `prev`: the chain the group must continue (None: not checked)."""
    if len(data) - pos < COMMIT_SIZE or bytes(data[pos : pos + frames.HEADER_SIZE]) != _COMMIT_PREFIX:
        return "no commit record"
    at = pos + frames.HEADER_SIZE
    group_start, length, group_prev = _COMMIT_FIELDS.unpack_from(data, at)
    (crc,) = _U32.unpack_from(data, at + _COMMIT_FIELDS.size)
    end = pos + COMMIT_SIZE + length
    if group_start != start:
        return f"commit record names offset {group_start}"
    if end > len(data):
        return f"group of {length} bytes runs past the chunk's {len(data) - pos - COMMIT_SIZE}"
    if prev is not None and group_prev != prev:
        return "group does not continue the chain of the one before"
    view = memoryview(data)
    if crc32c(view[pos + COMMIT_SIZE : end], crc32c(view[at : at + _COMMIT_FIELDS.size])) != crc:
        return "checksum mismatch"
    return end, crc


def _next_valid_group(data: Buffer, pos: int, base: int) -> int | None:
    """Where the next valid group after `pos` starts, searching the COMMIT frames' fixed header."""
    raw = data if isinstance(data, bytes | bytearray) else bytes(data)
    hit = raw.find(_COMMIT_PREFIX, pos)
    while hit >= 0:
        if not isinstance(_check_group(raw, hit, base + hit, None), str):
            return hit
        hit = raw.find(_COMMIT_PREFIX, hit + 1)
    return None


def find_valid_group(data: Buffer, pos: int, origin: int) -> int | None:
    """Where in `data` (segment offset `origin` at data[0]) the first valid group at or after `pos`
    starts, checked on its own (not as part of a chain): a walk that stopped before it did not stop at
    a torn or unwritten tail."""
    return _next_valid_group(data, pos, origin)


def group_extent(head: Buffer, start: int) -> int | None:
    """The bytes of the group whose COMMIT frame, for segment offset `start`, begins `head`, as that
    frame says (not checked); None when no such frame begins it."""
    if len(head) < COMMIT_SIZE or bytes(head[: frames.HEADER_SIZE]) != _COMMIT_PREFIX:
        return None
    group_start, length, _ = _COMMIT_FIELDS.unpack_from(head, frames.HEADER_SIZE)
    return COMMIT_SIZE + int(length) if group_start == start else None


def walk_chunk(data: Buffer, base: int, *, at: int = 0, prev: int | None = None,
               scan: frames.ChunkScan | None = None, search: bool = True) -> ChunkLayout:
    """The layout of a chunk whose file holds `data` from file position `at` (0: the whole chunk; a
    reader following a growing chunk resumes at the end of the last walk, with its `prev` and `scan`).

    A group's frames go through frames.ChunkScan, which keeps the writer state: a group whose frames do
    not make the layout the store writes is corrupt all the same, whatever its checksum. With `search`,
    a group that fails is followed by a search for a valid one after it (see the module's docstring);
    without, the walk ends there (a reader following a chunk the hub is writing).
    """
    version = VERSION
    if at == 0:
        version = chunk_version(data, base)
        if version == 1 and _next_valid_group(data, 0, base) is not None:
            version = 0  # a v2 chunk whose head was overwritten so that it reads as v1: committed groups follow
        if version == 1:
            keep, writers = frames.recover_chunk(data)
            return ChunkLayout(base, 1, base + keep, writers=writers)
        # a header that fails its check (version 0) is corrupt if committed groups follow it
        prev = _chunk_header_crc(data) if version == VERSION else None
        pos = CHUNK_HEADER_SIZE
    else:
        pos = 0
    origin = base + at  # the segment offset of data[0]
    scan = scan if scan is not None else frames.ChunkScan()
    layout = ChunkLayout(base, version, origin + pos)
    if version != VERSION:
        following = _next_valid_group(data, pos, origin) if search else None
        if following is None:
            return ChunkLayout(base, version, base)  # nothing committed here: a chunk never started
        layout.corrupt.append(Corrupt(base, base + following, "the chunk header fails its check"))
        pos = following
    while True:
        checked = _check_group(data, pos, origin + pos, prev)
        if isinstance(checked, str):
            following = _next_valid_group(data, pos + 1, origin) if search else None
            if following is None:
                break  # the torn or unwritten tail: the chunk's data ends here
            layout.corrupt.append(Corrupt(origin + pos, origin + following, checked))
            pos, prev = following, None
            continue
        end, crc = checked
        if not _scan_group(memoryview(data)[pos + COMMIT_SIZE : end], scan):
            layout.corrupt.append(Corrupt(origin + pos, origin + end, "its frames are not whole"))
            pos, prev = end, crc
            continue
        layout.groups.append(origin + pos)
        pos, prev = end, crc
    layout.end = origin + pos
    layout.last_crc = prev or 0
    layout.writers = scan.writers
    return layout


def why_the_data_ends(rest: Buffer, layout: ChunkLayout) -> str:
    """Why a walk of a chunk ended at `layout.end`: the check that the chunk's bytes from there (`rest`, to
    the file's end) fail."""
    if not rest:
        return "the chunk file ends"
    checked = _check_group(rest, 0, layout.end, layout.last_crc if layout.groups else None)
    return checked if isinstance(checked, str) else "its frames are not whole"


def _scan_group(group: memoryview, scan: frames.ChunkScan) -> bool:
    """Feed a group's frames to `scan` (offsets from the group's start: a writer table comes first in
    a chunk's head group); whether they are whole frames in the layout the store writes. The writer
    state is updated in place: a group that fails this passed its checksum, so it is the store's bug or
    a forgery, and the chunk is reported corrupt either way. The runs of Event frames between the store's
    records are walked in C (a block of small events a frame at a time in Python was most of a reader's
    time: 4.9 M frames of 100 bytes, 44 of 55 s)."""
    scan.restart()
    return frames.scan_run(group, scan) and scan.keep == len(group)


def _chunk_header_crc(data: Buffer) -> int:
    (crc,) = _U32.unpack_from(data, CHUNK_HEADER_SIZE - 4)
    return int(crc)


def verify_span(data: Buffer, start: int, group_starts: Sequence[int]) -> Corrupt | None:
    """Check every group of `data` (segment offsets from `start`; `group_starts` are where its groups
    start, as a walk found them): the first that fails, else None."""
    for i, group_start in enumerate(group_starts):
        checked = _check_group(data, group_start - start, group_start, None)
        if isinstance(checked, str):
            end = group_starts[i + 1] if i + 1 < len(group_starts) else start + len(data)
            return Corrupt(group_start, end, checked)
    return None
