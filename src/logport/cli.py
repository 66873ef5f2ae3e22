"""The `logport` command: serve, segments, cat, send, bench, pipeline, spark-package."""

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
from logport.errors import (
    CorruptData,
    DataDirectoryMissing,
    LogportError,
    NoSuchSegment,
    NotADataDirectory,
    PeerUnavailable,
)
from logport.logs import StderrHandler

if TYPE_CHECKING:
    from logport.clients.stream import Waiting
    from logport.store.reader import DirectoryReader

# `logport send <protocol>`: module exposing add_send_arguments(parser) and send_main(args) -> int
SEND_TARGETS: dict[str, str] = {
    "forward": "logport.clients.forward",
    "lumberjack": "logport.clients.lumberjack",
    "segment": "logport.clients.segment",
    "logjam": "logport.clients.logjam",
}

PIPELINE_MODULE = "logport.spark.pipeline"  # add_arguments(parser), main(args) -> int
UI_MODULE = "logport.ui.serve"  # the same for `logport ui`
SPARK_PACKAGE_MODULE = "logport.spark.package"  # the same

# `logport bench` with no scenario: how long each takes with its defaults (rough, on a 2-core machine) and
# what it needs beyond the venv; what it measures is the first paragraph of its module's docstring
BENCH_NEEDS: dict[str, tuple[str, str]] = {
    "cluster": ("3-6 min", "root and iproute2 (network namespaces: hubs and Spark workers as hosts); Java for PySpark"),
    "forward": ("about 1 min", "Node (node_modules/@fluent-org/logger: `make node`), or --skip-node; "
                "fluent-bit on PATH for --peer fluent-bit"),
    "logjam": ("3-5 min", "cc and libzmq's headers for its C load generator (`make setup`); git and pip to build "
               "the --baseline commit it runs beside this checkout ('' to skip); logjam-device on PATH for "
               "--peer logjam-device"),
    "logs": ("4-8 min", "Java for PySpark (`make java`); the test corpus (tests/spark/logcorpus.py)"),
    "lumberjack": ("2-4 min", "git and pip to build the --baseline commit it runs beside this checkout ('' to skip)"),
    "pipeline": ("15-30 min", "Java for PySpark (`make java`); some 3 GB free for its data (--dir)"),
    "segment": ("2-4 min", "nothing more"),
    "segments": ("1-2 min, and the first run makes its data directory", "--gib of disk under --dir (10 by default)"),
    "spark": ("2-4 min", "Java for PySpark (`make java`); git and pip to build the --baseline commit, if given"),
    "store": ("3-6 min", "a disk to fsync to (it writes GiBs under --dir)"),
    "ui": ("30-60 min to write the 10 M lake, then 2 min", "Java for the pipeline (`make java`), a few GiB under --dir"),
}
FOLLOW_POLL = 0.2  # seconds between looks for a segment `cat --follow` waits for


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, except for the ones that say nothing (off, empty, none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default in ("", [], argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


class CommandParser(argparse.ArgumentParser):
    """Every parser of `logport` and its subcommands (their subparsers are of this class too): an option only as
    it is spelled (argparse takes a prefix by default, and `send forward --host` went to `--hostname`), defaults
    in the help, and an unknown option refused with the usage of the command it was given to, not the top's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


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
    parser = CommandParser(prog="logport", description="An event hub for log pipelines.")
    parser.add_argument("--version", action="version", version=f"logport {version()}")
    parser.add_argument("--debug", action="store_true", help="on an error, print its traceback too")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser = _with_formatter(sub)

    p = add_parser("serve", help="run the hub")
    _add_store_args(p)
    p.add_argument("--bind", help="address every listener and the metrics endpoint bind to")
    p.set_defaults(func=cmd_serve)

    p = add_parser("segments", help="list segments: name, offsets, bytes, events, sealed, corrupt ranges")
    _add_store_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per segment")
    p.add_argument("--exact", action="store_true",
                   help="read and count every event (default: the counts the store keeps per chunk, checked "
                        "against the chunks, and the events written since)")
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
    p.add_argument("--repair", action="store_true",
                   help="give up the corrupt ranges of the named SEGMENTs: recorded in each segment's state, reads "
                        "skip them with a warning from then on (the hub must be stopped)")
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

    p = add_parser("ui", help="the web app over the pipeline's lake (views, JSON API, live view)", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_ui)

    p = add_parser("spark-package", help="pack logport for Spark's executors (spark-submit --archives)")
    importlib.import_module(SPARK_PACKAGE_MODULE).add_arguments(p)
    p.set_defaults(func=lambda args: importlib.import_module(SPARK_PACKAGE_MODULE).main(args))
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
    """The data directory the command reads; DataDirectoryMissing when it does not exist, NotADataDirectory when
    it is a file or holds no segments/ (a typo read as an empty store: `segments` printed an empty table, `cat`
    said only `no such segment`)."""
    data_dir = str(_config(args).store.data_dir)
    path = Path(data_dir)
    if not path.exists():
        raise DataDirectoryMissing(data_dir)
    if not path.is_dir():
        raise NotADataDirectory(data_dir, "it is a file")
    if not (path / "segments").is_dir():
        raise NotADataDirectory(data_dir, "it holds no segments/ directory, which a hub makes when it starts")
    return data_dir


def cmd_segments(args: argparse.Namespace) -> int:
    """`logport segments`: a row per segment as soon as it is counted (from the store's chunk marks, in time
    independent of the data's size; `--exact`: every event read), its corrupt ranges after the table."""
    import orjson

    from logport.store.identity import read_hub_identity
    from logport.store.reader import DirectoryReader

    data_dir = _data_dir(args)
    reader = DirectoryReader(data_dir)
    hub = read_hub_identity(data_dir)  # the hub's stable identity: made on its first start
    names = reader.segment_names()
    if args.json:
        for name in names:
            sys.stdout.write(orjson.dumps({**reader.describe(name, exact=args.exact), "hub": hub}).decode() + "\n")
            sys.stdout.flush()
        for row in output_lags(_config(args), reader) if args.config else []:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        return 0
    header = ("SEGMENT", "START", "END", "BYTES", "EVENTS", "SEALED", "CORRUPT")
    widths = [max([len(header[0]), *map(len, names)]), 14, 14, 14, 12, 6, 8]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    print(line(header).rstrip(), flush=True)
    notes: list[str] = []
    for name in names:
        r = reader.describe(name, exact=args.exact)
        corrupt = r["corrupt"]
        flag = f"{len(corrupt)} range{'s' if len(corrupt) != 1 else ''}" if corrupt else "-"
        if r["given_up"]:
            flag += f" ({len(r['given_up'])} given up)"
        print(line((name, str(r["start_offset"]), str(r["end_offset"]), str(r["bytes"]), str(r["events"]),
                    "yes" if r["sealed"] else "no", flag)).rstrip(), flush=True)
        for c in corrupt:
            where = f"bytes {c['start']}..{c['end']}" if c["end"] > c["start"] else "its marks file"
            notes.append(f"{name}: {where} corrupt ({c['reason']}); `logport verify {name}` checks every byte, "
                         f"`logport verify --repair {name}` gives the ranges up")
    print(f"hub {hub or '(none yet: the hub makes its identity on its first start)'}")
    for note in notes:
        print(note)
    print_output_lags(output_lags(_config(args), reader) if args.config else [])
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
    """Ctrl-C ends --follow (exit 0); in a wait (for the hub, for the segment) it exits 130: nothing was read."""
    from logport.clients.stream import Waiting
    from logport.eventjson import write_events

    waiting = Waiting("logport cat", flags.retry_for(args))
    try:
        if args.server:
            from logport.clients.segment import cat_from_server

            _log_to_stderr("logport cat")
            return asyncio.run(cat_from_server(args.server, args.segment, args.offset, args.follow, sys.stdout,
                                               timeout=flags.retry_for(args), ssl=flags.tls_context(args),
                                               waiting=waiting))
        from logport.store.reader import DirectoryReader

        _log_to_stderr("logport cat")  # a range given up (`logport verify --repair`) is skipped with a warning
        data_dir = _data_dir(args)
        reader = DirectoryReader(data_dir)
        try:  # its chunk files are closed on every way out (main() also runs in-process: tests, scripts)
            if args.follow:
                _wait_for_segment(reader, args.segment, data_dir, waiting)
            for segment, offset, body in reader.follow(args.segment, args.offset, follow=args.follow):
                write_events(sys.stdout, segment, offset, body)
        finally:
            reader.close()
    except KeyboardInterrupt:  # the way to stop --follow
        return 130 if waiting.waiting else 0
    return 0


def _wait_for_segment(reader: DirectoryReader, name: str, data_dir: str, waiting: Waiting) -> None:
    """Return once segment `name` exists in the data directory, as `tail -F` waits for a file; says so once."""
    if name in reader.segment_names():
        return
    waiting.waiting = True
    print(f"waiting for segment {name!r} to be created in {data_dir} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    while name not in reader.segment_names():
        time.sleep(FOLLOW_POLL)
    waiting.over()


def cmd_verify(args: argparse.Namespace) -> int:
    """`logport verify`: a line per segment, every bad range, a progress line on a terminal; with `--repair`,
    the bad ranges of the named segments given up."""
    import dataclasses

    import orjson

    from logport.store.reader import DirectoryReader
    from logport.store.verify import total_bytes, verify

    data_dir = _data_dir(args)
    if args.repair:
        _check_segments(data_dir, args.segments)
        return _repair(data_dir, args.segments)
    names = args.segments or DirectoryReader(data_dir).segment_names()
    _check_segments(data_dir, names)
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
        given_up = f", {len(report.given_up)} given up" if report.given_up else ""
        print(f"{report.segment}: {state}: {report.chunks} chunk{'s' if report.chunks != 1 else ''}, "
              f"{report.groups:,} commit groups, {report.bytes:,} bytes{v1}{given_up}")
        for r in report.bad:
            print(f"  bytes {r.start}..{r.end} of {r.file}: {r.reason}" if r.end > r.start else f"  {r.file}: {r.reason}")
        for r in report.given_up:
            print(f"  bytes {r.start}..{r.end} of {r.file}: given up ({r.reason}); reads skip them")
    if bad and not args.json:
        print("`logport verify --repair SEGMENT` gives a segment's corrupt ranges up (reads skip them from then on)",
              file=sys.stderr)
    return 1 if bad else 0


def _check_segments(data_dir: str, names: list[str]) -> None:
    """NoSuchSegment, with what to do, for the first of `names` the data directory does not hold."""
    from logport.store.reader import DirectoryReader

    held = set(DirectoryReader(data_dir).segment_names())
    for name in names:
        if name not in held:
            raise NoSuchSegment(name, f"in {data_dir}; `logport segments` lists its segments")


def _repair(data_dir: str, names: list[str]) -> int:
    """`logport verify --repair SEGMENT...`: the corrupt ranges verify finds are given up, recorded in each
    segment's state, after which reads skip them with a warning. The hub must be stopped (its lock is taken)."""
    from logport.errors import DataDirectoryInUse
    from logport.store.repair import give_up

    if not names:
        print("logport verify --repair: name the segments to repair (`logport verify` lists their corrupt ranges)",
              file=sys.stderr)
        return 2
    try:
        outcomes = give_up(data_dir, names)
    except DataDirectoryInUse as e:
        print(f"logport verify --repair: {e}; the ranges stay as they are (quarantined) while it runs", file=sys.stderr)
        return 1
    for name, ranges in outcomes.items():
        if not ranges:
            print(f"{name}: nothing corrupt to give up")
        for r in ranges:
            where = f"bytes {r.start}..{r.end} of {r.file}" if r.end > r.start else r.file
            print(f"{name}: gave up {where} ({r.reason}); reads skip them from now on")
    return 0


def _log_to_stderr(prefix: str) -> None:
    """A client command's log: warnings (a server went away, once per outage) as `prefix: message` lines;
    the retries in between are info, and its failure is the command's own last line."""
    root = logging.getLogger()
    if root.handlers:  # main() called by a program (a test) that logs its own way
        return
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter(f"{prefix}: %(message)s"))
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)


def cmd_send(args: argparse.Namespace) -> int:
    """Each sender streams stdin and stops on SIGINT/SIGTERM with a summary (logport.clients.stream)."""
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
    p = CommandParser(prog=f"logport bench {args.scenario}", description=module.__doc__)
    module.add_arguments(p)
    return int(module.run(p.parse_args(args.args)))


def cmd_reload(args: argparse.Namespace) -> int:
    """SIGHUP to a running hub, once its config checks out; then the hub's verdict (logport.hub_reload)."""
    from logport.hub_reload import reload_hub

    return reload_hub(args.pid, args.pid_file, build_parser)


def cmd_top(args: argparse.Namespace) -> int:
    from logport.top import main as top

    return top(args.metrics, args.interval)


def pipeline_parser() -> argparse.ArgumentParser:
    module = importlib.import_module(PIPELINE_MODULE)
    p = CommandParser(prog="logport pipeline", description=module.__doc__)
    module.add_arguments(p)
    return p


def cmd_pipeline(args: argparse.Namespace) -> int:
    """The job, its Spark warnings silenced, and its errors said in one line as the job's: ours (the runner reads
    the hubs' offsets itself), and a Spark error that wraps ours (the data source's) as ours."""
    from logport.spark import errors as spark_errors
    from logport.spark.log4j import quiet_spark_logs

    options = pipeline_parser().parse_args(args.args)
    quiet_spark_logs()
    try:
        return int(importlib.import_module(PIPELINE_MODULE).main(options))
    except Exception as e:
        if args.debug:
            raise
        code = exit_code(e) if isinstance(e, LogportError) else None  # a hub that did not answer: 1, as in Spark
        said = str(e) if code else spark_errors.cause(e)
        if said is None:
            raise
        print(f"logport pipeline: {said}", file=sys.stderr)
        return code or 1


def ui_parser() -> argparse.ArgumentParser:
    module = importlib.import_module(UI_MODULE)
    p = CommandParser(prog="logport ui", description=module.__doc__)
    module.add_arguments(p)
    return p


def cmd_ui(args: argparse.Namespace) -> int:
    return int(importlib.import_module(UI_MODULE).main(ui_parser().parse_args(args.args)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = argv[:1] == ["--debug"]
    command = argv[1:] if debug else argv
    if command[:1] == ["pipeline"]:  # all its options are the job's: REMAINDER would not take a leading --option
        args = argparse.Namespace(func=cmd_pipeline, args=command[1:], debug=debug)
    elif command[:1] == ["ui"]:
        args = argparse.Namespace(func=cmd_ui, args=command[1:], debug=debug)
    else:
        args = build_parser().parse_args(argv)
    args.argv = command  # what a sender's resume command repeats
    try:
        return int(args.func(args))
    except Exception as e:
        if args.debug:
            raise
        code = exit_code(e)
        if code is None:
            raise
        if code:
            print(f"logport: {failure(e) if isinstance(e, OSError) and not isinstance(e, LogportError) else e}",
                  file=sys.stderr)
        return code
    except KeyboardInterrupt:  # stopped before (or outside) a command's own handling of Ctrl-C
        return 130


def exit_code(e: Exception) -> int | None:
    """A user's mistake or the state of things, as an exit status: 1 for what is there (corrupt data, a data
    directory or server that is not there, a file that cannot be read), 2 for a wrong command; None: a bug."""
    if isinstance(e, BrokenPipeError):  # `logport cat ... | head`
        return 0
    if isinstance(e, CorruptData | DataDirectoryMissing | NotADataDirectory | PeerUnavailable | OSError):
        return 1
    if isinstance(e, LogportError):
        return 2
    return None


def failure(e: OSError) -> str:
    """An OSError as the one line a user needs: what failed, on which file."""
    what = e.strerror or str(e)
    return f"{e.filename}: {what}" if e.filename else what


if __name__ == "__main__":
    sys.exit(main())
