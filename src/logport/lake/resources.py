"""logjam's resources: the numeric fields of a request the pipeline sums, by group, and how to load another list.

The default is logjam_app's config/logjam_resources.yml (specs/logjam-analytics.md 2.1); `--resources FILE` takes a
file in that same format (groups `time_resources`, `call_resources`, `memory_resources`, `heap_resources`,
`frontend_resources`, `dom_resources`, each a list of `name: colour` or plain names), so a logjam user's own file works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logport.errors import LogportError

GROUPS = ("time", "call", "memory", "heap", "frontend", "dom")
MAX_RESOURCES = 100  # the importer's limit (importer-resources.h:11)

DEFAULT: dict[str, tuple[str, ...]] = {
    "time": ("gc_time", "wait_time", "other_time", "memcache_time", "redis_time", "oauth_time", "amiando_time",
             "amqp_time", "momentum_time", "search_time", "swift_time", "cassandra_time", "rest_time", "api_time",
             "mapping_time", "db_time", "riak_time", "s3_time", "view_time", "total_time"),
    "call": ("gc_calls", "memcache_misses", "memcache_reads", "memcache_writes", "memcache_calls", "redis_calls",
             "amiando_calls", "amqp_calls", "momentum_calls", "search_queue_runs", "search_calls", "swift_calls",
             "cassandra_calls", "rest_queue_runs", "rest_calls", "api_calls", "db_sql_query_cache_hits", "db_calls",
             "riak_calls", "s3_calls"),
    "memory": ("allocated_memory", "allocated_bytes", "allocated_objects"),
    "heap": ("heap_size", "heap_growth", "live_data_set_size"),
    "frontend": ("page_time", "ajax_time", "load_time", "processing_time", "response_time", "request_time",
                 "connect_time", "navigation_time", "dom_interactive", "frontend_time"),
    "dom": ("style_nodes", "script_nodes", "html_nodes"),
}

# Always there, whatever the file says: the importer's own computations read them.
REQUIRED = {"time": ("total_time", "other_time"), "frontend": ("page_time", "ajax_time", "frontend_time")}


class ResourcesError(LogportError):
    """A resources file that cannot be used: names the file and what is wrong."""


@dataclass(frozen=True)
class Resources:
    """Resource names by group, in the file's order (which drives menus and colours, never the numbers)."""

    groups: Mapping[str, tuple[str, ...]]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for group in GROUPS for name in self.groups.get(group, ()))

    def group_of(self, name: str) -> str | None:
        for group in GROUPS:
            if name in self.groups.get(group, ()):
                return group
        return None

    @property
    def backend(self) -> tuple[str, ...]:
        """time, call, memory and heap: divided by the backend request count (logjam_core resource.rb)."""
        return tuple(n for g in ("time", "call", "memory", "heap") for n in self.groups.get(g, ()))

    @property
    def frontend(self) -> tuple[str, ...]:
        return tuple(n for g in ("frontend", "dom") for n in self.groups.get(g, ()))

    def as_json(self) -> dict[str, list[str]]:
        return {g: list(self.groups.get(g, ())) for g in GROUPS}


DEFAULT_RESOURCES = Resources(DEFAULT)


def load(path: str | Path) -> Resources:
    """A resources file in logjam_resources.yml's format (YAML, or the same structure as JSON)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ResourcesError(f"resources file {str(path)!r}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ResourcesError(f"resources file {str(path)!r} is not YAML: {e}") from None
    return parse(data, str(path))


def parse(data: Any, where: str) -> Resources:
    if not isinstance(data, dict):
        raise ResourcesError(f"resources file {where!r}: expected groups such as time_resources:, found "
                             f"{type(data).__name__}")
    unknown = sorted(k for k in data if not (isinstance(k, str) and k.removesuffix("_resources") in GROUPS))
    if unknown:
        raise ResourcesError(f"resources file {where!r}: unknown group {unknown[0]!r}; groups are "
                             + ", ".join(f"{g}_resources" for g in GROUPS))
    groups: dict[str, tuple[str, ...]] = {}
    seen: set[str] = set()
    for group in GROUPS:
        names = []
        for item in data.get(f"{group}_resources") or []:
            name = next(iter(item)) if isinstance(item, dict) and len(item) == 1 else item
            if not (isinstance(name, str) and name.isidentifier()):
                raise ResourcesError(f"resources file {where!r}: {group}_resources entry {item!r} is not a name "
                                     "(letters, digits, _)")
            if name in seen:
                raise ResourcesError(f"resources file {where!r}: {name!r} is listed twice")
            seen.add(name)
            names.append(name)
        for name in REQUIRED.get(group, ()):
            if name not in seen:
                seen.add(name)
                names.append(name)
        groups[group] = tuple(names)
    if len(seen) > MAX_RESOURCES:
        raise ResourcesError(f"resources file {where!r}: {len(seen)} resources, more than the limit of "
                             f"{MAX_RESOURCES}")
    return Resources(groups)
