"""Test support shared by every protocol's tests: a hub with chosen listeners on free ports,
and the batches a segment holds."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from logport.batch import StoredBatch, decode_batch
from logport.config import Config
from logport.hub import Hub
from logport.store import SegmentStore, frames
from logport.store.reader import DirectoryReader
from tests.conftest import free_port

LISTENERS = ("forward", "lumberjack", "segment", "logjam")
LOGJAM_PORTS = ("router_port", "pull_port", "pub_port")


def hub_config(data_dir: Path | str, enable: Iterable[str], **sections: dict[str, Any]) -> Config:
    """A config with only the `enable`d listeners, each on free ports, metrics off.

    `sections` set further keys: `hub_config(tmp, ["forward"], forward={"shared_key": "k"})`.
    """
    config = Config()
    config.store.data_dir = str(data_dir)
    config.metrics.enabled = False
    enabled = set(enable)
    for name in LISTENERS:
        section = getattr(config, name)
        section.enabled = name in enabled
        if name == "logjam":
            for key in LOGJAM_PORTS:
                setattr(section, key, free_port())
        else:
            section.port = free_port()
    for name, values in sections.items():
        target = getattr(config, name)
        for key, value in values.items():
            setattr(target, key, value)
    return config


@contextlib.asynccontextmanager
async def running_hub(config: Config) -> AsyncIterator[Hub]:
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


async def stored_batches(store: SegmentStore, segment: str) -> list[tuple[int, StoredBatch]]:
    """(offset, batch) of every Event frame in a segment, in order."""
    if not store.exists(segment):
        return []
    info = store.info(segment)
    out: list[tuple[int, StoredBatch]] = []
    offset = info.start_offset
    while offset < info.end_offset:
        r = await store.read_frames(segment, offset, 1 << 24)
        for frame_offset, frame_type, body in frames.iter_frames(r.data, offset):
            if frame_type == frames.EVENT:
                out.append((frame_offset, decode_batch(body)))
        offset = r.next_offset
    return out


def self_signed_cert(directory: Path, name: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for `name`, localhost and 127.0.0.1: (cert path, key path)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    alt_names: list[x509.GeneralName] = [x509.DNSName(name), x509.DNSName("localhost"),
                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def assert_segment_files_whole(hub: Hub, segment: str) -> None:
    """The segment's files, as they stand, are whole frames up to the store's end, and nothing lies past it
    (the reader stops where recovery would cut, so the last file's size is compared as well)."""
    files = DirectoryReader(hub.config.store.data_dir)
    start, end, _ = files.bounds(segment)
    assert sum(frames.HEADER_SIZE + len(b) for _, _, b in files.iter_frames(segment, start, end)) == end - start
    chunks = files.chunk_reader(segment)
    assert chunks.chunk_end(chunks.bases[-1]) == end  # no torn bytes after it
    assert hub.runtime is not None and end == hub.runtime.store.info(segment).end_offset


def fill_the_disk(monkeypatch: Any) -> None:
    """Every store write fails with ENOSPC after a torn write, as on a full disk; monkeypatch.undo() frees it."""
    real_pwritev = os.pwritev

    def disk_full(fd: int, buffers: list[bytes], offset: int) -> int:
        real_pwritev(fd, [b"\xff" * 3], offset)  # a torn write lands before the error
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwritev", disk_full)


def child_pids(parent: int, marker: str) -> list[int]:
    """Live processes whose parent is `parent` and whose command line holds `marker` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, ...
        if int(fields[1]) == parent and fields[0] != "Z" and marker in cmdline:
            found.append(int(entry))
    return found


def as_after_a_crash(seg_dir: Path) -> None:
    """A segment's marks (store/marks.py) as a crash before its last chunk's first recovery point leaves them:
    that chunk's mark dropped. A test that then tears the chunk's tail shows a crash's torn write, which
    recovery cuts; torn after a clean stop's mark, the same bytes are corruption below the recovery point."""
    from logport.store import marks
    from logport.store.files import list_chunk_bases

    last = list_chunk_bases(seg_dir)[-1]
    kept = [m for m in marks.load(seg_dir).by_base.values() if m.base < last]
    marks.save(seg_dir, kept)
