"""Per-stream settings (logjam's `/admin/streams` JSON, ctx.streams) as Spark columns of a row's stream.

Without settings every stream is accepted with logjam_app's defaults (the settings are constants); with them, a
stream not listed is not accepted, and a setting a stream leaves out has logjam_app's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass(frozen=True)
class StreamRules:
    """What the importer reads of one stream's settings (logjam-tools src/logjam-streaminfo.c), with logjam_app's
    defaults (config/initializers/logjam.rb; logjam_core lib/logjam.rb)."""

    import_threshold: float = 500.0
    import_thresholds: tuple[tuple[str, float], ...] = ()  # (module without ::, ms); the first entry of a module
    ignored_request_uri: str | None = "/_system/"
    backend_only_requests: str = ""  # "*" (every page) or comma-separated page prefixes
    api_requests: tuple[str, ...] = ()  # module names; [""] means every module
    sampling_rate_400s: float = 1.0
    max_inserts_per_second: int = 100

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> StreamRules:
        default = cls()
        thresholds = tuple((str(name), float(ms)) for name, ms in settings.get("import_thresholds") or ())
        return cls(
            import_threshold=float(settings.get("import_threshold", default.import_threshold)),
            import_thresholds=thresholds,
            ignored_request_uri=settings.get("ignored_request_uri", default.ignored_request_uri) or None,
            backend_only_requests=settings.get("backend_only_requests") or "",
            api_requests=tuple(settings.get("api_requests") or ()),
            sampling_rate_400s=float(settings.get("sampling_rate_400s", default.sampling_rate_400s)),
            max_inserts_per_second=int(settings.get("max_inserts_per_second", default.max_inserts_per_second)),
        )

    @property
    def backend_only_prefixes(self) -> tuple[str, ...]:
        return tuple(p for p in self.backend_only_requests.split(",") if p) if self.backend_only_requests != "*" else ()

    @property
    def module_thresholds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, ms in self.import_thresholds:
            out.setdefault(name, ms)  # the importer stops at a module's first entry
        return out


DEFAULT_RULES = StreamRules()


def stream_rules(streams: Mapping[str, Mapping[str, Any]] | None) -> dict[str, StreamRules] | None:
    return None if streams is None else {name: StreamRules.from_settings(s) for name, s in streams.items()}


class StreamColumns:
    """The settings of the stream in column `stream` (app-env) as Spark columns: constants without --streams, else
    lookups in literal maps keyed by stream."""

    def __init__(self, rules: Mapping[str, StreamRules] | None, stream: Column) -> None:
        self.rules = rules
        self.stream = stream

    def _setting(self, name: str, kind: str) -> Column:
        """A scalar setting: its value for the row's stream (null for a stream not listed)."""
        from pyspark.sql import functions as F

        if self.rules is None:
            return F.lit(getattr(DEFAULT_RULES, name)).cast(kind)
        items = sorted((stream, getattr(r, name)) for stream, r in self.rules.items())
        return self._lookup(items, kind)

    def _lookup(self, items: list[tuple[str, Any]], kind: str) -> Column:
        from pyspark.sql import functions as F

        if not items:
            return F.lit(None).cast(kind)
        pairs = [c for stream, value in items for c in (F.lit(stream), F.lit(value).cast(kind))]
        return F.try_element_at(F.create_map(*pairs), self.stream)

    @property
    def accepted(self) -> Column:
        from pyspark.sql import functions as F

        if self.rules is None:
            # the importer's well-formed name (printable ASCII, a '-'); app and env not empty
            return F.coalesce(self.stream.rlike(r"^[\x20-\x7f]+-[\x20-\x2c\x2e-\x7f]+$"), F.lit(False))
        return F.coalesce(self.stream.isin(sorted(self.rules)), F.lit(False))

    @property
    def import_threshold(self) -> Column:
        return self._setting("import_threshold", "double")

    @property
    def ignored_request_uri(self) -> Column:
        return self._setting("ignored_request_uri", "string")

    @property
    def sampling_rate_400s(self) -> Column:
        return self._setting("sampling_rate_400s", "double")

    @property
    def max_inserts_per_second(self) -> Column:
        return self._setting("max_inserts_per_second", "int")

    def module_threshold(self, module: Column) -> Column:
        """The stream's threshold for `module` (without ::), null when it has none."""
        from pyspark.sql import functions as F

        rules = self.rules if self.rules is not None else {"": DEFAULT_RULES}
        pairs = sorted((f"{stream}\x00{name}", ms) for stream, r in rules.items()
                       for name, ms in r.module_thresholds.items())
        if not pairs:
            return F.lit(None).cast("double")
        key = F.concat(self.stream if self.rules is not None else F.lit(""), F.lit("\x00"), module)
        return self._map(pairs, "double", key)

    def _map(self, pairs: list[tuple[str, Any]], kind: str, key: Column) -> Column:
        from pyspark.sql import functions as F

        return F.try_element_at(F.create_map(*[c for k, v in pairs for c in (F.lit(k), F.lit(v).cast(kind))]), key)

    def backend_only(self, page: Column) -> Column:
        """Whether `page` is backend-only for the stream: its frontend messages are not matched to it."""
        from pyspark.sql import functions as F

        rules = self.rules if self.rules is not None else {"": DEFAULT_RULES}
        every = sorted(s for s, r in rules.items() if r.backend_only_requests == "*")
        prefixed = {s: r.backend_only_prefixes for s, r in rules.items() if r.backend_only_prefixes}
        stream = self.stream if self.rules is not None else F.lit("")
        out = stream.isin(every) if every else F.lit(False)
        for s, prefixes in sorted(prefixed.items()):
            starts = [page.startswith(p) for p in prefixes]
            any_start = starts[0]
            for c in starts[1:]:
                any_start = any_start | c
            out = out | ((stream == F.lit(s)) & any_start)
        return F.coalesce(out, F.lit(False))

    def api_request(self, module: Column) -> Column:
        """Whether a request of `module` (without ::) is an API request of the stream (caller defaults apply)."""
        from pyspark.sql import functions as F

        rules = self.rules if self.rules is not None else {"": DEFAULT_RULES}
        stream = self.stream if self.rules is not None else F.lit("")
        every = sorted(s for s, r in rules.items() if r.api_requests[:1] == ("",))
        named = sorted(f"{s}\x00{m}" for s, r in rules.items() if r.api_requests[:1] != ("",) for m in r.api_requests)
        out = stream.isin(every) if every else F.lit(False)
        if named:
            out = out | F.concat(stream, F.lit("\x00"), module).isin(named)
        return F.coalesce(out, F.lit(False))
