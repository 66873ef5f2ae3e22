"""Reads that hand out only bytes whose commit groups pass their checksum (format v2).

A read is widened to the whole groups that cover its start, each group is checked, and what is handed
out is cut from them; a range that fails raises CorruptData naming the segment, the range and the file.
Each byte is read from its file once and checked once: the chunks before the last are walked as far as
they are read, a window at a time, and the window that a walk read and checked is what the read hands
out (before 2026-11-25 18:30 a chunk was walked whole, 64 MiB in one fresh buffer whose every page
faulted in, and then read again). Checked spans are kept, so that a reader going through a group
larger than its reads checks it once. v1 chunks carry no checksums: their bytes are read as they are.

A span read for a read (not a walk's window) is held in pieces cut where a segment offset is a multiple
of PIECE, each its own `bytes`: a read of exactly one piece hands that object out, no copy. The segment
listener cuts its replies on the same lines (servers/segment.py), so that a hub serving catch-up copies
no byte in Python: before (2026-11-25), each 2 MiB reply was copied out of a group of up to 31 MiB, and
that copy took as long as reading and checking the group (pread + CRC32C 6.9 GB/s, with the copies 3.6).
"""

from __future__ import annotations

import bisect
import collections
import mmap
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import overload

from crc32c import crc32c

from logport.errors import CorruptData, DataGivenUp
from logport.store import frames, groups
from logport.store.files import ChunkReader, CorruptRange, chunk_path

_LAYOUTS_KEPT = 8  # layouts of chunks other than the last
_SPANS_KEPT = 4  # checked spans kept for readers at different places of one segment (to _KEPT_TOTAL)
_SPAN_BYTES_KEPT = 64 * 1024 * 1024  # a span larger is read again for each read in it
_KEPT_TOTAL = 4 * 1024 * 1024  # past this, only the newest span is kept: a hub's groups reach 9-31 MiB, and
# holding four of them kept glibc from reusing their memory (DirectoryReader over such a segment in a new
# process: 1.0-1.1 GB/s keeping four, 1.8-2.2 keeping the newest alone, load average 5)
_AHEAD_BYTES_KEPT = 8 * 1024 * 1024  # what a follower's walk keeps for its next reads
_HOPS = 16  # group heads read to find where a window's whole groups end
WINDOW = 1024 * 1024  # bytes a walk reads at a time (at least a group): pread of 1 MiB ran at 6.5 GB/s
# here, 4 MiB at 4.2, 64 MiB at 2.1 (a buffer past glibc's mmap threshold faults in every page)

PIECE = 2 * 1024 * 1024  # a read's span is held in pieces cut at multiples of this (segment offsets)
CHECK_REUSE = 1.0  # seconds a range checked through a chunk's mapping counts as checked (see checked_view)
_COMMIT_FIELDS = slice(frames.HEADER_SIZE, groups.COMMIT_SIZE - 4)  # a COMMIT frame's fields, before its crc (u32)
_MAPS_KEPT = 4  # chunk files mapped for `checked_view`, the most recently read


@dataclass(slots=True)
class Pieces:
    """Checked bytes of whole groups, [starts[0], end), in pieces: `parts[i]` holds the bytes from segment
    offset `starts[i]`; every piece but the first starts at a multiple of PIECE."""

    starts: list[int]
    parts: list[bytes]
    end: int

    def __len__(self) -> int:
        return self.end - self.starts[0]

    def _index(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def views(self, offset: int, stop: int) -> Iterator[memoryview]:
        """[offset, stop) as views of the pieces that hold it."""
        i = self._index(offset)
        while offset < stop:
            at = offset - self.starts[i]
            part = self.parts[i]
            take = min(len(part) - at, stop - offset)
            yield memoryview(part)[at : at + take]
            offset += take
            i += 1

    def copy(self, offset: int, n: int) -> bytes:
        return b"".join(self.views(offset, offset + n))

    def view(self, offset: int, n: int, whole: bool) -> bytes | memoryview:
        """[offset, offset + n): the piece itself when it is exactly one, a view when it lies within one;
        across pieces joined (`whole`), or (not `whole`) cut where the first piece ends."""
        i = self._index(offset)
        start, part = self.starts[i], self.parts[i]
        at = offset - start
        if at == 0 and n == len(part):
            return part
        if at + n <= len(part) or not whole:
            return memoryview(part)[at : at + n]
        return self.copy(offset, n)


Window = bytes | bytearray | memoryview  # what a walk reads at a time
Span = Window | Pieces  # checked bytes kept
Keep = Callable[[int, Span], None]


@dataclass(slots=True)
class ChunkWalk:
    """A v2 chunk walked from its start as far as `layout.end`, to be walked on to `stop`."""

    layout: groups.ChunkLayout
    stop: int  # where the walk is to end: the next chunk's base, or the file's end
    scan: frames.ChunkScan = field(default_factory=frames.ChunkScan)

    @property
    def done(self) -> bool:
        return self.layout.end >= self.stop


class VerifiedReads:
    """Checked reads of one segment's chunks. The owner says what the last chunk holds (`set_last`):
    the store's writer from its own commits, a DirectoryReader from its walk of the file (`walk_last`)."""

    def __init__(self, name: str, chunks: ChunkReader, on_corrupt: Callable[[CorruptData], None] | None = None,
                 window: int | None = None) -> None:
        self.name = name
        self.chunks = chunks
        self.window = WINDOW if window is None else window
        self._on_corrupt = on_corrupt
        self.last: groups.ChunkLayout | None = None
        self._layouts: collections.OrderedDict[int, groups.ChunkLayout | ChunkWalk] = collections.OrderedDict()
        self._spans: collections.OrderedDict[int, Span] = collections.OrderedDict()  # start -> checked bytes
        self._ahead: dict[int, Span] = {}  # windows a walk of the last chunk checked, until a read takes them
        self._ahead_bytes = 0
        self._scratch: bytearray | None = None  # the windows of a walk that keeps nothing
        self._maps: collections.OrderedDict[int, mmap.mmap] = collections.OrderedDict()  # base -> its file, mapped
        self._checked: dict[int, tuple[int, int, float]] = {}  # base -> [start, end) checked through the mapping, when
        # the corrupt ranges the segment's state records (found on open; given up by `logport verify --repair`:
        # DataGivenUp, not CorruptData)
        self.recorded: list[CorruptRange] = []

    def set_last(self, layout: groups.ChunkLayout) -> None:
        """The last chunk's layout from now on. The one before is kept when it is whole (it ends where the new
        one starts: the store's writer's own, at a roll); else (a reader beside the hub that had not walked
        its last groups when the hub rolled) it is walked when it is read next. Before 2026-11-25 the writer's
        was dropped too, and every reader of the hub walked the chunk again, frame by frame in Python."""
        last = self.last
        if last is not None and last is not layout:
            if last.base == layout.base:
                self._forget(lambda start: start >= layout.base)  # walked again: what was read may be gone
            elif last.end == layout.base and last.version == groups.VERSION and not last.corrupt:
                self._keep(last)
        self._layouts.pop(layout.base, None)
        self.last = layout

    def walk_last(self, base: int, size: int) -> tuple[groups.ChunkLayout, frames.ChunkScan]:
        """Walk the last chunk (`size` bytes in its file) from its start for its end, and make it the last
        (`set_last`). The walk reads into one reused buffer and keeps nothing: its reads follow later, if
        at all (a DirectoryReader's bounds), and 64 MiB kept for them faulted in as much as it saved."""
        self._forget(lambda start: start >= base)
        walk = self._start_walk(base, base + size, None)
        if isinstance(walk, ChunkWalk):
            self._walk_on(walk, base + size, None)
            layout, scan = walk.layout, walk.scan
            if layout.end < base + size and self._valid_group_after(base, layout.end, base + size):
                layout, scan = self._walk_whole(base, base + size)  # corruption before committed groups
                self._forget(lambda start: start >= base)
        else:
            layout, scan = walk, frames.ChunkScan()
            scan.writers = layout.writers
        self.last = None
        self.set_last(layout)
        return layout, scan

    def follow_last(self, layout: groups.ChunkLayout, scan: frames.ChunkScan, size: int) -> None:
        """Extend the last chunk's layout (from `walk_last`) with the groups written since, up to `size`
        bytes of its file (a group that fails ends it: the hub may be writing it), keeping what was
        checked for the reads that follow."""
        self._walk_on(ChunkWalk(layout, layout.base + size, scan), layout.base + size, self._keep_ahead)
        self.set_last(layout)

    def _keep(self, layout: groups.ChunkLayout | ChunkWalk) -> None:
        base = layout.layout.base if isinstance(layout, ChunkWalk) else layout.base
        self._layouts[base] = layout
        self._layouts.move_to_end(base)
        while len(self._layouts) > _LAYOUTS_KEPT:
            self._layouts.popitem(last=False)

    def forget_below(self, base: int) -> None:
        for key in [k for k in self._layouts if k < base]:
            del self._layouts[key]
        for key in [k for k in self._maps if k < base]:
            del self._maps[key]  # unmapped once no view of it is left (a send in flight holds one)
        self._forget(lambda start: start < base)

    def _forget(self, which: Callable[[int], bool]) -> None:
        for start in [k for k in self._spans if which(k)]:
            del self._spans[start]
        for chunk_base in [k for k in self._checked if which(k)]:
            del self._checked[chunk_base]
        for start in [k for k in self._ahead if which(k)]:
            self._ahead_bytes -= len(self._ahead.pop(start))

    def layout(self, base: int, next_base: int | None, until: int | None = None) -> groups.ChunkLayout:
        """The layout of the chunk at `base`, walked at least past `until` (None: whole); `next_base`:
        where the chunk after it starts (None: it is the last, walked to its file's end and not kept, as
        it may grow)."""
        if self.last is not None and self.last.base == base:
            return self.last
        if next_base is None:
            return self._walk_whole(base, self.chunks.chunk_end(base))[0]
        kept = self._layouts.get(base)
        if kept is None:
            kept = self._start_walk(base, next_base, self._keep_span)
            if isinstance(kept, groups.ChunkLayout):
                self._ends_at_next(kept, next_base)
        self._keep(kept)
        if isinstance(kept, groups.ChunkLayout):
            return kept
        self._walk_on(kept, next_base if until is None else until, self._keep_span)
        if kept.done:
            self._keep(kept.layout)
        elif until is None or kept.layout.end <= until:  # stopped short: walked whole, for its corrupt ranges
            layout = self._walk_whole(base, next_base)[0]
            self._ends_at_next(layout, next_base)
            self._forget(lambda start: base <= start < next_base)
            self._keep(layout)
            return layout
        return kept.layout

    def _ends_at_next(self, layout: groups.ChunkLayout, next_base: int) -> None:
        if layout.version != 1 and layout.end < next_base:  # a chunk before the last ends where the next starts
            layout.corrupt.append(groups.Corrupt(layout.end, next_base, recorded_reason(
                self.recorded, layout.end, next_base,
                f"the chunk's valid data ends at {layout.end}, before the next chunk starts at {next_base}")))

    def _walk_whole(self, base: int, stop: int) -> tuple[groups.ChunkLayout, frames.ChunkScan]:
        scan = frames.ChunkScan()
        return groups.walk_chunk(self.chunks.pread(base, stop - base, stop), base, scan=scan), scan

    def _start_walk(self, base: int, stop: int, keep: Keep | None) -> groups.ChunkLayout | ChunkWalk:
        """A walk of a v2 chunk begun with its first window; the whole layout of any other chunk (v1, or
        a head that fails its check: walked whole, as recovery does)."""
        first = min(base + groups.CHUNK_HEADER_SIZE, stop)
        data = self._read(base, first - base + self._window(first, stop), stop, keep)
        if groups.chunk_version(data, base) != groups.VERSION:
            return self._walk_whole(base, stop)[0]
        walk = ChunkWalk(groups.ChunkLayout(base, groups.VERSION, base), stop)
        self._walk_window(walk, data, keep)
        return walk

    def _walk_on(self, walk: ChunkWalk, until: int, keep: Keep | None) -> None:
        """Walk on, a window at a time, until the layout holds `until` or the walk stops (its end, or a
        group that fails); `keep(offset, data)` is given what each window checked (None: nothing is
        kept, and the windows are read into one buffer, reused)."""
        layout = walk.layout
        while layout.end <= until and not walk.done:
            data = self._read(layout.end, self._window(layout.end, walk.stop), walk.stop, keep)
            if not self._walk_window(walk, data, keep):
                return
        self._scratch = None

    def _read(self, offset: int, n: int, stop: int, keep: Keep | None) -> Window:
        if keep is not None:
            return self.chunks.pread(offset, n, stop)
        if self._scratch is None or len(self._scratch) < n:
            self._scratch = bytearray(max(n, self.window))
        view = memoryview(self._scratch)[:n]
        return view[: self.chunks.pread_into(offset, view, stop)]

    def _window(self, start: int, stop: int) -> int:
        """The bytes to read from `start`, a group boundary: whole groups (found by their heads) to
        about `window`, so that no byte is read twice, nor a window's bytes copied to be handed out
        whole; after _HOPS groups (small ones), a window's end as it comes."""
        pos = start
        for _ in range(_HOPS):
            if pos >= stop or pos - start >= self.window:
                return min(pos, stop) - start
            extent = groups.group_extent(self.chunks.pread(pos, groups.COMMIT_SIZE, stop), pos)
            if extent is None:
                break  # not a group's head (the tail, or corruption): read as it is, the walk says what
            pos += extent
        return min(max(pos, start + self.window), stop) - start

    def _walk_window(self, walk: ChunkWalk, data: Window, keep: Keep | None) -> bool:
        """Walk the groups of `data`, read from the layout's end; whether it went on."""
        layout = walk.layout
        part = self._walk_part(walk, data, layout.end - layout.base)
        if part.end <= layout.end:
            return False
        if keep is not None:
            checked = part.end - layout.end
            keep(layout.end, data if checked == len(data) else memoryview(data)[:checked])
        layout.groups.extend(part.groups)
        layout.corrupt.extend(part.corrupt)
        layout.end, layout.last_crc, layout.writers = part.end, part.last_crc, part.writers
        return True

    @staticmethod
    def _walk_part(walk: ChunkWalk, data: Window, at: int) -> groups.ChunkLayout:
        if at == 0:
            return groups.walk_chunk(data, walk.layout.base, scan=walk.scan, search=False)
        return groups.walk_chunk(data, walk.layout.base, at=at, prev=walk.layout.last_crc, scan=walk.scan,
                                 search=False)

    def _valid_group_after(self, base: int, at: int, stop: int) -> bool:
        """Whether a valid group starts past the end of a walk that stopped at `at`: then what stopped it
        is corruption of committed data, not a torn or unwritten tail."""
        data = self.chunks.pread(at, stop - at, stop)
        return groups.find_valid_group(data, 1, at) is not None

    def _keep_ahead(self, start: int, data: Span) -> None:
        if self._ahead_bytes + len(data) > _AHEAD_BYTES_KEPT:
            return  # read again when it is read: a walk holds no more than this
        self._ahead[start] = data
        self._ahead_bytes += len(data)

    def _keep_span(self, start: int, data: Span) -> None:
        if len(data) > _SPAN_BYTES_KEPT:
            return
        self._spans[start] = data
        self._spans.move_to_end(start)
        kept = sum(len(d) for d in self._spans.values())
        while len(self._spans) > _SPANS_KEPT or (len(self._spans) > 1 and kept > _KEPT_TOTAL):
            kept -= len(self._spans.popitem(last=False)[1])

    def _kept_span(self, offset: int) -> tuple[int, Span] | None:
        """A kept span holding `offset`; one a walk kept ahead moves to the spans read."""
        for start, data in self._spans.items():
            if start <= offset < start + len(data):
                self._spans.move_to_end(start)
                return start, data
        for start, data in self._ahead.items():
            if start <= offset < start + len(data):
                del self._ahead[start]
                self._ahead_bytes -= len(data)
                for passed in [k for k in self._ahead if k < start]:  # a reader goes forward: never read now
                    self._ahead_bytes -= len(self._ahead.pop(passed))
                self._keep_span(start, data)
                return start, data
        return None

    def read(self, offset: int, max_bytes: int, end: int) -> bytes:
        """Up to `max_bytes` from `offset`, within one chunk and below `end`, every byte checked. It
        ends where a checked span ends, a group boundary, when that comes first: the next read then
        starts a span of its own, and neither reads nor checks a byte twice. A read of exactly one
        piece of a span (see PIECE) is that piece's `bytes`, not a copy."""
        data = self.read_view(offset, max_bytes, end)
        return data if isinstance(data, bytes) else bytes(data)

    def read_view(self, offset: int, max_bytes: int, end: int, whole: bool = True) -> bytes | memoryview:
        """`read`, as a view of the checked span when it is part of one (no copy; the span's bytes are
        never written over). Not `whole`: it also ends where a piece of the span ends (never a copy)."""
        base, stop = self.chunks.chunk_span(offset, end)
        n = min(max_bytes, stop - offset)
        if n <= 0:
            return b""
        next_base = self._next_base(base)
        kept = self._kept_span(offset)
        if kept is None:
            layout = self.layout(base, next_base, offset)
        elif next_base is not None:
            layout = self.layout(base, next_base, kept[0])  # walked past a kept span's start: no read
        else:
            layout = self.last if self.last is not None and self.last.base == base else self.layout(base, None)
        if layout.version == 1:
            return self.chunks.pread(offset, n, stop)
        for bad in layout.corrupt:  # what is good before a corrupt range is read; the range itself is refused
            if bad.start <= offset < bad.end:
                self._corrupt(bad.start, bad.end, base, bad.reason)
            if offset < bad.start < offset + n:
                n = bad.start - offset
        if layout.version == 0 and not layout.groups:
            self._corrupt(base, stop, base, "the chunk header fails its check")
        if kept is None:
            kept = self._kept_span(offset)  # a walk may have just read it
        if kept is None:
            kept = self._read_span(layout, base, offset, n)
        span_start, data = kept
        n = min(n, span_start + len(data) - offset)
        if isinstance(data, Pieces):
            return data.view(offset, n, whole)
        if offset == span_start and n == len(data) and isinstance(data, bytes):
            return data
        return memoryview(data)[offset - span_start : offset - span_start + n]

    def checked_view(self, offset: int, max_bytes: int, end: int) -> bytes | memoryview:
        """`read_view` (not whole) for a sender that copies nothing itself: where the chunk's groups are known
        (the store's writer's layouts, and chunks walked whole) the bytes are a view of the chunk file mapped
        into memory, checked there (CRC32C over the mapping, no copy). The socket's send then copies each
        byte once, out of the page cache (before 2026-11-26 pread copied it into a `bytes` first: a quarter
        of the hub's CPU serving catch-up). The range checked is kept per chunk for CHECK_REUSE seconds: a
        read that goes on inside it then (a reader catching up, whose replies cut groups) is not checked
        again, and every byte sent passed its check within that time. Kept longer, a page the kernel
        dropped from its cache and read again from a disk that changed it since would be sent unchecked:
        a `bytes` read holds what it checked, a mapping does not. Elsewhere (v1, a chunk being walked,
        corrupt ranges, bytes a read kept) what read_view hands out."""
        base, stop = self.chunks.chunk_span(offset, end)
        n = min(max_bytes, stop - offset)
        if n <= 0:
            return b""
        if self._kept_span(offset) is not None:
            return self.read_view(offset, max_bytes, end, whole=False)
        layout = self.last if self.last is not None and self.last.base == base else self._layouts.get(base)
        if layout is None or isinstance(layout, ChunkWalk):
            next_base = self._next_base(base)
            if next_base is not None:  # a chunk before the last that nobody has walked whole: walked here
                layout = self._walk_mapped(base, next_base)
        if not isinstance(layout, groups.ChunkLayout) or layout.version != groups.VERSION or layout.corrupt:
            return self.read_view(offset, max_bytes, end, whole=False)
        checked_start, checked_end, checked_at = self._checked.get(base, (base, base, 0.0))
        now = time.monotonic()
        if not (checked_start <= offset < checked_end and now - checked_at < CHECK_REUSE):
            span_start, span_end, group_starts = _whole_groups(layout, base, offset, n)
            mapped = self._map(base, span_end)
            if span_start == base:
                head = mapped[: min(groups.CHUNK_HEADER_SIZE + groups.COMMIT_SIZE, span_end - base)]
                if groups.chunk_version(head, base) != groups.VERSION:  # changed since the walk
                    self._corrupt(base, base + groups.CHUNK_HEADER_SIZE, base, "the chunk header fails its check")
            with memoryview(mapped) as view:
                bad = groups.verify_span(view[span_start - base : span_end - base], span_start, group_starts)
            if bad is not None:
                if bad.start <= offset:
                    self._corrupt(bad.start, bad.end, base, bad.reason)
                span_end = bad.start  # the read after it reports the group
            self._checked[base] = (span_start, span_end, now)
            checked_end = span_end
        mapped = self._map(base, checked_end)
        return memoryview(mapped)[offset - base : offset - base + min(n, checked_end - offset)]

    def _walk_mapped(self, base: int, next_base: int) -> groups.ChunkLayout:
        """The layout of the chunk before the last at `base`, walked whole through its mapping (every group
        checked, nothing copied; a walk of reads copies each window out) and kept; its groups count as
        checked (`_checked`, for CHECK_REUSE seconds) when none is corrupt."""
        mapped = self._map(base, next_base, short=True)
        if mapped is None:  # an empty file
            return self.layout(base, next_base)
        with memoryview(mapped) as view:
            # without search: a search for valid groups past a failing one works on a copy of the rest
            layout = groups.walk_chunk(view[: next_base - base], base, search=False)
        if layout.version != groups.VERSION or layout.end != next_base:  # v1, or not whole: walked as reads do
            return self.layout(base, next_base)
        self._forget(lambda start: base <= start < next_base)
        self._keep(layout)
        self._checked[base] = (base, layout.end, time.monotonic())
        return layout

    @overload
    def _map(self, base: int, end: int) -> mmap.mmap: ...
    @overload
    def _map(self, base: int, end: int, short: bool) -> mmap.mmap | None: ...

    def _map(self, base: int, end: int, short: bool = False) -> mmap.mmap | None:
        """The chunk file at `base` mapped (read only) at least to segment offset `end`: mapped again, to the
        file's size, when it has grown past the mapping. A file shorter than that is corrupt (the store
        never shortens a chunk file it has committed to), unless `short` (a walk finds where it ends; None
        for an empty file, which cannot be mapped)."""
        mapped = self._maps.get(base)
        if mapped is None or len(mapped) < end - base:
            fd = os.open(chunk_path(self.chunks.seg_dir, base), os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                if size < end - base and not short:
                    self._corrupt(base + size, end, base, "the file ends before the data it committed")
                if size == 0:  # an empty chunk (a v1 one whose creation was cut short)
                    return None
                mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)  # the mapping keeps the file
            self._maps[base] = mapped
            while len(self._maps) > _MAPS_KEPT:
                self._maps.popitem(last=False)
        self._maps.move_to_end(base)
        return mapped

    def _read_span(self, layout: groups.ChunkLayout, base: int, offset: int, n: int) -> tuple[int, Span]:
        """Read and check the whole groups from the one holding `offset` to the last that ends by
        `offset + n` (at least that one group)."""
        span_start, span_end, group_starts = _whole_groups(layout, base, offset, n)
        data = self._span(span_start, span_end, base, group_starts, offset)
        return span_start, data

    def _next_base(self, base: int) -> int | None:
        bases = self.chunks.bases
        i = bisect.bisect_right(bases, base)
        return bases[i] if i < len(bases) else None

    def _span(self, start: int, end: int, base: int, group_starts: list[int], offset: int) -> Span:
        """The checked bytes of whole groups [start, end), in pieces cut at multiples of PIECE; a group that
        fails (changed since the chunk was walked) ends them, or raises CorruptData when it holds `offset`,
        the read's start."""
        cuts = [start, *range(start - start % PIECE + PIECE, end, PIECE)]
        parts = [self.chunks.pread(cut, stop - cut, end) for cut, stop in zip(cuts, [*cuts[1:], end], strict=True)]
        got = sum(len(part) for part in parts)
        if got < end - start:
            self._corrupt(start + got, end, base, "the file ends before the data it committed")
        data: bytes | Pieces = parts[0] if len(parts) == 1 else Pieces(cuts, parts, end)
        if start == base:
            head = data[: groups.CHUNK_HEADER_SIZE + groups.COMMIT_SIZE] if isinstance(data, bytes) else \
                data.copy(base, min(groups.CHUNK_HEADER_SIZE + groups.COMMIT_SIZE, end - base))
            if groups.chunk_version(head, base) != groups.VERSION:  # changed since the walk
                self._corrupt(base, base + groups.CHUNK_HEADER_SIZE, base, "the chunk header fails its check")
        if isinstance(data, bytes):
            bad = groups.verify_span(data, start, group_starts)
        else:
            bad = _verify_pieces(data, group_starts)
        if bad is not None:
            if bad.start <= offset:
                self._corrupt(bad.start, bad.end, base, bad.reason)
            if isinstance(data, Pieces):  # not kept: the read after it reports the group
                return data.copy(start, bad.start - start)
            return memoryview(data)[: bad.start - start]
        self._keep_span(start, data)
        return data

    def _corrupt(self, start: int, end: int, base: int, reason: str) -> None:
        path = os.fspath(chunk_path(self.chunks.seg_dir, base))
        for known in self.recorded:
            if known.given_up and known.holds(start, end):
                raise DataGivenUp(self.name, start, end, path, known.reason, known.given_up)
        error = CorruptData(self.name, start, end, path, reason)
        if self._on_corrupt is not None:
            self._on_corrupt(error)
        raise error


def recorded_reason(recorded: list[CorruptRange], start: int, end: int, otherwise: str) -> str:
    """Why the segment's state says [start, end) is corrupt (what recovery found there: a range it kept
    below the recovery point ends a chunk before the next one's start), else `otherwise`."""
    return next((r.reason for r in recorded if (r.start, r.end) == (start, end)), otherwise)


def _whole_groups(layout: groups.ChunkLayout, base: int, offset: int, n: int) -> tuple[int, int, list[int]]:
    """[start, end) of the whole groups from the one holding `offset` (from the chunk's header, before its
    first group) to the last that ends by `offset + n` (at least that one group), and where they start."""
    starts = layout.groups
    first = bisect.bisect_right(starts, offset) - 1
    if first < 0:
        span_start = base
        first = 0
    else:
        span_start = starts[first]
    if offset + n >= layout.end:
        after = len(starts)
    else:
        after = max(bisect.bisect_right(starts, offset + n) - 1, first + 1)
    span_end = starts[after] if after < len(starts) else layout.end
    return span_start, span_end, starts[first:after]


def _verify_pieces(data: Pieces, group_starts: list[int]) -> groups.Corrupt | None:
    """groups.verify_span over pieces: each group's CRC32C folded over the pieces that hold it (no copy);
    the first group that fails, else None."""
    for i, start in enumerate(group_starts):
        stop = group_starts[i + 1] if i + 1 < len(group_starts) else data.end
        head = data.copy(start, min(groups.COMMIT_SIZE, stop - start))
        if groups.group_extent(head, start) != stop - start:
            return groups.Corrupt(start, stop, "no commit record of the group's offset and length")
        fields = head[_COMMIT_FIELDS]
        crc = crc32c(fields)
        for view in data.views(start + groups.COMMIT_SIZE, stop):
            crc = crc32c(view, crc)
        if groups.commit_record(fields, crc) != head:
            return groups.Corrupt(start, stop, "checksum mismatch")
    return None
