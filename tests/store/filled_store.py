"""A store holding every protocol's data, for the corruption tests (test_format_v2.py): Forward chunks (exactly
once by chunk id), Lumberjack and logjam batches, segment-protocol events of an exactly-once writer, each in
small chunks.

    python -m tests.store.filled_store DATA_DIR

fills a store, lets it record its recovery points, appends some more above them, prints FILLED and waits to
be SIGKILLed: a crash, whose last groups lie above the recovery point.
"""

from __future__ import annotations

import asyncio
import sys

from logport.batch import encode_batch
from logport.config import StoreConfig
from logport.store import SegmentStore, WriterCondition, frames

SEGMENTS = ("forward", "lumberjack", "logjam", "seg")
WRITER = b"\x01" * 16


def config(data_dir: str) -> StoreConfig:
    return StoreConfig(data_dir=data_dir, chunk_size=600, max_frame_size=512, recovery_point_interval=30.0)


async def fill(store: SegmentStore, rounds: range = range(8), seg_appends: range = range(10)) -> None:
    for i in rounds:
        await store.append("forward", [encode_batch("app", [(1700000000 + i, 0, {"total_time": 42.5, "n": i})],
                                                    {"source": "forward", "size": 1, "chunk": f"c{i}"})],
                           writer=WriterCondition(f"c{i}".encode(), 1))
        await store.append("lumberjack", [encode_batch("beats", [(1700000000, i, {"message": f"l{i}"}),
                                                                 (1700000001, i, {"message": f"m{i}"})],
                                                       {"source": "lumberjack", "size": 2})])
        await store.append("logjam", [encode_batch("logjam", [(1700000002, 0, {"action": "a#b", "n": i})],
                                                   {"source": "logjam", "size": 1, "topic": "logs"})])
    for i in seg_appends:
        bodies = [b"raw %d" % i, b"\x00" * i]
        end = store.writer_offset("seg", WRITER)
        n = sum(frames.HEADER_SIZE + len(b) for b in bodies)
        await store.append("seg", bodies, writer=WriterCondition(WRITER, end + n, end))


async def main(data_dir: str) -> None:
    store = await SegmentStore.open(config(data_dir))
    await fill(store)
    await asyncio.sleep(0.3)  # the marks of the last rolls written
    await fill(store, range(8, 9), range(10, 11))  # above the recovery point: the interval is long
    print("FILLED", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
