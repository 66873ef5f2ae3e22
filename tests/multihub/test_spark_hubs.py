"""Several hubs as one Spark source: rows per hub, offsets keyed by hub identity (a hub that moves keeps
them), an unreachable hub named after `timeout`, several data directories."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import pytest

from logport.hub import Hub
from logport.store.identity import read_hub_identity
from tests.conftest import free_port
from tests.spark.conftest import serving_hub
from tests.spark.sample import forward_batches, write_bodies

pytestmark = pytest.mark.slow  # Spark jobs


def append(loop: asyncio.AbstractEventLoop, hub: Hub, segment: str, bodies: list[bytes]) -> None:
    async def run() -> None:
        assert hub.runtime is not None
        for body in bodies:
            await hub.runtime.store.append(segment, [body])
    asyncio.run_coroutine_threadsafe(run(), loop).result(60)


def test_two_hubs_one_source_and_a_hub_that_moves(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    batches = forward_batches(12, 10)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def stream_once(servers: str) -> None:
        query = (spark.readStream.format("logport").option("server", servers).option("maxBytesPerTrigger", "4000")
                 .load().selectExpr("hub", "segment", "offset", "`index`", "record:n::int AS n")
                 .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    with serving_hub(dirs[0]) as (server_a, loop_a, hub_a), serving_hub(dirs[1]) as (server_b, loop_b, hub_b):
        ids = [read_hub_identity(d) for d in dirs]
        assert ids[0] and ids[1] and ids[0] != ids[1]
        append(loop_a, hub_a, "forward", batches[:4])  # the same segment name on both hubs
        append(loop_b, hub_b, "forward", batches[4:6])
        servers = f"{server_a},{server_b}"
        rows = spark.read.format("logport").option("server", servers).load().select("hub", "segment").collect()
        assert Counter((r.hub, r.segment) for r in rows) == {(ids[0], "forward"): 40, (ids[1], "forward"): 20}
        # the same from the data directories
        by_path = spark.read.format("logport").option("path", ",".join(dirs)).load().select("hub").collect()
        assert Counter(r.hub for r in by_path) == {ids[0]: 40, ids[1]: 20}
        stream_once(servers)
    # Hub b comes back at another address, a gets more events; the query, listing the hubs in another
    # order, resumes from its checkpoint: offsets are keyed by identity, not address.
    append_later = batches[6:9]
    with serving_hub(dirs[0]) as (server_a, loop_a, hub_a), serving_hub(dirs[1]) as (server_b_moved, loop_b, hub_b):
        append(loop_a, hub_a, "forward", append_later)
        append(loop_b, hub_b, "forward", batches[9:])
        stream_once(f"{server_b_moved},{server_a}")
    got = spark.read.parquet(out).collect()
    keys = [(r.hub, r.segment, r.offset, r["index"]) for r in got]
    assert len(keys) == len(set(keys)) == 120  # none twice, none skipped
    assert Counter(r.hub for r in got) == {ids[0]: 70, ids[1]: 50}


def test_an_unreachable_hub_is_named_after_the_timeout(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_bodies(str(tmp_path / "a"), {"forward": forward_batches(1, 3)})
    with serving_hub(str(tmp_path / "a")) as (server_a, _, _):
        gone = f"127.0.0.1:{free_port()}"  # nothing listens there
        with pytest.raises(Exception, match=f"hub {gone} did not answer within timeout=1 s"):
            spark.read.format("logport").option("server", f"{server_a},{gone}").option("timeout", "1").load().collect()


def test_one_hub_named_twice_is_refused(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_bodies(str(tmp_path / "a"), {"forward": forward_batches(1, 3)})
    with serving_hub(str(tmp_path / "a")) as (server_a, _, _):
        with pytest.raises(Exception, match=re.escape(f"path '{tmp_path / 'a'}/.' is the same hub")):
            spark.read.format("logport").option("path", f"{tmp_path / 'a'},{tmp_path / 'a'}/.").load().collect()
        with pytest.raises(Exception, match="names a hub twice"):
            spark.read.format("logport").option("server", f"{server_a},{server_a}").load().collect()
