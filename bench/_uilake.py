"""Generated logjam traffic for `logport ui`'s tests and `logport bench ui`: the requests (one Arrow row each), the
same requests as stored logjam events in a data directory (what `logport pipeline` reads), and a lake written
from them without Spark (a fixture for the UI's unit tests, exactly per lake/tables.py and lake/log.py; the real
lake is the pipeline's).

The fixture lake aggregates with DuckDB over the requests, each batch on its own (a key has rows from several
batches, as the pipeline's batches leave them), writes Parquet partitioned by `date` as Spark does (no `date`
column in the files) and commits each batch with a log entry.
"""

from __future__ import annotations

import datetime as dt
import math
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from logport.lake import sketch
from logport.lake.log import FORMAT, LAKE_FILE, Entry, LakeLog
from logport.lake.resources import DEFAULT_RESOURCES
from logport.lake.tables import all_tables

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
# the time resources the generator fills (others stay null: a message without them)
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
            exception = np.where(has_exception, np.array(EXCEPTIONS)[rng.integers(0, len(EXCEPTIONS), n)], None)
            caller = np.where(rng.random(n) < 0.05, f"{app_envs[(a + 1) % len(app_envs)].rsplit('-', 1)[0]}"
                              "@Gateway#forward", None)
            second = rng.integers(0, 60, n)
            millis = rng.integers(0, 1000, n)
            stamps = [f"{day}T{m // 60:02d}:{m % 60:02d}:{s:02d}.{ms:03d}+00:00"
                      for m, s, ms in zip(minute.tolist(), second.tolist(), millis.tolist(), strict=True)]
            epoch = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp()
            started_ms = (epoch * 1000 + minute.astype(np.int64) * 60_000 + second * 1000 + millis).astype(np.int64)
            page_time = np.where(rng.random(n) < 0.3, total * 3 + rng.lognormal(6.5, 0.7, n), np.nan)
            ajax_time = np.where(rng.random(n) < 0.2, total + rng.lognormal(4.5, 0.6, n), np.nan)
            cols: dict[str, Any] = {
                "app": pa.array([app] * n), "env": pa.array([env] * n), "date": pa.array([day] * n),
                "minute": minute, "started_at": pa.array(stamps), "started_ms": started_ms,
                "page": pa.array(np.array(names, dtype=object)[page_i]),
                "response_code": code, "severity": severity, "total_time": np.round(total, 3),
            }
            for i, r in enumerate(TIME_PARTS):
                cols[r] = np.round(total * shares[:, i], 3)
            cols["db_calls"] = rng.poisson(cols["db_time"] / 5 + 1).astype(np.float64)
            cols["memcache_calls"] = rng.poisson(3, n).astype(np.float64)
            cols["allocated_objects"] = np.round(total * rng.uniform(50, 200, n))
            cols["allocated_bytes"] = cols["allocated_objects"] * 40
            cols["heap_growth"] = np.where(rng.random(n) < 0.01, rng.uniform(1e6, 5e6, n), 0.0)
            cols["exception"] = pa.array(exception.tolist(), pa.string())
            cols["caller"] = pa.array(caller.tolist(), pa.string())
            cols["page_time"] = pa.array(page_time, mask=np.isnan(page_time))
            cols["ajax_time"] = pa.array(ajax_time, mask=np.isnan(ajax_time))
            cols["request_id"] = pa.array([f"{offset + i:032x}" for i in range(n)])
            cols["host"] = pa.array(np.array(LOG_HOSTS[:2], dtype=object)[rng.integers(0, 2, n)])
            cols["offset"] = np.arange(offset, offset + n, dtype=np.int64) * 512
            offset += n
            parts.append(pa.table(cols))
    table = pa.concat_tables(parts)
    module = pa.array([module_of(p) for p in table.column("page").unique().to_pylist()])
    lookup = dict(zip(table.column("page").unique().to_pylist(), module.to_pylist(), strict=True))
    return table.append_column("module", pa.array([lookup[p] for p in table.column("page").to_pylist()]))


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


# --- the fixture lake (DuckDB over the requests) ---

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


BOUNDS_SQL = "[" + ", ".join(repr(b) for b in sketch.HIST_BOUNDS) + "]"


def _hist(v: str) -> str:
    return f"least({len(sketch.HIST_BOUNDS) - 1}, list_count(list_filter({BOUNDS_SQL}, lambda b: b < {v})))"


def _sketch(v: str) -> str:
    return f"CASE WHEN {v} > 0 THEN ceil(ln({v}) / ln({sketch.GAMMA}))::INTEGER ELSE {sketch.ZERO_KEY} END"


APDEX = {"apdex": ("total_time", 100, 500, 2000), "fapdex": ("coalesce(page_time, ajax_time)", 500, 2000, 8000),
         "papdex": ("page_time", 500, 2000, 8000), "xapdex": ("ajax_time", 500, 2000, 8000)}
FILLED = (*TIME_PARTS, "total_time", "other_time", "db_calls", "memcache_calls", "allocated_objects",
          "allocated_bytes", "allocated_memory", "heap_growth", "page_time", "ajax_time", "frontend_time")
# counter maps: the key expression per request (null: nothing counted)
MAP_KEYS = {"response": "CAST(response_code AS VARCHAR)", "severity": "CAST(severity AS VARCHAR)",
            "exceptions": "exception", "callers": "caller"}
HISTS = {"total_time": "total_time", "page_time": "page_time", "ajax_time": "ajax_time"}


def _aggregate_sql(keys: Sequence[str], source: str, values: Sequence[tuple[str, str]]) -> str:
    """SELECT of one aggregate table's rows (minutes or totals) from `source` (the exploded requests)."""
    key_list = ", ".join(keys)
    exprs: dict[str, str] = {
        "count": "count(*)", "page_count": "count(page_time)", "ajax_count": "count(ajax_time)",
        "frontend_count": "count(page_time) + count(ajax_time)",
    }
    for r in FILLED:
        exprs[r] = f"sum({r})"
        exprs[f"{r}_sq"] = f"sum({r} * {r})"
        exprs[f"{r}_max"] = f"max({r})"
    for family, (v, happy, satisfied, tolerating) in APDEX.items():
        exprs[f"{family}_happy"] = f"count(*) FILTER ({v} < {happy})"
        exprs[f"{family}_satisfied"] = f"count(*) FILTER ({v} < {satisfied})"
        exprs[f"{family}_tolerating"] = f"count(*) FILTER ({v} >= {satisfied} AND {v} < {tolerating})"
        exprs[f"{family}_frustrated"] = f"count(*) FILTER ({v} >= {tolerating})"
    maps = {**MAP_KEYS, **{f"{r}_hist": _hist(v) for r, v in HISTS.items()},
            **{f"{r}_sketch": _sketch(v) for r, v in HISTS.items()}}
    joins = []
    for name, key in maps.items():
        resource = name.rsplit("_", 1)[0]
        where = (f"{HISTS[resource]} > 0" if name.endswith("_hist") else
                 f"{HISTS[resource]} IS NOT NULL" if name.endswith("_sketch") else f"{key} IS NOT NULL")
        joins.append(f"LEFT JOIN (SELECT {key_list}, map_from_entries(list({{'key': k, 'value': n}})) AS {name} "
                     f"FROM (SELECT {key_list}, {key} AS k, count(*) AS n FROM {source} WHERE {where} "
                     f"GROUP BY ALL) GROUP BY ALL) USING ({key_list})")
    inner = ", ".join(f"{exprs[c]} AS {c}" for c, _ in values if c in exprs)
    computed = {c for c, _ in values if c in exprs} | set(maps)
    select = ", ".join(f"{c if c in computed else 'NULL'}::{_duck_type(t)} AS {c}" for c, t in values)
    return (f"SELECT {key_list}, {select} FROM (SELECT {key_list}, {inner} FROM {source} GROUP BY ALL) "
            + " ".join(joins))


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


def _quants_sql() -> str:
    kinds = [("t", r, r) for r in (*TIME_PARTS, "total_time")] + [("f", "page_time", "page_time"),
                                                                  ("f", "ajax_time", "ajax_time"),
                                                                  ("m", "allocated_objects", "allocated_objects")]
    arms = [f"SELECT app, env, date, p AS page, '{k}' AS kind, '{r}' AS resource, "
            f"{BOUNDS_SQL}[{_hist(v)} + 1] AS quant FROM reqs, unnest([page, 'all_pages']) t(p) WHERE {v} > 0"
            for k, r, v in kinds]
    arms.append("SELECT app, env, date, p, 'm', 'allocated_bytes', 1024 * "
                f"{BOUNDS_SQL}[{_hist('allocated_bytes / 1024')} + 1] FROM reqs, unnest([page, 'all_pages']) t(p) "
                "WHERE allocated_bytes > 0")
    return ("SELECT app, env, date, page, kind, resource, quant, count(*)::BIGINT AS count FROM ("
            + " UNION ALL ".join(arms) + ") GROUP BY ALL")


def _table_sql(name: str, columns: Sequence[tuple[str, str]]) -> str:
    """The fixture's SELECT for one table, in its exact columns and types."""
    if name in ("minutes", "totals"):
        keys = ["app", "env", "date", "minute", "scope", "page"] if name == "minutes" else \
            ["app", "env", "date", "scope", "page"]
        key_types = dict(columns)
        sql = _aggregate_sql(keys, "exploded", [c for c in columns if c[0] not in keys])
        return f"SELECT {', '.join(f'{k}::{_duck_type(key_types[k])} AS {k}' for k in keys)}, * EXCLUDE ({', '.join(keys)}) " \
               f"FROM ({sql})"
    if name == "requests":
        return _requests_sql(columns)
    if name == "quants":
        return _quants_sql()
    select = ", ".join(f'"{c}"::{_duck_type(t)} AS "{c}"' for c, t in columns)
    return f"SELECT {select} FROM {name}_src"


def _extras(con: Any, requests: pa.Table, seed: int) -> None:
    """Source tables of the small tables: JS errors, agent events, user agents and the log tables."""
    rng = np.random.default_rng(seed)
    keys = con.execute("SELECT DISTINCT app, env, date FROM reqs ORDER BY ALL").fetchall()
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
    con.register("js_exceptions_src", pa.Table.from_pylist(js))
    con.register("notifications_src", pa.Table.from_pylist(notes))
    con.register("agents_src", pa.Table.from_pylist(agents))
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
    con.register("log_minutes_src", pa.Table.from_pylist(log_rows))
    con.register("log_patterns_src", pa.Table.from_pylist(pattern_rows))
    con.register("patterns_src", pa.Table.from_pylist(list(patterns.values())))


def write_lake(root: str | Path, requests: pa.Table, batches: int = 2, seed: int = 1, first_batch: int = 1) -> None:
    """The lake of these requests: `batches` committed batches, each aggregating its own share of them (and all
    the small tables in the first)."""
    import duckdb

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    info = root / LAKE_FILE
    if not info.exists():
        import json

        info.write_text(json.dumps({"format": FORMAT, "time": "local", "resources": DEFAULT_RESOURCES.as_json(),
                                    "sketch": {"gamma": sketch.GAMMA}}))
    tables = all_tables()
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    log = LakeLog(root)
    for b in range(batches):
        share = _share(requests, b, batches)
        if share.num_rows == 0:
            continue
        con.register("reqs", _derived(share))
        con.execute("CREATE OR REPLACE TEMP TABLE exploded AS SELECT * EXCLUDE (page, module), s.scope AS scope, "
                    "s.page AS page FROM reqs, unnest([{'scope': 'action', 'page': page}, "
                    "{'scope': 'module', 'page': module}, {'scope': 'all', 'page': 'all_pages'}]) t(s)")
        if b == 0:
            _extras(con, share, seed)
        batch_id = first_batch + b
        files: dict[str, list[str]] = {}
        for name, table in tables.items():
            if b > 0 and name not in ("minutes", "totals", "quants", "requests"):
                continue
            files[name] = _write_table(con, root, name, _table_sql(name, table.columns), table.partition, batch_id)
        log.commit(Entry(batch_id, files, info={"generated": True}))
    con.close()


def _share(requests: pa.Table, b: int, batches: int) -> pa.Table:
    """Batch b's requests: every batches-th request from the b-th."""
    index = np.arange(requests.num_rows)
    return requests.filter(pa.array(index % batches == b))


def _derived(requests: pa.Table) -> pa.Table:
    """other_time and allocated_memory, as the importer derives them (spec 2.2), and frontend_time."""
    import pyarrow.compute as pc

    other = requests.column("total_time")
    for r in TIME_PARTS:
        other = pc.subtract(other, requests.column(r))
    t = requests.append_column("other_time", other)
    t = t.append_column("allocated_memory", requests.column("allocated_bytes"))
    return t.append_column("frontend_time", pc.coalesce(requests.column("page_time"), requests.column("ajax_time")))


def _write_table(con: Any, root: Path, name: str, sql: str, partition: tuple[str, ...], batch_id: int) -> list[str]:
    """Write one batch's rows of a table as Spark does (hive partitions, no partition column in the files),
    under names of this batch; the paths relative to the lake."""
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
    try:
        part = f", PARTITION_BY ({', '.join(partition)})" if partition else ""
        target = staging if partition else staging / "part.parquet"
        con.execute(f"COPY ({sql}) TO '{target}' (FORMAT parquet{part})")
        written = []
        for path in sorted(staging.rglob("*.parquet")):
            rel = path.relative_to(staging)
            dest = root / name / rel.parent / f"part-{batch_id:05d}-{rel.stem}.parquet"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, dest)
            written.append(str(dest.relative_to(root)))
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
