"""The static report: one self-contained HTML file exported from the app's views (the overview, then a dashboard
per app-env: series with dates on the time axis and gaps as gaps, percentiles from merged sketches, actions ranked
by time spent, tables that say when they are cut), drawn by the same script with ECharts inlined. No network."""

from __future__ import annotations

import datetime as dt
import html
import os
from pathlib import Path
from typing import Any

import orjson

from logport.errors import LogportError
from logport.ui.app import ECHARTS, STATIC, _default
from logport.ui.lake import LakeReader
from logport.ui.timerange import TimeRange
from logport.ui.views import Stream, Views

MAX_DAYS = 31  # the report covers the lake's last days up to this many


def report_data(lake_dir: str | Path) -> dict[str, Any]:
    """What the report shows: the overview and each app-env's dashboard over the lake's last days."""
    lake = LakeReader(lake_dir)
    try:
        views = Views(lake)
        meta = views.meta()
        dates = meta["dates"]
        if not dates:
            return {"meta": meta, "overview": {"range": {}, "streams": [], "logs": False}, "sections": []}
        first = dates[max(0, len(dates) - MAX_DAYS)]
        r = TimeRange.parse(None, first, dates[-1], None)
        overview = views.overview(r)
        sections = [views.dashboard(Stream(s["app"], s["env"]), r) for s in overview["streams"]]
        return {"meta": meta, "overview": overview, "sections": sections}
    finally:
        lake.close()


def write_report(lake_dir: str | Path, report_path: str | Path) -> Path:
    """Write the report of a lake (written to a temporary name, then renamed)."""
    if not ECHARTS.exists():
        raise LogportError(f"{ECHARTS} is missing: the charts library is copied there at build time")
    data = report_data(lake_dir)
    data["written"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    data["lake"] = str(lake_dir)
    # "</" inside a script would end it; JSON allows "<\/"
    blob = orjson.dumps(data, default=_default, option=orjson.OPT_NON_STR_KEYS).decode().replace("</", "<\\/")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>logport report · {html.escape(str(lake_dir))}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>{(STATIC / "app.css").read_text()}</style></head>
<body data-view="report"><header id="top"></header><main id="main"></main>
<script>{ECHARTS.read_text()}</script>
<script>window.LOGPORT_REPORT = {blob};</script>
<script>{(STATIC / "app.js").read_text()}</script></body></html>"""
    path = Path(report_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page)
    os.replace(tmp, path)
    return path
