"""Sans-IO protocol cores: pure state machines, no sockets, no asyncio, no store.

Each module exposes a `Connection` with `receive_data(bytes)`, `next_event()`
and `send(event) -> bytes`, raising only `RemoteProtocolError` (the peer broke
the protocol) or `LocalProtocolError` (we tried to).
"""

from logport.protocols._receivebuffer import NEED_DATA, ReceiveBuffer

__all__ = ["NEED_DATA", "ReceiveBuffer"]
