"""The command line's failures: one line that names the address (or directory) and the reason, exit 1, no
traceback; `cat --follow` waiting for a segment to be created; one flag vocabulary (old spellings kept);
defaults in every --help; --version; the bench listing."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import re
import signal
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


# --- a user's mistakes: each one or two lines saying what and where (a wrong flag: the command's usage and one
# line), a non-zero exit, no traceback ---

MISTAKES = [
    # (what, argv, exit status, what stderr says)
    ("serve --datadir", ["serve", "--datadir", "x"], 2,
     ["usage: logport serve ", "logport serve: error: unrecognized arguments: --datadir x"]),
    ("send forward --hostnam", ["send", "forward", "--hostnam", "h"], 2,
     ["usage: logport send forward ", "unrecognized arguments: --hostnam h"]),
    ("send: --server and --port", ["send", "lumberjack", "--server", "h:1", "--port", "2"], 2,
     ["logport send lumberjack: give --server HOST:PORT, or the older --host and --port, not both"]),
    ("send forward --server h:port", ["send", "forward", "--server", "h:port"], 2,
     ["logport send forward: --server 'h:port' is not HOST:PORT (or HOST:PORT:WEIGHT)"]),
    ("send segment --tls-ca missing", ["send", "segment", "s", "--tls-ca", "{tmp}/ca.pem"], 2,
     ["logport send segment: --tls-ca {tmp}/ca.pem: cannot read it: No such file or directory"]),
    ("send logjam --tls", ["send", "logjam", "--tls"], 2, ["ZeroMQ has no TLS", "--curve-server-key"]),
    ("send logjam --app-env", ["send", "logjam", "--app-env", "noenv"], 2,
     ["app-env b'noenv' is not application-environment", "--app-env like shop-production"]),
    ("send forward --skip-lines x", ["send", "forward", "--skip-lines", "x"], 2,
     ["usage: logport send forward ", "argument --skip-lines: invalid int value: 'x'"]),
    ("verify a missing segment", ["verify", "nosuchseg", "--data-dir", "{data}"], 2,
     ["logport: no such segment 'nosuchseg' in {data}; `logport segments` lists its segments"]),
    ("cat a missing segment", ["cat", "nosuchseg", "--data-dir", "{data}"], 2, ["no such segment 'nosuchseg'"]),
    ("segments: not a data directory", ["segments", "--data-dir", "{tmp}"], 1,
     ["logport: {tmp} is not a logport data directory: it holds no segments/ directory"]),
    ("verify: not a data directory", ["verify", "--data-dir", "{tmp}"], 1, ["{tmp} is not a logport data directory"]),
    ("cat --data-dir FILE", ["cat", "forward", "--data-dir", "{tmp}/file"], 1,
     ["logport: {tmp}/file is not a logport data directory: it is a file"]),
    ("segments --config missing", ["segments", "--config", "{tmp}/nope.toml"], 2,
     ["config file '{tmp}/nope.toml' does not exist"]),
    ("serve: a missing certificate", ["serve", "--config", "{tmp}/tls.toml"], 2,
     ["logport: config key 'forward.tls.cert' has value '{tmp}/cert.pem': cannot read it: No such file or directory"]),
    ("reload --pid-file missing", ["reload", "--pid-file", "{tmp}/nope.pid"], 1, ["cannot read a pid from"]),
    ("reload --pid of no process", ["reload", "--pid", "999999999"], 1, ["logport reload: no process 999999999"]),
    ("top --interval x", ["top", "--interval", "x"], 2, ["usage: logport top ", "invalid float value: 'x'"]),
    ("bench nosuch", ["bench", "nosuch"], 2, ["usage: logport bench ", "invalid choice: 'nosuch'"]),
    ("pipeline --datadir", ["pipeline", "batch", "--data-dir", "d", "--datadir=x"], 2,
     ["usage: logport pipeline ", "logport pipeline: error: unrecognized arguments: --datadir=x"]),
    ("pipeline --data-dir missing", ["pipeline", "--data-dir", "{tmp}/nowhere"], 2,
     ["--data-dir '{tmp}/nowhere' is not a directory"]),
]


@pytest.mark.parametrize(("argv", "code", "says"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_a_mistake_says_what_and_where_and_exits_non_zero(tmp_path: Path, argv: list[str], code: int,
                                                           says: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    (data / "segments").mkdir(parents=True)
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "tls.toml").write_text(f'[store]\ndata_dir = "{tmp_path}/hub-data"\n[forward]\n'
                                       f'tls.cert = "{tmp_path}/cert.pem"\ntls.key = "{tmp_path}/key.pem"\n')
    args = [a.format(tmp=tmp_path, data=data) for a in argv]
    try:
        got = main(args)
    except SystemExit as e:  # argparse: the command's usage and its error
        got = e.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert got == code, err
    assert "Traceback" not in err
    for text in says:
        assert text.format(tmp=tmp_path, data=data) in err, err
    if not err.startswith("usage:"):
        assert len(err.splitlines()) <= 2, err
    assert not (tmp_path / "hub-data").exists()  # a start that fails on its certificate makes no data directory


def test_reload_of_a_process_that_is_not_a_hub_sends_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    other = subprocess.Popen(["sleep", "60"])  # SIGHUP would end it
    try:
        assert main(["reload", "--pid", str(other.pid)]) == 1
        assert f"pid {other.pid} is not a logport hub (its command: sleep 60); nothing sent" in capsys.readouterr().err
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_reload_says_whether_the_hub_took_its_config(tmp_path: Path) -> None:
    """A config the hub would refuse: exit 1 naming the key, the hub not signalled; one it refuses only when it
    tries (a port another listener has): exit 1 from its metrics; a good one: exit 0."""
    import tomllib

    from tests.chaos.harness import HubProcess, render_toml

    hub = HubProcess(tmp_path / "hub", ("forward", "lumberjack"))
    asyncio.run(hub.start())
    sections = tomllib.loads(hub.config_path.read_text())

    def reload(**changes: dict[str, object]) -> subprocess.CompletedProcess[str]:
        hub.config_path.write_text(render_toml({k: {**v, **changes.get(k, {})} for k, v in sections.items()}))
        return run("reload", "--pid", str(hub.pid), timeout=90)

    try:
        bad = reload(hub={"log_levle": "debug"})
        assert bad.returncode == 1, bad
        assert "the hub would refuse its config, so it was not signalled" in bad.stderr
        assert "unknown config key 'hub.log_levle'" in bad.stderr
        taken = reload(lumberjack={"port": hub.ports["forward"]})
        assert taken.returncode == 1, taken
        assert f"the hub (pid {hub.pid}) refused the config and keeps the running one" in taken.stderr
        good = reload(hub={"log_level": "debug"})
        assert good.returncode == 0 and f"config reloaded by logport (pid {hub.pid})" in good.stdout, good
        assert hub.alive()
    finally:
        hub.stop()
    refused = [line for line in hub.log_lines() if "reload refused" in line]
    assert len(refused) == 1 and "lumberjack" in refused[0], refused  # the bad key never reached the hub


# --- a command that waits says so, and Ctrl-C there exits 130: nothing was done ---

WAITS = [
    ("cat --server", ["cat", "--server", "127.0.0.1:{port}", "s", "--timeout", "0"], "waiting for 127.0.0.1:{port}"),
    ("cat --follow", ["cat", "s", "--follow", "--data-dir", "{data}"], "waiting for segment 's' to be created"),
    ("send forward", ["send", "forward", "--server", "127.0.0.1:{port}", "--timeout", "0", "--drain-timeout", "1"],
     "waiting for 127.0.0.1:{port}"),
    ("send segment", ["send", "segment", "s", "--server", "127.0.0.1:{port}", "--timeout", "0", "--drain-timeout",
                      "1"], "waiting for 127.0.0.1:{port}"),
]


@pytest.mark.parametrize(("argv", "waiting"), [w[1:] for w in WAITS], ids=[w[0] for w in WAITS])
def test_ctrl_c_in_a_wait_exits_130(tmp_path: Path, argv: list[str], waiting: str) -> None:
    port = free_port()
    (tmp_path / "segments").mkdir()
    args = [a.format(port=port, data=tmp_path) for a in argv]
    proc = subprocess.Popen([*LOGPORT, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write('{"n": 1}\n')
        proc.stdin.flush()
        said = proc.stderr.readline()
        assert waiting.format(port=port) in said and "(Ctrl-C to stop" in said, said
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    rest = proc.stderr.read()
    proc.stdin.close()
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest
    if argv[0] == "send":
        assert "stopped by SIGINT: 1 line read, 0 acknowledged, 1 not acknowledged" in rest, rest
