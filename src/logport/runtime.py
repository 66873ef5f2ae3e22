"""What every listener and output is handed by the hub: config, store, router, metrics."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from typing import Protocol

from logport.config import Config
from logport.metrics import Metrics
from logport.routing import Router
from logport.store import SegmentStore


class Service(Protocol):
    """A running listener or output."""

    async def close(self) -> None: ...


@dataclass
class Runtime:
    config: Config
    store: SegmentStore
    metrics: Metrics
    router: Router
    hostname: str = field(default_factory=socket.gethostname)

    def logger(self, name: str) -> logging.Logger:
        return logging.getLogger(f"logport.{name}")
