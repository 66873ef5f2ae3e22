"""`logport pipeline` says what went wrong in one line: an exception of ours that Spark wraps (AnalysisException
[PYTHON_DATA_SOURCE_ERROR] holding the data source's traceback, then SQLSTATE) is said as ours; and the Spark JVM
it starts logs without the warnings every local run printed, unless the user has a log4j2 configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from logport.cli import main
from logport.spark.errors import cause
from logport.spark.log4j import CONFIG, OPTION, submit_opts
from tests.conftest import free_port

DATA_SOURCE_ERROR = """[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: Traceback (most recent call last):
  File "/repo/src/logport/spark/source.py", line 346, in partitions
    planner.close()
  File "/repo/src/logport/spark/segments.py", line 147, in _connect
    raise HubUnreachable(f"hub {self.server} did not answer within timeout={self.timeout:g} s "
logport.spark.segments.HubUnreachable: hub 127.0.0.1:12399 did not answer within timeout=3 s (option timeout): Connection refused
 SQLSTATE: 38000"""

UDF_ERROR = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/repo/x.py", line 3, in f
    return 1 / 0
ZeroDivisionError: division by zero
"""


def spark_error(name: str, text: str) -> Exception:
    """An exception as pyspark raises it: of a class in pyspark.errors, its text the JVM's message."""
    cls = type(name, (Exception,), {"__module__": "pyspark.errors.exceptions.captured"})
    return cls(text)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("error", "said"), [
    (spark_error("AnalysisException", DATA_SOURCE_ERROR),
     "hub 127.0.0.1:12399 did not answer within timeout=3 s (option timeout): Connection refused"),
    (spark_error("PythonException", UDF_ERROR), "ZeroDivisionError: division by zero"),
    (spark_error("AnalysisException", "[PATH_NOT_FOUND] Path does not exist: file:/nowhere. SQLSTATE: 42K03"),
     "[PATH_NOT_FOUND] Path does not exist: file:/nowhere."),
    (ValueError("not Spark's"), None),  # a bug of ours: its traceback, not a line
], ids=["data source", "udf", "no traceback", "not spark"])
def test_the_cause_inside_a_spark_error(error: Exception, said: str | None) -> None:
    assert cause(error) == said


def test_an_unreachable_hub_is_one_line(spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code = main(["pipeline", "batch", "--server", f"127.0.0.1:{port}", "--timeout", "1", "--out", str(tmp_path),
                 "--quiet", "--master", "local[2]"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.splitlines() == [f"logport pipeline: hub 127.0.0.1:{port} did not answer within timeout=1 s "
                                f"(option timeout): Connection refused"], err


@pytest.mark.parametrize(("env", "quiet"), [
    ({}, True),
    ({"SPARK_SUBMIT_OPTS": "-Xss4m"}, True),  # kept, ours added
    ({"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=mine.properties"}, False),
    ({"JAVA_TOOL_OPTIONS": "-Dlog4j2.configurationFile=mine.properties"}, False),
    ({"SPARK_CONF_DIR": "{conf}"}, False),
    ({"SPARK_CONF_DIR": "{empty}"}, True),
], ids=["nothing", "other options", "submit opts", "java tool options", "conf dir", "conf dir without log4j2"])
def test_the_jvm_logs_with_our_config_unless_the_user_has_one(tmp_path: Path, env: dict[str, str],
                                                              quiet: bool) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "log4j2.properties").write_text("rootLogger.level = info\n")
    (tmp_path / "empty").mkdir()
    env = {k: v.format(conf=tmp_path / "conf", empty=tmp_path / "empty") for k, v in env.items()}
    opts = submit_opts(env)
    if not quiet:
        assert opts is None
        return
    assert opts == f"{env.get('SPARK_SUBMIT_OPTS', '')} {OPTION}{CONFIG}".strip()
    text = CONFIG.read_text()
    for logger in ("org.apache.hadoop.util.NativeCodeLoader", "io.netty.util.internal.MacAddressUtil",
                   "org.apache.spark.sql.catalyst.util.StringUtils"):
        assert f".name = {logger}\n" in text
