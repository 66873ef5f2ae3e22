"""Where the Spark source reads segments from: a data directory or a running hub.

Both give the same things: segment names, bounds, the frame headers of a byte
range (to cut partitions and offsets on frame boundaries), whether a frame may
start at an offset (to check offsets given as options) and the frames
themselves. Opened in the driver to plan and in each task to read.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from typing import Protocol

from logport.errors import LogportError
from logport.store.files import ChunkReader
from logport.store.reader import DirectoryReader


class SourceOptionError(LogportError):
    """An option of the `logport` Spark source is missing or malformed."""


class SegmentAccess(Protocol):
    def names(self) -> list[str]: ...

    def bounds(self, name: str) -> tuple[int, int, bool]: ...

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]: ...

    def could_start_frame(self, name: str, offset: int) -> bool: ...

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]: ...

    def close(self) -> None: ...


class DirectorySegments:
    """A data directory, read with the store's own read-only reader."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.reader = DirectoryReader(data_dir)

    def names(self) -> list[str]:
        return self.reader.segment_names()

    def bounds(self, name: str) -> tuple[int, int, bool]:
        return self.reader.bounds(name)

    def _chunk_reader(self, name: str) -> ChunkReader:
        return self.reader.chunk_reader(name)

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        return self.reader.frame_headers(name, start, end)

    def could_start_frame(self, name: str, offset: int) -> bool:
        return self.reader.could_start_frame(name, offset)

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]:
        return self.reader.iter_frames(name, start, end)

    def close(self) -> None:
        self.reader.close()


class ServerSegments:
    """A running hub, over the segment protocol (so executors on other machines can read it)."""

    def __init__(self, server: str, timeout: float = 10.0) -> None:
        from logport.clients.segment import BlockingSegmentClient

        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise SourceOptionError(f"server {server!r} is not HOST:PORT")
        self.client = BlockingSegmentClient(host.strip("[]"), int(port), timeout=timeout)

    def names(self) -> list[str]:
        return sorted(self.client.list_segments())

    def bounds(self, name: str) -> tuple[int, int, bool]:
        start, end, sealed = self.client.info(name)
        return int(start), int(end), bool(sealed)

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        # The protocol serves whole frames only, so the headers come with their bodies.
        for offset, frame_type, body in self.client.iter_frames(name, start, end):
            yield offset, frame_type, len(body)

    def could_start_frame(self, name: str, offset: int) -> bool:
        """False when no frame can start at `offset`; True when one may (see BlockingSegmentClient)."""
        return self.client.could_start_frame(name, offset)

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]:
        return self.client.iter_frames(name, start, end)

    def close(self) -> None:
        self.client.close()


def open_segments(options: dict[str, str]) -> SegmentAccess:
    """The access the options name: `path` (a data directory) or `server` (HOST:PORT)."""
    path, server = options.get("path"), options.get("server")
    if bool(path) == bool(server):
        raise SourceOptionError("the logport source needs exactly one of the options path (a data directory) "
                                "or server (HOST:PORT of a running hub)")
    if path:
        if not os.path.isdir(path):
            raise SourceOptionError(f"the logport source's path {path!r} is not a directory (a hub's data directory)")
        return DirectorySegments(path)
    assert server is not None
    return ServerSegments(server, float(options.get("timeout", "10")))


def select_segments(names: list[str], patterns: str | None) -> list[str]:
    """Names matching `patterns` (comma-separated names or globs; none: every segment), sorted."""
    if not patterns:
        return sorted(names)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in wanted))
