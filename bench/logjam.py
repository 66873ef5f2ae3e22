"""Logjam: producer -> logport (store, then PUB) -> subscriber, in messages/s, for 1 KB JSON bodies under
each compression method, beside a raw pyzmq DEALER -> ROUTER -> PUB -> SUB relay of the same messages.

The producer (a DEALER sending the agent's 4 frames, async) and the subscriber (a SUB) are separate
processes (this file run with --producer / --subscriber); the middle runs in this process: either a logport
hub (uvloop, fsync as given, every message decoded, stored durably, then published) or the raw relay (a
blocking pyzmq loop: recv_multipart on the ROUTER, send_multipart of the 4 frames on the PUB). A rate is
messages / (last message at the subscriber - first message sent). The hub runs in its own process, this
checkout's code and a baseline commit's (--baseline, built from git) in turn, and its CPU time is read
from /proc around the producer's run, for messages per hub CPU-second; the raw relay's CPU (its thread and
its libzmq threads) is read the same way, for the same figure beside it. The machine is shared, so each
method runs several rounds (raw, then both codes in an order swapped every round) back to back and the
table gives medians (and the range of the per-round ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
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

METHODS = ["none", "zlib", "snappy", "lz4"]
APP_ENV = b"bench-production"
TOPIC = b"logs.bench"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=int, default=15000, help="messages per run")
    p.add_argument("--size", type=int, default=1024, help="JSON body size before compression")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--rounds", type=int, default=5, help="back-to-back pairs (raw, logport) per method")
    p.add_argument("--fsync", default="always", choices=["always", "interval", "never"])
    p.add_argument("--dir", default=None, help="data directory parent (default: a temporary directory)")
    p.add_argument("--baseline", default="8d78972",
                   help="a commit to run beside this checkout, alternating ('': this checkout only)")
    p.add_argument("--producer", default=None, help=argparse.SUPPRESS)  # internal: run as the producer
    p.add_argument("--subscriber", default=None, help=argparse.SUPPRESS)  # internal: run as the subscriber


def free_port() -> int:
    import socket

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


# --- the producer and subscriber processes ---


def producer_main(spec: dict[str, Any]) -> None:
    from logport.protocols import logjam as lj

    method = lj.COMPRESSION_NAMES[spec["method"]]
    bodies = [lj.compress(body_json(spec["size"], i), method) for i in range(64)]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(f"tcp://127.0.0.1:{spec['port']}")
    created = int(time.time() * 1000)
    messages = [[APP_ENV, TOPIC, bodies[i % 64], lj.Meta(method, 0, created, i + 1).pack()]
                for i in range(spec["messages"])]
    time.sleep(0.3)  # the connection is up before the clock starts
    t0 = time.time()
    send = sock.send_multipart
    for frames in messages:
        send(frames, copy=False)
    print(json.dumps({"start": t0, "sent_done": time.time()}), flush=True)
    sock.close(linger=-1)
    ctx.term()


def subscriber_main(spec: dict[str, Any]) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.SUBSCRIBE, APP_ENV)
    sock.connect(f"tcp://127.0.0.1:{spec['port']}")
    print("ready", flush=True)
    n = 0
    first = last = 0.0
    sock.setsockopt(zmq.RCVTIMEO, int(spec["timeout"] * 1000))
    recv = sock.recv_multipart
    try:
        while n < spec["messages"]:
            recv()
            n += 1
            if n == 1:
                first = time.time()
        last = time.time()
    except zmq.Again:
        last = time.time()
    print(json.dumps({"received": n, "first": first, "last": last}), flush=True)
    sock.close(linger=0)
    ctx.term()


async def spawn(role: str, spec: dict[str, Any]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, __file__, f"--{role}", json.dumps(spec),
                                                stdout=subprocess.PIPE)


async def run_case(pub_port: int, router_port: int, method: str, args: argparse.Namespace,
                   cpu: Callable[[], float] | None = None) -> dict[str, Any]:
    """One run through a middle; `cpu` reads the middle's CPU seconds (sampled around the producer's run)."""
    sub = await spawn("subscriber", {"port": pub_port, "messages": args.messages, "timeout": 10.0})
    assert sub.stdout is not None
    await sub.stdout.readline()  # ready
    await asyncio.sleep(0.5)  # slow joiner: let the subscription reach the PUB socket
    cpu_start = cpu() if cpu is not None else 0.0
    prod = await spawn("producer", {"port": router_port, "messages": args.messages, "method": method,
                                    "size": args.size})
    out_p, _ = await prod.communicate()
    out_s, _ = await sub.communicate()
    cpu_seconds = cpu() - cpu_start if cpu is not None else 0.0
    p, s = json.loads(out_p), json.loads(out_s)
    seconds = s["last"] - p["start"]
    return {"received": s["received"], "seconds": seconds, "rate": s["received"] / seconds if seconds > 0 else 0,
            "cpu": cpu_seconds}


# --- the middles ---


async def logport_case(work: Path, method: str, args: argparse.Namespace, pythonpath: Path | None = None,
                       name: str = "new") -> dict[str, Any]:
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
        result = await run_case(ports["pub_port"], ports["router_port"], method, args, hub.cpu_seconds)
    finally:
        stopped = await hub.stop()
        shutil.rmtree(data, ignore_errors=True)
    result["stored"] = stopped.get("metric") or 0
    return result


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


async def raw_case(method: str, args: argparse.Namespace) -> dict[str, Any]:
    router_port, pub_port = free_port(), free_port()
    loop = asyncio.get_running_loop()
    bound = asyncio.Event()
    relay = loop.run_in_executor(None, raw_relay, router_port, pub_port, args.messages,
                                 lambda: loop.call_soon_threadsafe(bound.set))
    await bound.wait()
    result = await run_case(pub_port, router_port, method, args)
    result["cpu"] = await relay
    return result


def run(args: argparse.Namespace) -> int:
    if args.producer:
        producer_main(json.loads(args.producer))
        return 0
    if args.subscriber:
        subscriber_main(json.loads(args.subscriber))
        return 0
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="logport-bench-logjam-"))
    work.mkdir(parents=True, exist_ok=True)
    from _hubproc import build_baseline

    codes: list[tuple[str, Path | None]] = [("new", None)]
    if args.baseline:
        codes.append((args.baseline, build_baseline(args.baseline, work)))
    header(f"logjam: producer -> logport -> subscriber vs raw pyzmq relay, {args.messages} messages of "
           f"{args.size} B JSON per case, fsync={args.fsync}; medians of {args.rounds} rounds, each a raw run then "
           f"a hub process per code ({', '.join(n for n, _ in codes)}; their order swapped every round); hub CPU = "
           f"the hub process while the producer ran; load = 1-minute load average, min..max over the method's runs")
    rows = []
    ratio_of: dict[tuple[str, str], float] = {}  # (method, code) -> median of the per-round logport/raw ratios

    async def main() -> None:
        for method in args.methods.split(","):
            raws: list[dict[str, Any]] = []
            ours: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in codes}
            loads: list[float] = []
            for round_ in range(args.rounds):  # back to back, so that every side sees the same background load
                loads.append(os.getloadavg()[0])
                raws.append(await raw_case(method, args))
                for name, site in (codes if round_ % 2 == 0 else codes[::-1]):
                    loads.append(os.getloadavg()[0])
                    ours[name].append(await logport_case(work, method, args, site, name))
            for name, _ in codes:
                runs = ours[name]
                ratios = [o["rate"] / r["rate"] for o, r in zip(runs, raws, strict=True) if r["rate"]]
                per_cpu = [o["received"] / o["cpu"] for o in runs if o["cpu"]]
                raw_per_cpu = [r["received"] / r["cpu"] for r in raws if r["cpu"]]
                ratio_of[method, name] = median(ratios)
                rows.append([method, name, median([o["rate"] for o in runs]), median([r["rate"] for r in raws]),
                             f"{median(ratios):.0%}", f"{min(ratios):.0%}..{max(ratios):.0%}", median(per_cpu),
                             median(raw_per_cpu), f"{median(per_cpu) / median(raw_per_cpu):.0%}",
                             f"{sum(o['received'] for o in runs)}/{args.messages * args.rounds}",
                             f"{int(sum(o['stored'] for o in runs))}",
                             f"{sum(r['received'] for r in raws)}/{args.messages * args.rounds}",
                             f"{min(loads):.2f}..{max(loads):.2f}"])

    run_async(main)
    table(["compression", "code", "logport msg/s", "raw relay msg/s", "logport/raw", "per-round range",
           "msg per hub CPU-s", "msg per raw relay CPU-s", "logport/raw per CPU-s", "logport received",
           "logport stored", "raw received", "load"], rows)
    print()
    by = {(r[0], r[1]): r for r in rows}
    for method in args.methods.split(","):  # the targets of issue 18, each said met or not
        new = by[(method, "new")]
        line = (f"{method}: logport/raw msg/s {new[4]} (target >= 95%: "
                f"{'met' if ratio_of[method, 'new'] >= 0.95 else 'not met'}), per CPU-s {new[8]}")
        if args.baseline:
            old = by[(method, args.baseline)]
            ratio = new[6] / old[6]
            line += (f"; new/baseline msg/s {new[2] / old[2]:.2f}x, msg per hub CPU-s {ratio:.2f}x (target >= 1.5x: "
                     f"{'met' if ratio >= 1.5 else 'not met'})")
        print(line)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    ns = argparse.ArgumentParser()
    add_arguments(ns)
    sys.exit(run(ns.parse_args()))
