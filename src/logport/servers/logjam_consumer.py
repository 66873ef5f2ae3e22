"""logport as a logjam consumer: SUB to a device's PUB port, count lost messages, store what arrives.

Subscriptions are ZeroMQ prefixes on frame 0, so a configured app-env is also
compared exactly. The first message of each device is a baseline; with a
filtered subscription the gaps are not counted (the filter itself leaves gaps).
A subscription that hears nothing, not even a heartbeat, for `silence_timeout`
is closed and opened again.
"""

from __future__ import annotations

import asyncio
import contextlib

import zmq
import zmq.asyncio

from logport import zmqcurve
from logport.errors import ProtocolError
from logport.protocols import logjam as lj
from logport.runtime import Runtime
from logport.servers.logjam_ingest import (
    Accepted,
    LogjamMetrics,
    MessageDecoder,
    log,
    log_invalid,
    receive_message,
    store_accepted,
)


class Subscription:
    """One SUB socket to one endpoint; sans-socket decisions live in `take`."""

    def __init__(self, endpoint: str, app_envs: list[str], metrics: LogjamMetrics, decoder: MessageDecoder) -> None:
        self.endpoint = endpoint
        self.app_envs = {a.encode() for a in app_envs}
        self.gaps = lj.GapCounter()
        self.decoder = decoder
        self.metrics = metrics
        self._lost = metrics.lost.labels(endpoint)
        self._restarts = metrics.restarts.labels(endpoint)

    def prefixes(self) -> list[bytes]:
        if not self.app_envs:
            return [b""]
        return [lj.HEARTBEAT, *sorted(self.app_envs)]

    def take(self, frames: list[bytes]) -> Accepted | None:
        """The stored form of one received message (None for heartbeats and filtered app-envs)."""
        try:
            message = lj.read_sub_message(frames)
        except ProtocolError as e:
            log_invalid(self.metrics, e, self.endpoint, "sub")
            if len(frames) == 4 and not self.app_envs:  # it arrived: its sequence number is no gap
                with contextlib.suppress(ProtocolError):
                    self._observe(lj.decode_meta(frames[3]))
            return None
        if isinstance(message, lj.DataMessage) and self.app_envs and message.app_env not in self.app_envs:
            return None  # a prefix match of a longer app-env
        meta = message.meta
        assert meta is not None
        if not self.app_envs:
            self._observe(meta)
        if isinstance(message, lj.Heartbeat):
            return None
        try:
            return self.decoder.accept(message, self.endpoint, "sub")
        except ProtocolError as e:
            log_invalid(self.metrics, e, self.endpoint, "sub")
            return None


    def _observe(self, meta: lj.Meta) -> None:
        seen = self.gaps.observe(meta.device, meta.sequence)
        if seen.lost:
            self._lost.inc(seen.lost)
            log.warning("logjam messages lost", extra={"peer": self.endpoint, "device": meta.device,
                                                       "value": seen.lost})
        if seen.restarted:
            self._restarts.inc()


async def run_subscription(runtime: Runtime, ctx: zmq.asyncio.Context, endpoint: str, metrics: LogjamMetrics,
                           decoder: MessageDecoder) -> None:
    cfg = runtime.config.logjam
    sub = Subscription(endpoint, cfg.subscribe_app_envs, metrics, decoder)
    segment = cfg.subscribe_segment or cfg.segment
    received = metrics.received.labels("sub")
    stored = metrics.stored.labels("sub")
    silence_ms = int(cfg.silence_timeout * 1000)
    while True:
        asock = ctx.socket(zmq.SUB)
        try:
            asock.setsockopt(zmq.LINGER, 0)
            asock.setsockopt(zmq.RCVHWM, cfg.rcv_hwm)
            asock.setsockopt(zmq.MAXMSGSIZE, cfg.max_message_size)
            if cfg.subscribe_curve_server_key:
                zmqcurve.make_client(asock, cfg.subscribe_curve_server_key, cfg.curve_secret_key)
            for prefix in sub.prefixes():
                asock.setsockopt(zmq.SUBSCRIBE, prefix)
            asock.connect(endpoint)
            sock: zmq.Socket[bytes] = zmq.Socket.shadow(asock.underlying)
            log.info("logjam subscription connected", extra={"peer": endpoint})
            while True:
                if not await asock.poll(timeout=silence_ms):
                    metrics.reconnects.labels(endpoint).inc()
                    log.warning("logjam subscription silent, reconnecting",
                                extra={"peer": endpoint, "limit": cfg.silence_timeout})
                    break
                batch: list[Accepted] = []
                n = 0
                try:
                    while n < cfg.max_batch:
                        frames, _ = receive_message(sock)
                        n += 1
                        item = sub.take(frames)
                        if item is not None:
                            batch.append(item)
                except zmq.Again:
                    pass
                received.inc(n)
                if batch:
                    try:
                        await store_accepted(runtime, segment, batch)
                        stored.inc(len(batch))
                    except Exception as e:
                        metrics.store_errors.inc()
                        log.error("logjam messages not stored", extra={"peer": endpoint, "count": len(batch),
                                                                       "error": str(e)})
        finally:
            asock.close(linger=0)
        await asyncio.sleep(0)
