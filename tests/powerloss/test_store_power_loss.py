"""The store through power losses: a process appends with fsync=always on a file system that loses what
was not synced (lazyfs.py); it is SIGKILLed and the power cut, every way, again and again. After each:
every acknowledged event is there (exactly once for writer appends, at least once for the others), no
byte that fails its checksum is served, and the store opens and goes on."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logport.errors import CorruptData
from logport.store.files import SegmentState
from logport.store.reader import DirectoryReader
from logport.store.verify import verify_segment
from tests.conftest import REPO

from .lazyfs import MODES, LazyFS, fuse_skip_reason
from .store_writer import WRITERS

POWER_LOSSES = 60


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyFS]:
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as fs:
        yield fs


def run_until_killed(data_dir: Path, seed: int, rng: random.Random, acked: dict[str, dict[int, bytes]],
                     direct: bool = False) -> int:
    """Start the writer process, let it append a random while, SIGKILL it; returns the acks it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.powerloss.store_writer", str(data_dir), str(seed),
                             *(["direct"] if direct else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    buffer = b""
    acks = 0
    opened = False
    target = rng.randint(50, 600)  # acknowledgements before the power goes
    deadline = time.monotonic() + 30
    poller = select.poll()
    poller.register(proc.stdout, select.POLLIN)
    try:
        while acks < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {acks} acks in 30 s; stderr: {proc.stderr.read1().decode() if proc.stderr else ''}")
            if not poller.poll(1000):  # poll, not select: earlier tests leave descriptors past FD_SETSIZE
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise AssertionError(f"the writer exited ({proc.wait()}): ...{err[-3000:]}")
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line == b"OPEN":
                    opened = True
                    continue
                kind, segment, offset, body = line.split(b" ", 3)
                if kind == b"ACK":  # a duplicate's offset is the segment's end, not where the item is
                    acked[segment.decode()][int(offset)] = body
                    acks += 1
        assert opened
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return acks


def check(data_dir: Path, acked: dict[str, dict[int, bytes]]) -> dict[str, int]:
    reader = DirectoryReader(data_dir)
    counts = {}
    for segment, bodies in acked.items():
        start, _, _ = reader.bounds(segment)
        stored: dict[int, bytes] = {}
        try:
            for _, offset, body in reader.follow(segment):
                stored[offset] = bytes(body)
        except CorruptData as e:  # nothing stored may fail its checksum
            raise AssertionError(f"after a power loss: {e}") from e
        lost = {o: b for o, b in bodies.items() if o >= start and stored.get(o) != b}
        assert not lost, (f"{segment}: {len(lost)} acknowledged events lost or changed, first {min(lost)}: "
                          f"{sorted(lost)[:5]}, stored up to {max(stored, default=None)}; {len(stored)} stored")
        if segment == "exact":  # every writer item at most once
            seen = [b for b in stored.values()]
            assert len(seen) == len(set(seen)), "a writer's item stored twice"
        report = verify_segment(data_dir, segment)
        assert not report.bad, report.bad
        # nothing below a recovery point failed: nothing was quarantined (the writer's opens recorded none)
        assert not SegmentState.load(data_dir / "segments" / segment).corrupt
        counts[segment] = len(stored)
    return counts


@pytest.mark.parametrize("direct", [False, True], ids=["fdatasync", "direct_io"])
def test_the_store_loses_nothing_acknowledged_through_power_losses(lazy: LazyFS, direct: bool) -> None:
    """direct_io: commits into recycled and written-ahead chunks are O_DIRECT|O_DSYNC writes, each durable
    when it returns and nothing else with it (the file system makes only that write durable)."""
    rng = random.Random(int(os.environ.get("LOGPORT_POWERLOSS_SEED", "20261125")))
    data_dir = lazy.mountpoint / "data"
    acked: dict[str, dict[int, bytes]] = {"exact": {}, "plain": {}}
    modes: dict[str, int] = {}
    total_acks = 0
    for n in range(POWER_LOSSES):
        total_acks += run_until_killed(data_dir, n, rng, acked, direct)
        mode = MODES[n % len(MODES)]
        lazy.power_loss(mode, seed=rng.randrange(1 << 30), block=rng.choice([0, 512, 4096]))
        modes[mode] = modes.get(mode, 0) + 1
        counts = check(data_dir, acked)
    spares = list((data_dir / "segments" / "exact").glob("spare.*.chunk"))
    stats = lazy.stats()
    print(f"\nstore power loss{' (direct_io)' if direct else ''}: {POWER_LOSSES} power losses ({modes}), "
          f"{total_acks} acknowledged appends, {counts} events stored at the end, {len(spares)} spare chunks, "
          f"{stats['fdatasyncs']} fdatasyncs, {stats['sync_writes']} O_DSYNC writes, {WRITERS} exactly-once writers")
    # direct_io commits went through the O_DSYNC descriptor (it is not refused and left to fdatasync)
    assert (stats["sync_writes"] > stats["fdatasyncs"]) if direct else stats["sync_writes"] == 0
