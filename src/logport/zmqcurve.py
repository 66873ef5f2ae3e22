"""CurveZMQ for the logjam sockets: keys, server and client set-up, and a ZAP handler that
admits only the listed client keys (and logs the others with their address).

Keys are Z85 text, 40 characters, as `zmq.curve_keypair()` makes them (and as logjam-device's
and the ZeroMQ tools' key files hold them).
"""

from __future__ import annotations

import logging
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils import z85

from logport.logs import ThrottledLog

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq asks a context's ZAP handler (RFC 27)


def public_key(secret: str) -> str:
    return zmq.curve_public(secret.encode()).decode()


def make_server(sock: zmq.Socket[Any], secret: str) -> None:
    """Peers of this (not yet bound) socket must speak CurveZMQ to our public key."""
    sock.curve_secretkey = secret.encode()
    sock.curve_publickey = zmq.curve_public(secret.encode())
    sock.curve_server = True


def make_client(sock: zmq.Socket[Any], server_key: str, secret: str = "") -> None:
    """Encrypt this (not yet connected) socket to the server's public key; with no secret of our own,
    a fresh keypair (a server that lists allowed client keys will refuse it)."""
    if secret:
        sock.curve_secretkey = secret.encode()
        sock.curve_publickey = zmq.curve_public(secret.encode())
    else:
        public, own_secret = zmq.curve_keypair()
        sock.curve_secretkey = own_secret
        sock.curve_publickey = public
    sock.curve_serverkey = server_key.encode()


class ZapHandler:
    """Answers libzmq's ZAP requests for one context: CURVE clients whose key is listed pass."""

    def __init__(self, ctx: zmq.asyncio.Context, allowed: list[str], log: logging.Logger) -> None:
        self.allowed = {key.encode() for key in allowed}
        self.refused = 0
        self._log = ThrottledLog(log)
        self.sock = ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(ZAP_ENDPOINT)

    def answer(self, request: list[bytes]) -> list[bytes]:
        """The reply to one ZAP request (RFC 27: version, request id, domain, address, identity,
        mechanism, credentials)."""
        if len(request) < 6 or request[0] != b"1.0":
            return [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"malformed ZAP request", b"", b""]
        request_id, address, mechanism = request[1], request[3], request[5]
        key = z85.encode(request[6]) if mechanism == b"CURVE" and len(request) > 6 else b""
        if key in self.allowed:
            return [b"1.0", request_id, b"200", b"OK", key, b""]
        self.refused += 1
        reason = "client key not in logjam.curve_allowed_clients" if key else f"{mechanism.decode()} is not CURVE"
        self._log.warning("logjam CurveZMQ client refused", peer=address.decode("ascii", "replace"),
                          reason=reason, client_key=key.decode())
        return [b"1.0", request_id, b"400", reason.encode(), b"", b""]

    async def run(self) -> None:
        while True:
            request = await self.sock.recv_multipart()
            await self.sock.send_multipart(self.answer(request))

    def close(self) -> None:
        self.sock.close(linger=0)
