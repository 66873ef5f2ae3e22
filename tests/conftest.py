"""Fixtures shared by every test layer: a store in a temporary directory, free ports."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from logport.config import StoreConfig
from logport.store import SegmentStore

# CI runs a fixed hypothesis budget; HYPOTHESIS_PROFILE=long for longer local runs.
settings.register_profile("ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "tests" / "vectors"  # copies of ../shared/vectors: a clone must test without its neighbours
NODE_MODULES = REPO / "node_modules"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def store_config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(data_dir=str(tmp_path / "data"))


@pytest.fixture
async def store(store_config: StoreConfig):  # type: ignore[no-untyped-def]
    s = await SegmentStore.open(store_config)
    yield s
    await s.close()
