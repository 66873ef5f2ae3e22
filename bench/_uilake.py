"""Generated logjam traffic for `logport ui`'s tests and `logport bench ui`: the requests (one Arrow row each), the
same requests as stored logjam events in a data directory (what `logport pipeline` reads), and a lake written
from them without Spark (a fixture for the UI's unit tests, exactly per lake/tables.py and lake/log.py; the real
lake is the pipeline's).

The fixture lake aggregates the requests with numpy (the stored requests with DuckDB), each batch on its own (a
key has rows from several batches, as the pipeline's batches leave them), writes each table as the pipeline's lake
writer does (one file per `date` partition and batch, no `date` column in the files, sorted by the table's keys)
and commits each batch with a log entry. 10 M requests take minutes, not the better part of an hour.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logport.lake import sketch
from logport.lake.log import FORMAT, LAKE_FILE, Entry, LakeLog
from logport.lake.resources import DEFAULT_RESOURCES
from logport.lake.tables import Table, all_tables

CONTROLLERS = ("Orders", "Carts", "Search", "Users", "Api::V1::Items", "Api::V1::Prices", "Admin::Reports",
               "Health", "Checkout", "Pages")
METHODS = ("index", "show", "create", "update", "destroy", "query")
EXCEPTIONS = ("ActiveRecord::RecordNotFound", "Timeout::Error", "Redis::CannotConnectError", "NoMethodError")
HUB = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
LOG_TAGS = ("nginx.access", "app.worker", "kernel")
LOG_HOSTS = ("web-1", "web-2", "db-1", "queue-1")
LOG_LEVELS = ("debug", "info", "warn", "error")
TEMPLATES = tuple(f"{verb} <*> in <*> ms ({noun})" for verb in ("GET", "POST", "retry", "flush", "connect")
                  for noun in ("cache", "db", "disk", "peer"))
# the fixture's Parquet layout, as Spark's writer (parquet-mr) makes it: row groups readers skip by the sorted keys'
# min/max, pages of at most 20,000 rows (parquet.page.row.count.limit) and the page index, so that a reader of a few
# rows decodes their pages only
ROW_GROUP_ROWS = 122_880
PAGE_ROWS = 20_000
# the time resources the generator fills (others stay null: a message without them)
# the producers' UTC offsets, by app-env (started_at is local wall time, as logjam's agents send it)
UTC_OFFSETS = ("+01:00", "+00:00", "-05:00")
TIME_PARTS = ("db_time", "view_time", "api_time", "memcache_time")


def pages(app_index: int) -> list[str]:
    """Each app's actions: a different slice of controllers x methods, so apps differ."""
    out = []
    for c in range(len(CONTROLLERS)):
        for m in range(len(METHODS)):
            if (c * 7 + m * 3 + app_index) % 4 != 0:
                out.append(f"{CONTROLLERS[c]}#{METHODS[m]}")
    return out


def module_of(page: str) -> str:
    """logjam's module of a page: `::` and the first name (Api::V1::Items#show -> ::Api)."""
    name = page.split("#", 1)[0]
    return "::" + name.split("::", 1)[0]


def generate_requests(app_envs: Sequence[str], days: Sequence[str], per_app_day: int, seed: int = 1,
                      gap: tuple[int, int] | None = (300, 330)) -> pa.Table:
    """per_app_day backend requests per app-env and day, by a daily curve, with no traffic in the minutes of
    `gap` on every second day (a gap the charts must draw as one); times in ms, lognormal per action."""
    rng = np.random.default_rng(seed)
    minutes = np.arange(1440)
    curve = 1.0 + 0.8 * np.sin((minutes - 420) / 1440 * 2 * math.pi)
    parts: list[pa.Table] = []
    offset = 0
    for a, app_env in enumerate(app_envs):
        app, env = app_env.rsplit("-", 1)
        names = pages(a)
        medians = np.exp(rng.uniform(math.log(8), math.log(400), len(names)))
        medians[0] = 900.0  # one slow action in every app
        weights = rng.pareto(1.2, len(names)) + 0.05
        weights /= weights.sum()
        for d, day in enumerate(days):
            n = per_app_day
            w = curve.copy()
            if gap is not None and d % 2 == 1:
                w[gap[0]:gap[1]] = 0.0
            minute = rng.choice(1440, n, p=w / w.sum()).astype(np.int16)
            page_i = rng.choice(len(names), n, p=weights)
            total = medians[page_i] * rng.lognormal(0.0, 0.6, n)
            shares = rng.dirichlet((4, 2, 1, 1, 2), n)
            code = np.where(rng.random(n) < 0.01, 500, np.where(rng.random(n) < 0.03, 404, 200)).astype(np.int32)
            severity = np.where(code == 500, 3, np.where(rng.random(n) < 0.02, 2, 1)).astype(np.int32)
            has_exception = (code == 500) & (rng.random(n) < 0.7)
            exception = pc.if_else(has_exception, pc.take(pa.array(EXCEPTIONS), rng.integers(0, len(EXCEPTIONS), n)),
                                   pa.scalar(None, pa.string()))
            caller = pc.if_else(rng.random(n) < 0.05, f"{app_envs[(a + 1) % len(app_envs)].rsplit('-', 1)[0]}"
                                "@Gateway#forward", pa.scalar(None, pa.string()))
            second = rng.integers(0, 60, n)
            millis = rng.integers(0, 1000, n)
            # started_at is the producer's wall time with its UTC offset (logjam files a request under the wall
            # time's day and minute); started_ms the instant
            wall_ms = (dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp() * 1000
                       + minute.astype(np.int64) * 60_000 + second * 1000 + millis).astype(np.int64)
            utc_offset = UTC_OFFSETS[a % len(UTC_OFFSETS)]
            stamps = pc.binary_join_element_wise(
                pc.strftime(pa.array(wall_ms, pa.timestamp("ms")), format="%Y-%m-%dT%H:%M:%S"), utc_offset, "")
            started_ms = wall_ms - _offset_minutes(utc_offset) * 60_000
            page_time = np.where(rng.random(n) < 0.3, total * 3 + rng.lognormal(6.5, 0.7, n), np.nan)
            ajax_time = np.where(rng.random(n) < 0.2, total + rng.lognormal(4.5, 0.6, n), np.nan)
            cols: dict[str, Any] = {
                "app": pa.repeat(app, n), "env": pa.repeat(env, n), "date": pa.repeat(day, n),
                "minute": minute, "started_at": stamps, "started_ms": started_ms,
                "page": pc.take(pa.array(names), page_i),
                "response_code": code, "severity": severity, "total_time": np.round(total, 3),
            }
            for i, r in enumerate(TIME_PARTS):
                cols[r] = np.round(total * shares[:, i], 3)
            cols["db_calls"] = rng.poisson(cols["db_time"] / 5 + 1).astype(np.float64)
            cols["memcache_calls"] = rng.poisson(3, n).astype(np.float64)
            cols["allocated_objects"] = np.round(total * rng.uniform(50, 200, n))
            cols["allocated_bytes"] = cols["allocated_objects"] * 40
            cols["heap_growth"] = np.where(rng.random(n) < 0.01, rng.uniform(1e6, 5e6, n), 0.0)
            cols["exception"] = exception
            cols["caller"] = caller
            cols["page_time"] = pa.array(page_time, mask=np.isnan(page_time))
            cols["ajax_time"] = pa.array(ajax_time, mask=np.isnan(ajax_time))
            cols["request_id"] = _hex_ids(offset, n)
            cols["host"] = pc.take(pa.array(LOG_HOSTS[:2]), rng.integers(0, 2, n))
            cols["offset"] = np.arange(offset, offset + n, dtype=np.int64) * 512
            offset += n
            parts.append(pa.table(cols))
    table = pa.concat_tables(parts)
    page = pc.dictionary_encode(table.column("page").combine_chunks())
    modules = pa.array([module_of(p) for p in page.dictionary.to_pylist()])
    return table.append_column("module", pc.take(modules, page.indices))


def _offset_minutes(utc_offset: str) -> int:
    """+01:00 -> 60, -05:30 -> -330."""
    sign = -1 if utc_offset[0] == "-" else 1
    return sign * (int(utc_offset[1:3]) * 60 + int(utc_offset[4:6]))


def _hex_ids(first: int, n: int) -> pa.Array:
    """The numbers first .. first + n - 1 as 32 hex digits each (request ids), without a Python loop."""
    numbers = np.arange(first, first + n, dtype=np.uint64)
    nibbles = (numbers[:, None] >> np.arange(60, -4, -4, dtype=np.uint64)) & np.uint64(15)
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles.astype(np.intp)]
    text = np.concatenate([np.full((n, 16), ord("0"), np.uint8), digits], axis=1)
    offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())])


def logjam_records(requests: pa.Table) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(app-env, started_ms, record) of each request as a logjam agent sends it (the pipeline's input)."""
    for row in requests.to_pylist():
        record: dict[str, Any] = {
            "action": row["page"], "code": row["response_code"], "severity": row["severity"],
            "started_at": row["started_at"], "started_ms": row["started_ms"], "request_id": row["request_id"],
            "host": row["host"], "total_time": row["total_time"],
            "lines": [[1, row["started_at"], f"Started {row['page']}"],
                      [row["severity"], row["started_at"], f"Completed {row['response_code']} in "
                                                           f"{row['total_time']:.1f}ms"]],
        }
        for r in (*TIME_PARTS, "db_calls", "memcache_calls", "allocated_objects", "allocated_bytes", "heap_growth"):
            record[r] = row[r]
        if row["exception"]:
            record["exceptions"] = [row["exception"]]
        if row["caller"]:
            caller_app, caller_action = row["caller"].split("@", 1)
            record["caller_id"] = f"{caller_app}-{row['env']}-{row['request_id'][:8]}"
            record["caller_action"] = caller_action
        yield f"{row['app']}-{row['env']}", row["started_ms"], record


# --- the fixture lake (numpy and DuckDB over the requests) ---

def _duck_type(ddl: str) -> str:
    """A Spark DDL type of tables.py as DuckDB's."""
    simple = {"string": "VARCHAR", "bigint": "BIGINT", "int": "INTEGER", "smallint": "SMALLINT",
              "double": "DOUBLE", "timestamp": "TIMESTAMP WITH TIME ZONE", "boolean": "BOOLEAN"}
    if ddl in simple:
        return simple[ddl]
    if ddl.startswith("map<"):
        key, value = _split(ddl[4:-1])
        return f"MAP({_duck_type(key)}, {_duck_type(value)})"
    if ddl.startswith("array<"):
        return f"{_duck_type(ddl[6:-1])}[]"
    if ddl.startswith("struct<"):
        fields = [f.split(":", 1) for f in _split(ddl[7:-1])]
        return "STRUCT(" + ", ".join(f'"{n}" {_duck_type(t)}' for n, t in fields) + ")"
    raise ValueError(f"type {ddl!r} not handled")


def _split(inner: str) -> list[str]:
    """Top-level comma-separated parts of a type's parameters."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        depth += c == "<"
        depth -= c == ">"
        if c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    return [*parts, inner[start:]]


def arrow_type(ddl: str) -> pa.DataType:
    """A Spark DDL type of tables.py as Arrow's (the fixture's files have each table's exact columns)."""
    simple = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(),
              "double": pa.float64(), "timestamp": pa.timestamp("us", tz="UTC"), "boolean": pa.bool_()}
    if ddl in simple:
        return simple[ddl]
    if ddl.startswith("map<"):
        key, value = _split(ddl[4:-1])
        return pa.map_(arrow_type(key), arrow_type(value))
    if ddl.startswith("array<"):
        return pa.list_(arrow_type(ddl[6:-1]))
    if ddl.startswith("struct<"):
        return pa.struct([(n, arrow_type(t)) for n, t in (f.split(":", 1) for f in _split(ddl[7:-1]))])
    raise ValueError(f"type {ddl!r} not handled")


APDEX = {"apdex": ("total_time", 100, 500, 2000), "fapdex": ("frontend_time", 500, 2000, 8000),
         "papdex": ("page_time", 500, 2000, 8000), "xapdex": ("ajax_time", 500, 2000, 8000)}
FILLED = (*TIME_PARTS, "total_time", "other_time", "db_calls", "memcache_calls", "allocated_objects",
          "allocated_bytes", "allocated_memory", "heap_growth", "page_time", "ajax_time", "frontend_time")
COUNTED = {"response": "response_code", "severity": "severity", "exceptions": "exception", "callers": "caller"}
DISTRIBUTED = ("total_time", "page_time", "ajax_time")
QUANTS = (*(("t", r, 1) for r in (*TIME_PARTS, "total_time")), ("f", "page_time", 1), ("f", "ajax_time", 1),
          ("m", "allocated_objects", 1), ("m", "allocated_bytes", 1024))  # (kind, resource, unit of the bounds)
BOUNDS = np.array(sketch.HIST_BOUNDS)


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(each value's index into the distinct values, -1 for null; the distinct values)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    return encoded.indices.fill_null(-1).to_numpy().astype(np.int64), encoded.dictionary


def _floats(requests: pa.Table, name: str) -> np.ndarray:
    """A numeric column as float64, NaN for null."""
    return requests.column(name).combine_chunks().cast(pa.float64()).to_numpy(zero_copy_only=False)


def _hist_index(values: np.ndarray) -> np.ndarray:
    """lake/sketch.py hist_index of each value (the smallest bound >= it, the last above it)."""
    return np.minimum(np.searchsorted(BOUNDS, values, side="left"), len(BOUNDS) - 1)


def _sketch_keys(values: np.ndarray) -> np.ndarray:
    """lake/sketch.py sketch_key of each value (not NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        keys = np.ceil(np.log(values) / math.log(sketch.GAMMA))
    return np.where(values > 0, keys, sketch.ZERO_KEY).astype(np.int64)


class _Groups:
    """Rows numbered by their key: group g of every row, the groups' count, and sums, maxima and maps per group."""

    def __init__(self, key: np.ndarray) -> None:
        unique, self.first, self.of = np.unique(key, return_index=True, return_inverse=True)
        self.size = len(unique)
        self.order = np.argsort(self.of, kind="stable")
        self.starts = np.searchsorted(self.of[self.order], np.arange(self.size))

    def count(self, where: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(self.of, weights=where, minlength=self.size).astype(np.int64)

    def sums(self, values: np.ndarray) -> tuple[pa.Array, pa.Array, pa.Array]:
        """Sum, sum of squares and maximum of the non-NaN values, null where a group has none."""
        present = ~np.isnan(values)
        none = self.count(present) == 0
        zeroed = np.where(present, values, 0.0)
        maxima = np.maximum.reduceat(np.where(present, values, -np.inf)[self.order], self.starts)
        return (pa.array(np.bincount(self.of, weights=zeroed, minlength=self.size), mask=none),
                pa.array(np.bincount(self.of, weights=zeroed * zeroed, minlength=self.size), mask=none),
                pa.array(maxima, mask=none))

    def map(self, keys: np.ndarray, valid: np.ndarray, key_type: pa.DataType, names: pa.Array | None = None
            ) -> pa.Array:
        """Per group, key -> how many of its rows have it (rows where `valid`; keys are indices into `names` when
        given); null where a group has none."""
        distinct, codes = np.unique(keys[valid], return_inverse=True)
        width = max(1, len(distinct))
        pairs, counts = np.unique(self.of[valid] * width + codes, return_counts=True)
        offsets = np.searchsorted(pairs // width, np.arange(self.size + 1)).astype(np.int32)
        found = distinct[pairs % width]
        map_keys = (pc.take(names, found) if names is not None else pa.array(found)).cast(key_type)
        return pa.MapArray.from_arrays(offsets, map_keys, pa.array(counts, pa.int64()),
                                       mask=pa.array(offsets[1:] == offsets[:-1]))


def _aggregate(requests: pa.Table, table: Table) -> pa.Table:
    """An aggregate table's rows (minutes, totals) from the requests: each request counted on its action's row,
    its module's and all_pages's (logjam's three scopes), with the table's key and value columns."""
    n = requests.num_rows
    pages, page_names = _codes(requests.column("page"))
    modules, module_names = _codes(requests.column("module"))
    names = pa.concat_arrays([page_names, module_names, pa.array(["all_pages"])])
    scopes = pa.array(["action"] * len(page_names) + ["module"] * len(module_names) + ["all"])
    page = np.concatenate([pages, modules + len(page_names), np.full(n, len(names) - 1)])
    key = np.zeros(n, np.int64)
    keys = [k for k, _ in table.keys if k not in ("scope", "page")]
    for k in keys:
        codes, distinct = _codes(requests.column(k))
        key = key * len(distinct) + codes
    groups = _Groups(np.tile(key, 3) * len(names) + page)
    row = groups.first % n
    out: dict[str, pa.Array] = {k: pc.take(requests.column(k), row) for k in keys}
    out["scope"] = pc.take(scopes, page[groups.first])
    out["page"] = pc.take(names, page[groups.first])
    values = {name: np.tile(_floats(requests, name), 3) for name in FILLED}
    present = {name: ~np.isnan(v) for name, v in values.items()}
    out["count"] = pa.array(groups.count())
    for name, divisor in (("page_count", "page_time"), ("ajax_count", "ajax_time")):
        out[name] = pa.array(groups.count(present[divisor]))
    out["frontend_count"] = pa.array(groups.count(present["page_time"]) + groups.count(present["ajax_time"]))
    for name, v in values.items():
        out[name], out[f"{name}_sq"], out[f"{name}_max"] = groups.sums(v)
    for family, (name, happy, satisfied, tolerating) in APDEX.items():
        v = values[name]
        for bucket, within in (("happy", v < happy), ("satisfied", v < satisfied),
                               ("tolerating", (v >= satisfied) & (v < tolerating)), ("frustrated", v >= tolerating)):
            out[f"{family}_{bucket}"] = pa.array(groups.count(within))
    for name, source in COUNTED.items():
        codes, distinct = _codes(requests.column(source))  # response codes and severities as text, as logjam's
        codes = np.tile(codes, 3)
        out[name] = groups.map(codes, codes >= 0, pa.string(), distinct.cast(pa.string()))
    for name in DISTRIBUTED:
        v = values[name]
        out[f"{name}_hist"] = groups.map(_hist_index(v), v > 0, pa.int32())
        out[f"{name}_sketch"] = groups.map(_sketch_keys(v), present[name], pa.int32())
    return pa.table({c: out[c] if c in out else pa.nulls(groups.size, arrow_type(t)) for c, t in table.columns})


def _quants(requests: pa.Table) -> pa.Table:
    """logjam's quants (spec 4.2): requests per page (and all_pages), kind, resource and bucket bound."""
    n = requests.num_rows
    key = np.zeros(n, np.int64)
    for k in ("app", "env", "date"):
        codes, distinct = _codes(requests.column(k))
        key = key * len(distinct) + codes
    pages, page_names = _codes(requests.column("page"))
    names = pa.concat_arrays([page_names, pa.array(["all_pages"])])
    parts = []
    for kind, resource, unit in QUANTS:
        v = _floats(requests, resource) / unit
        valid = np.tile(v > 0, 2)
        page = np.concatenate([pages, np.full(n, len(names) - 1)])
        bucket = np.tile(_hist_index(v), 2)
        combined = (np.tile(key, 2) * len(names) + page) * len(BOUNDS) + bucket
        unique, first, counts = np.unique(combined[valid], return_index=True, return_counts=True)
        at = np.flatnonzero(valid)[first]
        row = at % n
        parts.append(pa.table({
            "app": pc.take(requests.column("app"), row), "env": pc.take(requests.column("env"), row),
            "date": pc.take(requests.column("date"), row), "page": pc.take(names, page[at]),
            "kind": pa.repeat(kind, len(unique)), "resource": pa.repeat(resource, len(unique)),
            "quant": pa.array(BOUNDS[unique % len(BOUNDS)] * unit), "count": pa.array(counts, pa.int64())}))
    return pa.concat_tables(parts)


def _requests_sql(values: Sequence[tuple[str, str]]) -> str:
    exprs = {
        "reasons": "list_filter(['slow', 'error', '5xx', '4xx', 'exceptions', 'heap_growth'], lambda x: "
                   "(x = 'slow' AND total_time > 500) OR (x = 'error' AND severity >= 3) OR "
                   "(x = '5xx' AND response_code >= 500) OR (x = '4xx' AND response_code BETWEEN 400 AND 499) OR "
                   "(x = 'exceptions' AND exception IS NOT NULL) OR (x = 'heap_growth' AND heap_growth > 0))",
        "exceptions": "CASE WHEN exception IS NULL THEN [] ELSE [exception] END", "soft_exceptions": "[]",
        "time": "to_timestamp(started_ms / 1000)",
        "caller_id": "CASE WHEN caller IS NULL THEN NULL ELSE split_part(caller, '@', 1) || '-' || env || '-1' END",
        "caller_action": "split_part(caller, '@', 2)",
        "url": "'/' || lower(replace(page, '#', '/'))", "user_agent": "'Mozilla/5.0 (X11; Linux x86_64)'",
        "metrics": "map_from_entries(list_filter([" + ", ".join(
            f"{{'key': '{r}', 'value': {r}}}" for r in (*TIME_PARTS, "total_time", "db_calls", "memcache_calls",
                                                          "allocated_objects", "allocated_bytes", "heap_growth"))
                   + "], lambda e: e.value IS NOT NULL AND e.value != 0))",
        "lines": "[{'severity': 1, 'time': started_at, 'text': 'Started GET ' || '/' || lower(replace(page, '#', '/'))}, "
                 "{'severity': 0, 'time': started_at, 'text': 'SELECT * FROM items WHERE id = ' || \"offset\"}, "
                 "{'severity': severity, 'time': started_at, 'text': CASE WHEN exception IS NULL THEN "
                 "'Completed ' || response_code || ' in ' || round(total_time, 1) || 'ms' ELSE exception || "
                 "': something went wrong' END}]",
        "description": "CASE WHEN exception IS NULL THEN 'Completed ' || response_code ELSE exception || "
                       "': something went wrong' END",
        "fields": "to_json({'action': page, 'code': response_code, 'total_time': total_time})",
        "hub": f"'{HUB}'", "segment": "'logjam'", "index": "0",
        "sender_id": "NULL", "sender_action": "NULL",
    }
    select = ", ".join(f'{exprs.get(c, chr(34) + c + chr(34))}::{_duck_type(t)} AS "{c}"' for c, t in values)
    return (f"SELECT {select} FROM reqs WHERE total_time > 500 OR severity >= 3 OR response_code >= 500 OR "
            "exception IS NOT NULL OR heap_growth > 0 OR (response_code BETWEEN 400 AND 499 AND \"offset\" % 4 = 0)")


def _extras(requests: pa.Table, seed: int) -> dict[str, list[dict[str, Any]]]:
    """The small tables' rows: JS errors, agent events, user agents and the log tables."""
    rng = np.random.default_rng(seed)
    keys = sorted(tuple(row.values()) for row in
                  requests.group_by(["app", "env", "date"]).aggregate([]).to_pylist())
    js, notes, agents = [], [], []
    for i, (app, env, day) in enumerate(keys):
        for j in range(6):
            minute = int(rng.integers(0, 1440))
            js.append({"app": app, "env": env, "date": day, "minute": minute,
                       "started_at": f"{day}T{minute // 60:02d}:{minute % 60:02d}:00+00:00",
                       "time": dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(minutes=minute),
                       "page": "Orders#show", "description": ("TypeError: x is undefined", "ReferenceError: y")[j % 2],
                       "logjam_request_id": f"{app}-{env}-{i:08x}{j:024x}", "request_id": f"{i:08x}{j:024x}",
                       "user_agent": "Mozilla/5.0", "fields": '{"description": "TypeError"}',
                       "hub": HUB, "segment": "logjam", "offset": 0, "index": j})
        minute = 600 + i % 60
        notes.append({"app": app, "env": env, "date": day, "minute": minute,
                      "started_at": f"{day}T{minute // 60:02d}:{minute % 60:02d}:00+00:00",
                      "time": dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(minutes=minute),
                      "label": f"deploy {app} r{i}", "host": "deploy-1", "cluster": "eu", "uuid": f"{i:032x}",
                      "fields": "{}", "hub": HUB, "segment": "logjam", "offset": 0, "index": 0})
        for ua, share in (("Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", 5), ("curl/8.5.0", 1)):
            agents.append({"app": app, "env": env, "date": day, "user_agent": ua, "backend": 100 * share,
                           "frontend": 30 * share, "dropped": share, "drop_reasons": {"outlier": share}})
    days = sorted({k[2] for k in keys})
    log_rows, pattern_rows, patterns = [], [], {}
    for d, day in enumerate(days):
        for minute in range(0, 1440, 7):
            for t, tag in enumerate(LOG_TAGS):
                for host in LOG_HOSTS[: 2 + t % 2]:
                    for lv, level in enumerate(LOG_LEVELS):
                        events = int(rng.poisson(30 / (lv * 3 + 1)))
                        if events:
                            log_rows.append({"date": day, "minute": minute, "segment": "forward", "tag": tag,
                                             "source": "forward", "host": host, "level": level, "events": events,
                                             "bytes": events * 120})
            for p, template in enumerate(TEMPLATES):
                # pattern 0 appears on the last day only (new); pattern 1 grows day by day
                if (p == 0 and d < len(days) - 1) or (minute // 7 + p) % 5:
                    continue
                count = int(rng.poisson(3 if p != 1 else 3 * (d + 1) ** 2)) + 1
                pid = f"p{p:03d}"
                pattern_rows.append({"date": day, "minute": minute, "tag": LOG_TAGS[p % 3],
                                     "level": LOG_LEVELS[p % 4], "pattern_id": pid, "count": count})
                at = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
                old = patterns.get(pid)
                patterns[pid] = {
                    "pattern_id": pid, "template": template, "first_seen": old["first_seen"] if old else at,
                    "last_seen": at, "count": (old["count"] if old else 0) + count, "level": LOG_LEVELS[p % 4],
                    "tag": LOG_TAGS[p % 3],
                    "samples": (old or {}).get("samples") or [
                        {"message": template.replace("<*>", "42", 1).replace("<*>", "7"), "time": at, "hub": HUB,
                         "segment": "forward", "offset": 1024 * p, "index": 0}]}
    return {"js_exceptions": js, "notifications": notes, "agents": agents, "log_minutes": log_rows,
            "log_patterns": pattern_rows, "patterns": list(patterns.values())}


def write_lake(root: str | Path, requests: pa.Table, batches: int = 2, seed: int = 1, first_batch: int = 1) -> None:
    """The lake of these requests: `batches` committed batches, each aggregating its own share of them (and all
    the small tables in the first)."""
    import duckdb

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    info = root / LAKE_FILE
    if not info.exists():
        import json

        info.write_text(json.dumps({"format": FORMAT, "time_basis": "local", "resources": DEFAULT_RESOURCES.as_json(),
                                    "sketch": {"gamma": sketch.GAMMA}}))
    tables = all_tables()
    con = duckdb.connect()
    log = LakeLog(root)
    for b in range(batches):
        share = _share(requests, b, batches)
        if share.num_rows == 0:
            continue
        reqs = _derived(share)
        con.register("reqs", reqs)
        extras = _extras(share, seed) if b == 0 else {}
        batch_id = first_batch + b
        files: dict[str, list[str]] = {}
        for name, table in tables.items():
            if b > 0 and name not in ("minutes", "totals", "quants", "requests"):
                continue
            if name in ("minutes", "totals"):
                rows = _aggregate(reqs, table)
            elif name == "quants":
                rows = _quants(reqs)
            elif name == "requests":
                result = con.sql(_requests_sql(table.columns))
                rows = result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.arrow()
            else:
                rows = pa.Table.from_pylist(extras[name], pa.schema([(c, arrow_type(t)) for c, t in table.columns]))
            files[name] = _write_table(root, table, rows, batch_id)
        log.commit(Entry(batch_id, files, info={"generated": True}))
    con.close()


def _share(requests: pa.Table, b: int, batches: int) -> pa.Table:
    """Batch b's requests: every batches-th request from the b-th."""
    index = np.arange(requests.num_rows)
    return requests.filter(pa.array(index % batches == b))


def _derived(requests: pa.Table) -> pa.Table:
    """other_time and allocated_memory, as the importer derives them (spec 2.2), and frontend_time."""
    other = requests.column("total_time")
    for r in TIME_PARTS:
        other = pc.subtract(other, requests.column(r))
    t = requests.append_column("other_time", other)
    t = t.append_column("allocated_memory", requests.column("allocated_bytes"))
    return t.append_column("frontend_time", pc.coalesce(requests.column("page_time"), requests.column("ajax_time")))


def _write_table(root: Path, table: Table, rows: pa.Table, batch_id: int) -> list[str]:
    """Write one batch's rows of a table as the pipeline's lake writer does: the table's exact columns, one file per
    partition value (no partition column in the files), sorted by the table's keys, named after the batch; the
    paths relative to the lake."""
    import pyarrow.parquet as pq

    rows = rows.select([c for c, _ in table.columns]).cast(pa.schema([(c, arrow_type(t)) for c, t in table.columns]))
    order = [(c, "ascending") for c in table.sort_columns]
    parts = [("", rows)]
    if table.partition:
        (column,) = table.partition
        parts = [(f"{column}={value}/", rows.filter(pc.equal(rows.column(column), value)).drop_columns([column]))
                 for value in sorted(pc.unique(rows.column(column)).to_pylist())]
    written = []
    for directory, part in parts:
        rel = f"{table.name}/{directory}part-{batch_id:05d}.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part.sort_by(order), root / rel, row_group_size=ROW_GROUP_ROWS, write_page_index=True,
                       max_rows_per_page=PAGE_ROWS)
        written.append(rel)
    return written


# --- the same requests as stored logjam events (what the pipeline reads) ---

def logjam_batches(requests: pa.Table, batch_size: int = 500) -> Iterator[bytes]:
    """Stored batches as the logjam listener writes them: tag `logs.<app>.<env>`, option app_env and topic."""
    from logport.batch import encode_batch

    pending: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    sequence = 0
    for app_env, started_ms, record in logjam_records(requests):
        triples = pending.setdefault(app_env, [])
        triples.append((started_ms // 1000, (started_ms % 1000) * 1_000_000, record))
        if len(triples) >= batch_size:
            sequence += 1
            yield _logjam_batch(app_env, triples, sequence, encode_batch)
            pending[app_env] = []
    for app_env, triples in pending.items():
        if triples:
            sequence += 1
            yield _logjam_batch(app_env, triples, sequence, encode_batch)


def _logjam_batch(app_env: str, triples: list[tuple[int, int, dict[str, Any]]], sequence: int, encode: Any) -> bytes:
    app, env = app_env.rsplit("-", 1)
    return encode(f"logs.{app}.{env}", triples, {"size": len(triples), "source": "logjam", "app_env": app_env,
                                                  "topic": f"logs.{app}.{env}", "sequence": sequence})


def store_requests(data_dir: str | Path, requests: pa.Table, segment: str = "logjam") -> None:
    """Append the requests to a data directory's segment, as a hub's logjam listener stores them."""
    import asyncio

    from logport.config import StoreConfig
    from logport.store import SegmentStore

    async def run() -> None:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), fsync="never"))
        try:
            chunk: list[bytes] = []
            for body in logjam_batches(requests):
                chunk.append(body)
                if len(chunk) >= 64:
                    await store.append(segment, chunk)
                    chunk = []
            if chunk:
                await store.append(segment, chunk)
        finally:
            await store.close()

    asyncio.run(run())


def pipeline_writes_the_lake() -> bool:
    """Whether this checkout's `logport pipeline` writes the lake of lake/tables.py (its table builders,
    logport.spark.logjam and logport.spark.logs, are in); before, tests and the bench write the fixture lake."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("logport.spark.logjam", "logport.spark.logs"))


def build_lake(out: str | Path, data_dir: str | Path, requests: pa.Table, batches: int = 2) -> str:
    """The lake of these requests: by the pipeline over the stored events when it writes the lake, else the fixture
    writer; says which ("pipeline" or "fixture")."""
    import subprocess
    import sys

    if not pipeline_writes_the_lake():
        write_lake(out, requests, batches=batches)
        return "fixture"
    store_requests(data_dir, requests)
    subprocess.run([sys.executable, "-m", "logport.cli", "pipeline", "batch", "--data-dir", str(data_dir),
                    "--out", str(out), "--master", "local[2]", "--quiet"], check=True)
    return "pipeline"
