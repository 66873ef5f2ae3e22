"""The one switch between logport's C extensions and their Python references, as msgpack's MSGPACK_PUREPYTHON.

`load("logport.protocols._segment_scan")` is the built extension, or None: when it was not built (no C
compiler at install) or when `LOGPORT_PUREPYTHON=1` forces every caller onto the Python reference, which the
property tests hold the C passes to (`make test` runs the protocols' unit tests once more that way).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON = os.environ.get("LOGPORT_PUREPYTHON", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The C extension module `name`, or None for the Python reference."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:  # built without a C compiler
        return None
