"""`logport segments` on a data directory holding one large segment of small events: from the counts the store
keeps per chunk (store/marks.py), beside `--exact` (every event read and counted) and, with --baseline, that
revision's `logport segments` (before the marks: it read every event).

The directory is made once and kept (--dir; made again when its size or event size differs): --gib GiB of
--event-bytes events appended through the store in blocks of whole frames (SegmentStore.append_framed, the
segment protocol's way in, fsync=never: each chunk is synced as it rolls), counted by the store as it writes
them. Each timed run is the whole command in a process of its own (`python -m logport.cli segments`), its
interpreter's start included.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    baseline_tree,
    header,
    load_average,
    median,
    remove_baseline_tree,
    run_async,
    table,
)

GiB = 1024**3
BLOCK = 4 * 1024 * 1024  # bytes of frames per append


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default="./bench-out/segments", help="where the data directory is made and kept")
    p.add_argument("--gib", type=float, default=10.0, help="GiB of events in the segment")
    p.add_argument("--event-bytes", type=int, default=100, help="bytes of each event's body")
    p.add_argument("--repeat", type=int, default=3, help="runs of `logport segments` (medians)")
    p.add_argument("--exact-repeat", type=int, default=1, help="runs of `logport segments --exact` (0: none)")
    p.add_argument("--baseline", default="", help="a git revision whose `logport segments` runs beside, once")


def make(data_dir: Path, gib: float, event_bytes: int) -> dict[str, float]:
    """The segment, appended through the store; (seconds, events)."""
    from logport.config import StoreConfig
    from logport.store import SegmentStore, frames

    body = b"e" * event_bytes
    frame = frames.frame(body)
    block = frame * (BLOCK // len(frame))
    blocks = int(gib * GiB) // len(block)

    async def fill() -> None:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), fsync="never",
                                                    max_pending_bytes=64 * 1024 * 1024))
        try:
            await store.create("big")
            pending = []
            for _ in range(blocks):
                pending.append(store.submit_framed("big", block))
                if len(pending) >= 8:
                    await pending.pop(0)
            for future in pending:
                await future
        finally:
            await store.close()

    t0 = time.perf_counter()
    run_async(fill)
    return {"seconds": time.perf_counter() - t0, "events": blocks * (BLOCK // len(frame))}


def segments(pythonpath: str, data_dir: Path, *extra: str) -> tuple[float, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "logport.cli", "segments", "--data-dir", str(data_dir), "--json",
                          *extra], capture_output=True, text=True, env=env, check=True)
    seconds = time.perf_counter() - t0
    row = next(json.loads(line) for line in run.stdout.splitlines() if json.loads(line).get("segment") == "big")
    return seconds, row


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    data_dir = root / "data"
    made_file = root / "made.json"
    want = {"gib": args.gib, "event_bytes": args.event_bytes}
    if not made_file.exists() or json.loads(made_file.read_text()).get("want") != want:
        if data_dir.exists():
            subprocess.run(["rm", "-rf", str(data_dir)], check=True)
        root.mkdir(parents=True, exist_ok=True)
        made = make(data_dir, args.gib, args.event_bytes)
        made_file.write_text(json.dumps({"want": want, **made}))
    made = json.loads(made_file.read_text())
    size = sum(p.stat().st_size for p in (data_dir / "segments" / "big").glob("*.log"))
    header(f"segments: `logport segments` on one segment of {size / GiB:.1f} GiB of {args.event_bytes}-byte events "
           f"({made['events']:,} events; made in {made['seconds']:.0f} s through the store), {data_dir}")
    rows = []
    startup = [_python_start() for _ in range(max(1, args.repeat))]
    cases = [("segments (marks)", "", (), args.repeat)]
    if args.exact_repeat:
        cases.append(("segments --exact", "", ("--exact",), args.exact_repeat))
    tree = None
    if args.baseline:
        tree = baseline_tree(args.baseline, Path(tempfile.mkdtemp(prefix="segments-baseline-")))
        cases.append((f"{args.baseline} (baseline) segments", str(tree / "src"), (), 1))
    try:
        for name, pythonpath, extra, repeat in cases:
            times, loads = [], []
            row: dict[str, object] = {}
            for _ in range(repeat):
                seconds, row = segments(pythonpath, data_dir, *extra)
                times.append(seconds)
                loads.append(os.getloadavg()[0])
            rows.append([name, median(times), " ".join(f"{t:.2f}" for t in times), row.get("events"),
                         row.get("end_offset"), " ".join(f"{v:.2f}" for v in loads)])
    finally:
        if tree is not None:
            remove_baseline_tree(tree)
    table(["command", "wall s", "s per run", "events", "end offset", "load (1 min) per run"], rows)
    print(f"# wall s: the whole command in a process of its own, the interpreter's start included (`python -c "
          f"'import logport.cli'` alone: {median(startup):.2f} s); load average now {load_average()}")
    return 0


def _python_start() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import logport.cli, logport.store.reader"], check=True)
    return time.perf_counter() - t0
