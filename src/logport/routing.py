"""Tag routing: Fluentd-style match patterns map event tags to segment names."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from logport.config import RouteConfig


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Fluentd match syntax: `*` one tag part, `**` zero or more parts, `{a,b}` either.

    Several patterns separated by spaces match if any does.
    """
    alternatives = [_pattern_regex(p) for p in pattern.split()]
    return re.compile("|".join(f"(?:{a})" for a in alternatives) + r"\Z")


def _pattern_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            # `a.**` also matches `a`: swallow a preceding dot into the optional group
            if out and out[-1] == r"\.":
                out.pop()
                out.append(r"(?:\..*)?")
            else:
                out.append(".*")
            i += 2
        elif c == "*":
            out.append(r"[^.]*")
            i += 1
        elif c == "{":
            end = pattern.index("}", i)
            choices = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_pattern_regex(ch) for ch in choices) + ")")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


class Router:
    """First matching route wins; unmatched tags go to the listener's own segment."""

    def __init__(self, routes: Sequence[RouteConfig]) -> None:
        self._routes = [(compile_pattern(r.match), r.segment) for r in routes]
        self._cache: dict[str, str | None] = {}

    def segment_for(self, tag: str, default: str) -> str:
        if not self._routes:
            return default
        hit = self._cache.get(tag, ...)
        if hit is ...:
            hit = next((seg for rx, seg in self._routes if rx.match(tag)), None)
            if len(self._cache) < 100_000:
                self._cache[tag] = hit
        return hit if hit is not None else default  # type: ignore[return-value]
