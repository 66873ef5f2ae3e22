"""The hub: opens the store, starts every enabled listener and output, serves metrics.

Listener modules (`logport.servers.<name>`) and output modules
(`logport.outputs.<name>`) each expose `async def start(runtime, ...) -> Service`.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal

from logport.config import Config, output_name
from logport.errors import LogportError
from logport.metrics import Metrics
from logport.routing import Router
from logport.runtime import Runtime, Service
from logport.store import SegmentStore
from logport.store.identity import ensure_hub_identity

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
    def __init__(self, config: Config, *, serve_metrics: bool = True) -> None:
        self.config = config
        self.metrics = Metrics()
        self._serve_metrics = serve_metrics
        self.runtime: Runtime | None = None
        self.services: dict[str, Service] = {}
        self._retention: asyncio.Task[None] | None = None

    async def start(self) -> Runtime:
        cfg = self.config
        store = await SegmentStore.open(cfg.store, metrics=self.metrics)
        ensure_hub_identity(cfg.store.data_dir)  # on the first start; kept for good (logport.store.identity)
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
            if self._serve_metrics and cfg.metrics.enabled:
                m = cfg.metrics
                try:
                    self.metrics.serve(m.bind, m.port)
                except OSError as e:
                    raise ListenerError(f"metrics endpoint could not start on {m.bind}:{m.port}: {e.strerror or e}") from e
        except BaseException:
            await self.stop()
            raise
        self._retention = asyncio.create_task(self._retention_loop())
        return runtime

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
    hub = Hub(config)
    await hub.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("logport serving", extra={"data_dir": config.store.data_dir})
    await stop.wait()
    log.info("logport stopping")
    await hub.stop()
