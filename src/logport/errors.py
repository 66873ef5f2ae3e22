"""The one exception hierarchy of logport.

Messages name the peer, the limit and the value, e.g.
"frame of 70000000 bytes from 127.0.0.1:5123 exceeds chunk_size_limit 67108864".
"""

from __future__ import annotations

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
    def __init__(self, name: str) -> None:
        super().__init__(f"no such segment {name!r}")
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
