"""One writing process per data directory: a second hub on the same directory is refused, readers are not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.errors import DataDirectoryInUse
from logport.store import SegmentStore
from logport.store.reader import DirectoryReader
from tests.conftest import free_port


async def test_a_second_store_on_the_same_directory_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    config = StoreConfig(data_dir=str(tmp_path / "data"))
    first = await SegmentStore.open(config)
    await first.append("s", [b"one"])
    with pytest.raises(DataDirectoryInUse, match=rf"data directory {tmp_path}/data is in use by logport \(pid {os.getpid()}\)"):
        await SegmentStore.open(config)
    assert [body for _, _, body in DirectoryReader(config.data_dir).follow("s")] == [b"one"]  # readers take no lock
    await first.close()
    second = await SegmentStore.open(config)
    await second.append("s", [b"two"])
    await second.close()
    assert [bytes(b) for _, _, b in DirectoryReader(config.data_dir).follow("s")] == [b"one", b"two"]


def test_a_second_hub_refuses_to_start_and_names_the_first(tmp_path: Path) -> None:
    """Two hubs once both served ./data and the second wrote over an event the first had acknowledged."""
    data = tmp_path / "data"

    def serve(port: int) -> subprocess.Popen[bytes]:
        config = tmp_path / f"hub{port}.toml"
        config.write_text(f"[forward]\nport = {port}\n[lumberjack]\nenabled = false\n[segment]\nenabled = false\n"
                          f"[logjam]\nenabled = false\n[metrics]\nenabled = false\n")
        return subprocess.Popen([sys.executable, "-m", "logport.cli", "serve", "--config", str(config),
                                 "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    first = serve(free_port())
    try:
        deadline = time.monotonic() + 20
        while not (data / "lock").exists() or not (data / "lock").read_text().strip():
            assert first.poll() is None and time.monotonic() < deadline, "the first hub never took its lock"
            time.sleep(0.05)
        second = serve(free_port())
        _, err = second.communicate(timeout=30)
        assert second.returncode != 0
        assert f"data directory {data} is in use by logport (pid {first.pid})" in err.decode()
        assert "Traceback" not in err.decode()
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(timeout=30)
