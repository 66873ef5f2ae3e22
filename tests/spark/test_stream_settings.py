"""`logport pipeline --streams FILE`: logjam's /admin/streams JSON, each unusable value named."""

from __future__ import annotations

import re
from typing import Any

import pytest

from logport.spark.stream_settings import StreamSettingsError, load, parse

GOOD = {"shop-production": {"import_threshold": 500, "import_thresholds": [["Orders", 1000]],
                            "ignored_request_uri": "/_system/", "backend_only_requests": "*", "api_requests": [""],
                            "sampling_rate_400s": 0.5, "max_inserts_per_second": 100, "database_number": 3},
        "my-app-preview": {}}


def test_logjams_streams_are_kept_as_they_are() -> None:
    assert parse(GOOD, "streams.json") == GOOD


@pytest.mark.parametrize(("data", "message"), [
    ([], "expected an object of streams"),
    ({"shop": {}}, "stream 'shop' is not <app>-<env>"),
    ({"shop-": {}}, "stream 'shop-' is not <app>-<env>"),
    ({"shop-production": 5}, "stream 'shop-production' is int, not an object of settings"),
    ({"a-b": {"import_threshold": "500"}}, 'import_threshold must be a number of milliseconds, not "500"'),
    ({"a-b": {"import_thresholds": [["Orders"]]}}, "import_thresholds must be a list of [module, milliseconds]"),
    ({"a-b": {"api_requests": "Api"}}, "api_requests must be a list of module names"),
    ({"a-b": {"sampling_rate_400s": 2}}, "sampling_rate_400s must be a number from 0 to 1, not 2"),
    ({"a-b": {"max_inserts_per_second": -1}}, "max_inserts_per_second must be a whole number >= 0, not -1"),
    ({"a-b": {"backend_only_requests": ["x"]}}, "backend_only_requests must be text"),
])
def test_unusable_settings_are_named(data: Any, message: str) -> None:
    with pytest.raises(StreamSettingsError, match=re.escape(message)):
        parse(data, "streams.json")


def test_a_file_that_is_not_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "streams.json"
    path.write_text("<html>login</html>")
    with pytest.raises(StreamSettingsError, match="is not JSON .* /admin/streams"):
        load(path)
