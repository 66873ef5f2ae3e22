"""The worker-Python trap: a script run with the virtualenv's python, not activated, whose Spark workers
would run `python3` from PATH (without logport). register() says what to set; set, the read works."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.spark.sample import forward_batches, write_bodies

pytestmark = pytest.mark.slow  # a Spark of its own: the point is a process that was not set up for it

SCRIPT = textwrap.dedent("""
    import os, sys
    from pyspark.sql import SparkSession
    import logport.spark

    def session():
        return (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                .getOrCreate())

    spark = session()
    try:
        logport.spark.register(spark)
        print("REGISTERED without PYSPARK_PYTHON")
    except logport.spark.WorkerPythonError as e:
        print("REFUSED:", e)
    spark.stop()
    os.environ["PYSPARK_PYTHON"] = sys.executable  # what the message says to do
    spark = session()
    logport.spark.register(spark)
    print("ROWS:", spark.read.format("logport").option("path", sys.argv[1]).load().count())
    spark.stop()
""")


def test_unactivated_venv_python_is_told_what_to_set(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    write_bodies(data_dir, {"app": forward_batches(2, 5)})
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    # as a shell without the venv activated: its bin is not on PATH, so `python3` is another one
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(venv_bin).resolve())
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run([sys.executable, str(script), data_dir], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    refused = [line for line in lines if line.startswith("REFUSED:")]
    assert refused, done.stdout
    assert "cannot import logport" in refused[0]
    assert f"os.environ['PYSPARK_PYTHON'] = sys.executable (here {sys.executable!r})" in refused[0]
    assert "ROWS: 10" in lines
