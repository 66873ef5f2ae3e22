"""The `logport` command: serve, segments, cat, send, bench, pipeline."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from logport.errors import LogportError

# `logport send <protocol>`: module exposing add_send_arguments(parser) and send_main(args) -> int
SEND_TARGETS: dict[str, str] = {
    "forward": "logport.clients.forward",
    "lumberjack": "logport.clients.lumberjack",
    "segment": "logport.clients.segment",
    "logjam": "logport.clients.logjam",
}

PIPELINE_MODULE = "logport.spark.pipeline"  # add_arguments(parser), main(args) -> int


def bench_dir() -> Path:
    """bench/ of the checkout this package was installed from (editable), else ./bench."""
    here = Path(__file__).resolve().parents[2] / "bench"
    return here if here.is_dir() else Path.cwd() / "bench"


def load_bench(name: str) -> ModuleType:
    path = bench_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"logport_bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench_names() -> list[str]:
    return sorted(p.stem for p in bench_dir().glob("*.py") if not p.stem.startswith("_"))


def _add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config file (its store.data_dir is used)")
    p.add_argument("--data-dir", help="data directory (default: ./data, or the config's)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logport", description="An event hub for log pipelines.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the hub")
    _add_store_args(p)
    p.add_argument("--bind", help="address every listener and the metrics endpoint bind to")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("segments", help="list segments: name, offsets, bytes, events, sealed")
    _add_store_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per segment")
    p.set_defaults(func=cmd_segments)

    p = sub.add_parser("cat", help="print a segment's events as JSON lines")
    _add_store_args(p)
    p.add_argument("segment")
    p.add_argument("--from", dest="offset", type=int, default=None, help="start offset (default: the segment's start)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events as they arrive")
    p.add_argument("--server", help="HOST:PORT of a running hub: read over the segment protocol")
    p.set_defaults(func=cmd_cat)

    p = sub.add_parser("send", help="send JSON lines from stdin with one of the protocols")
    send_sub = p.add_subparsers(dest="protocol", required=True)
    for name, module in SEND_TARGETS.items():
        sp = send_sub.add_parser(name, help=f"send with the {name} protocol")
        sp.set_defaults(func=cmd_send, send_module=module)
        try:
            importlib.import_module(module).add_send_arguments(sp)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            sp.set_defaults(send_missing=True)

    p = sub.add_parser("bench", help="run a benchmark scenario: " + ", ".join(bench_names()))
    p.add_argument("scenario", nargs="?", choices=bench_names() or None)
    p.add_argument("args", nargs=argparse.REMAINDER, help="options of the scenario (see logport bench NAME --help)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("pipeline", help="run the Spark analytics job", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_pipeline)
    return parser


def _config(args: argparse.Namespace, *, bind: str | None = None):  # type: ignore[no-untyped-def]
    from logport.config import load_config

    return load_config(args.config, data_dir=args.data_dir, bind=bind)


def cmd_serve(args: argparse.Namespace) -> int:
    from logport.hub import serve_forever
    from logport.logs import setup_logging

    config = _config(args, bind=args.bind)
    setup_logging(config.hub.log_level, config.hub.log_format)
    try:
        import uvloop
    except ImportError:  # only the import: an ImportError from inside the hub must not start it twice
        asyncio.run(serve_forever(config))
    else:
        uvloop.run(serve_forever(config))
    return 0


def cmd_segments(args: argparse.Namespace) -> int:
    import orjson

    from logport.store.reader import DirectoryReader

    reader = DirectoryReader(_config(args).store.data_dir)
    rows = [reader.describe(name) for name in reader.segment_names()]
    if args.json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        return 0
    header = ("SEGMENT", "START", "END", "BYTES", "EVENTS", "SEALED")
    table = [header] + [
        (r["segment"], str(r["start_offset"]), str(r["end_offset"]), str(r["bytes"]), str(r["events"]),
         "yes" if r["sealed"] else "no")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    return 0


def cmd_cat(args: argparse.Namespace) -> int:
    from logport.eventjson import write_events

    try:
        if args.server:
            from logport.clients.segment import cat_from_server

            return asyncio.run(cat_from_server(args.server, args.segment, args.offset, args.follow, sys.stdout))
        from logport.store.reader import DirectoryReader

        reader = DirectoryReader(_config(args).store.data_dir)
        for segment, offset, body in reader.follow(args.segment, args.offset, follow=args.follow):
            write_events(sys.stdout, segment, offset, body)
    except KeyboardInterrupt:  # the way to stop --follow
        pass
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    if getattr(args, "send_missing", False):
        print(f"logport send {args.protocol}: not available in this build", file=sys.stderr)
        return 2
    return int(importlib.import_module(args.send_module).send_main(args))


def cmd_bench(args: argparse.Namespace) -> int:
    if not args.scenario:
        print("scenarios: " + ", ".join(bench_names()))
        return 0
    module = load_bench(args.scenario)
    p = argparse.ArgumentParser(prog=f"logport bench {args.scenario}", description=module.__doc__)
    module.add_arguments(p)
    return int(module.run(p.parse_args(args.args)))


def cmd_pipeline(args: argparse.Namespace) -> int:
    module = importlib.import_module(PIPELINE_MODULE)
    p = argparse.ArgumentParser(prog="logport pipeline", description=module.__doc__)
    module.add_arguments(p)
    return int(module.main(p.parse_args(args.args)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pipeline"]:  # all its options are the job's: REMAINDER would not take a leading --option
        args = argparse.Namespace(func=cmd_pipeline, args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except LogportError as e:
        print(f"logport: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
