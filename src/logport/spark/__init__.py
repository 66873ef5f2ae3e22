"""logport on Spark: the `logport` data source, the `logport pipeline` job and its HTML report.

    os.environ["PYSPARK_PYTHON"] = sys.executable  # before the session: its Python workers import logport
    spark = SparkSession.builder.master("local[*]").getOrCreate()
    logport.spark.register(spark)
    df = spark.read.format("logport").option("path", "./data").load()
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from logport.errors import LogportError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What a Python worker of the source imports (logport and the libraries it decodes with).
WORKER_IMPORT = "import logport.spark.columns"
_workers_checked: set[str] = set()  # worker Pythons that imported it


class WorkerPythonError(LogportError):
    """Spark's Python workers cannot import logport, so every read of the source would fail in them."""


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("logport")` and `spark.readStream.format("logport")` available.

    With a local master, first checks that the session's Python workers can import logport
    (WorkerPythonError says what to set if not): a running session keeps the worker Python it
    was built with.
    """
    from logport.spark.source import session_data_source

    check_worker_python(spark)
    # its reads are cut into partitions by the session's cores, as Spark sizes file splits (source.SegmentPlanner)
    spark.dataSource.register(session_data_source(spark.sparkContext.defaultParallelism))


def check_worker_python(spark: SparkSession) -> None:
    """Raise WorkerPythonError when a local session's workers run a Python that cannot import logport.

    Workers run the PYSPARK_PYTHON the session was built with, else `python3` from PATH (not the
    driver's interpreter): `.venv/bin/python app.py` gets workers without logport. A cluster's
    workers are the cluster's (README "Spark"); they are not checked.
    """
    context = spark.sparkContext
    if not (context.master or "").startswith("local"):
        return
    python = context.pythonExec
    if python in _workers_checked:
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
            f"Spark's Python workers run {python!r}, which cannot import logport ({failure}). Set "
            f"os.environ['PYSPARK_PYTHON'] = sys.executable (here {sys.executable!r}), or export "
            f"PYSPARK_PYTHON, before the SparkSession is built: a running session keeps its workers' Python")
    _workers_checked.add(python)
