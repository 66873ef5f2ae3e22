"""The `logport` command: serve, segments, cat, send, bench, pipeline."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import importlib.util
import logging
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from logport.clients import flags
from logport.errors import CorruptData, DataDirectoryMissing, LogportError, ServerUnavailable

if TYPE_CHECKING:
    from logport.store.reader import DirectoryReader

# `logport send <protocol>`: module exposing add_send_arguments(parser) and send_main(args) -> int
SEND_TARGETS: dict[str, str] = {
    "forward": "logport.clients.forward",
    "lumberjack": "logport.clients.lumberjack",
    "segment": "logport.clients.segment",
    "logjam": "logport.clients.logjam",
}

PIPELINE_MODULE = "logport.spark.pipeline"  # add_arguments(parser), main(args) -> int

# `logport bench` with no scenario: how long each takes with its defaults (rough, on a 2-core machine) and
# what it needs beyond the venv; what it measures is the first paragraph of its module's docstring
BENCH_NEEDS: dict[str, tuple[str, str]] = {
    "forward": ("about 1 min", "Node (node_modules/@fluent-org/logger: `make node`), or --skip-node"),
    "logjam": ("3-5 min", "git and pip to build the --baseline commit it runs beside this checkout ('' to skip)"),
    "lumberjack": ("2-4 min", "git and pip to build the --baseline commit it runs beside this checkout ('' to skip)"),
    "pipeline": ("15-30 min", "Java for PySpark (`make java`); some 3 GB free for its data (--dir)"),
    "segment": ("2-4 min", "nothing more"),
    "spark": ("2-4 min", "Java for PySpark (`make java`); git and pip to build the --baseline commit, if given"),
    "store": ("3-6 min", "a disk to fsync to (it writes GiBs under --dir)"),
}
FOLLOW_POLL = 0.2  # seconds between looks for a segment `cat --follow` waits for


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, except for the ones that say nothing (off, empty, none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default in ("", [], argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


def version() -> str:
    try:
        return importlib.metadata.version("logport")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


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


def bench_summary(name: str) -> str:
    """The first paragraph of a scenario's docstring (read, not imported: importing one may need Java or Node)."""
    import ast

    doc = ast.get_docstring(ast.parse((bench_dir() / f"{name}.py").read_text())) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ")


def _add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config file (its store.data_dir is used)")
    p.add_argument("--data-dir", help="data directory (default: ./data, or the config's)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logport", description="An event hub for log pipelines.",
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"logport {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser = _with_formatter(sub)

    p = add_parser("serve", help="run the hub")
    _add_store_args(p)
    p.add_argument("--bind", help="address every listener and the metrics endpoint bind to")
    p.set_defaults(func=cmd_serve)

    p = add_parser("segments", help="list segments: name, offsets, bytes, events, sealed")
    _add_store_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per segment")
    p.set_defaults(func=cmd_segments)

    p = add_parser("cat", help="print a segment's events as JSON lines")
    _add_store_args(p)
    p.add_argument("segment", help="the segment to print")
    p.add_argument("--from", dest="offset", type=int, default=None, help="start offset (default: the segment's start)")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing new events as they arrive; wait for a segment not created yet")
    p.add_argument("--server", metavar="HOST:PORT", help="a running hub: read over the segment protocol")
    flags.add_timeout_argument(p, "the --server cannot be reached")
    flags.add_tls_arguments(p)
    p.set_defaults(func=cmd_cat)

    p = add_parser("verify", help="check every stored byte's checksum; exit 1 if anything is corrupt")
    _add_store_args(p)
    p.add_argument("segments", nargs="*", metavar="SEGMENT", help="segments to check (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per segment, with its bad ranges")
    p.set_defaults(func=cmd_verify)

    p = add_parser("send", help="send JSON lines from stdin with one of the protocols")
    add_send_parser = _with_formatter(p.add_subparsers(dest="protocol", required=True))
    for name, module in SEND_TARGETS.items():
        sp = add_send_parser(name, help=f"send with the {name} protocol")
        sp.set_defaults(func=cmd_send, send_module=module)
        try:
            importlib.import_module(module).add_send_arguments(sp)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            sp.set_defaults(send_missing=True)

    p = add_parser("bench", help="run a benchmark scenario: " + ", ".join(bench_names()))
    p.add_argument("scenario", nargs="?", choices=bench_names() or None,
                   help="the scenario (default: list them, with how long each takes and what it needs)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="options of the scenario (see logport bench NAME --help)")
    p.set_defaults(func=cmd_bench)

    p = add_parser("reload", help="make a running hub read its config again (SIGHUP)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid-file", help="the hub's hub.pid_file")
    target.add_argument("--pid", type=int, help="the hub's process id")
    p.set_defaults(func=cmd_reload)

    p = add_parser("top", help="a live view of a running hub, from its metrics endpoint (q quits)")
    p.add_argument("--metrics", default="127.0.0.1:24231", metavar="HOST:PORT",
                   help="the hub's metrics endpoint ([metrics] bind and port)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two scrapes")
    p.set_defaults(func=cmd_top)

    p = add_parser("pipeline", help="run the Spark analytics job", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_pipeline)
    return parser


def _with_formatter(sub: Any) -> Any:
    """`sub.add_parser` whose parsers show defaults too (a subparser does not inherit its parent's formatter)."""

    def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, formatter_class=HelpFormatter, **kwargs)  # type: ignore[no-any-return]

    return add_parser


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
        asyncio.run(serve_forever(config, args.config, {"data_dir": args.data_dir, "bind": args.bind}))
    else:
        uvloop.run(serve_forever(config, args.config, {"data_dir": args.data_dir, "bind": args.bind}))
    return 0


def _data_dir(args: argparse.Namespace) -> str:
    """The data directory the command reads; DataDirectoryMissing when it does not exist (a typo read as
    an empty store: `segments` printed an empty table, `cat` said only `no such segment`)."""
    data_dir = str(_config(args).store.data_dir)
    if not Path(data_dir).is_dir():
        raise DataDirectoryMissing(data_dir)
    return data_dir


def cmd_segments(args: argparse.Namespace) -> int:
    import orjson

    from logport.store.identity import read_hub_identity
    from logport.store.reader import DirectoryReader

    data_dir = _data_dir(args)
    reader = DirectoryReader(data_dir)
    rows = [reader.describe(name) for name in reader.segment_names()]
    hub = read_hub_identity(data_dir)  # the hub's stable identity: made on its first start
    lags = output_lags(_config(args), reader) if args.config else []
    if args.json:
        for row in rows:
            sys.stdout.write(orjson.dumps({**row, "hub": hub}).decode() + "\n")
        for row in lags:
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
    print(f"hub {hub or '(none yet: the hub makes its identity on its first start)'}")
    print_output_lags(lags)
    return 0


def output_lags(config: Any, reader: Any) -> list[dict[str, Any]]:
    """A row per configured output: how far its checkpoint is behind its segment's end (bytes and events),
    and its last success (the checkpoint file is written only after a send was acknowledged)."""
    from logport.config import output_name
    from logport.outputs.follower import CHECKPOINT_DIR
    from logport.store.reader import count_events

    rows = []
    names = set(reader.segment_names())
    for out in [*config.outputs.forward, *config.outputs.lumberjack]:
        name = output_name(out)
        path = Path(config.store.data_dir) / CHECKPOINT_DIR / f"{name}.checkpoint"
        try:
            checkpoint = int(path.read_text().strip() or 0)
            last_success: str | None = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))
        except FileNotFoundError:
            checkpoint, last_success = 0, None
        lag_bytes = lag_events = 0
        if out.segment in names:
            start, end, _ = reader.bounds(out.segment)
            begin = min(max(checkpoint, start), end)
            lag_bytes = end - begin
            lag_events = sum(count_events(body) for _, body in reader.iter_events(out.segment, begin, end))
        rows.append({"output": name, "segment": out.segment, "checkpoint": checkpoint, "lag_bytes": lag_bytes,
                     "lag_events": lag_events, "last_success": last_success})
    return rows


def print_output_lags(lags: list[dict[str, Any]]) -> None:
    if not lags:
        return
    print()
    header = ("OUTPUT", "SEGMENT", "CHECKPOINT", "LAG BYTES", "LAG EVENTS", "LAST SUCCESS")
    table = [header] + [(r["output"], r["segment"], str(r["checkpoint"]), str(r["lag_bytes"]),
                         str(r["lag_events"]), r["last_success"] or "never") for r in lags]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


def cmd_cat(args: argparse.Namespace) -> int:
    from logport.eventjson import write_events

    try:
        if args.server:
            from logport.clients.segment import cat_from_server

            _log_to_stderr("logport cat")
            return asyncio.run(cat_from_server(args.server, args.segment, args.offset, args.follow, sys.stdout,
                                               timeout=flags.retry_for(args), ssl=flags.tls_context(args)))
        from logport.store.reader import DirectoryReader

        data_dir = _data_dir(args)
        reader = DirectoryReader(data_dir)
        try:  # its chunk files are closed on every way out (main() also runs in-process: tests, scripts)
            if args.follow:
                _wait_for_segment(reader, args.segment, data_dir)
            for segment, offset, body in reader.follow(args.segment, args.offset, follow=args.follow):
                write_events(sys.stdout, segment, offset, body)
        finally:
            reader.close()
    except KeyboardInterrupt:  # the way to stop --follow
        pass
    return 0


def _wait_for_segment(reader: DirectoryReader, name: str, data_dir: str) -> None:
    """Return once segment `name` exists in the data directory, as `tail -F` waits for a file; says so once."""
    if name in reader.segment_names():
        return
    print(f"waiting for segment {name!r} to be created in {data_dir}", file=sys.stderr, flush=True)
    while name not in reader.segment_names():
        time.sleep(FOLLOW_POLL)


def cmd_verify(args: argparse.Namespace) -> int:
    """`logport verify`: a line per segment, every bad range, a progress line on a terminal."""
    import dataclasses

    import orjson

    from logport.store.reader import DirectoryReader
    from logport.store.verify import total_bytes, verify

    data_dir = _config(args).store.data_dir
    if not (Path(data_dir) / "segments").is_dir():
        print(f"logport verify: {data_dir} holds no segments directory: not a logport data directory", file=sys.stderr)
        return 1
    names = args.segments or DirectoryReader(data_dir).segment_names()
    total, done = total_bytes(data_dir, names), 0
    show = sys.stderr.isatty() and not args.json

    def progress(n: int) -> None:
        nonlocal done
        done += n
        if show:
            print(f"\r{done / 2**20:,.0f} of {total / 2**20:,.0f} MiB checked", end="", file=sys.stderr, flush=True)

    bad = 0
    for report in verify(data_dir, names, progress):
        bad += len(report.bad)
        if args.json:
            sys.stdout.write(orjson.dumps(dataclasses.asdict(report)).decode() + "\n")
            continue
        if show:
            print("\r", end="", file=sys.stderr)
        v1 = f", {report.v1_chunks} written before format v2 (no checksums)" if report.v1_chunks else ""
        state = "ok" if not report.bad else f"{len(report.bad)} corrupt range{'s' if len(report.bad) != 1 else ''}"
        print(f"{report.segment}: {state}: {report.chunks} chunk{'s' if report.chunks != 1 else ''}, "
              f"{report.groups:,} commit groups, {report.bytes:,} bytes{v1}")
        for r in report.bad:
            print(f"  bytes {r.start}..{r.end} of {r.file}: {r.reason}")
    return 1 if bad else 0


def _log_to_stderr(prefix: str) -> None:
    """A client command's log: warnings (a server went away, once per outage) as `prefix: message` lines;
    the retries in between are info, and its failure is the command's own last line."""
    root = logging.getLogger()
    if root.handlers:  # main() called by a program (a test) that logs its own way
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: %(message)s"))
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)


def cmd_send(args: argparse.Namespace) -> int:
    if getattr(args, "send_missing", False):
        print(f"logport send {args.protocol}: not available in this build", file=sys.stderr)
        return 2
    _log_to_stderr(f"logport send {args.protocol}")
    return int(importlib.import_module(args.send_module).send_main(args))


def cmd_bench(args: argparse.Namespace) -> int:
    if not args.scenario:
        import textwrap

        names = bench_names()
        indent = " " * (max(map(len, names), default=0) + 4)
        print("scenarios (logport bench NAME --help for each one's options):")
        for name in names:
            duration, needs = BENCH_NEEDS.get(name, ("?", "?"))
            print(f"  {name:<{len(indent) - 4}}  {duration}; needs {needs}")
            print(textwrap.fill(bench_summary(name), 100, initial_indent=indent, subsequent_indent=indent))
        return 0
    module = load_bench(args.scenario)
    p = argparse.ArgumentParser(prog=f"logport bench {args.scenario}", description=module.__doc__,
                                formatter_class=HelpFormatter)
    module.add_arguments(p)
    return int(module.run(p.parse_args(args.args)))


def cmd_reload(args: argparse.Namespace) -> int:
    """SIGHUP to a running hub; what it made of the config is in its log and logport_config_reloads_total."""
    import os
    import signal

    pid = args.pid
    if pid is None:
        try:
            pid = int(Path(args.pid_file).read_text().strip())
        except (OSError, ValueError) as e:
            print(f"logport reload: cannot read a pid from {args.pid_file!r}: {e}", file=sys.stderr)
            return 1
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as e:
        print(f"logport reload: cannot signal pid {pid}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"sent SIGHUP to logport (pid {pid}); its log says what changed")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from logport.top import main as top

    return top(args.metrics, args.interval)


def cmd_pipeline(args: argparse.Namespace) -> int:
    module = importlib.import_module(PIPELINE_MODULE)
    p = argparse.ArgumentParser(prog="logport pipeline", description=module.__doc__, formatter_class=HelpFormatter)
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
    except CorruptData as e:  # the data is bad, not the command
        print(f"logport: {e}", file=sys.stderr)
        return 1
    except (DataDirectoryMissing, ServerUnavailable) as e:  # nothing there to read, not a wrong command
        print(f"logport: {e}", file=sys.stderr)
        return 1
    except LogportError as e:
        print(f"logport: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
