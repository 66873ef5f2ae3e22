"""Store appends with fsync=always (1 KiB and 64 KiB frames; 1, 4, 16 writers) beside the disk's raw rate.

Each store case runs in a process of its own, once per chunk mode, in alternating order (`--repeat`):
`recycled` (every roll takes a chunk that retention dropped: blocks allocated and written, so a commit's
fdatasync commits no journal), `fresh` (the next chunk written ahead with zeros in the background while
the appends run: the second write of every byte that pre-writing costs without retention), `none` (new
chunk files, every commit appends); and, with `--baseline REV`, the store of that git revision (format
v1 before f034c9a's successor) in the same run. The raw figure writes the same total in the same
frame-sized pieces with plain os.write and one fdatasync at the end, on the same filesystem.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    baseline_tree,
    header,
    load_average,
    median,
    percentile,
    remove_baseline_tree,
    run_async,
    table,
)

MiB = 1024 * 1024
MODES = ("recycled", "fresh", "none")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: ./bench-out)")
    p.add_argument("--sizes", default="1024,65536", help="frame sizes in bytes")
    p.add_argument("--writers", default="1,4,16", help="concurrent writer counts")
    p.add_argument("--mib-small", type=int, default=16, help="MiB appended per case for frames < 64 KiB")
    p.add_argument("--mib-large", type=int, default=256, help="MiB appended per case for 64 KiB frames")
    p.add_argument("--fsync", default="always", choices=["always", "interval", "never"])
    p.add_argument("--modes", default=",".join(MODES),
                   help="chunk modes of this code: " + ", ".join(MODES) + "; each with +direct: store.direct_io on")
    p.add_argument("--baseline", default="", help="a git revision whose store runs beside, e.g. HEAD~5")
    p.add_argument("--repeat", type=int, default=1, help="runs of each case (medians), order alternating")
    p.add_argument("--chunk-mib", type=int, default=64, help="store.chunk_size in MiB")
    p.add_argument("--writeback-bytes", type=int, default=-1,
                   help="store.writeback_bytes on every side, the baseline's too (default: each side's own)")
    p.add_argument("--measure", default="", help=argparse.SUPPRESS)


def settle() -> None:
    """Commit what the case before left to the filesystem's journal: its files, deleted. On a filesystem
    mounted with `discard` (this machine's ext4) a deletion's discards go with the next journal commit,
    which was the next case's first fsync, and a case measured right after another's rmtree of 700 MB ran
    at two thirds of its rate (2026-11-26)."""
    os.sync()


def raw_write(path: Path, frame: int, total: int, sync_every: int = 0) -> float:
    """Seconds to write `total` bytes in `frame`-sized os.write calls and fdatasync at the end
    (and, with `sync_every`, after every that many bytes: an ideal group commit's schedule)."""
    settle()
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


def crc_ms_per_mb() -> float:
    """Milliseconds of CRC32C (the library format v2 uses) per MB, over 64 MiB of distinct bytes in 1 MiB
    pieces, as a commit group's bodies come from memory, not from the CPU's cache."""
    from crc32c import crc32c

    pool = memoryview(os.urandom(64 * MiB))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for at in range(0, len(pool), MiB):
            crc32c(pool[at : at + MiB])
        best = min(best, time.perf_counter() - t0)
    return best * 1e3 / (len(pool) / 1e6)


def store_config(root: Path, spec: dict[str, Any]) -> Any:
    from logport.config import StoreConfig

    config = StoreConfig(data_dir=str(root), fsync=spec["fsync"], chunk_size=spec["chunk_mib"] * MiB)
    if spec.get("writeback_bytes", -1) >= 0:
        config.writeback_bytes = spec["writeback_bytes"]
    mode, _, direct = spec["mode"].partition("+")
    if mode not in ("baseline", "default"):  # the keys below are format v2's; "default": the store as configured
        config.prewrite_chunks = mode == "fresh"
        # recycled: a spare for every chunk the timed appends reach (see store_append)
        config.spare_chunks = {"recycled": spec["total"] // config.chunk_size + 2, "fresh": 2, "none": 0}[mode]
        config.direct_io = direct == "direct"
    return config


async def store_append(root: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Append `total` bytes of `frame`-byte events from `writers` tasks: seconds, latencies, CPU seconds."""
    import asyncio

    from logport.store import SegmentStore

    frame, writers, total = spec["frame"], spec["writers"], spec["total"]
    shutil.rmtree(root, ignore_errors=True)
    settle()
    config = store_config(root, spec)
    store = await SegmentStore.open(config)
    pool = os.urandom(64 * MiB)
    per_writer = max(1, total // frame // writers)
    await store.create("bench")
    # untimed, in 1 MiB appends: past the first chunk, so that the timed appends go where each mode's steady
    # state has them: recycled chunks (as many chunks as the timed appends fill, and one, then dropped by a
    # truncation, as retention drops them: every chunk the timed appends reach is a spare; before 2026-11-26
    # two passes of one chunk left one or two, and most of the timed appends went into new files; two
    # passes, so that the second, and the chunk the timed appends start in, are recycled files too), a chunk
    # written ahead (the next being written meanwhile), a new file (none; and v1)
    mode = spec["mode"].partition("+")[0]
    warmup = (total // config.chunk_size + 1) * config.chunk_size if mode == "recycled" else config.chunk_size
    for _ in range({"recycled": 2, "default": 0}.get(mode, 1)):
        for i in range(warmup // MiB + 1):
            at = (i * MiB) % (len(pool) - MiB)
            await store.append("bench", [memoryview(pool)[at : at + MiB - 8]])
        if mode == "recycled":
            await store.truncate("bench", store.info("bench").end_offset)
    latencies: list[float] = []

    async def one_writer(w: int) -> None:
        at = (w * 7919 * frame) % (len(pool) - frame)
        for _ in range(per_writer):
            body = memoryview(pool)[at : at + frame - 8]  # the 8-byte frame header makes it a `frame`-byte frame
            at = (at + frame) % (len(pool) - frame)
            t0 = time.perf_counter()
            await store.append("bench", [body])
            latencies.append(time.perf_counter() - t0)

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    await asyncio.gather(*(one_writer(w) for w in range(writers)))
    elapsed = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    # what a reader following the appends pays: the timed appends read back at once, through the store
    info = store.info("bench")
    offset = start = info.end_offset - per_writer * writers * frame
    t1 = time.perf_counter()
    while offset < info.end_offset:
        offset = (await store.read_frames("bench", offset, MiB)).next_offset
    read_back = time.perf_counter() - t1
    await store.close()
    shutil.rmtree(root, ignore_errors=True)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"seconds": elapsed, "latencies": latencies, "cpu": cpu, "read_back_mbs": (offset - start) / read_back / 1e6}


def measure_in_process(spec: dict[str, Any], pythonpath: str) -> dict[str, Any]:
    """store_append in a process of its own (with `pythonpath`: another revision's store). Its result, with
    every latency, goes through a file: once, a result of 91 KB read from the child's stdout pipe ended
    at 65,536 bytes with the child's exit status 0."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.NamedTemporaryFile(prefix="store-bench-", suffix=".json") as out:
        proc = subprocess.run([sys.executable, __file__, "--measure", json.dumps({**spec, "out": out.name})],
                              env=env, check=False)
        if proc.returncode:
            raise RuntimeError(f"measuring {spec} failed ({proc.returncode})")
        return dict(json.loads(Path(out.name).read_text()))


def run(args: argparse.Namespace) -> int:
    if args.measure:
        spec = json.loads(args.measure)
        result = run_async(lambda: store_append(Path(spec["root"]), spec))
        Path(spec["out"]).write_text(json.dumps(result))
        return 0
    base = Path(args.dir or "bench-out")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=base))
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m.partition("+")[0] not in MODES or m.partition("+")[2] not in ("", "direct"):
            raise SystemExit(f"bench store: unknown mode {m!r}; modes: {', '.join(MODES)}, each with +direct")
    codes: list[tuple[str, str, str]] = [(m, m, "") for m in modes]  # (label, mode, PYTHONPATH)
    tree = None
    if args.baseline:
        tree = baseline_tree(args.baseline, work)
        codes.append((f"{args.baseline} (baseline)", "baseline", str(tree / "src")))
    header(f"store: appends with fsync={args.fsync} beside raw write+fdatasync, {work}")
    rows = []
    crc_ms = crc_ms_per_mb()
    try:
        for frame in (int(s) for s in args.sizes.split(",")):
            total = (args.mib_large if frame >= 65536 else args.mib_small) * MiB
            raw_mbs = total / raw_write(work / "raw", frame, total) / 1e6
            for writers in (int(w) for w in args.writers.split(",")):
                runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in codes}
                loads: dict[str, list[str]] = {label: [] for label, _, _ in codes}
                for r in range(args.repeat):
                    for label, mode, path in codes if r % 2 == 0 else list(reversed(codes)):
                        loads[label].append(load_average().split()[0])
                        spec = {"root": str(work / "store"), "frame": frame, "writers": writers, "total": total,
                                "fsync": args.fsync, "mode": mode, "chunk_mib": args.chunk_mib,
                                "writeback_bytes": args.writeback_bytes}
                        runs[label].append(measure_in_process(spec, path))
                grouped_mbs = total / raw_write(work / "raw", frame, total, sync_every=frame * writers) / 1e6
                for label, mode, _ in codes:
                    done = runs[label]
                    mbs = median([len(x["latencies"]) * frame / x["seconds"] / 1e6 for x in done])
                    lat = [v for x in done for v in x["latencies"]]
                    cpu_mb = median([len(x["latencies"]) * frame / 1e6 / x["cpu"] for x in done])
                    crc_share = f"{crc_ms * cpu_mb / 1000:.1%}" if mode != "baseline" else "-"
                    rows.append((f"{frame // 1024} KiB", writers, label, round(mbs, 1), round(raw_mbs, 1),
                                 f"{mbs / raw_mbs:.0%}", f"{mbs / grouped_mbs:.0%}",
                                 round(median([len(x["latencies"]) / x["seconds"] for x in done])),
                                 round(median(lat) * 1e3, 3), round(percentile(lat, 0.99) * 1e3, 3), round(cpu_mb),
                                 crc_share, round(median([x.get("read_back_mbs", 0.0) for x in done])),
                                 " ".join(f"{len(x['latencies']) * frame / x['seconds'] / 1e6:.0f}" for x in done),
                                 " ".join(loads[label])))
    finally:
        if tree is not None:
            remove_baseline_tree(tree)
        shutil.rmtree(work, ignore_errors=True)
    table(["frame", "writers", "chunks", "store MB/s", "raw MB/s", "store/raw", "store/per-group", "appends/s",
           "p50 ms", "p99 ms", "MB per CPU-s", "CRC share of CPU", "read back MB/s", "store MB/s per run",
           "load (1 min) per run"], rows)
    print("# raw: the same total in frame-sized os.write calls, one fdatasync at the end; per-group: the same")
    print("# with an fdatasync after every writers x frame bytes (the most an ack-after-fsync append can do);")
    print("# chunks: recycled = spares that retention dropped, fresh = written ahead during the run, none =")
    print("# new files; +direct: store.direct_io on (commits into written blocks as O_DIRECT|O_DSYNC writes);")
    print(f"# medians of {args.repeat} run(s) per case, each in a process of its own, order alternating;")
    print("# read back: the timed appends read through the store right after them (page cache or disk);")
    print("# MB per CPU-s: the store process's user+system CPU. CRC share of CPU: CRC32C's time per MB (measured")
    print(f"# here over 64 MiB of distinct bodies from memory: {crc_ms:.3f} ms per MB) x the store's CPU seconds per MB.")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    add_arguments(p)
    sys.exit(run(p.parse_args()))
