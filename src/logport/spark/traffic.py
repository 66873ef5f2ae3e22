"""Two table builders of `logport pipeline` for every source: `traffic` (events and bytes per segment, tag and
minute) and, when asked for, `events` (every event as the source reads it, so the hubs' retention can be short)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from logport.lake.tables import Table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from logport.spark.context import BatchContext

SOURCES = ("forward", "lumberjack", "logjam")

TRAFFIC = Table("traffic", (("segment", "string"), ("tag", "string"), ("minute", "timestamp"), ("date", "string")),
                (("events", "bigint"), ("bytes", "bigint"), *[(f"{s}_events", "bigint") for s in SOURCES],
                 ("opaque_events", "bigint")))
# Every column of the source (its schema depends on the read's options): only the keys are listed, and the rows
# are written as they are read.
EVENTS = Table("events", (("hub", "string"), ("segment", "string"), ("offset", "bigint"), ("index", "int")), (),
               partition=("date", "segment"), merge=None)


def traffic_tables(events: DataFrame, ctx: BatchContext) -> dict[str, DataFrame]:
    """Per segment, tag and minute (UTC): events, bytes (record JSON, or raw bytes when opaque), events per source.

    Opaque events carry no time: they are counted in rows whose minute and date are null (the Parquet partition
    date=__HIVE_DEFAULT_PARTITION__).
    """
    from pyspark.sql import functions as F

    text = F.to_json("record") if dict(events.dtypes).get("record") == "variant" else F.col("record")
    size = F.coalesce(F.octet_length(text), F.octet_length("raw"), F.lit(0))
    per_source = [F.sum(F.when(F.col("source") == s, 1).otherwise(0)).alias(f"{s}_events") for s in SOURCES]
    counts = [F.count(F.lit(1)).alias("events"), F.sum(size).alias("bytes"), *per_source,
              F.sum(F.when(F.col("raw").isNotNull(), 1).otherwise(0)).alias("opaque_events")]
    minute = F.date_trunc("minute", "time")  # null without a time
    rows = events.groupBy("segment", F.coalesce("tag", F.lit("")).alias("tag"), minute.alias("minute")).agg(*counts)
    return {"traffic": rows.withColumn("date", F.date_format("minute", "yyyy-MM-dd"))}


def event_tables(events: DataFrame, ctx: BatchContext) -> dict[str, DataFrame]:
    """Every event as the source reads it (record as VARIANT), with its date (yyyy-MM-dd, UTC) to partition by;
    opaque events have none (date=__HIVE_DEFAULT_PARTITION__)."""
    from pyspark.sql import functions as F

    return {"events": events.withColumn("date", F.date_format("time", "yyyy-MM-dd"))}
