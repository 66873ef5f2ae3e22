"""The Spark JVM's log settings for `logport pipeline`: Spark's defaults at WARN, without the warnings every local
run prints (native Hadoop, the MAC address, truncated plans), unless the user configured log4j2 themselves."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = Path(__file__).with_name("log4j2.properties")
OPTION = "-Dlog4j2.configurationFile="


def quiet_spark_logs(environ: dict[str, str] | None = None) -> bool:
    """Point the Spark JVM this process starts at our log4j2 configuration (SPARK_SUBMIT_OPTS: the driver's JVM
    options, which pyspark's launcher passes on); False when the user has one of their own, or the JVM runs
    already (its logging is set)."""
    env = os.environ if environ is None else environ
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return False
    if any("log4j2.configurationFile" in env.get(name, "")
           for name in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "PYSPARK_SUBMIT_ARGS", "_JAVA_OPTIONS")):
        return False
    conf_dirs = [env.get("SPARK_CONF_DIR", ""), str(Path(env["SPARK_HOME"]) / "conf") if "SPARK_HOME" in env else ""]
    if any(d and (Path(d) / "log4j2.properties").exists() for d in conf_dirs):
        return False
    env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {OPTION}{CONFIG}".strip()
    return True
