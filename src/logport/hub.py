"""The hub: opens the store, starts every enabled listener and output, serves metrics.

Listener modules (`logport.servers.<name>`) and output modules
(`logport.outputs.<name>`) each expose `async def start(runtime, ...) -> Service`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import time
from typing import Any

from logport import health
from logport.config import Config, output_name
from logport.errors import LogportError
from logport.metrics import Metrics
from logport.routing import Router
from logport.runtime import Runtime, Service
from logport.store import SegmentStore
from logport.systemd import Notifier

log = logging.getLogger("logport.hub")

# config section name -> module whose `start(runtime)` runs that listener
LISTENERS: dict[str, str] = {
    "forward": "logport.servers.forward",
    "lumberjack": "logport.servers.lumberjack",
    "segment": "logport.servers.segment",
    "logjam": "logport.servers.logjam",
}

# [[outputs.<kind>]] -> module whose `start(runtime, output_config)` runs one output
OUTPUTS: dict[str, str] = {
    "forward": "logport.outputs.forward",
    "lumberjack": "logport.outputs.lumberjack",
}


class ListenerError(LogportError):
    """A listener or the metrics endpoint could not start (its port is taken, its address does not exist)."""


class Hub:
    def __init__(self, config: Config, *, serve_metrics: bool = True, notifier: Notifier | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self._serve_metrics = serve_metrics
        self.runtime: Runtime | None = None
        self.services: dict[str, Service] = {}
        self._retention: asyncio.Task[None] | None = None
        self.notifier = notifier
        self.draining = False
        self.monitor: health.HealthMonitor | None = None
        self._http: Any = None  # the metrics endpoint's WSGI server

    async def start(self) -> Runtime:
        cfg = self.config
        store = await SegmentStore.open(cfg.store, metrics=self.metrics)
        runtime = Runtime(config=cfg, store=store, metrics=self.metrics, router=Router(cfg.routes))
        if cfg.hub.hostname:
            runtime.hostname = cfg.hub.hostname
        self.runtime = runtime
        try:
            for name, module in LISTENERS.items():
                if getattr(cfg, name).enabled:
                    try:
                        self.services[name] = await importlib.import_module(module).start(runtime)
                    except OSError as e:
                        section = getattr(cfg, name)
                        port = getattr(section, "port", None) or getattr(section, "router_port", "")
                        raise ListenerError(
                            f"{name} listener could not start on {section.bind}:{port}: {e.strerror or e}"
                        ) from e
                    log.info("listener started", extra={"listener": name})
            for kind, module in OUTPUTS.items():
                for out in getattr(cfg.outputs, kind):
                    # keyed by the name its checkpoint goes by, which config load keeps unique
                    key = f"output.{output_name(out)}"
                    self.services[key] = await importlib.import_module(module).start(runtime, out)
                    log.info("output started", extra={"output": key})
            notifier = self.notifier
            self.monitor = health.HealthMonitor(
                self.metrics, data_dir=cfg.store.data_dir, min_free_bytes=cfg.hub.ready_min_free_bytes,
                timeout=cfg.hub.health_timeout, listeners=self.listener_states, draining=lambda: self.draining,
                on_tick=notifier.watchdog if notifier is not None else None,
                interval=min(health.TICK, notifier.watchdog_interval or health.TICK) if notifier else health.TICK)
            self.monitor.start()
            if self._serve_metrics and cfg.metrics.enabled:
                m = cfg.metrics
                try:
                    self._http = health.serve(m.bind, m.port, self.metrics, self.monitor)
                except OSError as e:
                    raise ListenerError(f"metrics endpoint could not start on {m.bind}:{m.port}: {e.strerror or e}") from e
        except BaseException:
            await self.stop()
            raise
        self._retention = asyncio.create_task(self._retention_loop())
        return runtime

    def listener_states(self) -> list[tuple[str, bool]]:
        """(name, bound and accepting) of every configured listener."""
        out = []
        for name in LISTENERS:
            if getattr(self.config, name).enabled:
                service = self.services.get(name)
                out.append((name, service is not None and bool(service.serving())))  # type: ignore[attr-defined]
        return out

    async def drain(self, grace: float) -> None:
        """Stop without losing anything answered: every listener stops accepting and answers what it received
        (after its commit), then every output finishes its send in flight and checkpoints, all within `grace`
        seconds; what is still unanswered then is closed unanswered (the client resends it)."""
        self.draining = True
        if self.monitor is not None:
            self.monitor.tick()  # /ready says "draining" from now on, not half a second later
        started = time.monotonic()
        listeners = [(k, s) for k, s in self.services.items() if k in LISTENERS]
        results = await asyncio.gather(*(s.drain(grace) for _, s in listeners),  # type: ignore[attr-defined]
                                       return_exceptions=True)
        for (key, _), result in zip(listeners, results, strict=True):
            if isinstance(result, BaseException):
                log.error("draining failed", extra={"listener": key}, exc_info=result)
        if self.monitor is not None:
            self.monitor.tick()
        left = max(0.0, grace - (time.monotonic() - started))
        outputs = [(k, s) for k, s in self.services.items() if k.startswith("output.") and hasattr(s, "drain")]
        results = await asyncio.gather(*(s.drain(left) for _, s in outputs), return_exceptions=True)  # type: ignore[attr-defined]
        for (key, _), result in zip(outputs, results, strict=True):
            if isinstance(result, BaseException):
                log.error("draining failed", extra={"output": key}, exc_info=result)
        log.info("drained", extra={"seconds": round(time.monotonic() - started, 3)})

    async def _retention_loop(self) -> None:
        assert self.runtime is not None
        interval = self.config.store.retention_check_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await self.runtime.store.enforce_retention()
            except Exception:
                log.exception("retention failed")

    async def stop(self) -> None:
        if self._retention is not None:
            self._retention.cancel()
        if self.monitor is not None:
            self.monitor.stop()
        if self._http is not None:
            http, self._http = self._http, None
            await asyncio.to_thread(http.shutdown)
            http.server_close()
        for key, service in reversed(list(self.services.items())):
            try:
                await service.close()
            except Exception:
                log.exception("closing failed", extra={"service": key})
        self.services.clear()
        if self.runtime is not None:
            await self.runtime.store.close()
            self.runtime = None


async def serve_forever(config: Config) -> None:
    """Run the hub until SIGTERM or SIGINT, then drain it (hub.shutdown_grace) and stop; tell systemd both."""
    notifier = Notifier()
    hub = Hub(config, notifier=notifier)
    await hub.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pid_file = config.hub.pid_file
    if pid_file:
        write_pid_file(pid_file)
    try:
        log.info("logport serving", extra={"data_dir": config.store.data_dir})
        notifier.ready(f"serving, data in {config.store.data_dir}")
        await stop.wait()
        grace = config.hub.shutdown_grace
        log.info("logport stopping", extra={"shutdown_grace": grace})
        notifier.stopping(f"draining (at most {grace} s)")
        try:
            await asyncio.wait_for(hub.drain(grace), grace + 1.0)
        except TimeoutError:
            log.warning("draining took longer than hub.shutdown_grace; closing what is left",
                        extra={"shutdown_grace": grace})
        await hub.stop()
    finally:
        if pid_file:
            with contextlib.suppress(OSError):
                os.unlink(pid_file)
        notifier.close()


def write_pid_file(path: str) -> None:
    """Write our pid atomically (a reader never sees a half-written one)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, path)
