"""Store appends with fsync=always (1 KiB and 64 KiB frames; 1, 4, 16 writers) beside the disk's raw rate.

The raw figure writes the same total in the same frame-sized pieces with plain
os.write and one fdatasync at the end, on the same filesystem, in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import header, median, percentile, run_async, table  # noqa: E402

from logport.config import StoreConfig  # noqa: E402
from logport.store import SegmentStore  # noqa: E402

MiB = 1024 * 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: ./bench-out)")
    p.add_argument("--sizes", default="1024,65536", help="frame sizes in bytes")
    p.add_argument("--writers", default="1,4,16", help="concurrent writer counts")
    p.add_argument("--mib-small", type=int, default=16, help="MiB appended per case for frames < 64 KiB")
    p.add_argument("--mib-large", type=int, default=256, help="MiB appended per case for 64 KiB frames")
    p.add_argument("--fsync", default="always", choices=["always", "interval", "never"])


def raw_write(path: Path, frame: int, total: int, sync_every: int = 0) -> float:
    """Seconds to write `total` bytes in `frame`-sized os.write calls and fdatasync at the end
    (and, with `sync_every`, after every that many bytes: an ideal group commit's schedule)."""
    buf = os.urandom(frame)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.perf_counter()
    written = 0
    for _ in range(total // frame):
        os.write(fd, buf)
        written += frame
        if sync_every and written % sync_every == 0:
            os.fdatasync(fd)
    os.fdatasync(fd)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    path.unlink()
    return elapsed


async def store_append(root: Path, frame: int, writers: int, total: int, fsync: str) -> tuple[float, list[float]]:
    """(seconds, per-append latencies) to append `total` bytes of `frame`-byte events from `writers` tasks."""
    shutil.rmtree(root, ignore_errors=True)
    store = await SegmentStore.open(StoreConfig(data_dir=str(root), fsync=fsync))  # type: ignore[arg-type]
    body = os.urandom(frame - 8)  # the 8-byte frame header makes it a `frame`-byte frame
    per_writer = max(1, total // frame // writers)
    latencies: list[float] = []
    await store.create("bench")

    async def one_writer() -> None:
        for _ in range(per_writer):
            t0 = time.perf_counter()
            await store.append("bench", [body])
            latencies.append(time.perf_counter() - t0)

    import asyncio

    t0 = time.perf_counter()
    await asyncio.gather(*(one_writer() for _ in range(writers)))
    elapsed = time.perf_counter() - t0
    await store.close()
    shutil.rmtree(root, ignore_errors=True)
    return elapsed, latencies


def run(args: argparse.Namespace) -> int:
    base = Path(args.dir or "bench-out")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=base))
    header(f"store: appends with fsync={args.fsync} beside raw write+fdatasync, {work}")
    rows = []
    try:
        for frame in (int(s) for s in args.sizes.split(",")):
            total = (args.mib_large if frame >= 65536 else args.mib_small) * MiB
            raw_s = raw_write(work / "raw", frame, total)
            raw_mbs = total / raw_s / 1e6
            for writers in (int(w) for w in args.writers.split(",")):
                elapsed, lat = run_async(lambda f=frame, w=writers, t=total: store_append(work / "store", f, w, t, args.fsync))
                grouped_mbs = total / raw_write(work / "raw", frame, total, sync_every=frame * writers) / 1e6
                appended = len(lat) * frame
                mbs = appended / elapsed / 1e6
                rows.append((f"{frame // 1024} KiB", writers, round(mbs, 1), round(raw_mbs, 1),
                             f"{mbs / raw_mbs:.0%}", round(grouped_mbs, 1), f"{mbs / grouped_mbs:.0%}",
                             round(len(lat) / elapsed), round(median(lat) * 1e3, 3),
                             round(percentile(lat, 0.99) * 1e3, 3)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table(["frame", "writers", "store MB/s", "raw MB/s", "store/raw", "raw per-group MB/s", "store/per-group",
           "appends/s", "p50 ms", "p99 ms"], rows)
    print("# raw: the same total in frame-sized os.write calls, one fdatasync at the end;")
    print("# raw per-group: the same, with an fdatasync after every writers x frame bytes, the most an")
    print("# acknowledged-after-fsync append can do when each writer has one append in flight.")
    return 0
