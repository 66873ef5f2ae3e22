"""Fluentd-style tag patterns."""

from __future__ import annotations

import pytest

from logport.config import RouteConfig
from logport.routing import Router, compile_pattern


@pytest.mark.parametrize(
    ("pattern", "tag", "matches"),
    [
        ("a", "a", True),
        ("a", "ab", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.*", "a", False),
        ("a.**", "a", True),
        ("a.**", "a.b.c", True),
        ("a.**", "ab", False),
        ("**", "anything.at.all", True),
        ("*.b", "x.b", True),
        ("a.{b,c}", "a.c", True),
        ("a.{b,c}", "a.d", False),
        ("a b", "b", True),
        ("a.b", "aXb", False),
    ],
)
def test_patterns(pattern: str, tag: str, matches: bool) -> None:
    assert bool(compile_pattern(pattern).match(tag)) is matches


def test_first_route_wins_and_default_applies() -> None:
    router = Router([RouteConfig("app.**", "apps"), RouteConfig("**", "rest")])
    assert router.segment_for("app.web", "forward") == "apps"
    assert router.segment_for("sys", "forward") == "rest"
    assert Router([RouteConfig("app.**", "apps")]).segment_for("sys", "forward") == "forward"
    assert Router([]).segment_for("x", "lumberjack") == "lumberjack"
