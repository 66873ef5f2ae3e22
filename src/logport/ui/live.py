"""The live view's feed: every segment of the hubs named with `--server`, followed from its end with the segment
protocol's tail reads (clients/segment.py SegmentReader), each stored event turned into a line (a logjam request,
or a log message) and pushed to the pages that listen (server-sent events)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from logport import errors
from logport.clients.segment import SegmentReader, parse_server
from logport.eventjson import event_objects

log = logging.getLogger("logport.ui.live")

KEPT = 200  # the latest items a page gets when it opens
LIST_EVERY = 2.0  # seconds between looks for new segments on a hub
ERROR_LEVELS = {"error", "err", "critical", "crit", "fatal", "alert", "emerg", "emergency"}


def live_items(hub: str, segment: str, offset: int, body: bytes | memoryview) -> list[dict[str, Any]]:
    """The live lines of one stored frame: a logjam request (a record with `action`) or a log message; `error`
    when a request has severity >= 3 (error), a 5xx code or exceptions, or a message an error level."""
    items = []
    for event in event_objects(segment, offset, body):
        record = event.get("record")
        base = {"hub": hub, "segment": segment, "offset": offset, "index": event["index"],
                "received": time.time(), "time": event.get("time"), "tag": event.get("tag")}
        if not isinstance(record, dict):
            items.append({**base, "kind": "opaque", "error": False, "message": "(opaque event)"})
            continue
        if "action" in record:
            option = event.get("option") or {}
            code = record.get("code")
            severity = record.get("severity")
            exceptions = record.get("exceptions") or []
            error = (isinstance(severity, int) and severity >= 3) or (isinstance(code, int) and code >= 500) \
                or bool(exceptions)
            items.append({**base, "kind": "request", "error": bool(error),
                          "app_env": option.get("app_env") or event.get("tag"), "page": str(record["action"]),
                          "code": code, "severity": severity, "total_time": record.get("total_time"),
                          "request_id": record.get("request_id"), "started_at": record.get("started_at"),
                          "exceptions": [str(e) for e in exceptions] if isinstance(exceptions, list) else []})
            continue
        level = record.get("level") or record.get("severity") or record.get("levelname")
        message = record.get("message") or record.get("log") or record.get("msg") or record.get("MESSAGE")
        items.append({**base, "kind": "log", "error": str(level).lower() in ERROR_LEVELS,
                      "level": None if level is None else str(level),
                      "host": record.get("host") or record.get("hostname"),
                      "message": str(message)[:2000] if message is not None else None})
    return items


class LiveFeed:
    """Follows the hubs; keeps the latest KEPT items and hands new ones to every subscriber's queue."""

    def __init__(self, servers: Sequence[str], token: str = "") -> None:
        self.servers = list(servers)
        self.token = token
        self.latest: collections.deque[dict[str, Any]] = collections.deque(maxlen=KEPT)
        self.subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        self.status: dict[str, str] = {s: "connecting" for s in self.servers}
        self.hub_ids: dict[str, str] = {}  # hub identity -> HOST:PORT, for the raw-event commands
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for server in self.servers:
            self._tasks.append(asyncio.create_task(self._follow_hub(server)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def publish(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self.latest.append(item)
            for queue in self.subscribers:
                queue.put_nowait(item)

    async def subscribe(self) -> AsyncGenerator[dict[str, Any], None]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.subscribers.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self.subscribers.discard(queue)

    async def _follow_hub(self, server: str) -> None:
        """List the hub's segments every LIST_EVERY seconds and follow each new one from its end."""
        host, port = parse_server(server)
        followed: dict[str, asyncio.Task[None]] = {}
        first_listing = True  # segments there when the view starts are followed from their end, later ones whole
        lister = SegmentReader(host, port, token=self.token)
        try:
            while True:
                try:
                    await lister.connect_retrying(None)
                    hub = await lister.hub_id()
                    self.hub_ids[hub] = f"{host}:{port}"
                    self.status[server] = "following"
                    while True:
                        for name in await lister.list_segments():
                            if name not in followed or followed[name].done():
                                followed[name] = asyncio.create_task(
                                    self._follow_segment(host, port, hub, name, from_end=first_listing))
                        first_listing = False
                        await asyncio.sleep(LIST_EVERY)
                except (ConnectionError, TimeoutError, OSError, errors.LogportError) as e:
                    self.status[server] = f"reconnecting: {e}"
                    log.warning("live view: hub %s: %s; trying again", server, e)
                    await lister.close()
                    await asyncio.sleep(1.0)
        finally:
            for task in followed.values():
                task.cancel()
            await lister.close()

    async def _follow_segment(self, host: str, port: int, hub: str, segment: str, from_end: bool) -> None:
        reader = SegmentReader(host, port, token=self.token)
        try:
            await reader.connect_retrying(None)
            start, end, _ = await reader.info(segment)
            async for batch in reader.event_lists(segment, end if from_end else start, follow=True, wait=5.0):
                for offset, body in batch:
                    self.publish(live_items(hub, segment, offset, body))
        except (ConnectionError, TimeoutError, OSError, errors.LogportError) as e:
            log.warning("live view: segment %s on %s:%d: %s", segment, host, port, e)
        finally:
            await reader.close()
