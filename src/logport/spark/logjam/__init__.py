"""Every statistic of the logjam importer (../shared/specs/logjam-analytics.md) from a batch of the `logport`
source's events: the lake's logjam tables (lake/tables.py, docs/pipeline.md) and the state the next batch needs.

    fields.py     which events are logjam messages; their fields, read once from the record's VARIANT
    normalize.py  which messages count; the importer's normalisation; why a request is stored
    frontend.py   page/ajax timings, the match to backend requests (across batches), drop reasons
    aggregate.py  minutes, totals, quants, agents
    stored.py     requests (with the rate cap across batches), js_exceptions, notifications
    streams.py    per-stream settings (--streams) as Spark columns

The messages are read from the source once: their normalised projection is persisted for the batch and every table
is computed from it (ctx.after_commit releases it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logport.lake.tables import Table
from logport.lake.tables import logjam_tables as contract
from logport.spark.context import STATE_PREFIX, BatchContext
from logport.spark.logjam.aggregate import agents, minutes_and_totals, quants, stats_rows
from logport.spark.logjam.fields import logjam_messages, quoted
from logport.spark.logjam.frontend import match_frontend
from logport.spark.logjam.normalize import normalised
from logport.spark.logjam.stored import js_exceptions, notifications, requests
from logport.spark.logjam.streams import StreamColumns, stream_rules

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["logjam_tables"]

CLOCK = "logjam_clock"  # state: the newest message time seen (µs), the frontend matching's clock


def conform(df: DataFrame, table: Table) -> DataFrame:
    """`df` with exactly the table's columns, in its order, with its types."""
    return df.selectExpr(*[f"CAST({quoted(name)} AS {kind}) AS {quoted(name)}" for name, kind in table.columns])


def logjam_tables(events: DataFrame, ctx: BatchContext) -> dict[str, DataFrame]:
    """The logjam tables of one batch (minutes, totals, quants, agents, requests, js_exceptions, notifications) and
    its `_state/...` for the next: backend ids, frontend messages waiting, insert counts, the clock."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    resources = ctx.lake.resources
    streams = StreamColumns(stream_rules(ctx.streams), F.col("stream"))

    def cache(df: DataFrame) -> DataFrame:
        kept = df.persist(StorageLevel.MEMORY_AND_DISK)
        ctx.after_commit.append(kept.unpersist)
        return kept

    msgs = cache(normalised(logjam_messages(events, resources), resources, ctx.lake.time_basis, streams))
    # one small job over the messages: what was not counted and why, and the newest time counted
    summary = msgs.groupBy("status").agg(F.count(F.lit(1)).alias("n"), F.max(F.unix_micros("time")).alias("newest"))
    newest = [ctx_clock(ctx)]
    for row in summary.collect():
        if row["status"] is None:
            ctx.counters["logjam_counted"] = ctx.counters.get("logjam_counted", 0) + row["n"]
            newest.append(row["newest"])
        else:
            key = f"logjam_dropped_{row['status']}"
            ctx.counters[key] = ctx.counters.get(key, 0) + row["n"]
    clock_us = max((t for t in newest if t is not None), default=None)

    fe = match_frontend(msgs, ctx.state_in("frontend_waiting"), ctx.state_in("backend_ids"), clock_us,
                        resources.names, cache)
    stats = stats_rows(msgs, fe.accepted, resources)
    minutes, totals = minutes_and_totals(stats, resources, cache)
    stored, insert_counts = requests(msgs, resources, streams, ctx.state_in("insert_counts"), clock_us)
    tables = contract(resources)
    out = {
        "minutes": minutes, "totals": totals, "quants": quants(stats, resources), "agents": agents(msgs, fe.outcomes),
        "requests": stored, "js_exceptions": js_exceptions(msgs), "notifications": notifications(msgs),
    }
    result = {name: conform(df, tables[name]) for name, df in out.items()}
    clock = ctx.spark.createDataFrame([(clock_us,)], "clock_us bigint")
    result.update({f"{STATE_PREFIX}backend_ids": fe.backend_ids, f"{STATE_PREFIX}frontend_waiting": fe.waiting,
                   f"{STATE_PREFIX}insert_counts": insert_counts, f"{STATE_PREFIX}{CLOCK}": clock})
    return result


def ctx_clock(ctx: BatchContext) -> int | None:
    """The clock the previous batch left (None before the first)."""
    from pyspark.sql import functions as F

    state = ctx.state_in(CLOCK)
    if state is None:
        return None
    row = state.agg(F.max("clock_us").alias("clock_us")).first()
    return None if row is None else row["clock_us"]
