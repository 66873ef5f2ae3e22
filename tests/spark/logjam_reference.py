"""Every logjam statistic computed in plain Python, straight from the spec (../shared/specs/logjam-analytics.md)
and docs/pipeline.md (its fixed quirks, its malformed-field rules): the golden tests' expected tables.

Independent of the Spark job: it shares only lake/sketch.py's bucket constants and the resource list (both part
of the contract). `reference(messages, ...)` takes an explicit list of stored messages
(logjam_traffic.Message: the body, its stream, topic, creation time and where it was stored), so a streaming test
can hand it exactly the messages its micro-batches counted.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from logport.lake import sketch
from logport.lake.resources import DEFAULT_RESOURCES, Resources

UNKNOWN = "Unknown#unknown_method"
MATCH_US = 300_000_000
# logjam_app's defaults for a stream's settings
DEFAULTS = {"import_threshold": 500, "import_thresholds": [], "ignored_request_uri": "/_system/",
            "backend_only_requests": "", "api_requests": [], "sampling_rate_400s": 1, "max_inserts_per_second": 100}


# --- json-c's readings of a value -------------------------------------------------------------------------------

ABSENT = object()


def numeric_text(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(
        r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", v.strip(), re.IGNORECASE) is not None


def as_double(v: Any) -> float:
    if isinstance(v, bool | int | float):
        return float(v)
    return float(v.strip()) if numeric_text(v) else 0.0


def number_like(v: Any) -> bool:
    """A resource's value that counts: a number, true/false, or text holding a number (anything else is absent)."""
    return isinstance(v, bool | int | float) or numeric_text(v)


def as_int(v: Any, bits: int = 32) -> int:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if lo <= v <= hi else 0
    if isinstance(v, float):
        if math.isfinite(v) and lo <= int(v) <= hi:
            return int(v)
        return 0
    if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip()):
        n = int(v.strip())
        return n if lo <= n <= hi else 0
    return 0


def as_text(v: Any) -> str | None:
    if v is None or v is ABSENT:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    raise AssertionError(f"the golden traffic holds no {v!r} where text is read")


def truthy(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v != 0
    if isinstance(v, str):
        return v != ""
    return False


def get(body: dict[str, Any], name: str) -> Any:
    return body.get(name, ABSENT)


# --- settings -----------------------------------------------------------------------------------------------------

@dataclass
class Settings:
    time_basis: str = "local"
    streams: dict[str, dict[str, Any]] | None = None
    resources: Resources = DEFAULT_RESOURCES

    def of(self, stream: str) -> dict[str, Any]:
        """The stream's settings: those given, logjam_app's defaults for the others; null means none."""
        out = {**DEFAULTS, **(self.streams or {}).get(stream, {})}
        out["api_requests"] = out["api_requests"] or []
        out["backend_only_requests"] = out["backend_only_requests"] or ""
        return out

    def accepted(self, stream: str | None) -> bool:
        if stream is None:
            return False
        if self.streams is None:
            return re.fullmatch(r"[\x20-\x7f]+-[\x20-\x2c\x2e-\x7f]+", stream) is not None
        return stream in self.streams


# --- one message --------------------------------------------------------------------------------------------------

@dataclass
class Msg:
    m: Any  # the logjam_traffic.Message
    kind: str
    stream: str
    app: str
    env: str
    date: str
    minute: int
    time_us: int
    page: str = ""
    module: str = ""
    values: dict[str, float] = field(default_factory=dict)  # resources
    code: int = 0
    severity: int = 0
    exceptions: list[str] | None = None
    soft: list[str] | None = None
    caller_id: str | None = None
    caller_action: str | None = None
    user_agent: str | None = None
    reasons: list[str] = field(default_factory=list)
    papdex: float | None = None

    @property
    def provenance(self) -> tuple[str, str, int, int]:
        return (self.m.hub_id, self.m.segment, self.m.offset, self.m.index)


def topic_kind(topic: str) -> str | None:
    for prefix, kind in (("logs", "request"), ("javascript", "js"), ("events", "event"), ("frontend.page", "page"),
                         ("frontend.ajax", "ajax")):
        if topic.startswith(prefix):
            return kind
    return None


def stream_of(m: Any) -> str | None:
    if not m.shipped:
        return str(m.stream)
    app, env = m.body.get("app"), m.body.get("env")
    if isinstance(app, str) and isinstance(env, str):
        return f"{app}-{env}"
    found = re.fullmatch(r"logs\.(.+)\.([^.]+)", m.topic)
    return f"{found.group(1)}-{found.group(2)}" if found else None


def valid_started_at(v: Any) -> bool:
    if not isinstance(v, str) or len(v) < 19 or v[10] not in "T ":
        return False
    try:
        datetime.strptime(v[:10] + " " + v[11:19], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", v[:10] + " " + v[11:19]) is not None


def complete(page: str) -> str:
    if page == "":
        return UNKNOWN
    if "#" not in page:
        return page + "#unknown_method"
    if page.endswith("#"):
        return page + "unknown_method"
    return page


def module_of(page: str) -> str:
    return "::" + (page.split(":", 1)[0] if ":" in page else page.split("#", 1)[0])


def page_of(body: dict[str, Any], js: bool = False) -> str:
    action = ABSENT if js else get(body, "action")
    if action is not ABSENT:
        chosen = action
    else:
        chosen = get(body, "logjam_action")
    text = as_text(chosen) if chosen is not ABSENT else None
    return complete(UNKNOWN if text is None else text)


def url_path(url: str | None) -> str | None:
    if url is None:
        return None
    after = url.split("://", 1)[1] if "://" in url else url
    return after[after.index("/"):] if "/" in after else ""


def lines_severity(lines: Any) -> int:
    top = -1
    if isinstance(lines, list):
        for line in lines:
            if isinstance(line, list) and line and line[0] is not None:
                top = max(top, as_int(line[0]))
    return 1 if top < 0 or top > 5 else top


def caller_key(caller_id: str | None, action: str | None) -> str | None:
    if not caller_id or not action or caller_id.count("-") < 2:
        return None
    return caller_id.rsplit("-", 2)[0] + "@" + action


def draw(msg: Msg, check: str, rate: float) -> bool:
    if rate >= 1:
        return True
    hub, segment, offset, index = msg.provenance
    return zlib.crc32(f"{hub}/{segment}/{offset}/{index}/{check}".encode()) / 2**32 < rate


def day_minute(body: dict[str, Any], time_us: int, basis: str) -> tuple[str, int]:
    if basis == "utc":
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=time_us)
        return moment.date().isoformat(), moment.hour * 60 + moment.minute
    s = body["started_at"]
    return s[:10], int(s[11:13]) * 60 + int(s[14:16])


def read(m: Any, settings: Settings) -> Msg | str:
    """The message's counted fields, or why it is not counted."""
    body = m.body
    kind = topic_kind(m.topic)
    if kind is None:
        return "topic"
    stream = stream_of(m)
    if not settings.accepted(stream):
        return "stream"
    assert stream is not None
    if not valid_started_at(body.get("started_at")):
        return "started_at"
    time_us = m.time_ns // 1000
    if not m.shipped and abs(time_us // 1000 - m.created_ms) > 172_800_000:
        return "clock"
    app, env = stream.rsplit("-", 1)
    day, minute = day_minute(body, time_us, settings.time_basis)
    msg = Msg(m, kind, stream, app, env, day, minute, time_us)
    rules = settings.of(stream)
    resources = settings.resources
    if kind == "request":
        url = body.get("request_info", {}).get("url") if isinstance(body.get("request_info"), dict) else None
        path = url_path(as_text(url))
        prefix = rules["ignored_request_uri"]
        if truthy(body.get("logjam_ignore_message")) or (path is not None and prefix and path.startswith(prefix)):
            return "ignored"
        msg.page = page_of(body)
        msg.module = module_of(msg.page)
        msg.code = as_int(body["code"]) if "code" in body else 500
        msg.severity = as_int(body["severity"]) if "severity" in body else lines_severity(body.get("lines"))
        total = as_double(body["total_time"]) if "total_time" in body else 1.0
        total = 1.0 if total == 0 else total
        ex = body.get("exceptions")
        ex = [as_text(e) for e in ex if e is not None] if isinstance(ex, list) else []
        msg.exceptions = [e for e in ex if e is not None] or None
        soft = body.get("soft_exceptions")
        soft = [as_text(e) for e in soft if e is not None] if isinstance(soft, list) else []
        msg.soft = [e for e in soft if e is not None] or None
        values = {r: as_double(body[r]) for r in resources.names if number_like(body.get(r))}
        values["total_time"] = total
        values["other_time"] = total - sum(values.get(r, 0.0) for r in resources.groups["time"]
                                           if r not in ("total_time", "gc_time", "other_time"))
        if "allocated_memory" not in values and "allocated_objects" in values and "allocated_bytes" in values:
            values["allocated_memory"] = float(int(values["allocated_bytes"]) + 40 * int(values["allocated_objects"]))
        msg.values = values
        caller_id, caller_action = as_text(body.get("caller_id")), as_text(body.get("caller_action"))
        bare = msg.module.lstrip(":")
        api = rules["api_requests"]
        if path is not None and api and (api[0] == "" or bare in api):
            caller_id = caller_id or f"unknown-{env}-unknown"
            caller_action = caller_action or "Unknown#unknown"
        msg.caller_id, msg.caller_action = caller_id, caller_action
        headers = body.get("request_info", {}).get("headers") if isinstance(body.get("request_info"), dict) else None
        msg.user_agent = as_text(headers.get("User-Agent")) if isinstance(headers, dict) else None
        heap = int(values["heap_growth"]) if "heap_growth" in values else 0
        threshold = dict((name, ms) for name, ms in reversed(rules["import_thresholds"])).get(bare)
        rate = rules["sampling_rate_400s"]
        sev, rc = msg.severity, msg.code
        checks = [("slow", total > rules["import_threshold"] or (threshold is not None and total > threshold)),
                  ("fatal", sev >= 4),
                  ("error", sev == 3 and (rc >= 500 or draw(msg, "error", rate) or draw(msg, "warning", rate))),
                  ("warning", sev == 2 and draw(msg, "warning", rate)),
                  ("5xx", rc >= 500), ("4xx", 400 <= rc < 500 and draw(msg, "4xx", rate)), ("code0", rc == 0),
                  ("exceptions", msg.exceptions is not None), ("heap_growth", heap > 0)]
        msg.reasons = [name for name, hit in checks if hit]
    elif kind in ("page", "ajax"):
        msg.page = page_of(body)
        msg.module = module_of(msg.page)
        msg.values = {r: as_double(body[r]) for r in resources.names if number_like(body.get(r))}
        msg.user_agent = as_text(body.get("user_agent"))
    elif kind == "js":
        description = as_text(body.get("description"))
        if description == "":
            return "description"
        msg.page = page_of(body, js=True)
        msg.module = module_of(msg.page)
    return msg


# --- frontend -----------------------------------------------------------------------------------------------------

def rts_values(rts: Any, n: int) -> list[int] | None:
    if not isinstance(rts, str):
        return None
    parts = rts.split(",")
    if len(parts) != n or not all(re.fullmatch(r"\d{0,18}", p) for p in parts):
        return None
    return [int(p or 0) for p in parts]


def timing_outcome(msg: Msg, rts: list[int]) -> str:
    """The drop reason after the match, or accepted (then the timing resources are in msg.values)."""
    if msg.kind == "ajax":
        ajax = rts[1] - rts[0]
        if ajax < 0:
            return "invalid"
        ajax = ajax or 1
        if ajax > 60_000:
            return "outlier"
        msg.values.update(ajax_time=float(ajax), frontend_time=float(ajax))
        return "accepted"
    t = list(rts)
    base = t[0] or t[1]
    if base == 0:
        return "nav_timing" if not any(t) else "invalid"
    t[0] = base
    t = [v - base if v > 0 else v for v in t]
    if not (t[0] >= 0 and t[10] > 0 and t[0] <= t[6] <= t[7] <= t[8] <= t[13]):
        return "invalid"
    page_time = t[15] or 1
    if page_time > 60_000:
        return "outlier"
    msg.values.update(navigation_time=t[1], connect_time=t[6] - t[1], request_time=t[7] - t[6],
                      response_time=t[8] - t[7], processing_time=t[13] - t[8], load_time=t[15] - t[13],
                      page_time=page_time, dom_interactive=t[10], frontend_time=page_time)
    msg.values = {k: float(v) for k, v in msg.values.items()}
    msg.papdex = float(t[15])
    return "accepted"


def match(frontend: list[Msg], backend: list[Msg], settings: Settings, clock_us: int) -> tuple[list[Msg], list[tuple[Msg, str]]]:
    """(accepted frontend messages, filed under their backend request's day and minute; every decided message
    with its reason). Messages within 5 minutes of the clock without a backend request wait (neither)."""
    ids: dict[str, Msg] = {}
    for b in sorted(backend, key=lambda b: b.time_us):
        rid = as_text(b.m.body.get("request_id"))
        rules = settings.of(b.stream)
        only = rules["backend_only_requests"]
        backend_only = only == "*" or any(b.page.startswith(p) for p in only.split(",") if p)
        if rid is not None and not backend_only:
            ids.setdefault(f"{b.stream}-{rid}", b)
    candidates: dict[str, list[Msg]] = defaultdict(list)
    decided: list[tuple[Msg, str]] = []
    parsed: dict[int, list[int]] = {}
    for f in frontend:
        body = f.m.body
        values = rts_values(body.get("rts"), 16 if f.kind == "page" else 2)
        if values is None:
            decided.append((f, "corrupted"))
            continue
        parsed[id(f)] = values
        key = as_text(body["logjam_request_id"] if "logjam_request_id" in body else body.get("request_id"))
        b = ids.get(key) if key is not None else None
        if b is not None and abs(f.time_us - b.time_us) <= MATCH_US:
            candidates[key].append(f)  # type: ignore[index]
        elif f.time_us < clock_us - MATCH_US:
            decided.append((f, "illegal"))
    accepted = []
    for key, fs in candidates.items():
        fs.sort(key=lambda f: (f.time_us, *f.provenance))
        for f in fs[1:]:
            decided.append((f, "illegal"))
        first, b = fs[0], ids[key]
        reason = timing_outcome(first, parsed[id(first)])
        decided.append((first, reason))
        if reason == "accepted":
            first.date, first.minute = b.date, b.minute
            accepted.append(first)
    return accepted, decided


# --- the tables ---------------------------------------------------------------------------------------------------

@dataclass
class Aggregate:
    count: int = 0
    page_count: int = 0
    ajax_count: int = 0
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    squares: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    maxima: dict[str, float] = field(default_factory=dict)
    apdex: Counter[str] = field(default_factory=Counter)
    maps: dict[str, Counter[Any]] = field(default_factory=lambda: defaultdict(Counter))
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # for the sketches

    def add_values(self, values: dict[str, float]) -> None:
        for r, v in values.items():
            self.sums[r] += v
            self.squares[r] += v * v
            self.maxima[r] = max(self.maxima.get(r, v), v)


APDEX = {"apdex": (100, 500, 2000), "fapdex": (500, 2000, 8000), "papdex": (500, 2000, 8000),
         "xapdex": (500, 2000, 8000)}


def apdex(agg: Aggregate, family: str, v: float) -> None:
    happy, satisfied, tolerated = APDEX[family]
    if v < happy:
        agg.apdex[f"{family}_happy"] += 1
    if v < satisfied:
        agg.apdex[f"{family}_satisfied"] += 1
    elif v < tolerated:
        agg.apdex[f"{family}_tolerating"] += 1
    else:
        agg.apdex[f"{family}_frustrated"] += 1


def distribution(agg: Aggregate, resource: str, v: float) -> None:
    if v > 0:
        agg.maps[f"{resource}_hist"][sketch.hist_index(v)] += 1
    agg.values[resource].append(v)


def quant_of(resource: str, group: str | None, v: float) -> tuple[str, float] | None:
    if v <= 0:
        return None
    if group == "time":
        return "t", sketch.HIST_BOUNDS[sketch.hist_index(v)]
    if group == "frontend":
        return "f", sketch.HIST_BOUNDS[sketch.hist_index(v)]
    if resource == "allocated_objects":
        return "m", sketch.HIST_BOUNDS[sketch.hist_index(v)]
    if resource == "allocated_bytes":
        return "m", 1024 * sketch.HIST_BOUNDS[sketch.hist_index(v / 1024)]
    return None


@dataclass
class Expected:
    minutes: dict[tuple[Any, ...], Aggregate]  # (app, env, date, minute, scope, page)
    totals: dict[tuple[Any, ...], Aggregate]  # (app, env, date, scope, page)
    quants: Counter[tuple[Any, ...]]  # (app, env, date, page, kind, resource, quant) -> count
    agents: dict[tuple[Any, ...], dict[str, Any]]  # (app, env, date, user_agent)
    requests: dict[tuple[Any, ...], dict[str, Any]]  # provenance -> row
    js_exceptions: dict[tuple[Any, ...], dict[str, Any]]
    notifications: dict[tuple[Any, ...], dict[str, Any]]
    dropped: Counter[str]
    waiting: int  # frontend messages not decided yet


def scopes(page: str, module: str) -> list[tuple[str, str]]:
    return [("action", page), ("module", module), ("all", "all_pages")]


def reference(messages: Iterable[Any], settings: Settings | None = None) -> Expected:
    settings = settings or Settings()
    msgs: list[Msg] = []
    dropped: Counter[str] = Counter()
    for m in messages:
        read_ = read(m, settings)
        if isinstance(read_, str):
            dropped[read_] += 1
        else:
            msgs.append(read_)
    clock = max((x.time_us for x in msgs), default=0)
    backend = [x for x in msgs if x.kind == "request"]
    frontend = [x for x in msgs if x.kind in ("page", "ajax")]
    accepted, decided = match(frontend, backend, settings, clock)

    minutes: dict[tuple[Any, ...], Aggregate] = defaultdict(Aggregate)
    totals: dict[tuple[Any, ...], Aggregate] = defaultdict(Aggregate)
    quants: Counter[tuple[Any, ...]] = Counter()
    resources = settings.resources

    def each(x: Msg, js: bool = False) -> Iterable[Aggregate]:
        for scope, page in scopes(x.page, x.module):
            if js and scope == "action" and "#unknown_method" in x.page:
                continue
            yield minutes[(x.app, x.env, x.date, x.minute, scope, page)]
            yield totals[(x.app, x.env, x.date, scope, page)]

    for x in [*backend, *accepted]:
        for agg in each(x):
            agg.add_values(x.values)
            if x.kind == "request":
                agg.count += 1
                apdex(agg, "apdex", x.values["total_time"])
                agg.maps["response"][str(x.code)] += 1
                agg.maps["severity"][str(x.severity)] += 1
                for e in set(x.exceptions or ()):
                    agg.maps["exceptions"][e] += 1
                for e in set(x.soft or ()):
                    agg.maps["soft_exceptions"][e] += 1
                caller = caller_key(x.caller_id, x.caller_action)
                if caller:
                    agg.maps["callers"][caller] += 1
                sender = caller_key(as_text(x.m.body.get("sender_id")), as_text(x.m.body.get("sender_action")))
                if sender:
                    agg.maps["senders"][sender] += 1
                distribution(agg, "total_time", x.values["total_time"])
            elif x.kind == "page":
                agg.page_count += 1
                apdex(agg, "fapdex", x.values["page_time"])
                assert x.papdex is not None
                apdex(agg, "papdex", x.papdex)
                distribution(agg, "page_time", x.values["page_time"])
            else:
                agg.ajax_count += 1
                apdex(agg, "fapdex", x.values["ajax_time"])
                apdex(agg, "xapdex", x.values["ajax_time"])
                distribution(agg, "ajax_time", x.values["ajax_time"])
        for r, v in x.values.items():
            q = quant_of(r, resources.group_of(r), v)
            if q is not None:
                for page in (x.page, "all_pages"):
                    quants[(x.app, x.env, x.date, page, q[0], r, q[1])] += 1
    for x in msgs:
        if x.kind == "js":
            description = as_text(x.m.body.get("description"))
            for agg in each(x, js=True):
                agg.maps["js_exceptions"][description if description is not None else "unknown_exception"] += 1

    agents: dict[tuple[Any, ...], dict[str, Any]] = defaultdict(
        lambda: {"backend": 0, "frontend": 0, "dropped": 0, "drop_reasons": Counter()})
    for x in backend:
        if x.user_agent is not None:
            agents[(x.app, x.env, x.date, x.user_agent)]["backend"] += 1
    decided_ids = set()
    for x, reason in decided:
        decided_ids.add(id(x))
        if x.user_agent is None:
            continue
        own_date = x.m.body["started_at"][:10] if settings.time_basis == "local" else \
            day_minute(x.m.body, x.time_us, "utc")[0]
        row = agents[(x.app, x.env, own_date, x.user_agent)]
        row["frontend"] += 1
        if reason != "accepted":
            row["dropped"] += 1
            row["drop_reasons"][reason] += 1
    waiting = sum(1 for x in frontend if id(x) not in decided_ids)

    return Expected(dict(minutes), dict(totals), quants, dict(agents), stored_requests(backend, settings),
                    {x.provenance: js_row(x) for x in msgs if x.kind == "js"},
                    {x.provenance: event_row(x) for x in msgs if x.kind == "event"}, dropped, waiting)


# --- stored requests ----------------------------------------------------------------------------------------------

def cut(s: str) -> str:
    data = s.encode()
    return s if len(data) <= 10_000 else data[:10_000].decode("utf-8", "ignore") + " ...[TRUNCATED]"


def cut_all(v: Any) -> Any:
    if isinstance(v, str):
        return cut(v)
    if isinstance(v, list):
        return [cut_all(x) for x in v]
    if isinstance(v, dict):
        return {k: cut_all(x) for k, x in v.items()}
    return v


def line_row(line: Any) -> dict[str, Any]:
    if not isinstance(line, list):
        return {"severity": None, "time": None, "text": None}
    level = line[0] if line else None
    return {"severity": None if level is None else as_int(level),
            "time": as_text(line[1]) if len(line) > 1 else None, "text": as_text(line[2]) if len(line) > 2 else None}


OWN = {"action", "logjam_action", "code", "severity", "logjam_ignore_message", "description", "lines", "started_at",
       "started_ms", "request_id", "exceptions", "soft_exceptions", "caller_id", "caller_action", "sender_id",
       "sender_action", "host"}


def stored_requests(backend: list[Msg], settings: Settings) -> dict[tuple[Any, ...], dict[str, Any]]:
    interesting = [x for x in backend if x.reasons]
    per_second: dict[tuple[str, int], list[Msg]] = defaultdict(list)
    for x in interesting:
        ms = x.m.body["started_ms"] if isinstance(x.m.body.get("started_ms"), int) else x.time_us // 1000
        per_second[(x.stream, ms // 1000)].append(x)
    out = {}
    for (stream, _), xs in per_second.items():
        cap = settings.of(stream)["max_inserts_per_second"]
        xs.sort(key=lambda x: (x.m.body["started_ms"] if isinstance(x.m.body.get("started_ms"), int)
                               else x.time_us // 1000, *x.provenance))
        for x in xs[:cap]:
            out[x.provenance] = request_row(x, settings)
    return out


def request_row(x: Msg, settings: Settings) -> dict[str, Any]:
    body = x.m.body
    lines = [line_row(ln) for ln in body["lines"]] if isinstance(body.get("lines"), list) else None
    first = next((ln for ln in lines or () if ln["severity"] is not None and ln["severity"] >= x.severity), None)
    description = cut(first["text"]) if first is not None and first["text"] is not None else "------ unknown ------"
    if lines is not None and len(lines) > 10_001:
        lines = [*lines[:5000], dict(lines[5000], text="... LINES DROPPED BY IMPORTER ..."), *lines[-5000:]]
    if lines is not None:
        lines = [dict(ln, text=cut(ln["text"])) if ln["text"] is not None else ln for ln in lines]
    others = {k: v for k, v in body.items() if k not in OWN and k not in settings.resources.names}
    info = body.get("request_info") if isinstance(body.get("request_info"), dict) else {}
    return {
        "app": x.app, "env": x.env, "date": x.date, "minute": x.minute, "request_id": as_text(body.get("request_id")),
        "started_at": body["started_at"], "started_ms": body.get("started_ms"), "page": cut(x.page),
        "module": x.module, "response_code": x.code, "severity": x.severity, "total_time": x.values["total_time"],
        "reasons": x.reasons, "exceptions": cut_all(x.exceptions), "soft_exceptions": cut_all(x.soft),
        "caller_id": x.caller_id, "caller_action": x.caller_action, "sender_id": as_text(body.get("sender_id")),
        "sender_action": as_text(body.get("sender_action")), "user_agent": x.user_agent,
        "url": cut(u) if isinstance(u := info.get("url"), str) else None, "host": as_text(body.get("host")),
        "metrics": {r: v for r, v in x.values.items() if v != 0}, "lines": lines, "description": description,
        "fields": cut_all(others),
    }


def js_row(x: Msg) -> dict[str, Any]:
    body = x.m.body
    description = as_text(body.get("description"))
    rid = as_text(body.get("logjam_request_id"))
    return {"app": x.app, "env": x.env, "date": x.date, "minute": x.minute, "page": x.page,
            "description": "unknown_exception" if description is None else description,
            "logjam_request_id": rid, "request_id": rid.rsplit("-", 1)[-1] if rid else None,
            "user_agent": as_text(body.get("user_agent")), "fields": cut_all(body)}


def event_row(x: Msg) -> dict[str, Any]:
    body = x.m.body
    return {"app": x.app, "env": x.env, "date": x.date, "minute": x.minute, "label": body.get("label"),
            "host": body.get("host"), "cluster": body.get("cluster"), "uuid": body.get("uuid"), "fields": body}


def exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


_ = date  # the dates above are ISO text
