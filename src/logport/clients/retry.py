"""How every client waits between attempts to reach its peer: one back-off policy.

`Backoff` says how (the first wait, its cap, the jitter, when to give up); `Retrying` is one run of failures
under it, asked after each failure how long to wait before the next attempt, or whether it is time to give up.
The Forward, Lumberjack and segment clients, the Forward output and the Spark source's hub connections use it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

# the jitter of the clients' reconnects: clients that lost their hub together (a restart) spread their next
# attempts over the last fifth of each wait, rather than all coming back at once
JITTER = 0.2


@dataclass(frozen=True)
class Backoff:
    """Waits that double from `initial` up to `cap` seconds, each cut by up to `jitter` of itself at random (so
    that clients that lost their server together do not all come back together), after the first `immediate`
    failures, which are retried at once (a failover to another server); no attempt once the failures have
    lasted `give_up_after` seconds (None: never give up)."""

    initial: float
    cap: float
    jitter: float = 0.0
    give_up_after: float | None = None
    immediate: int = 0

    def wait(self, failures: int) -> float:
        """The wait after the `failures`-th failure in a row (1, 2, ...), before jitter."""
        if failures <= self.immediate:
            return 0.0
        return min(self.initial * 2.0 ** (failures - self.immediate - 1), self.cap)

    def retrying(self, *, from_now: bool = False, clock: Callable[[], float] = time.monotonic) -> Retrying:
        """A run of failures under this policy; its give-up time counts from the first failure, or with
        `from_now` from this call (a caller that counts its time from its first attempt)."""
        return Retrying(self, clock() if from_now else None, clock)


class Retrying:
    """One run of failed attempts: `failed()` after each, `succeeded()` once one worked (the next failure starts
    a new run)."""

    __slots__ = ("policy", "failures", "since", "_clock")

    def __init__(self, policy: Backoff, since: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.failures = 0
        self.since = since  # when the run began (its first failure, or the caller's first attempt)
        self._clock = clock

    def failed(self) -> float | None:
        """One more failure: the seconds to wait before the next attempt, at most until the give-up time (the
        last attempt comes when the time is up, not a wait after it); None when the time is up."""
        now = self._clock()
        if self.since is None:
            self.since = now
        self.failures += 1
        policy = self.policy
        wait = policy.wait(self.failures)
        if policy.jitter and wait:
            wait -= wait * policy.jitter * random.random()
        if policy.give_up_after is not None:
            left = self.since + policy.give_up_after - now
            if left <= 0:
                return None
            wait = min(wait, left)
        return wait

    def succeeded(self) -> None:
        """An attempt worked: the next failure waits `initial` again, and its give-up time counts afresh."""
        self.failures = 0
        self.since = None

    def restart_clock(self) -> None:
        """The give-up time counts from the next failure, while the waits go on growing (a peer that takes every
        connection only to refuse what it is sent)."""
        self.since = None
