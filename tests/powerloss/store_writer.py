"""A store process for the power-loss tests: appends until it is killed, printing each acknowledgement.

    python -m tests.powerloss.store_writer DATA_DIR SEED [direct]

Writers 0..WRITERS-1 append exactly-once to segment `exact`: item (w, i) is one event of ITEM bytes at
writer offsets [i * FRAME, (i + 1) * FRAME) of writer key `w<w>`, so a restarted process knows where
each writer stands from the store alone. On start each writer first repeats its last stored item,
which the store must answer as a duplicate, then goes on. Writer `plain` appends two-event groups
without a writer to segment `plain` (at least once). Every acknowledgement is printed, flushed, as
`ACK <segment> <offset> <body>` (`DUP ...` for a duplicate) before the next append of that writer.
Chunks are small and retention is on, so chunks roll into spares, written ahead and recycled; the recovery
point (store/marks.py) is recorded every 20 ms, so that power losses meet its file being replaced. With
`direct`, store.direct_io is on: commits into those chunks are O_DIRECT|O_DSYNC writes, with no fdatasync.
"""

from __future__ import annotations

import asyncio
import random
import sys

from logport.store import SegmentStore, WriterCondition
from logport.store.settings import StoreConfig

WRITERS = 4
ITEM = 200  # bytes of an item's body
FRAME = ITEM + 8
CHUNK = 64 * 1024


def config(data_dir: str, direct: bool = False) -> StoreConfig:
    return StoreConfig(data_dir=data_dir, chunk_size=CHUNK, max_frame_size=4096, retention_bytes=6 * CHUNK,
                       spare_chunks=2, prewrite_chunks=True, direct_io=direct, recovery_point_interval=0.02)


def item(writer: int, i: int) -> bytes:
    return f"w{writer}-{i:09d}-".encode().ljust(ITEM, b"x")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def exact_writer(store: SegmentStore, writer: int, rng: random.Random) -> None:
    key = f"w{writer}".encode()
    stored = store.writer_offset("exact", key)
    assert stored % FRAME == 0, f"writer {writer} stored offset {stored} is not a whole number of items"
    i = stored // FRAME
    if i:  # a resend of the last stored item: a duplicate
        result = await store.append("exact", [item(writer, i - 1)], writer=WriterCondition(key, i * FRAME, (i - 1) * FRAME))
        assert result.duplicate, f"writer {writer}: item {i - 1} stored twice"
        say(f"DUP exact {result.offset} {item(writer, i - 1).decode()}")
    while True:
        body = item(writer, i)
        result = await store.append("exact", [body], writer=WriterCondition(key, (i + 1) * FRAME, i * FRAME))
        assert not result.duplicate
        say(f"ACK exact {result.offset} {body.decode()}")
        i += 1
        if rng.random() < 0.05:
            await store.enforce_retention()


async def plain_writer(store: SegmentStore, seed: int) -> None:
    i = 0
    while True:
        bodies = [f"p{seed}-{i}-a".encode().ljust(ITEM, b"y"), f"p{seed}-{i}-b".encode().ljust(ITEM, b"y")]
        result = await store.append("plain", bodies)
        say(f"ACK plain {result.offset} {bodies[0].decode()}")
        say(f"ACK plain {result.offset + FRAME} {bodies[1].decode()}")
        i += 1


async def main(data_dir: str, seed: int, direct: bool) -> None:
    rng = random.Random(seed)
    store = await SegmentStore.open(config(data_dir, direct))
    say("OPEN")
    await asyncio.gather(plain_writer(store, seed), *(exact_writer(store, w, rng) for w in range(WRITERS)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["direct"]))
