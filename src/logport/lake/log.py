"""The lake's commit log: which Parquet files each table holds.

A batch (one `logport pipeline batch` run, or one micro-batch of a streaming run) writes its files, then commits
them with one entry `OUT/_log/<batch id, 20 digits>.json`, written to a temporary name, synced and renamed. A table
holds the files of every committed entry, less those a later entry `replaces` (compaction). Files no entry lists
were left by a batch that did not commit; the batch's retry removes them, and readers never read them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logport.errors import LogportError

LOG_DIR = "_log"
LAKE_FILE = "_lake.json"
FORMAT = 1


class LakeError(LogportError):
    """A lake directory that cannot be read or written as one (names the path and what is wrong)."""


@dataclass
class Entry:
    """One committed batch: its id, the files it added per table (paths relative to the lake), the files it
    replaces, and what the writer wants to remember (offsets read, the largest event time seen, counts)."""

    batch: int
    files: dict[str, list[str]]
    replaces: dict[str, list[str]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "files": self.files, "replaces": self.replaces, **self.info}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        info = {k: v for k, v in data.items() if k not in ("batch", "files", "replaces")}
        return cls(int(data["batch"]), data.get("files") or {}, data.get("replaces") or {}, info)


class LakeLog:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.dir = self.root / LOG_DIR

    def _path(self, batch: int) -> Path:
        return self.dir / f"{batch:020d}.json"

    def entries(self) -> Iterator[Entry]:
        """Committed entries, oldest first."""
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("[0-9]" * 20 + ".json")):
            try:
                yield Entry.from_json(json.loads(path.read_bytes()))
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise LakeError(f"lake {str(self.root)!r}: commit log entry {path.name} cannot be read ({e})") from None

    def last(self) -> Entry | None:
        last = None
        for last in self.entries():  # noqa: B007
            pass
        return last

    def is_committed(self, batch: int) -> bool:
        return self._path(batch).exists()

    def files(self, table: str) -> list[Path]:
        """The table's committed files, absolute, in commit order."""
        held: dict[str, None] = {}
        for entry in self.entries():
            for name in entry.replaces.get(table, []):
                held.pop(name, None)
            for name in entry.files.get(table, []):
                held[name] = None
        return [self.root / name for name in held]

    def commit(self, entry: Entry) -> None:
        """Write the entry durably (temporary file, fsync, rename, fsync of the directory)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(entry.batch)
        if path.exists():
            raise LakeError(f"lake {str(self.root)!r}: batch {entry.batch} is committed already")
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(entry.to_json(), sort_keys=True).encode())
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_lake_info(root: str | Path) -> dict[str, Any] | None:
    """The lake's settings (`_lake.json`: format, time basis, resources), None where there is no lake yet."""
    path = Path(root) / LAKE_FILE
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LakeError(f"{str(path)!r} cannot be read ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LakeError(f"{str(path)!r}: not a logport lake of format {FORMAT} (found {data.get('format')!r})"
                        if isinstance(data, dict) else f"{str(path)!r}: not a logport lake")
    return data
