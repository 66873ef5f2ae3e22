"""Lumberjack test helpers over tests/support: a hub with only this listener, stored records, a certificate."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

from logport.batch import StoredBatch
from logport.config import Config
from logport.store import SegmentStore
from tests.support import hub_config, running_hub
from tests.support import stored_batches as support_batches

__all__ = ["lumberjack_config", "running_hub", "self_signed_cert", "stored_batches", "stored_records",
           "wait_for_records"]


def lumberjack_config(data_dir: Path, **lumberjack: Any) -> Config:
    """Only the lumberjack listener, on a free port; `lumberjack` sets keys of its section."""
    return hub_config(data_dir, ["lumberjack"], lumberjack=lumberjack)


async def stored_batches(store: SegmentStore, segment: str) -> list[StoredBatch]:
    """Every batch stored in `segment` so far, decoded."""
    return [batch for _, batch in await support_batches(store, segment)]


async def stored_records(store: SegmentStore, segment: str) -> list[Any]:
    return [entry for batch in await stored_batches(store, segment) for entry in batch]


async def wait_for_records(store: SegmentStore, segment: str, count: int, timeout: float = 10.0) -> list[Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        records = await stored_records(store, segment)
        if len(records) >= count or asyncio.get_running_loop().time() > deadline:
            return records
        await asyncio.sleep(0.05)


def self_signed_cert(directory: Path, name: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost (cryptography if installed, else openssl)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    try:
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        openssl = shutil.which("openssl")
        assert openssl, "neither the cryptography package nor the openssl command is available"
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True,
        )
        return cert, key
    import ipaddress

    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(private.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return cert, key
