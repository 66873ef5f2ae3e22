"""Lumberjack listener throughput: Filebeat-like windows stored with fsync=always and acknowledged.

Windows of N JSON events (default 2048, zlib level 3, `2W n` + one `2C` of `2J`
seq 1..n, as Filebeat sends) are pre-encoded and replayed by a load generator
in a separate process over 1 and 4 connections, each keeping windows in flight
and counting only acknowledged windows, to a hub in its own process: this
checkout's code and a baseline commit's (--baseline, built from git), in turn,
in both orders. The clock starts once every connection had a first window
acknowledged (the hub spawns its decode workers at the first); the hub's CPU
time (its process and its decode workers, from /proc) is read at the start
and the end, for events per hub CPU-second beside events/s. Then, in this
process: the listener's own per-window work on one core (C pass and Python
reference) beside zlib-decompressing the same windows and orjson.loads-ing
each event.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))

MESSAGES = [
    "GET /api/v1/orders/{id} HTTP/1.1 200 {n} bytes in {ms} ms",
    "connection from 10.0.{a}.{b} closed after {ms} ms",
    "user {id} logged in from 192.168.{a}.{b} using password authentication",
    "worker {a} finished job {id} with status ok; queue depth {n}",
    "WARN slow query on orders ({ms} ms): SELECT * FROM orders WHERE customer_id = {id}",
]


def filebeat_event(rng: random.Random, i: int) -> dict:
    message = rng.choice(MESSAGES).format(id=rng.randrange(10**6), n=rng.randrange(10**5), ms=rng.randrange(2000),
                                          a=rng.randrange(256), b=rng.randrange(256))
    return {
        "@timestamp": f"2026-11-22T04:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randrange(10**9):09d}Z",
        "@metadata": {"beat": "filebeat", "type": "_doc", "version": "9.1.0"},
        "message": message,
        "log": {"offset": i * 120, "file": {"path": "/var/log/app/app.log"}},
        "input": {"type": "filestream"},
        "ecs": {"version": "8.0.0"},
        "host": {"name": "web-1", "hostname": "web-1", "architecture": "x86_64",
                 "os": {"family": "debian", "name": "Debian GNU/Linux", "kernel": "6.1.0"}},
        "agent": {"type": "filebeat", "version": "9.1.0", "id": "7c1d2d3e-5f0a-4b6c-9d8e-0f1a2b3c4d5e",
                  "name": "web-1", "ephemeral_id": "0d2d7c4a-0c1b-4e8a-9f5e-3b2a1c0d9e8f"},
    }


def build_windows(count: int, size: int, level: int) -> list[bytes]:
    from logport.clients.lumberjack import window_frames

    rng = random.Random(42)
    return [window_frames(0x32, [orjson.dumps(filebeat_event(rng, w * size + i)) for i in range(size)], level)
            for w in range(count)]


def raw_decode_rate(windows: list[bytes], seconds: float = 2.0) -> float:
    """Events/s of zlib.decompress + splitting out the J payloads + orjson.loads, one core."""
    unpack = struct.Struct(">I").unpack_from
    loads = orjson.loads
    events = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for window in windows:
            inner = zlib.decompress(memoryview(window)[12:])
            view = memoryview(inner)
            pos, end = 0, len(inner)
            while pos < end:
                length = unpack(inner, pos + 6)[0]
                loads(view[pos + 10 : pos + 10 + length])
                pos += 10 + length
                events += 1
    return events / (time.perf_counter() - started)


def listener_cpu_rate(windows: list[bytes], seconds: float = 2.0, in_python: bool = False) -> float:
    """Events/s of the listener's own per-window work without sockets or store: inflate, decode, build the
    batches (`decode_window`: the C pass; in_python: the Python reference)."""
    from logport.protocols.lumberjack import Compressed, Limits
    from logport.servers.lumberjack import decode_window, decode_window_in_python

    decode = decode_window_in_python if in_python else decode_window
    limits = Limits()
    events = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for window in windows:
            size = struct.unpack_from(">I", window, 2)[0]
            decoded = decode(Compressed(0x32, window[12:]), limits, size, 0, 1, "beats", False, "127.0.0.1:1",
                             14 << 20, time.time_ns())
            assert decoded is not None
            events += size
    return events / (time.perf_counter() - started)


# --- the load generator (runs as `python bench/lumberjack.py generate ...`) ---


async def _generate(port: int, path: str, connections: int, per_connection: int, in_flight: int) -> None:
    data = Path(path).read_bytes()
    windows, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        windows.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    sizes = [struct.unpack_from(">I", w, 2)[0] for w in windows]

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection that had one window acknowledged (the hub starts its decode workers at the first)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(windows[0])
        while struct.unpack_from(">I", await reader.readexactly(6), 2)[0] < sizes[0]:
            pass  # keep-alives
        return reader, writer

    links = await asyncio.gather(*(connect() for _ in range(connections)))
    print("ready", flush=True)  # the bench reads the hub's CPU time, then says go
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    async def one(c: int) -> int:
        reader, writer = links[c]
        sent = acked = events = 0
        while acked < per_connection:
            while sent < per_connection and sent - acked < in_flight:
                writer.write(windows[(c + sent) % len(windows)])
                sent += 1
            frame = await reader.readexactly(6)
            seq = struct.unpack_from(">I", frame, 2)[0]
            if seq == 0:
                continue  # keep-alive
            expected = sizes[(c + acked) % len(windows)]
            if seq >= expected:
                events += expected
                acked += 1
        writer.close()
        return events

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(c) for c in range(connections)))
    elapsed = time.perf_counter() - started
    print(orjson.dumps({"events": sum(counts), "seconds": elapsed}).decode(), flush=True)


def generator_main(argv: list[str]) -> int:
    port, path, connections, per_connection, in_flight = argv
    asyncio.run(_generate(int(port), path, int(connections), int(per_connection), int(in_flight)))
    return 0


# --- the bench ---


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=int, default=2048, help="events per window")
    parser.add_argument("--level", type=int, default=3, help="zlib level")
    parser.add_argument("--windows", type=int, default=400, help="windows per connection")
    parser.add_argument("--in-flight", type=int, default=2, help="windows in flight per connection")
    parser.add_argument("--connections", default="1,4", help="comma-separated connection counts")
    parser.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    parser.add_argument("--data-dir", default="", help="store directory (default: a temporary one)")
    parser.add_argument("--decode-workers", type=int, default=None,
                        help="lumberjack.decode_workers of the hub (default: the config's default)")
    parser.add_argument("--baseline", default="8d78972",
                        help="a commit to run beside this checkout, alternating ('': this checkout only)")
    parser.add_argument("--baseline-decode-workers", type=int, default=None,
                        help="lumberjack.decode_workers of the baseline's hub (default: its default)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds per connection count, each running both codes (in turn first)")
    parser.add_argument("--profile", default="", help="write a pyinstrument HTML profile of the hub here")


async def _serve_and_load(args: argparse.Namespace, data_dir: str, windows_file: str, connections: int,
                          pythonpath: Path | None, decode_workers: int | None) -> dict:
    """One run: a hub process (this checkout's code, or the baseline's on `pythonpath`) and the load generator;
    events, seconds, and the CPU seconds of the hub and its workers while the clock ran."""
    from _hubproc import HubProcess

    lumberjack: dict = {"port": 0}
    if decode_workers is not None:
        lumberjack["decode_workers"] = decode_workers
    settings = {"store": {"data_dir": data_dir, "fsync": args.fsync}, "forward": {"enabled": False},
                "segment": {"enabled": False}, "logjam": {"enabled": False}, "metrics": {"enabled": False},
                "lumberjack": lumberjack}
    hub = HubProcess(settings, pythonpath)
    info = await hub.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "generate", str(info["lumberjack_port"]), windows_file, str(connections),
            str(args.windows), str(args.in_flight), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        await proc.stdout.readline()  # ready: every connection had its first window acknowledged
        cpu = hub.cpu_seconds()
        proc.stdin.write(b"go\n")
        line = await proc.stdout.readline()
        cpu = hub.cpu_seconds() - cpu
        await proc.wait()
        if proc.returncode or not line:
            raise RuntimeError(f"load generator failed ({proc.returncode})")
        result = dict(orjson.loads(line))
        result["cpu"] = cpu
        result["decode_workers"] = info.get("decode_workers")
        return result
    finally:
        await hub.stop()


def run(args: argparse.Namespace) -> int:
    import shutil

    import uvloop
    from _hubproc import build_baseline

    windows = build_windows(8, args.window, args.level)
    avg_bytes = sum(map(len, windows)) / len(windows)
    codes: list[tuple[str, Path | None, int | None]] = [("new", None, args.decode_workers)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            site = build_baseline(args.baseline, Path(tmp))
            codes.append((args.baseline, site, args.baseline_decode_workers))
        windows_file = os.path.join(tmp, "windows.bin")
        with open(windows_file, "wb") as f:
            for w in windows:
                f.write(struct.pack(">I", len(w)) + w)
        for connections in [int(c) for c in args.connections.split(",")]:
            for round_ in range(args.rounds):
                order = codes if round_ % 2 == 0 else codes[::-1]  # both orders, so neither is always first
                for name, site, workers in order:
                    data_dir = os.path.join(args.data_dir or tmp, f"data-{name}-{connections}-{round_}")
                    load = os.getloadavg()[0]
                    result = uvloop.run(_serve_and_load(args, data_dir, windows_file, connections, site, workers))
                    shutil.rmtree(data_dir, ignore_errors=True)
                    rate = result["events"] / result["seconds"]
                    per_cpu = result["events"] / result["cpu"] if result["cpu"] else float("nan")
                    rows.append((connections, round_, name, result["decode_workers"], result["events"],
                                 result["seconds"], rate, result["cpu"], per_cpu, load))
    print(f"windows of {args.window} Filebeat-like events ({avg_bytes / 1024:.0f} KiB compressed at level "
          f"{args.level}), {args.in_flight} in flight per connection, fsync={args.fsync}; each run a hub process "
          f"(its code: this checkout 'new' or the baseline commit) and the load generator; hub CPU = the hub "
          f"process and its decode workers while the clock ran; load = 1-minute load average before the run")
    print()
    print(f"| {'conns':>5} | {'round':>5} | {'code':>8} | {'workers':>7} | {'events':>9} | {'seconds':>7} | "
          f"{'events/s':>10} | {'hub CPU s':>9} | {'events/hub CPU-s':>16} | {'load':>5} |")
    print("|" + "|".join("-" * (w + 2) for w in (5, 5, 8, 7, 9, 7, 10, 9, 16, 5)) + "|")
    for connections, round_, name, workers, events, seconds, rate, cpu, per_cpu, load in rows:
        print(f"| {connections:>5} | {round_:>5} | {name:>8} | {workers!s:>7} | {events:>9} | {seconds:>7.2f} | "
              f"{rate:>10,.0f} | {cpu:>9.2f} | {per_cpu:>16,.0f} | {load:>5.2f} |")
    if args.baseline:
        print()
        print("new / baseline, per connection count (medians over rounds):")
        for connections in sorted({r[0] for r in rows}):
            def med(name: str, index: int, c: int = connections) -> float:
                values = sorted(r[index] for r in rows if r[0] == c and r[2] == name)
                return values[len(values) // 2] if len(values) % 2 else sum(values[len(values) // 2 - 1:][:2]) / 2
            print(f"  {connections} connection(s): events/s {med('new', 6) / med(args.baseline, 6):.2f}x, "
                  f"events per hub CPU-second {med('new', 8) / med(args.baseline, 8):.2f}x")
    raw = raw_decode_rate(windows)
    cpu = listener_cpu_rate(windows)
    cpu_python = listener_cpu_rate(windows, in_python=True)
    print()
    print(f"listener CPU path alone, one core (inflate + decode + build batches, no socket, no store): "
          f"{cpu:,.0f} events/s with the C pass, {cpu_python:,.0f} in Python; zlib.decompress + orjson.loads "
          f"of the same windows: {raw:,.0f} events/s")
    print()
    print("command: logport bench lumberjack " + " ".join(sys.argv[3:] if sys.argv[1:3] == ["bench", "lumberjack"]
                                                        else []))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["generate"]:
        sys.exit(generator_main(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
