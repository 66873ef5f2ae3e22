"""Where the Spark source reads segments from: data directories or running hubs, several as one.

Both give the same things: segment names, bounds, the frame headers of a byte
range (to cut partitions and offsets on frame boundaries), whether a frame may
start at an offset (to check offsets given as options) and the frames
themselves. Opened in the driver to plan and in each task to read.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from logport.errors import LogportError, PeerUnavailable, RemoteProtocolError
from logport.store import frames
from logport.store.files import ChunkReader
from logport.store.identity import ensure_hub_identity
from logport.store.reader import DirectoryReader

log = logging.getLogger(__name__)

T = TypeVar("T")


class SourceOptionError(LogportError):
    """An option of the `logport` Spark source is missing or malformed."""


class SegmentAccess(Protocol):
    def names(self) -> list[str]: ...

    def bounds(self, name: str) -> tuple[int, int, bool]: ...

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]: ...

    def known_frame_starts(self, name: str) -> list[int]: ...

    def could_start_frame(self, name: str, offset: int) -> bool: ...

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]: ...

    def close(self) -> None: ...


class DirectorySegments:
    """A data directory, read with the store's own read-only reader."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.reader = DirectoryReader(data_dir)

    def identity(self) -> str:
        """The hub's identity. A directory no hub has served since identities came gets one now; one this
        reader may not write to (read-only storage, a snapshot) is named after its path instead, with a
        warning: a hub started on it later makes an identity of its own, and offsets kept under this one
        (a streaming checkpoint) no longer match it."""
        try:
            return ensure_hub_identity(self.data_dir)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
        identity = str(uuid.uuid5(uuid.NAMESPACE_URL, Path(self.data_dir).resolve().as_uri()))
        log.warning(f"data directory {self.data_dir} has no hub identity and this reader cannot write one there "
                    f"(read-only); it is named {identity} after its path: a hub started on it makes its own")
        return identity

    def names(self) -> list[str]:
        return self.reader.segment_names()

    def bounds(self, name: str) -> tuple[int, int, bool]:
        return self.reader.bounds(name)

    def _chunk_reader(self, name: str) -> ChunkReader:
        return self.reader.chunk_reader(name)

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        return self.reader.frame_headers(name, start, end)

    def known_frame_starts(self, name: str) -> list[int]:
        """Where frames start, known without a walk: the chunks' bases (no frame spans two chunks)."""
        return list(self.reader.chunk_reader(name).bases)

    def could_start_frame(self, name: str, offset: int) -> bool:
        return self.reader.could_start_frame(name, offset)

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]:
        bases = self.reader.chunk_reader(name).bases
        if bases and end > bases[-1]:
            # the range reaches into the last chunk: bounds() walks it once and keeps its layout; without it
            # each read in the last chunk walked the whole chunk again (a 57 MB one was read 19 times over,
            # 1.09 GB of preads, for one pass of its 300,000 events)
            self.reader.bounds(name)
        return self.reader.iter_frames(name, start, end)

    def close(self) -> None:
        self.reader.close()


class ServerSegments:
    """A running hub, over the segment protocol (so executors on other machines can read it).

    A connection that fails (refused, reset, timed out: a hub restarting, a link down) is made again
    until `timeout` seconds have passed since the failure; then PeerUnavailable names the hub. Reads
    are idempotent, so a retried one returns what the failed one would have, from where it stopped.
    """

    def __init__(self, server: str, timeout: float = 10.0) -> None:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise SourceOptionError(f"server {server!r} is not HOST:PORT")
        self.server = server
        self.host, self.port = host.strip("[]"), int(port)
        self.timeout = timeout
        self._client: Any = None
        self._identity: str | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _connect(self) -> Any:
        from logport.clients.retry import JITTER, Backoff
        from logport.clients.segment import BlockingSegmentClient

        deadline = time.monotonic() + self.timeout
        retry = Backoff(0.05, 1.0, JITTER, self.timeout).retrying(from_now=True)
        while True:
            remaining = deadline - time.monotonic()
            try:
                return BlockingSegmentClient(self.host, self.port, timeout=max(0.5, min(self.timeout, remaining)))
            except OSError as e:
                wait = retry.failed()
                if wait is None:
                    raise PeerUnavailable(f"hub {self.server}", e.strerror or str(e), waited=self.timeout, message=(
                        f"hub {self.server} did not answer within timeout={self.timeout:g} s (option timeout): "
                        f"{e.strerror or e}")) from None
                time.sleep(wait)

    def _retrying(self, call: Callable[[Any], T]) -> T:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return call(self.client)
            except PeerUnavailable:  # no connection within the timeout (_connect): said as it is
                raise
            except (OSError, ConnectionError) as e:
                self._drop()
                if time.monotonic() >= deadline:
                    raise PeerUnavailable(f"hub {self.server}", str(e), waited=self.timeout, connected=True, message=(
                        f"hub {self.server} failed and did not come back within timeout={self.timeout:g} s "
                        f"(option timeout): {e}")) from None

    def _drop(self) -> None:
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()
            self._client = None

    def identity(self) -> str:
        if self._identity is None:
            try:
                self._identity = self._retrying(lambda c: c.hub_id())
            except RemoteProtocolError as e:  # something else listens there (an HTTP proxy, an old hub)
                self._drop()
                raise PeerUnavailable(f"hub {self.server}", str(e), connected=True, message=(
                    f"{self.server} does not answer as a logport hub (GetHubInfo): {e}")) from None
        return self._identity

    def names(self) -> list[str]:
        return sorted(self._retrying(lambda c: c.list_segments()))

    def bounds(self, name: str) -> tuple[int, int, bool]:
        start, end, sealed = self._retrying(lambda c: c.info(name))
        return int(start), int(end), bool(sealed)

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        # The protocol serves whole frames only, so the headers come with their bodies.
        for offset, frame_type, body in self.iter_frames(name, start, end):
            yield offset, frame_type, len(body)

    def known_frame_starts(self, name: str) -> list[int]:
        return []  # the protocol does not say where chunks start

    def could_start_frame(self, name: str, offset: int) -> bool:
        """False when no frame can start at `offset`; True when one may (see BlockingSegmentClient)."""
        return self._retrying(lambda c: c.could_start_frame(name, offset))

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]:
        position = start
        deadline: float | None = None
        while position < end:
            try:
                for frame in self.client.iter_frames(name, position, end):
                    position = frame[0] + frames.HEADER_SIZE + len(frame[2])
                    deadline = None
                    yield frame
                return
            except GeneratorExit:  # stopped early (the planner found its cut): replies may still be coming,
                self._drop()  # so the next request goes over a new connection, not one out of step
                raise
            except PeerUnavailable:  # no connection within the timeout (_connect): said as it is
                raise
            except (OSError, ConnectionError) as e:
                self._drop()
                deadline = deadline or time.monotonic() + self.timeout
                if time.monotonic() >= deadline:
                    raise PeerUnavailable(f"hub {self.server}", str(e), waited=self.timeout, connected=True, message=(
                        f"hub {self.server} failed reading segment {name!r} at {position} and did not come back "
                        f"within timeout={self.timeout:g} s: {e}")) from None

    def close(self) -> None:
        self._drop()


@dataclass(frozen=True)
class HubLocation:
    """Where one hub is: a data directory (`path`) or HOST:PORT (`server`)."""

    kind: str  # "path" or "server"
    address: str

    def open(self, timeout: float) -> DirectorySegments | ServerSegments:
        if self.kind == "path":
            if not os.path.isdir(self.address):
                raise SourceOptionError(f"the logport source's path {self.address!r} is not a directory (a hub's "
                                        "data directory)")
            return DirectorySegments(self.address)
        return ServerSegments(self.address, timeout)


def hub_locations(options: dict[str, str]) -> list[HubLocation]:
    """The hubs the options name: `path` (data directories) or `server` (HOST:PORT), each comma-separated."""
    path, server = options.get("path"), options.get("server")
    if bool(path) == bool(server):
        raise SourceOptionError("the logport source needs exactly one of the options path (data directories, "
                                "comma-separated) or server (HOST:PORT of running hubs, comma-separated)")
    kind, value = ("path", path) if path else ("server", server)
    assert value is not None
    addresses = [a.strip() for a in value.split(",") if a.strip()]
    if not addresses:
        raise SourceOptionError(f"option {kind}={value!r} names no hub")
    if len(set(addresses)) != len(addresses):
        raise SourceOptionError(f"option {kind}={value!r} names a hub twice")
    return [HubLocation(kind, a) for a in addresses]


def hub_key(hub: str, segment: str) -> str:
    """The name of a hub's segment in offsets and partitions: segment names hold no '/'."""
    return f"{hub}/{segment}"


def split_key(key: str) -> tuple[str, str]:
    hub, sep, segment = key.rpartition("/")
    if not sep:
        raise SourceOptionError(f"offset key {key!r} is not HUB/SEGMENT")
    return hub, segment


class HubsSegments:
    """Several hubs as one SegmentAccess: names are HUB/SEGMENT keys (hub: its stable identity)."""

    def __init__(self, locations: list[HubLocation], timeout: float) -> None:
        self.locations = locations
        self.timeout = timeout
        self._hubs: dict[str, tuple[HubLocation, DirectorySegments | ServerSegments]] | None = None

    @property
    def hubs(self) -> dict[str, tuple[HubLocation, DirectorySegments | ServerSegments]]:
        if self._hubs is None:
            hubs: dict[str, tuple[HubLocation, DirectorySegments | ServerSegments]] = {}
            try:
                for location in self.locations:
                    access = location.open(self.timeout)
                    identity = access.identity()
                    if identity in hubs:
                        access.close()
                        raise SourceOptionError(f"{location.kind} {location.address!r} is the same hub ({identity}) "
                                                f"as {hubs[identity][0].address!r}")
                    hubs[identity] = (location, access)
            except BaseException:
                for _, access in hubs.values():
                    access.close()
                raise
            self._hubs = hubs
        return self._hubs

    def location(self, hub: str) -> HubLocation:
        return self.hubs[hub][0]

    def _access(self, key: str) -> tuple[DirectorySegments | ServerSegments, str]:
        hub, segment = split_key(key)
        entry = self.hubs.get(hub)
        if entry is None:
            raise SourceOptionError(f"hub {hub} (offset key {key!r}) is none of the hubs the options name: "
                                    f"{', '.join(sorted(self.hubs))}")
        return entry[1], segment

    def names(self) -> list[str]:
        return sorted(hub_key(hub, name) for hub, (_, access) in self.hubs.items() for name in access.names())

    def bounds(self, name: str) -> tuple[int, int, bool]:
        access, segment = self._access(name)
        return access.bounds(segment)

    def frame_headers(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        access, segment = self._access(name)
        return access.frame_headers(segment, start, end)

    def known_frame_starts(self, name: str) -> list[int]:
        access, segment = self._access(name)
        return access.known_frame_starts(segment)

    def could_start_frame(self, name: str, offset: int) -> bool:
        access, segment = self._access(name)
        return access.could_start_frame(segment, offset)

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, bytes | memoryview]]:
        access, segment = self._access(name)
        return access.iter_frames(segment, start, end)

    def close(self) -> None:
        if self._hubs is not None:
            for _, access in self._hubs.values():
                access.close()
            self._hubs = None


def source_timeout(options: dict[str, str]) -> float:
    value = options.get("timeout", "10")
    try:
        timeout = float(value)
    except ValueError:
        raise SourceOptionError(f"option timeout={value!r} is not a number of seconds") from None
    if not timeout > 0:
        raise SourceOptionError(f"option timeout={value!r} must be positive")
    return timeout


def open_segments(options: dict[str, str]) -> HubsSegments:
    """The hubs the options name (`path` or `server`, comma-separated), as one access keyed HUB/SEGMENT."""
    return HubsSegments(hub_locations(options), source_timeout(options))


def open_hub(location: HubLocation, hub: str, options: dict[str, str]) -> DirectorySegments | ServerSegments:
    """One hub, for a task: the one it was planned on (a different hub now at its address is refused)."""
    access = location.open(source_timeout(options))
    try:
        found = access.identity()
    except BaseException:
        access.close()
        raise
    if found != hub:
        access.close()
        raise SourceOptionError(f"{location.kind} {location.address!r} is hub {found} now, not hub {hub} the "
                                "query planned to read there")
    return access


def select_segments(names: list[str], patterns: str | None) -> list[str]:
    """HUB/SEGMENT keys whose segment matches `patterns` (comma-separated names or globs; none: every
    segment), sorted."""
    if not patterns:
        return sorted(names)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n.rpartition("/")[2], p) for p in wanted))
