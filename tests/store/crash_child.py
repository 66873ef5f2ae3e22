"""Child of the crash test: appends forever with fsync=always, printing what was acknowledged.

argv: data_dir round. Each acknowledged append prints `A <id> <id> ...` and flushes,
so the parent knows exactly what the store promised before it was killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys

from logport.config import StoreConfig
from logport.store import SegmentStore, WriterCondition


def payload(event_id: int) -> bytes:
    size = 16 + (event_id * 7919) % 3000
    seed = hashlib.sha256(str(event_id).encode()).digest()
    return f"{event_id:012d}".encode() + (seed * (size // 32 + 1))[: size - 12]


async def writer(store: SegmentStore, round_: int, task: int) -> None:
    counter = 0
    out = sys.stdout
    while True:
        counter += 1
        base = (round_ * 100 + task) * 1_000_000 + counter * 10
        if task % 3 == 0:  # several frames in one append
            ids = [base, base + 1, base + 2]
            await store.append("crash", [payload(i) for i in ids])
        elif task % 3 == 1:  # exactly-once writer state rides along
            ids = [base]
            await store.append("crash", [payload(base)], writer=WriterCondition(f"w{round_}.{task}".encode(), end=counter))
        else:
            ids = [base]
            await store.append("crash", [payload(base)])
        out.write("A " + " ".join(map(str, ids)) + "\n")
        out.flush()


async def main() -> None:
    data_dir, round_ = sys.argv[1], int(sys.argv[2])
    store = await SegmentStore.open(StoreConfig(data_dir=data_dir, chunk_size=256 * 1024, fsync="always"))
    print("READY", flush=True)
    await asyncio.gather(*(writer(store, round_, t) for t in range(6)))


if __name__ == "__main__":
    asyncio.run(main())
