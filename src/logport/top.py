"""`logport top`: a live terminal view of a running hub (as `vector top`), read from its metrics endpoint.

Every `interval` seconds it scrapes /metrics and /ready and shows rates per listener, segment and output,
fsync latency (p50 and p99 of the last interval, from the histogram's buckets), output lag, connections
and refusals. `q` quits. The figures are computed by `Snapshot.diff`, which the display only prints.
"""

from __future__ import annotations

import curses
import json
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# listener -> (counter of its stored events, what it counts)
LISTENER_EVENTS = {
    "forward": "logport_forward_events_total",
    "lumberjack": "logport_lumberjack_events_total",
    "segment": "logport_segment_append_blocks_total",
    "logjam": "logport_logjam_messages_stored_total",
}
LISTENER_UNITS = {"forward": "events", "lumberjack": "events", "segment": "blocks", "logjam": "messages"}


@dataclass
class Snapshot:
    """One scrape: every sample by (name, sorted labels), and when it was taken."""

    taken: float
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, taken: float) -> Snapshot:
        snap = cls(taken)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                snap.samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return snap

    def total(self, name: str, **match: str) -> float:
        return sum(v for (n, labels), v in self.samples.items()
                   if n == name and all((k, val) in labels for k, val in match.items()))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (n, labels), v in self.samples.items():
            if n == name:
                key = dict(labels).get(label)
                if key is not None:
                    out[key] += v
        return dict(out)

    def has(self, name: str) -> bool:
        return any(n == name for n, _ in self.samples)


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The `q` quantile of cumulative (upper bound, count) buckets, interpolated as Prometheus does."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            width = count - below
            return lower + (bound - lower) * ((rank - below) / width if width else 1.0)
        lower, below = bound, count
    return lower


@dataclass
class View:
    """What one frame shows: rows per section, computed from two snapshots."""

    ready: str
    listeners: list[tuple[str, str, str, str, str]]  # name, rate, connections, refused, unit
    segments: list[tuple[str, str, str]]  # name, appends/s, MB/s
    outputs: list[tuple[str, str, str, str, str]]  # name, events/s, lag bytes, lag events, last success
    fsync: str


def _rate(new: float, old: float, seconds: float) -> float:
    return max(0.0, new - old) / seconds if seconds > 0 else 0.0


def build_view(old: Snapshot, new: Snapshot, ready: str) -> View:
    dt = new.taken - old.taken
    listeners = []
    up = new.by_label("logport_listener_up", "listener")
    conns = new.by_label("logport_listener_connections", "listener")
    refused_new = new.by_label("logport_listener_refused_connections_total", "listener")
    refused_old = old.by_label("logport_listener_refused_connections_total", "listener")
    for name, metric in LISTENER_EVENTS.items():
        if name not in up and not new.has(metric):
            continue
        rate = _rate(new.total(metric), old.total(metric), dt)
        refused = refused_new.get(name, 0.0)
        refused_rate = _rate(refused, refused_old.get(name, 0.0), dt)
        state = "" if up.get(name, 1.0) else " (down)"
        listeners.append((name + state, f"{rate:,.0f}/s", f"{conns.get(name, 0):.0f}",
                          f"{refused:.0f} ({refused_rate:.0f}/s)", LISTENER_UNITS[name]))
    segments = []
    appends_new = new.by_label("logport_store_appends_total", "segment")
    appends_old = old.by_label("logport_store_appends_total", "segment")
    bytes_new = new.by_label("logport_store_append_bytes_total", "segment")
    bytes_old = old.by_label("logport_store_append_bytes_total", "segment")
    for name in sorted(appends_new):
        segments.append((name, f"{_rate(appends_new[name], appends_old.get(name, 0.0), dt):,.0f}/s",
                         f"{_rate(bytes_new.get(name, 0.0), bytes_old.get(name, 0.0), dt) / 1e6:,.2f}"))
    outputs = []
    lag_bytes = new.by_label("logport_output_lag_bytes", "output")
    lag_events = new.by_label("logport_output_lag_events", "output")
    last = new.by_label("logport_output_last_success_timestamp_seconds", "output")
    sent_new = {**new.by_label("logport_forward_output_events_total", "output"),
                **new.by_label("logport_lumberjack_output_events_total", "output")}
    sent_old = {**old.by_label("logport_forward_output_events_total", "output"),
                **old.by_label("logport_lumberjack_output_events_total", "output")}
    now = time.time()
    for name in sorted(lag_bytes):
        short = name.removeprefix("lumberjack.")
        sent = _rate(sent_new.get(name, sent_new.get(short, 0.0)), sent_old.get(name, sent_old.get(short, 0.0)), dt)
        stamp = last.get(name, 0.0)
        outputs.append((name, f"{sent:,.0f}/s", f"{lag_bytes[name]:,.0f}", f"{lag_events.get(name, 0):,.0f}",
                        f"{now - stamp:,.0f} s ago" if stamp else "never"))
    buckets = []
    for (n, labels), v in new.samples.items():
        if n == "logport_store_fsync_seconds_bucket":
            le = float(dict(labels)["le"])
            buckets.append((le, v - old.samples.get((n, labels), 0.0)))
    p50, p99 = quantile(buckets, 0.5), quantile(buckets, 0.99)
    fsyncs = _rate(new.total("logport_store_fsyncs_total"), old.total("logport_store_fsyncs_total"), dt)
    fsync = (f"{fsyncs:,.0f}/s  p50 {p50 * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms" if p50 is not None
             and p99 is not None else f"{fsyncs:,.0f}/s")
    return View(ready, listeners, segments, outputs, fsync)


def render(view: View, source: str, width: int) -> list[str]:
    lines = [f"logport top - {source} - {view.ready} - q quits".ljust(width)[:width], ""]

    def table(title: str, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
        cols = [header, *rows]
        widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
        lines.append(title)
        for row in cols:
            lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                          for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        lines.append("")

    table("LISTENERS", ("listener", "rate", "connections", "refused", "of"), view.listeners)
    table("SEGMENTS", ("segment", "appends", "MB/s"), view.segments)
    if view.outputs:
        table("OUTPUTS", ("output", "sent", "lag bytes", "lag events", "last success"), view.outputs)
    lines.append(f"FSYNC  {view.fsync}")
    return [line[:width] for line in lines]


def fetch(base: str, timeout: float = 5.0) -> tuple[str, str]:
    """(/metrics text, a one-word readiness with its reasons)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=timeout) as r:
        text = r.read().decode()
    try:
        with urllib.request.urlopen(f"{base}/ready", timeout=timeout) as r:
            ready = "READY"
    except urllib.error.HTTPError as e:
        try:
            problems = json.loads(e.read()).get("problems", [])
            reasons = "; ".join(" ".join(f"{v}" for v in p.values()) for p in problems)
        except ValueError:
            reasons = str(e.code)
        ready = f"NOT READY: {reasons}"
    return text, ready


def run(stdscr: Any, base: str, interval: float) -> int:
    curses.curs_set(0)
    stdscr.timeout(100)
    text, ready = fetch(base)
    old = Snapshot.parse(text, time.monotonic())
    lines = [f"logport top - {base} - {ready} - q quits", "", "measuring..."]
    next_at = time.monotonic() + interval
    while True:
        height, width = stdscr.getmaxyx()
        stdscr.erase()
        for y, line in enumerate(lines[: height - 1]):
            stdscr.addnstr(y, 0, line, width - 1)
        stdscr.refresh()
        key = stdscr.getch()
        if key in (ord("q"), ord("Q")):
            return 0
        if time.monotonic() >= next_at:
            next_at = time.monotonic() + interval
            try:
                text, ready = fetch(base)
            except OSError as e:
                lines = [f"logport top - {base} - UNREACHABLE: {e} - q quits"]
                continue
            new = Snapshot.parse(text, time.monotonic())
            lines = render(build_view(old, new, ready), base, width - 1)
            old = new


def main(address: str, interval: float) -> int:
    base = address if address.startswith("http") else f"http://{address}"
    try:
        fetch(base)
    except OSError as e:
        raise SystemExit(f"logport top: cannot read {base}/metrics: {e}") from None
    result: int = curses.wrapper(run, base, interval)
    return result
