"""The pipeline's HTML report: one self-contained file, charts as inline SVG, no script, no network."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 760, 220
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 16, 16, 36
COLORS = ["#2563eb", "#f59e0b", "#dc2626", "#059669", "#7c3aed"]

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#111;max-width:1000px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child{text-align:left}.legend span{margin-right:14px}.empty{color:#888}
svg text{font:11px system-ui,sans-serif;fill:#444}
"""


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return str(value)


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / (count - 1)
    return [lo + i * step for i in range(count)]


def line_chart(title: str, xs: Sequence[dt.datetime], series: Mapping[str, Sequence[float | None]], unit: str) -> str:
    """An SVG line chart of several series over minutes."""
    points = [v for values in series.values() for v in values if v is not None]
    if not xs or not points:
        return f'<h2>{html.escape(title)}</h2><p class="empty">no data</p>'
    t0, t1 = xs[0].timestamp(), xs[-1].timestamp()
    span = max(t1 - t0, 60.0)
    top = max(points) * 1.1 or 1.0
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def x(t: dt.datetime) -> float:
        return MARGIN_LEFT + (t.timestamp() - t0) / span * plot_w

    def y(v: float) -> float:
        return MARGIN_TOP + plot_h - v / top * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{html.escape(title)}">']
    for v in _ticks(0.0, top):
        parts.append(f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - MARGIN_RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#eee"/><text x="{MARGIN_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
                     f'{_fmt(v, 1 if top < 10 else 0)}</text>')
    for t in _ticks(t0, t0 + span, 4):
        when = dt.datetime.fromtimestamp(t, dt.UTC)
        xpos = MARGIN_LEFT + (t - t0) / span * plot_w
        parts.append(f'<text x="{xpos:.1f}" y="{HEIGHT - 12}" text-anchor="middle">{when:%H:%M}</text>')
    for i, (name, values) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(xs, values, strict=True) if v is not None)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{coords}">'
                     f'<title>{html.escape(name)}</title></polyline>')
        if len(xs) == 1:
            parts.append(f'<circle cx="{x(xs[0]):.1f}" cy="{y(values[0] or 0):.1f}" r="3" fill="{color}"/>')
    parts.append(f'<text x="4" y="{MARGIN_TOP + 4}" transform="rotate(0)">{html.escape(unit)}</text></svg>')
    legend = "".join(f'<span style="color:{COLORS[i % len(COLORS)]}">&#9632; {html.escape(n)}</span>'
                     for i, n in enumerate(series))
    day = f"{xs[0]:%Y-%m-%d} UTC" if xs else ""
    return (f'<h2>{html.escape(title)}</h2><div class="legend">{legend} <small>{day}</small></div>'
            + "".join(parts))


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], unit: str) -> str:
    """Horizontal SVG bars, longest first as given."""
    if not labels:
        return f'<h2>{html.escape(title)}</h2><p class="empty">no data</p>'
    row_h, label_w = 20, 300
    height = row_h * len(labels) + 24
    top = max(values) or 1.0
    bar_w = WIDTH - label_w - 80
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}">']
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = 8 + i * row_h
        w = value / top * bar_w
        parts.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end">{html.escape(label[:48])}</text>'
                     f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" fill="{COLORS[0]}"/>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 13}">{_fmt(value)} {html.escape(unit)}</text>')
    parts.append("</svg>")
    return f"<h2>{html.escape(title)}</h2>" + "".join(parts)


def table(title: str, columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return f'<h2>{html.escape(title)}</h2><p class="empty">no data</p>'
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(row.get(key), 3 if key == 'apdex' else 1))}</td>" for key, _ in columns) + "</tr>"
                   for row in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def render(data: dict[str, list[dict[str, Any]]], title: str, written: dict[str, int] | None = None) -> str:
    minutes = data.get("minutes", [])
    xs = [m["minute"] for m in minutes]
    rate = [m["count"] / 60.0 for m in minutes]
    error_rate = {
        "5xx %": [100.0 * m["code_5xx"] / m["count"] if m["count"] else None for m in minutes],
        "4xx %": [100.0 * m["code_4xx"] / m["count"] if m["count"] else None for m in minutes],
        "with exceptions %": [100.0 * m["with_exceptions"] / m["count"] if m["count"] else None for m in minutes],
    }
    actions = data.get("actions", [])
    untimed = sum(t.get("untimed") or 0 for t in data.get("traffic", []))
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        "<p>Generated " + dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        + (". Rows read: " + html.escape(", ".join(f"{k} {v:,}" for k, v in written.items())) if written else "")
        + ". Percentiles per minute are approximate (rank error at most 0.01% of the minute's count); "
          "where several apps share a minute the chart shows the highest.</p>",
        (f"<p>{untimed:,} event{'s' if untimed != 1 else ''} without a time (opaque events, e.g. from "
         "segment-protocol clients) left out of the charts; the traffic table counts them, with no minute.</p>"
         if untimed else ""),
        line_chart("Request rate", xs, {"requests/s": rate}, "req/s"),
        line_chart("Latency percentiles (total_time)", xs,
                   {"p50": [m["p50"] for m in minutes], "p95": [m["p95"] for m in minutes],
                    "p99": [m["p99"] for m in minutes]}, "ms"),
        line_chart("Error rates", xs, error_rate, "%"),
        bar_chart("Slowest actions (mean total_time)", [f"{a['action']} ({a['app_env']})" for a in actions[:15]],
                  [float(a["mean"] or 0.0) for a in actions[:15]], "ms"),
        table("Actions", [("action", "action"), ("app_env", "app-env"), ("count", "requests"), ("mean", "mean ms"),
                          ("worst_minute_p95", "worst minute p95 ms"), ("max", "max ms"), ("apdex", "apdex"),
                          ("code_5xx", "5xx")], actions),
        table("Top exceptions", [("exception", "exception"), ("count", "requests")], data.get("exceptions", [])),
        table("Traffic per segment and tag", [("segment", "segment"), ("tag", "tag"), ("events", "events"),
                                              ("bytes", "bytes"), ("forward", "forward"),
                                              ("lumberjack", "lumberjack"), ("logjam", "logjam"),
                                              ("opaque", "opaque"), ("untimed", "without time"),
                                              ("first", "first minute"),
                                              ("last", "last minute")], data.get("traffic", [])),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html.escape(title)
            + f"</title><style>{CSS}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n")


def write_report(path: Path, data: dict[str, list[dict[str, Any]]], title: str,
                 written: dict[str, int] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(render(data, title, written), encoding="utf-8")
    tmp.replace(path)
