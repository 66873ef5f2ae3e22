"""atheris target: arbitrary bytes into the Forward server and client connections (sans-IO).

Byte 0 picks the side and the handshake (bit 7: client, bit 6: shared key), byte 1 the
size of the receive_data pieces. Only ForwardProtocolError and its kin (RemoteProtocolError,
LimitExceeded, AuthenticationError) may come out; every EventBatch the server yields must
split, store-encode and decode again (what the listener does with it).
"""

from __future__ import annotations

import sys

from _fuzzlib import drain, instrumented, pieces, run, vector_stream

with instrumented():
    import msgpack

    from logport.batch import decode_batch, encode_batch
    from logport.errors import RemoteProtocolError
    from logport.protocols import forward as fp


KEY = "fuzz-key"
LIMIT = 64 * 1024  # chunk_size_limit and decompression_size_limit: keeps memory bounded


def server(data: bytes, shared_key: str) -> None:
    conn = fp.ServerConnection(peer="fuzz:1", shared_key=shared_key, users={"alice": "pw"} if shared_key else None,
                               hostname="fuzz-hub", chunk_size_limit=LIMIT, decompression_size_limit=LIMIT,
                               nonce=b"n" * 16, auth_salt=b"s" * 16)
    conn.initiate()
    for piece in pieces(data):
        conn.receive_data(piece)
        for event in drain(conn.next_event, fp.NEED_DATA):
            if isinstance(event, fp.Ping):
                pong = conn.answer(event)
                conn.send(pong)
                if not pong.auth_result:
                    return
            elif isinstance(event, fp.EventBatch):
                for part in fp.split_entries(event.entries, 1024):
                    list(decode_batch(encode_batch(event.tag, part, {"size": event.size})))
                if event.chunk is not None:
                    conn.send(fp.Ack(event.chunk))


def client(data: bytes, shared_key: str) -> None:
    conn = fp.ClientConnection(shared_key=shared_key, hostname="fuzz-client", salt="fuzzsalt", peer="fuzz:2",
                               reply_size_limit=LIMIT)
    for piece in pieces(data):
        conn.receive_data(piece)
        for event in drain(conn.next_event, fp.NEED_DATA):
            if isinstance(event, fp.Helo):
                conn.ping()


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    flags, rest = data[0], data[1:]
    shared_key = KEY if flags & 0x40 else ""
    try:
        if flags & 0x80:
            client(rest, shared_key)
        else:
            server(rest, shared_key)
    except RemoteProtocolError:
        pass


def seeds() -> list[bytes]:
    entries = b"".join(msgpack.packb([fp.pack_time(1700000000, i), {"k": "v", "i": i}]) for i in range(3))
    plain = [
        fp.encode_message("app", fp.pack_time(1700000000, 5), {"message": "hi"}, {"chunk": "c1"}),
        fp.encode_forward("app", [[1700000000, {"a": 1}], [1700000001, {"b": 2}]], {"chunk": "c2"}),
        fp.encode_packed_forward("app", entries, {"chunk": "c3", "size": 3}),
        fp.encode_packed_forward("app", entries, {"size": 3}, compressed="gzip"),
        b"\xc0",
        b'{"tag": 1}',
        b'["app", 1700000000, {"json": true}]',
    ]
    out = [b"\x00\xff" + m for m in plain] + [b"\x00\x03" + m for m in plain]
    for name in ("fluent-bit-out_forward-secure-gzip-ack.json", "fluent-bit-in_forward-secure-ack.json"):
        out.append(b"\x40\x07" + vector_stream(name, "client->server"))
        out.append(b"\xc0\x05" + vector_stream(name, "server->client"))
    return [s for s in out if len(s) > 2]


if __name__ == "__main__":
    run("forward", test_one_input, seeds)
    sys.exit(0)
