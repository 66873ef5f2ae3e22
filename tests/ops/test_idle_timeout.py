"""The one idle timeout every TCP listener's connections use (servers/_lifecycle.py `IdleTimeout`): quiet for
idle_timeout with nothing in flight closes; a byte, or something still being stored, puts it off; a reload
that sets idle_timeout to 0 turns it off for open connections; a closed connection's timer is cancelled."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from logport.servers._lifecycle import IdleTimeout

TIMEOUT = 0.5  # long beside the sleeps below, so that a loaded machine's late wake-ups do not count


@dataclass
class Section:
    idle_timeout: float = TIMEOUT


class Probe:
    def __init__(self, section: Section) -> None:
        self.busy = False
        self.expired_at: float | None = None
        self.idle = IdleTimeout(section, busy=lambda: self.busy, expire=self.expire)

    def expire(self) -> None:
        assert self.expired_at is None, "expired twice"
        self.expired_at = time.monotonic()


async def test_a_quiet_connection_is_closed_after_the_timeout_not_before() -> None:
    probe = Probe(Section())
    started = time.monotonic()
    probe.idle.start("127.0.0.1:1")
    await asyncio.sleep(TIMEOUT * 2)
    assert probe.expired_at is not None and probe.expired_at - started >= TIMEOUT


async def test_activity_puts_it_off() -> None:
    probe = Probe(Section())
    probe.idle.start("127.0.0.1:1")
    last = time.monotonic()
    for _ in range(8):  # a byte every fifth of the timeout: never quiet for a whole one
        await asyncio.sleep(TIMEOUT / 5)
        assert probe.expired_at is None
        probe.idle.touch()
        last = time.monotonic()
    await asyncio.sleep(TIMEOUT * 2)
    assert probe.expired_at is not None and probe.expired_at - last >= TIMEOUT


async def test_a_connection_storing_what_it_received_is_not_idle() -> None:
    probe = Probe(Section())
    probe.busy = True
    probe.idle.start("127.0.0.1:1")
    await asyncio.sleep(TIMEOUT * 2.5)
    assert probe.expired_at is None
    probe.busy = False
    await asyncio.sleep(0.5)  # the next look (at most 0.05 s after the timeout passed) closes it
    assert probe.expired_at is not None


@pytest.mark.parametrize("how", ["cancelled", "turned off by a reload", "never on"])
async def test_no_close_when_off_or_cancelled(how: str) -> None:
    section = Section(idle_timeout=0.0 if how == "never on" else TIMEOUT)
    probe = Probe(section)
    probe.idle.start("127.0.0.1:1")
    if how == "cancelled":
        probe.idle.cancel()
    elif how == "turned off by a reload":
        section.idle_timeout = 0.0
    await asyncio.sleep(TIMEOUT * 2.5)
    assert probe.expired_at is None
