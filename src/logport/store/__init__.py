"""The segment store: append-only, byte-addressed segments of frames, durable before acknowledged."""

from logport.store.segment import AppendResult, ReadResult, SegmentInfo, WriterCondition
from logport.store.store import SegmentStore

__all__ = ["AppendResult", "ReadResult", "SegmentInfo", "SegmentStore", "WriterCondition"]
