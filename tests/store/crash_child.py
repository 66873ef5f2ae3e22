"""Child of the crash test: appends forever with fsync=always, printing what was acknowledged.

argv: data_dir round. Each acknowledged append prints `A <offset> <key> <end> <id> ... ;` and
flushes, so the parent knows exactly what the store promised before it was killed: the offset of
its first frame (AppendResult.offset), the writer key and end it carried (`-` without a writer)
and the ids of its events, one frame each, in order.

The writers keep their keys from round to round and carry on from their stored offset. Each
first resends its last stored append (its acknowledgement may have died with the last child):
`D <key> <end> <1 if answered as a duplicate, else 0> ;`.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys

from logport.config import StoreConfig
from logport.store import SegmentStore, WriterCondition

SEGMENT = "crash"
TASKS = 6


def payload(event_id: int) -> bytes:
    size = 16 + (event_id * 7919) % 3000
    seed = hashlib.sha256(str(event_id).encode()).digest()
    return f"{event_id:012d}".encode() + (seed * (size // 32 + 1))[: size - 12]


def writer_key(task: int) -> bytes:
    return f"w{task}".encode()


def writer_event(task: int, end: int) -> int:
    """The id of a writer's append that moves it to `end`: the same in every round, for a resend."""
    return 900_000_000_000 + task * 1_000_000_000 + end


def report(*fields: object) -> None:
    sys.stdout.write(" ".join(map(str, fields)) + " ;\n")
    sys.stdout.flush()


async def writer(store: SegmentStore, round_: int, task: int) -> None:
    if task % 3 == 1:  # exactly-once writer state rides along
        key = writer_key(task)
        end = store.writer_offset(SEGMENT, key)
        if end:
            r = await store.append(SEGMENT, [payload(writer_event(task, end))],
                                   writer=WriterCondition(key, end=end, start=end - 1))
            report("D", key.decode(), end, int(r.duplicate))
        while True:
            end += 1
            event_id = writer_event(task, end)
            r = await store.append(SEGMENT, [payload(event_id)], writer=WriterCondition(key, end=end, start=end - 1))
            report("A", r.offset, key.decode(), end, event_id)
    counter = 0
    while True:
        counter += 1
        base = (round_ * 100 + task) * 1_000_000 + counter * 10
        ids = [base, base + 1, base + 2] if task % 3 == 0 else [base]  # task % 3 == 0: several frames in one append
        r = await store.append(SEGMENT, [payload(i) for i in ids])
        report("A", r.offset, "-", "-", *ids)


async def main() -> None:
    data_dir, round_ = sys.argv[1], int(sys.argv[2])
    store = await SegmentStore.open(StoreConfig(data_dir=data_dir, chunk_size=256 * 1024, fsync="always"))
    print("READY", flush=True)
    await asyncio.gather(*(writer(store, round_, t) for t in range(TASKS)))


if __name__ == "__main__":
    asyncio.run(main())
