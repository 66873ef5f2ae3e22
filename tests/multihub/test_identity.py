"""A hub's stable identity: made once, atomically, kept in its data directory; shown and served."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import re
from pathlib import Path

import pytest

from logport.cli import main
from logport.clients.segment import BlockingSegmentClient
from logport.protocols import segment as sp
from logport.store.identity import (
    FILE_NAME,
    HubIdentityError,
    ensure_hub_identity,
    read_hub_identity,
)

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def test_made_once_and_kept(tmp_path: Path) -> None:
    assert read_hub_identity(tmp_path) is None
    first = ensure_hub_identity(tmp_path)
    assert UUID.match(first)
    assert ensure_hub_identity(tmp_path) == read_hub_identity(tmp_path) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME]  # no temporary file left


def _make(data_dir: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(ensure_hub_identity(data_dir))


def test_processes_racing_agree_on_one(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    workers = [context.Process(target=_make, args=(str(tmp_path / "data"), out)) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    found = {out.get(timeout=5) for _ in workers}
    assert found == {read_hub_identity(tmp_path / "data")}


@pytest.mark.parametrize("text", ["", "not-a-uuid", "0D5E" * 9])
def test_a_damaged_identity_is_an_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(HubIdentityError, match=f"{tmp_path / FILE_NAME} holds .* not a hub identity"):
        ensure_hub_identity(tmp_path)


def test_hub_start_makes_it_and_serves_and_shows_it(running_hub, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    data_dir, server, loop, hub = running_hub
    identity = read_hub_identity(data_dir)
    assert identity is not None and UUID.match(identity)
    asyncio.run_coroutine_threadsafe(hub.runtime.store.append("forward", [b"x"]), loop).result(30)
    host, port = server.rsplit(":", 1)
    client = BlockingSegmentClient(host, int(port))
    try:
        assert client.hub_id() == identity
        assert client.list_segments() == ["forward"]  # the same connection goes on
    finally:
        client.close()
    assert main(["segments", "--data-dir", data_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hub"] == identity
    assert main(["segments", "--data-dir", data_dir]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"hub {identity}"


def test_hub_info_codec() -> None:
    assert sp.encode(sp.GetHubInfo()) == (73).to_bytes(4, "big") + (0).to_bytes(4, "big")
    message = sp.HubInfo("0d5e0000-0000-4000-8000-000000000000")
    encoded = sp.encode(message)
    assert encoded[:4] == (74).to_bytes(4, "big")
    assert sp.decode_body(74, encoded[8:]) == message


@pytest.fixture
def read_only_copy(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A data directory with a segment and no hub-id, seen through a read-only bind mount (root only)."""
    import os
    import subprocess

    from logport.store.reader import DirectoryReader

    source, view = tmp_path / "data", tmp_path / "ro"
    asyncio.run(_store_one_event(source))
    (source / FILE_NAME).unlink(missing_ok=True)  # as if served before identities came (the store makes none)
    view.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(source), str(view)]).returncode:
        pytest.skip("a read-only bind mount needs root")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(view)]).returncode:
            pytest.skip("remounting read-only failed")
        with contextlib.closing(DirectoryReader(view)) as reader:
            assert [bytes(b) for _, b in reader.iter_events("s")] == [b"one"]
        yield view
    finally:
        subprocess.run(["umount", "--lazy", str(view)], check=True)


async def _store_one_event(data_dir: Path) -> None:
    from logport.config import StoreConfig
    from logport.store import SegmentStore

    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    try:
        await store.append("s", [b"one"])
    finally:
        await store.close()


def test_a_reader_that_cannot_write_names_a_directory_after_its_path(
        read_only_copy: Path, caplog: pytest.LogCaptureFixture) -> None:
    from logport.spark.segments import DirectorySegments

    with pytest.raises(OSError):
        ensure_hub_identity(read_only_copy)  # what the Spark source called: the query failed
    with contextlib.closing(DirectorySegments(str(read_only_copy))) as access, \
            contextlib.closing(DirectorySegments(str(read_only_copy))) as again:
        first = access.identity()
        assert UUID.match(first) and first == again.identity()  # stable
    assert read_hub_identity(read_only_copy) is None
    assert any("cannot write one there" in r.getMessage() for r in caplog.records)
