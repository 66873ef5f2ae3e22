"""Prometheus metrics: one registry per hub, served as text at /metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

T = TypeVar("T")

FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class StampedCounter(Counter):
    """A Counter whose labelled children remember when they last grew (`stamp`, time.monotonic()): what
    readiness needs to tell whether a segment's last write failed or succeeded, which counts cannot."""

    stamp = 0.0

    def inc(self, amount: float = 1, exemplar: Any = None) -> None:
        super().inc(amount, exemplar)
        self.stamp = time.monotonic()


class Metrics:
    """The hub's registry and the store's own metrics; protocol modules add theirs to `registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.appends = StampedCounter("logport_store_appends", "Appends acknowledged by the store", ["segment"], registry=r)
        self.append_bytes = Counter("logport_store_append_bytes", "Bytes appended (frames)", ["segment"], registry=r)
        self.append_duplicates = Counter(
            "logport_store_append_duplicates", "Conditional appends recognised as retries and not stored again",
            ["segment"], registry=r,
        )
        self.write_errors = StampedCounter("logport_store_write_errors", "Failed writes or fsyncs", ["segment"], registry=r)
        self.corrupt_reads = Counter("logport_store_corrupt_reads", "Reads refused: stored bytes that fail their "
                                     "checksum (format v2)", ["segment"], registry=r)
        self.corrupt_groups = Gauge("logport_store_corrupt_groups", "Commit groups of a segment the store found "
                                    "corrupt on open (below its recovery point: kept, quarantined) and that no "
                                    "`logport verify --repair` gave up", ["segment"], registry=r)
        self.fsyncs = Counter("logport_store_fsyncs", "fdatasync calls", registry=r)
        self.fsync_seconds = Histogram(
            "logport_store_fsync_seconds", "fdatasync latency", buckets=FSYNC_BUCKETS, registry=r
        )
        self.segment_bytes = Gauge(
            "logport_segment_bytes", "Bytes held by a segment (end - start offset)", ["segment"], registry=r
        )
        self.segment_end_offset = Gauge("logport_segment_end_offset", "A segment's end offset", ["segment"], registry=r)
        self.pending_bytes = Gauge(
            "logport_store_pending_bytes", "Bytes queued for the next group commit", ["segment"], registry=r
        )

        self._families: dict[object, Any] = {}
        self.config_reloads = Counter("logport_config_reloads", "Config reloads (SIGHUP) by result: ok or failed "
                                      "(a config that does not validate, or a listener that cannot start)",
                                      ["result"], registry=r)

    def once(self, key: object, make: Callable[[], T]) -> T:
        """A listener's metrics, made the first time it starts and shared by every later start in this hub
        (a reload starts a listener anew beside the old one; a registry takes each name only once)."""
        if key not in self._families:
            self._families[key] = make()
        return self._families[key]  # type: ignore[no-any-return]

    def serve(self, bind: str, port: int) -> None:
        """Serve /metrics from a daemon thread (prometheus_client's own server)."""
        start_http_server(port, addr=bind, registry=self.registry)
