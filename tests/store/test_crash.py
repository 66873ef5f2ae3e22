"""kill -9 at random moments: every acknowledged append survives, at its offset, exactly once, intact."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.store import SegmentStore, frames
from logport.store.files import chunk_path, list_chunk_bases
from logport.store.groups import walk_chunk
from logport.store.reader import DirectoryReader

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import SEGMENT, TASKS, payload, writer_event, writer_key  # noqa: E402

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 20
WRITER_TASKS = [t for t in range(TASKS) if t % 3 == 1]


@dataclass(frozen=True)
class Acked:
    offset: int  # of the append's first frame
    ids: tuple[int, ...]  # its events, one frame each
    key: bytes | None
    end: int | None


@dataclass
class Round:
    acked: list[Acked]
    resends: list[tuple[bytes, int, bool]]  # (key, end, answered as a duplicate)


def run_child_and_kill(data_dir: Path, round_: int, rng: random.Random) -> Round:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(data_dir), str(round_)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read() if proc.stderr else ""
    time.sleep(rng.uniform(0.02, 0.4))
    os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"the child died before the kill: {err}"
    result = Round([], [])
    for line in out.splitlines():
        fields = line.split()
        if fields[-1:] != [";"]:
            continue  # a line cut by the kill is not counted: the store may still hold it (unacknowledged)
        if fields[0] == "A":
            offset, key, end, *ids = fields[1:-1]
            result.acked.append(Acked(int(offset), tuple(map(int, ids)), None if key == "-" else key.encode(),
                                      None if end == "-" else int(end)))
        elif fields[0] == "D":
            result.resends.append((fields[1].encode(), int(fields[2]), fields[3] == "1"))
    return result


def recover(data_dir: Path) -> tuple[dict[bytes, int], int]:
    """The restart: recovery ends the segment before what was torn. Returns each writer's stored offset,
    and the segment's end."""
    async def open_close() -> tuple[dict[bytes, int], int]:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
        try:
            writers = {writer_key(t): store.writer_offset(SEGMENT, writer_key(t)) for t in WRITER_TASKS}
            return writers, store.info(SEGMENT).end_offset
        finally:
            await store.close()

    return asyncio.run(open_close())


def check_files(data_dir: Path, acked: list[Acked], writers: dict[bytes, int], end: int) -> int:
    seg_dir = data_dir / "segments" / SEGMENT
    bases = list_chunk_bases(seg_dir)
    for base, nxt in zip(bases, bases[1:], strict=False):
        # a chunk's data (its file may be longer: written ahead) ends where the next one starts, every group of
        # it valid (had recovery not ended the segment before a torn group, the appends after it would have
        # left that group in the chunk as a corrupt range)
        layout = walk_chunk(chunk_path(seg_dir, base).read_bytes(), base)
        assert (layout.end, layout.corrupt) == (nxt, []), f"chunk {base}"
    # what follows the last valid group (a torn append, zeros) is not data: the store and a reader end there
    last = walk_chunk(chunk_path(seg_dir, bases[-1]).read_bytes(), bases[-1])
    assert last.corrupt == [] and last.end == end, "the store's end is not where the last chunk's valid data ends"
    assert DirectoryReader(data_dir).bounds(SEGMENT)[1] == end
    stored: dict[int, bytes] = {}  # offset -> body
    seen: dict[int, int] = {}
    for offset, body in DirectoryReader(data_dir).iter_events(SEGMENT):
        event_id = int(bytes(body[:12]))
        assert bytes(body) == payload(event_id), f"event {event_id} at {offset} is corrupt"
        stored[offset] = bytes(body)
        seen[event_id] = seen.get(event_id, 0) + 1
    twice = [i for i, n in seen.items() if n > 1]
    assert not twice, f"{len(twice)} events are stored twice, e.g. {twice[:5]}"
    for append in acked:  # each acknowledged append is where the store said, whole
        offset = append.offset
        for event_id in append.ids:
            assert stored.get(offset) == payload(event_id), f"acknowledged event {event_id} is not at {offset}"
            offset += frames.HEADER_SIZE + len(payload(event_id))
    for task in WRITER_TASKS:  # a writer's appends up to its stored offset: each there once, no more
        stored_ids = {i for i in seen if writer_event(task, 0) < i < writer_event(task + 1, 0)}
        assert stored_ids == {writer_event(task, e) for e in range(1, writers[writer_key(task)] + 1)}
    return len(seen)


@pytest.mark.slow
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CRASH_SEED", "1234")))
    acked: list[Acked] = []
    acked_ends: dict[bytes, int] = {}
    resends = 0
    stored = 0
    for round_ in range(KILLS):
        result = run_child_and_kill(tmp_path, round_, rng)
        acked += result.acked
        for key, end, duplicate in result.resends:
            assert duplicate, f"writer {key!r}: the resent append {end}, stored already, was not a duplicate"
            assert end >= acked_ends.get(key, 0)
        resends += len(result.resends)
        for append in result.acked:
            if append.key is not None and append.end is not None:
                acked_ends[append.key] = max(acked_ends.get(append.key, 0), append.end)
        writers, segment_end = recover(tmp_path)
        for key, end in acked_ends.items():
            assert writers[key] >= end, f"writer {key!r} stored {writers[key]} after {end} was acknowledged"
        stored = check_files(tmp_path, acked, writers, segment_end)
    events = sum(len(a.ids) for a in acked)
    assert events > KILLS * 10, "the child acknowledged too little for the test to mean much"
    assert stored >= events
    assert set(acked_ends) == {writer_key(t) for t in WRITER_TASKS} and resends >= KILLS
