"""The one receive buffer every protocol reader shares (as h11's `_receivebuffer`).

Bytes are appended at the end and consumed from the front; consumed bytes are
dropped lazily so that many small extractions cost no copying of the rest.
"""

from __future__ import annotations

import struct
from typing import Final

from logport.store.frames import HEADER, HEADER_SIZE


class _NeedData:
    """Sentinel: the buffer does not yet hold a whole message."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()

_U32 = struct.Struct(">I")

# Compact once this many consumed bytes sit at the front and they are at
# least half the buffer: amortised O(1) per byte.
_COMPACT_AT = 64 * 1024


class ReceiveBuffer:
    __slots__ = ("_data", "_start")

    def __init__(self) -> None:
        self._data = bytearray()
        self._start = 0

    def __iadd__(self, more: bytes | bytearray | memoryview) -> ReceiveBuffer:
        self._data += more
        return self

    def __len__(self) -> int:
        return len(self._data) - self._start

    def __bool__(self) -> bool:
        return len(self) > 0

    def __bytes__(self) -> bytes:
        return bytes(self._data[self._start :])

    @property
    def start(self) -> int:
        """Index of the first unconsumed byte within `raw`."""
        return self._start

    @property
    def raw(self) -> bytearray:
        """The underlying bytearray; valid data is `raw[start:]`. Do not keep views across calls."""
        return self._data

    def peek(self, count: int) -> bytes:
        """Up to `count` bytes from the front, without consuming them."""
        with memoryview(self._data) as view:
            return bytes(view[self._start : self._start + count])

    def peek_byte(self, index: int = 0) -> int | None:
        i = self._start + index
        if i < len(self._data):
            return self._data[i]
        return None

    def peek_u32(self, index: int = 0) -> int | None:
        """The big-endian uint32 at `index` from the front, or None if not all there."""
        i = self._start + index
        if i + 4 > len(self._data):
            return None
        return int(_U32.unpack_from(self._data, i)[0])

    def peek_header(self) -> tuple[int, int] | None:
        """A frame header (store/frames.py: int32 type, uint32 length) at the front, or None."""
        if len(self) < HEADER_SIZE:
            return None
        t, n = HEADER.unpack_from(self._data, self._start)
        return int(t), int(n)

    def extract(self, count: int) -> bytes:
        """Consume exactly `count` bytes; the caller checked that they are there."""
        start = self._start
        end = start + count
        with memoryview(self._data) as view:  # one copy (a bytearray slice would be a second)
            out = bytes(view[start:end])
        self._advance(end)
        return out

    def maybe_extract_exact(self, count: int) -> bytes | None:
        if len(self) < count:
            return None
        return self.extract(count)

    def extract_all(self) -> bytes:
        return self.extract(len(self))

    def skip(self, count: int) -> None:
        self._advance(self._start + min(count, len(self)))

    def _advance(self, new_start: int) -> None:
        self._start = new_start
        if new_start >= len(self._data):
            self._data.clear()
            self._start = 0
        elif new_start >= _COMPACT_AT and new_start * 2 >= len(self._data):
            del self._data[:new_start]
            self._start = 0

    def consumed(self, count: int) -> None:
        """Mark `count` bytes as consumed after a caller parsed them in place via `raw`/`start`."""
        self.skip(count)
