"""Every chaos test runs twice: its hub SIGKILLed, and SIGKILLed with a power loss of its data directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import Crash, crash_of_kind


@pytest.fixture(params=["sigkill", "power-loss"])
def crash(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Crash]:
    with crash_of_kind(request.param, tmp_path, seed=len(request.node.name)) as crash:
        yield crash
    if crash.kind == "power-loss":
        print(f"power losses after the SIGKILLs: {crash.losses}")
        assert sum(crash.losses.values()) >= 10, crash.losses  # each kill cut the power too
