"""Durable output to a Logstash-compatible (Beats input) server: follow a segment, send, commit after the ack.

Each stored batch's entries go out as Beats events: the record, with
`@metadata` from the batch option put back and `@timestamp` from the event
time when the record has none. Opaque (non-batch) events are skipped with a
warning. At-least-once: a crash or a broken connection resends from the last
checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from logport.batch import BatchDecodeError, decode_batch
from logport.clients.lumberjack import LumberjackClient
from logport.config import LumberjackOutputConfig, output_name
from logport.errors import OffsetTruncated
from logport.outputs.follower import SegmentFollower
from logport.outputs.lag import OutputLag
from logport.protocols.lumberjack import format_timestamp
from logport.runtime import Runtime
from logport.tls import client_context

log = logging.getLogger("logport.lumberjack.output")

READ_BYTES = 8 << 20


def beats_events(body: bytes) -> list[dict[str, Any]]:
    """The Beats events of one stored batch."""
    batch = decode_batch(body)
    meta = batch.option.get("@metadata")
    events: list[dict[str, Any]] = []
    for entry in batch:
        record = entry.record
        event: dict[str, Any] = dict(record) if isinstance(record, dict) else {"message": record}
        if "@timestamp" not in event:
            event["@timestamp"] = format_timestamp(entry.seconds, entry.nanos)
        if isinstance(meta, dict):
            event["@metadata"] = meta
        events.append(event)
    return events


class LumberjackOutput:
    def __init__(self, runtime: Runtime, config: LumberjackOutputConfig) -> None:
        self.runtime = runtime
        self.config = config
        self.name = output_name(config)
        # several windows per read, so that windows_in_flight can pipeline them
        self.follower = SegmentFollower(runtime.store, config.segment, self.name, max_bytes=READ_BYTES)
        ctx = None
        if config.tls:
            ctx = client_context(config.tls_ca, config.tls_cert, config.tls_key, verify=config.tls_verify)
        self.client = LumberjackClient(
            config.host, config.port, version=config.version, window_size=config.window_size,
            compression_level=config.compression_level, windows_in_flight=config.windows_in_flight,
            ack_timeout=config.ack_timeout, ssl_context=ctx, reconnect_delay=config.reconnect_delay,
        )
        self.sent = _events_counter(runtime).labels(config.name or config.segment)
        self.task: asyncio.Task[None] | None = None
        self._stopping = False
        self.lag = OutputLag(runtime, self.name, self.follower)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"output:{self.name}")
        self.lag.start()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._ship_next()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lumberjack output failed; retrying from the checkpoint", extra={"output": self.name})
                self.follower.rewind()
                await asyncio.sleep(self.config.reconnect_delay)

    async def _ship_next(self) -> None:
        """Send the next stored frames and commit them once acknowledged."""
        try:
            batch = await self.follower.next_batch(wait=1.0)
        except OffsetTruncated as e:
            log.warning("output fell behind retention; skipping to the segment start",
                        extra={"output": self.name, "segment": self.config.segment, "offset": e.offset,
                               "start_offset": e.start_offset})
            return
        if batch is None:
            return
        events: list[dict[str, Any]] = []
        for offset, body in batch.events:
            try:
                events.extend(beats_events(body))
            except BatchDecodeError as e:
                log.warning("skipping a stored event that is not a batch",
                            extra={"output": self.name, "segment": self.config.segment, "offset": offset,
                                   "error": str(e)})
        # the client resends after reconnects until the server acknowledges
        await self.client.send(events)
        await self.follower.commit(batch.next_offset)
        self.sent.inc(len(events))

    async def drain(self, timeout: float) -> None:
        """Take nothing new; let the windows in flight be acknowledged and checkpointed (at most `timeout` s)."""
        self._stopping = True
        if self.task is not None and not self.task.done():
            await asyncio.wait({self.task}, timeout=max(timeout, 0.0))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("lumberjack output failed", extra={"output": self.name})
        await self.lag.close()
        await self.client.close()


_counters: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def _events_counter(runtime: Runtime) -> Counter:
    """One counter per hub registry, shared by every lumberjack output (labelled by output)."""
    registry = runtime.metrics.registry
    counter = _counters.get(registry)
    if counter is None:
        counter = Counter("logport_lumberjack_output_events", "Events acknowledged by a lumberjack output",
                          ["output"], registry=registry)
        _counters[registry] = counter
    return counter


async def start(runtime: Runtime, output_config: LumberjackOutputConfig) -> LumberjackOutput:
    output = LumberjackOutput(runtime, output_config)
    output.start()
    return output
