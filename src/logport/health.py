"""Liveness and readiness of a running hub: GET /health and GET /ready beside /metrics on the metrics port.

A task on the hub's event loop looks at the hub every `TICK` seconds and leaves its verdict in one
attribute; the HTTP server runs in a thread (prometheus_client's WSGI server), so that it answers even
when the loop does not turn, and that is exactly what /health reports: 200 while the loop's last look is
recent, 503 once it is `hub.health_timeout` old. /ready is 200 when every configured listener is bound,
the store takes writes and the hub is not draining; otherwise 503, and the JSON body says which listener
or segment and why. A segment holding corrupt data (found below its recovery point on open, kept and
quarantined) is a warning in the body of a 200: the hub serves everything else, and takes appends.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from prometheus_client.registry import Collector

from logport.metrics import Metrics

log = logging.getLogger("logport.health")

TICK = 0.5  # seconds between two looks at the hub (and the longest a verdict is stale)


@dataclass(frozen=True)
class Problem:
    """Why the hub is not ready: what (`listener`, `segment`, `store` or `hub`), its name, and the reason."""

    kind: str
    name: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {self.kind: self.name, "reason": self.reason}


@dataclass
class StoreWatch:
    """Which segments' writes fail: those whose last write error came after their last acknowledged append
    (the store's counters, stamped when they grow), until an append succeeds again."""

    failing: set[str] = field(default_factory=set)

    def update(self, metrics: Metrics) -> set[str]:
        self.failing = set()
        for segment in _segments(metrics.write_errors.collect()):
            error = metrics.write_errors.labels(segment)
            success = metrics.appends.labels(segment)
            if getattr(error, "stamp", 0.0) > getattr(success, "stamp", 0.0):
                self.failing.add(segment)
        return self.failing


def _segments(families: Iterable[Any]) -> set[str]:
    return {sample.labels["segment"] for family in families for sample in family.samples
            if "segment" in sample.labels}


class HealthMonitor:
    """Looks at the hub from its event loop; answers /health and /ready from any thread.

    `listeners()` gives (name, serving) of every configured listener; `draining()` whether the hub stops.
    """

    def __init__(self, metrics: Metrics, *, data_dir: str, min_free_bytes: int, timeout: float,
                 listeners: Callable[[], list[tuple[str, bool]]], draining: Callable[[], bool],
                 on_tick: Callable[[], None] | None = None, interval: float = TICK,
                 corrupt: Callable[[], dict[str, list[Any]]] = dict) -> None:
        self.metrics = metrics
        self.data_dir = data_dir
        self.min_free_bytes = min_free_bytes
        self.timeout = timeout
        self._listeners = listeners
        self._draining = draining
        self._on_tick = on_tick
        self._corrupt = corrupt  # segment -> its corrupt ranges (files.CorruptRange) not given up
        self.interval = interval
        self.warnings: tuple[Problem, ...] = ()
        self.store_watch = StoreWatch()
        self.last_tick = time.monotonic()
        self.problems: tuple[Problem, ...] = (Problem("hub", "logport", "starting"),)
        self._ready = Gauge("logport_ready", "1 when GET /ready answers 200", registry=metrics.registry)
        self._up = Gauge("logport_listener_up", "1 while a listener is bound and accepting", ["listener"],
                         registry=metrics.registry)
        self._disk_free = Gauge("logport_store_disk_free_bytes", "Free bytes of the data directory's file system",
                                registry=metrics.registry)
        self._disk_size = Gauge("logport_store_disk_size_bytes", "Size of the data directory's file system",
                                registry=metrics.registry)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.tick()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="health")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.tick()
            except Exception:  # a look that fails must not end the looking: /health would go stale
                log.exception("health check failed")

    def tick(self) -> None:
        self.problems = tuple(self.check())
        self.warnings = tuple(self.corrupt_data())
        self._ready.set(0 if self.problems else 1)
        self.last_tick = time.monotonic()
        if self._on_tick is not None:
            self._on_tick()

    def check(self) -> list[Problem]:
        problems: list[Problem] = []
        if self._draining():
            problems.append(Problem("hub", "logport", "draining"))
        for name, serving in self._listeners():
            self._up.labels(name).set(1 if serving else 0)
            if not serving:
                problems.append(Problem("listener", name, "draining" if self._draining() else "not bound"))
        try:
            usage = shutil.disk_usage(self.data_dir)
        except OSError as e:
            problems.append(Problem("store", self.data_dir, f"cannot read the free space: {e}"))
        else:
            free = usage.free
            self._disk_free.set(free)
            self._disk_size.set(usage.total)
            if free < self.min_free_bytes:
                problems.append(Problem("store", self.data_dir, f"disk full: {free} bytes free, below "
                                                                 f"hub.ready_min_free_bytes {self.min_free_bytes}"))
        for segment in sorted(self.store_watch.update(self.metrics)):
            problems.append(Problem("segment", segment, "a write failing: the last writes failed and none "
                                                        "succeeded since (logport_store_write_errors)"))
        return problems

    def corrupt_data(self) -> list[Problem]:
        return [Problem("segment", segment, "holds corrupt data, kept as it is (quarantined): "
                        + ", ".join(f"bytes {r.start}..{r.end} ({r.reason})" for r in ranges)
                        + f"; `logport verify --repair {segment}` (hub stopped) gives it up")
                for segment, ranges in sorted(self._corrupt().items())]

    # --- answered from the HTTP thread ---

    def stalled(self) -> float:
        """Seconds since the event loop last looked, when that is longer than `timeout`; else 0."""
        age = time.monotonic() - self.last_tick
        return age if age > self.timeout else 0.0

    def health(self) -> tuple[int, dict[str, Any]]:
        stalled = self.stalled()
        if stalled:
            return 503, {"status": "stalled", "reason": f"the event loop has not turned for {stalled:.1f} s "
                                                        f"(hub.health_timeout {self.timeout})"}
        return 200, {"status": "ok"}

    def ready(self) -> tuple[int, dict[str, Any]]:
        problems = [p.as_json() for p in self.problems]
        stalled = self.stalled()
        if stalled:
            problems.insert(0, {"hub": "logport", "reason": f"the event loop has not turned for {stalled:.1f} s"})
        warnings = {"warnings": [w.as_json() for w in self.warnings]} if self.warnings else {}
        if problems:
            return 503, {"status": "not ready", "problems": problems, **warnings}
        return 200, {"status": "ready", **warnings}


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # scrapes every few seconds: no log line each
        pass


def serve(bind: str, port: int, metrics: Metrics, monitor: HealthMonitor) -> WSGIServer:
    """Serve /metrics, /health and /ready from a daemon thread; the server (its `shutdown()` stops it)."""
    prometheus = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/health", "/ready"):
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
                return [b""]
            status, body = monitor.health() if path == "/health" else monitor.ready()
            data = orjson.dumps(body) + b"\n"
            start_response(f"{status} {'OK' if status == 200 else 'Service Unavailable'}",
                           [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
            return [data]
        return list(prometheus(environ, start_response))

    class Server(ThreadingWSGIServer):
        allow_reuse_address = True

    if ":" in bind:
        import socket

        Server.address_family = socket.AF_INET6
    httpd = make_server(bind, port, app, Server, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd


class ListenerCollector(Collector):
    """Connections open and refused (max_connections, per peer, failed handshakes) of every TCP listener,
    under one name for all of them: read from each listener's ConnectionGuard at each scrape."""

    def __init__(self, services: Callable[[], list[tuple[str, Any]]]) -> None:
        self._services = services

    def collect(self) -> Iterable[Any]:
        open_ = GaugeMetricFamily("logport_listener_connections", "Open connections of a listener",
                                  labels=["listener"])
        refused = CounterMetricFamily("logport_listener_refused_connections",
                                      "Connections a listener refused at once (max_connections, "
                                      "max_connections_per_peer)", labels=["listener"])
        for name, service in list(self._services()):
            guard = getattr(service, "guard", None)
            if guard is not None:
                open_.add_metric([name], guard.open)
                refused.add_metric([name], guard.refused)
        yield open_
        yield refused
