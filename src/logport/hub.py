"""The hub: opens the store, starts every enabled listener and output, serves metrics.

Listener modules (`logport.servers.<name>`) and output modules
(`logport.outputs.<name>`) each expose `async def start(runtime, ...) -> Service`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import signal
import time
from typing import Any

from logport import health
from logport import reload as reload_plan
from logport.config import Config, ForwardOutputConfig, load_config, output_name
from logport.errors import ConfigError, LogportError
from logport.logs import setup_logging
from logport.metrics import Metrics
from logport.reload import update_in_place
from logport.routing import Router
from logport.runtime import Runtime, Service
from logport.store import SegmentStore
from logport.store.identity import ensure_hub_identity
from logport.systemd import Notifier
from logport.tls import check_listener_tls

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
    def __init__(self, config: Config, *, serve_metrics: bool = True, notifier: Notifier | None = None,
                 config_path: str | None = None, overrides: dict[str, Any] | None = None) -> None:
        self.config = config
        self.config_path = config_path  # what a reload reads again, with the same command-line overrides
        self.overrides = overrides or {}
        self._reload_lock = asyncio.Lock()
        self.metrics = Metrics()
        self._serve_metrics = serve_metrics
        self.runtime: Runtime | None = None
        self.services: dict[str, Service] = {}
        self._retention: asyncio.Task[None] | None = None
        self.notifier = notifier
        self.draining = False
        self.monitor: health.HealthMonitor | None = None
        self._http: Any = None  # the metrics endpoint's WSGI server
        self._collector_registered = False

    async def start(self) -> Runtime:
        cfg = self.config
        check_listener_tls(cfg)  # before the store: a start that fails on a certificate leaves no data directory
        store = await SegmentStore.open(cfg.store, metrics=self.metrics)
        runtime = Runtime(config=cfg, store=store, metrics=self.metrics, router=Router(cfg.routes),
                          hub_id=ensure_hub_identity(cfg.store.data_dir))  # made on the first start, kept for good
        if cfg.hub.hostname:
            runtime.hostname = cfg.hub.hostname
        self.runtime = runtime
        try:
            for name in LISTENERS:
                if getattr(cfg, name).enabled:
                    self.services[name] = await self._start_listener(name)
            for kind in OUTPUTS:
                for out in getattr(cfg.outputs, kind):
                    await self._start_output(kind, out)
            notifier = self.notifier
            self.monitor = health.HealthMonitor(
                self.metrics, data_dir=cfg.store.data_dir, min_free_bytes=cfg.hub.ready_min_free_bytes,
                timeout=cfg.hub.health_timeout, listeners=self.listener_states, draining=lambda: self.draining,
                on_tick=notifier.watchdog if notifier is not None else None,
                interval=min(health.TICK, notifier.watchdog_interval or health.TICK) if notifier else health.TICK,
                corrupt=store.corrupt_segments)
            self.monitor.start()
            if not self._collector_registered:  # one per registry, however often the hub starts
                self.metrics.registry.register(health.ListenerCollector(
                    lambda: [(k, v) for k, v in self.services.items() if k in LISTENERS]))
                self._collector_registered = True
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

    async def _start_listener(self, name: str) -> Service:
        assert self.runtime is not None
        section = getattr(self.runtime.config, name)
        try:
            service: Service = await importlib.import_module(LISTENERS[name]).start(self.runtime)
        except OSError as e:
            port = getattr(section, "port", None) or getattr(section, "router_port", "")
            raise ListenerError(f"{name} listener could not start on {section.bind}:{port}: {e.strerror or e}") from e
        log.info("listener started", extra={"listener": name})
        return service

    async def _start_output(self, kind: str, out: Any) -> None:
        assert self.runtime is not None
        # keyed by the name its checkpoint goes by, which config load keeps unique
        key = f"output.{output_name(out)}"
        self.services[key] = await importlib.import_module(OUTPUTS[kind]).start(self.runtime, out)
        log.info("output started", extra={"output": key})

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

    async def reload(self) -> bool:
        """Read the config file again and apply what changed (reload.py says what can change live and how);
        a config that does not validate, or a listener that cannot start, leaves the running config as it
        is. True if the new config runs."""
        async with self._reload_lock:
            if self.notifier is not None:
                self.notifier.reloading()
            try:
                return await self._reload()
            finally:
                if self.notifier is not None:
                    self.notifier.ready("serving (reloaded)")

    def _refuse_reload(self, reason: str, **extra: Any) -> bool:
        log.error("reload refused, the running config stays: %s", reason, extra={"config": self.config_path, **extra})
        self.metrics.config_reloads.labels("failed").inc()
        return False

    async def _reload(self) -> bool:
        assert self.runtime is not None
        runtime, old = self.runtime, self.config
        try:
            new = load_config(self.config_path, **self.overrides)
            check_listener_tls(new)
        except ConfigError as e:
            return self._refuse_reload(str(e))
        steps = reload_plan.plan(old, new)
        for key in steps.not_live:
            log.warning("config key cannot change without a restart; the running value stays",
                        extra={"key": key})
        new.store, new.metrics = old.store, old.metrics
        new.hub.hostname, new.hub.pid_file = old.hub.hostname, old.hub.pid_file
        changes = {c.name: c for c in steps.listeners}
        applied = dataclasses.replace(new)
        for name in LISTENERS:  # listeners changed in place, or not at all, keep the section they hold
            if name not in changes or changes[name].action == "update":
                setattr(applied, name, getattr(old, name))
        # what can fail first: a listener on a new address binds beside the old one
        runtime.config = applied
        started: dict[str, Service] = {}
        try:
            for change in steps.listeners:
                if change.action in ("move", "start"):
                    started[change.name] = await self._start_listener(change.name)
        except ListenerError as e:
            runtime.config = old
            for service in started.values():
                await service.close()
            return self._refuse_reload(str(e))
        self.config = applied
        for change in steps.listeners:
            name = change.name
            if change.action == "update":
                update_in_place(getattr(old, name), getattr(new, name))
                getattr(self.services[name], "config_changed", lambda: None)()
            elif change.action in ("move", "stop", "restart"):
                await self._retire(name)
                if change.action == "restart":
                    try:
                        started[name] = await self._start_listener(name)
                    except ListenerError as e:  # its address was free a moment ago; /ready names it now
                        log.error("listener not restarted after a reload: %s", e, extra={"listener": name})
            if name in started:
                self.services[name] = started[name]
        for name in ("forward", "lumberjack", "segment"):  # certificates rotate in their files: load again
            running = self.services.get(name)
            section = getattr(applied, name)
            if running is not None and name not in started and section.tls.enabled:
                running.reload_tls(section.tls)  # type: ignore[attr-defined]
        for key in steps.outputs_stop:
            output = self.services.pop(key)
            await output.drain(applied.hub.shutdown_grace)  # type: ignore[attr-defined]
            await output.close()
        for out in steps.outputs_start:
            kind = "forward" if isinstance(out, ForwardOutputConfig) else "lumberjack"
            await self._start_output(kind, out)
        if steps.routes:
            runtime.router = Router(applied.routes)
        if steps.log:
            setup_logging(applied.hub.log_level, applied.hub.log_format)
        self.metrics.config_reloads.labels("ok").inc()
        log.info("config reloaded", extra={"config": self.config_path, "changes": steps.changes,
                                           "not_live": steps.not_live})
        return True

    async def _retire(self, name: str) -> None:
        """Drain a listener (its clients get every answer due) and close it."""
        service = self.services.pop(name, None)
        if service is None:
            return
        await service.drain(self.config.hub.shutdown_grace)  # type: ignore[attr-defined]
        await service.close()
        log.info("listener retired", extra={"listener": name})

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


async def serve_forever(config: Config, config_path: str | None = None,
                        overrides: dict[str, Any] | None = None) -> None:
    """Run the hub until SIGTERM or SIGINT, then drain it (hub.shutdown_grace) and stop; tell systemd both.
    SIGHUP reloads `config_path` (with the same command-line `overrides`)."""
    notifier = Notifier()
    hub = Hub(config, notifier=notifier, config_path=config_path, overrides=overrides)
    await hub.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[bool]] = set()

    def on_sighup() -> None:
        task = loop.create_task(hub.reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_sighup)
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
            async with asyncio.timeout(grace + 1.0):
                await hub.drain(grace)
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
