"""What a reload (SIGHUP) changes: the plan that compares the running config with the one just read.

Routes, outputs, limits, the log level and TLS certificates change live; a listener whose address changed
(or that was turned on or off, or whose TLS was) is started anew and the old one drained; a few listener
keys are read only when a listener starts (`RESTART_KEYS`), so a change of one restarts that listener
(drained first); store, metrics and a few hub keys cannot change without a restart of the hub
(`NOT_LIVE`): the reload says so in the log and keeps the running values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from logport.config import Config, output_name

ENDPOINT_KEYS: dict[str, tuple[str, ...]] = {
    "forward": ("bind", "port"),
    "lumberjack": ("bind", "port"),
    "segment": ("bind", "port"),
    "logjam": ("bind", "router_port", "pull_port", "pub_port"),
}
# read only when the listener starts: a change restarts the listener on its address (drained first)
RESTART_KEYS: dict[str, tuple[str, ...]] = {
    "forward": (),
    "lumberjack": ("decode_workers",),
    "segment": ("receive_pool_bytes", "idle_timeout"),
    "logjam": tuple(f.name for f in dataclasses.fields(Config().logjam)),  # its sockets take them at bind
}
NOT_LIVE: tuple[str, ...] = ("store", "metrics", "hub.hostname", "hub.pid_file")


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            out.update(_flat(getattr(value, f.name), f"{prefix}.{f.name}"))
        return out
    return {prefix: value}


def changed_keys(old: Any, new: Any, prefix: str) -> list[str]:
    """Dotted keys whose values differ between two instances of one config dataclass."""
    a, b = _flat(old, prefix), _flat(new, prefix)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


@dataclass
class ListenerChange:
    name: str
    action: str  # "start", "stop", "move" (new address: start the new one, then drain the old),
    #              "restart" (same address: drain the old, then start the new), "update" (in place)
    keys: list[str]


@dataclass
class ReloadPlan:
    listeners: list[ListenerChange] = field(default_factory=list)
    outputs_stop: list[str] = field(default_factory=list)  # service keys ("output.<name>")
    outputs_start: list[Any] = field(default_factory=list)  # output configs
    routes: bool = False
    log: bool = False
    not_live: list[str] = field(default_factory=list)  # keys that changed and keep their running value

    @property
    def changes(self) -> list[str]:
        out = [f"{c.name}: {c.action} ({', '.join(c.keys)})" for c in self.listeners]
        out += [f"{key}: stop" for key in self.outputs_stop]
        out += [f"output.{output_name(o)}: start" for o in self.outputs_start]
        if self.routes:
            out.append("routes")
        if self.log:
            out.append("hub.log_level / hub.log_format")
        return out


def plan(old: Config, new: Config) -> ReloadPlan:
    result = ReloadPlan()
    for key in NOT_LIVE:
        section, _, attr = key.partition(".")
        a, b = getattr(old, section), getattr(new, section)
        if attr:
            a, b = getattr(a, attr), getattr(b, attr)
        result.not_live += changed_keys(a, b, key)
    result.log = (old.hub.log_level, old.hub.log_format) != (new.hub.log_level, new.hub.log_format)
    result.routes = old.routes != new.routes
    for name in ENDPOINT_KEYS:
        a, b = getattr(old, name), getattr(new, name)
        keys = changed_keys(a, b, name)
        if not keys:
            continue
        if a.enabled != b.enabled:
            result.listeners.append(ListenerChange(name, "start" if b.enabled else "stop", keys))
            continue
        if not b.enabled:
            continue  # off before and after: nothing runs
        moved = any(getattr(a, k) != getattr(b, k) for k in ENDPOINT_KEYS[name])
        tls_flip = hasattr(a, "tls") and a.tls.enabled != b.tls.enabled
        if moved or tls_flip:
            result.listeners.append(ListenerChange(name, "move", keys))
        elif any(f"{name}.{k}" in keys for k in RESTART_KEYS[name]):
            result.listeners.append(ListenerChange(name, "restart", keys))
        else:
            result.listeners.append(ListenerChange(name, "update", keys))
    old_outputs = {output_name(o): o for kind in ("forward", "lumberjack") for o in getattr(old.outputs, kind)}
    new_outputs = {output_name(o): o for kind in ("forward", "lumberjack") for o in getattr(new.outputs, kind)}
    for name, out in old_outputs.items():
        if new_outputs.get(name) != out:
            result.outputs_stop.append(f"output.{name}")
    for name, out in new_outputs.items():
        if old_outputs.get(name) != out:
            result.outputs_start.append(out)
    return result


def update_in_place(running: Any, new: Any) -> None:
    """Copy every value of `new` into the running section object (which listeners and their connections
    hold), nested sections (tls) included."""
    for f in dataclasses.fields(running):
        value = getattr(new, f.name)
        current = getattr(running, f.name)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            update_in_place(current, value)
        else:
            setattr(running, f.name, value)
