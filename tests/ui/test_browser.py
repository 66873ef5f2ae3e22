"""`logport ui` in headless Chromium (Debian's, driven by Playwright): every view loads without a console error,
a click path from the overview reaches a slow request's log lines, a brushed minute range narrows the ranking to
the tables' counts, an event sent to a hub shows in the live view within 2 s, and a token guards other addresses.

One lake, one hub, one `logport ui` and one browser for the whole session; a failing test leaves failure.png in
its tmp_path.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pyarrow.parquet as pq
import pytest

from logport.lake.log import LakeLog
from tests.conftest import free_port

# the first test's setup runs `logport pipeline batch` over the stored traffic (a JVM of its own and every table
# builder): 228 s on a quiet 2-core machine, near the suite's 300 s default
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--no-proxy-server"]
LOGPORT = [sys.executable, "-m", "logport.cli"]
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with NO_PROXY.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0,
             headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited {proc.returncode}: {log.read_text()}")
        try:
            if get(url, headers)[0] < 500:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout} s: {log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def e2e_lake(tmp_path_factory: pytest.TempPathFactory, uilake: Any, generated: Any) -> Path:
    """The lake of the generated traffic, written by the pipeline (or, before its table builders are in this
    checkout, by the fixture writer: bench/_uilake.py build_lake)."""
    root = tmp_path_factory.mktemp("e2e")
    how = uilake.build_lake(root / "lake", root / "data", generated)
    print(f"e2e lake written by the {how}")
    return root / "lake"


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """A hub with its segment and logjam listeners, and a first logjam message (so its segment exists)."""
    root = tmp_path_factory.mktemp("hub")
    ports = {"segment": free_port(), "router": free_port(), "pull": free_port(), "pub": free_port()}
    config = root / "hub.toml"
    config.write_text(f"""[metrics]\nenabled = false\n[forward]\nenabled = false\n[lumberjack]\nenabled = false
[segment]\nport = {ports['segment']}\n[logjam]\nrouter_port = {ports['router']}\npull_port = {ports['pull']}
pub_port = {ports['pub']}\n""")
    log = root / "hub.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*LOGPORT, "serve", "--config", str(config), "--data-dir", str(root / "data")],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        send_logjam(ports["router"], {"action": "Warmup#first", "code": 200, "total_time": 1.0})
        yield ports
    finally:
        stop(proc)


def send_logjam(router: int, record: dict[str, Any]) -> None:
    subprocess.run([*LOGPORT, "send", "logjam", "--server", f"tcp://127.0.0.1:{router}", "--sync", "--app-env",
                    "live-production", "--topic", "logs.live.production", "--timeout", "30"],
                   input=json.dumps(record).encode() + b"\n", check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def ui(tmp_path_factory: pytest.TempPathFactory, e2e_lake: Path, hub: dict[str, int]) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("ui") / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*LOGPORT, "ui", "--lake", str(e2e_lake), "--port", str(port), "--server",
                                 f"127.0.0.1:{hub['segment']}"], stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/api/meta", proc, log)
        yield base
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One browser for the browser tests (all in this module). Not for the session: while Playwright's sync API
    is open, its event loop runs in this thread, and later tests' asyncio.run() would refuse to start."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A page that records console errors and uncaught exceptions (page.problems), and leaves a screenshot in
    tmp_path when its test fails."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.problems = []
    page.on("console", lambda m: page.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
        print(f"screenshot: {tmp_path / 'failure.png'}")
    context.close()


def loaded(page: Any) -> None:
    """Wait until the view is drawn, and fail on its error message."""
    page.wait_for_function("!document.querySelector('main .loading')", timeout=20_000)
    error = page.locator("#error")
    assert error.count() == 0, error.inner_text()


def first_slow_request(base: str) -> dict[str, Any]:
    status, body = get(base + "/api/requests?app=shop&env=production&reason=slow&limit=1")
    assert status == 200, body
    return json.loads(body)["rows"][0]  # type: ignore[no-any-return]


def test_every_view_loads_without_a_console_error(ui: str, page: Any) -> None:
    slow = first_slow_request(ui)
    stream = "app=shop&env=production"
    views = ["/", f"/dashboard?{stream}", f"/actions?{stream}", f"/actions?{stream}&group=module&sort=avg",
             f"/action?{stream}&page=all_pages", f"/action?{stream}&page={slow['page'].replace('#', '%23')}",
             f"/requests?{stream}&reason=slow", f"/request?{stream}&date={slow['date']}&id={slow['id']}",
             f"/exceptions?{stream}", f"/js_errors?{stream}", f"/frontend?{stream}", f"/notifications?{stream}",
             f"/history?{stream}", f"/dashboard?{stream}&from=2026-11-20&to=2026-11-21", "/logs", "/live"]
    for view in views:
        page.goto(ui + view)
        loaded(page)
        assert page.locator("h1").count() >= 1, view
        assert page.problems == [], f"{view}: {page.problems}"
    status, _ = get(ui + "/openapi.json")
    assert status == 200


def test_click_path_from_the_overview_to_a_slow_requests_log_lines(ui: str, page: Any) -> None:
    page.goto(ui + "/")
    loaded(page)
    page.click('#overview tr[data-stream="shop-production"] a')
    page.wait_for_url("**/dashboard?*")
    loaded(page)
    page.click("#ranking tbody tr:first-child a.page")  # the action with the most time spent
    page.wait_for_url("**/action?*")
    loaded(page)
    page.click('a[data-reason="slow"]')
    page.wait_for_url("**/requests?*")
    loaded(page)
    page.click("#requests tbody tr:first-child a.request")
    page.wait_for_url("**/request?*")
    loaded(page)
    # started_at as the agent sent it (shop-production's producers are at +01:00), the UTC instant beside it
    title = page.locator("h1").inner_text()
    assert "+01:00" in title and title.endswith(" UTC"), title
    lines = page.locator("#log-lines .line")
    assert lines.count() >= 2
    assert "Completed" in lines.last.inner_text() or "went wrong" in lines.last.inner_text()
    assert page.problems == []


def counts_from_tables(lake: Path, app: str, env: str, start: str, end: str) -> tuple[dict[str, int],
                                                                                      dict[str, float]]:
    """Requests and time spent per action of a minute range, summed straight from the committed Parquet files."""
    d0, m0 = start[:10], int(start[11:13]) * 60 + int(start[14:16])
    d1, m1 = end[:10], int(end[11:13]) * 60 + int(end[14:16])
    counts: dict[str, int] = defaultdict(int)
    spent: dict[str, float] = defaultdict(float)
    for path in LakeLog(lake).files("minutes"):
        date = path.parent.name.removeprefix("date=")
        for row in pq.read_table(path, columns=["app", "env", "minute", "scope", "page", "count",
                                                "total_time"]).to_pylist():
            if (row["app"], row["env"], row["scope"]) == (app, env, "action") and \
                    (d0, m0) <= (date, row["minute"]) < (d1, m1):
                counts[row["page"]] += row["count"]
                spent[row["page"]] += row["total_time"] or 0.0
    return counts, spent


def test_a_brushed_minute_range_narrows_the_ranking(ui: str, page: Any, e2e_lake: Path) -> None:
    page.goto(ui + "/dashboard?app=shop&env=production&date=2026-11-21")
    loaded(page)
    day_total = sum(int(c) for c in page.locator("#ranking [data-count]").evaluate_all(
        "els => els.map(e => e.dataset.count)"))
    chart = page.locator("#chart-requests").bounding_box()
    y = chart["y"] + chart["height"] / 2
    left, width = chart["x"] + 56, chart["width"] - 112  # the grid's margins (two value axes)
    page.mouse.move(left + 0.40 * width, y)
    page.mouse.down()
    page.mouse.move(left + 0.55 * width, y, steps=8)
    page.mouse.up()
    page.wait_for_url("**from=*", timeout=10_000)
    loaded(page)
    query = parse_qs(urlparse(page.url).query)
    start, end = query["from"][0], query["to"][0]
    assert start.startswith("2026-11-21T") and end > start
    counts, spent = counts_from_tables(e2e_lake, "shop", "production", start, end)
    shown = page.locator("#ranking tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.page, Number(r.querySelector('[data-count]').dataset.count)])")
    ranked = sorted(counts, key=lambda p: (-spent[p], p))[: len(shown)]
    assert [p for p, _ in shown] == ranked
    assert {p: n for p, n in shown} == {p: counts[p] for p in ranked}
    assert sum(n for _, n in shown) < day_total
    assert page.problems == []


def test_an_event_sent_to_a_hub_shows_in_the_live_view_within_2s(ui: str, page: Any, hub: dict[str, int]) -> None:
    page.goto(ui + "/live")
    page.wait_for_function("document.body.dataset.live === 'open'", timeout=20_000)
    page.wait_for_function("document.querySelector('#live-state').textContent.includes('following')",
                           timeout=20_000)
    request_id = uuid.uuid4().hex
    send_logjam(hub["router"], {"action": "Live#check", "code": 500, "total_time": 12.5, "severity": 3,
                                "request_id": request_id})
    sent = time.monotonic()
    row = page.wait_for_selector(f'#live tr[data-request-id="{request_id}"]', timeout=2_000)
    assert time.monotonic() - sent < 2.0
    assert "Live#check" in row.inner_text() and "error" in (row.get_attribute("class") or "")
    assert page.problems == []


def test_another_address_needs_the_token(e2e_lake: Path, tmp_path: Path, browser: Any) -> None:
    refused = subprocess.run([*LOGPORT, "ui", "--lake", str(e2e_lake), "--bind", "0.0.0.0", "--port", "0"],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "LOGPORT_UI_TOKEN": ""})
    assert refused.returncode == 2
    assert "not loopback: give --token" in refused.stderr and "Traceback" not in refused.stderr
    port = free_port()
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*LOGPORT, "ui", "--lake", str(e2e_lake), "--bind", "0.0.0.0", "--port", str(port),
                                 "--token", "s3cret"], stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/api/meta", proc, log)
        basic = "Basic " + base64.b64encode(b"me:s3cret").decode()
        for path in ("/", "/api/meta", "/api/overview", "/static/app.js", "/api/live/events"):
            assert get(base + path)[0] == 401, path
            assert get(base + path, {"Authorization": "Bearer wrong"})[0] == 401, path
        assert get(base + "/api/overview", {"Authorization": "Bearer s3cret"})[0] == 200
        assert get(base + "/api/overview", {"Authorization": basic})[0] == 200
        page = browser.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(base + "/?token=s3cret")  # sets the cookie, then the page and its API calls carry it
        loaded(page)
        assert page.url == base + "/" and problems == []
        page.close()
    finally:
        stop(proc)
