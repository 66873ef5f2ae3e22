"""The views' figures against plain Python over the generated requests: rows of two batches summed by key, the
ranking by time spent, logjam's avg/stddev/apdex, percentiles from merged sketches within their 1% bound, the
stored requests behind a count, minute ranges."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logport.lake.sketch import RELATIVE_ERROR
from logport.ui.lake import LakeReader
from logport.ui.timerange import TimeRange
from logport.ui.views import Stream, ViewError, Views

SHOP = Stream("shop", "production")


@pytest.fixture(scope="module")
def views(fixture_lake: Path) -> Iterator[Views]:
    lake = LakeReader(fixture_lake)
    yield Views(lake)
    lake.close()


def requests_in(generated: Any, stream: Stream, r: TimeRange) -> list[dict[str, Any]]:
    d0, m0, d1, m1 = r.bounds()
    return [row for row in generated.to_pylist()
            if row["app"] == stream.app and row["env"] == stream.env
            and (row["date"], row["minute"]) >= (d0, m0) and (row["date"], row["minute"]) < (d1, m1)]


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


RANGES = [
    ("2026-11-21", None, None),
    (None, "2026-11-20", "2026-11-21"),
    (None, "2026-11-21T10:00", "2026-11-21T11:30"),
    (None, "2026-11-20T23:00", "2026-11-21T01:00"),
]


@pytest.mark.parametrize(("date", "start", "end"), RANGES)
def test_ranking_is_time_spent_summed_over_batches(views: Views, generated: Any, date: str | None,
                                                   start: str | None, end: str | None) -> None:
    r = TimeRange.parse(date, start, end, None)
    expected: dict[str, list[float]] = defaultdict(list)
    for row in requests_in(generated, SHOP, r):
        expected[row["page"]].append(row["total_time"])
    got = views.actions(SHOP, r, limit=1000)
    assert got["total"] == len(expected)
    assert [x["page"] for x in got["rows"]] == sorted(expected, key=lambda p: (-sum(expected[p]), p))
    for x in got["rows"]:
        values = expected[x["page"]]
        n = len(values)
        avg = sum(values) / n
        assert x["count"] == n
        assert x["sum"] == pytest.approx(sum(values))
        assert x["avg"] == pytest.approx(avg)
        assert x["max"] == pytest.approx(max(values))
        stddev = math.sqrt(abs(sum(v * v for v in values) - n * avg * avg) / (n - 1)) if n > 1 else 0.0
        assert x["stddev"] == pytest.approx(stddev, rel=1e-6, abs=1e-6)
        satisfied = sum(v < 500 for v in values)
        tolerating = sum(500 <= v < 2000 for v in values)
        assert x["apdex"] == pytest.approx((satisfied + tolerating / 2) / n)


@pytest.mark.parametrize("sort", ["sum", "avg", "stddev", "max", "count", "apdex"])
def test_ranking_sorts_by_every_column(views: Views, sort: str) -> None:
    r = TimeRange.parse("2026-11-21", None, None, None)
    rows = views.actions(SHOP, r, sort=sort, limit=1000)["rows"]
    keys = [x[sort] for x in rows if x[sort] is not None]
    assert keys == sorted(keys, reverse=True)
    ascending = [x[sort] for x in views.actions(SHOP, r, sort=sort, limit=1000, descending=False)["rows"]
                 if x[sort] is not None]
    assert ascending == sorted(ascending)


def test_modules_add_up_to_their_actions(views: Views, uilake: Any) -> None:
    r = TimeRange.parse("2026-11-21", None, None, None)
    actions = views.actions(SHOP, r, limit=1000)["rows"]
    for module in views.actions(SHOP, r, group="module", limit=1000)["rows"]:
        members = [a for a in actions if uilake.module_of(a["page"]) == module["page"]]
        assert module["count"] == sum(a["count"] for a in members)
        assert views.actions(SHOP, r, module=module["page"], limit=1000)["total"] == len(members)


def test_ranking_says_when_it_is_cut(views: Views) -> None:
    got = views.actions(SHOP, TimeRange.parse("2026-11-21", None, None, None), limit=5)
    assert len(got["rows"]) == 5 and got["cut"] and got["total"] > 5


@pytest.mark.parametrize(("date", "start", "end"), RANGES)
def test_percentiles_from_merged_sketches(views: Views, generated: Any, date: str | None, start: str | None,
                                          end: str | None) -> None:
    r = TimeRange.parse(date, start, end, None)
    values = [row["total_time"] for row in requests_in(generated, SHOP, r)]
    got = views.summary(SHOP, r)["percentiles"]
    for q in (0.5, 0.9, 0.95, 0.99):
        exact = nearest_rank(values, q)
        assert abs(got[f"p{round(q * 100)}"] - exact) <= RELATIVE_ERROR * exact * 1.0001


def test_overview_every_stream(views: Views, generated: Any) -> None:
    r = TimeRange.parse(None, "2026-11-20", "2026-11-21", None)
    got = {f"{s['app']}-{s['env']}": s for s in views.overview(r)["streams"]}
    assert set(got) == {"shop-production", "search-production", "shop-staging"}
    for name, s in got.items():
        rows = requests_in(generated, Stream(*name.rsplit("-", 1)), r)
        assert s["count"] == len(rows)
        assert s["5xx"] == sum(row["response_code"] >= 500 for row in rows)
        assert s["errors"] == sum(row["severity"] >= 3 for row in rows)


def test_series_has_gaps_where_no_minute_has_rows(views: Views, generated: Any) -> None:
    # the generator leaves minutes 300..329 empty on the second day
    r = TimeRange.parse(None, "2026-11-21T04:50", "2026-11-21T05:40", None)
    series = views.series(SHOP, r, 1)
    minutes = {row["minute"] for row in requests_in(generated, SHOP, r)}
    for t, n in zip(series["times"], series["requests"], strict=True):
        minute = (t // 60_000) % 1440
        assert (n is None) == (minute not in minutes)
        if n is not None:
            assert n == sum(1 for row in requests_in(generated, SHOP, r) if row["minute"] == minute)
    assert series["requests"][20:40].count(None) == 20


@pytest.mark.parametrize(("filters", "keep"), [
    ({"reason": "slow"}, lambda row: row["total_time"] > 500),
    ({"code": "5xx"}, lambda row: row["response_code"] >= 500),
    ({"code": "500"}, lambda row: row["response_code"] == 500),
    ({"exception": "Timeout::Error"}, lambda row: row["exception"] == "Timeout::Error"),
    ({"reason": "slow", "page": "::Api"}, lambda row: row["total_time"] > 500 and row["module"] == "::Api"),
])
def test_requests_behind_a_count(views: Views, generated: Any, filters: dict[str, str], keep: Any) -> None:
    r = TimeRange.parse(None, "2026-11-21T08:00", "2026-11-21T20:00", None)
    expected = [row for row in requests_in(generated, SHOP, r) if keep(row)]
    got = views.requests(SHOP, r, limit=1000, **filters)
    assert got["total"] == len(expected)
    assert sorted(x["request_id"] for x in got["rows"]) == sorted(row["request_id"] for row in expected)
    times = [x["total_time"] for x in got["rows"]]
    assert times == sorted(times, reverse=True)


def test_one_request_with_its_lines(views: Views) -> None:
    r = TimeRange.parse("2026-11-21", None, None, None)
    first = views.requests(SHOP, r, reason="slow", limit=1)["rows"][0]
    got = views.request(SHOP, first["date"], first["id"])
    assert got["request"]["request_id"] == first["request_id"]
    assert [line["text"] for line in got["request"]["lines"]][-1].startswith("Completed")
    assert {m["resource"] for m in got["metrics"]["time"]} >= {"total_time", "db_time"}
    assert got["raw"]["segment"] == "logjam" and got["raw"]["offset"] == first["offset"]
    with pytest.raises(ViewError, match="not in the lake"):
        views.request(SHOP, first["date"], "no-such-request")


def test_bad_parameters_say_what_is_expected(views: Views) -> None:
    r = TimeRange.parse("2026-11-21", None, None, None)
    with pytest.raises(ViewError, match="sort='median'"):
        views.actions(SHOP, r, sort="median")
    with pytest.raises(ViewError, match="resource='nope'"):
        views.actions(SHOP, r, resource="nope")
    with pytest.raises(ViewError, match="reason='odd'"):
        views.requests(SHOP, r, reason="odd")


def test_logs_new_and_growing_patterns_first(views: Views) -> None:
    got = views.logs(TimeRange.parse("2026-11-21", None, None, None))
    rows = got["patterns"]["rows"]
    assert rows[0]["pattern_id"] == "p000" and rows[0]["new"]  # only on the last day
    assert rows[1]["pattern_id"] == "p001" and rows[1]["growth"] > 2  # grows day by day
    assert {x["name"] for x in got["by"]["tag"]} == {"nginx.access", "app.worker", "kernel"}


def test_history_one_row_per_day(views: Views, generated: Any) -> None:
    got = views.history(SHOP, TimeRange.parse(None, "2026-11-01", "2026-11-21", None))
    assert [x["date"] for x in got["rows"]] == ["2026-11-20", "2026-11-21"]
    assert [x["count"] for x in got["rows"]] == [1500, 1500]
