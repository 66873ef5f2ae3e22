"""lake/patterns.py over small lakes written with pyarrow: rows of several batches merged as tables.py says,
only committed files read, new patterns by their first appearance, growth against the window before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logport.lake.log import Entry, LakeLog
from logport.lake.patterns import growing_patterns, merged_patterns, new_patterns, window_counts

T0 = datetime(2026, 11, 18, 23, 50, tzinfo=UTC)  # ten minutes before midnight: windows cross a date
SAMPLE = pa.struct([("message", pa.string()), ("time", pa.timestamp("us", tz="UTC")), ("hub", pa.string()),
                    ("segment", pa.string()), ("offset", pa.int64()), ("index", pa.int32())])
PATTERNS = pa.schema([("pattern_id", pa.string()), ("template", pa.string()),
                      ("first_seen", pa.timestamp("us", tz="UTC")), ("last_seen", pa.timestamp("us", tz="UTC")),
                      ("count", pa.int64()), ("level", pa.string()), ("tag", pa.string()),
                      ("samples", pa.list_(SAMPLE))])
LOG_PATTERNS = pa.schema([("minute", pa.int16()), ("tag", pa.string()), ("level", pa.string()),
                          ("pattern_id", pa.string()), ("count", pa.int64())])


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def pattern(pattern_id: str, template: str, first: float, last: float, count: int, level: str = "info") -> dict[str, Any]:
    sample = {"message": template, "time": at(first), "hub": "h", "segment": "s", "offset": 1, "index": 0}
    return {"pattern_id": pattern_id, "template": template, "first_seen": at(first), "last_seen": at(last),
            "count": count, "level": level, "tag": "app", "samples": [sample]}


class Lake:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.batch = 0

    def write(self, patterns: list[dict[str, Any]], counts: list[tuple[float, str, int]], name: str = "",
              commit: bool = True) -> None:
        """One batch: its `patterns` rows and its (minute offset from T0, pattern_id, count) log_patterns rows."""
        self.batch += 1
        name = name or f"part-{self.batch:05d}.parquet"
        files = {"patterns": [f"patterns/{name}"], "log_patterns": []}
        (self.root / "patterns").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(patterns, PATTERNS), self.root / files["patterns"][0])
        by_date: dict[str, list[dict[str, Any]]] = {}
        for minutes, pattern_id, count in counts:
            t = at(minutes)
            by_date.setdefault(t.strftime("%Y-%m-%d"), []).append(
                {"minute": t.hour * 60 + t.minute, "tag": "app", "level": "info", "pattern_id": pattern_id,
                 "count": count})
        for date, rows in by_date.items():
            path = Path("log_patterns") / f"date={date}" / name
            (self.root / path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows, LOG_PATTERNS), self.root / path)
            files["log_patterns"].append(str(path))
        if commit:
            LakeLog(self.root).commit(Entry(self.batch, files))


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path / "lake")


def test_rows_merge_in_commit_order(lake: Lake) -> None:
    # the second batch's files sort first by name: commit order, not names, says which batch is the latest
    lake.write([pattern("1", "connect from <*>", 0, 2, 10, "info")], [(0, "1", 4), (2, "1", 6)], name="z.parquet")
    lake.write([pattern("1", "<*> from <*>", 5, 6, 3, "warn")], [(5, "1", 3)], name="a.parquet")
    lake.write([pattern("1", "never committed", 0, 9, 99)], [(9, "1", 99)], name="m.parquet", commit=False)
    merged = merged_patterns(lake.root)["1"]
    assert (merged["template"], merged["level"], merged["count"]) == ("<*> from <*>", "warn", 13)
    assert (merged["first_seen"], merged["last_seen"]) == (at(0), at(6))
    assert merged["samples"][0]["time"] == at(5)
    assert window_counts(lake.root, at(0), at(10)) == {"1": 13}


def test_without_a_commit_log_every_file_counts(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    lake.write([pattern("1", "a <*>", 0, 1, 2)], [(0, "1", 2)], name="a.parquet", commit=False)
    lake.write([pattern("1", "b <*>", 3, 4, 1)], [(3, "1", 1)], name="b.parquet", commit=False)
    assert merged_patterns(lake.root)["1"]["template"] == "b <*>"  # by name
    assert window_counts(lake.root, at(0), at(10)) == {"1": 3}


def test_new_patterns_by_first_appearance(lake: Lake) -> None:
    lake.write([pattern("1", "old <*>", 0, 4, 5), pattern("2", "also old", 1, 1, 1)], [(0, "1", 5), (1, "2", 1)])
    lake.write([pattern("1", "old <*>", 12, 14, 7), pattern("3", "new <*>", 11, 15, 2),
                pattern("4", "newer", 13, 13, 9)], [(12, "1", 7), (11, "3", 2), (13, "4", 9)])
    found = new_patterns(lake.root, at(10), at(20))
    assert [(p.pattern_id, p.window_count, p.count) for p in found] == [("4", 9, 9), ("3", 2, 2)]
    assert [p.pattern_id for p in new_patterns(lake.root, at(0), at(10))] == ["1", "2"]
    assert [p.pattern_id for p in new_patterns(lake.root, at(10), at(20), limit=1)] == ["4"]
    assert new_patterns(lake.root, at(20), at(30)) == []


def test_growing_patterns_against_the_window_before(lake: Lake) -> None:
    # window: minutes 10-19 (past midnight); baseline: minutes 0-9
    lake.write([pattern("1", "steady", 0, 19, 40), pattern("2", "grows", 0, 19, 33), pattern("3", "appears", 12, 12, 12),
                pattern("4", "rare", 15, 15, 2)],
               [(0, "1", 20), (10, "1", 20), (0, "2", 3), (11, "2", 30), (12, "3", 12), (15, "4", 2)])
    found = growing_patterns(lake.root, at(10), at(20))
    assert [(p.pattern_id, p.window_count, p.baseline_count) for p in found] == [("3", 12, 0), ("2", 30, 3),
                                                                                  ("1", 20, 20)]
    assert found[0].growth == pytest.approx(13.0) and found[1].growth == pytest.approx(31 / 4)
    assert found[2].growth == pytest.approx(1.0)
    assert [p.pattern_id for p in growing_patterns(lake.root, at(10), at(20), min_count=2)] == ["3", "2", "4", "1"]
    # a baseline of the 5 minutes before: minute 0's messages are not in it
    shorter = growing_patterns(lake.root, at(10), at(20), baseline=timedelta(minutes=5), min_count=25)
    assert [(p.pattern_id, p.baseline_count, p.growth) for p in shorter] == [("2", 0, pytest.approx(31 / 10 * 5))]


def test_an_empty_lake(tmp_path: Path) -> None:
    assert merged_patterns(tmp_path) == {}
    assert new_patterns(tmp_path, at(0), at(10)) == []
    assert growing_patterns(tmp_path, at(0), at(10)) == []
