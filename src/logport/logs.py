"""Structured logging: one JSON object per line (or plain text), with extra fields; and a log line that a flood
of the same event cannot repeat more than once per interval (`ThrottledLog`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

LOG_INTERVAL = 10.0  # seconds between two lines of a ThrottledLog

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")
        )
        line = f"{self.formatTime(record)} {record.levelname.lower()} {record.name}: {record.getMessage()}"
        if extras:
            line += " " + extras
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to sys.stderr as it is when a record is emitted, not as it was when the handler was made: a
    program that swaps sys.stderr (a test's capture, a daemon's redirect) never leaves it a closed stream."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def setup_logging(level: str = "info", fmt: str = "json") -> None:
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class ThrottledLog:
    """Logs one line per `interval` seconds for one kind of event; counts the others in between."""

    def __init__(self, log: logging.Logger, interval: float = LOG_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.interval = interval
        self.clock = clock
        self._next = 0.0
        self.suppressed = 0

    def warning(self, message: str, **extra: object) -> bool:
        """Log now (with the count of lines suppressed since the last one), or count it; True if logged."""
        now = self.clock()
        if now < self._next:
            self.suppressed += 1
            return False
        self._next = now + self.interval
        self.log.warning(message, extra={**extra, "suppressed": self.suppressed})
        self.suppressed = 0
        return True
