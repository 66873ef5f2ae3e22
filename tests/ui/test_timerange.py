"""Time ranges as URLs carry them."""

from __future__ import annotations

import datetime as dt

import pytest

from logport.ui.timerange import RangeError, TimeRange


@pytest.mark.parametrize(("date", "start", "end", "first", "last", "whole"), [
    ("2026-11-21", None, None, "2026-11-21 00:00", "2026-11-22 00:00", True),
    (None, None, None, "2026-11-30 00:00", "2026-12-01 00:00", True),  # the default day
    (None, "2026-11-20", "2026-11-21", "2026-11-20 00:00", "2026-11-22 00:00", True),
    (None, "2026-11-21T10:05", "2026-11-21T11:00", "2026-11-21 10:05", "2026-11-21 11:00", False),
    (None, "2026-11-21T10:05", None, "2026-11-21 10:05", "2026-11-22 00:00", False),
])
def test_parse(date: str | None, start: str | None, end: str | None, first: str, last: str, whole: bool) -> None:
    r = TimeRange.parse(date, start, end, "2026-11-30")
    assert (r.start, r.end) == (dt.datetime.fromisoformat(first), dt.datetime.fromisoformat(last))
    assert r.whole_days == whole
    assert TimeRange.parse(r.query().get("date"), r.query().get("from"), r.query().get("to"), None) == r


@pytest.mark.parametrize(("date", "start", "end", "message"), [
    ("2026-11-21", "2026-11-21", None, "either date= or from="),
    ("21.11.2026", None, None, "date='21.11.2026': expected YYYY-MM-DD"),
    (None, "2026-11-21T11:00", "2026-11-21T10:00", "is not after"),
    (None, "2020-01-01", "2026-01-01", "more than the limit"),
])
def test_bad_ranges(date: str | None, start: str | None, end: str | None, message: str) -> None:
    with pytest.raises(RangeError, match=message):
        TimeRange.parse(date, start, end, "2026-11-30")


def test_bounds_and_days_of_a_range_over_midnight() -> None:
    r = TimeRange.parse(None, "2026-11-20T23:30", "2026-11-21T00:15", None)
    assert r.days == ["2026-11-20", "2026-11-21"]
    assert r.bounds() == ("2026-11-20", 1410, "2026-11-21", 15)
