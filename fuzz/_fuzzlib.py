"""Shared plumbing of the atheris targets: split an input into receive_data pieces, seed a corpus, run.

Each target defines `test_one_input(data: bytes)` (feed arbitrary bytes to one decoder
and accept only that protocol's own errors) and `seeds()` (valid inputs to start from).
`run(...)` hands them to atheris; `tests/hostile/test_fuzz_targets.py` runs the same
functions over the seeds and random bytes in CI so the targets never rot.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

FUZZ_DIR = Path(__file__).resolve().parent
VECTORS = FUZZ_DIR.parent / "tests" / "vectors"
MAX_EVENTS = 10_000  # a decoder that yields more events than this from one input is stuck in a loop


def instrumented() -> contextlib.AbstractContextManager[object]:
    """atheris' coverage instrumentation for the imports in the block, if atheris is installed
    (the CI smoke test runs the targets without it)."""
    main = Path(getattr(sys.modules.get("__main__"), "__file__", None) or ".").resolve()
    if main.parent != FUZZ_DIR:  # imported by a test, not run as a fuzzer: leave the modules alone
        return contextlib.nullcontext()
    try:
        import atheris
    except ImportError:
        return contextlib.nullcontext()
    return atheris.instrument_imports()  # type: ignore[no-any-return]


def pieces(data: bytes) -> Iterator[bytes]:
    """The input after its first byte, cut into pieces of a size the first byte picks (1..256 bytes):
    the decoder must give the same answers however the stream is split."""
    if not data:
        return
    size = data[0] + 1
    rest = data[1:]
    for i in range(0, len(rest), size):
        yield rest[i : i + size]


def vector_stream(name: str, direction_prefix: str) -> bytes:
    """One direction of a recorded conversation in tests/vectors, concatenated."""
    path = VECTORS / name
    conversation = json.loads(path.read_text())["conversation"]
    return b"".join(bytes.fromhex(e["hex"]) for e in conversation
                    if "hex" in e and str(e["dir"]).startswith(direction_prefix))


def drain(next_event: Callable[[], object], need_data: object) -> Iterator[object]:
    """Events until NEED_DATA, failing loudly on a decoder that never stops."""
    for _ in range(MAX_EVENTS):
        event = next_event()
        if event is need_data:
            return
        yield event
    raise AssertionError(f"decoder produced {MAX_EVENTS} events from one input without asking for data")


def run(name: str, test_one_input: Callable[[bytes], None], seeds: Callable[[], Iterable[bytes]]) -> None:
    """`python fuzz/fuzz_<name>.py [libFuzzer options] [CORPUS_DIR ...]`: seeds the first corpus directory
    (default fuzz/corpus/<name>/) when it is empty, then fuzzes. A file argument replays that input."""
    import atheris

    args = list(sys.argv)
    paths = [a for a in args[1:] if not a.startswith("-")]
    if not paths:
        corpus = FUZZ_DIR / "corpus" / name
        args.append(str(corpus))
    else:
        corpus = Path(paths[0])
    if not corpus.is_file() and (not corpus.is_dir() or not any(corpus.iterdir())):
        corpus.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds()):
            (corpus / f"seed-{i:03d}").write_bytes(seed)
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()
