"""The atheris targets in fuzz/, run without atheris on a fixed budget: their seeds, mutations of the
seeds and random bytes (so the targets never rot), and the crashes atheris found (fuzz/regressions/).
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Callable
from types import ModuleType

import pytest

from tests.conftest import REPO

FUZZ = REPO / "fuzz"
TARGETS = ("forward", "lumberjack", "segment", "logjam", "batch")
RANDOM_INPUTS = 400
MUTATIONS = 20  # per seed

# crash inputs atheris found: file in fuzz/regressions/ -> (target, exception it raises, the bug)
KNOWN_BUGS: dict[str, tuple[str, str, str]] = {}
# crash file -> target, for bugs fixed since (each must stay fixed)
FIXED: dict[str, str] = {
    "forward-tag-invalid-utf8": "forward",  # a non-UTF-8 tag killed the store task: no ack, no close (0d23540)
    "batch-record-invalid-utf8": "batch",  # a non-UTF-8 record string crashed `logport cat` (0d23540)
    "batch-record-list-key": "batch",  # an array as a map key crashed `logport cat` (0d23540)
    "batch-entry-time-other-ext": "batch",  # an entry time of another ext type crashed `logport cat` (ad1bd3a)
    "forward-ping-int-username": "forward",  # a PING with an int username raised AttributeError in the handshake
}


def load(name: str) -> ModuleType:
    if str(FUZZ) not in sys.path:
        sys.path.insert(0, str(FUZZ))
    return importlib.import_module(f"fuzz_{name}")


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(4)
        if op == 0 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif op == 1:
            out.insert(rng.randrange(len(out) + 1), rng.randrange(256))
        elif op == 2 and out:
            del out[rng.randrange(len(out))]
        elif out:
            i = rng.randrange(len(out))
            out[i:i] = out[i : i + rng.randint(1, 16)]  # repeat a slice: duplicated headers, lengths
    return bytes(out)


def failures(test_one_input: Callable[[bytes], None], inputs: list[bytes]) -> list[tuple[bytes, Exception]]:
    out = []
    for data in inputs:
        try:
            test_one_input(data)
        except Exception as e:
            out.append((data, e))
    return out


def describe(found: list[tuple[bytes, Exception]]) -> str:
    return "; ".join(f"input {data.hex()} raised {type(e).__name__}: {e}" for data, e in found[:3])


@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_target_seeds_mutations_and_random_bytes(name: str) -> None:
    module = load(name)
    seeds = list(module.seeds())
    assert seeds, f"fuzz_{name} has no seeds"
    rng = random.Random(name)
    inputs = seeds + [mutate(rng, s) for s in seeds for _ in range(MUTATIONS)]
    inputs += [rng.randbytes(rng.randint(0, 512)) for _ in range(RANDOM_INPUTS)]
    found = failures(module.test_one_input, inputs)
    # a bug shows in every target that reaches its code (the forward target decodes the batches it makes)
    known = {exc: reason for _, exc, reason in KNOWN_BUGS.values()}
    unknown = [(d, e) for d, e in found if type(e).__name__ not in known]
    assert not unknown, describe(unknown)
    if found:  # only the bugs already listed in KNOWN_BUGS: say so instead of failing again
        pytest.xfail("known bugs: " + " | ".join(sorted({known[type(e).__name__] for _, e in found})))


@pytest.mark.parametrize("crash", [
    *(pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason))
      for name, (_, _, reason) in KNOWN_BUGS.items()),
    *FIXED,
])
def test_fuzz_regression(crash: str) -> None:
    """A crash input atheris found may only raise the protocol's own error. Once a bug is fixed its
    case XPASSes (strict): move it from KNOWN_BUGS to FIXED so it stays a plain regression test."""
    target = KNOWN_BUGS[crash][0] if crash in KNOWN_BUGS else FIXED[crash]
    found = failures(load(target).test_one_input, [(FUZZ / "regressions" / crash).read_bytes()])
    assert not found, describe(found)


def test_every_regression_file_is_listed() -> None:
    assert {p.name for p in (FUZZ / "regressions").iterdir()} == set(KNOWN_BUGS) | set(FIXED)
