"""Forward ingest: C connections send PackedForward chunks with acks to logport (fsync=always) and, in the
same run, to a peer that keeps nothing on disk: @fluent-org/logger's FluentServer (`--peer fluent-org`, the
default) or Fluent Bit's in_forward with its memory buffer and the null output (`--peer fluent-bit`, the
fluent-bit program on PATH, built from source); plus logport's store at 64 KiB frames as the ceiling, and the
server's memory when offered far more than it can store.

The load comes from processes of its own (this file run with --load), one per connection by default, so the
server's CPU is its own; each reports the CPU it used, and its busy share (CPU / wall time) well below one
core shows the load waited on the server, not the other way round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[1]
NODE_SERVER = REPO / "tests" / "interop" / "node" / "forward_fluent_org_server.js"
CHUNK_ID_LEN = 24  # base64 of 16 bytes, as Fluentd's chunk ids


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--connections", "-C", type=int, default=4, help="concurrent connections")
    p.add_argument("--events", "-N", type=int, default=1000, help="events per chunk")
    p.add_argument("--record-size", type=int, default=170, help="bytes per packed record")
    p.add_argument("--window", type=int, default=4, help="chunks in flight per connection (awaiting acks)")
    p.add_argument("--seconds", type=float, default=4.0, help="duration of each measured run")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of logport, FluentServer, store")
    p.add_argument("--store-mib", type=int, default=128, help="MiB the store-alone case appends per round")
    p.add_argument("--overload-seconds", type=float, default=6.0, help="duration of the overload run")
    p.add_argument("--overload", type=int, default=10, help="the overload run uses this many times the connections")
    p.add_argument("--dir", default=None, help="data directory parent (default: ./bench-out)")
    p.add_argument("--skip-node", action="store_true", help="do not run the peer's comparison")
    p.add_argument("--peer", default="fluent-org", choices=["fluent-org", "fluent-bit"],
                   help="the server beside logport: @fluent-org/logger's FluentServer (node), or fluent-bit (on PATH)")
    p.add_argument("--load-processes", type=int, default=0,
                   help="load generator processes, the connections shared among them (0: one per connection)")
    p.add_argument("--baseline", default="", help="a git revision whose hub and store run beside this code's, a "
                   "process per run, order alternating, e.g. f034c9a (format v1)")
    p.add_argument("--load", default=None, help=argparse.SUPPRESS)  # internal: run as the load generator
    p.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # internal: one logport run, its own process


# --- the load generator (child process) ---


def make_chunk_template(events: int, record_size: int) -> tuple[bytes, bytes, int]:
    """(prefix, suffix, event count): prefix + 24-byte chunk id + suffix is one PackedForward message."""
    import msgpack

    from logport.batch import pack_entries

    base = {"message": "", "host": "web-01.example.com", "level": "info", "path": "/api/v1/items", "status": 200}
    filler = record_size - len(msgpack.packb(base))
    record = {**base, "message": "x" * max(filler - 2, 0)}
    while len(msgpack.packb(record)) > record_size and record["message"]:
        record["message"] = record["message"][:-1]
    entries = pack_entries((1700000000 + i, i, record) for i in range(events))
    marker = "C" * CHUNK_ID_LEN
    message = msgpack.packb(["bench.forward", entries, {"size": events, "chunk": marker}], use_bin_type=True)
    at = message.rindex(marker.encode())
    return message[:at], message[at + CHUNK_ID_LEN:], events


async def load(settings: dict[str, Any]) -> dict[str, Any]:
    import msgpack

    prefix, suffix, per_chunk = make_chunk_template(settings["events"], settings["record_size"])
    size = len(prefix) + CHUNK_ID_LEN + len(suffix)
    deadline = time.perf_counter() + settings["seconds"]
    window = settings["window"]
    acked = [0]
    sent_bytes = [0]
    run_id = os.urandom(4).hex()

    async def connection(n: int) -> None:
        reader, writer = await asyncio.open_connection(settings["host"], settings["port"])
        up = msgpack.Unpacker()
        seq = 0
        in_flight = 0

        def send_one() -> None:
            nonlocal seq, in_flight
            chunk = f"{run_id}{n:04d}{seq:016d}"[-CHUNK_ID_LEN:].encode()
            writer.write(prefix + chunk + suffix)
            seq += 1
            in_flight += 1
            sent_bytes[0] += size

        while in_flight < window or window == 0:
            send_one()
            if window == 0:
                await writer.drain()
                if time.perf_counter() >= deadline:
                    break
        while in_flight and (window == 0 or True):
            data = await reader.read(65536)
            if not data:
                break
            up.feed(data)
            for _ in up:
                in_flight -= 1
                acked[0] += 1
                if time.perf_counter() < deadline and window:
                    send_one()
        writer.close()

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    await asyncio.gather(*(connection(n) for n in range(settings["connections"])))
    elapsed = time.perf_counter() - t0
    return {"chunks": acked[0], "events": acked[0] * per_chunk, "bytes": acked[0] * size, "seconds": elapsed,
            "offered_bytes": sent_bytes[0], "load_cpu": time.process_time() - cpu0}


def run_load(host: str, port: int, args: argparse.Namespace, *, seconds: float, window: int,
             connections: int | None = None) -> list[subprocess.Popen[str]]:
    """The load generator's processes (--load-processes, else one per connection), the connections shared."""
    total = connections or args.connections
    processes = min(total, args.load_processes or total)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = []
    for i in range(processes):
        settings = {"host": host, "port": port, "connections": total // processes + (i < total % processes),
                    "events": args.events, "record_size": args.record_size, "window": window, "seconds": seconds}
        procs.append(subprocess.Popen([sys.executable, __file__, "--load", json.dumps(settings)],
                                      stdout=subprocess.PIPE, text=True, env=env))
    return procs


def load_result(procs: list[subprocess.Popen[str]]) -> dict[str, Any]:
    """The processes' results together: counts added, the longest run's seconds, the load's busiest share of a
    core (its CPU / its wall time; well below 1: the load waited on the server)."""
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, "load generator failed"
        results.append(json.loads(out.strip().splitlines()[-1]))
    total = {key: sum(r[key] for r in results) for key in ("chunks", "events", "bytes", "offered_bytes", "load_cpu")}
    total["seconds"] = max(r["seconds"] for r in results)
    total["load_busy"] = max(r["load_cpu"] / r["seconds"] for r in results)
    return total


def load_running(procs: list[subprocess.Popen[str]]) -> bool:
    return any(proc.poll() is None for proc in procs)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median events/s."""
    return sorted(runs, key=lambda r: r["events"] / r["seconds"])[len(runs) // 2]


# --- the servers ---


def free_port():  # type: ignore[no-untyped-def]
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def logport_run(work: Path, args: argparse.Namespace, *, seconds: float, window: int,
                      connections: int | None = None) -> tuple[dict[str, Any], float, float]:
    """(load result, RSS before, peak RSS during) against an in-process hub with fsync=always."""
    from logport.config import Config, ForwardConfig, StoreConfig
    from logport.hub import Hub
    shutil.rmtree(work, ignore_errors=True)
    config = Config(store=StoreConfig(data_dir=str(work), fsync="always"))
    config.forward = ForwardConfig(port=free_port())  # type: ignore[no-untyped-call]
    config.lumberjack.enabled = config.segment.enabled = config.logjam.enabled = False
    config.metrics.enabled = False
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    before = rss_mib()
    peak = before
    try:
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        proc = run_load("127.0.0.1", config.forward.port, args, seconds=seconds, window=window,
                        connections=connections)
        while load_running(proc):
            peak = max(peak, rss_mib())
            await asyncio.sleep(0.1)
        result = load_result(proc)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)  # the hub's (the load runs in a process of its own)
        result["cpu"] = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        result["user"], result["system"] = cpu1.ru_utime - cpu0.ru_utime, cpu1.ru_stime - cpu0.ru_stime
        result["page_faults"] = cpu1.ru_minflt - cpu0.ru_minflt
        if hub.runtime is not None:  # chunks per commit: what the group commit made of the load
            result["fsyncs"] = hub.runtime.metrics.registry.get_sample_value("logport_store_fsyncs_total")
    finally:
        await hub.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result, before, peak


def fluent_server_run(args: argparse.Namespace) -> dict[str, Any]:
    node = subprocess.Popen(["node", str(NODE_SERVER), json.dumps({"quiet": True})], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        from _hubproc import tree_cpu_seconds

        assert node.stdout is not None
        line = node.stdout.readline()
        port = int(line.split()[1])
        cpu0 = tree_cpu_seconds(node.pid)
        result = load_result(run_load("127.0.0.1", port, args, seconds=args.seconds, window=args.window))
        result["cpu"] = tree_cpu_seconds(node.pid) - cpu0  # the server's (the load runs in a process of its own)
    finally:
        assert node.stdin is not None
        node.stdin.close()
        node.wait(timeout=10)
    return result


FLUENT_BIT_CONFIG = """\
[SERVICE]
    flush        1
    log_level    error
    http_server  off

[INPUT]
    name          forward
    listen        127.0.0.1
    port          {port}
    storage.type  memory

[OUTPUT]
    name   null
    match  *
"""


def fluent_bit_run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """fluent-bit (on PATH): in_forward on loopback, its memory buffer, the null output; its CPU (every thread)
    around the load's run."""
    import socket

    from _hubproc import tree_cpu_seconds

    port = free_port()
    config = work / "fluent-bit.conf"
    config.write_text(FLUENT_BIT_CONFIG.format(port=port))
    server = subprocess.Popen(["fluent-bit", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:  # until it listens
            if server.poll() is not None:
                raise SystemExit(f"bench forward: fluent-bit exited ({server.returncode}) before it listened")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("bench forward: fluent-bit did not listen within 10 s") from None
                time.sleep(0.05)
        cpu0 = tree_cpu_seconds(server.pid)
        result = load_result(run_load("127.0.0.1", port, args, seconds=args.seconds, window=args.window))
        result["cpu"] = tree_cpu_seconds(server.pid) - cpu0
    finally:
        server.terminate()
        server.wait(timeout=10)
    return result


def run(args: argparse.Namespace) -> int:
    if args.load:
        from _common import run_async

        print(json.dumps(run_async(lambda: load(json.loads(args.load)))))
        return 0
    from _common import header, run_async, table
    from store import (
        store_append,  # bench/store.py: the same 64 KiB measurement as `logport bench store`
    )

    if args.measure:
        spec = json.loads(args.measure)
        args = argparse.Namespace(**spec["args"])
        result = run_async(lambda: logport_run(Path(spec["work"]), args, seconds=args.seconds, window=args.window))[0]
        print(json.dumps(result), flush=True)
        return 0
    if args.baseline:
        return run_beside_baseline(args)

    if args.peer == "fluent-bit" and not args.skip_node and shutil.which("fluent-bit") is None:
        print("bench forward: fluent-bit is not on PATH; build it from fluent/fluent-bit (docs/benchmarks.md says "
              "how) or run with --peer fluent-org", file=sys.stderr)
        return 2
    peer_name = ("Fluent Bit in_forward (memory buffer, null output)" if args.peer == "fluent-bit"
                 else "@fluent-org/logger FluentServer (memory)")
    base = Path(args.dir or "bench-out")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=base))
    header(f"forward: {args.connections} connections x PackedForward chunks of {args.events} events "
           f"({args.record_size}-byte records), window {args.window}, acks; fsync=always; {work}")
    writers = args.connections * max(args.window, 1)  # as many appends in flight as chunks below
    lps: list[dict[str, Any]] = []
    fss: list[dict[str, Any]] = []
    stores: list[float] = []
    try:
        # rounds interleave the three, so a burst of load on the shared machine hits all of them alike
        for _ in range(args.rounds):
            lps.append(run_async(lambda: logport_run(work / "lp", args, seconds=args.seconds,
                                                     window=args.window))[0])
            if not args.skip_node:
                fss.append(fluent_bit_run(args, work) if args.peer == "fluent-bit" else fluent_server_run(args))
            spec = {"frame": 65536, "writers": writers, "total": args.store_mib * 2**20, "fsync": "always",
                    "mode": "default", "chunk_mib": 64}
            done = run_async(lambda s=spec: store_append(work / "store", s))  # type: ignore[misc]
            stores.append(len(done["latencies"]) * 65536 / done["seconds"] / 1e6)
        lp = _median_run(lps)
        fs = _median_run(fss) if fss else None
        store_mbs = statistics.median(stores)
        overload = args.connections * args.overload
        ov, rss0, rss_peak = run_async(lambda: logport_run(work / "ov", args, seconds=args.overload_seconds,
                                                           window=0, connections=overload))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def rates(r: dict[str, Any]) -> tuple[float, float]:
        return r["events"] / r["seconds"], r["bytes"] / r["seconds"] / 1e6

    def per_cpu(runs: list[dict[str, Any]]) -> float:
        return statistics.median(r["events"] / r["cpu"] for r in runs) if all(r.get("cpu") for r in runs) else 0.0

    lp_eps, lp_mbs = rates(lp)
    def busy(runs: list[dict[str, Any]]) -> str:
        return f"{max(r['load_busy'] for r in runs):.0%}"

    rows: list[list[Any]] = [["logport (fsync=always)", round(lp_eps), round(per_cpu(lps)), round(lp_mbs, 1),
                              lp["chunks"], "1.00", "1.00", busy(lps)]]
    if fs is not None:
        fs_eps, fs_mbs = rates(fs)
        rows.append([peer_name, round(fs_eps), round(per_cpu(fss)), round(fs_mbs, 1), fs["chunks"],
                     f"{fs_eps / lp_eps:.2f}", f"{per_cpu(fss) / per_cpu(lps):.2f}", busy(fss)])
    rows.append([f"logport store alone, 64 KiB appends, {writers} writers", "", "", round(store_mbs, 1), "", "", "",
                 ""])
    table(["server", "events/s", "events per server CPU-s", "MB/s", "chunks acked", "events/s vs logport",
           "per CPU-s vs logport", "load busiest"], rows)
    print("# load busiest: the busiest load process's CPU / its wall time over the rounds (below 100%: it waited "
          "on the server)")
    print("# events per server CPU-s: the median over rounds of events / the server process's user+system CPU "
          f"(logport's hub with its store threads); load (1 min) at the end: {os.getloadavg()[0]:.2f}")
    print(f"# medians of {args.rounds} interleaved rounds; logport events/s per round: "
          + ", ".join(f"{r['events'] / r['seconds']:,.0f}" for r in lps)
          + "; store MB/s per round: " + ", ".join(f"{m:.0f}" for m in stores))
    if fs is not None and args.peer == "fluent-bit":
        print(f"# logport / Fluent Bit: {lp_eps / rates(fs)[0]:.2f}x events/s, {per_cpu(lps) / per_cpu(fss):.2f}x "
              "events per server CPU-s (issue 34's targets: >= 1.0x both)")
    elif fs is not None:
        print(f"# logport / FluentServer: {lp_eps / rates(fs)[0]:.2f}x events/s (target >= 3x)")
    print(f"# logport forward / store 64 KiB: {lp_mbs / store_mbs:.0%} of the store's MB/s (target >= 60%)")
    ov_mbs = ov["bytes"] / ov["seconds"] / 1e6
    offered_mbs = ov["offered_bytes"] / ov["seconds"] / 1e6
    from logport.config import ForwardConfig, StoreConfig

    fw, st = ForwardConfig(), StoreConfig()
    bound = rss0 + (fw.max_total_inflight_bytes + overload * fw.chunk_size_limit + st.max_pending_bytes) / 2**20
    print(f"# overload: {overload} connections ({args.overload}x) writing chunks back to back without waiting for "
          f"acks (each as fast as TCP lets it) for {args.overload_seconds:.0f} s: "
          f"accepted {offered_mbs:.1f} MB/s into sockets, "
          f"stored {ov_mbs:.1f} MB/s; server RSS {rss0:.0f} MiB before, {rss_peak:.0f} MiB peak, "
          f"bound {bound:.0f} MiB: {'bounded' if rss_peak <= bound else 'OVER THE BOUND'}")
    print("# bound = RSS before + forward.max_total_inflight_bytes + connections x forward.chunk_size_limit"
          " + store.max_pending_bytes")
    print(f"# max RSS of this process over the whole run: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


def run_beside_baseline(args: argparse.Namespace) -> int:
    """Logport's Forward ingest on this code and on `args.baseline`'s, each run in a process of its own (the
    hub, and the load generator's packing), order alternating between rounds; with the store alone at 64
    KiB appends (bench store's measurement) on each code the same way."""
    from _common import baseline_tree, header, load_average, median, remove_baseline_tree, table
    from store import measure_in_process

    base = Path(args.dir or "bench-out")
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=base))
    header(f"forward: logport on this code beside {args.baseline}, {args.connections} connections x PackedForward "
           f"chunks of {args.events} events ({args.record_size}-byte records), window {args.window}, acks; "
           f"fsync=always; {work}")
    tree = baseline_tree(args.baseline, work)
    codes = [("this", ""), (args.baseline, str(tree / "src"))]
    writers = args.connections * max(args.window, 1)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in codes}
    stores: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in codes}
    loads: dict[str, list[str]] = {label: [] for label, _ in codes}
    try:
        for r in range(args.rounds):
            for label, path in codes if r % 2 == 0 else list(reversed(codes)):
                loads[label].append(load_average().split()[0])
                env = dict(os.environ)
                if path:
                    env["PYTHONPATH"] = path
                spec = {"work": str(work / "lp"), "args": {**vars(args), "baseline": "", "measure": None}}
                proc = subprocess.run([sys.executable, __file__, "--measure", json.dumps(spec)],
                                      stdout=subprocess.PIPE, env=env, check=False)
                if proc.returncode:
                    raise RuntimeError(f"the logport run of {label} failed ({proc.returncode})")
                runs[label].append(json.loads(proc.stdout.decode().strip().splitlines()[-1]))
                spec = {"root": str(work / "store"), "frame": 65536, "writers": writers,
                        "total": args.store_mib * 2**20, "fsync": "always", "mode": "default", "chunk_mib": 64}
                stores[label].append(measure_in_process(spec, path))
    finally:
        remove_baseline_tree(tree)
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for label, _ in codes:
        done = runs[label]
        eps = [r["events"] / r["seconds"] for r in done]
        per_cpu = [r["events"] / r["cpu"] for r in done]
        store_mbs = [len(x["latencies"]) * 65536 / x["seconds"] / 1e6 for x in stores[label]]
        rows.append((label, round(median(eps)), round(median(per_cpu)), round(median(store_mbs), 1),
                     " ".join(f"{v:,.0f}" for v in eps), " ".join(loads[label])))
    table(["code", "events/s", "events per hub CPU-s", "store alone 64 KiB MB/s", "events/s per round",
           "load (1 min) per round"], rows)
    print(f"# medians of {args.rounds} rounds, each code's hub in a process of its own, order alternating;")
    print(f"# store alone: {writers} writers of 64 KiB appends, the store as configured by default (bench store's")
    print("# measurement, a process per run). events per hub CPU-s: the hub process's user+system CPU.")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
