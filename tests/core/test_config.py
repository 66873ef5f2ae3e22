"""Configuration: defaults, overrides, and refusals that name the key and the value."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest

from logport.config import Config, load_config
from logport.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "logport.toml"
    path.write_text(text)
    return path


def test_defaults_follow_the_design() -> None:
    c = load_config(None)
    assert (c.forward.port, c.lumberjack.port, c.segment.port) == (24224, 5044, 12345)
    assert (c.logjam.router_port, c.logjam.pull_port, c.logjam.pub_port) == (9604, 9605, 9606)
    assert c.metrics.port == 24231
    assert c.store.fsync == "always" and c.store.chunk_size == 64 * 1024 * 1024
    assert all(s.bind == "127.0.0.1" for s in c.listener_sections())


def test_a_full_file(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, """
[store]
data_dir = "/var/lib/logport"
fsync = "interval"
fsync_interval = 2
[forward]
port = 24225
[forward.tls]
cert = "c.pem"
key = "k.pem"
[[routes]]
match = "app.**"
segment = "app"
[[outputs.forward]]
name = "downstream"
host = "10.0.0.1"
"""))
    assert c.store.data_dir == "/var/lib/logport" and c.store.fsync_interval == 2.0
    assert c.forward.port == 24225 and c.forward.tls.enabled
    assert c.routes[0].segment == "app"
    assert c.outputs.forward[0].name == "downstream"


def test_tls_handshake_timeout_per_listener(tmp_path: Path) -> None:
    """asyncio's default (60 s) would let a connection that never sends a ClientHello hold a descriptor
    that long, uncounted by max_connections."""
    c = load_config(None)
    assert [s.tls.handshake_timeout for s in (c.forward, c.lumberjack, c.segment)] == [10.0, 10.0, 10.0]
    c = load_config(write(tmp_path, "[forward.tls]\nhandshake_timeout = 2\n"))
    assert (c.forward.tls.handshake_timeout, c.segment.tls.handshake_timeout) == (2.0, 10.0)


def test_max_connections_per_peer_per_listener(tmp_path: Path) -> None:
    """One address may not fill a listener by default (about half of max_connections); 0 turns it off."""
    c = load_config(None)
    listeners = (c.forward, c.lumberjack, c.segment)
    assert [s.max_connections_per_peer for s in listeners] == [512, 512, 512]
    assert all(s.max_connections_per_peer < s.max_connections for s in listeners)
    c = load_config(write(tmp_path, "[lumberjack]\nmax_connections_per_peer = 0\n"))
    assert (c.lumberjack.max_connections_per_peer, c.forward.max_connections_per_peer) == (0, 512)


def test_command_line_overrides(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, '[store]\ndata_dir = "x"\n'), data_dir="y", bind="0.0.0.0")
    assert c.store.data_dir == "y"
    assert all(s.bind == "0.0.0.0" for s in c.listener_sections()) and c.metrics.bind == "0.0.0.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[store]\nfsinc = 'always'\n", "unknown config key 'store.fsinc'"),
        ("[nosuch]\n", "unknown config key 'nosuch'"),
        ("[store]\nfsync = 'sometimes'\n", "'store.fsync' has value 'sometimes'"),
        ("[store]\nchunk_size = 'big'\n", "'store.chunk_size' must be an integer, not 'big'"),
        ("[store]\nchunk_size = true\n", "'store.chunk_size' must be an integer, not True"),
        ("[store]\nchunk_size = 0\n", "'store.chunk_size' has value 0"),
        ("[store]\nwriteback_bytes = -1\n", "'store.writeback_bytes' has value -1; it must be >= 0"),
        ("[store]\nretention_age = -1\n", "'store.retention_age' has value -1"),
        ("[forward]\nport = 70000\n", "'forward.port' has value 70000"),
        ("[forward.tls]\ncert = 'c.pem'\n", "'forward.tls.cert' and 'forward.tls.key'"),
        ("[forward]\nmax_connections_per_peer = -1\n", "'forward.max_connections_per_peer' has value -1"),
        ("[segment]\nmax_connections_per_peer = 1.5\n", "'segment.max_connections_per_peer' must be an integer"),
        ("[segment.tls]\nhandshake_timeout = 0\n", "'segment.tls.handshake_timeout' has value 0"),
        ("[segment]\nmax_total_pending_bytes = 0\n", "'segment.max_total_pending_bytes' has value 0"),
        ("[lumberjack.tls]\nhandshake_timeout = -1\n", "'lumberjack.tls.handshake_timeout' has value -1.0"),
        ("[[routes]]\nmatch = 'a'\n", "'routes[0].segment'"),
        ("[forward]\nsegment = 'a/b'\n", "'forward.segment' has value 'a/b'; not a segment name"),
        ("[lumberjack]\nsegment = ''\n", "'lumberjack.segment' has value ''; not a segment name: empty"),
        ("[logjam]\nsegment = '..'\n", "'logjam.segment' has value '..'; not a segment name"),
        ("[logjam]\nsubscribe_segment = 'a b'\n", "'logjam.subscribe_segment' has value 'a b'"),
        ("[logjam]\nrepublish = ['ok', 'x/y']\n", "'logjam.republish[1]' has value 'x/y'"),
        ("[[routes]]\nsegment = '../evil'\n", "'routes[0].segment' has value '../evil'; not a segment name"),
        ("[[outputs.forward]]\nname = 'n'\nsegment = 'a/b'\n", "'outputs.forward[0].segment' has value 'a/b'"),
        ("[[outputs.lumberjack]]\nname = 'n'\nsegment = '.'\n", "'outputs.lumberjack[0].segment' has value '.'"),
        ("[store]\nfsync_interval = nan\n", "'store.fsync_interval' has value nan; it must be a finite number"),
        ("[store]\nretention_age = inf\n", "'store.retention_age' has value inf; it must be a finite number"),
        ("[forward]\nidle_timeout = -inf\n", "'forward.idle_timeout' has value -inf"),
        ("[[outputs.forward]]\nretry_wait = 0\n", "'outputs.forward[0].retry_wait' has value 0.0; it must be > 0"),
        ("[[outputs.forward]]\nstandby = ['h:1', 'h:']\n", "'outputs.forward[0].standby[1]' has value 'h:'"),
        ("[[outputs.forward]]\nstandby = ['h:port']\n", "'outputs.forward[0].standby[0]' has value 'h:port'"),
        ("[[outputs.forward]]\nstandby = ['h:70000']\n", "'outputs.forward[0].standby[0]' has value 'h:70000'"),
        ("[[outputs.forward]]\nstandby = ['h:1:-1']\n", "'outputs.forward[0].standby[0]' has value 'h:1:-1'"),
        ("[logjam]\nsubscribe = ['host:9606']\n", "'logjam.subscribe[0]' has value 'host:9606'"),
        ("[logjam]\nsubscribe = ['tcp://host']\n", "'logjam.subscribe[0]' has value 'tcp://host'"),
        ("[logjam]\nsubscribe = ['tcp://h:1', 'tcp://h:0']\n", "'logjam.subscribe[1]' has value 'tcp://h:0'"),
        ("[metrics]\nenabled = 'yes'\n", "'metrics.enabled' must be a bool, not 'yes'"),
        ("store = 1\n", "[store] must be a table"),
        ("[store\n", "not valid TOML"),
    ],
)
def test_bad_config_is_refused_naming_key_and_value(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    assert message in str(e.value)


def test_good_endpoints_are_accepted(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, """
[logjam]
subscribe = ["tcp://127.0.0.1:9606", "tcp://logjam.example:9606", "tcp://[::1]:9606", "ipc:///run/logjam.sock"]
[[outputs.forward]]
standby = ["10.0.0.2:24224", "backup.example:24225:10", ":24226"]
"""))
    assert len(c.logjam.subscribe) == 4 and len(c.outputs.forward[0].standby) == 3


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/logport.toml")


def test_every_section_has_a_readme_entry() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in Config.__dataclass_fields__:
        assert f"[{name}]" in readme or f"[[{name}]]" in readme or f"[[{name}." in readme, name


def _readme_config_rows() -> dict[str, dict[str, str]]:
    """Configuration tables of README by `### [section]` heading: key -> default cell. A row may name
    several keys (`tls, tls_ca, tls_verify | false, "", true`): each gets its own default when the
    counts agree, else the whole cell."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    config_part = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, dict[str, str]] = {}
    section = ""
    for line in config_part.splitlines():
        if line.startswith("### "):
            section = line.removeprefix("### ")
        elif line.startswith("| ") and not line.startswith("| key |"):
            cells = [c.strip() for c in line.split(" | ")]
            keys, defaults = cells[0].removeprefix("| ").split(", "), cells[1].split(", ") if len(cells) > 1 else [""]
            for i, key in enumerate(keys):
                rows.setdefault(section, {})[key] = defaults[i] if len(defaults) == len(keys) else cells[1]
    return rows


def _readme_default(value: object) -> set[str]:
    if isinstance(value, bool):
        return {str(value).lower()}
    if isinstance(value, str):
        return {f'"{value}"'}
    if isinstance(value, float):
        return {repr(value), f"{value:g}"}
    if isinstance(value, list | dict):
        return {"[]" if isinstance(value, list) else "{}"}
    return {str(value)}


def _config_keys(cls: type, prefix: str = "") -> list[tuple[str, object]]:
    import dataclasses

    keys: list[tuple[str, object]] = []
    for f in dataclasses.fields(cls):
        value = getattr(cls(), f.name)
        if dataclasses.is_dataclass(value):
            keys += _config_keys(type(value), f"{prefix}{f.name}.")
        else:
            keys.append((f"{prefix}{f.name}", value))
    return keys


def test_every_config_key_and_its_default_is_in_the_readme() -> None:
    """Each key of a section is a row of that section's README table, with the default the code has
    (list-of-table sections: outputs and logjam.republish_routes are checked by name only, below)."""
    from logport.config import ForwardOutputConfig, LogjamRepublishRoute, LumberjackOutputConfig

    rows = _readme_config_rows()
    problems = []
    for name in Config.__dataclass_fields__:
        if name == "outputs":
            continue
        cls = typing.get_type_hints(Config)[name]
        if name == "routes":
            (cls,) = typing.get_args(cls)
        table = rows.get(f"[[{name}]]" if name == "routes" else f"[{name}]", {})
        for key, default in _config_keys(cls):
            if name == "logjam" and key == "republish_routes":
                continue
            if key not in table and "." in key and f"{key.split('.')[0]}.*" in table:
                continue  # `tls.* | | as for [forward]`
            if key not in table:
                problems.append(f"[{name}] {key}: no row")
            elif not _readme_default(default) & {table[key]} and not table[key].startswith(tuple(_readme_default(default))):
                problems.append(f"[{name}] {key}: README says {table[key]}, the code {default!r}")
    outputs = {k for section, t in rows.items() for k in t if "outputs" in section or section == "[lumberjack]"}
    for cls in (ForwardOutputConfig, LumberjackOutputConfig):
        problems += [f"{cls.__name__} {key}: no row" for key, _ in _config_keys(cls) if key not in outputs]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    readme_republish = next(line for line in readme.splitlines() if line.startswith("| republish_routes |"))
    problems += [f"republish_routes {key}: not mentioned" for key, _ in _config_keys(LogjamRepublishRoute)
                 if f"`{key}`" not in readme_republish]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("toml", "message"), [
    ("[hub]\nshutdown_grace = -1", "config key 'hub.shutdown_grace' has value -1.0; it must be >= 0"),
    ("[hub]\nhealth_timeout = 0", "config key 'hub.health_timeout' has value 0.0; it must be > 0"),
    ("[hub]\nready_min_free_bytes = -5", "config key 'hub.ready_min_free_bytes' has value -5; it must be >= 0"),
    ("[metrics]\nport = 70000", "config key 'metrics.port' has value 70000; a port is 0..65535"),
])
def test_hub_and_metrics_checks_beside_their_sections(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == message


def test_config_imports_nothing_of_logport_above_errors() -> None:
    """config.py sits at the bottom of the layers beside errors.py and the leaf names.py: importing it (in a fresh
    interpreter, so that no other test's imports count) loads no other logport module, so that anything may import
    the config and no cycle runs back through it (as config -> clients.forward -> tls -> config once did)."""
    import subprocess
    import sys

    code = ("import sys, logport.config\n"
            "print(' '.join(sorted(m for m in sys.modules if m == 'logport' or m.startswith('logport.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert loaded == ["logport", "logport.config", "logport.errors", "logport.names"]


def test_every_section_checks_itself_as_validate_does() -> None:
    """Each section's check() beside its dataclass is what validate() runs: a section alone refuses what the
    whole config refuses, under the key the config file spells."""
    from logport.config import (
        Config,
        ForwardOutputConfig,
        LogjamConfig,
        LogjamRepublishRoute,
        LumberjackConfig,
        RouteConfig,
        StoreConfig,
        validate,
    )

    cases: list[tuple[Any, str, str]] = [
        (StoreConfig(chunk_size=0), "store", "store.chunk_size"),
        (LumberjackConfig(tag=""), "lumberjack", "lumberjack.tag"),
        (LumberjackConfig(segment="a/b"), "lumberjack", "lumberjack.segment"),
        # at load (and so on a reload), not only when the republisher starts
        (LogjamConfig(republish_routes=[LogjamRepublishRoute(app_env="web-production", topic="nope")]), "logjam",
         "logjam.republish_routes[0].topic"),
    ]
    for section, name, key in cases:
        with pytest.raises(ConfigError, match=re.escape(key)):
            section.check(name)
        config = Config()
        setattr(config, name, section)
        with pytest.raises(ConfigError, match=re.escape(key)):
            validate(config)
    with pytest.raises(ConfigError, match=re.escape("routes[0].segment")):
        RouteConfig(segment="").check("routes[0]")
    with pytest.raises(ConfigError, match=re.escape("outputs.forward[0].standby[0]")):
        ForwardOutputConfig(standby=["host:port"]).check("outputs.forward[0]")
