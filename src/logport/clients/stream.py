"""How every `logport send` takes stdin and stops: lines read by a thread (the event loop never waits on
input), handed on in batches that go out when full or once their first line has waited --flush-interval;
SIGINT and SIGTERM stop the reading, leave --drain-timeout for the acks, and end with one line that says
what was read, acknowledged and not, and the command that sends the rest."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from logport.clients.lines import count
from logport.errors import ConfigError, LogportError

READ_SIZE = 256 * 1024
QUEUED_READS = 16  # reads handed to the event loop and not taken yet; the reading thread waits beyond them
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal, as a shell reports a killed command


class InputDoesNotFit(LogportError):
    """The input is not what the command was told it is (a resume over other lines): exit 2, a usage error."""


class _End:
    """The input ended."""


END = _End()


class InputLines:
    """The lines of a file descriptor, read by a daemon thread: each read's whole lines go to the event loop as
    one list (without their newlines). os.read, not sys.stdin: a thread blocked in a buffered read holds the
    buffer's lock, and the interpreter's exit then aborts; a thread blocked in os.read only dies with it."""

    def __init__(self, fd: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[list[bytes] | _End | OSError] = asyncio.Queue()
        self._slots = threading.Semaphore(QUEUED_READS)
        threading.Thread(target=self._read, args=(fd,), daemon=True, name="logport-input").start()

    def _read(self, fd: int) -> None:
        rest: list[bytes] = []  # a line not ended yet, in the pieces read so far
        try:
            while data := os.read(fd, READ_SIZE):
                if b"\n" not in data:
                    rest.append(data)
                    continue
                lines = data.split(b"\n")
                if rest:
                    lines[0] = b"".join([*rest, lines[0]])
                    rest = []
                last = lines.pop()
                if last:
                    rest.append(last)
                self._slots.acquire()
                if not self._hand(lines):
                    return
            if rest:
                self._hand([b"".join(rest)])
            self._hand(END)
        except OSError as e:
            self._hand(e)

    def _hand(self, item: list[bytes] | _End | OSError) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the command is over
            return False
        return True

    async def get(self) -> list[bytes] | _End:
        item = await self._queue.get()
        if isinstance(item, OSError):
            raise item
        if isinstance(item, list):
            self._slots.release()
        return item


@dataclass
class SendProgress:
    """Lines of the input as a sender gets through them: what its summary line says."""

    skipped: int = 0  # the first lines, left out (--skip-lines)
    read: int = 0  # the lines after them handed to the sender
    sent: int = 0  # of those, the lines sent (the server may have them)
    acked: int = 0  # of those, the lines from the first on that the server acknowledged
    refresh: Callable[[], None] | None = None  # brings `acked` up to date (a sender that counts acks in bytes)

    def summary(self) -> str:
        if self.refresh is not None:
            self.refresh()
        skipped = f" after the {count(self.skipped, 'line')} skipped" if self.skipped else ""
        return (f"{count(self.read, 'line')} read{skipped}, {self.acked:,} acknowledged, "
                f"{self.read - self.acked:,} not acknowledged")


class SenderInput:
    """stdin as a sender takes it: `batches()`, which ends early once `stop()` was called."""

    def __init__(self, lines: InputLines, progress: SendProgress, *, interval: float, skip: int) -> None:
        self.lines = lines
        self.progress = progress
        self.interval = interval
        self.skip = skip
        self._stopped = asyncio.get_running_loop().create_future()

    def stop(self) -> None:
        if not self._stopped.done():
            self._stopped.set_result(None)

    async def batches(self, max_lines: int, max_bytes: int | None = None) -> AsyncIterator[list[bytes]]:
        """Lists of up to `max_lines` lines (and about `max_bytes`): one goes out when full, once its first line
        has waited the flush interval, at the end of the input, and (with what is gathered) on stop()."""
        loop = asyncio.get_running_loop()
        pending: list[bytes] = []
        size = 0
        due: float | None = None  # when the pending lines go out
        while not self._stopped.done():
            getting = asyncio.ensure_future(self.lines.get())
            timeout = None if due is None else max(0.0, due - loop.time())
            await asyncio.wait((getting, self._stopped), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()  # asyncio.Queue.get gives nothing away when cancelled
                if pending:
                    yield self._hand_on(pending)
                    pending, size, due = [], 0, None
                continue
            item = getting.result()
            if isinstance(item, _End):
                break
            if self.skip:
                left_out = item[: self.skip]
                self.skip -= len(left_out)
                self.progress.skipped += len(left_out)
                item = item[len(left_out) :]
            for line in item:
                pending.append(line)
                size += len(line) + 1
                if len(pending) >= max_lines or (max_bytes is not None and size >= max_bytes):
                    yield self._hand_on(pending)
                    pending, size, due = [], 0, None
            if pending and due is None:
                due = loop.time() + self.interval
        if pending:
            yield self._hand_on(pending)

    def _hand_on(self, batch: list[bytes]) -> list[bytes]:
        self.progress.read += len(batch)
        return batch


class Waiting:
    """Says once per server that the command waits for it: a server that does not answer is otherwise retried
    in silence for the whole --timeout. `waiting` is True from that line until `over()` (the wait ended)."""

    def __init__(self, command: str, timeout: float | None) -> None:
        self.command = command
        self.timeout = timeout
        self.waiting = False
        self._told: set[str] = set()

    def __call__(self, peer: str, reason: str) -> None:
        if peer in self._told:
            return
        self._told.add(peer)
        self.waiting = True
        until = f", giving up after {self.timeout:g} s" if self.timeout else ""
        print(f"{self.command}: waiting for {peer} (Ctrl-C to stop{until}): {reason}", file=sys.stderr, flush=True)

    def over(self) -> None:
        self.waiting = False


SendLines = Callable[[SenderInput, SendProgress], Coroutine[Any, Any, str]]


@dataclass
class Sender:
    """One `logport send <protocol>`: its coroutine (the line it ends with) and how it is resumed."""

    command: str  # "logport send forward"
    send: SendLines
    resume: Callable[[SendProgress], list[str] | None]  # options that send the rest, None: nothing to resume
    resume_says: str = "to send the rest"
    exactly_once: bool = False  # a resume stores nothing twice, whatever was in flight
    stopped_by: list[int] = field(default_factory=list)


def skip_acknowledged(progress: SendProgress) -> list[str] | None:
    """The resume of a sender that cannot tell the server what it stored: the same input, without the lines
    acknowledged (and those skipped before); None when that is the input as it was."""
    done = progress.skipped + progress.acked
    return ["--skip-lines", str(done)] if done else None


def resume_command(argv: list[str], replace: dict[str, str]) -> str:
    """`logport ARGV` with each option of `replace` set to its value (added, or in place of the one given)."""
    out: list[str] = []
    skip_next = False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        name = arg.split("=", 1)[0]
        if name in replace:
            skip_next = "=" not in arg
            continue
        out.append(arg)
    for option, value in replace.items():
        out += [option, value]
    return "logport " + shlex.join(out)


def run_sender(make: Callable[[], Sender], args: argparse.Namespace) -> int:
    """Run the sender `make` sets up (ConfigError: a wrong flag) over stdin: 0 when all was acknowledged; 1 on an
    error (2: a wrong command, or an input that does not fit), 130 or 143 when stopped by SIGINT or SIGTERM;
    each with one line on stderr."""
    try:
        sender = make()
    except ConfigError as e:  # before anything is read
        print(f"logport send {args.protocol}: {e}", file=sys.stderr)
        return 2
    progress = SendProgress()
    try:
        done = asyncio.run(_run(sender, args, progress))
    except InputDoesNotFit as e:
        print(f"{sender.command}: {e}", file=sys.stderr)
        return 2
    except (LogportError, OSError) as e:
        # an error that says the server was never reached: none of what was sent can be stored
        reached = getattr(e, "connected", True)
        print(f"{sender.command}: {e}; {_account(sender, args, progress, reached)}", file=sys.stderr)
        return 1
    if sender.stopped_by:
        signum = sender.stopped_by[0]
        print(f"{sender.command}: stopped by {signal.Signals(signum).name}: {_account(sender, args, progress)}",
              file=sys.stderr)
        return EXIT_CODES[signal.Signals(signum)]
    print(done, file=sys.stderr)
    return 0


def _account(sender: Sender, args: argparse.Namespace, progress: SendProgress, reached: bool = True) -> str:
    """What was read, acknowledged and not; what may be stored anyway; the command that sends the rest."""
    text = progress.summary()
    if reached and not sender.exactly_once and progress.sent > progress.acked:
        text += (f" (the last {progress.sent - progress.acked:,} went out without an acknowledgement: what of "
                 f"them the server stored, a resume sends again)")
    options = sender.resume(progress) if progress.read > progress.acked or sender.stopped_by else None
    if options:
        replace = dict(zip(options[::2], options[1::2], strict=True))
        text += f"; {sender.resume_says}: {resume_command(getattr(args, 'argv', []), replace)} < the same input"
    return text


async def _run(sender: Sender, args: argparse.Namespace, progress: SendProgress) -> str:
    loop = asyncio.get_running_loop()
    source = SenderInput(InputLines(sys.stdin.fileno()), progress, interval=args.flush_interval,
                         skip=getattr(args, "skip_lines", 0))
    job = loop.create_task(sender.send(source, progress))

    def stop(signum: int) -> None:
        if sender.stopped_by:  # a second signal: stop waiting for acks
            job.cancel()
            return
        sender.stopped_by.append(signum)
        source.stop()
        loop.call_later(max(args.drain_timeout, 0.0), job.cancel)

    for signum in EXIT_CODES:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await job
    except asyncio.CancelledError:
        if not sender.stopped_by or not job.cancelled():
            raise
        return ""
    finally:
        for signum in EXIT_CODES:
            loop.remove_signal_handler(signum)
