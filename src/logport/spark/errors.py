"""The error inside a Spark error: what `logport pipeline` says when Spark wraps an exception of ours.

An exception raised in a Python data source or UDF comes back as an AnalysisException
([PYTHON_DATA_SOURCE_ERROR]) or a PythonException whose message holds the inner Python traceback, and then
Spark's SQLSTATE: 89 lines for "hub 127.0.0.1:12399 did not answer". The inner exception's own last line is
the cause; a Spark error without one (a bad path, say) is its first line.
"""

from __future__ import annotations

import re

# `module.Class: message`, the last line of a Python traceback
RAISED = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*): (?P<message>.+)$")
SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\.?\s*$")


def cause(error: BaseException) -> str | None:
    """What a Spark error wrapping another one says in one line (our errors by their message alone, others by
    their class and message); None for an error that is not Spark's (it is not ours to explain)."""
    if not type(error).__module__.startswith(("pyspark.", "py4j.")):
        return None
    lines = [line.rstrip() for line in str(error).splitlines()]
    if "Traceback (most recent call last):" in str(error):
        inner = [m for line in lines if (m := RAISED.match(line))]
        if inner:
            raised = inner[-1]
            name, message = raised["cls"], SQLSTATE.sub("", raised["message"])
            return message if name.startswith("logport.") else f"{name.rpartition('.')[2]}: {message}"
    first = next((line.strip() for line in lines if line.strip()), type(error).__name__)
    return SQLSTATE.sub("", first)
