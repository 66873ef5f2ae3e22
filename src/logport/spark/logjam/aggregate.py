"""The aggregate tables: `minutes` and `totals` (specs 3, 4.3 and the 1% sketches), `quants` (4.2), `agents` (6.6).

Each counted message is aggregated once per page and minute: numeric columns (counts, resource sums, squares and
maxima, apdex buckets) in one aggregation, the counter maps and histograms as (map, key) entries counted in another.
Both are small, and roll up from there: to the page's module and all_pages (the scopes), and from minutes to the
day.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from logport.lake.resources import Resources
from logport.lake.sketch import GAMMA, HIST_BOUNDS, ZERO_KEY
from logport.lake.tables import APDEX_BUCKETS, COUNTER_MAPS, DISTRIBUTED
from logport.spark.logjam.fields import AJAX, JS, PAGE, REQUEST, quoted

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

Cache = Callable[["DataFrame"], "DataFrame"]  # persists a DataFrame for the batch and returns it

ALL_PAGES = "all_pages"
PAGE_KEYS = ("app", "env", "date", "minute", "page", "module")
# The map columns, by index in an entry (the counter maps, then the histograms, then the sketches).
MAPS = (*COUNTER_MAPS, *(f"{r}_hist" for r in DISTRIBUTED), *(f"{r}_sketch" for r in DISTRIBUTED))
INT_KEYED = frozenset(m for m in MAPS if m.endswith(("_hist", "_sketch")))
# Apdex limits (ms, specs 3.4): happy below the first, satisfied below the second, tolerating below the third,
# frustrated at or above it.
APDEX_LIMITS = {"apdex": (100, 500, 2000), "fapdex": (500, 2000, 8000), "papdex": (500, 2000, 8000),
                "xapdex": (500, 2000, 8000)}
# Quants (specs 4.2): kind by resource group; allocated_bytes bucketed in KB (1024 x bound).
QUANT_KINDS = {"time": "t", "frontend": "f"}
QUANT_MEMORY = ("allocated_objects", "allocated_bytes")
UNKNOWN_METHOD = "#unknown_method"


def hist_index_sql(v: str) -> str:
    """logjam's bucket of a value > 0: the index of the smallest bound >= it (0 up to 1, 21 above 3e10).

    With k = floor(log10(v)), v is in (10^k, 3 * 10^k] (index 2k + 1) or above (2k + 2), or 10^k itself when log10
    rounded up (2k); comparing with the bounds, not trusting log10 at them, keeps a bound in its own bucket.
    """
    k = f"floor(log10({v}))"
    index = (f"CASE WHEN {v} <= power(10, {k}) THEN 2 * {k} WHEN {v} <= 3 * power(10, {k}) THEN 2 * {k} + 1 "
             f"ELSE 2 * {k} + 2 END")
    return f"CAST(least({len(HIST_BOUNDS) - 1}, greatest(0, {index})) AS INT)"


BOUNDS_SQL = "array(" + ", ".join(f"{b!r}D" for b in HIST_BOUNDS) + ")"


def sketch_key_sql(v: str) -> str:
    """lake/sketch.py's key: ceil(ln(v) / ln(GAMMA)), ZERO_KEY for values <= 0."""
    return f"CASE WHEN {v} > 0 THEN CAST(ceil(ln({v}) / {math.log(GAMMA)!r}D) AS INT) ELSE {ZERO_KEY} END"


def stats_rows(msgs: DataFrame, frontend: DataFrame, resources: Resources) -> DataFrame:
    """One row per counted request, accepted frontend message and JS error, with what the aggregates read."""
    from pyspark.sql import functions as F

    counted = F.col("status").isNull()
    res = [f"r_{n}" for n in resources.names]
    none = {"response_code": "int", "severity": "int", "exceptions": "array<string>",
            "soft_exceptions": "array<string>", "caller": "string", "sender": "string", "description": "string",
            "papdex": "double"}

    def with_nulls(df: DataFrame, have: dict[str, Column]) -> DataFrame:
        cols = [F.col(k) for k in ("app", "env", "date", "minute", "page", "module", "kind", *res)]
        cols += [have.get(name, F.lit(None).cast(kind)).alias(name) for name, kind in none.items()]
        return df.select(*cols)

    backend = with_nulls(msgs.where(counted & (F.col("kind") == REQUEST)), {
        "response_code": F.col("response_code"), "severity": F.col("severity"),
        "exceptions": F.array_distinct("exceptions"), "soft_exceptions": F.array_distinct("soft_exceptions"),
        "caller": F.col("caller"), "sender": F.col("sender")})
    js = with_nulls(msgs.where(counted & (F.col("kind") == JS)).selectExpr(
        *[c for c in msgs.columns if c not in res], *[f"CAST(NULL AS double) AS {c}" for c in res]),
        {"description": F.col("description")})
    return backend.unionByName(with_nulls(frontend, {"papdex": F.col("papdex")})).unionByName(js)


def _apdex(family: str, v: str) -> list[str]:
    """The four buckets of a family; happy is a part of satisfied (specs 3.4)."""
    happy, satisfied, tolerated = APDEX_LIMITS[family]
    conds = {"happy": f"{v} < {happy}", "satisfied": f"{v} < {satisfied}",
             "tolerating": f"{v} >= {satisfied} AND {v} < {tolerated}", "frustrated": f"{v} >= {tolerated}"}
    return [f"count_if(coalesce({conds[b]}, false)) AS {family}_{b}" for b in APDEX_BUCKETS]


def page_numbers(stats: DataFrame, resources: Resources) -> DataFrame:
    """Per page and minute: counts, every resource's sum, sum of squares and maximum, apdex buckets."""
    from pyspark.sql import functions as F

    sums = [f"count_if(kind = {REQUEST}) AS count", f"count_if(kind = {PAGE}) AS page_count",
            f"count_if(kind = {AJAX}) AS ajax_count"]
    for r in resources.names:
        v = f"r_{r}"
        sums += [f"sum({v}) AS {quoted(r)}", f"sum({v} * {v}) AS {quoted(r + '_sq')}", f"max({v}) AS {quoted(r + '_max')}"]
    values = {"apdex": f"CASE WHEN kind = {REQUEST} THEN r_total_time END",
              "fapdex": f"CASE WHEN kind = {PAGE} THEN r_page_time WHEN kind = {AJAX} THEN r_ajax_time END",
              "papdex": f"CASE WHEN kind = {PAGE} THEN papdex END",
              "xapdex": f"CASE WHEN kind = {AJAX} THEN r_ajax_time END"}
    for family, v in values.items():
        sums += _apdex(family, v)
    return stats.groupBy(*PAGE_KEYS).agg(*[F.expr(e) for e in sums])


def _entry(m: str, s: Column | None = None, i: Column | None = None) -> Column:
    from pyspark.sql import functions as F

    return F.struct(F.lit(MAPS.index(m)).cast("tinyint").alias("m"),
                    (s if s is not None else F.lit(None)).cast("string").alias("s"),
                    (i if i is not None else F.lit(None)).cast("int").alias("i"))


def _entry_of(m: str) -> Callable[[Column], Column]:
    return lambda x: _entry(m, s=x)


def page_entries(stats: DataFrame) -> DataFrame:
    """Per page and minute: how many messages have each key of each map (a response code, an exception, a
    histogram bucket, a sketch bucket, ...): (m, s or i, n)."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    single = []
    for r, k in (("total_time", REQUEST), ("page_time", PAGE), ("ajax_time", AJAX)):
        v = F.col(f"r_{r}")
        single += [F.when((kind == k) & (v > 0), _entry(f"{r}_hist", i=F.expr(hist_index_sql(f"r_{r}")))),
                   F.when((kind == k) & v.isNotNull(), _entry(f"{r}_sketch", i=F.expr(sketch_key_sql(f"r_{r}"))))]
    single += [
        F.when(kind == REQUEST, _entry("response", s=F.col("response_code"))),
        F.when(kind == REQUEST, _entry("severity", s=F.col("severity"))),
        F.when(F.col("caller").isNotNull(), _entry("callers", s=F.col("caller"))),
        F.when(F.col("sender").isNotNull(), _entry("senders", s=F.col("sender"))),
        F.when(kind == JS, _entry("js_exceptions", s=F.col("description"))),
    ]
    many = [F.transform(F.coalesce(name, F.array()), _entry_of(name)) for name in ("exceptions", "soft_exceptions")]
    entries = F.concat(F.filter(F.array(*single), lambda e: e.isNotNull()), *many)
    return (stats.select(*PAGE_KEYS, F.explode(entries).alias("e"))
            .groupBy(*PAGE_KEYS, "e.m", "e.s", "e.i").agg(F.count(F.lit(1)).alias("n")))


def _scopes(df: DataFrame, keep_action: Column) -> DataFrame:
    """Each page row three times: as the page (scope action, when keep_action), its module and all_pages."""
    from pyspark.sql import functions as F

    scopes = F.array(
        F.when(keep_action, F.struct(F.lit("action").alias("scope"), F.col("page").alias("p"))),
        F.struct(F.lit("module").alias("scope"), F.col("module").alias("p")),
        F.struct(F.lit("all").alias("scope"), F.lit(ALL_PAGES).alias("p")))
    out = df.select("*", F.explode(F.filter(scopes, lambda s: s.isNotNull())).alias("sc"))
    return out.drop("page", "module").withColumn("scope", F.col("sc.scope")).withColumn("page", F.col("sc.p")) \
        .drop("sc")


def _number_aggregates(resources: Resources) -> list[Column]:
    from pyspark.sql import functions as F

    sums = [f"sum({c}) AS {c}" for c in ("count", "page_count", "ajax_count")]
    for r in resources.names:
        sums += [f"sum({quoted(c)}) AS {quoted(c)}" for c in (r, f"{r}_sq")] + [f"max({quoted(r + '_max')}) AS {quoted(r + '_max')}"]
    sums += [f"sum({f}_{b}) AS {f}_{b}" for f in APDEX_LIMITS for b in APDEX_BUCKETS]
    return [F.expr(e) for e in sums]


def _maps(entries: DataFrame, keys: list[str]) -> DataFrame:
    """The (m, s|i, n) entries of each key as one map column per map (null when empty)."""
    from pyspark.sql import functions as F

    cols = []
    for index, name in enumerate(MAPS):
        key = F.col("i") if name in INT_KEYED else F.col("s")
        pairs = F.collect_list(F.when(F.col("m") == index, F.struct(key.alias("k"), F.col("n").alias("v"))))
        cols.append(F.map_from_entries(pairs).alias(name))
    grouped = entries.groupBy(*keys).agg(*cols)
    return grouped.select(*keys, *[F.when(F.size(name) > 0, F.col(name)).alias(name) for name in MAPS])


def minutes_and_totals(stats: DataFrame, resources: Resources, cache: Cache) -> tuple[DataFrame, DataFrame]:
    """`minutes` and `totals` (per scope; totals rolled up from the same page-level aggregates)."""
    from pyspark.sql import functions as F

    numbers = cache(page_numbers(stats, resources))
    entries = cache(page_entries(stats))
    # JS errors count on a page only when it is not #unknown_method (specs 3.1); a page that has nothing else
    # then has no action row
    known = ~F.col("page").contains(UNKNOWN_METHOD)
    others = (F.col("count") + F.col("page_count") + F.col("ajax_count")) > 0
    scoped_numbers = _scopes(numbers, known | others)
    scoped_entries = _scopes(entries, known | (F.col("m") != MAPS.index("js_exceptions")))

    def table(keys: list[str]) -> DataFrame:
        nums = scoped_numbers.groupBy(*keys).agg(*_number_aggregates(resources))
        nums = nums.withColumn("frontend_count", F.col("page_count") + F.col("ajax_count"))
        counts = scoped_entries.groupBy(*keys, "m", "s", "i").agg(F.sum("n").alias("n"))
        return nums.join(_maps(counts, keys), keys, "left")

    day_keys = ["app", "env", "date", "scope", "page"]
    return table(day_keys[:3] + ["minute"] + day_keys[3:]), table(day_keys)


def quants(stats: DataFrame, resources: Resources) -> DataFrame:
    """Per page (and all_pages) and day: how many requests had each resource in each of logjam's buckets (values
    > 0; kinds t, m, f; allocated_bytes in KB, stored as 1024 x bound)."""
    from pyspark.sql import functions as F

    names: list[str] = []
    items = []
    for r in resources.names:
        group = resources.group_of(r)
        kind = QUANT_KINDS.get(group or "") or ("m" if r in QUANT_MEMORY else None)
        if kind is not None:
            unit = 1024 if r == "allocated_bytes" else 1
            items.append(f"named_struct('kind', '{kind}', 'r', {len(names)}S, 'unit', {unit}D, 'v', r_{r})")
            names.append(r)
    bucket = f"element_at({BOUNDS_SQL}, {hist_index_sql('x.v / x.unit')} + 1) * x.unit"
    buckets = F.expr(f"transform(filter(array({', '.join(items)}), x -> x.v > 0), "
                     f"x -> named_struct('kind', x.kind, 'r', x.r, 'quant', {bucket}))")
    counted = stats.where(F.col("kind") != JS).select("app", "env", "date", "page", F.explode(buckets).alias("q"))
    per_page = counted.groupBy("app", "env", "date", "page", "q.kind", "q.r", "q.quant").agg(
        F.count(F.lit(1)).alias("count"))
    all_pages = per_page.groupBy("app", "env", "date", "kind", "r", "quant").agg(F.sum("count").alias("count")) \
        .withColumn("page", F.lit(ALL_PAGES))
    both = per_page.unionByName(all_pages)
    return both.withColumn("resource", F.expr(f"element_at(array({', '.join(repr(n) for n in names)}), r + 1)"))


def agents(msgs: DataFrame, outcomes: DataFrame) -> DataFrame:
    """Per user agent and day: backend requests, frontend messages, those dropped and why (specs 6.6)."""
    from pyspark.sql import functions as F

    keys = ["app", "env", "date", "user_agent"]
    backend = msgs.where(F.col("status").isNull() & (F.col("kind") == REQUEST) & F.col("user_agent").isNotNull()) \
        .groupBy(*keys).agg(F.count(F.lit(1)).alias("n")).withColumn("reason", F.lit(None).cast("string"))
    frontend = outcomes.where(F.col("user_agent").isNotNull()).groupBy(*keys, "reason").agg(
        F.count(F.lit(1)).alias("n"))
    both = backend.unionByName(frontend)
    reason = F.col("reason")
    dropped = reason.isNotNull() & (reason != "accepted")
    out = both.groupBy(*keys).agg(
        F.sum(F.when(reason.isNull(), F.col("n")).otherwise(0)).alias("backend"),
        F.sum(F.when(reason.isNotNull(), F.col("n")).otherwise(0)).alias("frontend"),
        F.sum(F.when(dropped, F.col("n")).otherwise(0)).alias("dropped"),
        F.map_from_entries(F.collect_list(F.when(dropped, F.struct(reason, F.col("n"))))).alias("drop_reasons"))
    return out.withColumn("drop_reasons", F.when(F.size("drop_reasons") > 0, F.col("drop_reasons")))
