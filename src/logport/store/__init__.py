"""The segment store: append-only, byte-addressed segments of frames, durable before acknowledged."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logport.store.segment import (
        AppendResult,
        CheckedRead,
        ReadResult,
        SegmentInfo,
        WriterCondition,
    )
    from logport.store.store import SegmentStore

__all__ = ["AppendResult", "CheckedRead", "ReadResult", "SegmentInfo", "SegmentStore", "WriterCondition"]

# imported when first named: a reader of chunk files (the Spark source's workers, which Spark starts for every
# query) imports logport.store.frames and the reader, not the writer, its thread and its metrics (0.09 s)
_LAZY = {"AppendResult": "segment", "CheckedRead": "segment", "ReadResult": "segment", "SegmentInfo": "segment",
         "WriterCondition": "segment", "SegmentStore": "store"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'logport.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"logport.store.{module}"), name)
    globals()[name] = value
    return value
