"""README's screenshots of `logport ui` (`make screenshots`): a lake of generated traffic, the app on a free port,
Debian's chromium (Playwright) on the dashboard and on a slow request's page, PNGs written to --out."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _uilake

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--no-proxy-server"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="docs/img")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with tempfile.TemporaryDirectory() as tmp:
        requests = _uilake.generate_requests(["shop-production", "search-production"], ["2026-11-20", "2026-11-21"],
                                             4000)
        _uilake.build_lake(Path(tmp) / "lake", Path(tmp) / "data", requests)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ui = subprocess.Popen([sys.executable, "-m", "logport.cli", "ui", "--lake", str(Path(tmp) / "lake"),
                               "--port", str(port)])
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    opener.open(base + "/api/meta", timeout=5)
                    break
                except OSError:
                    time.sleep(0.2)
            slow = json.loads(opener.open(base + "/api/requests?app=shop&env=production&reason=slow&limit=1")
                              .read())["rows"][0]
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                for name, path in (("ui-dashboard.png", "/dashboard?app=shop&env=production&date=2026-11-21"),
                                   ("ui-request.png", f"/request?app=shop&env=production&date={slow['date']}"
                                                      f"&id={slow['id']}")):
                    page.goto(base + path)
                    page.wait_for_function("!document.querySelector('main .loading')")
                    page.wait_for_timeout(500)
                    page.screenshot(path=str(out / name), full_page=False)
                    print(f"wrote {out / name}")
                browser.close()
        finally:
            ui.terminate()
            ui.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
