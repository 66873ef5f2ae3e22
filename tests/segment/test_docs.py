"""docs/segment-protocol.md names only config keys and constants that exist."""

from __future__ import annotations

import dataclasses
import re

import pytest

from logport.clients import segment as client
from logport.config import Config
from logport.protocols import segment as protocol
from logport.servers import segment as server
from tests.conftest import REPO

DOC = (REPO / "docs" / "segment-protocol.md").read_text()


@pytest.mark.parametrize("section", ["segment", "store"])
def test_every_config_key_named_exists(section: str) -> None:
    fields = {f.name for f in dataclasses.fields(getattr(Config(), section))}
    named = set(re.findall(rf"`{section}\.([a-z_]+)[`. ]", DOC))
    assert named, f"no {section}.* key found: the pattern is stale"
    assert named <= fields, f"not {section} config keys: {sorted(named - fields)}"


def test_every_constant_named_exists() -> None:
    named = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", DOC))
    missing = {name for name in named if not any(hasattr(m, name) for m in (protocol, server, client))}
    assert not missing, f"constants named in the doc that the segment modules do not define: {sorted(missing)}"
