"""Segment protocol: append throughput (1 KiB and 64 KiB events, 1 and 8 appenders) beside the store's own
append figure measured in the same run, and read throughput (catch-up from offset 0, and at the tail).

The server is a hub in this process (uvloop); the appenders and readers are logport's own clients in a
separate process (this file run with --load), so the server's CPU is its own. The store figure calls
SegmentStore.append directly in this process with the same event size, the same number of concurrent
writers, and one block's worth of events per append. Each case first appends as much again to another
segment, untimed, on both sides (--warmup-mib), so that what is timed is a serving hub, not its start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

MiB = 1024 * 1024
SEGMENT = "bench"
WARMUP = "warmup"  # each case's untimed appends before the timed ones


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=None, help="data directory parent (default: ./bench-out)")
    p.add_argument("--sizes", default="1024,65536", help="event sizes in bytes (the frame is 8 bytes more)")
    p.add_argument("--appenders", default="1,8", help="concurrent appender counts")
    p.add_argument("--mib-small", type=int, default=32, help="MiB appended per case for events < 64 KiB")
    p.add_argument("--mib-large", type=int, default=128, help="MiB appended per case for 64 KiB events")
    p.add_argument("--block-size", type=int, default=1 * MiB, help="append block size of the clients")
    p.add_argument("--fsync", default="always", choices=["always", "interval", "never"])
    p.add_argument("--writeback-bytes", type=int, default=None,
                   help="store.writeback_bytes on both sides (default: the config's; 0: off)")
    p.add_argument("--receive-pool-bytes", type=int, default=None,
                   help="segment.receive_pool_bytes of the hub (default: the config's; 0: a new buffer per block)")
    p.add_argument("--warmup-mib", type=int, default=None,
                   help="MiB each case first appends to another segment, untimed, on both sides (default: the "
                        "case's own size; 0: none)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each case, store and segment alternating; the median of each is shown")
    p.add_argument("--baseline", default="", help="a git revision whose code (hub, store and clients) runs beside this "
                   "one, order alternating, e.g. f034c9a (format v1)")
    p.add_argument("--appends-only", action="store_true",
                   help="only the append cases (no catch-up and tail reads): the appends' figures in less time")
    p.add_argument("--load", default=None, help=argparse.SUPPRESS)  # internal: run as the client process
    p.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # internal: one configuration's runs


def distinct_bodies(size: int) -> list[bytes]:
    """Events of `size` random bytes, different ones, 64 MiB of them (or one): what each append copies
    comes from memory, as real events do. One body repeated (as before 2026-11-23 18:40) stayed in
    the CPU's cache for the store case, which copied 1 KiB events at 1.2-1.5 GB/s that way, while
    the listener necessarily copies what it received into fresh buffers."""
    count = max(1, (64 * MiB) // size)
    pool = os.urandom(size * count)
    return [pool[i * size : (i + 1) * size] for i in range(count)]


def batches(bodies: list[bytes], per: int, batch: int, writer: int, writers: int) -> Iterator[list[bytes]]:
    """`per` events in lists of at most `batch`, taken round the pool of bodies, each writer from
    its own place in it (not the bodies another writer has just copied)."""
    at = writer * len(bodies) // writers
    left = per
    while left:
        n = min(batch, left, len(bodies) - at)
        yield bodies[at : at + n]
        at = (at + n) % len(bodies)
        left -= n


# --- the client process ---


async def load_append(port: int, size: int, appenders: int, total: int, block_size: int,
                      segment: str = SEGMENT) -> dict[str, Any]:
    from logport.clients.segment import SegmentAppender

    bodies = distinct_bodies(size)
    per = max(1, total // size // appenders)
    batch = max(1, block_size // (size + 8))  # as the store case: one block's worth of events per call
    apps = [SegmentAppender("127.0.0.1", port, segment, block_size=block_size, linger=0.0005)
            for _ in range(appenders)]
    for app in apps:
        await app.start()

    async def one(k: int, app: SegmentAppender) -> None:
        for events in batches(bodies, per, batch, k, appenders):
            await app.append_many(events)
        await app.flush()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k, a) for k, a in enumerate(apps)))
    t1 = time.perf_counter()
    for app in apps:
        await app.close()
    # perf_counter is CLOCK_MONOTONIC here, one clock for every process: a tail reader's times are set beside these
    return {"seconds": t1 - t0, "events": per * appenders, "bytes": per * appenders * size, "t0": t0, "t1": t1}


async def load_read(port: int, expect: int, follow: bool) -> dict[str, Any]:
    from logport.clients.segment import SegmentReader

    events = 0
    nbytes = 0
    t_first = t0 = time.perf_counter()
    async with SegmentReader("127.0.0.1", port, read_size=4 * MiB) as reader:
        if not hasattr(reader, "event_lists"):  # a --baseline from before event_lists: an event at a time
            async for _, body in reader.events(SEGMENT, 0, follow=follow, wait=5.0):
                if events == 0:
                    t_first = time.perf_counter()
                events += 1
                nbytes += len(body)
                if events >= expect:
                    break
        else:  # a reply's events at a time, as a consumer that must keep up takes them
            async for batch in reader.event_lists(SEGMENT, 0, follow=follow, wait=5.0):
                if events == 0:
                    t_first = time.perf_counter()
                events += len(batch)
                nbytes += sum(len(body) for _, body in batch)
                if events >= expect:
                    break
    t1 = time.perf_counter()
    return {"seconds": t1 - (t_first if follow else t0), "events": events, "bytes": nbytes, "t1": t1}


def client_main(spec: dict[str, Any]) -> None:
    if spec["mode"] == "append":
        coro = load_append(spec["port"], spec["size"], spec["appenders"], spec["total"], spec["block_size"],
                           spec.get("segment", SEGMENT))
    else:
        coro = load_read(spec["port"], spec["expect"], spec["mode"] == "tail")
    result = run_async(lambda: coro)
    print(json.dumps(result), flush=True)


def run_this_file(flag: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run this file as `--load` (a client) or `--measure` (one configuration) in a process of its
    own; its last line of output is its result. Started by subprocess (vfork), not by the loop's
    subprocess support (uvloop forks): a fork makes every page of this process, the hub's,
    copy-on-write, and the hub then takes a page fault for each page it writes again, the listener's
    reused receive buffers among them, during the very run it measures."""
    proc = subprocess.run([sys.executable, __file__, flag, json.dumps(spec)], stdout=subprocess.PIPE, check=False)
    if proc.returncode:
        raise RuntimeError(f"{flag} process failed ({proc.returncode}) for {spec}")
    return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))


async def run_client(spec: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(run_this_file, "--load", spec)


# --- the server side ---


def warmup_bytes(args: argparse.Namespace, total: int) -> int:
    """What a case appends, untimed, before it is timed: a hub serves for long, so the figure wanted
    is its steady state, with the listener's receive buffers in use again (the first 128 MiB that
    8 appenders send each take fresh pages), not its first second. Both sides get the same."""
    return total if args.warmup_mib is None else args.warmup_mib * MiB


def store_config(data_dir: Path, args: argparse.Namespace) -> Any:
    from logport.config import StoreConfig

    config = StoreConfig(data_dir=str(data_dir), fsync=args.fsync)
    if args.writeback_bytes is not None:
        config.writeback_bytes = args.writeback_bytes
    return config


def hub_config(data_dir: Path, args: argparse.Namespace) -> Any:
    from logport.config import Config

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.conftest import free_port

    config = Config()
    config.store = store_config(data_dir, args)
    config.forward.enabled = config.lumberjack.enabled = config.logjam.enabled = False
    config.metrics.enabled = False
    config.segment.port = free_port()
    if args.receive_pool_bytes is not None:
        config.segment.receive_pool_bytes = args.receive_pool_bytes
    return config


async def segment_case(work: Path, args: argparse.Namespace, size: int, appenders: int, total: int,
                       reads: bool) -> dict[str, Any]:
    from logport.hub import Hub

    data = work / "segment"
    shutil.rmtree(data, ignore_errors=True)
    config = hub_config(data, args)
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    port = config.segment.port
    assert hub.runtime is not None
    await hub.runtime.store.create(SEGMENT)
    try:
        out: dict[str, Any] = {}
        if warmup := warmup_bytes(args, total):
            await hub.runtime.store.create(WARMUP)
            await run_client({"mode": "append", "port": port, "size": size, "appenders": appenders,
                              "total": warmup, "block_size": args.block_size, "segment": WARMUP})
        if reads:  # a reader follows the tail while the appender writes
            expect = max(1, total // size // appenders) * appenders
            tail = asyncio.create_task(run_client({"mode": "tail", "port": port, "expect": expect}))
            await asyncio.sleep(1.0)  # the reader is connected and waiting at the tail
        cpu0 = cpu_seconds()
        loop0 = loop_thread_seconds()
        out["append"] = await run_client({"mode": "append", "port": port, "size": size, "appenders": appenders,
                                          "total": total, "block_size": args.block_size})
        out["append"]["cpu"] = cpu_seconds() - cpu0
        out["append"]["loop_cpu"] = loop_thread_seconds() - loop0
        if reads:
            out["tail"] = await tail
            cpu0 = cpu_seconds()
            out["cold"] = await run_client({"mode": "cold", "port": port, "expect": out["append"]["events"]})
            out["cold"]["cpu"] = cpu_seconds() - cpu0
            t0 = time.perf_counter()
            direct = direct_read(data)
            out["direct"] = {"seconds": time.perf_counter() - t0, "bytes": direct}
        return out
    finally:
        await hub.stop()
        shutil.rmtree(data, ignore_errors=True)


def cpu_seconds() -> float:
    """User + system CPU of this process (the hub's, every thread): its clients run in processes of their own."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def loop_thread_seconds() -> float:
    """CPU seconds of this thread, the hub's event loop's (the listener's receive path, the store's loop side,
    the replies); the rest of cpu_seconds is the store's writer thread and the other workers."""
    return time.thread_time()


def direct_read(data_dir: Path) -> int:
    """The store's own read path (DirectoryReader) over the same data: the ceiling for catch-up reads."""
    from logport.store.reader import DirectoryReader

    return sum(len(body) for _, body in DirectoryReader(data_dir).iter_events(SEGMENT))


async def store_case(work: Path, args: argparse.Namespace, size: int, writers: int, total: int) -> dict[str, Any]:
    from logport.store import SegmentStore

    root = work / "store"
    shutil.rmtree(root, ignore_errors=True)
    store = await SegmentStore.open(store_config(root, args))
    await store.create(SEGMENT)
    bodies = distinct_bodies(size)
    per = max(1, total // size // writers)
    batch = max(1, args.block_size // (size + 8))

    async def one(segment: str, k: int, count: int) -> None:
        for events in batches(bodies, count, batch, k, writers):
            await store.append(segment, events)

    if warmup := warmup_bytes(args, total):
        await store.create(WARMUP)
        await asyncio.gather(*(one(WARMUP, k, max(1, warmup // size // writers)) for k in range(writers)))
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(SEGMENT, k, per) for k in range(writers)))
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    await store.close()
    shutil.rmtree(root, ignore_errors=True)
    return {"seconds": elapsed, "bytes": per * writers * size, "cpu": cpu}


def loopback_tcp(total: int) -> dict[str, Any]:
    """The bytes alone over loopback TCP, process to process, plain sockets: the ceiling of any TCP path here."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # the sender
        try:
            sender = socket.create_connection(("127.0.0.1", port))
            chunk = os.urandom(MiB)
            for _ in range(total // MiB):
                sender.sendall(chunk)
            sender.close()
        finally:
            os._exit(0)
    conn, _ = server.accept()
    buffer = memoryview(bytearray(MiB))
    got = 0
    t0 = time.perf_counter()
    while n := conn.recv_into(buffer):
        got += n
    elapsed = time.perf_counter() - t0
    os.waitpid(pid, 0)
    conn.close()
    server.close()
    return {"seconds": elapsed, "bytes": got}


def mbs(result: dict[str, Any]) -> float:
    return float(result["bytes"]) / float(result["seconds"]) / 1e6


def measure(work: Path, args: argparse.Namespace, size: int, appenders: int) -> dict[str, list[Any]]:
    """The runs of one configuration: loopback TCP, store and segment alternating (so that a burst of
    load elsewhere hits both sides), and with one appender the read runs."""
    total = (args.mib_large if size >= 65536 else args.mib_small) * MiB
    runs: dict[str, list[Any]] = {"tcp": [], "store": [], "segment": [], "reads": []}
    for _ in range(args.repeat):
        runs["tcp"].append(loopback_tcp(total))
        runs["store"].append(run_async(lambda: store_case(work, args, size, appenders, total)))
        runs["segment"].append(run_async(lambda: segment_case(work, args, size, appenders, total, False)))
        if appenders == 1 and not getattr(args, "appends_only", False):  # a run of its own: a following reader
            # takes CPU from the appender
            runs["reads"].append(run_async(lambda: segment_case(work, args, size, 1, total, True)))
    return runs


def measure_in_a_process(work: Path, args: argparse.Namespace, size: int, appenders: int,
                         pythonpath: str = "") -> dict[str, list[Any]]:
    """`measure` in a process of its own, as JMH forks a JVM per benchmark: in one process that had run
    the cases before, this VM's page-cache copies got 2-5x slower on both sides as it went on (the
    store alone's writer thread: 0.10 s of CPU for 256 MiB in a fresh process, 0.19-0.47 s as the
    last case of a whole run), and the 64 KiB x 8 medians swung from 21% to 253% with it."""
    spec = {"work": str(work), "size": size, "appenders": appenders, "args": vars(args)}
    if not pythonpath:
        return run_this_file("--measure", spec)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath  # the baseline's logport, for the measuring process and its clients
    try:
        return run_this_file("--measure", spec)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def run(args: argparse.Namespace) -> int:
    if args.load:
        client_main(json.loads(args.load))
        return 0
    if args.measure:
        spec = json.loads(args.measure)
        runs = measure(Path(spec["work"]), argparse.Namespace(**spec["args"]), spec["size"], spec["appenders"])
        print(json.dumps(runs), flush=True)
        return 0
    base = Path(args.dir or "bench-out")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=base))
    header(f"segment: protocol appends and reads beside the store's own appends, fsync={args.fsync}, {work}")
    codes: list[tuple[str, str]] = [("this", "")]  # (label, PYTHONPATH)
    tree = None
    if args.baseline:
        tree = baseline_tree(args.baseline, work)
        codes.append((args.baseline, str(tree / "src")))
    rows = []
    read_rows = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            for appenders in (int(a) for a in args.appenders.split(",")):
                by_code: dict[str, dict[str, list[Any]]] = {label: {} for label, _ in codes}
                loads: dict[str, list[str]] = {label: [] for label, _ in codes}
                once = argparse.Namespace(**{**vars(args), "repeat": 1})
                for r in range(args.repeat):  # a process per run, the codes alternating in both orders
                    for label, path in codes if r % 2 == 0 else list(reversed(codes)):
                        loads[label].append(load_average().split()[0])
                        runs = measure_in_a_process(work, once, size, appenders, path)
                        for key, values in runs.items():
                            by_code[label].setdefault(key, []).extend(values)
                for label, _ in codes:
                    runs = by_code[label]
                    stores, segs, read_runs = runs["store"], runs["segment"], runs["reads"]
                    store_mbs = median([mbs(r) for r in stores])
                    seg_mbs = median([mbs(r["append"]) for r in segs])
                    tcp_mbs = median([mbs(r) for r in runs["tcp"]])
                    seg_cpu = median([r["append"]["bytes"] / 1e6 / r["append"]["cpu"] for r in segs])
                    # ms of hub CPU per MB: the event loop's thread, and the others (the store's writer)
                    loop_ms = median([r["append"]["loop_cpu"] * 1e3 / (r["append"]["bytes"] / 1e6) for r in segs])
                    rest_ms = median([(r["append"]["cpu"] - r["append"]["loop_cpu"]) * 1e3 / (r["append"]["bytes"] / 1e6)
                                      for r in segs])
                    rows.append((f"{size // 1024} KiB", appenders, label, round(seg_mbs, 1), round(store_mbs, 1),
                                 f"{seg_mbs / store_mbs:.0%}", round(seg_cpu), f"{loop_ms:.3f} / {rest_ms:.3f}",
                                 round(tcp_mbs, 1),
                                 round(seg_mbs * 1e6 / size),
                                 " ".join(f"{mbs(g['append']) / mbs(t):.0%}" for g, t in zip(segs, stores, strict=True)),
                                 " ".join(loads[label])))
                    if read_runs:
                        cold = median([mbs(r["cold"]) for r in read_runs])
                        cold_cpu = median([r["cold"]["bytes"] / 1e6 / r["cold"]["cpu"] for r in read_runs])
                        direct = median([mbs(r["direct"]) for r in read_runs])
                        tail = median([mbs(r["tail"]) for r in read_runs])
                        beside = median([mbs(r["append"]) for r in read_runs])
                        lag = median([(r["tail"]["t1"] - r["append"]["t1"]) * 1000 for r in read_runs])
                        read_rows.append((f"{size // 1024} KiB", label, round(cold, 1), round(cold_cpu),
                                          round(direct, 1), f"{cold / direct:.0%}", round(tail, 1), round(beside, 1),
                                          f"{tail / beside:.0%}", round(lag, 1)))
    finally:
        if tree is not None:
            remove_baseline_tree(tree)
        shutil.rmtree(work, ignore_errors=True)
    table(["event", "appenders", "code", "segment MB/s", "store MB/s", "segment/store", "MB per hub CPU-s",
           "hub CPU ms/MB: loop / threads", "loopback TCP MB/s", "events/s", "ratio per run", "load (1 min) per run"], rows)
    print("# segment: SegmentAppender clients in another process -> the segment listener -> the store, acked")
    print("#   after fsync; store: SegmentStore.append in-process, same event size and writer count. Both are")
    print(f"#   handed one block ({args.block_size} bytes) of events per call, different bodies (a 64 MiB pool).")
    warmup = "as much as it times" if args.warmup_mib is None else f"{args.warmup_mib} MiB"
    print(f"#   MB/s of event bodies; medians of {args.repeat} runs each, store and segment alternating, each")
    print(f"#   configuration in a process of its own; every run first appends {warmup} to another")
    print("#   segment, untimed (--warmup-mib): a serving hub's steady state.")
    print("#   loopback TCP: the same bytes alone between two processes over plain sockets (1 MiB sendall /")
    print("#   recv_into), the ceiling of any TCP path here. MB per hub CPU-s: the hub process's user+system CPU")
    print("#   during the timed appends (its clients run in processes of their own). code: this tree, or")
    print("#   --baseline's (its hub, store and clients, from a git worktree), a process per run, order alternating.")
    print("#   hub CPU ms/MB: the same CPU per MB appended, split: the event loop's thread (receive, parse, queue,")
    print("#   reply) / the other threads (the store's writer: page-cache copy, CRC, fdatasync); medians.")
    if not read_rows:  # --appends-only
        return 0
    print()
    table(["event", "code", "catch-up read MB/s", "catch-up MB per hub CPU-s", "store read MB/s", "catch-up/store",
           "tail read MB/s", "append MB/s meanwhile", "tail/append", "tail behind at end ms"], read_rows)
    print("# catch-up: SegmentReader from offset 0 of the segment just written (page cache warm); store read:")
    print("#   DirectoryReader.iter_events over the same files in-process; tail: a SegmentReader following the")
    print("#   segment while one appender writes (runs of their own; the tail rate is bounded by the append rate).")
    print("#   tail behind at end: from the appender's last ack to the tail reader's last event (a reader that keeps")
    print("#   up is behind by the last commit's delivery however long the run; one that does not, by more).")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    add_arguments(p)
    sys.exit(run(p.parse_args()))
