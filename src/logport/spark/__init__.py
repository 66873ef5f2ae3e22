"""logport on Spark: the `logport` data source, the `logport pipeline` job and its HTML report.

    import logport.spark
    logport.spark.register(spark)
    df = spark.read.format("logport").option("path", "./data").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("logport")` and `spark.readStream.format("logport")` available."""
    from logport.spark.source import LogportDataSource

    spark.dataSource.register(LogportDataSource)
