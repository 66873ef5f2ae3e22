def decode_window(
    inner: bytes | bytearray | memoryview,
    expected: int,
    lo: int,
    hi: int,
    tag: bytes,
    tag_from_beat: bool,
    peer: bytes,
    max_body: int,
    default_s: int,
    default_ns: int,
    max_payload_size: int,
    /,
) -> tuple[list[tuple[str | None, bytes, int]], int, int] | None: ...
def pack_json_events(
    events: list[tuple[int, object]],
    tag: bytes,
    tag_from_beat: bool,
    peer: bytes,
    max_body: int,
    default_s: int,
    default_ns: int,
    /,
) -> list[tuple[str | None, bytes, int]] | None: ...
