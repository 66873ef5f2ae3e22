"""logport.example.toml cannot drift from config.py: it loads, its values are the defaults, and every
key of every section is in it (the list sections as commented-out examples), each with a comment."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from logport.config import Config, load_config
from tests.conftest import REPO

EXAMPLE = REPO / "logport.example.toml"
# A commented-out setting: `# [[table]]` or `# key = value`; prose comments are neither.
COMMENTED_SETTING = re.compile(r"^# ?(\[\[[\w.]+\]\](?:\s+#.*)?|\w+ = .*)$")
KEY_LINE = re.compile(r"^(?:# ?)?(\w+) = ")


def uncommented(text: str) -> str:
    """The example with its commented-out list-section examples turned on."""
    return "\n".join(m[1] if (m := COMMENTED_SETTING.match(line)) else line for line in text.splitlines())


def missing_keys(cls: type, table: dict[str, Any], where: str = "") -> Iterator[str]:
    """Dotted names of `cls`'s fields (and of the dataclasses in it, list items included) not in `table`."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, tp = f"{where}.{f.name}" if where else f.name, hints[f.name]
        if f.name not in table:
            yield key
            continue
        value = table[f.name]
        if dataclasses.is_dataclass(tp):
            yield from missing_keys(tp, value, key)  # type: ignore[arg-type]
        elif typing.get_origin(tp) is list and dataclasses.is_dataclass(item := typing.get_args(tp)[0]):
            if not value:
                yield f"{key}[0] (an example table)"
            for i, entry in enumerate(value):
                yield from missing_keys(item, entry, f"{key}[{i}]")  # type: ignore[arg-type]


def test_example_config_loads_and_holds_the_defaults() -> None:
    assert load_config(EXAMPLE) == Config()


def test_example_config_has_every_key_of_every_section(tmp_path: Path) -> None:
    text = uncommented(EXAMPLE.read_text(encoding="utf-8"))
    assert sorted(missing_keys(Config, tomllib.loads(text))) == []
    turned_on = tmp_path / "logport.toml"
    turned_on.write_text(text, encoding="utf-8")
    config = load_config(turned_on)  # the commented-out examples are valid settings too
    assert config.routes and config.outputs.forward and config.outputs.lumberjack and config.logjam.republish_routes


def test_example_config_comments_every_key() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    bare = [f"logport.example.toml:{n + 1}: {line}" for n, line in enumerate(lines)
            if KEY_LINE.match(line) and " # " not in line.partition(" = ")[2]
            and not (n and lines[n - 1].startswith("#") and not KEY_LINE.match(lines[n - 1]))]
    assert bare == [], "a key without a comment on its line or the line before"
