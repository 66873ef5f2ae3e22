"""`logport pipeline --streams FILE`: logjam's per-stream settings, the JSON its app serves at `/admin/streams`
(`{"<app>-<env>": {"import_threshold": 500, ...}, ...}`), checked field by field as the importer reads them
(specs/logjam-analytics.md 1.1, logjam-tools src/logjam-streaminfo.c)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logport.errors import LogportError


class StreamSettingsError(LogportError):
    """A --streams file that cannot be used: names the file, the stream, the field and the value."""


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _thresholds(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                       and _number(p[1]) for p in v)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


# The settings the importer reads, with what their value must be; other keys (database_number, cleaning
# thresholds, ...) are kept as they are.
FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "import_threshold": (_number, "a number of milliseconds"),
    "import_thresholds": (_thresholds, "a list of [module, milliseconds] pairs"),
    "ignored_request_uri": (lambda v: v is None or isinstance(v, str), "a path prefix (text)"),
    "backend_only_requests": (lambda v: v is None or isinstance(v, str), 'text: "*" or a comma-separated list'),
    "api_requests": (_strings, "a list of module names"),
    "sampling_rate_400s": (lambda v: _number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "max_inserts_per_second": (lambda v: _integer(v) and v >= 0, "a whole number >= 0"),
}


def load(path: str | Path) -> dict[str, dict[str, Any]]:
    """The streams of a /admin/streams JSON file, app-env -> settings."""
    try:
        data = json.loads(Path(path).read_bytes())
    except OSError as e:
        raise StreamSettingsError(f"--streams {str(path)!r}: {e.strerror or e}") from None
    except ValueError as e:
        raise StreamSettingsError(f"--streams {str(path)!r} is not JSON ({e}); it takes what logjam serves at "
                                  "/admin/streams") from None
    return parse(data, str(path))


def parse(data: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(data, dict):
        raise StreamSettingsError(f"--streams {where!r}: expected an object of streams (\"app-env\": {{...}}), "
                                  f"found {type(data).__name__}")
    streams: dict[str, dict[str, Any]] = {}
    for name, settings in data.items():
        app, _, env = name.rpartition("-")
        if not (app and env and name.isprintable() and name.isascii()):
            raise StreamSettingsError(f"--streams {where!r}: stream {name!r} is not <app>-<env>")
        if not isinstance(settings, dict):
            raise StreamSettingsError(f"--streams {where!r}: stream {name!r} is {type(settings).__name__}, "
                                      "not an object of settings")
        for key, (valid, meaning) in FIELDS.items():
            if key in settings and not valid(settings[key]):
                raise StreamSettingsError(f"--streams {where!r}: stream {name!r}: {key} must be {meaning}, "
                                          f"not {json.dumps(settings[key])}")
        streams[name] = settings
    return streams
