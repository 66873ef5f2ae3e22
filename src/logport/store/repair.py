"""Giving corrupt ranges up (`logport verify --repair SEGMENT`): what verify finds corrupt in a segment is
recorded in its state (state.json) as given up, with the time, and from then on readers skip those ranges with
a warning instead of refusing them. Nothing in the chunk files changes. The data directory's lock is taken
meanwhile: the hub, which keeps the segment's state, is not running."""

from __future__ import annotations

import time
from pathlib import Path

from logport.config import check_segment_name
from logport.errors import NoSuchSegment
from logport.store import marks
from logport.store.files import SEGMENTS_DIR, CorruptRange, SegmentState
from logport.store.lock import DataDirectoryLock
from logport.store.verify import BadRange, verify_segment


def give_up(data_dir: str | Path, names: list[str]) -> dict[str, list[BadRange]]:
    """Give up the corrupt ranges of each named segment; what was given up, per segment. DataDirectoryInUse
    while a hub runs on the directory, NoSuchSegment for a name that is none."""
    lock = DataDirectoryLock.acquire(data_dir)
    try:
        given: dict[str, list[BadRange]] = {}
        for name in names:
            check_segment_name(name)
            seg_dir = Path(data_dir) / SEGMENTS_DIR / name
            if not seg_dir.is_dir():
                raise NoSuchSegment(name)
            report = verify_segment(data_dir, name)
            state = SegmentState.load(seg_dir)
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for bad in report.bad:
                if bad.end <= bad.start:  # the marks file fails its check: the next start records new marks
                    (seg_dir / marks.MARKS_FILE).unlink(missing_ok=True)
                    continue
                known = next((r for r in state.corrupt if (r.start, r.end) == (bad.start, bad.end)), None)
                if known is None:
                    state.corrupt.append(CorruptRange(bad.start, bad.end, bad.reason, given_up=now))
                else:
                    known.given_up = now
            state.save(seg_dir)
            given[name] = report.bad
        return given
    finally:
        lock.release()
