"""The rules of names and addresses, written once for the config, the protocols, the store and the clients:
segment names, logjam's stream names, `host:port[:weight]`, peers' addresses, ZeroMQ endpoints and Z85 keys.

A leaf: it imports nothing of logport but errors.py. Each rule says what is wrong in words (ValueError, or
the store's InvalidSegmentName); the config names the key it was read from, a command its flag.
"""

from __future__ import annotations

import re

from logport.errors import InvalidSegmentName

# --- segment names ---

MAX_SEGMENT_NAME_BYTES = 250  # a segment's name is its directory's name
_SEGMENT_NAME = re.compile(r"[A-Za-z0-9._-]+\Z")


def check_segment_name(name: str) -> str:
    """`name` if the store accepts it as a segment's name (its directory's name), else InvalidSegmentName."""
    if not name:
        raise InvalidSegmentName(name, "empty")
    if len(name.encode()) > MAX_SEGMENT_NAME_BYTES:
        raise InvalidSegmentName(name, f"{len(name.encode())} bytes exceeds {MAX_SEGMENT_NAME_BYTES}")
    if not _SEGMENT_NAME.match(name):
        raise InvalidSegmentName(name, "only A-Z a-z 0-9 . _ - are allowed")
    if name in (".", ".."):
        raise InvalidSegmentName(name, "reserved")
    return name


def segment_name_problem(name: str) -> str:
    """Why the store would refuse `name` as a segment name; empty when it would not."""
    try:
        check_segment_name(name)
    except InvalidSegmentName as e:
        return str(e).removeprefix(f"invalid segment name {name!r}: ")
    return ""


# --- logjam's stream names ---

# "application-environment", and the topics logjam's importer knows (protocols/logjam.py checks every
# message's against these; the config checks republish_routes' at load)
LOGJAM_APP_ENV = re.compile(rb"[A-Za-z][A-Za-z_-]*-[A-Za-z][A-Za-z_]*\Z")
_LOGJAM_TOPIC_PART = rb"(?:\.[A-Za-z][A-Za-z_-]*)*"
LOGJAM_TOPIC = re.compile(rb"(?:(?:logs|javascript|events)" + _LOGJAM_TOPIC_PART
                          + rb"|frontend\.page|frontend\.ajax|mobile)\Z")


# --- addresses ---


def parse_server_address(text: str) -> tuple[str, int, int]:
    """`host:port[:weight]` (a Forward server, as `outputs.forward.standby` and `logport send --server` write
    it) as (host, port, weight); ValueError when the port or weight is not a number."""
    parts = text.rsplit(":", 2) if text.count(":") >= 2 and not text.startswith("[") else text.rsplit(":", 1)
    host = parts[0] or "127.0.0.1"
    port = int(parts[1]) if len(parts) > 1 else 24224
    weight = int(parts[2]) if len(parts) > 2 else 60
    return host, port, weight


def parse_host_port(text: str, default_port: int) -> tuple[str, int]:
    """(host, port) of `HOST:PORT`, `[v6]:PORT`, `HOST` or `:PORT`; ValueError when the port is no port."""
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:  # no port, or a bare [v6] address
        return text.strip("[]") or "127.0.0.1", default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def peer_host(peer: str) -> str:
    """The address part of a peer's "ip:port", "[v6]:port" or a bare address: what limits are kept per."""
    if peer.startswith("["):
        end = peer.find("]")
        return peer[1:end] if end > 0 else peer
    if peer.count(":") == 1:  # IPv4 or a host name with a port; a bare IPv6 address has several
        return peer.rpartition(":")[0]
    return peer


_ZMQ_TCP_ENDPOINT = re.compile(r"tcp://(?P<host>[^\s:/]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})\Z")


def is_zmq_endpoint(text: str) -> bool:
    """An endpoint a ZeroMQ socket can connect to: tcp://host:port (port 1..65535) or ipc://path."""
    match = _ZMQ_TCP_ENDPOINT.match(text)
    if match:
        return 1 <= int(match["port"]) <= 65535
    return text.startswith("ipc://") and len(text) > len("ipc://")


# --- CurveZMQ keys ---


def check_z85_key(value: str) -> bytes:
    """A CurveZMQ key in Z85 text (40 characters, as zmq.curve_keypair() makes them) as bytes; ValueError says
    what is wrong without quoting the key (it may be secret)."""
    import zmq  # only CurveZMQ keys need libzmq to check them
    from zmq.utils import z85

    if len(value) != 40:
        raise ValueError(f"must be a 40-character Z85 CurveZMQ key, got {len(value)} characters")
    try:
        z85.decode(value)
    except (ValueError, KeyError, IndexError):
        raise ValueError("is not Z85 text (a CurveZMQ key from zmq.curve_keypair())") from None
    if not zmq.has("curve"):
        raise ValueError("is set but this libzmq was built without CURVE support")
    return value.encode()
