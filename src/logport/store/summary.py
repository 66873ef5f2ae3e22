"""A segment's row of `logport segments`, in time independent of the segment's size: each chunk's events from
its mark (store/marks.py), checked against the chunk (its mark's COMMIT frame; the last chunk's last group
whole), the last chunk walked on from its mark to its end; a chunk without a mark that holds (written before
the marks, or a mark that does not match) walked and counted. `exact` walks and counts every chunk. Corrupt
ranges are listed: those the hub recorded (found on open), those a check or a walk meets, the ones given up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from logport.errors import CorruptData, DataGivenUp
from logport.store import counting, frames, groups, marks
from logport.store.files import ChunkReader, SegmentState, chunk_path
from logport.store.reader import READ_SIZE, DirectoryReader

_TAIL_WINDOW = 1024 * 1024  # bytes of the last chunk read at a time after its mark


@dataclass(slots=True)
class SegmentSummary:
    segment: str
    start_offset: int
    end_offset: int
    events: int
    sealed: bool
    corrupt: list[dict[str, Any]] = field(default_factory=list)  # {start, end, reason}, not given up
    given_up: list[dict[str, Any]] = field(default_factory=list)  # {start, end, reason, given_up}
    walked_bytes: int = 0  # what was read and counted beyond the marks

    def row(self) -> dict[str, Any]:
        return {"segment": self.segment, "start_offset": self.start_offset, "end_offset": self.end_offset,
                "bytes": self.end_offset - self.start_offset, "events": self.events, "sealed": self.sealed,
                "corrupt": self.corrupt, "given_up": self.given_up}


def summarize(reader: DirectoryReader, name: str, *, exact: bool = False) -> SegmentSummary:
    seg_dir = reader.root / name
    found = marks.load(seg_dir) if not exact else marks.Marks()  # before the chunks are listed
    chunks = reader.chunk_reader(name)
    state = SegmentState.load(seg_dir)
    reader.verified(name).recorded = state.corrupt
    summary = SegmentSummary(name, state.start_offset, state.start_offset, 0, state.sealed)
    for bad in state.corrupt:
        entry = {"start": bad.start, "end": bad.end, "reason": bad.reason}
        (summary.given_up if bad.given_up else summary.corrupt).append(
            {**entry, "given_up": bad.given_up} if bad.given_up else entry)
    if found.error:
        summary.corrupt.append({"start": 0, "end": 0, "reason": found.error})
    bases = chunks.bases
    if not bases:
        return summary
    start = summary.start_offset = max(state.start_offset, bases[0])
    if exact:
        _, end, _ = reader.bounds(name)
        summary.end_offset = end
        summary.events = _count_exact(reader, name, start, end, summary)
        summary.walked_bytes = end - start
        return summary
    for i, base in enumerate(bases[:-1]):
        mark = found.by_base.get(base)
        following = bases[i + 1]
        if (mark is not None and base >= start and mark.sealed and marks.matches(mark, _pread(chunks, base))
                and (mark.end == following or _known(summary, mark.end, following))):
            summary.events += mark.events
        else:
            summary.events += _count_exact(reader, name, max(base, start), following, summary)
            summary.walked_bytes += following - max(base, start)
    last = bases[-1]
    mark = found.by_base.get(last)
    point = found.recovery_point(bases[0])
    if mark is not None and last >= start and mark is point and _whole_at_its_end(chunks, mark):
        summary.end_offset, events, walked = _walk_on(chunks, mark)
        summary.events += events
        summary.walked_bytes += walked
    else:  # walked whole, as a reader walks it for its end (with the recovery point), and counted
        _, end, _ = reader.bounds(name)
        summary.end_offset = end
        summary.events += _count_exact(reader, name, max(last, start), end, summary)
        summary.walked_bytes += end - max(last, start)
    summary.end_offset = max(summary.end_offset, start)
    return summary


def _pread(chunks: ChunkReader, base: int) -> marks.Pread:
    path = chunk_path(chunks.seg_dir, base)

    def pread(position: int, n: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(position)
            return f.read(n)

    return pread


def _known(summary: SegmentSummary, start: int, end: int) -> bool:
    """Whether [start, end) is a corrupt range the summary lists already (recorded by the hub)."""
    return any(r["start"] <= start and end <= r["end"] for r in summary.corrupt + summary.given_up)


def _whole_at_its_end(chunks: ChunkReader, mark: marks.ChunkMark) -> bool:
    """The last chunk's mark matches it and its last group passes its checksum (the group a damaged tail
    would hit first)."""
    pread = _pread(chunks, mark.base)
    if not marks.matches(mark, pread):
        return False
    if mark.last_group == mark.base:
        return True
    data = pread(mark.last_group - mark.base, mark.end - mark.last_group)
    return groups.verify_span(data, mark.last_group, [mark.last_group]) is None


def _walk_on(chunks: ChunkReader, mark: marks.ChunkMark) -> tuple[int, int, int]:
    """(end, events, bytes read) of the last chunk from its mark on: the groups written since, a window at a
    time, up to the first that fails its check (the hub may be writing it)."""
    base = mark.base
    size = chunks.chunk_end(base) - base
    pos, prev, events = mark.end - base, mark.last_crc, mark.events
    read = 0
    while pos < size:
        want = min(_TAIL_WINDOW, size - pos)
        head = chunks.pread(base + pos, groups.COMMIT_SIZE, base + size)
        extent = groups.group_extent(head, base + pos)
        if extent is None:
            break
        data = chunks.pread(base + pos, min(max(want, extent), size - pos), base + size)
        read += len(data)
        part = groups.walk_chunk(data, base, at=pos, prev=prev, search=False)
        if part.end == base + pos:
            break
        for at in part.groups:
            length = groups.group_extent(memoryview(data)[at - base - pos :], at)
            assert length is not None
            events += counting.count_frames(memoryview(data)[at - base - pos + groups.COMMIT_SIZE : at - base - pos + length])
        pos, prev = part.end - base, part.last_crc
    return base + pos, events, read


def _count_exact(reader: DirectoryReader, name: str, start: int, end: int, summary: SegmentSummary) -> int:
    """Events in [start, end), every byte read and checked; a corrupt range is listed and counted past."""
    verified = reader.verified(name)
    events = 0
    offset = start
    while offset < end:
        try:
            data = verified.read_view(offset, READ_SIZE, end)
        except DataGivenUp as e:
            _note(summary.given_up, e, {"given_up": e.when})
            offset = e.end
            continue
        except CorruptData as e:
            _note(summary.corrupt, e, {})
            offset = e.end
            continue
        if not data:
            break
        counted, whole = counting.count_whole_frames(data)
        if whole == 0:  # one frame longer than the read
            _, length = frames.HEADER.unpack_from(verified.read_view(offset, frames.HEADER_SIZE, end), 0)
            data = verified.read_view(offset, frames.HEADER_SIZE + length, end)
            counted, whole = counting.count_whole_frames(data)
        events += counted
        offset += whole
    return events


def _note(ranges: list[dict[str, Any]], error: CorruptData, extra: dict[str, Any]) -> None:
    if not any(r["start"] == error.start and r["end"] == error.end for r in ranges):
        ranges.append({"start": error.start, "end": error.end, "reason": error.reason, **extra})
