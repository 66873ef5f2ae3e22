"""The detail tables: stored ("interesting") requests by logjam's rules and limits (specs 5.1-5.3), JavaScript
errors (6.7) and agent events (7), each with its provenance (hub, segment, offset, index).

Requests beyond a stream's `max_inserts_per_second` in one second of `started_ms` are not stored; the counts of the
last 5 minutes' seconds are state, so a second split between two batches is capped as a whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from logport.lake.resources import Resources
from logport.spark.logjam.fields import EVENT, JS, REQUEST, VARIANT_FIELDS, integer, text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from logport.spark.logjam.streams import StreamColumns

MAX_LINES = 10_001  # more lines keep the first and last LINES_KEPT and a marker (logjam-util.c:613-655)
LINES_KEPT = 5_000
DROPPED_LINES = "... LINES DROPPED BY IMPORTER ..."
MAX_STRING_BYTES = 10_000  # longer strings are cut on a UTF-8 boundary, with TRUNCATED appended
TRUNCATED = " ...[TRUNCATED]"
UNKNOWN_DESCRIPTION = "------ unknown ------"
LINES = "array<struct<severity:int,time:string,text:string>>"
CAP_STATE_SECONDS = 300  # a stream's insert counts kept for the seconds of the last 5 minutes
INSERT_COUNT_COLUMNS = ("stream", "second", "count")
PROVENANCE = ("hub", "segment", "offset", "index")
# A stored request's fields with a column of their own: not repeated in `fields`.
OWN_COLUMNS = (*VARIANT_FIELDS, "lines", "started_at", "started_ms", "request_id", "exceptions", "soft_exceptions",
               "caller_id", "caller_action", "sender_id", "sender_action", "host")


def cut(s: str) -> str:
    """A string cut to MAX_STRING_BYTES of UTF-8 (on a character's boundary) with TRUNCATED appended."""
    data = s.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_STRING_BYTES:
        return s
    return data[:MAX_STRING_BYTES].decode("utf-8", "ignore") + TRUNCATED


def _cut_json(value: object) -> object:
    if isinstance(value, str):
        return cut(value)
    if isinstance(value, list):
        return [_cut_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _cut_json(v) for k, v in value.items()}
    return value


def cut_json_strings(document: str | None) -> str | None:
    """A JSON document with every string value cut as `cut` does (keys are kept)."""
    import orjson

    if document is None:
        return None
    return orjson.dumps(_cut_json(orjson.loads(document))).decode()


def line(v: Column) -> Column:
    """A log line [level, time, text] as struct(severity, time, text); a level that is null is null."""
    from pyspark.sql import functions as F

    level = F.try_variant_get(v, "$[0]", "variant")
    return F.struct(F.when(level.isNotNull() & ~F.is_variant_null(level), integer(level)).alias("severity"),
                    text(F.try_variant_get(v, "$[1]", "variant")).alias("time"),
                    text(F.try_variant_get(v, "$[2]", "variant")).alias("text"))


def limited_lines(lines: Column) -> Column:
    """Lines beyond MAX_LINES: the first and last LINES_KEPT, and the one after the first ones as the marker."""
    from pyspark.sql import functions as F

    n = F.size(lines)
    marker = F.try_element_at(lines, F.lit(LINES_KEPT + 1)).withField("text", F.lit(DROPPED_LINES))
    return F.when(n > MAX_LINES, F.concat(F.slice(lines, 1, LINES_KEPT), F.array(marker),
                                          F.slice(lines, n - (LINES_KEPT - 1), F.lit(LINES_KEPT)))).otherwise(lines)


def description(lines: Column, severity: Column) -> Column:
    """The text of the first line at or above the request's severity (logjam's error feed), else unknown."""
    from pyspark.sql import functions as F

    first = F.try_element_at(F.filter(lines, lambda ln: ln["severity"] >= severity), F.lit(1))
    return F.coalesce(first["text"], F.lit(UNKNOWN_DESCRIPTION))


def capped(candidates: DataFrame, counts_in: DataFrame | None, streams: StreamColumns,
           clock_us: int | None) -> tuple[DataFrame, DataFrame]:
    """(the candidates within their stream's max_inserts_per_second, the insert counts for the next batch)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ms = F.coalesce(F.col("started_ms"), F.unix_millis("time"))
    keyed = candidates.withColumn("second", F.floor(ms / 1000)).withColumn("ms", ms)
    order = Window.partitionBy("stream", "second").orderBy("ms", *PROVENANCE)
    ranked = keyed.withColumn("rank", F.row_number().over(order))
    if counts_in is not None:
        earlier = counts_in.select("stream", "second", F.col("count").alias("earlier"))
        ranked = ranked.join(earlier, ["stream", "second"], "left")
    else:
        ranked = ranked.withColumn("earlier", F.lit(0).cast("bigint"))
    kept = ranked.where(F.coalesce("earlier", F.lit(0)) + F.col("rank") <= streams.max_inserts_per_second)
    counts = keyed.groupBy("stream", "second").agg(F.count(F.lit(1)).alias("count"))
    if counts_in is not None:
        counts = counts.unionByName(counts_in.select(*INSERT_COUNT_COLUMNS)).groupBy("stream", "second") \
            .agg(F.sum("count").alias("count"))
    if clock_us is not None:
        counts = counts.where(F.col("second") >= F.lit(clock_us // 1_000_000 - CAP_STATE_SECONDS))
    return kept.drop("second", "ms", "rank", "earlier"), counts.select(*INSERT_COUNT_COLUMNS)


def _cut_lines(lines: list[Any] | None) -> list[tuple[Any, Any, Any]] | None:
    """Log lines (Rows of severity, time, text) with their texts cut."""
    return None if lines is None else [(ln["severity"], ln["time"], cut(ln["text"]) if isinstance(ln["text"], str)
                                        else ln["text"]) for ln in lines]


def _cut_texts(texts: list[str | None] | None) -> list[str | None] | None:
    return None if texts is None else [None if t is None else cut(t) for t in texts]


def _strings_cut(df: DataFrame, long: Column, columns: dict[str, Column]) -> DataFrame:
    """`df` with `columns` added; on the rare rows where `long` holds, every string value in them cut (Python
    functions, run on those rows only)."""
    from pyspark.sql import functions as F

    out = df.where(~long).select("*", *[c.alias(n) for n, c in columns.items()])
    kinds = dict(out.dtypes)
    udfs: dict[str, tuple[Callable[..., object], str]] = {
        "string": (cut, "string"), "array<string>": (_cut_texts, "array<string>"), LINES: (_cut_lines, LINES)}
    cut_cols = {}
    for name, c in columns.items():
        kind = kinds[name]
        if name == "fields":
            cut_cols[name] = F.udf(cut_json_strings, "string")(c)
        elif kind in udfs:
            function, returns = udfs[kind]
            cut_cols[name] = F.udf(function, returns)(c)
        else:
            cut_cols[name] = c
    return out.unionByName(df.where(long).select("*", *[c.alias(n) for n, c in cut_cols.items()]))


def _longest(c: Column | str) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.octet_length(c), F.lit(0)) > MAX_STRING_BYTES


def requests(msgs: DataFrame, resources: Resources, streams: StreamColumns, counts_in: DataFrame | None,
             clock_us: int | None) -> tuple[DataFrame, DataFrame]:
    """(the `requests` table, the insert counts state)."""
    from pyspark.sql import functions as F

    candidates = msgs.where(F.col("status").isNull() & (F.col("kind") == REQUEST) & (F.size("reasons") > 0))
    kept, counts = capped(candidates, counts_in, streams, clock_us)
    lines = F.transform(F.try_variant_get("record", "$.lines", "array<variant>"), line)
    names = resources.names
    metrics = F.expr("map_filter(map_from_arrays(array(" + ", ".join(f"'{n}'" for n in names) + "), array("
                     + ", ".join(f"r_{n}" for n in names) + ")), (k, v) -> v IS NOT NULL AND v != 0)")
    others = F.variant_delete("record", *[f"$['{n}']" for n in (*OWN_COLUMNS, *names)])
    with_lines = kept.select("*", lines.alias("all_lines"))
    fields = F.to_json(others)
    long = (_longest(fields) | _longest("url") | _longest("user_agent") | _longest("page") | _longest("host")
            | F.exists(F.coalesce("all_lines", F.array()), lambda x: _longest(x["text"]))
            | F.exists(F.coalesce("exceptions", F.array()), _longest)
            | F.exists(F.coalesce("soft_exceptions", F.array()), _longest))
    shaped = _strings_cut(with_lines, F.coalesce(long, F.lit(False)), {
        "lines_": limited_lines(F.col("all_lines")), "fields": fields, "page_": F.col("page"), "url_": F.col("url"),
        "user_agent_": F.col("user_agent"), "host_": F.col("host"), "exceptions_": F.col("exceptions"),
        "soft_exceptions_": F.col("soft_exceptions"), "description_": description(F.col("all_lines"), F.col("severity"))})
    table = shaped.select(
        "app", "env", "date", "minute", "request_id", "started_at", "started_ms", "time",
        F.col("page_").alias("page"), "module", "response_code", "severity", "total_time", "reasons",
        F.col("exceptions_").alias("exceptions"), F.col("soft_exceptions_").alias("soft_exceptions"),
        "caller_id", "caller_action", "sender_id", "sender_action", F.col("user_agent_").alias("user_agent"),
        F.col("url_").alias("url"), F.col("host_").alias("host"), metrics.alias("metrics"),
        F.col("lines_").alias("lines"), F.col("description_").alias("description"),
        "fields", *PROVENANCE)
    return table, counts


def js_exceptions(msgs: DataFrame) -> DataFrame:
    """Every counted JavaScript error with its message; request_id: its backend request's (logjam_request_id is
    `<app>-<env>-<request id>`)."""
    from pyspark.sql import functions as F

    errors = msgs.where(F.col("status").isNull() & (F.col("kind") == JS))
    fields = F.to_json("record")
    return _strings_cut(errors, _longest(fields), {"fields_": fields, "description_": F.col("description")}).select(
        "app", "env", "date", "minute", "started_at", "time", "page", F.col("description_").alias("description"),
        "logjam_request_id", F.substring_index("logjam_request_id", "-", -1).alias("request_id"), "user_agent",
        F.col("fields_").alias("fields"), *PROVENANCE)


def notifications(msgs: DataFrame) -> DataFrame:
    """Every counted agent event (deploys, restarts, ...)."""
    from pyspark.sql import functions as F

    events = msgs.where(F.col("status").isNull() & (F.col("kind") == EVENT))
    fields = F.to_json("record")
    return _strings_cut(events, _longest(fields), {"fields_": fields}).select(
        "app", "env", "date", "minute", "started_at", "time", "label", "host", "cluster", "uuid",
        F.col("fields_").alias("fields"), *PROVENANCE)
