"""`logport send forward`: JSON lines on stdin -> a logport Forward server, in every mode."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.forward.helpers import forward_config, running_hub, stored_events

LOGPORT = str(Path(sys.executable).with_name("logport"))  # the installed console script

LINES = [
    {"tag": "cli.a", "time_ns": 1700000000123456789, "record": {"n": 1, "s": "ü"}},
    {"tag": "cli.b", "time": 1700000001.5, "record": {"n": 2}},
    {"n": 3, "plain": "record"},
]


@pytest.mark.parametrize("mode", ["Message", "Forward", "PackedForward", "CompressedPackedForward"])
async def test_send_forward_cli(tmp_path: Path, mode: str) -> None:
    config = forward_config(tmp_path, shared_key="k")
    async with running_hub(config) as hub:
        proc = await asyncio.create_subprocess_exec(
            LOGPORT, "send", "forward", "--server", f"127.0.0.1:{config.forward.port}",
            "--mode", mode, "--shared-key", "k", "--hostname", "cli-test", "--tag", "cli.default",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate("\n".join(map(json.dumps, LINES)).encode()), 30)
        assert proc.returncode == 0, err.decode()
        assert b"sent 3 events" in err
        got = sorted(await stored_events(hub), key=lambda e: e[3]["n"])
        assert [(e[0], e[3]) for e in got] == [("cli.a", {"n": 1, "s": "ü"}), ("cli.b", {"n": 2}),
                                               ("cli.default", {"n": 3, "plain": "record"})]
        assert got[0][1:3] == (1700000000, 123456789) and got[1][1:3] == (1700000001, 500000000)


async def test_send_forward_cli_fails_when_nobody_listens(tmp_path: Path) -> None:
    from tests.conftest import free_port

    proc = await asyncio.create_subprocess_exec(
        LOGPORT, "send", "forward", "--server", f"127.0.0.1:{free_port()}", "--retries", "1",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(b'{"a": 1}\n'), 60)
    assert proc.returncode == 1 and b"no server acknowledged" in err


async def test_send_forward_cli_sends_a_line_that_is_not_json_as_a_message(tmp_path: Path) -> None:
    """A bad line once made the sender stop, print `sent 2 events` and exit 0 with nothing stored, the
    good line neither: it is sent as {"message": line}, as the Lumberjack and logjam senders do."""
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        proc = await asyncio.create_subprocess_exec(
            LOGPORT, "send", "forward", "--server", f"127.0.0.1:{config.forward.port}",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(b'{"message":"a"}\nnot json\n"a string"\n'), 30)
        assert proc.returncode == 0, err.decode()
        assert err.decode().strip() == "sent 3 events, all acknowledged"
        got = [e[3] for e in await stored_events(hub)]
        assert got == [{"message": "a"}, {"message": "not json"}, {"message": "a string"}]


async def test_send_forward_cli_counts_what_was_acknowledged_when_it_fails(tmp_path: Path) -> None:
    """An envelope whose time is no number fails the send (exit 1), after saying how many events were
    acknowledged before it: the ones in the chunks sent until then."""
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        proc = await asyncio.create_subprocess_exec(
            LOGPORT, "send", "forward", "--server", f"127.0.0.1:{config.forward.port}", "--batch", "1",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lines = b'{"n": 1}\n{"record": {"n": 2}, "time": "soon"}\n{"n": 3}\n'
        _, err = await asyncio.wait_for(proc.communicate(lines), 30)
        assert proc.returncode == 1
        said = err.decode()
        assert "line 2: " in said and "2 lines read, 1 acknowledged, 1 not acknowledged" in said, said
        assert said.rstrip().endswith("--batch 1 --skip-lines 1 < the same input"), said
        assert [e[3] for e in await stored_events(hub)] == [{"n": 1}]
