"""The command line's flags: the README's table of them is the parsers' (every command, every flag its --help
shows); no parser takes a prefix of a flag (`send forward --host` was taken for `--hostname`), and an unknown
flag gets the usage of the command it was given to; every sender takes its server as --server and the old
spellings (--host/--port, --ca, --insecure, --tls-no-verify) as they say."""

from __future__ import annotations

import argparse
import re

import pytest

from logport.cli import build_parser, pipeline_parser, ui_parser
from logport.clients import flags
from logport.clients.logjam import endpoint
from logport.errors import ConfigError
from tests.conftest import REPO


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name (`logport send forward`); `logport pipeline` and `logport ui` are their modules' own."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subcommands or name == "logport":
            found[name] = parser
        for action in subcommands:
            for sub, subparser in action.choices.items():
                walk(f"{name} {sub}", subparser)

    walk("logport", build_parser())
    found["logport pipeline"] = pipeline_parser()
    found["logport ui"] = ui_parser()
    return found


def shown_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The long flags --help shows (hidden aliases and --help itself aside)."""
    return {option for action in parser._actions if action.help != argparse.SUPPRESS
            for option in action.option_strings if option.startswith("--") and option != "--help"}


def readme_flags() -> dict[str, set[str]]:
    """The README's table `| command | flags |`: the flags of each command."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("| command | flags |"):].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        command, flags_cell = re.fullmatch(r"\| `([^`]+)` \| (.*) \|", line).groups()  # type: ignore[union-attr]
        rows[command] = set(re.findall(r"`(--[a-z0-9-]+)`", flags_cell))
    return rows


def test_the_readme_table_lists_every_command_with_the_flags_its_parser_has() -> None:
    parsers, table = commands(), readme_flags()
    assert set(table) == set(parsers), f"README rows missing: {set(parsers) - set(table)}; " \
                                       f"rows of no command: {set(table) - set(parsers)}"
    for name, parser in parsers.items():
        shown = shown_flags(parser)
        assert table[name] == shown, (f"{name}: the README lacks {sorted(shown - table[name])}, "
                                      f"and names {sorted(table[name] - shown)} that it does not take")


REQUIRED = {"logport cat": ["s"], "logport send segment": ["s"], "logport reload": ["--pid", "1"],
            "logport pipeline": ["--data-dir", "d"]}
PREFIXES = [(name, flag[:-1]) for name, parser in commands().items() for flag in sorted(shown_flags(parser))
            if flag[:-1] not in {o for a in parser._actions for o in a.option_strings} and len(flag) > 3]


@pytest.mark.parametrize(("command", "prefix"), PREFIXES, ids=[f"{c} {p}" for c, p in PREFIXES])
def test_a_prefix_of_a_flag_is_refused_with_its_commands_usage(command: str, prefix: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    words = command.split()[1:]
    if words == ["pipeline"]:
        parser, argv = pipeline_parser(), [*REQUIRED[command], prefix]
    else:  # the top level's own flags come before a command
        parser, argv = build_parser(), [*words, *REQUIRED.get(command, []), prefix] if words else [prefix, "top"]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith(f"usage: {command} "), err
    assert err.splitlines()[-1] == f"{command}: error: unrecognized arguments: {prefix}", err


def test_every_parser_refuses_abbreviations() -> None:
    for name, parser in commands().items():
        assert parser.allow_abbrev is False, name


DEFAULTS = {"forward": "127.0.0.1:24224", "lumberjack": "127.0.0.1:5044", "segment": "127.0.0.1:12345",
            "logjam": "127.0.0.1:9604"}
SENDERS = {"forward": ["forward"], "lumberjack": ["lumberjack"], "segment": ["segment", "s"], "logjam": ["logjam"]}
ADDRESSES = [
    ([], "{default}"),
    (["--server", "h:7"], "h:7"),
    (["--host", "h", "--port", "7"], "h:7"),
    (["--host", "h"], "h:{port}"),
    (["--port", "7"], "127.0.0.1:7"),
    (["--host", "::1", "--port", "7"], "[::1]:7"),
]


@pytest.mark.parametrize("sender", list(SENDERS))
@pytest.mark.parametrize(("argv", "server"), ADDRESSES, ids=[" ".join(a) or "default" for a, _ in ADDRESSES])
def test_every_sender_takes_its_server_as_server_or_host_and_port(sender: str, argv: list[str], server: str) -> None:
    args = build_parser().parse_args(["send", *SENDERS[sender], *argv])
    default = DEFAULTS[sender]
    expected = server.format(default=default, port=default.rpartition(":")[2])
    assert flags.server_list(args, default) == [expected]
    if sender == "logjam":
        assert endpoint(flags.server_list(args, default)[0]) == f"tcp://{expected}"
    else:
        host, port = flags.parse_server(expected, 0)
        assert flags.server_address(args, default) == (host, port)


@pytest.mark.parametrize("sender", list(SENDERS))
def test_server_and_the_old_host_port_together_are_refused(sender: str) -> None:
    args = build_parser().parse_args(["send", *SENDERS[sender], "--server", "h:7", "--host", "g"])
    with pytest.raises(ConfigError, match="not both"):
        flags.server_list(args, DEFAULTS[sender])


def test_forward_takes_several_servers() -> None:
    args = build_parser().parse_args(["send", "forward", "--server", "a:1", "--server", "b:2:30"])
    assert flags.server_list(args, DEFAULTS["forward"]) == ["a:1", "b:2:30"]


@pytest.mark.parametrize("sender", ["forward", "lumberjack", "segment"])
@pytest.mark.parametrize(("argv", "ca", "insecure"), [
    (["--ca", "x.pem"], "x.pem", False),
    (["--insecure"], "", True),
    (["--tls-no-verify"], "", True),
    (["--tls-ca", "y.pem", "--tls-insecure"], "y.pem", True),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_every_tls_sender_takes_the_old_tls_spellings(sender: str, argv: list[str], ca: str, insecure: bool) -> None:
    args = build_parser().parse_args(["send", *SENDERS[sender], *argv])
    assert (args.tls_ca, args.tls_insecure) == (ca, insecure)


def test_hostname_is_forwards_handshake_name_not_its_server() -> None:
    args = build_parser().parse_args(["send", "forward", "--hostname", "me", "--host", "10.0.0.5"])
    assert args.hostname == "me" and flags.server_list(args, DEFAULTS["forward"]) == ["10.0.0.5:24224"]
