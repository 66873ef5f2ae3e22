"""A data directory on a file system that refuses hard links (the power-loss tests' FUSE file system,
vfat) still gets its hub identity, made as atomically and exclusively, by renameat2(RENAME_NOREPLACE)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from logport.store import identity
from logport.store.identity import FILE_NAME, ensure_hub_identity, read_hub_identity


def refuse_links(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    tried: list[str] = []

    def link(source: os.PathLike[str], name: os.PathLike[str]) -> None:
        tried.append(os.fspath(name))
        raise PermissionError(errno.EPERM, "Operation not permitted", os.fspath(source))

    monkeypatch.setattr(identity.os, "link", link)
    return tried


def test_an_identity_is_made_where_hard_links_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tried = refuse_links(monkeypatch)
    made = ensure_hub_identity(tmp_path)
    assert tried == [str(tmp_path / FILE_NAME)]
    assert read_hub_identity(tmp_path) == made
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME]  # no temporary file left
    assert ensure_hub_identity(tmp_path) == made


def test_the_identity_another_process_made_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name appears between the check and the rename (another process won): its identity is kept,
    not replaced, and the temporary file goes."""
    refuse_links(monkeypatch)
    winner = "0f0e0d0c-0b0a-4908-8706-050403020100"
    real_read = identity.read_hub_identity
    calls = []

    def read(data_dir: str | os.PathLike[str]) -> str | None:
        calls.append(1)
        if len(calls) == 1:  # the first look finds none; then the other process writes its own
            (Path(data_dir) / FILE_NAME).write_text(winner + "\n")
            return None
        return real_read(data_dir)

    monkeypatch.setattr(identity, "read_hub_identity", read)
    assert ensure_hub_identity(tmp_path) == winner
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME]


def test_another_refusal_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_links(monkeypatch)
    with pytest.raises(OSError, match=r"hub-id \(the file system refused a hard link: Operation not permitted\)"):
        identity._rename_noreplace(tmp_path / "absent", tmp_path / FILE_NAME,
                                   PermissionError(errno.EPERM, "Operation not permitted"))
