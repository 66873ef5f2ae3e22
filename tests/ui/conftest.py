"""A small lake for the UI's tests: generated logjam traffic (bench/_uilake.py), its requests kept for plain-Python
answers to check the views against."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from logport.cli import load_bench

APP_ENVS = ("shop-production", "search-production", "shop-staging")
DAYS = ("2026-11-20", "2026-11-21")
PER_APP_DAY = 1500


@pytest.fixture(scope="session")
def uilake() -> ModuleType:
    return load_bench("_uilake")


@pytest.fixture(scope="session")
def generated(uilake: ModuleType) -> Any:
    return uilake.generate_requests(APP_ENVS, DAYS, PER_APP_DAY)


@pytest.fixture(scope="session")
def fixture_lake(tmp_path_factory: pytest.TempPathFactory, uilake: ModuleType, generated: Any) -> Path:
    """The lake written from the generated requests in two batches (keys with rows from both)."""
    root = tmp_path_factory.mktemp("lake")
    uilake.write_lake(root, generated, batches=2)
    return root


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report on the item, so a fixture's teardown can tell that its test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)
