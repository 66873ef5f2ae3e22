"""Scrub a data directory: every commit group's checksum, the frames inside it, the writer records, and
that each chunk's data ends where the next chunk starts. Read-only, so it runs beside a running hub (its
last chunk is checked as far as it is written)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from logport.store import marks
from logport.store.files import SEGMENTS_DIR, SegmentState, chunk_path, list_chunk_bases
from logport.store.groups import VERSION, walk_chunk, why_the_data_ends
from logport.store.reader import DirectoryReader
from logport.store.verified import recorded_reason


@dataclass(frozen=True, slots=True)
class BadRange:
    segment: str
    start: int
    end: int
    file: str
    reason: str


@dataclass(slots=True)
class SegmentReport:
    segment: str
    chunks: int = 0
    v1_chunks: int = 0  # written by a release before format v2: no checksums to check
    groups: int = 0
    bytes: int = 0  # data bytes checked (up to each chunk's end)
    bad: list[BadRange] = field(default_factory=list)
    given_up: list[BadRange] = field(default_factory=list)  # bad ranges `verify --repair` gave up: skipped by reads


def verify_segment(data_dir: str | Path, name: str,
                   progress: Callable[[int], None] | None = None) -> SegmentReport:
    """Check every chunk of a segment (and its last one up to its recovery point: a range there that fails is
    corrupt, not a torn write); `progress` hears the bytes of each chunk file read."""
    seg_dir = Path(data_dir) / SEGMENTS_DIR / name
    report = SegmentReport(name)
    found = marks.load(seg_dir)  # before the chunks are listed and walked: each mark was true by then
    if found.error:
        report.bad.append(BadRange(name, 0, 0, str(seg_dir / marks.MARKS_FILE),
                                   f"{found.error}: the segment's recovery point is unknown"))
    bases = list_chunk_bases(seg_dir)
    state = SegmentState.load(seg_dir)
    start = state.start_offset
    point = found.recovery_point(bases[0]) if bases else None
    for i, base in enumerate(bases):
        path = chunk_path(seg_dir, base)
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # retention dropped it meanwhile
            continue
        if progress is not None:
            progress(len(data))
        layout = walk_chunk(data, base)
        if i + 1 == len(bases) and point is not None and point.base >= base:
            why = (why_the_data_ends(data[layout.end - base :], layout) if point.base == base
                   else f"the chunk file of offset {point.base} is missing")
            below = marks.below_recovery_point(layout, point, why)
            if below is not None:
                layout.corrupt.append(below)
        report.chunks += 1
        report.bytes += layout.end - base
        report.groups += len(layout.groups)
        if layout.version == 1:
            report.v1_chunks += 1
        elif layout.version != VERSION:
            report.bad.append(BadRange(name, base, base + len(data), str(path), "the chunk header fails its check"))
        for bad in layout.corrupt:
            report.bad.append(BadRange(name, bad.start, bad.end, str(path), bad.reason))
        if i + 1 < len(bases) and layout.end != bases[i + 1] and bases[i + 1] > start:
            report.bad.append(BadRange(name, layout.end, bases[i + 1], str(path), recorded_reason(
                state.corrupt, layout.end, bases[i + 1],
                f"the chunk's valid data ends at {layout.end}, but the next chunk starts at {bases[i + 1]}")))
    given_up = state.given_up()
    for found_bad in list(report.bad):
        if found_bad.end > found_bad.start and any(r.holds(found_bad.start, found_bad.end) for r in given_up):
            report.bad.remove(found_bad)
            report.given_up.append(found_bad)
    return report


def verify(data_dir: str | Path, names: list[str] | None = None,
           progress: Callable[[int], None] | None = None) -> Iterator[SegmentReport]:
    for name in names if names else DirectoryReader(data_dir).segment_names():
        yield verify_segment(data_dir, name, progress)


def total_bytes(data_dir: str | Path, names: list[str]) -> int:
    """The size of the chunk files to read, for a progress line."""
    total = 0
    for name in names:
        seg_dir = Path(data_dir) / SEGMENTS_DIR / name
        for base in list_chunk_bases(seg_dir):
            try:
                total += os.stat(chunk_path(seg_dir, base)).st_size
            except FileNotFoundError:
                pass
    return total
