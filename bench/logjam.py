"""Logjam: producer -> server (store, then PUB) -> subscriber, in messages/s and messages per server CPU-second,
for 1 KB JSON bodies under each compression method; logport beside a peer: the real logjam-device (C, from
skaes/logjam-tools, relaying ROUTER to PUB in memory and storing nothing; `--peer logjam-device`, on PATH)
or a raw pyzmq DEALER -> ROUTER -> PUB relay (`--peer raw`, the default).

The producer (a DEALER sending the agent's 4 frames, async, without waiting) and the subscriber (a SUB) are
one C program, bench/_logjam_load.c, built here with cc and libzmq, each run in its own process: the producer
queues every message before the first is relayed, and its offered rate (messages / the time to queue them)
is shown beside what the fastest server took, so the producer is seen not to be the limit. The servers run
in processes of their own: a logport hub (uvloop, fsync as given, every message decoded, stored durably,
then published) with this checkout's code and a baseline commit's (--baseline, built from git), and the
peer. Each one's CPU time (the process and everything it started, from /proc) is read around the
producer's run, for messages per server CPU-second. A rate is messages / (last message at the subscriber -
first message sent). The machine is shared, so each method runs several rounds, the servers in an order
rotated every round, and the table gives medians (and the range of the per-round ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

sys.path.insert(0, str(Path(__file__).parent))
from _common import header, median, run_async, table  # noqa: E402
from _hubproc import build_baseline, tree_cpu_seconds  # noqa: E402

METHODS = ["none", "zlib", "snappy", "lz4"]
PEERS = ["raw", "logjam-device"]
LOAD_SOURCE = Path(__file__).with_name("_logjam_load.c")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=int, default=30000, help="messages per run")
    p.add_argument("--size", type=int, default=1024, help="JSON body size before compression")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--rounds", type=int, default=5, help="rounds per method, each a run of every server")
    p.add_argument("--fsync", default="always", choices=["always", "interval", "never"])
    p.add_argument("--dir", default=None, help="data directory parent (default: a temporary directory)")
    p.add_argument("--peer", default="raw", choices=PEERS,
                   help="the server beside logport: a raw pyzmq relay, or logjam-device (C; on PATH)")
    p.add_argument("--baseline", default="8d78972",
                   help="a commit to run beside this checkout, alternating ('': this checkout only)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def body_json(size: int, i: int) -> bytes:
    head = {"action": "Bench#index", "started_at": "2026-11-22T03:00:00+00:00", "started_ms": 1795316400000,
            "total_time": 12.5, "code": 200, "severity": 1, "request_id": f"{i:032x}", "lines": ""}
    base = len(json.dumps(head).encode())
    words = ("GET /bench/index completed 200 OK in 12ms (Views: 3.1ms | ActiveRecord: 4.2ms) "
             * (size // 40 + 2))
    head["lines"] = words[: max(0, size - base)]
    return json.dumps(head).encode()


# --- the load: producer and subscriber (bench/_logjam_load.c) ---


def build_load(work: Path) -> Path:
    """bench/_logjam_load.c compiled into `work`; SystemExit with what to install when it cannot be."""
    target = work / "_logjam_load"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench logjam: no C compiler (cc) for its load generator; install gcc (make setup does)")
    done = subprocess.run([cc, "-O2", "-o", str(target), str(LOAD_SOURCE), "-lzmq"], capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit("bench logjam: its load generator did not build (it needs libzmq's headers: "
                         f"apt-get install libzmq3-dev, which make setup does):\n{done.stderr.strip()}")
    return target


def write_bodies(work: Path, method: str, size: int) -> Path:
    """64 bodies compressed with `method`, each after its 4-byte big-endian length, for the producer."""
    from logport.protocols import logjam as lj

    path = work / f"bodies-{method}"
    with path.open("wb") as f:
        for i in range(64):
            body = lj.compress(body_json(size, i), lj.COMPRESSION_NAMES[method])
            f.write(len(body).to_bytes(4, "big") + body)
    return path


class Load:
    """The built program and the bodies of each method."""

    def __init__(self, work: Path, methods: list[str], size: int) -> None:
        self.program = build_load(work)
        self.bodies = {method: write_bodies(work, method, size) for method in methods}


async def run_case(load: Load, pub_port: int, router_port: int, method: str, args: argparse.Namespace,
                   cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    """One run through a server; `cpu` reads the server's CPU seconds (sampled around the producer's run)."""
    from logport.protocols import logjam as lj

    sub = await asyncio.create_subprocess_exec(str(load.program), "subscribe", f"tcp://127.0.0.1:{pub_port}",
                                               str(args.messages), "10000", stdout=subprocess.PIPE)
    assert sub.stdout is not None
    await sub.stdout.readline()  # ready
    await asyncio.sleep(0.5)  # slow joiner: let the subscription reach the PUB socket
    cpu_start = cpu() if cpu is not None else 0.0
    prod = await asyncio.create_subprocess_exec(
        str(load.program), "produce", f"tcp://127.0.0.1:{router_port}", str(args.messages), str(load.bodies[method]),
        str(lj.COMPRESSION_NAMES[method]), stdout=subprocess.PIPE)
    out_p, _ = await prod.communicate()
    out_s, _ = await sub.communicate()
    cpu_seconds = cpu() - cpu_start if cpu is not None else 0.0
    p, s = json.loads(out_p), json.loads(out_s)
    seconds = s["last"] - p["start"]
    queued = p["sent_done"] - p["start"]
    return {"received": s["received"], "seconds": seconds, "rate": s["received"] / seconds if seconds > 0 else 0,
            "cpu": cpu_seconds, "offered": args.messages / queued if queued > 0 else float("inf")}


# --- the servers ---


async def logport_case(load: Load, work: Path, method: str, args: argparse.Namespace,
                       pythonpath: Path | None = None, name: str = "new") -> dict[str, Any]:
    """A hub in its own process: this checkout's code, or the baseline's on `pythonpath`."""
    from _hubproc import HubProcess

    data = work / f"logport-{name}-{method}"
    shutil.rmtree(data, ignore_errors=True)
    ports = {"router_port": free_port(), "pull_port": free_port(), "pub_port": free_port()}
    settings = {"store": {"data_dir": str(data), "fsync": args.fsync}, "metrics": {"enabled": False},
                "forward": {"enabled": False}, "lumberjack": {"enabled": False}, "segment": {"enabled": False},
                "logjam": {**ports, "pub_hwm": 0}}
    hub = HubProcess(settings, pythonpath, "logport_logjam_messages_stored_total", {"socket": "router"})
    await hub.start()
    try:
        result = await run_case(load, ports["pub_port"], ports["router_port"], method, args, hub.cpu_seconds)
    finally:
        stopped = await hub.stop()
        shutil.rmtree(data, ignore_errors=True)
    result["stored"] = stopped.get("metric") or 0
    return result


async def device_case(load: Load, method: str, args: argparse.Namespace) -> dict[str, Any]:
    """logjam-device (on PATH) in its own process: ROUTER to PUB in memory, PUB without a high-water mark (as
    logport's pub_hwm 0 here), every port a free one on loopback."""
    router_port, pull_port, pub_port = free_port(), free_port(), free_port()
    command = ["logjam-device", "--quiet", "--device-id", "1", "--router-port", str(router_port), "--input-port",
               str(pull_port), "--output-port", str(pub_port), "--stats-port", str(free_port()),
               "--metrics-port", str(free_port()), "--metrics-ip", "127.0.0.1", "--snd-hwm", "0"]
    device = await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await until_listening(router_port, device)
        result = await run_case(load, pub_port, router_port, method, args, lambda: tree_cpu_seconds(device.pid))
    finally:
        device.terminate()
        await device.wait()
    result["stored"] = 0
    return result


async def until_listening(port: int, proc: asyncio.subprocess.Process, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.returncode is not None:
            raise SystemExit(f"bench logjam: logjam-device exited ({proc.returncode}) before it listened")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench logjam: logjam-device did not listen on port {port} in {timeout:.0f} s") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return


def zmq_thread_cpu() -> float:
    """CPU seconds of this process's libzmq background threads (I/O and reaper) so far."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("ZMQbg"):
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def raw_relay(router_port: int, pub_port: int, messages: int, ready: Any) -> float:
    """The relay; returns its CPU seconds (its thread and its context's libzmq threads), the raw side's
    messages per CPU-second beside the hub's (this process runs nothing else meanwhile)."""
    thread_start, zmq_start = time.thread_time(), zmq_thread_cpu()
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    router.bind(f"tcp://127.0.0.1:{router_port}")
    pub.bind(f"tcp://127.0.0.1:{pub_port}")
    router.setsockopt(zmq.RCVTIMEO, 10000)
    ready()
    recv, send = router.recv_multipart, pub.send_multipart
    try:
        for _ in range(messages):
            frames = recv()
            send(frames[1:])
    except zmq.Again:
        pass
    cpu = time.thread_time() - thread_start + zmq_thread_cpu() - zmq_start
    router.close(linger=0)
    pub.close(linger=2000)
    ctx.term()
    return cpu


async def raw_case(load: Load, method: str, args: argparse.Namespace) -> dict[str, Any]:
    router_port, pub_port = free_port(), free_port()
    loop = asyncio.get_running_loop()
    bound = asyncio.Event()
    relay = loop.run_in_executor(None, raw_relay, router_port, pub_port, args.messages,
                                 lambda: loop.call_soon_threadsafe(bound.set))
    await bound.wait()
    result = await run_case(load, pub_port, router_port, method, args)
    result["cpu"] = await relay
    result["stored"] = 0
    return result


def run(args: argparse.Namespace) -> int:
    if args.peer == "logjam-device" and shutil.which("logjam-device") is None:
        print("bench logjam: logjam-device is not on PATH; build it from skaes/logjam-tools (docs/benchmarks.md "
              "says how) or run with --peer raw", file=sys.stderr)
        return 2
    methods = args.methods.split(",")
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="logport-bench-logjam-"))
    work.mkdir(parents=True, exist_ok=True)
    load = Load(work, methods, args.size)
    servers: list[tuple[str, Path | None]] = [("new", None)]
    if args.baseline:
        servers.append((args.baseline, build_baseline(args.baseline, work)))
    peer = args.peer
    names = [peer] + [name for name, _ in servers]
    header(f"logjam: C producer -> server -> C subscriber, logport beside {peer}, {args.messages} messages of "
           f"{args.size} B JSON per run, fsync={args.fsync}; medians of {args.rounds} rounds, each a run of every "
           f"server ({', '.join(names)}; order rotated every round); server CPU = its processes while the producer "
           f"ran; offered = messages / the producer's time to queue them; load = 1-minute load average, min..max")
    rows = []
    summary: list[str] = []

    async def one(name: str, method: str) -> dict[str, Any]:
        if name == "raw":
            return await raw_case(load, method, args)
        if name == "logjam-device":
            return await device_case(load, method, args)
        site = dict(servers)[name]
        return await logport_case(load, work, method, args, site, name)

    async def main() -> None:
        for method in methods:
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            loads: list[float] = []
            for round_ in range(args.rounds):  # back to back, so that every server sees the same background load
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    loads.append(os.getloadavg()[0])
                    runs[name].append(await one(name, method))
            peer_runs = runs[peer]
            peer_rate = median([r["rate"] for r in peer_runs])
            peer_cpu = median([r["received"] / r["cpu"] for r in peer_runs if r["cpu"]])
            for name in names:
                done = runs[name]
                ratios = [o["rate"] / r["rate"] for o, r in zip(done, peer_runs, strict=True) if r["rate"]]
                per_cpu = median([o["received"] / o["cpu"] for o in done if o["cpu"]])
                stored = f"{int(sum(o['stored'] for o in done))}" if name != peer else "-"
                rows.append([method, name, median([o["rate"] for o in done]), f"{median(ratios):.2f}x",
                             f"{min(ratios):.2f}..{max(ratios):.2f}", per_cpu, f"{per_cpu / peer_cpu:.2f}x",
                             f"{sum(o['received'] for o in done)}/{args.messages * args.rounds}", stored,
                             median([o["offered"] for o in done]), f"{min(loads):.2f}..{max(loads):.2f}"])
            fastest = max(median([o["rate"] for o in runs[name]]) for name in names)
            offered = min(o["offered"] for name in names for o in runs[name])
            new = runs["new"]
            summary.append(f"{method}: logport/{peer} msg/s {median([o['rate'] for o in new]) / peer_rate:.2f}x, per "
                           f"server CPU-s {median([o['received'] / o['cpu'] for o in new if o['cpu']]) / peer_cpu:.2f}x; "
                           f"the producer's lowest offered rate {offered:,.0f} msg/s is "
                           f"{offered / fastest:.1f}x the fastest server's {fastest:,.0f} msg/s")

    run_async(main)
    table(["compression", "server", "msg/s", f"vs {peer}", "per-round range", "msg per server CPU-s",
           f"per CPU-s vs {peer}", "received", "stored", "offered msg/s", "load"], rows)
    print()
    for line in summary:
        print(line)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    ns = argparse.ArgumentParser()
    add_arguments(ns)
    sys.exit(run(ns.parse_args()))
