"""The logjam statistics (logport.spark.logjam) against logjam_reference.py's plain-Python computation of the same
generated traffic (logjam_traffic.py): every table, in one batch, in two batches with the state carried between
them (filed by UTC, without stream settings); the tables' schemas against the contract (lake/tables.py)."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from logport.lake import sketch
from logport.lake.tables import APDEX_BUCKETS
from logport.lake.tables import logjam_tables as contract
from logport.spark.context import STATE_PREFIX, BatchContext, LakeSettings
from logport.spark.logjam import logjam_tables
from logport.spark.source import LATEST
from tests.spark import logjam_reference as ref
from tests.spark.logjam_traffic import Traffic, generate, store

# Spark jobs over a few thousand messages; planning the builder's wide projections (every resource, three times)
# dominates, and on a loaded machine (load 13 on 2 cores) one run of it took 4 minutes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TABLES = ("minutes", "totals", "quants", "agents", "requests", "js_exceptions", "notifications")
MAX_COLUMNS = {f"{r}_max" for r in ref.DEFAULT_RESOURCES.names}


@dataclass
class Golden:
    traffic: Traffic
    dirs: list[str]


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    root = tmp_path_factory.mktemp("logjam-golden")
    dirs = [str(root / "hub-a"), str(root / "hub-b")]
    traffic = generate()
    store(dirs, traffic)
    return Golden(traffic, dirs)


class StateStore:
    """What the runner does with `_state/...` between batches: keeps the last batch's (collected here)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.tables: dict[str, Any] = {}

    def state_in(self, name: str) -> Any:
        return self.tables.get(name)

    def keep(self, out: dict[str, Any]) -> None:
        self.tables = {}
        for name, df in out.items():
            if name.startswith(STATE_PREFIX):
                rows = df.collect()
                self.tables[name.removeprefix(STATE_PREFIX)] = self.spark.createDataFrame(rows, df.schema)


def run_batch(spark: Any, events: Any, settings: LakeSettings, streams: dict[str, Any] | None,
              state: StateStore, batch: int = 0) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    ctx = BatchContext(spark, batch, settings, False, streams, state.state_in)
    out = logjam_tables(events, ctx)
    try:
        tables = {name: out[name] for name in TABLES}
        for name, df in tables.items():  # the contract's columns, in its order, with its types
            assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
                (c, t.replace(" ", "")) for c, t in contract(settings.resources)[name].columns], name
        rows = {name: [r.asDict(recursive=True) for r in df.collect()] for name, df in tables.items()}
        state.keep(out)
    finally:
        for release in ctx.after_commit:
            release()
    return rows, dict(ctx.counters)


def read_events(spark: Any, dirs: list[str], options: dict[str, str] | None = None) -> Any:
    return spark.read.format("logport").option("path", ",".join(dirs)).options(**(options or {})).load()


@pytest.fixture(scope="module")
def one_batch(spark: Any, golden: Golden) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    events = read_events(spark, golden.dirs)
    return run_batch(spark, events, LakeSettings(), golden.traffic.streams, StateStore(spark))


# --- comparing ----------------------------------------------------------------------------------------------------

def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def check_aggregates(rows: list[dict[str, Any]], expected: dict[tuple[Any, ...], ref.Aggregate],
                     keys: tuple[str, ...]) -> None:
    got = {tuple(r[k] for k in keys): r for r in rows}
    assert len(got) == len(rows), "one row per key in one batch"
    assert set(got) == set(expected), (sorted(set(got) - set(expected))[:5], sorted(set(expected) - set(got))[:5])
    for key, agg in expected.items():
        row = got[key]
        where = f"{key}"
        assert (row["count"], row["page_count"], row["ajax_count"], row["frontend_count"]) == (
            agg.count, agg.page_count, agg.ajax_count, agg.page_count + agg.ajax_count), where
        for r in ref.DEFAULT_RESOURCES.names:
            assert close(row[r], agg.sums.get(r)), (where, r, row[r], agg.sums.get(r))
            assert close(row[f"{r}_sq"], agg.squares.get(r)), (where, r)
            assert close(row[f"{r}_max"], agg.maxima.get(r)), (where, r)
        for family in ref.APDEX:
            for b in APDEX_BUCKETS:
                assert row[f"{family}_{b}"] == agg.apdex[f"{family}_{b}"], (where, family, b)
        for name in ("response", "severity", "exceptions", "soft_exceptions", "callers", "senders", "js_exceptions"):
            assert (row[name] or {}) == dict(agg.maps[name]), (where, name, row[name], agg.maps[name])
        for r in ("total_time", "page_time", "ajax_time"):
            assert (row[f"{r}_hist"] or {}) == dict(agg.maps[f"{r}_hist"]), (where, r)
            check_sketch(row[f"{r}_sketch"], agg.values[r], (where, r))


def check_sketch(counts: dict[int, int] | None, values: list[float], where: Any) -> None:
    counts = counts or {}
    assert sum(counts.values()) == len(values), where
    for q in (0.5, 0.9, 0.95, 0.99, 1.0):
        if values:
            exact = ref.exact_quantile(values, q)
            estimate = sketch.quantile(counts, q)
            assert estimate is not None
            if exact <= 0:
                assert estimate == 0, where
            else:
                assert abs(estimate - exact) <= sketch.RELATIVE_ERROR * exact * (1 + 1e-9), (where, q, estimate, exact)


def check_quants(rows: list[dict[str, Any]], expected: Counter[tuple[Any, ...]]) -> None:
    got = Counter()
    for r in rows:
        key = (r["app"], r["env"], r["date"], r["page"], r["kind"], r["resource"], r["quant"])
        assert key not in got
        got[key] = r["count"]
    assert got == expected


def check_agents(rows: list[dict[str, Any]], expected: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    got = {(r["app"], r["env"], r["date"], r["user_agent"]): r for r in rows}
    assert set(got) == set(expected)
    for key, want in expected.items():
        row = got[key]
        assert (row["backend"], row["frontend"], row["dropped"]) == (want["backend"], want["frontend"],
                                                                    want["dropped"]), key
        assert (row["drop_reasons"] or {}) == dict(want["drop_reasons"]), key


def check_details(rows: list[dict[str, Any]], expected: dict[tuple[Any, ...], dict[str, Any]], name: str) -> None:
    got = {(r["hub"], r["segment"], r["offset"], r["index"]): r for r in rows}
    assert len(got) == len(rows)
    assert set(got) == set(expected), (name, len(got), len(expected))
    for key, want in expected.items():
        row = dict(got[key])
        row["fields"] = json.loads(row["fields"])
        for column, value in want.items():
            have = row[column]
            if isinstance(value, float):
                assert close(have, value), (name, key, column, have, value)
            elif column == "metrics":
                assert set(have) == set(value) and all(close(have[k], v) for k, v in value.items()), (key, have, value)
            else:
                assert have == value, (name, key, column, have, value)


def check_all(tables: dict[str, list[dict[str, Any]]], expected: ref.Expected) -> None:
    check_aggregates(tables["minutes"], expected.minutes, ("app", "env", "date", "minute", "scope", "page"))
    check_aggregates(tables["totals"], expected.totals, ("app", "env", "date", "scope", "page"))
    check_quants(tables["quants"], expected.quants)
    check_agents(tables["agents"], expected.agents)
    check_details(tables["requests"], expected.requests, "requests")
    check_details(tables["js_exceptions"], expected.js_exceptions, "js_exceptions")
    check_details(tables["notifications"], expected.notifications, "notifications")


# --- the tests ----------------------------------------------------------------------------------------------------

def test_one_batch_equals_the_reference(golden: Golden, one_batch: Any) -> None:
    tables, counters = one_batch
    expected = ref.reference(golden.traffic.messages, ref.Settings(streams=golden.traffic.streams))
    check_all(tables, expected)
    assert {k.removeprefix("logjam_dropped_"): v for k, v in counters.items() if k.startswith("logjam_dropped_")} \
        == dict(expected.dropped)
    assert counters["logjam_counted"] == len(golden.traffic.messages) - sum(expected.dropped.values())
    # the traffic reaches what it is meant to: every drop reason, stored requests capped, frontend decided
    assert set(expected.dropped) == {"topic", "stream", "started_at", "clock", "ignored", "description"}
    reasons = Counter(reason for row in tables["agents"] for reason in (row["drop_reasons"] or {}))
    assert set(reasons) == {"corrupted", "illegal", "invalid", "nav_timing", "outlier"}
    assert expected.waiting > 0


def merged(batches: list[dict[str, list[dict[str, Any]]]], name: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of several batches summed by key, as a reader does (tables.py's merge rules)."""
    table = contract()[name]
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for tables in batches:
        for row in tables[name]:
            key = tuple(row[k] for k in keys)
            if key not in out:
                out[key] = dict(row)
                continue
            have = out[key]
            for column, kind in table.values:
                a, b = have[column], row[column]
                if a is None or b is None:
                    have[column] = a if b is None else b
                elif table.combine(column) == "max":
                    have[column] = max(a, b)
                elif kind.startswith("map"):
                    have[column] = dict(Counter(a) + Counter(b))
                else:
                    have[column] = a + b
    return list(out.values())


def test_two_batches_filed_by_utc_add_up_to_the_reference(spark: Any, golden: Golden) -> None:
    """The traffic split in two batches by arrival (the frontend matching, the insert cap and the clock carried in
    the state), filed by UTC, without stream settings: the two batches' rows, summed as a reader sums them, equal
    the reference of the whole."""
    messages = golden.traffic.messages
    split_at = messages[len(messages) // 2].created_ms
    # per hub and segment, the offset of its first message at or after the split; a segment with none is read
    # whole by the first batch and not at all by the second
    first_after: dict[str, int] = {}
    for m in messages:
        if m.created_ms >= split_at:
            first_after.setdefault(f"{m.hub_id}/{m.segment}", m.offset)
    for m in messages:
        first_after.setdefault(f"{m.hub_id}/{m.segment}", LATEST)
    ends = json.dumps(first_after)
    settings = LakeSettings(time_basis="utc")
    state = StateStore(spark)
    first, _ = run_batch(spark, read_events(spark, golden.dirs, {"endingOffsets": ends}), settings, None, state, 0)
    assert state.tables["frontend_waiting"].count() > 0  # the split leaves frontend messages for the next batch
    second, _ = run_batch(spark, read_events(spark, golden.dirs, {"startingOffsets": ends}), settings, None, state, 1)
    tables = {name: [*first[name], *second[name]] for name in TABLES}
    for name, keys in (("minutes", ("app", "env", "date", "minute", "scope", "page")),
                       ("totals", ("app", "env", "date", "scope", "page")),
                       ("quants", ("app", "env", "date", "page", "kind", "resource", "quant")),
                       ("agents", ("app", "env", "date", "user_agent"))):
        tables[name] = merged([first, second], name, keys)
    check_all(tables, ref.reference(messages, ref.Settings(time_basis="utc")))
