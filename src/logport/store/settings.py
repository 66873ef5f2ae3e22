"""The store's own settings (the config file's [store] section): the store imports nothing of the
application's configuration, which takes this dataclass as its section and validates it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MiB = 1024 * 1024


@dataclass
class StoreConfig:
    data_dir: str = "./data"
    fsync: Literal["always", "interval", "never"] = "always"
    fsync_interval: float = 1.0  # seconds between fdatasyncs with fsync = "interval"
    chunk_size: int = 64 * MiB  # a segment's chunk file rolls past this size
    prewrite_chunks: bool = False  # with no spare chunk, write the next one ahead (zeros) in the background
    spare_chunks: int = 2  # chunks that retention drops kept to be the next ones (recycled), per segment
    max_frame_size: int = 16 * MiB  # largest event body the store accepts
    max_segments: int = 10000
    max_pending_bytes: int = 64 * MiB  # queued, unwritten appends per segment before appends wait
    writeback_bytes: int = 1 * MiB  # a commit larger than this starts the disk on each such slice; 0 = off
    writer_state_limit: int = 100000  # writer ids (exactly-once state) kept per segment
    retention_bytes: int = 0  # per segment; 0 = keep everything
    retention_age: float = 0.0  # seconds; whole chunks older than this go; 0 = forever
    retention_check_interval: float = 60.0
