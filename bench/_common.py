"""What every benchmark scenario shares: timing, percentiles, the results table, the loop."""

from __future__ import annotations

import asyncio
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    try:
        import uvloop

        return uvloop.run(main())  # type: ignore[no-any-return]
    except ImportError:
        return asyncio.run(main())  # type: ignore[arg-type]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def command_line() -> str:
    return "logport bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else "logport bench"


def header(title: str) -> None:
    print(f"# {title}")
    print(f"# command: {command_line()}")
    print(f"# host: {platform.node()} python {platform.python_version()} cpus {os.cpu_count()}"
          f" at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A Markdown table, ready to paste into docs/benchmarks.md."""
    cells = [[str(c) for c in columns]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for i, row in enumerate(cells):
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if value < 10 else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def baseline_tree(revision: str, where: Path) -> Path:
    """The source of git `revision` in a worktree under `where` (remove it with remove_baseline_tree), with
    its C extensions: this tree's built module copied in where the C source is the same, else its own built,
    so that the two codes differ only where their sources do (a module renamed or added since is the
    revision's own, not left out)."""
    import sysconfig

    repo = Path(__file__).resolve().parents[1]
    tree = where / "baseline"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-q", str(tree), revision], check=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    for theirs in sorted((tree / "src").rglob("*.c")):
        text = theirs.read_bytes()
        if b"PyInit_" not in text:  # a helper source, not a module
            continue
        source = theirs.relative_to(tree)
        target = source.with_name(source.stem + suffix)
        same = all((repo / part).exists() and (repo / part).read_bytes() == (tree / part).read_bytes()
                   for part in [source, *(source.with_name(h.decode()) for h in re.findall(rb'#include "([^"]+)"', text))])
        if same and (repo / target).exists():
            shutil.copy2(repo / target, tree / target)
        elif build_extension(theirs, tree / target):
            print(f"# baseline {revision}: {source} differs; built its own {target.name}")
        else:
            print(f"# baseline {revision}: {source} did not build; it runs without {target.name}")
    return tree


def build_extension(source: Path, target: Path) -> bool:
    """Compile one C extension module of a baseline (a single .c file, as every one of logport's is) with
    the compiler and flags this Python was built with; whether it worked."""
    import sysconfig

    cc = (sysconfig.get_config_var("CC") or "cc").split()
    flags = (sysconfig.get_config_var("CFLAGS") or "").split()
    ldshared = (sysconfig.get_config_var("LDSHARED") or "cc -shared").split()[1:]
    if not source.exists():
        return False
    libraries = ["-lz"] if b"#include <zlib.h>" in source.read_bytes() else []  # as setup.py links logjam's
    command = [*cc, *flags, "-O2", "-fPIC", *ldshared, f"-I{sysconfig.get_paths()['include']}", str(source),
               "-o", str(target), *libraries]
    return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode == 0


def remove_baseline_tree(tree: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)


def load_average() -> str:
    """`uptime`'s three load averages, for the record beside a figure."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


async def store_batches(data_dir: str, bodies: list[bytes], segment: str = "logjam") -> None:
    """Store the batches in a new data directory's `segment`, 64 an append (the Spark scenarios' input)."""
    from logport.config import StoreConfig
    from logport.store import SegmentStore

    store = await SegmentStore.open(StoreConfig(data_dir=data_dir, fsync="never"))
    try:
        for i in range(0, len(bodies), 64):
            await store.append(segment, bodies[i : i + 64])
    finally:
        await store.close()


def write_json_lines(path: Path, bodies: list[bytes], segment: str = "logjam") -> None:
    """The stored batches' events as `logport cat` prints them, one JSON line each (what Spark's JSON reader reads
    beside the logport source)."""
    from logport.eventjson import dumps_event, event_objects

    offset = 0
    with open(path, "wb") as out:
        for body in bodies:
            out.write(b"".join(dumps_event(obj) + b"\n" for obj in event_objects(segment, offset, body)))
            offset += 8 + len(body)


def session_cpu_seconds() -> float:
    """CPU-seconds of this process and everything it started (the JVM, its Python daemons and workers),
    with what their children that have exited used (cutime, cstime): Spark's Python workers come and go."""
    total = 0
    pending = [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            for task in Path(f"/proc/{pid}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def timed(action) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(seconds, session CPU-seconds) of one action (a Spark read, a job)."""
    cpu = session_cpu_seconds()
    started = time.perf_counter()
    action()
    return time.perf_counter() - started, session_cpu_seconds() - cpu
