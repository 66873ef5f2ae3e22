"""What every `logport send` does with a line of stdin, and how it counts."""

from __future__ import annotations

from typing import Any

import orjson


def record_from_line(line: bytes | str) -> Any:
    """The JSON value of a line; a line that is not JSON is sent as `{"message": line}` (as Filebeat
    ships a plain log line), never dropped. A JSON value that is not an object is wrapped the same way."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        return {"message": text.rstrip("\r\n")}
    return value if isinstance(value, dict) else {"message": value}


def count(n: int, noun: str = "event") -> str:
    """`1 event`, `2 events`."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
