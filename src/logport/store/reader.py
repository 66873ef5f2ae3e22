"""Read a data directory without a running hub (or beside one): CLI, Spark executors, tools.

Read-only: it never cuts a torn tail, it just stops where recovery would (the last valid commit group;
a v1 chunk's last whole append), and every byte it hands out passed its checksum (store/verified.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logport.config import check_segment_name
from logport.errors import DataGivenUp, NoSuchSegment, OffsetTruncated, StoreError
from logport.store import frames, groups, marks
from logport.store.counting import (
    count_events as count_events,  # where the readers of this module take it
)
from logport.store.files import SEGMENTS_DIR, ChunkReader, SegmentState
from logport.store.verified import VerifiedReads

log = logging.getLogger("logport.store")

READ_SIZE = 4 * 1024 * 1024
HEADER_WINDOW = 256 * 1024  # bytes read at a time when only frame headers are wanted


@dataclass(slots=True)
class _Tail:
    """The last chunk of a segment as far as it was walked, so that a follower reads only what was added."""

    layout: groups.ChunkLayout
    scan: frames.ChunkScan = field(default_factory=frames.ChunkScan)
    last_head: bytes = b""  # the head of the last group walked (its COMMIT frame), as it was read
    point: int = 0  # the recovery point, when the valid data ends below it: the end, the rest refused as corrupt

    def head_position(self) -> int:
        layout = self.layout
        return layout.groups[-1] if layout.groups else layout.base


class DirectoryReader:
    def __init__(self, data_dir: str | Path) -> None:
        self.root = Path(data_dir) / SEGMENTS_DIR
        self._readers: dict[str, ChunkReader] = {}
        self._verified: dict[str, VerifiedReads] = {}
        self._tails: dict[str, _Tail] = {}
        self._warned: set[tuple[str, int]] = set()  # given-up ranges skipped (and said) already

    def segment_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def _reader(self, name: str, refresh: bool = False) -> ChunkReader:
        reader = self._readers.get(name)
        if reader is None:
            check_segment_name(name)
            seg_dir = self.root / name
            if not seg_dir.is_dir():
                raise NoSuchSegment(name)
            reader = self._readers[name] = ChunkReader(seg_dir)
            self._verified[name] = VerifiedReads(name, reader)
        elif refresh:
            reader.refresh()
        return reader

    def chunk_reader(self, name: str) -> ChunkReader:
        """The segment's chunk files as they stand now."""
        return self._reader(name, refresh=True)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def bounds(self, name: str) -> tuple[int, int, bool]:
        """(start offset, end offset, sealed); the end is where what recovery would keep ends.

        Beside a running hub, or after a crash before the restart, the files may end in a torn
        frame or in a multi-frame append not all written: recovery cuts both, so they are not read.
        Below the segment's recovery point (store/marks.py) nothing is cut: a range there that fails its
        check is corrupt, and reads of it raise CorruptData.
        """
        seg_dir = self.root / name
        found = marks.load(seg_dir) if seg_dir.is_dir() else marks.Marks()  # first: each mark was true by then
        reader = self._reader(name, refresh=True)
        state = SegmentState.load(reader.seg_dir)
        self._verified[name].recorded = state.corrupt
        if not reader.bases:
            return state.start_offset, state.start_offset, state.sealed
        start = max(state.start_offset, reader.bases[0])
        return start, max(start, self._recoverable_end(name, reader, found)), state.sealed

    def _recoverable_end(self, name: str, reader: ChunkReader, found: marks.Marks | None = None) -> int:
        """The end of what recovery would keep of the last chunk: its last valid commit group (v2), its
        last whole append (v1), or the recovery point when that is higher. A v2 chunk is walked whole once,
        then only what was added since.

        The chunks before it are whole: the store syncs a chunk before it starts the next one.
        """
        base = reader.bases[-1]
        size = reader.chunk_end(base) - base
        tail = self._tails.get(name)
        verified = self._verified[name]
        if (tail is None or tail.layout.base != base or tail.layout.version != groups.VERSION
                or size < tail.layout.end - base or self._head(reader, tail) != tail.last_head):
            # new; or a group walked before was undone since (a write whose fsync failed, its COMMIT frame
            # zeroed) and perhaps written over: walked again, from the chunk's start
            layout, scan = verified.walk_last(base, size)
            tail = self._tails[name] = _Tail(layout, scan)
        else:
            verified.follow_last(tail.layout, tail.scan, size)
        tail.last_head = self._head(reader, tail)
        layout = tail.layout
        point = found.recovery_point(reader.bases[0]) if found is not None else None
        if point is not None and point.base >= base and point.end > layout.end:
            if not any(c.start == layout.end and c.end == point.end for c in layout.corrupt):
                why = (groups.why_the_data_ends(reader.pread(layout.end, base + size - layout.end, base + size),
                                                layout)
                       if point.base == base else f"the chunk file of offset {point.base} is missing")
                bad = marks.below_recovery_point(layout, point, why)
                assert bad is not None
                layout.corrupt.append(bad)  # every read of it refused; the layout's groups end where they do
            tail.point = point.end
        return max(layout.end, tail.point)

    @staticmethod
    def _head(reader: ChunkReader, tail: _Tail) -> bytes:
        at = tail.head_position()
        return reader.pread(at, groups.COMMIT_SIZE, at + groups.COMMIT_SIZE)

    def iter_frames(self, name: str, start: int, end: int, read_size: int = READ_SIZE) -> Iterator[tuple[int, int, memoryview]]:
        """(offset, type, body) of each whole frame starting in [start, end); `start` on a frame boundary."""
        reader = self._reader(name)
        verified = self._verified[name]
        if reader.bases and end > reader.bases[-1]:
            last = verified.last
            if last is None or last.base != reader.bases[-1] or end > last.end:
                # the last chunk walked for its end once (and then only what was added), and its layout kept:
                # else each read there walked the whole chunk again (for a range that bounds() had not walked)
                self._recoverable_end(name, reader)
        read = verified.read_view  # views of what was checked: no copy
        offset = start
        while offset < end:
            try:
                data = read(offset, read_size, end, whole=False)
            except DataGivenUp as e:  # an operator gave the range up (`logport verify --repair`): skipped, said once
                if (name, e.start) not in self._warned:
                    self._warned.add((name, e.start))
                    log.warning("%s", e)
                offset = e.end
                continue
            if not data:
                return
            consumed = 0
            for frame_offset, frame_type, body in frames.iter_frames(data, offset):
                consumed = frame_offset - offset + frames.HEADER_SIZE + len(body)
                yield frame_offset, frame_type, body
            if consumed == 0:
                head = data if len(data) >= frames.HEADER_SIZE else read(offset, frames.HEADER_SIZE, end)
                if len(head) >= frames.HEADER_SIZE:  # a frame longer than the read, or across a piece's end
                    _, length = frames.HEADER.unpack_from(head, 0)
                    whole = read(offset, frames.HEADER_SIZE + length, end)  # joined across pieces
                    if len(whole) == frames.HEADER_SIZE + length:
                        frame_type, _ = frames.HEADER.unpack_from(whole, 0)
                        yield offset, frame_type, memoryview(whole)[frames.HEADER_SIZE :]
                        offset += len(whole)
                        continue
                return  # an incomplete frame at the end of what is written
            offset += consumed

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(offset, type, body length) of each whole frame in [start, end), reading headers only.

        Small frames come from one buffered window; past a large frame the next
        header is read on its own, so the cost follows the frame count, not the bytes.
        """
        return frame_headers(self.chunk_reader(name), start, end)

    def could_start_frame(self, name: str, offset: int) -> bool:
        """Whether a frame starts at `offset` (or the last whole frame ends there), exactly.

        Walks the headers from the base of the chunk holding it: a chunk starts on a frame and no
        frame spans two chunks, so this reads at most one chunk's headers.
        """
        reader = self.chunk_reader(name)
        if not reader.bases or offset < reader.bases[0]:
            return False
        base, _ = reader.chunk_span(offset, offset)
        position = base
        for frame_offset, _, length in frame_headers(reader, base, offset):
            position = frame_offset + frames.HEADER_SIZE + length
        return position == offset

    def check_start(self, name: str, offset: int) -> None:
        """Refuse a start offset below the segment's start, past its end, or inside a frame."""
        lo, hi, _ = self.bounds(name)
        check_start(name, offset, lo, hi, self.could_start_frame)

    def iter_events(self, name: str, start: int | None = None, end: int | None = None) -> Iterator[tuple[int, memoryview]]:
        """(offset, body) of each Event frame; the store's own records are skipped."""
        lo, hi, _ = self.bounds(name)
        if start is None:
            start = lo
        elif start < lo:
            raise OffsetTruncated(name, start, lo)
        for offset, frame_type, body in self.iter_frames(name, start, hi if end is None else min(end, hi)):
            if frame_type == frames.EVENT:
                yield offset, body

    def follow(self, name: str, start: int | None = None, *, follow: bool = False,
               poll: float = 0.05) -> Iterator[tuple[str, int, memoryview]]:
        """Events from `start` (checked: see check_start); with `follow`, keep polling the files for more."""
        lo, _, _ = self.bounds(name)
        if start is not None:
            self.check_start(name, start)
        offset = lo if start is None else start
        while True:
            lo, hi, sealed = self.bounds(name)
            if offset < lo:
                raise OffsetTruncated(name, offset, lo)
            for frame_offset, frame_type, body in self.iter_frames(name, offset, hi):
                offset = frame_offset + frames.HEADER_SIZE + len(body)
                if frame_type == frames.EVENT:
                    yield name, frame_offset, body
            if not follow or sealed:
                return
            time.sleep(poll)

    def describe(self, name: str, exact: bool = False) -> dict[str, Any]:
        """A row of `logport segments` (store/summary.py): offsets, bytes, events (entries of batches; 1 per
        opaque event), sealed, the corrupt ranges known or met, the ranges given up."""
        from logport.store.summary import summarize

        return summarize(self, name, exact=exact).row()

    def verified(self, name: str) -> VerifiedReads:
        """The segment's checked reads."""
        self._reader(name)
        return self._verified[name]


def frame_headers(reader: ChunkReader, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """DirectoryReader.frame_headers, on one segment's chunks."""
    for offset, frame_type, length, _ in walk_frames(reader.pread, start, end):
        yield offset, frame_type, length


def check_start(name: str, offset: int, start: int, end: int, could_start_frame: Callable[[str, int], bool]) -> None:
    """Refuse a start offset below the segment's `start`, past its `end`, or where no frame starts: what
    `logport cat --from` says, of a data directory or over the segment protocol."""
    if offset < start:
        raise OffsetTruncated(name, offset, start)
    if offset > end:
        raise StoreError(f"offset {offset} of segment {name!r} is beyond its end {end}")
    if not could_start_frame(name, offset):
        raise StoreError(f"offset {offset} of segment {name!r} is not where a frame starts "
                         f"(use an offset that logport cat printed)")


def walk_frames(pread: Callable[[int, int, int], bytes], start: int, end: int,
                with_body: Container[int] = ()) -> Iterator[tuple[int, int, int, bytes]]:
    """(offset, type, body length, body) of each whole frame in [start, end); the body only for the
    types in `with_body` (else b""). `pread(offset, max_bytes, end)` reads the bytes: a chunk file's
    (ChunkReader.pread) or, for the Spark source, a hub's over the segment protocol.

    Small frames come from one buffered window; past a large frame the next header is read on its
    own, so the cost follows the frame count, not the bytes.
    """
    unpack = frames.HEADER.unpack_from
    size = frames.HEADER_SIZE
    pos = start
    window = b""
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
        body = b""
        if frame_type in with_body:
            body = window[rel + size : rel + size + length]
            if len(body) < length:
                body = pread(pos + size, length, end)
        yield pos, frame_type, length, body
        pos = stop
