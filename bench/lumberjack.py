"""Lumberjack listener throughput: Filebeat-like windows stored with fsync=always and acknowledged.

Windows of N JSON events (default 2048, zlib level 3, `2W n` + one `2C` of `2J`
seq 1..n, as Filebeat sends) are pre-encoded and replayed by a load generator
in a separate process over 1 and 4 connections, each keeping windows in flight
and counting only acknowledged windows. The clock starts once every connection
had a first window acknowledged (the hub spawns its decode workers at the first). Beside it, in the same run: the raw
single-core rate of zlib-decompressing the same windows and orjson.loads-ing
each event (the decode work any Beats receiver has to do), and the ratio.
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


def listener_cpu_rate(windows: list[bytes], seconds: float = 2.0) -> float:
    """Events/s of the listener's own per-window work without sockets or store: decode + build batches."""
    from logport.protocols._receivebuffer import NEED_DATA
    from logport.protocols.lumberjack import Connection, DataFrames, Role
    from logport.servers.lumberjack import build_batches

    events = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for window in windows:
            conn = Connection(Role.SERVER, decode_json=False)
            conn.receive_data(window)
            frames: list = []
            while (event := conn.next_event()) is not NEED_DATA:
                if isinstance(event, DataFrames):
                    frames.extend(event.frames)
            build_batches(frames, tag="beats", tag_from_beat=False, peer="127.0.0.1:1", max_body=14 << 20,
                          received_ns=time.time_ns())
            events += len(frames)
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
    parser.add_argument("--profile", default="", help="write a pyinstrument HTML profile of the hub here")


async def _serve_and_load(args: argparse.Namespace, data_dir: str, windows_file: str, connections: int) -> dict:
    from logport.config import Config, StoreConfig
    from logport.hub import Hub

    config = Config(store=StoreConfig(data_dir=data_dir, fsync=args.fsync))
    for section in (config.forward, config.segment, config.logjam):
        section.enabled = False
    config.metrics.enabled = False
    config.lumberjack.port = 0
    if args.decode_workers is not None:
        config.lumberjack.decode_workers = args.decode_workers
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    try:
        port = hub.services["lumberjack"].port  # type: ignore[attr-defined]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "generate", str(port), windows_file, str(connections),
            str(args.windows), str(args.in_flight), stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"load generator failed ({proc.returncode})")
        return dict(orjson.loads(out.splitlines()[-1]))
    finally:
        await hub.stop()


def run(args: argparse.Namespace) -> int:
    import uvloop

    windows = build_windows(8, args.window, args.level)
    avg_bytes = sum(map(len, windows)) / len(windows)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        windows_file = os.path.join(tmp, "windows.bin")
        with open(windows_file, "wb") as f:
            for w in windows:
                f.write(struct.pack(">I", len(w)) + w)
        for connections in [int(c) for c in args.connections.split(",")]:
            data_dir = os.path.join(args.data_dir or tmp, f"data-{connections}")
            profiler = None
            if args.profile:
                from pyinstrument import Profiler

                profiler = Profiler(async_mode="disabled")
                profiler.start()
            # the machine is shared: measure the raw rate right before and after each run, use the mean
            raw_before = raw_decode_rate(windows)
            result = uvloop.run(_serve_and_load(args, data_dir, windows_file, connections))
            raw = (raw_before + raw_decode_rate(windows)) / 2
            if profiler is not None:
                profiler.stop()
                Path(f"{args.profile}.{connections}.html").write_text(profiler.output_html())
            rate = result["events"] / result["seconds"]
            rows.append((connections, result["events"], result["seconds"], rate, raw))
    from logport.config import LumberjackConfig

    workers = LumberjackConfig.decode_workers if args.decode_workers is None else args.decode_workers
    print(f"windows of {args.window} Filebeat-like events ({avg_bytes / 1024:.0f} KiB compressed at level "
          f"{args.level}), {args.in_flight} in flight per connection, fsync={args.fsync}, decode_workers={workers}")
    print("raw decode: zlib.decompress + orjson.loads of the same windows on one core, measured right before"
          " and after each run (mean)")
    print()
    print(f"{'connections':>11}  {'events':>9}  {'seconds':>7}  {'events/s':>10}  {'raw decode/s':>12}  {'ratio':>6}")
    for connections, events, seconds, rate, raw in rows:
        print(f"{connections:>11}  {events:>9}  {seconds:>7.2f}  {rate:>10,.0f}  {raw:>12,.0f}  {rate / raw:>6.0%}")
    raw = raw_decode_rate(windows)
    cpu = listener_cpu_rate(windows)
    print()
    print(f"listener CPU path alone (decode + build batches, no socket, no store): {cpu:,.0f} events/s "
          f"= {cpu / raw:.0%} of raw decode ({raw:,.0f} events/s) measured next to it")
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
