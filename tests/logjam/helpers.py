"""Raw pyzmq peers for the logjam tests: a producer as the Ruby agent talks, a plain SUB consumer."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import zmq
import zmq.asyncio

from logport.protocols import logjam as lj

APP_ENV = b"myapp-production"
TOPIC = b"logs.myapp.production"


def record(i: int, size: int = 0) -> dict[str, Any]:
    r: dict[str, Any] = {
        "action": "Users#show", "started_at": "2026-11-22T03:00:00+00:00", "started_ms": 1795316400000 + i,
        "total_time": 12.5, "code": 200, "severity": 1, "request_id": f"{i:032x}", "i": i,
    }
    if size:
        r["lines"] = [[1, "2026-11-22T03:00:00", "x" * max(0, size - 260)]]
    return r


def meta(sequence: int, compression: int = 0, created_ms: int = 1795316400000, device: int = 0) -> bytes:
    return lj.Meta(compression, device, created_ms, sequence).pack()


def agent_frames(i: int, compression: int = 0, size: int = 0) -> list[bytes]:
    """The four frames the logjam Ruby agent sends for one request."""
    body = lj.compress(orjson.dumps(record(i, size)), compression)
    return [APP_ENV, TOPIC, body, meta(i + 1, compression)]


Curve = tuple[bytes, bytes, bytes]  # (server public key, our public key, our secret key), Z85


def curve_client(sock: zmq.Socket[Any], curve: Curve | None) -> None:
    """Plain libzmq socket options, as any CurveZMQ client (logjam-agent's included) sets them."""
    if curve is not None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, curve[0])
        sock.setsockopt(zmq.CURVE_PUBLICKEY, curve[1])
        sock.setsockopt(zmq.CURVE_SECRETKEY, curve[2])


class AgentProducer:
    """A DEALER connected to the device's ROUTER, written the way logjam_agent's ZMQForwarder does it."""

    def __init__(self, ctx: zmq.asyncio.Context, port: int, curve: Curve | None = None) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        curve_client(self.sock, curve)
        self.sock.connect(f"tcp://127.0.0.1:{port}")

    async def send_async(self, frames: list[bytes], timeout: float = 5.0) -> None:
        await asyncio.wait_for(self.sock.send_multipart(frames), timeout)

    async def send_sync(self, frames: list[bytes], timeout: float = 5.0) -> list[bytes]:
        """The send is inside the timeout too: a DEALER whose CurveZMQ handshake was refused may have
        no pipe to queue on, and then its send waits for good (1 run in 5 of test_curve hung so)."""

        async def exchange() -> list[bytes]:
            await self.sock.send_multipart([b"", *frames])
            return await self.sock.recv_multipart()

        return await asyncio.wait_for(exchange(), timeout)

    async def ping(self, timeout: float = 5.0) -> list[bytes]:
        return await self.send_sync([lj.PING, APP_ENV, b"{}", meta(0)], timeout)

    def close(self) -> None:
        self.sock.close(linger=0)


class RawSubscriber:
    def __init__(self, ctx: zmq.asyncio.Context, port: int, prefix: bytes = b"", curve: Curve | None = None,
                 rcv_hwm: int | None = None, rcv_buf: int | None = None) -> None:
        """`rcv_hwm` (messages) and `rcv_buf` (kernel bytes) make a slow subscriber whose queues fill soon."""
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        if rcv_hwm is not None:  # only set before connect() does it apply to the connection's pipe
            self.sock.setsockopt(zmq.RCVHWM, rcv_hwm)
        if rcv_buf is not None:
            self.sock.setsockopt(zmq.RCVBUF, rcv_buf)
        curve_client(self.sock, curve)
        self.sock.setsockopt(zmq.SUBSCRIBE, prefix)
        self.sock.connect(f"tcp://127.0.0.1:{port}")

    async def recv(self, timeout: float = 5.0) -> list[bytes]:
        return await asyncio.wait_for(self.sock.recv_multipart(), timeout)

    async def recv_data(self, timeout: float = 5.0) -> list[bytes]:
        """The next message that is not a heartbeat."""
        deadline = time.monotonic() + timeout
        while True:
            frames = await self.recv(max(0.01, deadline - time.monotonic()))
            if frames[0] != lj.HEARTBEAT:
                return frames

    def close(self) -> None:
        self.sock.close(linger=0)


async def until_connected(sub: RawSubscriber, producer: AgentProducer, timeout: float = 5.0) -> int:
    """Slow joiner: ping the device until the SUB sees something published (a probe message).

    Returns the number of probe messages that were published.
    """
    deadline = time.monotonic() + timeout
    sent = 0
    while time.monotonic() < deadline:
        sent += 1
        reply = await producer.send_sync([APP_ENV, TOPIC, b'{"probe": true}', meta(0)])
        assert reply[-1] == lj.ACCEPTED
        try:
            frames = await sub.recv_data(0.2)
        except TimeoutError:
            continue
        m = lj.decode_meta(frames[3])
        assert orjson.loads(lj.decompress(frames[2], m.compression, 1 << 20)) == {"probe": True}
        # drain the other probes that may still arrive
        while True:
            try:
                await sub.recv_data(0.2)
            except TimeoutError:
                return sent
    raise AssertionError("the subscriber never connected")
