"""Log analytics for every source that is not logjam (Forward, Lumberjack, segment-protocol JSON): events and
bytes per minute by segment, tag, source, host and level (`log_minutes`), and message patterns
(`log_patterns`, `patterns`); docs/pipeline.md describes the tables.

How it runs on Spark: the workers read each event's message, host and level and mask the message's variable
parts (fields.py, masks.py), and one aggregation per minute, key and masked message (kept with
localCheckpoint) is all the later steps read. Drain is sequential and keeps state, so it runs on the driver
(miner.py), over the distinct masked messages only (far fewer than the messages: docs/benchmarks.md "logs"),
against the lake's saved miner; the pattern ids join back to the aggregate as a broadcast.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logport.lake.tables import Table
from logport.lake.tables import log_tables as table_contract
from logport.spark.logs.fields import (
    body_column,
    first_line,
    host_column,
    level_column,
    message_column,
    record_fields,
    time_column,
)
from logport.spark.logs.masks import masked_column
from logport.spark.logs.miner import PatternMiner

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from logport.spark.context import BatchContext

STATE = "log_patterns"  # the miner's state blob in the lake's _state/
SAMPLES = 3  # sample messages per pattern and batch
SAMPLE_CHARS = 2000  # of a sample message
UNTIMED = "log_events_without_time"  # the batch log entry's counter of log events that have no time


def _record(events: DataFrame) -> tuple[Column, Column]:
    """(the event's record as VARIANT, whether it is a segment-protocol JSON object stored opaque)."""
    from pyspark.sql import functions as F

    record = F.col("record") if dict(events.dtypes)["record"] == "variant" else F.try_parse_json("record")
    raw = F.col("raw").cast("string")
    opaque_json = F.col("record").isNull() & F.col("source").isNull() & F.ltrim(raw).startswith("{")
    return F.when(opaque_json, F.try_parse_json(raw)).otherwise(record), opaque_json


def log_events(events: DataFrame) -> DataFrame:
    """One row per log event: date, minute (UTC), segment, tag, source, host, level, bytes, time, masked (its
    masked message, the pattern's input; null without a message) and sample (the message with provenance)."""
    from pyspark.sql import functions as F

    record, opaque_json = _record(events)
    is_text = dict(events.dtypes)["record"] != "variant"
    logs = events.where(F.col("source").isNull() | (F.col("source") != "logjam")).select(
        "*", record.alias("_record"), opaque_json.alias("_opaque_json"))
    logs = logs.where(F.col("_record").isNotNull() | F.col("source").isNotNull())
    logs = logs.withColumn("_fields", record_fields(F.col("_record")))
    fields = F.col("_fields")
    time = F.coalesce(F.col("time"), F.when(F.col("_opaque_json"), time_column(fields)))
    seconds = F.unix_seconds(time)
    record_bytes = F.octet_length("record") if is_text else F.octet_length(F.to_json("record"))
    logs = logs.select(
        F.date_from_unix_date(F.floor(seconds / 86400).cast("int")).cast("string").alias("date"),
        (F.pmod(seconds, F.lit(86400)) / 60).cast("smallint").alias("minute"),
        "segment",
        F.coalesce("tag", F.lit("")).alias("tag"),
        F.coalesce("source", F.when(F.col("_opaque_json"), F.lit("segment"))).alias("source"),
        host_column(fields).alias("host"),
        F.coalesce(F.when(F.col("_opaque_json"), F.octet_length("raw")), record_bytes,
                   F.octet_length("raw"), F.lit(0)).alias("bytes"),
        time.alias("time"),
        "_fields", message_column(fields, F.col("_record")).alias("_message"), "hub", "offset", "index")
    logs = logs.withColumn("_line", first_line(F.col("_message")))
    logs = logs.withColumns({"level": level_column(fields, F.col("_line")), "_body": body_column(F.col("_line")),
                             "sample": F.struct(F.substring("_message", 1, SAMPLE_CHARS).alias("message"), "time",
                                                "hub", "segment", "offset", "index")})
    return logs.select("date", "minute", "segment", "tag", "source", "host", "level", "bytes", "time",
                       masked_column(F.col("_body")).alias("masked"), "sample")


def conform(df: DataFrame, table: Table) -> DataFrame:
    """The table's columns, in its order, cast to its types."""
    from pyspark.sql import functions as F

    return df.select(*[F.col(name).cast(kind).alias(name) for name, kind in table.columns])


@dataclass
class MinedBatch:
    """A batch's log events, aggregated and with their patterns mined (the tables are built from it)."""

    fine: DataFrame  # per date, minute, segment, tag, source, host, level and masked message (localCheckpoint)
    ids: DataFrame  # masked message -> pattern_id
    patterns: list[tuple[Any, ...]]  # the batch's `patterns` rows


def mine_batch(events: DataFrame, ctx: BatchContext) -> MinedBatch:
    """Aggregates the batch's log events (a Spark job), mines their distinct masked messages with the lake's
    miner (its state from ctx.blob_in(STATE), the new one in ctx.blobs_out[STATE]) and counts the events that
    have no time in ctx.counters[UNTIMED]."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    if events.isStreaming:
        raise ValueError("log_tables takes one batch's events (a streaming run's foreachBatch), not a stream")
    fine = (log_events(events)
            .groupBy("date", "minute", "segment", "tag", "source", "host", "level", "masked")
            .agg(F.count(F.lit(1)).alias("events"), F.sum("bytes").alias("bytes"), F.min("time").alias("first"),
                 F.max("time").alias("last"), F.min_by("sample", "time").alias("sample"))
            .localCheckpoint(eager=True))
    groups = (fine.groupBy("masked", "tag", "level", F.col("date").isNull().alias("untimed"))
              .agg(F.sum("events").alias("events"), F.min("first").alias("first"), F.max("last").alias("last"),
                   F.min_by("sample", "first").alias("sample"))
              .toArrow().to_pylist())
    ctx.counters[UNTIMED] = sum(g["events"] for g in groups if g["untimed"])
    miner = PatternMiner(ctx.blob_in(STATE))
    pattern_ids, patterns = mine(miner, [g for g in groups if g["masked"] is not None and not g["untimed"]])
    ctx.blobs_out[STATE] = miner.state()
    ids = ctx.spark.createDataFrame(pa.table(
        {"masked": list(pattern_ids), "pattern_id": list(pattern_ids.values())},
        schema=pa.schema([("masked", pa.string()), ("pattern_id", pa.string())])))
    return MinedBatch(fine, ids, patterns)


def log_tables(events: DataFrame, ctx: BatchContext) -> dict[str, DataFrame]:
    """The batch's `log_minutes`, `log_patterns` and `patterns` (mine_batch runs now; the tables are lazy)."""
    return batch_tables(mine_batch(events, ctx), ctx.spark)


def batch_tables(mined: MinedBatch, spark: SparkSession) -> dict[str, DataFrame]:
    from pyspark.sql import functions as F

    tables = table_contract()
    timed = mined.fine.where(F.col("date").isNotNull())
    log_minutes = timed.groupBy("date", "minute", "segment", "tag", "source", "host", "level").agg(
        F.sum("events").alias("events"), F.sum("bytes").alias("bytes"))
    log_patterns = (timed.join(F.broadcast(mined.ids), "masked")
                    .groupBy("date", "minute", "tag", "level", "pattern_id").agg(F.sum("events").alias("count")))
    schema = ", ".join(f"`{name}` {kind}" for name, kind in tables["patterns"].columns)
    return {
        "log_minutes": conform(log_minutes, tables["log_minutes"]),
        "log_patterns": conform(log_patterns, tables["log_patterns"]),
        "patterns": spark.createDataFrame(mined.patterns, schema),
    }


def mine(miner: PatternMiner, groups: list[dict[str, Any]]) -> tuple[dict[str, str], list[tuple[Any, ...]]]:
    """Each masked message's pattern id, and the `patterns` rows of the batch: the groups (masked, tag, level,
    events, first, last, sample) go through Drain in order of first appearance, so a rerun of a batch gives the
    same ids."""
    per_masked: dict[str, dict[str, Any]] = {}
    for g in groups:
        m = per_masked.setdefault(g["masked"], {"events": 0, "first": g["first"], "last": g["last"],
                                                "sample": g["sample"], "tags": Counter(), "levels": Counter()})
        m["events"] += g["events"]
        m["tags"][g["tag"]] += g["events"]
        m["levels"][g["level"]] += g["events"]
        if g["first"] < m["first"]:
            m["first"], m["sample"] = g["first"], g["sample"]
        m["last"] = max(m["last"], g["last"])
    pattern_ids: dict[str, str] = {}
    members: dict[str, list[dict[str, Any]]] = {}
    for masked, m in sorted(per_masked.items(), key=lambda item: (item[1]["first"], item[0])):
        pattern_id = pattern_ids[masked] = miner.add(masked, m["events"])
        members.setdefault(pattern_id, []).append(m)
    rows = []
    for pattern_id, ms in members.items():
        tags: Counter[str] = Counter()
        levels: Counter[str] = Counter()
        for m in ms:
            tags.update(m["tags"])
            levels.update(m["levels"])
        # samples: the pattern's most frequent masked forms, each by its first message
        chosen = sorted(ms, key=lambda m: (-m["events"], m["first"]))[:SAMPLES]
        rows.append((pattern_id, miner.template(pattern_id), min(m["first"] for m in ms),
                     max(m["last"] for m in ms), sum(m["events"] for m in ms), _most(levels), _most(tags),
                     [m["sample"] for m in chosen]))
    return pattern_ids, rows


def _most(counts: Counter[str]) -> str:
    """The value with the most messages (ties: the smallest, so reruns agree)."""
    return min(counts.items(), key=lambda item: (-item[1], item[0]))[0]
