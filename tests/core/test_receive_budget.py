"""servers/_lifecycle.py's ReceiveBudget: when a listener's connections stop and start reading again (their own
limit, the listener's total, resuming at half of each), as the Forward, segment and Lumberjack listeners use it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from logport.servers._lifecycle import BUDGET, ReadGate, ReceiveBudget


class Conn:
    def __init__(self) -> None:
        self.gate = ReadGate(None)
        self.holding = 0

    def held(self) -> int:
        return self.holding

    @property
    def reading(self) -> bool:
        return not self.gate.holds(BUDGET)


def receive(budget: ReceiveBudget, conn: Conn, n: int) -> None:
    conn.holding += n
    budget.held += n
    budget.check(conn)


def store(budget: ReceiveBudget, conn: Conn, n: int) -> None:
    conn.holding -= n
    budget.held -= n
    budget.relieve(conn)


@pytest.mark.parametrize(("steps", "reading"), [
    ([100], True),  # at its limit: still reading
    ([101], False),  # over it
    ([101, -50], False),  # 51: over half
    ([101, -51], True),  # 50: half, reading again
], ids=["at the limit", "over", "over half", "back at half"])
def test_a_connection_pauses_over_its_limit_and_resumes_at_half(steps: list[int], reading: bool) -> None:
    budget = ReceiveBudget(100)
    conn = Conn()
    for n in steps:
        (receive if n > 0 else store)(budget, conn, abs(n))
    assert conn.reading is reading


def test_the_listeners_total_pauses_every_connection_until_it_is_at_half() -> None:
    pauses = Counter("pauses", "", registry=CollectorRegistry())
    budget = ReceiveBudget(100, 150, pauses=pauses)
    a, b, c = Conn(), Conn(), Conn()
    receive(budget, a, 60)
    receive(budget, b, 60)
    assert a.reading and b.reading
    receive(budget, c, 40)  # 160 in all, each under its own 100
    assert not c.reading and budget.paused == {c}
    receive(budget, a, 10)  # a reads once more, and finds the listener over
    assert not a.reading and budget.paused == {a, c}
    store(budget, b, 60)  # 110: under the limit, not yet at half
    assert not a.reading and not c.reading
    store(budget, a, 70)  # 40: under half; c has stored nothing, yet reads again with the rest
    assert a.reading and c.reading and not budget.paused
    assert pauses._value.get() == 2


def test_windows_pause_at_a_count_and_resume_at_another() -> None:
    budget = ReceiveBudget(3, resume=1)  # Lumberjack: 4 windows being decoded or stored pause, 1 resumes
    conn = Conn()
    for _ in range(3):
        receive(budget, conn, 1)
    assert conn.reading
    receive(budget, conn, 1)
    assert not conn.reading
    store(budget, conn, 2)
    assert not conn.reading
    store(budget, conn, 1)
    assert conn.reading


def test_new_limits_apply_from_the_next_check_and_a_forgotten_connection_is_not_kept() -> None:
    budget = ReceiveBudget(100, 1000)
    conn = Conn()
    receive(budget, conn, 80)
    budget.set_limits(50, 1000)
    receive(budget, conn, 1)
    assert not conn.reading and budget.paused == {conn}
    budget.forget(conn)
    assert not budget.paused
