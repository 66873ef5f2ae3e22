"""The one exception hierarchy of logport.

Messages name the peer, the limit and the value, e.g.
"frame of 70000000 bytes from 127.0.0.1:5123 exceeds chunk_size_limit 67108864".
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

QUOTE_LIMIT = 200  # characters of a peer's input quoted in an error message


class _BoundedRepr(reprlib.Repr):
    """reprlib with bytes cut before they are rendered (its fallback renders them whole)."""

    def __init__(self) -> None:
        super().__init__()  # the limits as attributes: keyword arguments need Python 3.12
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = 8
        self.maxset = self.maxfrozenset = self.maxdeque = 8
        self.maxstring = self.maxother = QUOTE_LIMIT
        self.maxlong = 40

    def repr_bytes(self, x: bytes, level: int) -> str:
        return _cut(repr(x[: self.maxstring]), self.maxstring)

    def repr_bytearray(self, x: bytearray, level: int) -> str:
        return _cut(repr(x[: self.maxstring]), self.maxstring)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BOUNDED = _BoundedRepr()


def brief(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """`value`'s repr for an error message, cut to `limit` characters (a long string or bytes says
    how long it was).

    A peer's value may be a 16 MiB map: it is never rendered whole (a full repr
    took 0.13 s for 7 MB, with the event loop stalled).
    """
    if isinstance(value, str | bytes | bytearray) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{_cut(repr(value[:limit]), limit)} ({len(value)} {unit})"
    return _cut(_BOUNDED.repr(value), limit)


class LogportError(Exception):
    """Base of every error logport raises on purpose."""


class ConfigError(LogportError):
    """The configuration names an unknown key or holds a bad value."""


# --- protocols (h11 style: the peer broke the protocol, or we tried to) ---


class ProtocolError(LogportError):
    """A protocol was violated. `peer` is filled in by the I/O adapter."""

    def __init__(self, message: str, *, peer: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.peer = peer

    def __str__(self) -> str:
        if self.peer:
            return f"{self.message} (peer {self.peer})"
        return self.message


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow."""


class LimitExceeded(RemoteProtocolError):
    """The peer went over a configured limit (size, count, decompressed size)."""

    def __init__(self, what: str, value: int, limit_name: str, limit: int, *, peer: str | None = None,
                 unit: str = "bytes") -> None:
        super().__init__(f"{what} of {value} {unit} exceeds {limit_name} {limit}", peer=peer)
        self.what = what
        self.value = value
        self.limit_name = limit_name
        self.limit = limit
        self.unit = unit

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by decode workers: the arguments, not the message
        return LimitExceeded, (self.what, self.value, self.limit_name, self.limit), self.__dict__

    def __str__(self) -> str:
        if self.peer:
            return f"{self.what} of {self.value} {self.unit} from {self.peer} exceeds {self.limit_name} {self.limit}"
        return self.message


class LocalProtocolError(ProtocolError):
    """We tried to send something the protocol does not allow."""


class AuthenticationError(RemoteProtocolError):
    """The peer failed a handshake (shared key, user, token)."""


# --- store ---


class StoreError(LogportError):
    """Base of segment store errors."""


class NoSuchSegment(StoreError):
    def __init__(self, name: str, where: str = "") -> None:
        super().__init__(f"no such segment {name!r}" + (f" {where}" if where else ""))
        self.name = name


class SegmentExists(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"segment {name!r} already exists")
        self.name = name


class InvalidSegmentName(StoreError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid segment name {name!r}: {reason}")
        self.name = name


class SegmentSealed(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"segment {name!r} is sealed")
        self.name = name


class OffsetTruncated(StoreError):
    """A read below the segment's start offset (retention or truncation removed it)."""

    def __init__(self, name: str, offset: int, start_offset: int) -> None:
        super().__init__(
            f"offset {offset} of segment {name!r} is truncated; the segment starts at {start_offset}"
        )
        self.name = name
        self.offset = offset
        self.start_offset = start_offset


class WriterOffsetMismatch(StoreError):
    """A conditional append does not continue the writer's stored offset (a gap)."""

    def __init__(self, name: str, writer: bytes, expected: int, got: int) -> None:
        super().__init__(
            f"writer {writer.hex()} on segment {name!r} continues from {got} "
            f"but its stored offset is {expected}"
        )
        self.name = name
        self.writer = writer
        self.expected = expected
        self.got = got


class StoreLimitExceeded(StoreError):
    """A configured store limit (frame size, segment count) was hit."""


class StoreClosed(StoreError):
    """The store is closed or closing."""


class StoreWriteFailed(StoreError):
    """A write or fsync failed (disk full, I/O error); nothing of it was acknowledged."""


class CorruptData(StoreError):
    """Stored bytes that fail their checksum (or a v2 chunk's layout): never served as events."""

    def __init__(self, name: str, start: int, end: int, path: str, reason: str, message: str = "") -> None:
        super().__init__(message or f"segment {name!r}: bytes {start}..{end} of {path} are corrupt ({reason}); "
                                    f"nothing of that range is served (logport verify reports every such range)")
        self.name = name
        self.start = start
        self.end = end
        self.path = path
        self.reason = reason

    @classmethod
    def from_message(cls, name: str, message: str) -> CorruptData | None:
        """The error a hub's reply message describes (the segment protocol carries it as text), if it is this."""
        found = _CORRUPT.search(message)
        if found is None:
            return None
        return cls(name, int(found["start"]), int(found["end"]), found["path"], found["reason"])


_CORRUPT = re.compile(r"bytes (?P<start>\d+)\.\.(?P<end>\d+) of (?P<path>.+?) are corrupt \((?P<reason>[^)]*)\)")


class DataGivenUp(CorruptData):
    """Corrupt bytes an operator gave up (`logport verify --repair`, recorded in the segment's state): a reader
    skips the range with a warning and goes on at `end`; a reader that does not know this refuses it as corrupt."""

    def __init__(self, name: str, start: int, end: int, path: str, reason: str, when: str) -> None:
        super().__init__(name, start, end, path, reason, f"segment {name!r}: bytes {start}..{end} of {path} were "
                                                         f"given up at {when} by logport verify --repair ({reason}); skipped")
        self.when = when

    @classmethod
    def from_message(cls, name: str, message: str) -> DataGivenUp | None:
        found = _GIVEN_UP.search(message)
        if found is None:
            return None
        return cls(name, int(found["start"]), int(found["end"]), found["path"], found["reason"], found["when"])


_GIVEN_UP = re.compile(r"bytes (?P<start>\d+)\.\.(?P<end>\d+) of (?P<path>.+?) were given up at (?P<when>\S+) "
                       r"by logport verify --repair \((?P<reason>[^)]*)\)")


class DataDirectoryInUse(StoreError):
    """Another process (a second hub) holds the data directory's lock: two writers would overwrite each other."""

    def __init__(self, data_dir: str, holder: str) -> None:
        super().__init__(f"data directory {data_dir} is in use by {holder}; stop it, or give this hub another "
                         f"store.data_dir")
        self.data_dir = data_dir


# --- worker processes ---


class WorkerLost(LogportError):
    """A decode worker process died (or its pool was closed) before it answered."""


class WorkerError(LogportError):
    """What a worker raised, as text, when the exception itself could not be sent back."""


# --- clients and the command line ---


def failure_reason(exc: BaseException) -> str:
    """Why a connection failed, in words ("connection refused"), not as an errno and an address tuple."""
    import socket
    import ssl

    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: the server's certificate is not trusted ({exc.verify_message}; see --tls-ca, --tls-insecure)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}): does the server speak TLS?"
    if isinstance(exc, TimeoutError):
        return str(exc) or "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__


class ServerUnavailable(LogportError, ConnectionError):
    """A client gave up on its server: it could not connect, or the server kept failing, for its retry time.
    A ConnectionError too: what the clients raised for it before, and what a caller may catch."""

    def __init__(self, peer: str, reason: str, *, waited: float | None = None, connected: bool = False) -> None:
        head = f"{peer} kept failing" if connected else f"cannot connect to {peer}"
        tail = f"; gave up after {waited:g} s" if waited else ""
        super().__init__(f"{head}: {reason}{tail}")
        self.peer = peer
        self.reason = reason
        self.waited = waited
        self.connected = connected  # the server was reached before it failed


class DataDirectoryMissing(StoreError):
    """A command that reads a data directory was pointed at one that does not exist."""

    def __init__(self, data_dir: str) -> None:
        super().__init__(f"data directory {data_dir} does not exist (give the hub's store.data_dir with --data-dir "
                         f"or --config)")
        self.data_dir = data_dir


class NotADataDirectory(StoreError):
    """A command that reads a data directory was pointed at something else (a file, another directory)."""

    def __init__(self, data_dir: str, why: str) -> None:
        super().__init__(f"{data_dir} is not a logport data directory: {why} (give the hub's store.data_dir with "
                         f"--data-dir or --config)")
        self.data_dir = data_dir
