"""A corrupt range under the Spark source: the query fails naming it (failOnDataLoss=true, the default),
or its rows are left out with a warning (false); never a changed row. Over a data directory and over a
running hub's segment protocol."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from logport.batch import encode_batch
from logport.store.files import SEGMENTS_DIR, chunk_path
from logport.store.groups import COMMIT_SIZE, walk_chunk
from tests.spark.sample import write_bodies

pytestmark = pytest.mark.slow  # a Spark job each: seconds, even on the shared session

BATCHES = [encode_batch("app", [(1700000000 + i, 0, {"n": i, "total_time": 42.5})], {"source": "forward", "size": 1})
           for i in range(20)]


def flip_a_bit_of_batch(data_dir: str, index: int) -> None:
    path = chunk_path(Path(data_dir) / SEGMENTS_DIR / "forward", 0)
    data = bytearray(path.read_bytes())
    group = walk_chunk(bytes(data), 0).groups[index]
    data[group + COMMIT_SIZE + 30] ^= 0x04
    path.write_bytes(bytes(data))


def numbers(spark, **options: str) -> list[int]:  # type: ignore[no-untyped-def]
    reader = spark.read.format("logport")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(row.n for row in reader.load().selectExpr("record:n::int AS n")
                  .collect())


def test_a_corrupt_range_fails_the_query_or_is_skipped(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data_dir = str(tmp_path / "data")
    write_bodies(data_dir, {"forward": BATCHES})
    flip_a_bit_of_batch(data_dir, 7)
    with pytest.raises(Exception, match="are corrupt"):
        numbers(spark, path=data_dir)
    assert numbers(spark, path=data_dir, failOnDataLoss="false") == [n for n in range(20) if n != 7]


def test_over_a_hub_as_well(spark, running_hub) -> None:  # type: ignore[no-untyped-def]
    data_dir, server, loop, hub = running_hub
    for batch in BATCHES:
        asyncio.run_coroutine_threadsafe(hub.runtime.store.append("forward", [batch]), loop).result(10)
    flip_a_bit_of_batch(data_dir, 3)  # the hub reads it from the file (not cached: it never read it)
    with pytest.raises(Exception, match="are corrupt"):
        numbers(spark, server=server)
    assert numbers(spark, server=server, failOnDataLoss="false") == [n for n in range(20) if n != 3]


def test_the_last_group_damaged_after_a_stop_and_given_up(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Below the recovery point the last group is no torn write: the query fails naming it, or skips it; once
    `logport verify --repair` gave it up, every query skips it with a warning, failOnDataLoss or not."""
    from logport.store.repair import give_up

    data_dir = str(tmp_path / "data")
    write_bodies(data_dir, {"forward": BATCHES})
    flip_a_bit_of_batch(data_dir, len(BATCHES) - 1)
    with pytest.raises(Exception, match="are corrupt"):
        numbers(spark, path=data_dir)
    assert numbers(spark, path=data_dir, failOnDataLoss="false") == list(range(19))
    assert [(r.start < r.end) for r in give_up(data_dir, ["forward"])["forward"]] == [True]
    assert numbers(spark, path=data_dir) == list(range(19))
