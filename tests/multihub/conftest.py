"""The Spark session and running hubs of tests/spark, for the tests of several hubs."""

from tests.spark.conftest import running_hub, spark

__all__ = ["running_hub", "spark"]
