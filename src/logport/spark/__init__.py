"""logport on Spark: the `logport` data source, the `logport pipeline` job and its HTML report.

    spark = SparkSession.builder.master("local[*]").getOrCreate()
    logport.spark.register(spark)
    df = spark.read.format("logport").option("path", "./data").load()
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from logport.errors import LogportError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What a Python worker of the source imports (logport and the libraries it decodes with).
WORKER_IMPORT = "import logport.spark.columns"
_workers_checked: set[tuple[str, str]] = set()  # (Python, working directory) that imported it


class WorkerPythonError(LogportError):
    """The Python Spark runs the source with cannot import logport, so every read of the source would fail."""


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("logport")` and `spark.readStream.format("logport")` available.

    Spark runs a Python data source (its planning on the driver, its reads in the executors) with
    the Python its SparkContext names when the source is registered (PySpark's
    DataSourceRegistration wraps the class with `pythonExec`). With a local master every one of
    them runs on this machine, so the source is registered with this interpreter, which has logport,
    whatever PYSPARK_PYTHON says; the session's other Python (UDFs) keeps its own. With a cluster
    master it is the executors' Python, and first checked here, where Spark plans with it
    (WorkerPythonError says what to do if it cannot import logport).
    """
    from logport.spark.source import session_data_source

    context = spark.sparkContext
    # its reads are cut into partitions by the session's cores, as Spark sizes file splits (source.SegmentPlanner)
    source = session_data_source(context.defaultParallelism)
    if (context.master or "").startswith("local") and sys.executable:
        with python_exec(context, sys.executable):
            spark.dataSource.register(source)
        return
    check_planner_python(spark)
    spark.dataSource.register(source)


@contextmanager
def python_exec(context: Any, python: str) -> Iterator[None]:
    """The SparkContext names `python` for what is wrapped meanwhile (a data source, a UDF), then its own again."""
    own = context.pythonExec
    context.pythonExec = python
    try:
        yield
    finally:
        context.pythonExec = own


def check_planner_python(spark: SparkSession) -> None:
    """Raise WorkerPythonError when the executors' Python cannot import logport on the driver.

    Spark runs a Python data source's planning on the driver, with the Python its executors run
    (PYSPARK_PYTHON, spark.pyspark.python), from the driver's working directory: a relative path
    (`./logport-env/bin/python`, as `logport spark-package` sets) must be there too.
    """
    context = spark.sparkContext
    python, where = context.pythonExec, os.getcwd()
    if (python, where) in _workers_checked:
        return
    env = dict(os.environ)
    py_files = [f for f in (context.getConf().get("spark.submit.pyFiles") or "").split(",") if f]
    if py_files:  # shipped to the workers on their PYTHONPATH
        env["PYTHONPATH"] = os.pathsep.join([*py_files, *filter(None, [env.get("PYTHONPATH")])])
    try:
        done = subprocess.run([python, "-c", WORKER_IMPORT], env=env, capture_output=True, text=True,
                              timeout=120)
        failure = "" if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    except (OSError, subprocess.SubprocessError) as e:  # no such file, not executable, hung
        failure = str(e)
    if failure:
        raise WorkerPythonError(
            f"Spark plans the logport source on the driver with the executors' Python, {python!r}, which cannot "
            f"import logport from {where} ({failure}). Run spark-submit in the directory `logport spark-package` "
            "wrote (its logport-env is the executors' Python there too), or install logport for that Python here")
    _workers_checked.add((python, where))
