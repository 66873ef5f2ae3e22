"""Generated logjam traffic for the golden tests, stored the way the logjam listener stores it.

`generate()` makes the messages (several apps and envs, modules, every resource, missing and malformed fields of
every kind, exceptions, callers, senders, frontend page/ajax messages with matching and non-matching request ids,
JS errors, events, several local time zones, two hubs, and a shipper's `logs.*` events); `store()` writes them into
one data directory per hub, each message through the listener's own path (`read_pull_message`,
`MessageDecoder.accept`: one stored batch per message), and fills in where each one landed (hub, segment, offset),
which logjam_reference.py needs (sampling draws, the rate cap's order, provenance columns).

The runner's streaming golden test reuses both: store() the messages, then compare its tables with
logjam_reference.reference(the messages it let through).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson

from logport.batch import encode_batch
from logport.config import LogjamConfig, StoreConfig
from logport.protocols import logjam as lj
from logport.servers.logjam_ingest import MessageDecoder
from logport.store import SegmentStore
from logport.store.identity import ensure_hub_identity

# 2026-11-24 22:50 UTC: local days differ between the zones below, and some streams cross midnight
BASE_MS = 1_795_560_600_000
ZONES = {"+01:00": timezone(timedelta(hours=1)), "-05:00": timezone(timedelta(hours=-5)),
         "+05:30": timezone(timedelta(hours=5, minutes=30)), "Z": UTC}

RESOURCES_TIME = ("gc_time", "wait_time", "memcache_time", "redis_time", "oauth_time", "amiando_time", "amqp_time",
                  "momentum_time", "search_time", "swift_time", "cassandra_time", "rest_time", "api_time",
                  "mapping_time", "db_time", "riak_time", "s3_time", "view_time")
RESOURCES_CALLS = ("gc_calls", "memcache_misses", "memcache_reads", "memcache_writes", "memcache_calls", "redis_calls",
                   "amiando_calls", "amqp_calls", "momentum_calls", "search_queue_runs", "search_calls",
                   "swift_calls", "cassandra_calls", "rest_queue_runs", "rest_calls", "api_calls",
                   "db_sql_query_cache_hits", "db_calls", "riak_calls", "s3_calls")
RESOURCES_HEAP = ("heap_size", "live_data_set_size")

# The streams the golden run's settings (logjam's /admin/streams JSON) list; `ghost-production` is not listed.
STREAMS: dict[str, dict[str, Any]] = {
    "shop-production": {"import_threshold": 300, "import_thresholds": [["Api", 100], ["Search", 2000]],
                        "ignored_request_uri": "/_system/", "backend_only_requests": "Health#,Admin",
                        "api_requests": ["Api"], "sampling_rate_400s": 0.5, "max_inserts_per_second": 4},
    "shop-preview": {},
    "admin-tool-production": {"backend_only_requests": "*", "api_requests": [""], "sampling_rate_400s": 0,
                              "import_threshold": 1000},
    "search-production": {"sampling_rate_400s": 1, "max_inserts_per_second": 100, "ignored_request_uri": None},
}
APP_ZONES = {"shop-production": "+01:00", "shop-preview": "-05:00", "admin-tool-production": "+05:30",
             "search-production": "Z", "ghost-production": "+01:00"}
PAGES = {
    "shop-production": ["Orders#index", "Orders#show", "Api::V1::ItemsController#show", "Api::Cart#update",
                        "UsersController#login", "Health#ping", "Search::Query#run", "AdminController#index"],
    "shop-preview": ["Orders#index", "Carts#update", "Api::V1::ItemsController#show"],
    "admin-tool-production": ["ToolsController#index", "Reports::Daily#show"],
    "search-production": ["Search#query", "Search#suggest"],
    "ghost-production": ["Ghost#boo"],
}
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "Mozilla/5.0 (Macintosh) Safari/605.1.15", "curl/8.5.0"]
EXCEPTIONS = ["ActiveRecord::RecordNotFound", "Timeout::Error", "NoMethodError", "Net::ReadTimeout", "Foo.Bar$Baz"]


@dataclass
class Message:
    """One logjam message as a producer sent it, and where it was stored (filled in by store())."""

    hub: int  # which of the data directories
    stream: str  # the app-env frame (or, shipped, the tag's)
    topic: str
    body: dict[str, Any]
    created_ms: int  # the meta frame's creation time (the listener's); shipped events have none
    shipped: bool = False  # a shipper's event tagged `logs.<app>.<env>` (Forward), not the listener's
    hub_id: str = ""
    segment: str = ""
    offset: int = -1
    index: int = 0
    time_ns: int = 0  # the event's time as stored (the listener's: started_at, else started_ms, else created_ms)

    @property
    def tag(self) -> str:
        return self.topic if self.shipped else f"logjam.{self.stream}.{self.topic}"


@dataclass
class Traffic:
    messages: list[Message] = field(default_factory=list)
    streams: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in STREAMS.items()})


def started_at(ms: int, zone: str, style: int = 0) -> str:
    """A producer's started_at: its local wall time with its offset (`Z`, or none at all in style 2)."""
    moment = datetime.fromtimestamp(ms / 1000, ZONES[zone])
    text = moment.isoformat(timespec="milliseconds")
    if style == 1:
        text = text.replace("T", " ")
    if zone == "Z":
        text = text.replace("+00:00", "Z")
    if style == 2:
        text = moment.replace(tzinfo=None).isoformat(timespec="seconds")
    return text


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.traffic = Traffic()
        self.backend_ids: list[tuple[str, str, int]] = []  # (stream, request_id, started_ms) of shop requests

    def rid(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def add(self, stream: str, topic: str, body: dict[str, Any], ms: int, created_delay_ms: int | None = None,
            shipped: bool = False) -> None:
        hub = self.rng.randrange(2)
        created = ms + (self.rng.randrange(3000) if created_delay_ms is None else created_delay_ms)
        self.traffic.messages.append(Message(hub, stream, topic, body, created, shipped))

    # --- requests -----------------------------------------------------------------------------------

    def request(self, stream: str, ms: int, quirk: str | None = None) -> dict[str, Any]:
        rng = self.rng
        total = round(rng.lognormvariate(4.6, 1.3), 3)
        body: dict[str, Any] = {
            "action": rng.choice(PAGES[stream]), "started_at": started_at(ms, APP_ZONES[stream], rng.choice([0, 0, 1])),
            "started_ms": ms, "total_time": total, "code": rng.choice([200, 200, 200, 200, 201, 302, 304, 404, 422,
                                                                       500, 503]),
            "severity": rng.choice([1, 1, 1, 1, 0, 2, 3, 4, 5]), "request_id": self.rid(),
            "host": f"web-{rng.randrange(3)}", "ip": "10.0.0.7", "process_id": rng.randrange(100, 999),
            "lines": [[rng.choice([0, 1, 1, 2, 3]), started_at(ms, APP_ZONES[stream]), f"line {i} of the request"]
                      for i in range(rng.randrange(4))],
            "request_info": {"method": "GET", "url": f"https://shop.example.com/orders/{rng.randrange(100)}?x=1",
                             "headers": {"User-Agent": rng.choice(AGENTS), "Accept": "text/html"}},
        }
        for name in rng.sample(RESOURCES_TIME, rng.randrange(len(RESOURCES_TIME) + 1)):
            body[name] = round(total * rng.random() * 0.3, 3)
        for name in rng.sample(RESOURCES_CALLS, rng.randrange(len(RESOURCES_CALLS) + 1)):
            body[name] = rng.randrange(50)
        if rng.random() < 0.7:
            body["allocated_objects"] = rng.randrange(1, 300_000)
            body["allocated_bytes"] = rng.randrange(1, 40_000_000)
        if rng.random() < 0.1:
            body["allocated_memory"] = rng.randrange(1, 90_000_000)
        for name in RESOURCES_HEAP:
            if rng.random() < 0.5:
                body[name] = rng.randrange(100_000, 2_000_000)
        if rng.random() < 0.2:
            body["heap_growth"] = rng.choice([0, 0, 3, 120])
        if rng.random() < 0.15:
            body["exceptions"] = rng.sample(EXCEPTIONS, rng.randrange(1, 3))
        if rng.random() < 0.1:
            body["soft_exceptions"] = rng.sample(EXCEPTIONS, rng.randrange(1, 3))
        if rng.random() < 0.3:
            body["caller_id"] = rng.choice(["search-production-" + self.rid(), "admin-tool-production-abc",
                                            "mobile-app-ios-x"])
            body["caller_action"] = rng.choice(["Search#query", "Tools#run", "Foo.bar$baz"])
        if rng.random() < 0.1:
            body["sender_id"] = "worker-production-" + self.rid()
            body["sender_action"] = "Jobs::Mailer#deliver"
        if rng.random() < 0.05:
            body["other_time"] = 99999.0  # always recomputed
        if quirk:
            QUIRKS[quirk](self, body)
        return body


def _drop(*names: str) -> Any:
    def apply(g: Generator, body: dict[str, Any]) -> None:
        for name in names:
            body.pop(name, None)
    return apply


def _set(**values: Any) -> Any:
    def apply(g: Generator, body: dict[str, Any]) -> None:
        body.update(values)
    return apply


def _severity_from_lines(levels: list[Any]) -> Any:
    def apply(g: Generator, body: dict[str, Any]) -> None:
        body.pop("severity", None)
        body["lines"] = [[level, "2026-11-18T00:00:00", f"text at {level!r}"] for level in levels]
    return apply


def _long_lines(g: Generator, body: dict[str, Any]) -> None:
    body["severity"] = 3
    body["code"] = 500
    body["lines"] = [[1, "t", f"line {i}"] for i in range(10_003)]


def _long_strings(g: Generator, body: dict[str, Any]) -> None:
    body["code"] = 500
    body["lines"] = [[4, "t", "é" * 6000], [1, "t", "short"]]  # 12,000 bytes
    body["params"] = {"q": "ü" * 5001 + "x"}  # 10,003 bytes
    body["exceptions"] = ["E" * 10_500]
    body["request_info"]["url"] = "https://x.example/" + "a" * 10_100


QUIRKS: dict[str, Any] = {
    "no_code": _drop("code"), "code_null": _set(code=None), "code_text": _set(code="404"),
    "code_float": _set(code=201.9), "code_bool": _set(code=True), "code_garbage": _set(code="abc"),
    "code_zero": _set(code=0), "code_object": _set(code={"x": 1}),
    "no_severity": _severity_from_lines([1, 3, 2]), "severity_lines_high": _severity_from_lines([2, 7]),
    "severity_lines_odd": _severity_from_lines([None, "2", 1.9, True]),
    "severity_no_lines": _drop("severity", "lines"), "severity_lines_empty": _severity_from_lines([]),
    "severity_lines_not_array": _set(lines="nope"), "severity_text": _set(severity="3"),
    "severity_null": _set(severity=None), "severity_high": _set(severity=7),
    "no_total": _drop("total_time"), "total_zero": _set(total_time=0), "total_text": _set(total_time="1234.5"),
    "total_garbage": _set(total_time="slow"), "total_null": _set(total_time=None),
    "total_negative": _set(total_time=-12.5), "total_bool": _set(total_time=True),
    "resource_text": _set(db_time="25.5", db_calls="7"), "resource_garbage": _set(view_time="fast"),
    "resource_null": _set(redis_time=None), "resource_bool": _set(gc_calls=True),
    "resource_negative": _set(db_time=-3.0), "resource_object": _set(api_time={"a": 1}),
    "no_action": _drop("action"), "logjam_action": lambda g, b: (b.pop("action"), b.update(logjam_action="Jobs#run")),
    "no_page": _drop("action", "logjam_action"), "action_null": _set(action=None, logjam_action="Never#used"),
    "action_empty": _set(action=""), "action_no_hash": _set(action="Sweeper"), "action_hash_end": _set(action="Cron#"),
    "action_number": _set(action=123), "action_colon": _set(action="::Weird#x"),
    "exceptions_empty": _set(exceptions=[]), "exceptions_text": _set(exceptions="Boom"),
    "exceptions_dupes": _set(exceptions=["A::B", "A::B", "C.D"]), "exceptions_nulls": _set(exceptions=[None, "X"]),
    "exceptions_numbers": _set(exceptions=[1, "Y"]), "soft_only": _set(soft_exceptions=["Soft::One"]),
    "caller_deep": _set(caller_id="my-app-production-123", caller_action="A#b"),
    "caller_nodash": _set(caller_id="nodash", caller_action="A#b"),
    "caller_onedash": _set(caller_id="one-dash", caller_action="A#b"),
    "caller_empty_action": _set(caller_id="x-y-z", caller_action=""),
    "caller_null": _set(caller_id=None, caller_action="A#b"), "caller_number": _set(caller_id=12, caller_action="A"),
    "sender": _set(sender_id="queue-production-9", sender_action="Worker#perform"),
    "ignore_true": _set(logjam_ignore_message=True), "ignore_one": _set(logjam_ignore_message=1),
    "ignore_text": _set(logjam_ignore_message="yes"), "ignore_empty": _set(logjam_ignore_message=""),
    "ignore_false": _set(logjam_ignore_message=False), "ignore_zero": _set(logjam_ignore_message=0.0),
    "system_url": lambda g, b: b["request_info"].update(url="https://shop.example.com/_system/alive"),
    "system_path": lambda g, b: b["request_info"].update(url="/_system/ping"),
    "url_no_slash": lambda g, b: b["request_info"].update(url="https://host.only"),
    "url_null": lambda g, b: b["request_info"].update(url=None),
    "no_url": lambda g, b: b["request_info"].pop("url"), "request_info_text": _set(request_info="GET /x"),
    "ua_null": lambda g, b: b["request_info"]["headers"].update({"User-Agent": None}),
    "no_ua": lambda g, b: b["request_info"]["headers"].pop("User-Agent"),
    "heap_text": _set(heap_growth="3"), "heap_negative": _set(heap_growth=-4), "heap_fraction": _set(heap_growth=0.5),
    "memory_explicit": _set(allocated_memory=5000, allocated_objects=10, allocated_bytes=20),
    "memory_objects_only": lambda g, b: (b.pop("allocated_bytes", None), b.pop("allocated_memory", None),
                                         b.update(allocated_objects=7)),
    "memory_text": lambda g, b: (b.pop("allocated_memory", None), b.update(allocated_objects="10",
                                                                           allocated_bytes=1.5)),
    "no_request_id": _drop("request_id"), "request_id_number": _set(request_id=4242),
    "no_started_ms": _drop("started_ms"),
    "long_lines": _long_lines, "long_strings": _long_strings,
    "bare_time": lambda g, b: b.update(started_at=started_at(b["started_ms"], "Z", 2)),
}
# A message dropped before counting: started_at missing or not a time
BAD_STARTED_AT = {"no_started_at": None, "short": "2026-11-18", "garbage": "yesterday at noon", "month": "2026-13-01T00:00:00",
                  "number": 1795560600, "slashes": "2026/11/18T10:00:00+01:00", "hour": "2026-11-18T25:00:00+01:00"}


def rts_page(nav: int, marks: dict[int, int] | None = None) -> str:
    """A page's 16 Navigation Timing marks (ms since the epoch), well ordered unless `marks` says otherwise."""
    offsets = [0, 2, 5, 9, 12, 20, 25, 140, 160, 170, 400, 410, 430, 900, 905, 930]
    values = [nav + o if o or nav else 0 for o in offsets]
    for i, v in (marks or {}).items():
        values[i] = v
    return ",".join(map(str, values))


def generate(seed: int = 11, requests: int = 1500) -> Traffic:
    g = Generator(seed)
    rng = g.rng
    streams = list(APP_ZONES)
    span_ms = 40 * 60_000  # the traffic covers 40 minutes
    # requests of every stream, quirks on a third of them
    for n in range(requests):
        stream = rng.choice(streams[:4]) if n % 50 else "ghost-production"
        ms = BASE_MS + n * span_ms // requests + rng.randrange(500)
        quirk = rng.choice(sorted(QUIRKS)) if rng.random() < 0.35 else None
        body = g.request(stream, ms, quirk)
        g.add(stream, "logs." + stream.replace("-", "."), body, ms)
        if stream == "shop-production" and isinstance(body.get("request_id"), str):
            g.backend_ids.append((stream, body["request_id"], ms))
    # every quirk at least once, on shop-production
    for i, quirk in enumerate(sorted(QUIRKS)):
        ms = BASE_MS + 60_000 + i * 900
        body = g.request("shop-production", ms, quirk)
        g.add("shop-production", "logs.shop.production", body, ms)
    # dropped: bad started_at, clock drift
    for i, value in enumerate(BAD_STARTED_AT.values()):
        body = g.request("shop-preview", BASE_MS + i * 1000)
        if value is None:
            body.pop("started_at")
        else:
            body["started_at"] = value
        g.add("shop-preview", "logs.shop.preview", body, BASE_MS + i * 1000)
    body = g.request("search-production", BASE_MS)
    g.add("search-production", "logs.search.production", body, BASE_MS, created_delay_ms=3 * 86_400_000)
    # a burst above shop-production's max_inserts_per_second (4): 9 slow requests in one second
    for i in range(9):
        ms = BASE_MS + 20 * 60_000 + 7_000 + i * 100
        body = g.request("shop-production", ms)
        body.update(total_time=5000.0 + i, action="Orders#index", code=200, severity=1)
        g.add("shop-production", "logs.shop.production", body, ms)
    _frontend(g)
    _javascript(g)
    _events(g)
    _shipped(g)
    g.traffic.messages.sort(key=lambda m: (m.created_ms, m.hub))  # the order they arrive in
    return g.traffic


def _frontend(g: Generator) -> None:
    rng = g.rng
    backend = [b for b in g.backend_ids]
    rng.shuffle(backend)
    zone = APP_ZONES["shop-production"]
    for stream, rid, ms in backend[:220]:
        kind = rng.choice(["page", "page", "ajax"])
        delay = rng.choice([300, 2_000, 30_000, -20_000, 200_000, -250_000, 400_000])  # the last: too far
        at = ms + delay
        body: dict[str, Any] = {"started_at": started_at(at, zone), "started_ms": at, "v": 1,
                                "logjam_action": rng.choice(PAGES["shop-production"]),
                                "logjam_request_id": f"{stream}-{rid}"}
        if rng.random() < 0.8:
            body["user_agent"] = rng.choice(AGENTS)
        case = rng.choice(["ok"] * 6 + ["corrupt", "nav_timing", "invalid", "outlier", "zero", "request_id",
                                          "duplicate", "unknown_id", "dom"])
        if case == "request_id":
            body["request_id"] = body.pop("logjam_request_id")
        if case == "unknown_id":
            body["logjam_request_id"] = f"{stream}-{g.rid()}"
        nav = at - 1000
        if kind == "page":
            body["rts"] = {"ok": rts_page(nav), "corrupt": rng.choice(["1,2,x", rts_page(nav) + ",7", "", "1,2"]),
                           "nav_timing": rts_page(0), "invalid": rts_page(nav, {10: 0}),
                           "outlier": rts_page(nav, {15: nav + 70_000}), "zero": rts_page(nav, {15: 0}),
                           "dom": rts_page(0, {1: nav, 6: nav + 30, 7: nav + 200, 8: nav + 250, 10: nav + 500,
                                               13: nav + 900, 15: nav + 1000})}.get(case, rts_page(nav))
            if case == "dom" or rng.random() < 0.5:
                body.update(html_nodes=rng.randrange(100, 900), script_nodes=rng.randrange(1, 40),
                            style_nodes=rng.randrange(1, 30))
            topic = "frontend.page"  # fhttpd sends frontend.page.<app>.<env>, which the listener refuses
        else:
            start = nav
            body["rts"] = {"ok": f"{start},{start + rng.randrange(1, 3000)}", "corrupt": f"{start}",
                           "invalid": f"{start},{start - 5}", "outlier": f"{start},{start + 61_000}",
                           "zero": f"{start},{start}"}.get(case, f"{start},{start + 120}")
            topic = "frontend.ajax"
        g.add("shop-production", topic, body, at)
        if case == "duplicate":
            g.add("shop-production", topic, dict(body, started_ms=at + 5), at + 5)
    # pages whose marks are all 0 (nav_timing, decided after the match), shortly after their backend request:
    # the random cases above may miss it
    for stream, rid, ms in backend[220:226]:
        at = ms + 300
        g.add("shop-production", "frontend.page",
              {"started_at": started_at(at, zone), "logjam_action": "Orders#show", "rts": ",".join(["0"] * 16),
               "logjam_request_id": f"{stream}-{rid}", "user_agent": AGENTS[2]}, at)
    # frontend messages for a backend-only page, and without rts
    for _ in range(3):
        health = next(b for b in g.traffic.messages if b.topic.startswith("logs.shop.production")
                      and b.body.get("action") == "Health#ping" and isinstance(b.body.get("request_id"), str))
        at = health.body["started_ms"] + 1000
        g.add("shop-production", "frontend.page",
              {"started_at": started_at(at, zone), "logjam_action": "Health#ping", "rts": rts_page(at - 900),
               "logjam_request_id": f"shop-production-{health.body['request_id']}", "user_agent": AGENTS[0]}, at)
    g.add("shop-production", "frontend.ajax",
          {"started_at": started_at(BASE_MS, zone), "logjam_action": "Orders#index", "user_agent": AGENTS[1],
           "logjam_request_id": "shop-production-nothing"}, BASE_MS)


def _javascript(g: Generator) -> None:
    rng = g.rng
    for i in range(60):
        stream = rng.choice(["shop-production", "shop-preview"])
        ms = BASE_MS + rng.randrange(40 * 60_000)
        body: dict[str, Any] = {"started_at": started_at(ms, APP_ZONES[stream]), "user_agent": rng.choice(AGENTS),
                                "logjam_request_id": f"{stream}-{g.rid()}", "url": "https://shop.example.com/x"}
        choice = i % 8
        if choice < 4:
            body.update(logjam_action=rng.choice(PAGES[stream]), description=rng.choice(
                ["TypeError: x is undefined", "ReferenceError: $ is not defined", "a.b failed"]))
        elif choice == 4:
            body["description"] = "no action given"
        elif choice == 5:
            body.update(logjam_action="Widget", description="TypeError: y")  # Widget#unknown_method
        elif choice == 6:
            body.update(logjam_action="Orders#index")  # unknown_exception
        else:
            body.update(logjam_action="Orders#index", description="")  # dropped
        g.add(stream, "javascript." + stream.replace("-", "."), body, ms)


def _events(g: Generator) -> None:
    for i in range(6):
        stream = ["shop-production", "search-production"][i % 2]
        ms = BASE_MS + i * 300_000
        body = {"started_at": started_at(ms, APP_ZONES[stream]), "label": f"deploy {i}", "host": f"web-{i}",
                "cluster": "eu", "uuid": g.rid(), "extra": {"k": i}}
        g.add(stream, "events." + stream.replace("-", "."), body, ms)
    g.add("shop-production", "mobile", {"started_at": started_at(BASE_MS, "Z")}, BASE_MS)


def _shipped(g: Generator) -> None:
    """A shipper's logjam requests (Forward events tagged logs.<app>.<env>), and one on a tag of no stream."""
    for i in range(12):
        ms = BASE_MS + i * 120_000
        body = g.request("search-production", ms)
        g.add("search-production", "logs.search.production", body, ms, shipped=True)
    body = g.request("search-production", BASE_MS)
    g.add("", "logs.nostream", body, BASE_MS, shipped=True)


async def _store(dirs: list[str], traffic: Traffic) -> None:
    decoder = MessageDecoder(LogjamConfig())
    stores = [await SegmentStore.open(StoreConfig(data_dir=d, fsync="never")) for d in dirs]
    try:
        for sequence, m in enumerate(traffic.messages, 1):
            m.hub_id = ensure_hub_identity(dirs[m.hub])
            if m.shipped:
                seconds, ms = divmod(m.body.get("started_ms", m.created_ms), 1000)
                m.segment, m.time_ns = "forward", seconds * 1_000_000_000 + ms * 1_000_000
                body = encode_batch(m.tag, [(seconds, ms * 1_000_000, m.body)],
                                    {"size": 1, "source": "forward", "peer": "127.0.0.1:40000"})
            else:
                frames = [m.stream.encode(), m.topic.encode(), orjson.dumps(m.body),
                          lj.Meta(lj.NO_COMPRESSION, 1, m.created_ms, sequence).pack()]
                message = lj.read_pull_message(frames)
                assert isinstance(message, lj.DataMessage)
                body = decoder.accept(message, "127.0.0.1", "pull").stored
                seconds, nanos = lj.event_time_of(m.body, m.created_ms)
                m.segment, m.time_ns = "logjam", seconds * 1_000_000_000 + nanos
            result = await stores[m.hub].append(m.segment, [body])
            m.offset = result.offset
    finally:
        for store in stores:
            await store.close()


def store(dirs: list[str], traffic: Traffic) -> None:
    """Store every message in its hub's data directory, in order, and note where each one is."""
    asyncio.run(_store(dirs, traffic))
