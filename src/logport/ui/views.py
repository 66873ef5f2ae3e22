"""What each view of `logport ui` shows, computed from the lake: the JSON API's answers (app.py serves them, the
pages and the static report draw them).

Rows of the aggregate tables are partial (one per batch and key), so every query sums them by key (`max` for
`*_max`), as docs/pipeline.md says; percentiles come from sketches summed key by key (lake/sketch.py), never from
per-minute figures. The derived statistics are logjam's (specs/logjam-analytics.md 3.3): avg = sum / N(r),
stddev = sqrt(|sum_sq - N avg^2| / (N - 1)), apdex score = (satisfied + tolerating / 2) / N.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from logport.errors import LogportError
from logport.lake import sketch
from logport.ui.lake import LakeReader
from logport.ui.timerange import TimeRange

PERCENTILES = (0.5, 0.9, 0.95, 0.99)
SORTS = ("sum", "avg", "stddev", "max", "count", "apdex", "errors")
RANKED = 12  # actions on the dashboard; the rest in the actions view
LIMIT = 100  # rows of a table unless asked for more (each table says when it is cut)
MAX_LIMIT = 1000
APDEX_FAMILY_COUNT = {"apdex": "count", "papdex": "page_count", "xapdex": "ajax_count", "fapdex": "frontend_count"}
REASONS = ("slow", "fatal", "error", "warning", "5xx", "4xx", "code0", "exceptions", "heap_growth")
EVENT_MERGE_MINUTES = 5  # agent events this close are one chart marker (logjam's events.rb)


class ViewError(LogportError):
    """A view's parameters that cannot be answered (an unknown sort, a request not in the lake...)."""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Stream:
    """One app-env (logjam's stream)."""

    app: str
    env: str


def scope_of(page: str) -> str:
    if page == "all_pages":
        return "all"
    return "module" if page.startswith("::") else "action"


def ms(day: str, minute: int) -> int:
    """Wall-clock minute as epoch milliseconds read as UTC (the charts draw them with useUTC)."""
    return int(dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.UTC).timestamp() * 1000) + minute * 60_000


def stats(total: float | None, squares: float | None, maximum: float | None, n: int) -> dict[str, float | None]:
    """sum, avg, stddev, max of a resource over n requests (spec 3.3: requests without it count as 0)."""
    if total is None or not n:
        return {"sum": total, "avg": None, "stddev": None, "max": maximum}
    avg = total / n
    stddev = math.sqrt(abs((squares or 0.0) - n * avg * avg) / (n - 1)) if n > 1 and total else 0.0
    return {"sum": total, "avg": avg, "stddev": stddev, "max": maximum}


def apdex_score(satisfied: int | None, tolerating: int | None, n: int | None) -> float | None:
    if not n:
        return None
    return ((satisfied or 0) + (tolerating or 0) / 2) / n


def percentiles(counts: Mapping[int, int]) -> dict[str, float | None]:
    return {f"p{round(q * 100)}": sketch.quantile(counts, q) for q in PERCENTILES}


class Views:
    def __init__(self, lake: LakeReader) -> None:
        self.lake = lake
        self.resources = lake.resources

    # --- shared SQL ---

    def divisor(self, resource: str) -> str:
        """N(r): the count a resource's sum is divided by (spec 3.3)."""
        if resource == "ajax_time":
            return "ajax_count"
        if resource == "frontend_time":
            return "frontend_count"
        return "page_count" if resource in self.resources.frontend else "count"

    def _where(self, stream: Stream | None, r: TimeRange, per_minute: bool, scope: str | None = None,
               page: str | None = None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if stream is not None:
            clauses.append("app = ? AND env = ?")
            params += [stream.app, stream.env]
        if scope is not None:
            clauses.append("scope = ?")
            params.append(scope)
        if page is not None:
            clauses.append("page = ?")
            params.append(page)
        d0, m0, d1, m1 = r.bounds()
        if per_minute and not r.whole_days:
            clauses.append("(date > ? OR (date = ? AND minute >= ?)) AND (date < ? OR (date = ? AND minute < ?))")
            params += [d0, d0, m0, d1, d1, m1]
        else:  # the files are of these days already, but a query over two ranges (patterns) needs it
            clauses.append("date BETWEEN ? AND ?")
            params += [d0, d1]
        return " AND ".join(clauses) or "true", params

    def _aggregate(self, r: TimeRange, minutes: bool) -> tuple[str, str, bool]:
        """(table, its FROM, whether per minute): the per-day table for whole days unless minutes are asked."""
        table = "minutes" if minutes or not r.whole_days else "totals"
        source = self.lake.source(table, r.days)
        return table, source[0] if source else "", table == "minutes"

    def _rows(self, table: str, r: TimeRange, select: str, where: str, params: list[Any], tail: str = "",
              force_minutes: bool = False) -> list[dict[str, Any]]:
        name = "minutes" if force_minutes or not r.whole_days else table
        source = self.lake.source(name, r.days)
        if source is None:
            return []
        sql = source
        return self.lake.query_dicts(f"SELECT {select} FROM {sql} WHERE {where} {tail}", params)

    def slot_sql(self, interval: int) -> str:
        return f"((epoch(CAST(date AS DATE))::BIGINT // 60 + minute) // {interval} * {interval})"

    def _map_sums(self, table: str, r: TimeRange, column: str, where: str, params: list[Any],
                  group: str | None = None, force_minutes: bool = False) -> dict[Any, dict[Any, int]]:
        """Sum of a map column key by key (per group, when given)."""
        return self._maps(table, r, (column,), where, params, group, force_minutes)[column]

    def _maps(self, table: str, r: TimeRange, columns: Sequence[str], where: str, params: list[Any],
              group: str | None = None, force_minutes: bool = False) -> dict[str, dict[Any, dict[Any, int]]]:
        """Sums of several map columns key by key (per group, when given), in one scan of the files: each row's
        entries of every column as (column, key, value), unnested and grouped."""
        found: dict[str, dict[Any, dict[Any, int]]] = {c: {} for c in columns}
        name = "minutes" if force_minutes or not r.whole_days else table
        source = self.lake.source(name, r.days)
        if source is None:
            return found
        if len(columns) == 1:  # one map: its keys and values unnested side by side (half the time of entries)
            c = _q(columns[0])
            for gv, key, n in self.lake.query(
                    f"SELECT g, k, sum(v) FROM (SELECT {group or 'NULL'} AS g, unnest(map_keys({c})) AS k, "
                    f"unnest(map_values({c})) AS v FROM {source} WHERE {where}) GROUP BY ALL", params):
                found[columns[0]].setdefault(gv, {})[key] = int(n)
            return found
        entries = " || ".join(
            f"coalesce(list_transform(map_entries({_q(c)}), lambda e: {{'m': {i}, 'k': CAST(e.key AS VARCHAR), "
            f"'v': e.value}}), [])" for i, c in enumerate(columns))
        numeric = [c.endswith(("_hist", "_sketch")) for c in columns]
        for gv, m, key, n in self.lake.query(
                f"SELECT g, e.m, e.k, sum(e.v) FROM (SELECT {group or 'NULL'} AS g, unnest({entries}) AS e "
                f"FROM {source} WHERE {where}) GROUP BY ALL", params):
            found[columns[m]].setdefault(gv, {})[int(key) if numeric[m] else key] = int(n)
        return found

    def _series_slots(self, r: TimeRange, interval: int) -> list[int]:
        start = int(r.start.replace(tzinfo=dt.UTC).timestamp() // 60)
        end = int(r.end.replace(tzinfo=dt.UTC).timestamp() // 60)
        first = start // interval * interval
        return list(range(first, end, interval))

    @staticmethod
    def _fill(slots: Sequence[int], values: Mapping[int, Any]) -> list[Any]:
        """A value per slot, None where the lake has no row: the charts draw those as gaps."""
        return [values.get(s) for s in slots]

    # --- the lake ---

    def meta(self) -> dict[str, Any]:
        """App-envs and dates the lake holds, for the pickers."""
        source = self.lake.source("totals")
        streams = []
        if source is not None:
            sql = source
            for app, env, dates in self.lake.query(
                    f"SELECT app, env, list(DISTINCT date ORDER BY date) FROM {sql} WHERE scope = 'all' "
                    f"GROUP BY app, env ORDER BY app, env"):
                streams.append({"app": app, "env": env, "dates": dates})
        return {"streams": streams, "dates": self.lake.dates("totals") or self.lake.dates("log_minutes"),
                "log_dates": self.lake.dates("log_minutes"), "resources": self.resources.as_json(),
                "time": self.lake.info.get("time", "local")}

    def default_day(self) -> str | None:
        dates = self.lake.dates("totals") or self.lake.dates("log_minutes")
        return dates[-1] if dates else None

    # --- overview (logjam's leaders) ---

    def overview(self, r: TimeRange) -> dict[str, Any]:
        table, _, per_minute = self._aggregate(r, False)
        where, params = self._where(None, r, per_minute, "all")
        rows = self._rows(table, r, "app, env, sum(count) AS count, sum(apdex_satisfied) AS sat, "
                          "sum(apdex_tolerating) AS tol, sum(page_count) AS page_count, "
                          "sum(papdex_satisfied) AS psat, sum(papdex_tolerating) AS ptol, sum(ajax_count) AS "
                          "ajax_count, sum(xapdex_satisfied) AS xsat, sum(xapdex_tolerating) AS xtol, "
                          f"{self._severity_sum((3, 4))} AS errors, {self._severity_sum((2,))} AS warnings, "
                          f"{self._code_sum('5')} AS c5xx, {self._code_sum('4')} AS c4xx, "
                          "sum(coalesce(list_sum(map_values(exceptions)), 0)) AS exceptions, "
                          "sum(total_time) AS total_time", where, params, "GROUP BY app, env")
        sketches = self._map_sums(table, r, "total_time_sketch", where, params, "app || '-' || env")
        out = []
        for row in rows:
            n = int(row["count"] or 0)
            merged = sketches.get(f"{row['app']}-{row['env']}", {})
            out.append({
                "app": row["app"], "env": row["env"], "count": n,
                "apdex": apdex_score(row["sat"], row["tol"], n),
                "papdex": apdex_score(row["psat"], row["ptol"], row["page_count"]),
                "xapdex": apdex_score(row["xsat"], row["xtol"], row["ajax_count"]),
                "errors": int(row["errors"] or 0), "warnings": int(row["warnings"] or 0),
                "exceptions": int(row["exceptions"] or 0), "5xx": int(row["c5xx"] or 0),
                "4xx": int(row["c4xx"] or 0), "error_rate": 100 * (row["c5xx"] or 0) / n if n else None,
                "p95": sketch.quantile(merged, 0.95), "p50": sketch.quantile(merged, 0.5),
                "avg": (row["total_time"] or 0) / n if n else None,
            })
        out.sort(key=lambda x: (x["apdex"] is None, x["apdex"] or 0))  # worst apdex first, as logjam's leaders
        return {"range": r.query(), "streams": out, "logs": self.lake.has("log_minutes")}

    @staticmethod
    def _severity_sum(levels: Iterable[int]) -> str:
        return "sum(" + " + ".join(f"coalesce(severity['{lv}'], 0)" for lv in levels) + ")"

    @staticmethod
    def _code_sum(first: str) -> str:
        return (f"sum(coalesce(list_sum(list_transform(map_entries(response), lambda e: CASE WHEN "
                f"starts_with(e.key, '{first}') THEN e.value ELSE 0 END)), 0))")

    # --- dashboard ---

    def series(self, stream: Stream, r: TimeRange, interval: int, page: str = "all_pages") -> dict[str, Any]:
        """Per slot of `interval` minutes: requests per minute, apdex, p50/p95/p99 of total_time, 4xx/5xx and
        exceptions per minute, avg total_time; slots without rows are gaps (null)."""
        where, params = self._where(stream, r, True, scope_of(page), page)
        slot = self.slot_sql(interval)
        rows = self._rows("minutes", r, f"{slot} AS slot, sum(count) AS count, sum(apdex_satisfied) AS sat, "
                          f"sum(apdex_tolerating) AS tol, {self._code_sum('4')} AS c4xx, "
                          f"{self._code_sum('5')} AS c5xx, "
                          "sum(coalesce(list_sum(map_values(exceptions)), 0)) AS exceptions, "
                          "sum(total_time) AS total_time", where, params, "GROUP BY slot", force_minutes=True)
        sketches = self._map_sums("minutes", r, "total_time_sketch", where, params, slot, force_minutes=True)
        slots = self._series_slots(r, interval)
        by_slot = {int(row["slot"]): row for row in rows if row["count"]}

        def column(f: Any) -> list[Any]:
            return self._fill(slots, {s: f(row, s) for s, row in by_slot.items()})

        return {
            "interval": interval, "times": [s * 60_000 for s in slots],
            "requests": column(lambda row, s: row["count"] / interval),
            "apdex": column(lambda row, s: apdex_score(row["sat"], row["tol"], row["count"])),
            "avg": column(lambda row, s: (row["total_time"] or 0) / row["count"]),
            **{f"p{q}": column(lambda row, s, q=q: sketch.quantile(sketches.get(s, {}), q / 100))
               for q in (50, 95, 99)},
            "4xx": column(lambda row, s: row["c4xx"] / interval),
            "5xx": column(lambda row, s: row["c5xx"] / interval),
            "exceptions": column(lambda row, s: row["exceptions"] / interval),
        }

    def summary(self, stream: Stream, r: TimeRange, page: str = "all_pages") -> dict[str, Any]:
        """The range's counters for one page (all_pages: the app-env): apdex buckets, response classes,
        problems, percentiles, every resource's sum/avg/stddev/max by group."""
        table, _, per_minute = self._aggregate(r, False)
        where, params = self._where(stream, r, per_minute, scope_of(page), page)
        names = self.resources.names
        select = ["sum(count) AS count", "sum(page_count) AS page_count", "sum(ajax_count) AS ajax_count",
                  "sum(frontend_count) AS frontend_count"]
        select += [f"sum({f}_{b}) AS {f}_{b}" for f in APDEX_FAMILY_COUNT
                   for b in ("happy", "satisfied", "tolerating", "frustrated")]
        select += [f"sum({_q(n)}) AS {_q(n)}, sum({_q(n + '_sq')}) AS {_q(n + '_sq')}, "
                   f"max({_q(n + '_max')}) AS {_q(n + '_max')}" for n in names]
        rows = self._rows(table, r, ", ".join(select), where, params)
        row = rows[0] if rows else {}
        n = int(row.get("count") or 0)
        maps = {m: found.get(None, {}) for m, found in self._maps(
            table, r, ("response", "severity", "exceptions", "soft_exceptions", "callers", "senders",
                       "total_time_sketch"), where, params).items()}
        total_sketch = maps["total_time_sketch"]
        severity = maps["severity"]
        classes: dict[str, int] = {}
        for code, count in maps["response"].items():
            key = f"{code[0]}xx" if len(code) == 3 else "?xx"
            classes[key] = classes.get(key, 0) + count
        apdex = {}
        for family, counter in APDEX_FAMILY_COUNT.items():
            total = int(row.get(counter) or 0)
            apdex[family] = {"score": apdex_score(row.get(f"{family}_satisfied"), row.get(f"{family}_tolerating"),
                                                  total), "count": total,
                             **{b: int(row.get(f"{family}_{b}") or 0)
                                for b in ("happy", "satisfied", "tolerating", "frustrated")}}
        resources: dict[str, list[dict[str, Any]]] = {}
        for name in names:
            if row.get(name) is None:
                continue
            group = self.resources.group_of(name) or "time"
            divisor = int(row.get(self.divisor(name)) or 0)
            resources.setdefault(group, []).append(
                {"resource": name, **stats(row[name], row.get(name + "_sq"), row.get(name + "_max"), divisor)})
        return {
            "count": n, "page_count": int(row.get("page_count") or 0), "ajax_count": int(row.get("ajax_count") or 0),
            "apdex": apdex, "response": dict(sorted(maps["response"].items())), "classes": dict(sorted(classes.items())),
            "problems": {"fatals": severity.get("4", 0), "errors": severity.get("3", 0) + severity.get("4", 0),
                         "warnings": severity.get("2", 0), "exceptions": sum(maps["exceptions"].values()),
                         "soft_exceptions": sum(maps["soft_exceptions"].values())},
            "severity": severity, "exceptions": _top(maps["exceptions"]), "soft_exceptions": _top(maps["soft_exceptions"]),
            "callers": _top(maps["callers"]), "senders": _top(maps["senders"]),
            "percentiles": percentiles(total_sketch), "resources": resources,
        }

    def dashboard(self, stream: Stream, r: TimeRange, interval: int | None = None) -> dict[str, Any]:
        interval = interval or r.auto_interval()
        ranking = self.actions(stream, r, limit=RANKED)
        return {"stream": {"app": stream.app, "env": stream.env}, "range": r.query(), **ranking["range_info"],
                "series": self.series(stream, r, interval), "summary": self.summary(stream, r),
                "actions": ranking, "notifications": self.markers(stream, r)}

    # --- actions ---

    def actions(self, stream: Stream, r: TimeRange, resource: str = "total_time", sort: str = "sum",
                group: str = "action", module: str | None = None, limit: int = LIMIT,
                descending: bool = True) -> dict[str, Any]:
        """Pages ranked by a function of a resource (logjam's default: time spent, the sum)."""
        if sort not in SORTS:
            raise ViewError(f"sort={sort!r}: one of {', '.join(SORTS)}")
        if resource not in self.resources.names:
            raise ViewError(f"resource={resource!r} is not one of the lake's resources")
        if group not in ("action", "module"):
            raise ViewError(f"group={group!r}: action or module")
        limit = max(1, min(limit, MAX_LIMIT))
        table, _, per_minute = self._aggregate(r, False)
        where, params = self._where(stream, r, per_minute, group)
        if module and group == "action":
            where += " AND ('::' || split_part(split_part(page, '#', 1), '::', 1)) = ?"
            params.append(module)
        n = self.divisor(resource)
        rows = self._rows(table, r, f"page, sum(count) AS count, sum({n}) AS n, sum({_q(resource)}) AS s, "
                          f"sum({_q(resource + '_sq')}) AS sq, max({_q(resource + '_max')}) AS mx, "
                          "sum(apdex_satisfied) AS sat, sum(apdex_tolerating) AS tol, "
                          f"{self._severity_sum((3, 4))} AS errors, {self._code_sum('5')} AS c5xx",
                          where, params, "GROUP BY page")
        out = []
        for row in rows:
            count = int(row["n"] or 0)
            if not count and not row["count"]:
                continue
            out.append({"page": row["page"], "count": int(row["count"] or 0), "n": count,
                        **stats(row["s"], row["sq"], row["mx"], count),
                        "apdex": apdex_score(row["sat"], row["tol"], row["count"]),
                        "errors": int(row["errors"] or 0), "5xx": int(row["c5xx"] or 0)})
        time_spent = sum(x["sum"] or 0 for x in out)
        for x in out:
            x["share"] = (x["sum"] or 0) / time_spent if time_spent else None
        out.sort(key=lambda x: (x[sort] is None, -(x[sort] or 0) if descending else (x[sort] or 0), x["page"]))
        return {"rows": out[:limit], "total": len(out), "cut": len(out) > limit, "sort": sort, "resource": resource,
                "group": group, "module": module, "descending": descending, "range": r.query(),
                "range_info": {"per_minute": per_minute}}

    # --- one action (or module, or all_pages) ---

    def action(self, stream: Stream, page: str, r: TimeRange, interval: int | None = None) -> dict[str, Any]:
        interval = interval or r.auto_interval()
        where, params = self._where(stream, r, True, scope_of(page), page)
        slot = self.slot_sql(interval)
        hist = self._map_sums("minutes", r, "total_time_hist", where, params, slot, force_minutes=True)
        cells = [[s * 60_000, int(k), n] for s, counts in sorted(hist.items()) for k, n in sorted(counts.items())]
        top = max((c[1] for c in cells), default=0)
        return {
            "stream": {"app": stream.app, "env": stream.env}, "page": page, "range": r.query(),
            "summary": self.summary(stream, r, page), "series": self.series(stream, r, interval, page),
            "heatmap": {"cells": cells, "buckets": [_bound(b) for b in sketch.HIST_BOUNDS[: top + 1]],
                        "interval": interval},
            "distribution": self.distribution(stream, page, r),
            "stored": self.request_counts(stream, r, page),
        }

    def distribution(self, stream: Stream, page: str, r: TimeRange) -> dict[str, Any]:
        """logjam's distribution plots from `quants` (per day: the range's whole days), with the counts per
        bucket bound of each kind and resource; modules have none (logjam keeps quants per page)."""
        source = self.lake.source("quants", r.days)
        if source is None or page.startswith("::"):
            return {"kinds": {}, "whole_days": r.days, "note": "no quants for modules" if page.startswith("::")
                    else None}
        sql = source
        kinds: dict[str, dict[str, list[list[float]]]] = {}
        for kind, resource, quant, count in self.lake.query(
                f"SELECT kind, resource, quant, sum(count) FROM {sql} WHERE app = ? AND env = ? AND page = ? "
                "GROUP BY ALL ORDER BY kind, resource, quant", [stream.app, stream.env, page]):
            kinds.setdefault(kind, {}).setdefault(resource, []).append([quant, int(count)])
        return {"kinds": kinds, "whole_days": r.days,
                "note": None if r.whole_days else "quants are kept per day: these are the whole days of the range"}

    def request_counts(self, stream: Stream, r: TimeRange, page: str = "all_pages") -> dict[str, int]:
        """Stored requests per reason (the lists behind the counts)."""
        where, params = self._request_where(stream, r, page)
        counts = {reason: 0 for reason in REASONS}
        for reason, n in self._request_rows("reason, count(*) FROM (SELECT unnest(reasons) AS reason FROM "
                                            "{source} WHERE " + where + ") GROUP BY reason", r, params):
            counts[reason] = int(n)
        return counts

    # --- stored requests ---

    def _request_where(self, stream: Stream, r: TimeRange, page: str | None) -> tuple[str, list[Any]]:
        where, params = self._where(stream, r, True)
        if page and page != "all_pages":
            if page.startswith("::"):
                where += " AND module = ?"
            else:
                where += " AND page = ?"
            params.append(page)
        return where, params

    def _request_rows(self, select: str, r: TimeRange, params: list[Any]) -> list[tuple[Any, ...]]:
        source = self.lake.source("requests", r.days)
        if source is None:
            return []
        sql = source
        return self.lake.query("SELECT " + select.replace("{source}", sql), params)

    def requests(self, stream: Stream, r: TimeRange, page: str | None = None, reason: str | None = None,
                 code: str | None = None, exception: str | None = None, severity: int | None = None,
                 sort: str = "total_time", limit: int = LIMIT, offset: int = 0) -> dict[str, Any]:
        """The stored requests behind a count: slow, errors, a response code or class, an exception."""
        where, params = self._request_where(stream, r, page)
        if reason:
            if reason not in REASONS:
                raise ViewError(f"reason={reason!r}: one of {', '.join(REASONS)}")
            where += " AND list_contains(reasons, ?)"
            params.append(reason)
        if code:
            if len(code) == 3 and code.endswith("xx") and code[0].isdigit():
                where += " AND response_code // 100 = ?"
                params.append(int(code[0]))
            elif code.isdigit():
                where += " AND response_code = ?"
                params.append(int(code))
            else:
                raise ViewError(f"code={code!r}: a response code (404) or class (5xx)")
        if exception:
            where += " AND (list_contains(exceptions, ?) OR list_contains(soft_exceptions, ?))"
            params += [exception, exception]
        if severity is not None:
            where += " AND severity >= ?"
            params.append(severity)
        order = {"total_time": "total_time DESC NULLS LAST", "time": "started_ms DESC"}.get(sort)
        if order is None:
            raise ViewError(f"sort={sort!r}: total_time or time")
        limit = max(1, min(limit, MAX_LIMIT))
        source = self.lake.source("requests", r.days)
        if source is None:
            return {"rows": [], "total": 0, "cut": False, "offset": offset}
        sql = source
        rows = self.lake.query_dicts(
            f"SELECT date, minute, request_id, started_at, page, response_code, severity, total_time, reasons, "
            f"exceptions, description, hub, segment, \"offset\", \"index\", count(*) OVER () AS total FROM {sql} "
            f"WHERE {where} ORDER BY {order}, segment, \"offset\", \"index\" LIMIT ? OFFSET ?",
            [*params, limit, max(0, offset)])
        total = int(rows[0]["total"]) if rows else 0
        for row in rows:
            row.pop("total")
            row["id"] = request_key(row)
        return {"rows": rows, "total": total, "cut": total > offset + len(rows), "offset": offset}

    def request(self, stream: Stream, day: str, key: str) -> dict[str, Any]:
        """One stored request: resources, log lines, fields, where its raw event is, its JS errors."""
        source = self.lake.source("requests", [day])
        if source is None:
            raise ViewError(f"no stored requests on {day}")
        sql = source
        if key.startswith("@"):
            try:
                segment, offset, index = key[1:].rsplit(":", 2)
                where, params = "segment = ? AND \"offset\" = ? AND \"index\" = ?", [segment, int(offset), int(index)]
            except ValueError:
                raise ViewError(f"id={key!r}: a request id, or @segment:offset:index") from None
        else:
            where, params = "request_id = ?", [key]
        rows = self.lake.query_dicts(f"SELECT * FROM {sql} WHERE app = ? AND env = ? AND {where} LIMIT 1",
                                     [stream.app, stream.env, *params])
        if not rows:
            raise ViewError(f"request {key} of {stream.app}-{stream.env} is not in the lake on {day}")
        row = rows[0]
        metrics: dict[str, list[dict[str, Any]]] = {}
        for name, value in sorted((row.pop("metrics") or {}).items()):
            metrics.setdefault(self.resources.group_of(name) or "other", []).append({"resource": name, "value": value})
        try:
            fields = json.loads(row.pop("fields") or "null")
        except ValueError:
            fields = None
        row["time"] = row["time"].isoformat() if isinstance(row.get("time"), dt.datetime) else row.get("time")
        js = []
        if row.get("request_id"):
            js_source = self.lake.source("js_exceptions", [day])
            if js_source is not None:
                js = self.lake.query_dicts(f"SELECT started_at, page, description, user_agent FROM {js_source} "
                                           "WHERE request_id = ? ORDER BY started_at", [row["request_id"]])
        return {"request": {**row, "id": request_key(row)}, "metrics": metrics, "fields": fields, "js_errors": js,
                "raw": {"hub": row["hub"], "segment": row["segment"], "offset": row["offset"], "index": row["index"],
                        "command": f"logport cat --server HUB_ADDRESS {row['segment']} --from {row['offset']}"}}

    # --- exceptions, JS errors, frontend, notifications, history ---

    def exceptions(self, stream: Stream, r: TimeRange, interval: int | None = None) -> dict[str, Any]:
        interval = interval or r.auto_interval()
        where, params = self._where(stream, r, True, "all")
        slot = self.slot_sql(interval)
        out: dict[str, Any] = {"interval": interval, "range": r.query()}
        slots = self._series_slots(r, interval)
        maps = self._maps("minutes", r, ("exceptions", "soft_exceptions"), where, params, slot, force_minutes=True)
        for kind, per_slot in maps.items():
            totals: dict[str, int] = {}
            for counts in per_slot.values():
                for name, n in counts.items():
                    totals[name] = totals.get(name, 0) + n
            ranked = _top(totals, LIMIT)
            out[kind] = {"rows": ranked["rows"], "cut": ranked["cut"], "times": [s * 60_000 for s in slots],
                         "series": {row["name"]: self._fill(slots, {s: c.get(row["name"]) for s, c in per_slot.items()})
                                    for row in ranked["rows"][:10]}}
        return out

    def js_errors(self, stream: Stream, r: TimeRange, limit: int = LIMIT) -> dict[str, Any]:
        where, params = self._where(stream, r, True, "all")
        counts = self._map_sums("minutes", r, "js_exceptions", where, params, force_minutes=True).get(None, {})
        source = self.lake.source("js_exceptions", r.days)
        rows: list[dict[str, Any]] = []
        total = 0
        if source is not None:
            w, p = self._where(stream, r, True)
            rows = self.lake.query_dicts(
                f"SELECT date, minute, started_at, page, description, request_id, logjam_request_id, user_agent, "
                f"count(*) OVER () AS total FROM {source} WHERE {w} ORDER BY started_at DESC LIMIT ?",
                [*p, limit])
            total = int(rows[0]["total"]) if rows else 0
            for row in rows:
                row.pop("total")
        return {"descriptions": _top(counts), "rows": rows, "total": total, "cut": total > len(rows)}

    def frontend(self, stream: Stream, r: TimeRange, interval: int | None = None) -> dict[str, Any]:
        """Page and ajax timings: counts, the three frontend apdex scores and page/ajax percentiles per slot."""
        interval = interval or r.auto_interval()
        where, params = self._where(stream, r, True, "all")
        slot = self.slot_sql(interval)
        fam = ", ".join(f"sum({f}_satisfied) AS {f}_s, sum({f}_tolerating) AS {f}_t"
                        for f in ("fapdex", "papdex", "xapdex"))
        rows = self._rows("minutes", r, f"{slot} AS slot, sum(page_count) AS page_count, sum(ajax_count) AS "
                          f"ajax_count, sum(frontend_count) AS frontend_count, {fam}", where, params,
                          "GROUP BY slot", force_minutes=True)
        slots = self._series_slots(r, interval)
        by_slot = {int(row["slot"]): row for row in rows if row["frontend_count"]}
        series: dict[str, Any] = {"times": [s * 60_000 for s in slots], "interval": interval}
        for name, counter in (("fapdex", "frontend_count"), ("papdex", "page_count"), ("xapdex", "ajax_count")):
            series[name] = self._fill(slots, {s: apdex_score(row[f"{name}_s"], row[f"{name}_t"], row[counter])
                                              for s, row in by_slot.items()})
        series["page_count"] = self._fill(slots, {s: row["page_count"] / interval for s, row in by_slot.items()})
        series["ajax_count"] = self._fill(slots, {s: row["ajax_count"] / interval for s, row in by_slot.items()})
        maps = self._maps("minutes", r, ("page_time_sketch", "ajax_time_sketch"), where, params, slot,
                          force_minutes=True)
        for resource in ("page_time", "ajax_time"):
            per_slot = maps[f"{resource}_sketch"]
            series[f"{resource}_p50"] = self._fill(slots, {s: sketch.quantile(c, 0.5) for s, c in per_slot.items()})
            series[f"{resource}_p95"] = self._fill(slots, {s: sketch.quantile(c, 0.95) for s, c in per_slot.items()})
        pages = self.actions(stream, r, resource="page_time", sort="sum")
        agents_source = self.lake.source("agents", r.days)
        agents: list[dict[str, Any]] = []
        if agents_source is not None:
            agents = self.lake.query_dicts(
                f"SELECT user_agent, sum(backend) AS backend, sum(frontend) AS frontend, sum(dropped) AS dropped "
                f"FROM {agents_source} WHERE app = ? AND env = ? GROUP BY user_agent ORDER BY backend DESC "
                f"LIMIT 100", [stream.app, stream.env])
        summary = self.summary(stream, r)
        return {"range": r.query(), "series": series, "apdex": {k: summary["apdex"][k]
                                                                for k in ("fapdex", "papdex", "xapdex")},
                "frontend": summary["resources"].get("frontend", []), "pages": pages, "agents": agents}

    def notifications(self, stream: Stream | None, r: TimeRange) -> list[dict[str, Any]]:
        """Agent events, newest first."""
        source = self.lake.source("notifications", r.days)
        if source is None:
            return []
        where, params = self._where(stream, r, True)
        rows = self.lake.query_dicts(f"SELECT app, env, date, minute, started_at, label, host, cluster, uuid "
                                     f"FROM {source} WHERE {where} ORDER BY started_at DESC LIMIT 1000",
                                     params)
        for row in rows:
            row["time"] = ms(row["date"], row["minute"])
        return rows

    def markers(self, stream: Stream, r: TimeRange) -> list[dict[str, Any]]:
        """Chart markers: events within EVENT_MERGE_MINUTES of the one before are one marker, labels joined."""
        merged: list[dict[str, Any]] = []
        for event in sorted(self.notifications(stream, r), key=lambda e: e["time"]):
            if merged and event["time"] - merged[-1]["time"] <= EVENT_MERGE_MINUTES * 60_000:
                merged[-1]["label"] += "\n" + event["label"]
            else:
                merged.append({"time": event["time"], "label": event["label"]})
        return merged

    def history(self, stream: Stream, r: TimeRange) -> dict[str, Any]:
        """One row per day: requests, apdex, papdex, xapdex, errors, warnings, exceptions, 5xx, availability,
        error rate, p95, and the average of every backend time resource."""
        source = self.lake.source("totals", r.days)
        if source is None:
            return {"rows": [], "resources": []}
        sql = source
        times = [n for n in self.resources.groups.get("time", ())]
        select = ", ".join(f"sum({_q(n)}) AS {_q(n)}" for n in times)
        rows = self.lake.query_dicts(
            f"SELECT date, sum(count) AS count, sum(apdex_satisfied) AS a_s, sum(apdex_tolerating) AS a_t, "
            f"sum(page_count) AS page_count, sum(papdex_satisfied) AS p_s, sum(papdex_tolerating) AS p_t, "
            f"sum(ajax_count) AS ajax_count, sum(xapdex_satisfied) AS x_s, sum(xapdex_tolerating) AS x_t, "
            f"{self._severity_sum((3, 4))} AS errors, {self._severity_sum((2,))} AS warnings, "
            f"{self._code_sum('5')} AS c5xx, sum(coalesce(list_sum(map_values(exceptions)), 0)) AS exceptions, "
            f"{select} FROM {sql} WHERE app = ? AND env = ? AND scope = 'all' GROUP BY date ORDER BY date",
            [stream.app, stream.env])
        sketches = self._map_sums("totals", TimeRange(r.start.replace(hour=0, minute=0), r.end), "total_time_sketch",
                                  "app = ? AND env = ? AND scope = 'all'", [stream.app, stream.env], "date")
        out = []
        used = [n for n in times if any(row[n] is not None for row in rows)]
        for row in rows:
            n = int(row["count"] or 0)
            out.append({"date": row["date"], "time": ms(row["date"], 0), "count": n,
                        "apdex": apdex_score(row["a_s"], row["a_t"], n),
                        "papdex": apdex_score(row["p_s"], row["p_t"], row["page_count"]),
                        "xapdex": apdex_score(row["x_s"], row["x_t"], row["ajax_count"]),
                        "errors": int(row["errors"] or 0), "warnings": int(row["warnings"] or 0),
                        "exceptions": int(row["exceptions"] or 0), "5xx": int(row["c5xx"] or 0),
                        "availability": 100 - 100 * (row["c5xx"] or 0) / n if n else None,
                        "error_rate": 100 * (row["c5xx"] or 0) / n if n else None,
                        "p95": sketch.quantile(sketches.get(row["date"], {}), 0.95),
                        "avg": {name: (row[name] or 0) / n if n and row[name] is not None else None
                                for name in used}})
        return {"rows": out, "resources": used, "range": r.query()}

    # --- logs (Forward, Lumberjack, segment-protocol JSON) ---

    def logs(self, r: TimeRange, tag: str | None = None, host: str | None = None, level: str | None = None,
             interval: int | None = None) -> dict[str, Any]:
        interval = interval or r.auto_interval()
        clauses, params = [], []
        for column, value in (("tag", tag), ("host", host), ("level", level)):
            if value:
                clauses.append(f"{column} = ?")
                params.append(value)
        where, range_params = self._where(None, r, True)
        where = " AND ".join([where, *clauses])
        params = range_params + params
        source = self.lake.source("log_minutes", r.days)
        out: dict[str, Any] = {"range": r.query(), "interval": interval, "filters": {"tag": tag, "host": host,
                                                                                     "level": level}}
        slots = self._series_slots(r, interval)
        out["times"] = [s * 60_000 for s in slots]
        out["levels"], out["by"] = {}, {}
        if source is not None:
            sql = source
            per_level: dict[str, dict[int, int]] = {}
            for s, lv, n in self.lake.query(f"SELECT {self.slot_sql(interval)} AS slot, level, sum(events) FROM {sql} "
                                            f"WHERE {where} GROUP BY slot, level", params):
                per_level.setdefault(lv, {})[int(s)] = int(n)
            out["levels"] = {lv: self._fill(slots, v) for lv, v in sorted(per_level.items())}
            for column in ("tag", "host", "level"):
                out["by"][column] = self.lake.query_dicts(
                    f"SELECT {column} AS name, sum(events) AS events, sum(bytes) AS bytes FROM {sql} WHERE {where} "
                    f"GROUP BY {column} ORDER BY events DESC LIMIT {LIMIT}", params)
        out["patterns"] = self.patterns(r, tag, level)
        return out

    def patterns(self, r: TimeRange, tag: str | None, level: str | None, limit: int = LIMIT) -> dict[str, Any]:
        """Message patterns of the range: new ones (first seen in it) first, then by growth over the range of the
        same length before, then by count; each with its template and samples."""
        before = r.previous()
        source = self.lake.source("log_patterns", sorted(set(before.days) | set(r.days)))
        info_source = self.lake.source("patterns")
        if source is None or info_source is None:
            return {"rows": [], "total": 0, "cut": False}
        sql = source
        now_where, now_params = self._where(None, r, True)
        then_where, then_params = self._where(None, before, True)
        extra, extra_params = "", []
        for column, value in (("tag", tag), ("level", level)):
            if value:
                extra += f" AND {column} = ?"
                extra_params.append(value)
        counts = self.lake.query(
            f"SELECT pattern_id, sum(count) FILTER ({now_where}) AS now, sum(count) FILTER ({then_where}) AS then "
            f"FROM {sql} WHERE true {extra} GROUP BY pattern_id",
            [*now_params, *then_params, *extra_params])
        counts = [c for c in counts if c[1]]
        info = {row["pattern_id"]: row for row in self.lake.query_dicts(
            f"SELECT pattern_id, arg_max(template, last_seen) AS template, min(first_seen) AS first_seen, "
            f"max(last_seen) AS last_seen, arg_max(level, last_seen) AS level, arg_max(tag, last_seen) AS tag, "
            f"arg_max(samples, last_seen) AS samples FROM {info_source} GROUP BY pattern_id",
            )}
        start = r.start.replace(tzinfo=dt.UTC)
        rows = []
        for pid, now, then in counts:
            meta = info.get(pid, {})
            first = meta.get("first_seen")
            new = bool(first and _utc(first) >= start)
            rows.append({"pattern_id": pid, "template": meta.get("template"), "count": int(now),
                         "before": int(then or 0), "new": new,
                         "growth": (now / then) if then else None, "first_seen": _iso(first),
                         "last_seen": _iso(meta.get("last_seen")), "level": meta.get("level"), "tag": meta.get("tag"),
                         "samples": [{**s, "time": _iso(s.get("time"))} for s in (meta.get("samples") or [])[:5]]})
        rows.sort(key=lambda x: (not x["new"], -(x["growth"] or (math.inf if not x["before"] else 0)), -x["count"]))
        return {"rows": rows[:limit], "total": len(rows), "cut": len(rows) > limit}


def _utc(value: Any) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)  # type: ignore[no-any-return]
    return value.astimezone(dt.UTC)  # type: ignore[no-any-return]


def _iso(value: Any) -> str | None:
    return _utc(value).isoformat() if isinstance(value, dt.datetime) else value


def _bound(value: float) -> str:
    """A bucket bound as logjam's axis labels it (1, 3, 10, ... 1k, 3k, ... 1M...)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def _top(counts: Mapping[str, int], limit: int = LIMIT) -> dict[str, Any]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"rows": [{"name": k, "count": v} for k, v in ranked[:limit]], "total": len(ranked),
            "cut": len(ranked) > limit}


def request_key(row: Mapping[str, Any]) -> str:
    """How a URL names a stored request: its request id, else @segment:offset:index."""
    if row.get("request_id"):
        return str(row["request_id"])
    return f"@{row['segment']}:{row['offset']}:{row['index']}"
