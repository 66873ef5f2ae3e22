"""How far an output is behind its segment: bytes and events between its checkpoint and the segment's end,
and when it last succeeded (its last acknowledged, checkpointed send), as Prometheus gauges per output.

Bytes are read from the store at each scrape. Events are counted (entries of stored batches, 1 per opaque
event, as `logport segments` counts them) every `COUNT_INTERVAL` seconds by reading the lag from the store,
at most `COUNT_MAX_BYTES` of it: past that, the figure is a lower bound (the bytes gauge stays exact).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from prometheus_client import Gauge

from logport.errors import LogportError
from logport.outputs.follower import SegmentFollower
from logport.runtime import Runtime
from logport.store import frames
from logport.store.reader import count_events

log = logging.getLogger("logport.outputs")

COUNT_INTERVAL = 5.0
COUNT_MAX_BYTES = 64 * 1024 * 1024
_READ = 4 * 1024 * 1024


class LagGauges:
    def __init__(self, runtime: Runtime) -> None:
        r = runtime.metrics.registry
        labels = ["output", "segment"]
        self.lag_bytes = Gauge("logport_output_lag_bytes", "Bytes of the segment after the output's checkpoint "
                               "(stored, not yet acknowledged downstream)", labels, registry=r)
        self.lag_events = Gauge("logport_output_lag_events", "Events after the output's checkpoint (counted "
                                f"every {COUNT_INTERVAL:g} s over at most {COUNT_MAX_BYTES} bytes: a lower bound "
                                "past that)", labels, registry=r)
        self.last_success = Gauge("logport_output_last_success_timestamp_seconds", "When the output last had "
                                  "a send acknowledged and checkpointed (Unix time; 0: not yet)", labels, registry=r)


class OutputLag:
    """The lag gauges of one output, and the task that counts its events."""

    def __init__(self, runtime: Runtime, name: str, follower: SegmentFollower) -> None:
        self.store = runtime.store
        self.follower = follower
        gauges = self.gauges = runtime.metrics.once(LagGauges, lambda: LagGauges(runtime))
        labels = self.labels = (name, follower.segment)
        gauges.lag_bytes.labels(*labels).set_function(self.bytes_behind)
        self.events = gauges.lag_events.labels(*labels)
        self.last_success = gauges.last_success.labels(*labels)
        follower.on_commit = self._committed
        self._task: asyncio.Task[None] | None = None

    def bytes_behind(self) -> float:
        store = self.store
        if not store.exists(self.follower.segment):
            return 0.0
        return float(max(0, store.info(self.follower.segment).end_offset - self.follower.checkpoint))

    def _committed(self) -> None:
        self.last_success.set(time.time())

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._count_loop(), name="output-lag")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for gauge in (self.gauges.lag_bytes, self.gauges.lag_events, self.gauges.last_success):
            try:
                gauge.remove(*self.labels)  # a reload may have removed this output: its series go too
            except KeyError:
                pass

    async def _count_loop(self) -> None:
        while True:
            try:
                self.events.set(await self.count())
            except LogportError as e:  # retention or a corrupt range: the next look may do better
                log.info("counting an output's lag failed", extra={"segment": self.follower.segment,
                                                                  "error": str(e)})
            await asyncio.sleep(COUNT_INTERVAL)

    async def count(self) -> int:
        """Events between the checkpoint and the end (over at most COUNT_MAX_BYTES)."""
        segment = self.follower.segment
        if not self.store.exists(segment):
            return 0
        info = self.store.info(segment)
        offset = max(self.follower.checkpoint, info.start_offset)
        stop = min(info.end_offset, offset + COUNT_MAX_BYTES)
        events = 0
        while offset < stop:
            result: Any = await self.store.read_frames(segment, offset, min(_READ, stop - offset))
            if not result.data:
                break
            for _, frame_type, body in frames.iter_frames(result.data, result.offset):
                if frame_type == frames.EVENT:
                    events += count_events(body)
            offset = result.next_offset
        return events
