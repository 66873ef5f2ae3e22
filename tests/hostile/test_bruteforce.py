"""Brute force against a hub process. Forward shared key and segment token: every wrong one is refused and
logged with the peer, and a peer that keeps guessing is rate-limited (a burst of tries, then a trickle).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.chaos.harness import HubProcess
from tests.hostile.peers import forward_handshake

SHARED_KEY = "s3cret-shared-key"
GUESSES = 60
# what a rate limit must hold a guesser at within the first seconds: the guard's default burst (10)
# plus what it earns back meanwhile; without a limit all GUESSES are evaluated at once
MAX_EVALUATED = 20
QUICK = 0.5  # seconds: an answer faster than this counts as an evaluated guess (not tarpitted)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    process = HubProcess(tmp_path_factory.mktemp("hostile-brute"), ("forward",),
                         settings={"forward": {"shared_key": SHARED_KEY}})
    asyncio.run(process.start())
    yield process
    process.stop()


def log_records(hub: HubProcess) -> list[dict[str, object]]:
    out = []
    for line in hub.log_lines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def guess(hub: HubProcess, count: int) -> list[tuple[str, float]]:
    results = []
    for i in range(count):
        began = time.monotonic()
        results.append((forward_handshake(hub.ports["forward"], f"wrong-{i}", timeout=5.0),
                        time.monotonic() - began))
    return results


def test_right_key_accepted_wrong_keys_refused_and_logged(hub: HubProcess) -> None:
    assert forward_handshake(hub.ports["forward"], SHARED_KEY) == "accepted"
    results = guess(hub, 5)
    assert {outcome for outcome, _ in results} <= {"refused", "helo-refused"}
    deadline = time.monotonic() + 5
    while True:  # the log line may follow the PONG by a moment
        refusals = [r for r in log_records(hub) if r.get("logger") == "logport.forward"
                    and r.get("level") == "warning" and "refused" in str(r.get("msg"))
                    and str(r.get("peer", "")).startswith("127.0.0.1:")]
        if len(refusals) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(refusals) >= 5, f"wrong keys not logged with the peer: {refusals}"


def test_wrong_key_guessing_is_rate_limited_and_logged(hub: HubProcess) -> None:
    began = time.monotonic()
    results = guess(hub, GUESSES)
    elapsed = time.monotonic() - began
    evaluated = sum(1 for outcome, seconds in results if outcome == "refused" and seconds < QUICK)
    assert all(outcome != "accepted" for outcome, _ in results)
    assert evaluated <= MAX_EVALUATED, (
        f"{evaluated} of {GUESSES} wrong shared keys were checked at full speed in {elapsed:.1f}s: no rate limit"
    )
    time.sleep(0.5)  # let the log catch up
    limited = [r for r in log_records(hub) if r.get("logger") == "logport.forward"
               and ("too many" in str(r.get("msg")) or "rate" in str(r.get("msg")))]
    assert limited and all("peer" in r for r in limited), "rate limiting not logged with the peer"
    outcomes = {o: sum(1 for r, _ in results if r == o) for o in ("refused", "helo-refused")}
    print(f"\nbrute force: {GUESSES} wrong keys in {elapsed:.2f}s: {evaluated} evaluated, {outcomes}; "
          f"{len(limited)} rate-limit log lines")


SEGMENT_TOKEN = "segment-token"


def segment_token_try(port: int, token: str) -> str:
    """Authenticate with `token` on a fresh connection: "accepted", "refused", or "closed" (no answer)."""
    from logport.protocols import segment as sp

    conn = sp.Connection(sp.Role.CLIENT)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(conn.send(sp.Authenticate(token)))
            while True:
                data = sock.recv(65536)
                if not data:
                    return "closed"
                conn.receive_data(data)
                event = conn.next_event()
                if event is sp.NEED_DATA:
                    continue
                return "accepted" if isinstance(event, sp.Authenticated) else "refused"
    except (ConnectionError, OSError):
        return "closed"


async def test_segment_token_guessing_is_rate_limited(tmp_path_factory: pytest.TempPathFactory) -> None:
    process = HubProcess(tmp_path_factory.mktemp("hostile-token"), ("segment",),
                         settings={"segment": {"token": SEGMENT_TOKEN}})
    await process.start()
    try:
        port = process.ports["segment"]
        assert await asyncio.to_thread(segment_token_try, port, SEGMENT_TOKEN) == "accepted"
        results = [await asyncio.to_thread(segment_token_try, port, f"wrong-{i}") for i in range(GUESSES)]
    finally:
        process.stop()  # after it the log holds every line
    assert "accepted" not in results
    refused = results.count("refused")
    assert refused <= MAX_EVALUATED, f"{refused} of {GUESSES} wrong tokens were checked at full speed: no rate limit"
    segment_log = [r for r in log_records(process) if r.get("logger") == "logport.segment"
                   and r.get("level") == "warning" and str(r.get("peer", "")).startswith("127.0.0.1:")]
    failed = [r for r in segment_log if r.get("msg") == "authentication failed" and r.get("reason") == "wrong token"]
    assert refused <= len(failed) <= GUESSES, f"{refused} wrong tokens refused, {len(failed)} logged with the peer"
    limited = [r for r in segment_log if "too many failures" in str(r.get("msg"))]
    assert limited, "rate limiting of token guesses not logged with the peer"
