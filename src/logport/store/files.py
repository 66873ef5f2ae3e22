"""A segment's files on disk: `<base offset, 20 digits>.log` chunks and `state.json`."""

from __future__ import annotations

import bisect
import ctypes
import json
import mmap
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from logport.config import MAX_SEGMENT_NAME_BYTES

CHUNK_SUFFIX = ".log"
STATE_FILE = "state.json"
SEGMENTS_DIR = "segments"
MAX_NAME_BYTES = MAX_SEGMENT_NAME_BYTES  # the rule is written beside the config's checks, which name segments too


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


def replace_durably(path: Path, data: bytes) -> None:
    """Write `path.tmp`, fdatasync it, rename it over `path`: after a crash `path` holds the old bytes or these,
    never a part (the rename is durable once the directory is synced, which the caller does if it must)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@dataclass
class CorruptRange:
    """Stored bytes the store knows to be corrupt (found on open), or that an operator gave up
    (`logport verify --repair`: `given_up` is when, and reads skip the range with a warning)."""

    start: int
    end: int
    reason: str
    groups: int = 0  # commit groups in it, as far as their COMMIT frames can be read
    given_up: str | None = None  # UTC time of `logport verify --repair`

    def holds(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.end


@dataclass
class SegmentState:
    """What chunk files alone cannot tell: the start offset after truncation, the seal, the corrupt ranges."""

    start_offset: int = 0
    sealed: bool = False
    corrupt: list[CorruptRange] = field(default_factory=list)

    @classmethod
    def load(cls, seg_dir: Path) -> SegmentState:
        try:
            raw = json.loads((seg_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            return cls()
        return cls(start_offset=int(raw.get("start_offset", 0)), sealed=bool(raw.get("sealed", False)),
                   corrupt=[CorruptRange(**r) for r in raw.get("corrupt", [])])

    def save(self, seg_dir: Path) -> None:
        """Atomically (replace_durably), the directory synced too. Ranges that truncation passed are forgotten."""
        self.corrupt = [r for r in self.corrupt if r.end > self.start_offset]
        replace_durably(seg_dir / STATE_FILE, json.dumps(asdict(self)).encode())
        fsync_dir(seg_dir)

    def given_up(self) -> list[CorruptRange]:
        return [r for r in self.corrupt if r.given_up]

    def known_corrupt(self) -> list[CorruptRange]:
        """The corrupt ranges not given up."""
        return [r for r in self.corrupt if not r.given_up and r.end > self.start_offset]


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

    def pread_into(self, offset: int, buffer: memoryview, end: int) -> int:
        """Read into `buffer` from `offset`, within one chunk and below `end`; the bytes read."""
        base, stop = self.chunk_span(offset, end)
        n = min(len(buffer), stop - offset)
        if n <= 0:
            return 0
        return os.preadv(self._fd(base), [buffer[:n]], offset - base)

    def chunk_end(self, base: int) -> int:
        """End offset of a chunk as its file size says."""
        return base + os.stat(chunk_path(self.seg_dir, base)).st_size

    def close(self) -> None:
        for base in list(self._fds):
            self._close_fd(base)


SPARE_PREFIX = "spare."  # spare.<n>.chunk: a chunk file written ahead (zeros) or recycled, to be a next chunk
SPARE_SUFFIX = ".chunk"
_PREPARING = "spare.tmp"
_ZEROS = bytes(1024 * 1024)
_ZERO_PAGES: mmap.mmap | None = None  # 1 MiB of zeros, page-aligned, for O_DIRECT writes


def _write_zeros(path: Path, flags: int, size: int, stopping: Callable[[], bool]) -> int:
    """Zeros from the file's current size up to `size`, synced; the size reached. Page by page through
    O_DIRECT where the filesystem takes it: the device reads one buffer of zeros and the hub copies
    nothing into the page cache (a buffered write of zeros costs the hub's CPU what the data's would)."""
    global _ZERO_PAGES
    fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
    direct = -1
    try:
        at = os.fstat(fd).st_size
        if at % 4096 and at < size:  # the partial last page, buffered
            at += os.pwrite(fd, _ZEROS[: min(size, at + 4096 - at % 4096) - at], at)
        try:
            direct = os.open(path, os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_DIRECT", 0))
            if _ZERO_PAGES is None:
                _ZERO_PAGES = mmap.mmap(-1, len(_ZEROS))  # anonymous: page-aligned zeros
            out, zeros = direct, memoryview(_ZERO_PAGES)
        except OSError:  # no O_DIRECT here (tmpfs)
            out, zeros = fd, memoryview(_ZEROS)
        whole = size - size % 4096 if out == direct else size
        while at < whole and not stopping():
            at += os.pwrite(out, zeros[: whole - at], at)
        if whole <= at < size:  # a chunk_size that is no multiple of the page: its last bytes, buffered
            at += os.pwrite(fd, _ZEROS[: size - at], at)
        if at >= size:
            os.fdatasync(fd)
        return at
    finally:
        os.close(fd)
        if direct >= 0:
            os.close(direct)


class ChunkFiles:
    """Where a segment's next chunk file comes from: a spare one when there is one, else a new file.

    A commit that overwrites blocks already allocated and written commits no filesystem journal with its
    fdatasync; one that appends does (size, allocation). So chunks that retention drops are kept as
    spares, up to `spares` of them (`recycle`, as PostgreSQL recycles its WAL segments), and, with
    `prewrite`, one is written ahead with zeros in the background when none is spare (`prepare`). A
    chunk's head is written and synced before the file takes the chunk's name, so a chunk file never
    starts with anything but its own head.
    """

    def __init__(self, seg_dir: Path, chunk_size: int, spares: int = 2) -> None:
        self.seg_dir = seg_dir
        self.chunk_size = chunk_size
        self.spares_max = spares
        self.stopping = False
        self._lock = threading.Lock()  # the writer thread takes spares while the others add them

    def spares(self) -> list[Path]:
        """The spare chunk files, oldest first."""
        found = []
        for entry in os.scandir(self.seg_dir):
            number = entry.name[len(SPARE_PREFIX) : -len(SPARE_SUFFIX)]
            if entry.name.startswith(SPARE_PREFIX) and entry.name.endswith(SPARE_SUFFIX) and number.isdigit():
                found.append((int(number), Path(entry.path)))
        return [path for _, path in sorted(found)]

    def _add_spare(self, path: Path) -> None:
        """Rename `path` to the next spare's name (under the lock)."""
        spares = self.spares()
        number = int(spares[-1].name[len(SPARE_PREFIX) : -len(SPARE_SUFFIX)]) + 1 if spares else 0
        os.rename(path, self.seg_dir / f"{SPARE_PREFIX}{number}{SPARE_SUFFIX}")

    def clear_leftovers(self) -> None:
        """A preparation cut short by a crash is started again, not finished."""
        (self.seg_dir / _PREPARING).unlink(missing_ok=True)

    def start_chunk(self, base: int, head: bytes) -> bool:
        """Create the chunk file at `base` holding `head`, durably (the file and its name); True if it
        took a spare."""
        path = chunk_path(self.seg_dir, base)
        with self._lock:
            spares = self.spares()
            if spares:
                fd = os.open(spares[0], os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.pwrite(fd, head, 0)
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                os.rename(spares[0], path)
        if not spares:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, head)
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.seg_dir)
        return bool(spares)

    def prepare(self) -> bool:
        """Write a chunk ahead (zeros, synced) when none is spare; False if it was stopped."""
        if self.spares():
            return True
        tmp = self.seg_dir / _PREPARING
        at = _write_zeros(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, self.chunk_size, lambda: self.stopping)
        if at < self.chunk_size:
            tmp.unlink(missing_ok=True)
            return False
        with self._lock:
            self._add_spare(tmp)
        fsync_dir(self.seg_dir)
        return True

    def recycle(self, base: int) -> bool:
        """Keep a dropped chunk as a spare while there are fewer than `spares`, else delete it; True if
        kept. A chunk shorter than `chunk_size` (it rolled a little before it) is written out to it with
        zeros, so that a commit never appends to a spare. The caller syncs the directory."""
        path = chunk_path(self.seg_dir, base)
        if len(self.spares()) < self.spares_max:
            try:
                self._fill(path)
                with self._lock:
                    if len(self.spares()) < self.spares_max:
                        self._add_spare(path)
                        return True
            except FileNotFoundError:
                return False
        path.unlink(missing_ok=True)
        return False

    def _fill(self, path: Path) -> None:
        if path.stat().st_size < self.chunk_size:
            _write_zeros(path, os.O_WRONLY, self.chunk_size, lambda: False)
