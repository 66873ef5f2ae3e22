"""kill -9 at random moments: every acknowledged event survives, exactly once, intact."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.store import SegmentStore, frames
from logport.store.files import chunk_path, list_chunk_bases
from logport.store.reader import DirectoryReader

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import payload  # noqa: E402

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 20


def run_child_and_kill(data_dir: Path, round_: int, rng: random.Random) -> set[int]:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(data_dir), str(round_)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read() if proc.stderr else ""
    time.sleep(rng.uniform(0.02, 0.4))
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    acked: set[int] = set()
    for line in out.splitlines():
        if line.startswith("A ") and line.endswith(tuple("0123456789")):
            acked.update(int(x) for x in line[2:].split())
    # a line cut by the kill is not counted: the store may still hold it (unacknowledged)
    return acked


def recover(data_dir: Path) -> None:
    async def open_close() -> None:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
        await store.close()

    asyncio.run(open_close())


def check_files(data_dir: Path, acked: set[int]) -> int:
    seg_dir = data_dir / "segments" / "crash"
    bases = list_chunk_bases(seg_dir)
    for base, nxt in zip(bases, bases[1:], strict=False):
        assert base + chunk_path(seg_dir, base).stat().st_size == nxt
    last = chunk_path(seg_dir, bases[-1]).read_bytes()
    assert frames.complete_prefix(last) == len(last), "bytes follow the last intact frame"
    seen: dict[int, int] = {}
    for _, body in DirectoryReader(data_dir).iter_events("crash"):
        event_id = int(bytes(body[:12]))
        assert bytes(body) == payload(event_id), f"event {event_id} is corrupt"
        seen[event_id] = seen.get(event_id, 0) + 1
    assert all(n == 1 for n in seen.values()), "an event is stored twice"
    missing = acked - seen.keys()
    assert not missing, f"{len(missing)} acknowledged events are missing, e.g. {sorted(missing)[:5]}"
    return len(seen)


@pytest.mark.slow
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CRASH_SEED", "1234")))
    acked: set[int] = set()
    stored = 0
    for round_ in range(KILLS):
        acked |= run_child_and_kill(tmp_path, round_, rng)
        recover(tmp_path)  # the restart: recovery cuts what was torn
        stored = check_files(tmp_path, acked)
    assert len(acked) > KILLS * 10, "the child acknowledged too little for the test to mean much"
    assert stored >= len(acked)
