"""Which message patterns are new in a window of time, and which grow fastest: the lake's `patterns` and
`log_patterns` tables read with pyarrow (no Spark), for `logport ui` and anyone with the lake's files.

Rows of a table are partial aggregates of the batches that wrote them (lake/tables.py): a pattern's rows are
merged here as `merge` says (first_seen min, last_seen max, count sum; template, level, tag and samples of the
latest batch, by the commit log's order).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from logport.lake.log import LOG_DIR, LakeLog


@dataclass(frozen=True)
class Pattern:
    pattern_id: str
    template: str
    level: str
    tag: str
    first_seen: datetime
    last_seen: datetime
    count: int  # every message of the pattern in the lake
    window_count: int  # its messages in the window asked about
    baseline_count: int = 0  # growing_patterns: its messages in the baseline window
    growth: float = 0.0  # growing_patterns: messages per minute in the window / in the baseline (+1 smoothed)
    samples: tuple[dict[str, Any], ...] = ()  # message, time, hub, segment, offset, index (the latest batch's)


def table_files(lake: str | Path, table: str) -> list[Path]:
    """The table's files in commit order: the commit log's (committed files only), or every Parquet file under
    the table's directory by name when the lake has no log (written by something else than `logport pipeline`)."""
    root = Path(lake)
    if (root / LOG_DIR).is_dir():
        return LakeLog(root).files(table)
    return sorted((root / table).rglob("*.parquet"))


def _read(lake: str | Path, table: str, columns: list[str] | None = None,
          where: pc.Expression | None = None) -> pa.Table | None:
    """The table's rows (partition columns too), each with `_file`: its file's position in commit order."""
    files = [str(f) for f in table_files(lake, table)]
    if not files:
        return None
    dataset = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=str(Path(lake) / table))
    read = dataset.to_table(columns=[*(columns or dataset.schema.names), "__filename"], filter=where)
    position = {name: i for i, name in enumerate(files)}
    order = pa.array([position[name] for name in read["__filename"].to_pylist()], pa.int64())
    return read.drop_columns(["__filename"]).append_column("_file", order)


def merged_patterns(lake: str | Path) -> dict[str, dict[str, Any]]:
    """Every pattern of the lake, its rows merged: pattern_id -> the `patterns` columns."""
    table = _read(lake, "patterns")
    if table is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    # rows in commit order (then as written): the latest batch's template, level, tag and samples win
    for row in table.sort_by("_file").to_pylist():
        seen = out.get(row["pattern_id"])
        if seen is None:
            out[row["pattern_id"]] = row
            continue
        seen["first_seen"] = min(seen["first_seen"], row["first_seen"])
        seen["last_seen"] = max(seen["last_seen"], row["last_seen"])
        seen["count"] += row["count"]
        for column in ("template", "level", "tag", "samples"):
            seen[column] = row[column]
    return out


def window_counts(lake: str | Path, start: datetime, end: datetime) -> dict[str, int]:
    """pattern_id -> its messages in the minutes that start in [start, end) (log_patterns' rows are minutes:
    give whole minutes)."""
    start, end = _utc(start), _utc(end)
    dates = [(start + timedelta(days=d)).strftime("%Y-%m-%d") for d in range((end - start).days + 2)]
    table = _read(lake, "log_patterns", ["date", "minute", "pattern_id", "count"],
                  ds.field("date").isin(dates))
    if table is None or not len(table):
        return {}
    day = pc.strptime(table["date"], format="%Y-%m-%d", unit="s").cast(pa.int64())
    minute_start = pc.add(day, pc.multiply(table["minute"].cast(pa.int64()), 60))
    first, last = int(start.timestamp()), int(end.timestamp())
    inside = pc.and_(pc.greater_equal(minute_start, first), pc.less(minute_start, last))
    counts = table.filter(inside).group_by("pattern_id").aggregate([("count", "sum")])
    return dict(zip(counts["pattern_id"].to_pylist(), counts["count_sum"].to_pylist(), strict=True))


def new_patterns(lake: str | Path, start: datetime, end: datetime, limit: int = 50) -> list[Pattern]:
    """Patterns first seen in [start, end), most messages in the window first."""
    start, end = _utc(start), _utc(end)
    counts = window_counts(lake, start, end)
    found = [_pattern(p, counts.get(p["pattern_id"], 0)) for p in merged_patterns(lake).values()
             if start <= _utc(p["first_seen"]) < end]
    found.sort(key=lambda p: (-p.window_count, p.first_seen, p.pattern_id))
    return found[:limit]


def growing_patterns(lake: str | Path, start: datetime, end: datetime, baseline: timedelta | None = None,
                     min_count: int = 10, limit: int = 20) -> list[Pattern]:
    """Patterns whose messages per minute grew most from the baseline window (the `baseline` before start,
    by default as long as the window) to [start, end): growth = ((window + 1) / window minutes) /
    ((baseline + 1) / baseline minutes); only patterns with at least min_count messages in the window."""
    start, end = _utc(start), _utc(end)
    length = end - start
    before = baseline or length
    counts = window_counts(lake, start, end)
    earlier = window_counts(lake, start - before, start)
    patterns = merged_patterns(lake)
    rate = length.total_seconds() / 60, before.total_seconds() / 60
    found = []
    for pattern_id, count in counts.items():
        if count < min_count or pattern_id not in patterns:
            continue
        base = earlier.get(pattern_id, 0)
        growth = ((count + 1) / rate[0]) / ((base + 1) / rate[1])
        found.append(_pattern(patterns[pattern_id], count, base, growth))
    found.sort(key=lambda p: (-p.growth, -p.window_count, p.pattern_id))
    return found[:limit]


def _pattern(row: dict[str, Any], window_count: int, baseline_count: int = 0, growth: float = 0.0) -> Pattern:
    return Pattern(row["pattern_id"], row["template"], row["level"], row["tag"], _utc(row["first_seen"]),
                   _utc(row["last_seen"]), row["count"], window_count, baseline_count, growth,
                   tuple(row["samples"] or ()))


def _utc(t: datetime) -> datetime:
    """A naive datetime is UTC (the lake's timestamps are UTC instants)."""
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
