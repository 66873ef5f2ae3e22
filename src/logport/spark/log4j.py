"""The Spark JVM's log settings for `logport pipeline`: Spark's defaults at WARN, without the warnings every local
run prints (native Hadoop, the MAC address, truncated plans), unless the user configured log4j2 themselves."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CONFIG = Path(__file__).with_name("log4j2.properties")
OPTION = "-Dlog4j2.configurationFile="
USER_OPTIONS = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "PYSPARK_SUBMIT_ARGS")


def submit_opts(env: Mapping[str, str]) -> str | None:
    """SPARK_SUBMIT_OPTS (the driver JVM's options, which pyspark's launcher passes on) with our log4j2
    configuration; None when the user has a configuration of their own (an option, or SPARK_CONF_DIR's)."""
    if any("log4j2.configurationFile" in env.get(name, "") for name in USER_OPTIONS):
        return None
    conf_dirs = [env.get("SPARK_CONF_DIR", ""), str(Path(env["SPARK_HOME"]) / "conf") if "SPARK_HOME" in env else ""]
    if any(d and (Path(d) / "log4j2.properties").exists() for d in conf_dirs):
        return None
    return f"{env.get('SPARK_SUBMIT_OPTS', '')} {OPTION}{CONFIG}".strip()


def quiet_spark_logs() -> bool:
    """Point the Spark JVM this process starts at our log4j2 configuration; False when the user has one, or the
    JVM runs already (its logging is set)."""
    from pyspark import SparkContext

    opts = submit_opts(os.environ)
    if opts is None or SparkContext._gateway is not None:
        return False
    os.environ["SPARK_SUBMIT_OPTS"] = opts
    return True
