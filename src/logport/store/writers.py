"""Exactly-once appends: each writer's stored offset, the offsets that commits still on their way claim,
and the check of a batch of appends against both (duplicates answered, gaps refused)."""

from __future__ import annotations

import collections

from logport.errors import WriterOffsetMismatch
from logport.store.appends import AppendResult, CommitGroup, PendingAppend, fail, resolve


class WriterState:
    """`stored` is set by the writer thread as it writes (fsync'd under fsync=always) and read by the loop;
    `ahead` (the claims of groups staged or being written) is the loop's alone."""

    def __init__(self, segment: str, limit: int) -> None:
        self.segment = segment
        self.limit = limit  # writers kept, most recent first (store.writer_state_limit)
        self.stored: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.ahead: dict[bytes, int] = {}

    def load(self, writers: dict[bytes, int]) -> None:
        """The state recovery found (the last writer table and the writer records after it)."""
        self.stored = collections.OrderedDict(writers)

    def offset(self, key: bytes) -> int:
        return self.stored.get(key, 0)

    def check(self, batch: list[PendingAppend], end: int) -> CommitGroup:
        """Check writer conditions against the stored offsets and the claims of groups not yet written:
        duplicates are answered now (at the segment's `end`), gaps refused, the rest make the group."""
        group = CommitGroup(batch)
        claimed = group.claimed
        for p in batch:
            w = p.writer
            if w is not None:
                stored = self.stored.get(w.key, 0)
                if w.end <= stored:  # stored already, whatever this group does
                    resolve(p, AppendResult(end, end, True, stored))
                    continue
                current = claimed[w.key] if w.key in claimed else self.ahead.get(w.key, stored)
                if w.end <= current:  # repeats an append still on its way: its fate is that one's
                    group.retries.append(p)
                    continue
                if w.start is not None and w.start != current:
                    fail([p], WriterOffsetMismatch(self.segment, w.key, current, w.start))
                    continue
                claimed[w.key] = w.end
            group.accepted.append(p)
        self.ahead.update(claimed)
        return group

    def written(self, groups: list[CommitGroup]) -> None:
        """In the writer thread, once groups are written: their claims are stored offsets (before the next
        group's chunk roll writes the table)."""
        for group in groups:
            for key, value in group.claimed.items():
                self.stored[key] = value
                self.stored.move_to_end(key)
        while len(self.stored) > self.limit:
            self.stored.popitem(last=False)

    def settled(self, group: CommitGroup) -> None:
        """On the loop, as a written group is answered: its claims are no longer ahead of the stored state."""
        for key, value in group.claimed.items():
            if self.ahead.get(key) == value:
                del self.ahead[key]

    def table(self, claimed: dict[bytes, int]) -> dict[bytes, int]:
        """The writers a new chunk's table holds: the stored ones with `claimed` (a commit's so far) over them,
        the most recent `limit`."""
        writers = {**self.stored, **claimed}
        if len(writers) <= self.limit:
            return writers
        return dict(list(writers.items())[-self.limit :])
