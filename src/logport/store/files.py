"""A segment's files on disk: `<base offset, 20 digits>.log` chunks and `state.json`."""

from __future__ import annotations

import bisect
import ctypes
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from logport.errors import InvalidSegmentName

CHUNK_SUFFIX = ".log"
STATE_FILE = "state.json"
SEGMENTS_DIR = "segments"
MAX_NAME_BYTES = 250
_NAME = re.compile(r"[A-Za-z0-9._-]+\Z")


def check_segment_name(name: str) -> str:
    if not name:
        raise InvalidSegmentName(name, "empty")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidSegmentName(name, f"{len(name.encode())} bytes exceeds {MAX_NAME_BYTES}")
    if not _NAME.match(name):
        raise InvalidSegmentName(name, "only A-Z a-z 0-9 . _ - are allowed")
    if name in (".", ".."):
        raise InvalidSegmentName(name, "reserved")
    return name


def chunk_path(seg_dir: Path, base: int) -> Path:
    return seg_dir / f"{base:020d}{CHUNK_SUFFIX}"


def list_chunk_bases(seg_dir: Path) -> list[int]:
    bases = []
    for entry in os.scandir(seg_dir):
        stem, dot, ext = entry.name.partition(".")
        if dot and "." + ext == CHUNK_SUFFIX and stem.isdigit() and len(stem) == 20:
            bases.append(int(stem))
    return sorted(bases)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing `length` bytes at `offset` of `fd` to the disk, without waiting
    for them (Linux sync_file_range SYNC_FILE_RANGE_WRITE; elsewhere nothing). Durability is still
    the fdatasync's: this only makes the disk start sooner."""
    if _SYNC_FILE_RANGE is not None and _SYNC_FILE_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sync_file_range: {os.strerror(err)}")


@dataclass
class SegmentState:
    """What chunk files alone cannot tell: the start offset after truncation, and the seal."""

    start_offset: int = 0
    sealed: bool = False

    @classmethod
    def load(cls, seg_dir: Path) -> SegmentState:
        try:
            raw = json.loads((seg_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            return cls()
        return cls(start_offset=int(raw.get("start_offset", 0)), sealed=bool(raw.get("sealed", False)))

    def save(self, seg_dir: Path) -> None:
        """Atomically: write a temporary file, fsync it, rename it over, fsync the directory."""
        tmp = seg_dir / (STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(self), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, seg_dir / STATE_FILE)
        fsync_dir(seg_dir)


class ChunkReader:
    """Positional reads across a segment's chunk files; frames never span chunks."""

    def __init__(self, seg_dir: Path) -> None:
        self.seg_dir = seg_dir
        self.bases: list[int] = []
        self._fds: dict[int, int] = {}
        self.refresh()

    def refresh(self) -> None:
        self.bases = list_chunk_bases(self.seg_dir)
        for base in list(self._fds):
            if base not in self.bases:
                self._close_fd(base)

    def add_chunk(self, base: int) -> None:
        self.bases.append(base)

    def drop_chunks_below(self, base: int) -> list[int]:
        """Forget (and return) the chunks that start below `base`."""
        gone = [b for b in self.bases if b < base]
        self.bases = [b for b in self.bases if b >= base]
        for b in gone:
            self._close_fd(b)
        return gone

    def _fd(self, base: int) -> int:
        fd = self._fds.get(base)
        if fd is None:
            fd = os.open(chunk_path(self.seg_dir, base), os.O_RDONLY)
            self._fds[base] = fd
        return fd

    def _close_fd(self, base: int) -> None:
        fd = self._fds.pop(base, None)
        if fd is not None:
            os.close(fd)

    def chunk_span(self, offset: int, end: int) -> tuple[int, int]:
        """(base, end) of the chunk holding `offset`, its end capped at `end`."""
        i = bisect.bisect_right(self.bases, offset) - 1
        if i < 0:
            raise ValueError(f"offset {offset} is below the first chunk")
        stop = self.bases[i + 1] if i + 1 < len(self.bases) else end
        return self.bases[i], min(stop, end)

    def pread(self, offset: int, max_bytes: int, end: int) -> bytes:
        """Up to `max_bytes` from `offset`, within one chunk and below `end`."""
        base, stop = self.chunk_span(offset, end)
        n = min(max_bytes, stop - offset)
        if n <= 0:
            return b""
        return os.pread(self._fd(base), n, offset - base)

    def chunk_end(self, base: int) -> int:
        """End offset of a chunk as its file size says."""
        return base + os.stat(chunk_path(self.seg_dir, base)).st_size

    def close(self) -> None:
        for base in list(self._fds):
            self._close_fd(base)
