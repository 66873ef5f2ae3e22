"""The [forward] and [[outputs.forward]] keys load from TOML and are range-checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from logport.config import load_config
from logport.errors import ConfigError

TOML = """
[forward]
port = 24300
shared_key = "k"
users = { alice = "s3cret" }
chunk_size_limit = 1048576
decompression_size_limit = 8388608
max_connections = 10
idle_timeout = 0
add_tag_prefix = "edge"
source_address_key = "ip"

[[outputs.forward]]
name = "up"
host = "10.0.0.2"
standby = ["10.0.0.3:24224"]
shared_key = "k"
compress = "gzip"
tls = true
"""


def test_forward_keys_load(tmp_path: Path) -> None:
    path = tmp_path / "logport.toml"
    path.write_text(TOML)
    config = load_config(path)
    fw = config.forward
    assert (fw.port, fw.shared_key, fw.users, fw.chunk_size_limit, fw.idle_timeout) == (
        24300, "k", {"alice": "s3cret"}, 1048576, 0.0)
    (out,) = config.outputs.forward
    assert (out.name, out.standby, out.compress, out.tls) == ("up", ["10.0.0.3:24224"], "gzip", True)


@pytest.mark.parametrize("text,message", [
    ("[forward]\nchunk_size_limit = 0\n", "forward.chunk_size_limit"),
    ("[forward]\nidle_timeout = -1\n", "forward.idle_timeout"),
    ('[forward]\nusers = { a = "b" }\n', "needs 'forward.shared_key'"),
    ('[[outputs.forward]]\ncompress = "lz4"\n', "compress"),
    ("[[outputs.forward]]\nack_timeout = 0\n", "ack_timeout"),
    ("[forward]\nshared_kee = 1\n", "unknown config key"),
])
def test_forward_keys_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "logport.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)
