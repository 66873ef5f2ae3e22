"""monitoring/: the alert rules pass `promtool check rules` and their unit tests (`promtool test rules`: each
alert fires on a synthetic series and stays quiet without it), and a real Prometheus scraping a hub under
load on loopback has logport's series, loads every rule, and evaluates every dashboard query."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import msgpack

from logport.batch import pack_entry
from tests.chaos.harness import HubProcess, connect_raw
from tests.conftest import REPO, free_port

MONITORING = REPO / "monitoring"
RULES = MONITORING / "logport.rules.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"


def promtool() -> str:
    tool = shutil.which("promtool")
    assert tool, "promtool missing: `make test` installs Debian's prometheus package"
    return tool


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 11 rules found" in done.stdout


def test_every_alert_fires_on_its_series_and_stays_quiet_without() -> None:
    done = subprocess.run([promtool(), "test", "rules", "logport.rules.test.yml"], capture_output=True, text=True,
                          cwd=MONITORING)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    alerts = set(re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "logport.rules.test.yml").read_text()))
    assert alerts == tested and len(alerts) == 11, alerts ^ tested


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(queries) >= 17
    return queries


def api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def test_a_real_prometheus_scrapes_a_hub_under_load(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus missing: `make test` installs Debian's prometheus package"
    import asyncio

    hub = HubProcess(tmp_path / "hub", ("forward", "segment"))
    asyncio.run(hub.start())
    stop = threading.Event()

    def load() -> None:
        with connect_raw(hub.ports["forward"]) as s:
            n = 0
            while not stop.is_set():
                n += 1
                entries = b"".join(pack_entry(1700000000, 0, {"n": n, "i": i}) for i in range(50))
                s.sendall(msgpack.packb(["prom.test", entries, {"chunk": f"c{n}"}]))
                s.recv(100)

    sender = threading.Thread(target=load, daemon=True)
    sender.start()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: logport
    static_configs:
      - targets: ["127.0.0.1:{hub.ports['metrics']}"]
""")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        appends: list[Any] = []
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                appends = api(port, "query", query='rate(logport_store_appends_total{segment="forward"}[5s]) > 0')[
                    "result"]
            except OSError:
                appends = []
            if appends:
                break
            time.sleep(0.5)
        assert appends, f"no logport series in Prometheus:\n{(tmp_path / 'prometheus.log').read_text()[-3000:]}"
        (up,) = api(port, "query", query='up{job="logport"}')["result"]
        assert up["value"][1] == "1"
        (ready,) = api(port, "query", query="logport_ready")["result"]
        assert ready["value"][1] == "1"
        listeners = {r["metric"]["listener"] for r in api(port, "query", query="logport_listener_up == 1")["result"]}
        assert listeners == {"forward", "segment"}
        forward = api(port, "query", query="sum(logport_forward_events_total)")["result"]
        assert float(forward[0]["value"][1]) > 0
        rules = [r for g in api(port, "rules")["groups"] for r in g["rules"]]
        assert len(rules) == 11 and all(r["health"] == "ok" for r in rules), rules
        firing = [r["name"] for r in rules if r["state"] != "inactive"]
        assert not firing, firing  # a healthy hub under load raises nothing
        for query in dashboard_queries():  # every panel's query evaluates (names and syntax right)
            api(port, "query", query=query)
        names = set(api(port, "label/__name__/values"))
        used = {m for q in dashboard_queries() for m in re.findall(r"logport_[a-z0-9_]+", q)}
        # every metric a panel reads is one a hub exports (the per-protocol ones of listeners that are off, and
        # those that appear only once they count something, are checked against the hub's source instead)
        missing = {m for m in used - names if m.removesuffix("_total").removesuffix("_bucket")
                   not in _exported_names()}
        assert not missing, missing
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
        log.close()
        sender.join(5)
        hub.stop()


def _exported_names() -> set[str]:
    names = set()
    for path in (REPO / "src" / "logport").rglob("*.py"):
        names |= set(re.findall(r'"(logport_[a-z0-9_]+)"', path.read_text()))
    return names
