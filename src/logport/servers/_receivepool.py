"""Receive buffers for the segment protocol's append blocks, taken again once the store has written them.

A block is received in place into one buffer of its length and handed to the store as it is. A
fresh buffer per block costs more than the copies that fill and write it: bytearray(n) zero-fills
it, its pages fault in as the socket fills them, and glibc gives large ones back to the kernel when
they are freed, so the next block faults them in again. With 8 appenders of 64 KiB events, the hub's
writer thread spent up to 5x the CPU time on the same page-cache copy while the event loop faulted fresh
pages in beside it (0.78-1.39 s against 0.26-0.51 s for 512 MiB), and the listener reached 58-69% of
the store's own speed; with the buffers reused, 91-97% (docs/benchmarks.md, "segment").
"""

from __future__ import annotations

POOLED_MIN = 64 * 1024  # smaller blocks get a plain bytearray: small allocations are cheap and recycled by malloc


def capacity(n: int) -> int:
    """The size of the buffer a block of `n` bytes gets: `n` rounded up to a quarter of the power of two
    below it, so that blocks of about one size share buffers and no buffer is more than 25% unused."""
    step = max(1, (1 << (n.bit_length() - 1)) // 4)
    return -(-n // step) * step


class ReceivePool:
    """Free buffers by capacity, at most `limit` bytes of them; `trim` frees those not taken since the
    last trim, so that a burst's buffers do not stay with an idle hub."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.free_bytes = 0
        self._free: dict[int, list[bytearray]] = {}  # oldest first: take from the end, trim from the front
        self._low: dict[int, int] = {}  # the fewest free buffers of each capacity since the last trim

    def take(self, n: int) -> bytearray | memoryview:
        """A writable buffer of exactly `n` bytes (its contents are whatever a block left in it)."""
        if n < POOLED_MIN or not self.limit:
            return bytearray(n)
        cap = capacity(n)
        free = self._free.get(cap)
        if free:
            buf = free.pop()
            self.free_bytes -= cap
            self._low[cap] = min(self._low[cap], len(free))
        else:
            buf = bytearray(cap)
        return memoryview(buf)[:n]

    def give(self, data: object) -> None:
        """Take back a block's buffer. The caller guarantees that nothing reads it any more (the store
        has answered every append of it); anything that did not come from `take` is left alone."""
        if not isinstance(data, memoryview):
            return
        buf = data.obj
        if type(buf) is not bytearray:
            return
        cap = len(buf)
        if cap < POOLED_MIN or capacity(cap) != cap or self.free_bytes + cap > self.limit:
            return
        free = self._free.setdefault(cap, [])
        self._low.setdefault(cap, len(free))
        free.append(buf)
        self.free_bytes += cap

    def trim(self) -> int:
        """Free the buffers that were not needed since the last trim; the bytes freed."""
        freed = 0
        for cap, free in self._free.items():
            idle = self._low.get(cap, 0)
            if idle:
                del free[:idle]
                freed += idle * cap
            self._low[cap] = len(free)
        self.free_bytes -= freed
        return freed
