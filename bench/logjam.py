"""Logjam: producer -> logport (store, then PUB) -> subscriber, in messages/s, for 1 KB JSON bodies under
each compression method, beside a raw pyzmq DEALER -> ROUTER -> PUB -> SUB relay of the same messages.

The producer (a DEALER sending the agent's 4 frames, async) and the subscriber (a SUB) are separate
processes (this file run with --producer / --subscriber); the middle runs in this process: either a logport
hub (uvloop, fsync as given, every message decoded, stored durably, then published) or the raw relay (a
blocking pyzmq loop: recv_multipart on the ROUTER, send_multipart of the 4 frames on the PUB). A rate is
messages / (last message at the subscriber - first message sent). The machine is shared, so each
method runs several raw/logport pairs back to back and the table gives medians (and the range of the
per-pair ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
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


async def run_case(pub_port: int, router_port: int, method: str, args: argparse.Namespace) -> dict[str, Any]:
    sub = await spawn("subscriber", {"port": pub_port, "messages": args.messages, "timeout": 10.0})
    assert sub.stdout is not None
    await sub.stdout.readline()  # ready
    await asyncio.sleep(0.5)  # slow joiner: let the subscription reach the PUB socket
    prod = await spawn("producer", {"port": router_port, "messages": args.messages, "method": method,
                                    "size": args.size})
    out_p, _ = await prod.communicate()
    out_s, _ = await sub.communicate()
    p, s = json.loads(out_p), json.loads(out_s)
    seconds = s["last"] - p["start"]
    return {"received": s["received"], "seconds": seconds, "rate": s["received"] / seconds if seconds > 0 else 0}


# --- the middles ---


async def logport_case(work: Path, method: str, args: argparse.Namespace) -> dict[str, Any]:
    from logport.config import Config
    from logport.hub import Hub

    data = work / f"logport-{method}"
    shutil.rmtree(data, ignore_errors=True)
    cfg = Config()
    cfg.store.data_dir = str(data)
    cfg.store.fsync = args.fsync
    cfg.metrics.enabled = False
    for name in ("forward", "lumberjack", "segment"):
        getattr(cfg, name).enabled = False
    cfg.logjam.router_port, cfg.logjam.pull_port, cfg.logjam.pub_port = free_port(), free_port(), free_port()
    cfg.logjam.pub_hwm = 0
    hub = Hub(cfg, serve_metrics=False)
    await hub.start()
    try:
        result = await run_case(cfg.logjam.pub_port, cfg.logjam.router_port, method, args)
        assert hub.runtime is not None
        result["stored"] = hub.runtime.metrics.registry.get_sample_value(
            "logport_logjam_messages_stored_total", {"socket": "router"}) or 0
    finally:
        await hub.stop()
        shutil.rmtree(data, ignore_errors=True)
    return result


def raw_relay(router_port: int, pub_port: int, messages: int, ready: Any) -> None:
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
    router.close(linger=0)
    pub.close(linger=2000)
    ctx.term()


async def raw_case(method: str, args: argparse.Namespace) -> dict[str, Any]:
    router_port, pub_port = free_port(), free_port()
    loop = asyncio.get_running_loop()
    bound = asyncio.Event()
    relay = loop.run_in_executor(None, raw_relay, router_port, pub_port, args.messages,
                                 lambda: loop.call_soon_threadsafe(bound.set))
    await bound.wait()
    result = await run_case(pub_port, router_port, method, args)
    await relay
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
    header(f"logjam: producer -> logport -> subscriber vs raw pyzmq relay, {args.messages} messages of "
           f"{args.size} B JSON per case, fsync={args.fsync}; medians of {args.rounds} rounds, each a raw run then a logport run")
    rows = []

    async def main() -> None:
        for method in args.methods.split(","):
            raws, ourss = [], []
            for _ in range(args.rounds):  # pairs back to back, so that both sides see the same background load
                raws.append(await raw_case(method, args))
                ourss.append(await logport_case(work, method, args))
            ratios = [o["rate"] / r["rate"] for o, r in zip(ourss, raws, strict=True) if r["rate"]]
            rows.append([method, median([o["rate"] for o in ourss]), median([r["rate"] for r in raws]),
                         f"{median(ratios):.0%}", f"{min(ratios):.0%}..{max(ratios):.0%}",
                         f"{sum(o['received'] for o in ourss)}/{args.messages * args.rounds}",
                         f"{int(sum(o['stored'] for o in ourss))}",
                         f"{sum(r['received'] for r in raws)}/{args.messages * args.rounds}"])

    run_async(main)
    table(["compression", "logport msg/s", "raw relay msg/s", "logport/raw", "per-round range", "logport received",
           "logport stored", "raw received"], rows)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    ns = argparse.ArgumentParser()
    add_arguments(ns)
    sys.exit(run(ns.parse_args()))
