"""systemd's notification protocol (sd_notify(3)): READY=1, STOPPING=1, STATUS= and WATCHDOG=1 datagrams
to $NOTIFY_SOCKET, written here rather than linked from libsystemd (it is one sendto).

Outside systemd (no NOTIFY_SOCKET) every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("logport.systemd")


class Notifier:
    """Sends notifications to the service manager, and says how often it wants WATCHDOG=1."""

    def __init__(self, environ: dict[str, str] | os._Environ[str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # an abstract socket: a leading NUL byte
            address = "\0" + address[1:]
        self.address = address
        self.watchdog_interval = 0.0  # seconds between two WATCHDOG=1; 0: no watchdog
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_interval = int(usec) / 1e6 / 2  # sd_watchdog_enabled(3): ping at half the timeout
        self._last_watchdog = 0.0
        self._sock: socket.socket | None = None
        if address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, *fields: str) -> bool:
        """Send "KEY=value" lines as one datagram; False (and a log line) when it could not be sent."""
        if self._sock is None:
            return False
        try:
            self._sock.sendto("\n".join(fields).encode(), self.address)
        except OSError as e:
            log.warning("systemd notification failed", extra={"notify_socket": self.address, "error": str(e)})
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> bool:
        # MONOTONIC_USEC: what Type=notify-reload (systemd 253) wants beside RELOADING=1
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def watchdog(self) -> None:
        """WATCHDOG=1 when half the watchdog timeout has passed since the last (called from the event loop:
        a loop that stops turning stops these, and systemd restarts the hub)."""
        if not self.watchdog_interval:
            return
        now = time.monotonic()
        if now - self._last_watchdog >= self.watchdog_interval:
            self._last_watchdog = now
            self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
