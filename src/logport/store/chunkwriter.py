"""The writer thread's side of a segment: commit groups written into chunk files behind their COMMIT
frames (format v2), chunks rolled into spare files, fdatasync, and a failed commit undone."""

from __future__ import annotations

import collections
import errno
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from crc32c import crc32c

from logport.store import frames
from logport.store.appends import Buffer, PendingAppend
from logport.store.files import ChunkFiles, ChunkReader, chunk_path, start_writeback
from logport.store.groups import (
    CHUNK_HEADER_SIZE,
    COMMIT_SIZE,
    VERSION,
    ChunkLayout,
    chunk_header,
    commit_fields,
    commit_frame,
    commit_record,
)
from logport.store.settings import StoreConfig
from logport.store.writers import WriterState

_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024
_PAGE = 4096  # the page size writeback works in (a larger one only moves where the first slice starts)
_DIRECT_FLAGS = getattr(os, "O_DIRECT", 0) | getattr(os, "O_DSYNC", 0)

log = logging.getLogger(__name__)


def append_record(p: PendingAppend) -> bytes:
    """The writer record that heads an append in its group: its writer's, or, for several frames with no
    writer, one that makes them all-or-nothing; b"" for a single frame with no writer."""
    if p.writer is not None:
        return frames.writer_record(p.writer.key, p.writer.end, p.size)
    if p.multi:
        return frames.writer_record(b"", 0, p.size)  # an atomic group, no writer
    return b""


def chunk_head(base: int, writers: dict[bytes, int]) -> tuple[bytes, ChunkLayout, int]:
    """A new chunk's head: its header, then a group with the writer table when there are writers.
    Returns the bytes, the chunk's layout after them, and the CRC the next group continues."""
    header, crc = chunk_header(base)
    layout = ChunkLayout(base, VERSION, base + len(header))
    if not writers:
        return header, layout, crc
    table = frames.writer_table(writers)
    commit, crc = commit_frame(base + len(header), crc, [table])
    layout.groups.append(base + len(header))
    layout.end += len(commit) + len(table)
    return header + commit + table, layout, crc


class ChunkWriter:
    """Owned by the writer thread (one commit at a time); `layout` is what readers may walk of the active
    chunk, and the descriptor is shared with the interval fsync under `lock`."""

    def __init__(self, seg_dir: Path, config: StoreConfig, chunks: ChunkReader, files: ChunkFiles,
                 on_fsync: Callable[[float], None] | None = None) -> None:
        self.dir = seg_dir
        self.config = config
        self.chunks = chunks
        self.files = files
        self._on_fsync = on_fsync
        self.lock = threading.Lock()
        self.fd = -1
        self.base = 0  # base offset of the active chunk
        self.write_pos = 0  # where the next write goes (the segment's end between commits)
        self.layout = ChunkLayout(0, VERSION, 0)  # the active chunk as written
        self.prev = 0  # the stored CRC of the active chunk's last group: the next group's `prev`
        self.has_data = False  # appends went into the active chunk (a roll before one would loop)
        # the layouts of the chunks that commits rolled from (their last_crc set), for the loop to mark
        self.finished: collections.deque[ChunkLayout] = collections.deque()
        self.dirty = False  # written and not yet synced (fsync = interval or never)
        self._open_group: int | None = None  # a group whose frames are being written, its COMMIT frame not yet
        # fsync = always with direct_io: commits go through `_direct_fd` (see _write_group_direct)
        self._direct = config.fsync == "always" and config.direct_io and _DIRECT_FLAGS != 0
        self._direct_fd = -1
        self._stage: mmap.mmap | None = None  # page-aligned: a group is copied here and written from it
        self._page_head: bytes | None = None  # the active chunk's bytes from write_pos's page start to write_pos
        self._file_size = 0  # the active chunk file's size: direct writes go only below it
        self._unsynced = False  # a group went through the page cache since the last fdatasync

    def resume(self, layout: ChunkLayout) -> None:
        """Go on writing a v2 chunk that recovery walked."""
        self._open(layout.base)
        self.base, self.layout, self.prev = layout.base, layout, layout.last_crc
        self.has_data = layout.end > layout.base + CHUNK_HEADER_SIZE
        self.write_pos = layout.end
        self._page_head = None  # read from the file when a direct commit needs it

    def roll(self, base: int, writers: dict[bytes, int], *, known: bool = False) -> None:
        """Start a new chunk at `base`, its head carrying the writer table (`known`: the chunk reader has
        it already: a chunk that held nothing, replaced)."""
        head, layout, crc = chunk_head(base, writers)
        self.files.start_chunk(base, head)
        self._open(base)
        self.base, self.layout, self.prev, self.has_data = base, layout, crc, False
        self.write_pos = layout.end
        self._page_head = head[len(head) - len(head) % _PAGE :]
        if not known:
            self.chunks.add_chunk(base)

    def write(self, accepted: Sequence[PendingAppend], writers: WriterState) -> list[int]:
        """Write every accepted append (rolling chunks) as commit groups, one per chunk it reaches, fsync
        per policy; the offset of each append's first frame. On a failure nothing of it stays readable."""
        undo = (self.base, self.write_pos, self.prev, self.layout, len(self.layout.groups))
        created: list[int] = []
        finished: list[ChunkLayout] = []
        offsets: list[int] = []
        parts: list[Buffer] = []  # the group's frames, after its COMMIT frame
        group_start = self.write_pos
        pos = group_start + COMMIT_SIZE
        claimed: dict[bytes, int] = {}  # this commit's writers so far: with the stored ones, a new chunk's table
        try:
            for p in accepted:
                record = append_record(p)
                n = len(record) + p.size
                if pos - self.base + n > self.config.chunk_size and (parts or self.has_data):
                    if parts:
                        self._write_group(group_start, parts, pos)
                    if self._unsynced:
                        self.sync()
                    created.append(pos if parts else group_start)
                    self.layout.last_crc = self.prev
                    finished.append(self.layout)
                    self.roll(created[-1], writers.table(claimed))
                    parts = []
                    group_start = self.write_pos
                    pos = group_start + COMMIT_SIZE
                if record:
                    parts.append(record)
                if p.writer is not None:
                    claimed[p.writer.key] = p.writer.end
                offsets.append(pos + len(record))
                parts.extend(p.parts)
                pos += n
            if parts:
                self._write_group(group_start, parts, pos)
            if self.config.fsync != "always":
                self.dirty = True
            elif self._unsynced:  # not when every group went through the direct descriptor: each is durable
                self.sync()
        except BaseException:  # an I/O error, or a bug past the write: its appenders hear "not written"
            self._undo(undo, created)
            raise
        self.finished.extend(finished)
        return offsets

    def _write_group(self, start: int, parts: list[Buffer], end: int) -> None:
        """One commit group at `start` (the write position): its frames first, from after the COMMIT
        frame's place, folded into the group's CRC as they are written (see _flush), then the COMMIT
        frame, at `start`. Its order on disk is COMMIT then frames, as ever; written in this order, the
        CRC of each slice is computed while the disk takes the slice. Nothing counts before the
        fdatasync that follows: until then a power loss may keep any part of the group's writes, in any
        order, whichever came first, so this order makes no state recovery has not to handle (a group
        without its COMMIT frame, or with another's, is no valid group: its appenders heard nothing)."""
        fields, crc = commit_fields(start, end - start - COMMIT_SIZE, self.prev)
        self._open_group = start
        if self._direct_fd >= 0 and -(-(end - self.base) // _PAGE) * _PAGE <= self._file_size:
            crc = self._write_group_direct(start, parts, end, fields, crc)
        else:
            crc = self._flush(parts, start + COMMIT_SIZE, end, crc)
            self._pwritev_all([commit_record(fields, crc)], COMMIT_SIZE, start - self.base)
            self._file_size = max(self._file_size, end - self.base)
            self._unsynced = True
            self._page_head = None
        self._open_group = None
        self.write_pos = end
        self.prev = crc
        self.layout.groups.append(start)
        self.layout.end = end
        self.has_data = True

    def engine_position(self) -> tuple[int, int, int, int, bytes, int] | None:
        """Where the direct commit engine (store/engine.py) goes on from, when the active chunk takes
        direct writes from the segment's end on: (descriptor, base, end, prev, page head, limit)."""
        limit = self.base + min(self.config.chunk_size, self._file_size // _PAGE * _PAGE)
        if self._direct_fd < 0 or self.write_pos + COMMIT_SIZE >= limit:
            return None
        off = self.write_pos - self.base
        return (self._direct_fd, self.base, self.write_pos, self.prev, self._head_bytes(off - off % _PAGE, off),
                limit)

    def engine_stopped(self, end: int, prev: int, page_head: bytes) -> None:
        """The engine wrote up to `end` (its groups are in `layout`), continuing the chain to `prev`."""
        if end != self.write_pos:
            self.has_data = True
        self.write_pos, self.prev, self._page_head = end, prev, page_head

    def engine_failed(self, start: int, prev: int) -> None:
        """The engine's write of the group at `start` failed: it and every group after it are not written.
        Back to before it; its COMMIT frame's place is zeroed (part of the write may have landed), as
        `_undo` does."""
        self.write_pos, self.prev, self._page_head = start, prev, None
        self.has_data = self.layout.end > self.base + CHUNK_HEADER_SIZE
        try:
            os.pwrite(self.fd, bytes(COMMIT_SIZE), start - self.base)
        except OSError:
            pass

    def _write_group_direct(self, start: int, parts: list[Buffer], end: int, fields: bytes, crc: int) -> int:
        """The group as one write of whole pages through the O_DIRECT|O_DSYNC descriptor, into blocks the
        file already has (a recycled or pre-written chunk: an extending direct write would commit the
        journal as an appending one does, and measured slower than write + fdatasync): durable when it
        returns, with no fdatasync after it; the group's CRC. The pages are assembled in `_stage`: the
        bytes already in the group's first page (the page head), the COMMIT frame, the frames, zeros to
        the last page's end (past the group: the next group writes over them). Timed in this writer for
        1 MiB groups on this machine's disk: buffered, 0.30 ms writing and 0.65 in fdatasync; direct, 0.15
        copying, 0.045 in CRC and 0.61 writing, no faster in all on a quiet machine, with less page-cache
        work (docs/benchmarks.md, store). Rewriting the page head writes the same bytes again: torn by a
        power loss, that page still holds them."""
        off = start - self.base
        lo = off - off % _PAGE
        head = self._head_bytes(lo, off)
        frames_at = off - lo + COMMIT_SIZE
        stop = end - self.base - lo
        size = -(-stop // _PAGE) * _PAGE
        stage = self._staging(size)
        view = memoryview(stage)
        try:
            view[: len(head)] = head
            at = frames_at
            for part in parts:
                n = len(part)
                view[at : at + n] = part
                at += n
            crc = crc32c(view[frames_at:stop], crc)
            view[off - lo : frames_at] = commit_record(fields, crc)
            view[stop:size] = bytes(size - stop)
            t0 = time.perf_counter()
            done = 0
            while done < size:
                done += os.pwrite(self._direct_fd, view[done:size], lo + done)
            if self._on_fsync is not None:
                self._on_fsync(time.perf_counter() - t0)
            tail = stop - stop % _PAGE
            self._page_head = bytes(view[tail:stop])
        except BaseException:
            self._page_head = None
            raise
        finally:
            view.release()
        return crc

    def _head_bytes(self, lo: int, off: int) -> bytes:
        """The active chunk's bytes [lo, off): kept from the last write, or read back after a resume or
        an undo."""
        if self._page_head is None or len(self._page_head) != off - lo:
            self._page_head = os.pread(self.fd, off - lo, lo) if off > lo else b""
        return self._page_head

    def _staging(self, size: int) -> mmap.mmap:
        if self._stage is None or len(self._stage) < size:
            if self._stage is not None:
                self._stage.close()
            self._stage = mmap.mmap(-1, max(size, 4 * 1024 * 1024))  # anonymous: page-aligned
        return self._stage

    def _flush(self, parts: list[Buffer], pos: int, end: int, crc: int) -> int:
        """pwritev the buffers at segment offset `pos` (up to `end`), IOV_MAX at a time, each batch
        folded into `crc` (returned) after it is written. Of a group larger than `writeback_bytes`, each
        slice of about that size goes to the disk (start_writeback) before its CRC is computed and the
        next slice is copied, so the fdatasync after waits for the last slice, not for all of it: a
        16 MiB group plain gave 446-900 MB/s on this machine's disk, sliced at 1 MiB 1,564-1,712. The
        page of the group's COMMIT frame is left to the fdatasync (the frame is written last, so the
        page would go to the disk twice)."""
        at = pos - self.base
        stop = end - self.base
        slice_bytes = self.config.writeback_bytes if self.config.fsync != "never" else 0
        if end - pos <= slice_bytes:
            slice_bytes = 0
        after_commit_page = -(-at // _PAGE) * _PAGE
        batch: list[Buffer] = []
        size = 0
        for part in parts:
            batch.append(part)
            size += len(part)
            if len(batch) == _IOV_MAX or (slice_bytes and size >= slice_bytes):
                self._pwritev_all(batch, size, at)
                if slice_bytes and at + size < stop:  # the last slice is the fdatasync's
                    lo = max(at, after_commit_page)
                    if at + size > lo:
                        start_writeback(self.fd, lo, at + size - lo)
                for written in batch:
                    crc = crc32c(written, crc)
                at += size
                batch, size = [], 0
        if batch:
            self._pwritev_all(batch, size, at)
            for written in batch:
                crc = crc32c(written, crc)
        return crc

    def _pwritev_all(self, batch: list[Buffer], size: int, at: int) -> None:
        written = os.pwritev(self.fd, batch, at)
        if written < size:  # short write (rare): finish this batch byte by byte
            rest = memoryview(b"".join(batch))[written:]
            at += written
            while rest:
                n = os.pwrite(self.fd, rest, at)
                at += n
                rest = rest[n:]

    def sync(self) -> None:
        self._unsynced = False
        self._fdatasync(self.fd)

    def sync_interval(self) -> None:
        """fsync=interval, in a worker thread: through a duplicate of the active chunk's descriptor,
        which the writer thread may replace (and close) meanwhile when it rolls."""
        with self.lock:
            fd = os.dup(self.fd)
        try:
            self._fdatasync(fd)
        finally:
            os.close(fd)

    def _fdatasync(self, fd: int) -> None:
        t0 = time.perf_counter()
        os.fdatasync(fd)
        if self._on_fsync is not None:
            self._on_fsync(time.perf_counter() - t0)

    def _open(self, base: int) -> None:
        """Write to the chunk at `base` from now on (under the lock: see sync_interval)."""
        path = chunk_path(self.dir, base)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        with self.lock:
            old, self.fd = self.fd, fd
        if old >= 0:
            os.close(old)
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        self._file_size = os.fstat(fd).st_size
        if self._direct:
            try:
                self._direct_fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | _DIRECT_FLAGS)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self._direct = False  # the filesystem takes no O_DIRECT (tmpfs): write + fdatasync
                log.info(f"store: {self.dir} takes no O_DIRECT; commits are written and fdatasynced")

    def _undo(self, undo: tuple[int, int, int, ChunkLayout, int], created: list[int]) -> None:
        """Put things back as they were before a failed commit (the files best effort; reads stop at the
        segment's end): the chunks it started go, and the COMMIT frames it wrote are zeroed, so that
        neither recovery nor a reader beside the hub keeps what its appenders were told was not written."""
        base, pos, prev, layout, group_count = undo
        written = layout.groups[group_count:]
        if self._open_group is not None and self.base == base:  # its frames written, and maybe its COMMIT frame
            written.append(self._open_group)
        self._open_group = None
        del layout.groups[group_count:]
        layout.end = pos
        try:
            if created:
                for chunk in created:
                    chunk_path(self.dir, chunk).unlink(missing_ok=True)
                self.chunks.bases = [b for b in self.chunks.bases if b not in created]
                self._open(base)
            for start in written:
                os.pwrite(self.fd, bytes(COMMIT_SIZE), start - base)
        except OSError:
            pass
        self.base, self.write_pos, self.prev, self.layout = base, pos, prev, layout
        self.has_data = pos > base + CHUNK_HEADER_SIZE
        self._page_head = None

    def close(self) -> None:
        if self.fd >= 0:
            end = self.write_pos - self.base
            if self._file_size > end:
                # a recycled chunk's old bytes follow the last group: zeros in the next COMMIT frame's place
                # tell the next start that the hub stopped here, not a crash in the middle of a write
                os.pwrite(self.fd, bytes(min(COMMIT_SIZE, self._file_size - end)), end)
            if self.config.fsync != "never" or self.dirty or self._file_size > end:
                os.fdatasync(self.fd)
            os.close(self.fd)
            self.fd = -1
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        if self._stage is not None:
            self._stage.close()
            self._stage = None
