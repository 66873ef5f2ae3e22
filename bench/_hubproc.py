"""A hub in its own process, running this checkout's code or an older commit's, and the CPU it uses.

Benchmarks that compare today's code with an older commit run both as `python bench/_hubproc.py SPEC`
with PYTHONPATH pointing at the code to run, and read the CPU time of the hub process and everything it
started (decode workers) from /proc: events per hub CPU-second is the figure that stays steady on a shared
machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def build_baseline(rev: str, work: Path) -> Path:
    """A directory to put on PYTHONPATH that holds logport as of `rev` (a commit of this repository), with its
    C extensions built: `git archive` of the commit, built as a wheel by pip, unpacked."""
    tree = work / f"tree-{rev}"
    site = work / f"site-{rev}"
    if site.is_dir():
        return site
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    wheels = work / f"wheels-{rev}"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(tree)],
                   check=True)
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    shutil.rmtree(tree, ignore_errors=True)
    return site


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and all its live descendants."""
    total = 0
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
            for task in Path(f"/proc/{p}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total / TICKS


class HubProcess:
    """`python bench/_hubproc.py SPEC`: a hub with the given config sections, code from `pythonpath` (None: this
    checkout's)."""

    def __init__(self, settings: dict[str, dict[str, Any]], pythonpath: Path | None, metric: str = "",
                 labels: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.pythonpath = pythonpath
        self.metric = metric
        self.labels = labels or {}
        self.proc: asyncio.subprocess.Process | None = None
        self.info: dict[str, Any] = {}

    async def start(self) -> dict[str, Any]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.pythonpath) if self.pythonpath is not None else str(REPO / "src")
        spec = json.dumps({"settings": self.settings, "metric": self.metric, "labels": self.labels})
        self.proc = await asyncio.create_subprocess_exec(sys.executable, __file__, spec, env=env,
                                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the hub process did not start")
        self.info = json.loads(line)
        return self.info

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        return tree_cpu_seconds(self.proc.pid)

    async def stop(self) -> dict[str, Any]:
        """Stop the hub; what it reports at the end (the metric's value)."""
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = await self.proc.stdout.read()
        await self.proc.wait()
        return dict(json.loads(out.splitlines()[-1])) if out.strip() else {}


async def _serve(spec: dict[str, Any]) -> None:
    from logport.config import Config
    from logport.hub import Hub

    config = Config()
    for section, values in spec["settings"].items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    info: dict[str, Any] = {"pid": os.getpid()}
    if config.lumberjack.enabled:
        info["lumberjack_port"] = hub.services["lumberjack"].port  # type: ignore[attr-defined]
        info["decode_workers"] = config.lumberjack.decode_workers
    print(json.dumps(info), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the bench closes our stdin
    value = None
    if spec["metric"] and hub.runtime is not None:
        value = hub.runtime.metrics.registry.get_sample_value(spec["metric"], spec["labels"])
    await hub.stop()
    print(json.dumps({"metric": value}), flush=True)


if __name__ == "__main__":
    import uvloop

    sys.path = [p for p in sys.path if Path(p).resolve() != Path(__file__).resolve().parent]
    uvloop.run(_serve(json.loads(sys.argv[1])))
