"""Reads that hand out only bytes whose commit groups pass their checksum (format v2).

A read is widened to the whole groups that cover it, each group is checked, and the requested bytes
are cut from them; a range that fails raises CorruptData naming the segment, the range and the file.
The last verified span is kept, so a reader walking a large group in small reads checks it once. v1
chunks carry no checksums: their bytes are read as they are.
"""

from __future__ import annotations

import bisect
import collections
import os
from collections.abc import Callable

from logport.errors import CorruptData
from logport.store import groups
from logport.store.files import ChunkReader, chunk_path

_LAYOUTS_KEPT = 8  # layouts of chunks other than the last, walked when first read
_SPANS_KEPT = 4  # verified spans kept for readers at different places of one segment
_SPAN_BYTES_KEPT = 64 * 1024 * 1024


class VerifiedReads:
    """Checked reads of one segment's chunks. The owner says what the last chunk holds (`set_last`):
    the store's writer from its own commits, a DirectoryReader from its walk of the file."""

    def __init__(self, name: str, chunks: ChunkReader, on_corrupt: Callable[[CorruptData], None] | None = None) -> None:
        self.name = name
        self.chunks = chunks
        self._on_corrupt = on_corrupt
        self.last: groups.ChunkLayout | None = None
        self._layouts: collections.OrderedDict[int, groups.ChunkLayout] = collections.OrderedDict()
        self._spans: collections.OrderedDict[int, bytes] = collections.OrderedDict()  # start -> verified bytes

    def set_last(self, layout: groups.ChunkLayout) -> None:
        """The last chunk's layout from now on. The one before is not kept: a reader beside the hub may not
        have walked its last groups when the hub rolled; it is walked whole when it is read next."""
        last = self.last
        if last is not None and last is not layout and last.base == layout.base:
            for start in [k for k in self._spans if k >= layout.base]:  # walked again: what was read may be gone
                del self._spans[start]
        self._layouts.pop(layout.base, None)
        self.last = layout

    def _keep(self, layout: groups.ChunkLayout) -> None:
        self._layouts[layout.base] = layout
        self._layouts.move_to_end(layout.base)
        while len(self._layouts) > _LAYOUTS_KEPT:
            self._layouts.popitem(last=False)

    def forget_below(self, base: int) -> None:
        for key in [k for k in self._layouts if k < base]:
            del self._layouts[key]
        for key in [k for k in self._spans if k < base]:
            del self._spans[key]

    def layout(self, base: int, next_base: int | None) -> groups.ChunkLayout:
        """The layout of the chunk at `base`; `next_base`: where the chunk after it starts (None: it is
        the last, walked to its file's end and not kept, as it may grow)."""
        if self.last is not None and self.last.base == base:
            return self.last
        layout = self._layouts.get(base)
        if layout is not None:
            self._layouts.move_to_end(base)
            return layout
        stop = next_base if next_base is not None else self.chunks.chunk_end(base)
        layout = groups.walk_chunk(self.chunks.pread(base, stop - base, stop), base)
        if next_base is not None:
            if layout.version != 1 and layout.end < next_base:  # a chunk before the last ends where the next starts
                layout.corrupt.append(groups.Corrupt(layout.end, next_base, f"the chunk's valid data ends at "
                                                     f"{layout.end}, before the next chunk starts at {next_base}"))
            self._keep(layout)
        return layout

    def read(self, offset: int, max_bytes: int, end: int) -> bytes:
        """Up to `max_bytes` from `offset`, within one chunk and below `end`, every byte checked."""
        base, stop = self.chunks.chunk_span(offset, end)
        n = min(max_bytes, stop - offset)
        if n <= 0:
            return b""
        layout = self.layout(base, self._next_base(base))
        if layout.version == 1:
            return self.chunks.pread(offset, n, stop)
        for bad in layout.corrupt:  # what is good before a corrupt range is read; the range itself is refused
            if bad.start <= offset < bad.end:
                self._corrupt(bad.start, bad.end, base, bad.reason)
            if offset < bad.start < offset + n:
                n = bad.start - offset
        if layout.version == 0 and not layout.groups:
            self._corrupt(base, stop, base, "the chunk header fails its check")
        starts = layout.groups
        first = bisect.bisect_right(starts, offset) - 1
        if first < 0:  # the chunk's header, before its first group
            span_start = base
            first = 0
        else:
            span_start = starts[first]
        after = bisect.bisect_left(starts, offset + n)
        span_end = starts[after] if after < len(starts) else layout.end  # whole groups, even past `end`
        data = self._span(span_start, span_end, base, starts[first:after], offset)
        return bytes(data[offset - span_start : offset - span_start + n])

    def _next_base(self, base: int) -> int | None:
        bases = self.chunks.bases
        i = bisect.bisect_right(bases, base)
        return bases[i] if i < len(bases) else None

    def _span(self, start: int, end: int, base: int, group_starts: list[int], offset: int) -> memoryview:
        """The checked bytes of whole groups [start, end); a group that fails (changed since the chunk
        was walked) ends them, or raises CorruptData when it holds `offset`, the read's start."""
        for span_start, data in self._spans.items():
            if span_start <= start and end <= span_start + len(data):
                self._spans.move_to_end(span_start)
                return memoryview(data)[start - span_start : end - span_start]  # no copy of a span kept whole
        data = self.chunks.pread(start, end - start, end)
        if len(data) < end - start:
            self._corrupt(start + len(data), end, base, "the file ends before the data it committed")
        if start == base and groups.chunk_version(data, base) != groups.VERSION:  # changed since the walk
            self._corrupt(base, base + groups.CHUNK_HEADER_SIZE, base, "the chunk header fails its check")
        bad = groups.verify_span(data, start, group_starts)
        if bad is not None:
            if bad.start <= offset:
                self._corrupt(bad.start, bad.end, base, bad.reason)
            return memoryview(data)[: bad.start - start]  # not kept: the read after it reports the group
        if end - start <= _SPAN_BYTES_KEPT:
            self._spans[start] = data
            while len(self._spans) > _SPANS_KEPT:
                self._spans.popitem(last=False)
        return memoryview(data)

    def _corrupt(self, start: int, end: int, base: int, reason: str) -> None:
        error = CorruptData(self.name, start, end, os.fspath(chunk_path(self.chunks.seg_dir, base)), reason)
        if self._on_corrupt is not None:
            self._on_corrupt(error)
        raise error
