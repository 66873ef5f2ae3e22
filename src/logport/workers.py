"""Worker processes for a listener's CPU-bound decoding, so one connection is not held to the event loop's core.

The event loop stays the only writer of sockets and the store: a worker gets a
pure function and its arguments (bytes in, bytes out) and hands back the
result or the exception it raised. Workers are spawned, not forked, so they
hold none of the hub's sockets or store files, and on Linux they die with the
hub (PR_SET_PDEATHSIG): a killed hub leaves nothing behind that keeps a port or
a segment open.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from logport.errors import WorkerError, WorkerLost

log = logging.getLogger("logport.workers")
T = TypeVar("T")
_PR_SET_PDEATHSIG = 1


def _init_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the hub shuts us down
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the hub died before the line above took effect
        os._exit(0)


def _call(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """Run in the worker: an exception that would not survive the trip back (a broken pool) goes as its text."""
    try:
        return fn(*args)
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            raise WorkerError(f"{type(e).__name__}: {e}") from None
        raise


class WorkerPool:
    """`workers` spawned processes, started at the first call and again after one died."""

    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker; its exception is raised here. A worker that died raises WorkerLost."""
        if self._closed:
            raise WorkerLost(f"{self.name} worker pool is closed")
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=(os.getpid(),))
            log.info("decode workers starting", extra={"pool": self.name, "workers": self.workers})
        pool = self._pool
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, _call, fn, args)
        except BrokenProcessPool as e:
            if self._pool is pool:  # the first to see it replaces the pool; the others just report
                self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
                log.error("a decode worker died; starting new ones for the next call",
                          extra={"pool": self.name, "error": str(e)})
            raise WorkerLost(f"a {self.name} decode worker died ({e}); the data it had was not stored") from None

    def close(self) -> None:
        """Stop the workers without waiting: what they were given is dropped (never acknowledged)."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
