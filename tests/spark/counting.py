"""A small real table builder for the runner's tests: events and bytes per minute into `log_minutes`, a state table
(events seen per segment, over every batch so far) and a state blob (batches built), through the same interface
as logjam's and the log builders (logport.spark.context)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from logport.spark.context import BatchContext


def count_events(events: DataFrame, ctx: BatchContext) -> dict[str, DataFrame]:
    from pyspark.sql import functions as F

    timed = events.where(F.col("time").isNotNull())
    size = F.coalesce(F.octet_length(F.to_json("record")), F.lit(0))
    minutes = timed.groupBy(
        F.date_format("time", "yyyy-MM-dd").alias("date"),
        (F.hour("time") * 60 + F.minute("time")).cast("smallint").alias("minute"),
        "segment", F.coalesce("tag", F.lit("")).alias("tag"), "source",
        F.lit("").alias("host"), F.lit("unknown").alias("level"),
    ).agg(F.count(F.lit(1)).alias("events"), F.sum(size).cast("bigint").alias("bytes"))
    seen = events.groupBy("segment").agg(F.count(F.lit(1)).alias("events"))
    earlier = ctx.state_in("seen")
    if earlier is not None:
        seen = seen.unionByName(earlier).groupBy("segment").agg(F.sum("events").alias("events"))
    ctx.blobs_out["batches"] = str(int(ctx.blob_in("batches") or b"0") + 1).encode()
    ctx.counters["built"] = ctx.counters.get("built", 0) + 1
    return {"log_minutes": minutes, "_state/seen": seen}
