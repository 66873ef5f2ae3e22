"""`logport reload`: the hub's config checked as the hub will check it, then SIGHUP, then the hub's verdict.

The pid must be a `logport serve` (SIGHUP ends most other processes). Its command line (/proc/PID) names the
config file and the overrides, which are loaded and checked here first, in the hub's directory: a config the hub
would refuse is refused here, naming the key, and the hub is not signalled. With the metrics endpoint on, the
hub's logport_config_reloads_total then says whether it took the config (a port that is taken, say, only the hub
can tell). Where /proc cannot be read, the signal is sent unchecked, as before.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from logport.config import Config, ConfigError, load_config
from logport.tls import check_listener_tls

VERDICT_WAIT = 60.0  # seconds; a reload drains the outputs and listeners it changes (hub.shutdown_grace each)
RELOADS = re.compile(r'^logport_config_reloads_total\{result="(ok|failed)"\} ([0-9.e+]+)$', re.MULTILINE)


class NotAHub(Exception):
    """The pid is some other process."""


def reload_hub(pid: int | None, pid_file: str | None, build_parser: Callable[[], argparse.ArgumentParser]) -> int:
    say = "logport reload"
    if pid is None:
        try:
            pid = int(Path(str(pid_file)).read_text().strip())
        except (OSError, ValueError) as e:
            print(f"{say}: cannot read a pid from {pid_file!r}: {e}", file=sys.stderr)
            return 1
    try:
        serve, cwd = serve_arguments(pid, build_parser)
    except NotAHub as e:
        print(f"{say}: pid {pid} is not a logport hub ({e}); nothing sent", file=sys.stderr)
        return 1
    except FileNotFoundError:
        print(f"{say}: no process {pid} (is the hub running? a stale pid file?)", file=sys.stderr)
        return 1
    config = None
    if serve is not None:
        try:
            with working_directory(cwd):
                config = load_config(serve.config, data_dir=serve.data_dir, bind=serve.bind)
                check_listener_tls(config)
        except ConfigError as e:
            print(f"{say}: the hub would refuse its config, so it was not signalled and keeps the running one: {e}",
                  file=sys.stderr)
            return 1
    before = reload_counts(config)
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as e:
        print(f"{say}: cannot signal pid {pid}: {e.strerror or e}", file=sys.stderr)
        return 1
    if before is None:
        print(f"sent SIGHUP to logport (pid {pid}); its log says what changed")
        return 0
    deadline = time.monotonic() + VERDICT_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = reload_counts(config)
        if now is None or now == before:
            continue
        if now[1] > before[1]:
            print(f"{say}: the hub (pid {pid}) refused the config and keeps the running one; its log says why",
                  file=sys.stderr)
            return 1
        print(f"config reloaded by logport (pid {pid}); its log says what changed")
        return 0
    print(f"{say}: sent SIGHUP to pid {pid}, but its metrics showed no reload within {VERDICT_WAIT:g} s; its log "
          f"says what happened", file=sys.stderr)
    return 1


def serve_arguments(pid: int, build_parser: Callable[[], argparse.ArgumentParser]
                    ) -> tuple[argparse.Namespace | None, str | None]:
    """(the `logport serve` options of process `pid`, its working directory); (None, None) when /proc does not
    say; NotAHub when it is some other process."""
    try:
        argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except PermissionError:
        return None, None
    except FileNotFoundError:
        if Path("/proc/self").exists():
            raise
        return None, None  # no /proc here
    if "serve" not in argv or not any("logport" in a for a in argv[: argv.index("serve")]):
        raise NotAHub(f"its command: {' '.join(argv)[:200]}")
    rest = argv[argv.index("serve") + 1 :]
    try:
        serve = build_parser().parse_args(["serve", *rest])
    except SystemExit:  # options of another version: the hub checks its config itself
        return None, None
    try:
        cwd: str | None = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = None
    return serve, cwd


@contextlib.contextmanager
def working_directory(path: str | None) -> Iterator[None]:
    """Relative paths in the config (certificates) as the hub reads them: from its directory."""
    old = os.getcwd()
    if path is not None:
        with contextlib.suppress(OSError):
            os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def reload_counts(config: Config | None) -> tuple[float, float] | None:
    """(ok, failed) reloads from the hub's metrics endpoint; None without one, or when it does not answer."""
    if config is None or not config.metrics.enabled:
        return None
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(config.metrics.bind, config.metrics.bind)
    url = f"http://{f'[{host}]' if ':' in host else host}:{config.metrics.port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    counts = {result: float(value) for result, value in RELOADS.findall(text)}
    return counts.get("ok", 0.0), counts.get("failed", 0.0)
