"""The lake's tables: names, key columns and value columns (Spark DDL types), the contract between the pipeline
that writes them (logport.spark) and every reader (logport ui, the report, any Parquet reader).

Rows are partial aggregates: each committed batch (a batch run, or a streaming micro-batch) writes its own rows,
so one key may have several rows, and a reader sums them (counts, sums, sums of squares, map values, sketch and
histogram buckets) or takes their maximum (`*_max`). `merge` says how each value column combines. docs/pipeline.md
explains every column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from logport.lake.resources import DEFAULT_RESOURCES, Resources

COUNTS = "map<string,bigint>"  # name -> count: response codes, severities, exception names, callers, ...
BUCKETS = "map<int,bigint>"  # bucket key -> count: logjam's 22-bucket histograms and the 1% sketches (lake/sketch.py)
LINE = "struct<severity:int,time:string,text:string>"
SAMPLE = "struct<message:string,time:timestamp,hub:string,segment:string,offset:bigint,index:int>"

APDEX_FAMILIES = ("apdex", "fapdex", "papdex", "xapdex")
APDEX_BUCKETS = ("happy", "satisfied", "tolerating", "frustrated")
COUNTER_MAPS = ("response", "severity", "exceptions", "soft_exceptions", "callers", "senders", "js_exceptions")
DISTRIBUTED = ("total_time", "page_time", "ajax_time")  # the resources with a per-minute histogram and sketch
SCOPES = ("action", "module", "all")  # minutes/totals `scope`: a page row, a ::Module row, the all_pages row


@dataclass(frozen=True)
class Table:
    name: str
    keys: tuple[tuple[str, str], ...]  # (column, type): what identifies a row (besides the batch that wrote it)
    values: tuple[tuple[str, str], ...]
    partition: tuple[str, ...] = ("date",)
    # how value columns combine across rows of one key: "sum" (default), "max", "min", or "last" (the value of the
    # row of the latest batch); detail tables (one row per thing, no aggregation) have merge=None
    merge: dict[str, str] | None = field(default_factory=dict)

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return self.keys + self.values

    def combine(self, column: str) -> str:
        assert self.merge is not None, f"{self.name} rows are not aggregates"
        return self.merge.get(column, "sum")

    @property
    def sort_columns(self) -> list[str]:
        """The columns the table's files are sorted by within a partition, so a reader's filter skips row groups:
        its keys less the partition columns; for aggregates, `minute` last (one page's minutes lie together)."""
        keys = [name for name, _ in self.keys if name not in self.partition]
        if self.merge is not None and "minute" in keys:
            keys = [k for k in keys if k != "minute"] + ["minute"]
        return keys


def aggregate_values(resources: Resources) -> tuple[tuple[str, str], ...]:
    """The value columns of `minutes` and `totals` (logjam's totals/minutes documents, specs 3.2, plus sketches)."""
    values: list[tuple[str, str]] = [(c, "bigint") for c in ("count", "page_count", "ajax_count", "frontend_count")]
    for r in resources.names:
        values += [(r, "double"), (f"{r}_sq", "double"), (f"{r}_max", "double")]
    values += [(f"{f}_{b}", "bigint") for f in APDEX_FAMILIES for b in APDEX_BUCKETS]
    values += [(m, COUNTS) for m in COUNTER_MAPS]
    values += [(f"{r}_hist", BUCKETS) for r in DISTRIBUTED]
    values += [(f"{r}_sketch", BUCKETS) for r in DISTRIBUTED]
    return tuple(values)


def _max_merge(resources: Resources) -> dict[str, str]:
    return {f"{r}_max": "max" for r in resources.names}


PROVENANCE = (("hub", "string"), ("segment", "string"), ("offset", "bigint"), ("index", "int"))


def logjam_tables(resources: Resources = DEFAULT_RESOURCES) -> dict[str, Table]:
    app = (("app", "string"), ("env", "string"), ("date", "string"))
    return {t.name: t for t in (
        Table("minutes", app + (("minute", "smallint"), ("scope", "string"), ("page", "string")),
              aggregate_values(resources), merge=_max_merge(resources)),
        Table("totals", app + (("scope", "string"), ("page", "string")), aggregate_values(resources),
              merge=_max_merge(resources)),
        Table("quants", app + (("page", "string"), ("kind", "string"), ("resource", "string"), ("quant", "double")),
              (("count", "bigint"),)),
        Table("agents", app + (("user_agent", "string"),),
              (("backend", "bigint"), ("frontend", "bigint"), ("dropped", "bigint"), ("drop_reasons", COUNTS))),
        Table("requests", app + (("minute", "smallint"), ("request_id", "string")), (
            ("started_at", "string"), ("started_ms", "bigint"), ("time", "timestamp"),
            ("page", "string"), ("module", "string"), ("response_code", "int"), ("severity", "int"),
            ("total_time", "double"), ("reasons", "array<string>"),
            ("exceptions", "array<string>"), ("soft_exceptions", "array<string>"),
            ("caller_id", "string"), ("caller_action", "string"), ("sender_id", "string"), ("sender_action", "string"),
            ("user_agent", "string"), ("url", "string"), ("host", "string"),
            ("metrics", "map<string,double>"), ("lines", f"array<{LINE}>"), ("description", "string"),
            ("fields", "string"), *PROVENANCE), merge=None),
        Table("js_exceptions", app + (("minute", "smallint"),), (
            ("started_at", "string"), ("time", "timestamp"), ("page", "string"), ("description", "string"),
            ("logjam_request_id", "string"), ("request_id", "string"), ("user_agent", "string"), ("fields", "string"),
            *PROVENANCE), merge=None),
        Table("notifications", app + (("minute", "smallint"),), (
            ("started_at", "string"), ("time", "timestamp"), ("label", "string"), ("host", "string"),
            ("cluster", "string"), ("uuid", "string"), ("fields", "string"), *PROVENANCE), merge=None),
    )}


def log_tables() -> dict[str, Table]:
    day = (("date", "string"), ("minute", "smallint"))
    return {t.name: t for t in (
        Table("log_minutes", day + (("segment", "string"), ("tag", "string"), ("source", "string"),
                                    ("host", "string"), ("level", "string")),
              (("events", "bigint"), ("bytes", "bigint"))),
        Table("log_patterns", day + (("tag", "string"), ("level", "string"), ("pattern_id", "string")),
              (("count", "bigint"),)),
        Table("patterns", (("pattern_id", "string"),), (
            ("template", "string"), ("first_seen", "timestamp"), ("last_seen", "timestamp"), ("count", "bigint"),
            ("level", "string"), ("tag", "string"), ("samples", f"array<{SAMPLE}>")),
              partition=(), merge={"template": "last", "first_seen": "min", "last_seen": "max", "level": "last",
                                   "tag": "last", "samples": "last"}),
    )}


def all_tables(resources: Resources = DEFAULT_RESOURCES) -> dict[str, Table]:
    return {**logjam_tables(resources), **log_tables()}
