"""`logport pipeline --server`: repeated or comma-separated, one source over every hub named."""

from __future__ import annotations

import argparse

import pytest

from logport.spark import pipeline


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    pipeline.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(("argv", "server"), [
    (["--server", "a:1"], "a:1"),
    (["--server", "a:1,b:2", "--server", "c:3"], "a:1,b:2,c:3"),
    (["--server", " a:1 , b:2 ,"], "a:1,b:2"),
])
def test_servers_become_one_source_option(argv: list[str], server: str) -> None:
    options = pipeline.source_options(parse(*argv, "--timeout", "5"))
    assert options == {"server": server, "timeout": "5.0"}


def test_data_dir() -> None:
    assert pipeline.source_options(parse("--data-dir", "d")) == {"path": "d"}


def test_events_is_an_output_only_when_named() -> None:
    assert "events" not in pipeline.DEFAULT_OUTPUTS
    assert pipeline.output_names("events,traffic") == ["events", "traffic"]
    with pytest.raises(pipeline.PipelineOptionError, match="choose from traffic, logjam, logs, events"):
        pipeline.output_names("everything")
