"""Follow a segment from a durable checkpoint: the part every output shares.

An output reads `next_batch()`, sends it, waits for the peer's acknowledgement,
then calls `commit(batch.next_offset)`. After a crash it resumes from the last
commit, so what was not acknowledged is sent again (at-least-once; a peer that
deduplicates, such as logport's own Forward server, makes it exactly-once).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logport.errors import DataGivenUp, OffsetTruncated
from logport.store import SegmentStore, frames
from logport.store.files import fsync_dir

CHECKPOINT_DIR = "outputs"

log = logging.getLogger("logport.outputs")


@dataclass(frozen=True, slots=True)
class FollowBatch:
    offset: int  # offset of the first frame read
    next_offset: int  # where the next read starts; commit this once the batch is acknowledged
    events: list[tuple[int, bytes]]  # (offset, body) of each Event frame


class SegmentFollower:
    def __init__(self, store: SegmentStore, segment: str, name: str, *, max_bytes: int = 1 << 20) -> None:
        self.store = store
        self.segment = segment
        self.name = name
        self.max_bytes = max_bytes
        directory = Path(store.config.data_dir) / CHECKPOINT_DIR
        self.path = directory / f"{name}.checkpoint"
        self.identity_path = directory / f"{name}.id"
        self.checkpoint = self._load()
        self.position = self.checkpoint  # read position (ahead of the checkpoint while in flight)
        self.on_commit: Callable[[], None] | None = None  # told after each checkpoint (outputs/lag.py)

    def _load(self) -> int:
        try:
            return int(self.path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0

    async def next_batch(self, wait: float = 1.0) -> FollowBatch | None:
        """The next frames after `position` (None if nothing arrived within `wait` seconds)."""
        await self.store.create(self.segment)
        try:
            result = await self.store.read_frames(self.segment, self.position, self.max_bytes, wait=wait)
        except OffsetTruncated as e:
            # retention removed what we had not sent yet: skip to what is left, and say so
            self.position = e.start_offset
            raise
        except DataGivenUp as e:  # an operator gave the range up (`logport verify --repair`): not sent, said
            log.warning("%s", e, extra={"output": self.name})
            self.position = e.end
            return None
        if not result.data:
            return None
        events = [(off, bytes(body)) for off, t, body in frames.iter_frames(result.data, result.offset)
                  if t == frames.EVENT]
        batch = FollowBatch(result.offset, result.next_offset, events)
        self.position = batch.next_offset
        return batch

    def rewind(self) -> None:
        """Go back to the checkpoint (after a failed send: everything unacknowledged is sent again)."""
        self.position = self.checkpoint

    async def commit(self, next_offset: int) -> None:
        """Durably record that everything before `next_offset` was acknowledged."""
        await asyncio.get_running_loop().run_in_executor(None, self._save, next_offset)
        self.checkpoint = next_offset
        if self.on_commit is not None:
            self.on_commit()

    def _save(self, offset: int) -> None:
        _write_durably(self.path, self.path.with_suffix(".tmp"), str(offset))

    def identity(self) -> str:
        """This output's id, made once (random) and kept beside its checkpoint (`<name>.id`).

        It tells this output apart from any other with the same name: another hub's, or this hub's
        before its data directory was recreated. A restart reads the same id back.

        An output that has a checkpoint but no identity yet was run by a version without identities,
        whose Forward chunk ids hashed the output's name where they now hash its identity: it keeps its
        name as identity, so that its chunk ids stay the same and a batch the downstream acknowledged
        but the old version did not commit is resent as the retry it is, not as a new chunk.
        """
        try:
            identity = self.identity_path.read_text().strip()
        except FileNotFoundError:
            identity = ""
        if not identity:
            identity = self.name if self.path.exists() else secrets.token_hex(16)
            # ".id.new": no other output's file ends so (theirs end in .checkpoint, .tmp or .id)
            _write_durably(self.identity_path, self.identity_path.with_suffix(".id.new"), identity)
        return identity


def _write_durably(path: Path, tmp: Path, text: str) -> None:
    """Atomically: write a temporary file, fsync it, rename it over `path`, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
