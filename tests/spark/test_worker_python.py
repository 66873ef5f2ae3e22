"""No worker-Python trap: a script run with the virtualenv's Python, not activated and with no Spark
settings (its Spark's workers would run `python3` from PATH, without logport), reads a data directory
and a hub through `logport.spark.register(spark)` with `local[*]`; its own UDFs still run `python3`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.spark.conftest import serving_hub
from tests.spark.sample import forward_batches, write_bodies

pytestmark = pytest.mark.slow  # a Spark of its own: the point is a process that was not set up for it

SCRIPT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession, functions as F
    import logport.spark

    spark = SparkSession.builder.master("local[*]").config("spark.ui.enabled", "false").getOrCreate()
    logport.spark.register(spark)
    print("DIRECTORY:", spark.read.format("logport").option("path", sys.argv[1]).load().count())
    print("HUB:", spark.read.format("logport").option("server", sys.argv[2]).load().count())
    where = F.udf(lambda _: sys.executable)
    print("UDF PYTHON:", spark.range(1).select(where("id")).first()[0])
    spark.stop()
""")


def test_unactivated_venv_python_reads_through_register(tmp_path: Path) -> None:
    write_bodies(str(tmp_path / "data"), {"app": forward_batches(2, 5)})
    write_bodies(str(tmp_path / "hub"), {"app": forward_batches(3, 4)})
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # as a shell without the venv activated: its bin is not on PATH, so `python3` is another one
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(venv_bin).resolve())
    python3 = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], env=env, capture_output=True,
                             text=True, timeout=60)
    with serving_hub(str(tmp_path / "hub")) as (server, _, _):
        done = subprocess.run([sys.executable, str(script), str(tmp_path / "data"), server], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "DIRECTORY: 10" in lines and "HUB: 12" in lines, done.stdout
    # the session's own Python workers are still what PySpark picks without PYSPARK_PYTHON: `python3`
    (udf_python,) = [line.removeprefix("UDF PYTHON: ") for line in lines if line.startswith("UDF PYTHON: ")]
    assert udf_python != sys.executable
    if python3.returncode == 0:
        assert Path(udf_python).resolve() == Path(python3.stdout.strip()).resolve()
