"""p50 and p95 server time of each `logport ui` view's API call over a lake of 10 M generated requests (7 days, 20
app-envs), and DuckDB beside pyarrow datasets on the heaviest queries.

The lake is the pipeline's over generated traffic (bench/_uilake.py), one batch per day; while this checkout's
pipeline does not write the lake yet, the fixture writer's (the same tables and columns). Each view's call is
timed in-process as the app serves it (the view's queries and its JSON), over random app-envs, days and minute
ranges, after one warm-up call. --compare-engines times three queries both ways on the same files: the ranking of
a day, a day's per-minute series, and the week's overview with its merged sketches.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import orjson
from _common import header, load_average, percentile, table

BUDGET_MS = 300.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=10_000_000, help="logjam requests in the lake")
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--app-envs", type=int, default=20)
    p.add_argument("--calls", type=int, default=30, help="timed calls per view")
    p.add_argument("--dir", help="where the lake is (kept; reused when it holds one); default: a temporary one")
    p.add_argument("--compare-engines", action="store_true", help="also DuckDB beside pyarrow datasets")


def build(root: Path, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    import _uilake

    app_envs = [f"app{i:02d}-{('production', 'staging')[i % 4 == 3]}" for i in range(args.app_envs)]
    days = [f"2026-11-{d:02d}" for d in range(1, args.days + 1)]
    lake = root / "lake"
    if (lake / "_log").is_dir():
        print(f"# reusing the lake in {lake}")
        return app_envs, days
    per_app_day = args.requests // (len(app_envs) * len(days))
    started = time.monotonic()
    for i, day in enumerate(days):  # one batch per day, as a daily pipeline run leaves them
        requests = _uilake.generate_requests(app_envs, [day], per_app_day, seed=i + 1)
        how = _uilake.build_lake(lake, root / "data", requests, batches=1) if _uilake.pipeline_writes_the_lake() \
            else (_uilake.write_lake(lake, requests, batches=1, seed=i + 1, first_batch=i + 1) or "fixture")
        print(f"# {day}: {requests.num_rows:,} requests written by the {how} ({time.monotonic() - started:.0f} s)",
              flush=True)
    return app_envs, days


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    orjson.dumps(call(), default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return (time.perf_counter() - started) * 1000


def view_calls(views: Any, app_envs: list[str], days: list[str], rng: random.Random) -> dict[str, Callable[[], Any]]:
    from logport.ui.timerange import TimeRange
    from logport.ui.views import Stream

    def stream() -> Stream:
        return Stream(*rng.choice(app_envs).rsplit("-", 1))

    def day() -> TimeRange:
        return TimeRange.parse(rng.choice(days), None, None, None)

    def minutes() -> TimeRange:
        d, start = rng.choice(days), rng.randrange(0, 1380)
        return TimeRange.parse(None, f"{d}T{start // 60:02d}:{start % 60:02d}",
                               f"{d}T{(start + 60) // 60:02d}:{(start + 60) % 60:02d}", None)

    week = TimeRange.parse(None, days[0], days[-1], None)

    def slow_request() -> Any:
        s, r = stream(), day()
        first = views.requests(s, r, reason="slow", limit=1)["rows"]
        return views.request(s, first[0]["date"], first[0]["id"]) if first else None

    return {
        "overview (day)": lambda: views.overview(day()),
        "overview (7 days)": lambda: views.overview(week),
        "dashboard (day)": lambda: views.dashboard(stream(), day()),
        "dashboard (brushed hour)": lambda: views.dashboard(stream(), minutes()),
        "dashboard (7 days)": lambda: views.dashboard(stream(), week),
        "actions (day, by sum)": lambda: views.actions(stream(), day()),
        "actions (hour, by avg)": lambda: views.actions(stream(), minutes(), sort="avg"),
        "actions (day, modules)": lambda: views.actions(stream(), day(), group="module"),
        "action (day)": lambda: views.action(stream(), "Orders#show", day()),
        "requests (day, slow)": lambda: views.requests(stream(), day(), reason="slow"),
        "request (lookup + page)": slow_request,
        "exceptions (day)": lambda: views.exceptions(stream(), day()),
        "js_errors (day)": lambda: views.js_errors(stream(), day()),
        "frontend (day)": lambda: views.frontend(stream(), day()),
        "notifications (7 days)": lambda: views.notifications(stream(), week),
        "history (7 days)": lambda: views.history(stream(), week),
        "logs (day)": lambda: views.logs(day()),
    }


def compare_engines(lake_dir: Path, app_envs: list[str], days: list[str], calls: int) -> None:
    """The three heaviest reads, DuckDB (as the app runs them) beside pyarrow datasets."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from logport.ui.lake import LakeReader
    from logport.ui.timerange import TimeRange
    from logport.ui.views import Stream, Views

    lake = LakeReader(lake_dir)
    views = Views(lake)
    rng = random.Random(2)

    def parents(maps: Any) -> Any:
        """The row of each entry of a map column (pyarrow's list_parent_indices takes lists, not maps)."""
        offsets = maps.offsets.to_numpy()
        return np.repeat(np.arange(len(maps)), np.diff(offsets))

    def arrow_source(table: str, day_list: list[str]) -> Any:
        return ds.dataset(lake.files(table, day_list), format="parquet", partitioning="hive")

    def arrow_ranking(app: str, env: str, day: str) -> Any:
        t = arrow_source("totals", [day]).to_table(
            columns=["page", "count", "total_time", "total_time_sq", "total_time_max"],
            filter=(pc.field("app") == app) & (pc.field("env") == env) & (pc.field("scope") == "action"))
        return t.group_by("page").aggregate([("count", "sum"), ("total_time", "sum"), ("total_time_sq", "sum"),
                                             ("total_time_max", "max")]).to_pylist()

    def arrow_series(app: str, env: str, day: str) -> Any:
        t = arrow_source("minutes", [day]).to_table(
            columns=["minute", "count", "apdex_satisfied", "apdex_tolerating", "total_time", "total_time_sketch"],
            filter=(pc.field("app") == app) & (pc.field("env") == env) & (pc.field("scope") == "all"))
        sums = t.group_by("minute").aggregate([("count", "sum"), ("apdex_satisfied", "sum"),
                                               ("apdex_tolerating", "sum"), ("total_time", "sum")])
        sketches = t.column("total_time_sketch").combine_chunks()
        rows = parents(sketches)
        entries = pa.table({"minute": pc.take(t.column("minute"), rows), "k": sketches.keys, "v": sketches.items})
        return sums.to_pylist(), entries.group_by(["minute", "k"]).aggregate([("v", "sum")]).num_rows

    def arrow_overview() -> Any:
        t = arrow_source("totals", days).to_table(
            columns=["app", "env", "count", "apdex_satisfied", "apdex_tolerating", "total_time_sketch"],
            filter=pc.field("scope") == "all")
        sums = t.group_by(["app", "env"]).aggregate([("count", "sum"), ("apdex_satisfied", "sum"),
                                                     ("apdex_tolerating", "sum")])
        sketches = t.column("total_time_sketch").combine_chunks()
        rows = parents(sketches)
        entries = pa.table({"app": pc.take(t.column("app"), rows), "env": pc.take(t.column("env"), rows),
                            "k": sketches.keys, "v": sketches.items})
        return sums.to_pylist(), entries.group_by(["app", "env", "k"]).aggregate([("v", "sum")]).num_rows

    def pick() -> tuple[str, str, str]:
        app, env = rng.choice(app_envs).rsplit("-", 1)
        return app, env, rng.choice(days)

    week = TimeRange.parse(None, days[0], days[-1], None)
    cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "ranking of a day": (lambda: views.actions(Stream(*pick()[:2]), TimeRange.parse(pick()[2], None, None, None)),
                             lambda: arrow_ranking(*pick())),
        "per-minute series of a day": (
            lambda: views.series(Stream(*pick()[:2]), TimeRange.parse(pick()[2], None, None, None), 1),
            lambda: arrow_series(*pick())),
        "overview of 7 days (sketches)": (lambda: views.overview(week), arrow_overview),
    }
    rows = []
    for name, (duck, arrow) in cases.items():
        times: dict[str, list[float]] = {"duckdb": [], "pyarrow": []}
        duck(), arrow()  # warm-up: the files' footers
        for _ in range(calls):  # alternating, so both meet the same load
            times["duckdb"].append(timed(duck))
            times["pyarrow"].append(timed(arrow))
        rows.append([name, percentile(times["duckdb"], 0.5), percentile(times["duckdb"], 0.95),
                     percentile(times["pyarrow"], 0.5), percentile(times["pyarrow"], 0.95)])
    print("\n## DuckDB beside pyarrow datasets (ms)")
    table(["query", "duckdb p50", "duckdb p95", "pyarrow p50", "pyarrow p95"], rows)
    lake.close()


def run(args: argparse.Namespace) -> int:
    from logport.ui.lake import LakeReader
    from logport.ui.views import Views

    header("logport ui: server time per view")
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="logport-bench-ui-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        app_envs, days = build(root, args)
        lake = LakeReader(root / "lake")
        views = Views(lake)
        rng = random.Random(1)
        rows = []
        for name, call in view_calls(views, app_envs, days, rng).items():
            timed(call)  # warm-up
            times = [timed(call) for _ in range(args.calls)]
            rows.append([name, percentile(times, 0.5), percentile(times, 0.95)])
        lake.close()
        print(f"\n## {args.requests:,} requests, {args.days} days, {args.app_envs} app-envs; {args.calls} calls per "
              f"view; load average {load_average()}")
        table(["view", "p50 ms", "p95 ms"], rows)
        slowest = max(rows, key=lambda r: r[2])
        over = [r[0] for r in rows if r[2] > BUDGET_MS]
        print(f"\nslowest: {slowest[0]} (p95 {slowest[2]:.0f} ms); "
              + (f"over {BUDGET_MS:.0f} ms: {', '.join(over)}" if over else f"every view's p95 under {BUDGET_MS:.0f} ms"))
        if args.compare_engines:
            compare_engines(root / "lake", app_envs, days, args.calls)
        return 0
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
