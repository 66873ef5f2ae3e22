"""atheris target: arbitrary ZeroMQ frames into the logjam readers (ROUTER, PULL, SUB) and the
decompressors they use. Only InvalidMessage / RemoteProtocolError (LimitExceeded) may come out.

The input is cut into frames at each 0xFF 0x00 pair; byte 0 picks the reader and, for a
data message, whether its body is decompressed with the meta frame's method.
"""

from __future__ import annotations

import sys
import zlib

from _fuzzlib import VECTORS, instrumented, run

with instrumented():
    from logport.errors import RemoteProtocolError
    from logport.protocols import logjam as lg


LIMIT = 256 * 1024
SEPARATOR = b"\xff\x00"


def test_one_input(data: bytes) -> None:
    if not data:
        return
    which, frames = data[0] % 3, data[1:].split(SEPARATOR)
    reader = (lg.read_router_message, lg.read_pull_message, lg.read_sub_message)[which]
    try:
        message = reader(frames)
        if isinstance(message, lg.DataMessage) and message.meta is not None:
            lg.decompress(message.body, message.meta.compression, LIMIT)
    except RemoteProtocolError:
        pass


def _join(frames: list[bytes]) -> bytes:
    return SEPARATOR.join(frames)


def seeds() -> list[bytes]:
    import json

    out = []
    meta = lg.Meta(compression=1, device=7, created_ms=1700000000000, sequence=1)
    body = zlib.compress(b'{"action":"a#b","total_time":12.5,"code":200}')
    out.append(b"\x00" + _join([b"", b"myapp-production", b"logs.myapp.production", body, meta.pack()]))
    out.append(b"\x01" + _join([b"myapp-production", b"logs.myapp.production", body, meta.pack()]))
    out.append(b"\x02" + _join([b"heartbeat", b"tcp://host:9606", b"{}", meta.pack()]))
    path = VECTORS / "logjam-device-router-pub.json"
    if path.is_file():
        recording = json.loads(path.read_text())
        for entry in recording.get("conversation", []) + recording.get("published", []):
            frames = [bytes.fromhex(f) for f in entry.get("frames_hex", [])]
            if frames:
                out.append(b"\x00" + _join(frames))
                out.append(b"\x02" + _join(frames))
    return out


if __name__ == "__main__":
    run("logjam", test_one_input, seeds)
    sys.exit(0)
