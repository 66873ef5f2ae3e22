"""The command line's failures: one line that names the address (or directory) and the reason, exit 1, no
traceback; `cat --follow` waiting for a segment to be created; one flag vocabulary (old spellings kept);
defaults in every --help; --version; the bench listing."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from logport.batch import encode_batch
from logport.cli import bench_names, build_parser, main
from logport.clients import flags
from logport.config import StoreConfig
from logport.store import SegmentStore
from tests.conftest import free_port
from tests.support import hub_config, running_hub

LOGPORT = [sys.executable, "-m", "logport.cli"]


def run(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOGPORT, *args], input=stdin.decode(), capture_output=True, text=True, timeout=timeout)


# --- nobody listens: a line saying it waits, then one with the address and the reason, exit 1, after the
# (overridden) timeout: --timeout is how long it tries, whatever the retries ---

UNREACHABLE = [
    ("cat", ["cat", "--server", "{server}", "forward", "--timeout", "1"]),
    ("cat --follow", ["cat", "--server", "{server}", "forward", "--follow", "--timeout", "1"]),
    ("send segment", ["send", "segment", "foo", "--server", "{server}", "--timeout", "1"]),
    ("send lumberjack", ["send", "lumberjack", "--server", "{server}", "--timeout", "1"]),
    ("send lumberjack --port", ["send", "lumberjack", "--port", "{port}", "--timeout", "1"]),  # the old spelling
    ("send forward", ["send", "forward", "--server", "{server}", "--timeout", "2"]),
    ("send forward --retries", ["send", "forward", "--server", "{server}", "--retries", "2"]),
]


@pytest.mark.parametrize("argv", [argv for _, argv in UNREACHABLE], ids=[name for name, _ in UNREACHABLE])
def test_an_unreachable_server_is_one_line_naming_it_and_why(argv: list[str]) -> None:
    port = free_port()
    args = [a.format(server=f"127.0.0.1:{port}", port=port) for a in argv]
    proc = run(*args, stdin=b'{"message": "m"}\n', timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    waiting, line = proc.stderr.splitlines()
    assert f"waiting for 127.0.0.1:{port} (Ctrl-C to stop" in waiting, waiting
    assert f"127.0.0.1:{port}" in line and "connection refused" in line, line
    assert proc.stdout == ""
    if "--timeout" in argv and argv[0] == "send":  # what it says it waited is what --timeout says
        timeout = float(argv[argv.index("--timeout") + 1])
        assert f"giving up after {timeout:g} s" in waiting
        said = re.search(r"(?:after|in) ([0-9.]+) s", line)
        assert said is not None and timeout <= float(said[1]) < timeout + 1, line
    if "--retries" in argv:
        assert "after 2 attempts" in line, line


def test_the_retry_timeout_defaults_to_30_seconds_and_help_says_so() -> None:
    for argv in (["send", "segment", "--help"], ["send", "lumberjack", "--help"], ["send", "forward", "--help"],
                 ["cat", "--help"]):
        out = run(*argv).stdout
        assert "--timeout SECONDS" in out and "(default: 30.0)" in " ".join(out.split()), (argv, out)
    args = build_parser().parse_args(["send", "lumberjack"])
    assert args.timeout == flags.DEFAULT_TIMEOUT == 30.0


# --- data directories ---


@pytest.mark.parametrize("argv", [["segments"], ["segments", "--json"], ["cat", "forward"],
                                  ["cat", "forward", "--follow"]], ids=" ".join)
def test_a_data_directory_that_does_not_exist_is_named(tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    proc = run(*argv, "--data-dir", str(missing), timeout=30)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"logport: data directory {missing} does not exist (give the hub's store.data_dir " \
                          f"with --data-dir or --config)\n"


async def append(data_dir: Path, segment: str, record: dict[str, object]) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    try:
        await store.append(segment, [encode_batch("t", [(1, 0, record)], {"size": 1})])
    finally:
        await store.close()


def follow_until_first_event(proc: subprocess.Popen[str], create: Callable[[], None]) -> tuple[str, dict[str, object]]:
    """The waiting line `cat --follow` prints on stderr, then (after `create()`) the first event it prints."""
    assert proc.stderr is not None and proc.stdout is not None
    waiting = proc.stderr.readline()
    create()
    return waiting, json.loads(proc.stdout.readline())


@pytest.mark.timeout(60)
def test_cat_follow_waits_for_a_segment_to_be_created(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "segments").mkdir(parents=True)  # a hub's fresh data directory: no segments yet
    proc = subprocess.Popen([*LOGPORT, "cat", "late", "--follow", "--data-dir", str(data_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waiting, event = follow_until_first_event(proc, lambda: asyncio.run(append(data_dir, "late", {"n": 1})))
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert waiting == f"waiting for segment 'late' to be created in {data_dir} (Ctrl-C to stop)\n"
    assert event["record"] == {"n": 1}
    assert "Traceback" not in err


@pytest.mark.timeout(60)
async def test_cat_follow_server_waits_for_a_segment_to_be_created(tmp_path: Path) -> None:
    config = hub_config(tmp_path / "data", ["segment"])
    async with running_hub(config) as hub:
        server = f"127.0.0.1:{config.segment.port}"
        proc = await asyncio.create_subprocess_exec(
            *LOGPORT, "cat", "--server", server, "late", "--follow",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            assert proc.stderr is not None and proc.stdout is not None
            waiting = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert hub.runtime.store is not None
            await hub.runtime.store.append("late", [encode_batch("t", [(1, 0, {"n": 1})], {"size": 1})])
            event = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        finally:
            proc.kill()
            await proc.wait()
    assert waiting.decode() == f"waiting for segment 'late' to be created on {server} (Ctrl-C to stop)\n"
    assert event["record"] == {"n": 1}


def test_cat_without_follow_still_says_no_such_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "segments").mkdir()  # a hub's data directory, without that segment
    assert main(["cat", "nosuch", "--data-dir", str(tmp_path)]) == 2
    assert "no such segment 'nosuch'" in capsys.readouterr().err


# --- one flag vocabulary; old spellings as aliases ---


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(("argv", "host_port", "tls"), [
    (["lumberjack", "--server", "h:7"], ("h", 7), ("", "", "", False)),
    (["lumberjack", "--host", "h", "--port", "7"], ("h", 7), ("", "", "", False)),
    (["lumberjack", "--port", "7"], ("127.0.0.1", 7), ("", "", "", False)),
    (["lumberjack", "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k", "--tls-insecure"], ("127.0.0.1", 5044),
     ("ca", "c", "k", True)),
    (["lumberjack", "--tls-no-verify"], ("127.0.0.1", 5044), ("", "", "", True)),
    (["segment", "s", "--server", "h:7", "--tls-ca", "ca", "--tls-insecure"], ("h", 7), ("ca", "", "", True)),
    (["segment", "s", "--ca", "ca", "--insecure"], ("127.0.0.1", 12345), ("ca", "", "", True)),
    (["segment", "s", "--tls-cert", "c", "--tls-key", "k"], ("127.0.0.1", 12345), ("", "c", "k", False)),
    (["forward", "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k", "--tls-insecure"], None, ("ca", "c", "k", True)),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_send_flags_spelled_one_way_with_the_old_spellings_kept(
        argv: list[str], host_port: tuple[str, int] | None, tls: tuple[str, str, str, bool]) -> None:
    args = parse("send", *argv)
    assert (args.tls_ca, args.tls_cert, args.tls_key, args.tls_insecure) == tls
    if host_port is not None:
        default_port = 5044 if argv[0] == "lumberjack" else 12345
        assert flags.server_address(args, f"127.0.0.1:{default_port}") == host_port


def test_logjam_takes_host_port_and_refuses_tls_with_what_to_use() -> None:
    from logport.clients.logjam import endpoint

    assert endpoint(parse("send", "logjam", "--server", "h:9604").server) == "tcp://h:9604"
    assert endpoint("tcp://h:1") == "tcp://h:1"
    proc = run("send", "logjam", "--tls-ca", "ca.pem", timeout=30)
    assert proc.returncode == 2 and "ZeroMQ has no TLS" in proc.stderr and "--curve-server-key" in proc.stderr


# --- --help shows defaults everywhere; --version ---

HELPS = [["serve"], ["segments"], ["cat"], ["verify"], ["send", "forward"], ["send", "lumberjack"],
         ["send", "segment"], ["send", "logjam"], ["bench"]]


@pytest.mark.parametrize("argv", HELPS, ids=" ".join)
def test_every_help_shows_defaults(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    assert "(default:" in capsys.readouterr().out


def test_version() -> None:
    proc = run("--version")
    assert (proc.returncode, proc.stdout) == (0, f"logport {importlib.metadata.version('logport')}\n")


# --- logport bench with no scenario ---


def test_bench_lists_each_scenario_with_its_duration_and_needs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for name in bench_names():
        (head,) = [line for line in lines if line.split()[:1] == [name]]
        assert "min" in head and "needs" in head, head
    assert "Node" in [line for line in lines if line.split()[:1] == ["forward"]][0]
    assert "Java" in [line for line in lines if line.split()[:1] == ["spark"]][0]
    assert "rows/s of spark.read.format" in out  # what each measures: its docstring's first line
