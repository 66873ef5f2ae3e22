"""`logport ui` without the charts library in its install (a `make run`-only install has no Node step): one line
that says how to get it, before any page is served."""

from __future__ import annotations

from pathlib import Path

import pytest

from logport.errors import LogportError
from logport.ui import app, report


def test_without_the_charts_library_it_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(app, "ECHARTS", tmp_path / "echarts.min.js")
    for start in (lambda: app.create_app(tmp_path), lambda: report.write_report(tmp_path, tmp_path / "r.html")):
        with pytest.raises(LogportError) as raised:
            start()
        message = str(raised.value)
        assert "make ui-assets" in message and "npm" in message and "\n" not in message
