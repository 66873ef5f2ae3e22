"""clients/retry.py: the one back-off policy of every client (the waits, the failover retried at once, the
jitter, the give-up time and what restarts it)."""

from __future__ import annotations

import pytest

from logport.clients.retry import Backoff, Retrying


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("policy", "waits"), [
    (Backoff(0.5, 30.0), [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),
    (Backoff(1.0, 1.0), [1.0, 1.0, 1.0]),
    (Backoff(0.05, 1.0), [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]),
    (Backoff(1.0, 30.0, immediate=1), [0.0, 1.0, 2.0, 4.0]),  # the Forward sender: the next server at once
    (Backoff(1.0, 30.0, immediate=2), [0.0, 0.0, 1.0, 2.0]),
], ids=["doubling to the cap", "flat", "spark source", "one immediate", "two immediate"])
def test_the_waits_double_from_initial_up_to_the_cap(policy: Backoff, waits: list[float]) -> None:
    clock = Clock()
    retry = policy.retrying(clock=clock)
    assert [retry.failed() for _ in waits] == waits
    assert [policy.wait(n) for n in range(1, len(waits) + 1)] == waits


def test_jitter_cuts_each_wait_by_at_most_its_share() -> None:
    policy = Backoff(1.0, 8.0, jitter=0.2)
    for failures in range(1, 6):
        full = policy.wait(failures)
        seen = [Retrying(policy) for _ in range(200)]
        for retry in seen:
            retry.failures = failures - 1
        cut = [retry.failed() for retry in seen]
        assert all(c is not None and full * 0.8 <= c <= full for c in cut)
        assert len(set(cut)) > 1  # not the same wait for every client


@pytest.mark.parametrize(("from_now", "spent", "expected"), [
    (False, 0.0, 0.5),  # the first failure starts the clock: the whole give-up time is left
    (True, 9.0, None),  # counted from the caller's first attempt: 9 s of 5 are spent
    (True, 4.8, pytest.approx(0.2)),  # the last attempt comes when the time is up, not a wait after it
])
def test_the_give_up_time(from_now: bool, spent: float, expected: float | None) -> None:
    clock = Clock()
    retry = Backoff(0.5, 30.0, give_up_after=5.0).retrying(from_now=from_now, clock=clock)
    clock.now += spent
    assert retry.failed() == expected


def test_gives_up_once_the_failures_lasted_the_time() -> None:
    clock = Clock()
    retry = Backoff(1.0, 30.0, give_up_after=5.0).retrying(clock=clock)
    waits = []
    while (wait := retry.failed()) is not None:
        waits.append(wait)
        clock.now += wait
    assert waits == [1.0, 2.0, 2.0] and clock.now == 105.0


def test_success_starts_afresh_and_restart_clock_keeps_the_waits_growing() -> None:
    clock = Clock()
    retry = Backoff(1.0, 30.0, give_up_after=5.0).retrying(clock=clock)
    assert [retry.failed(), retry.failed()] == [1.0, 2.0]
    clock.now += 4.0
    retry.succeeded()
    assert retry.failed() == 1.0  # the first wait again, and 5 s from now
    clock.now += 4.9
    assert retry.failed() == pytest.approx(0.1)
    retry.restart_clock()  # a peer that takes every connection only to refuse what it is sent
    clock.now += 1.0
    assert retry.failed() == 4.0  # the waits go on growing, the give-up time counts afresh
    clock.now += 5.0
    assert retry.failed() is None
