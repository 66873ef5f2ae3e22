"""TLS contexts for listeners and clients, built from `TLSConfig`."""

from __future__ import annotations

import ssl
from typing import Any

from logport.config import Config, TLSConfig
from logport.errors import ConfigError


def server_context(tls: TLSConfig) -> ssl.SSLContext | None:
    """A server-side context, or None when the listener has no certificate configured."""
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca:
        ctx.load_verify_locations(tls.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.verify_client else ssl.CERT_OPTIONAL
    return ctx


def server_options(tls: TLSConfig) -> dict[str, Any]:
    """The TLS keyword arguments of a listener's `loop.create_server`: its context, and the handshake
    timeout (a connection counts against the listener's limits only once its handshake is done; asyncio
    refuses a timeout without TLS)."""
    ctx = server_context(tls)
    return {"ssl": ctx, "ssl_handshake_timeout": tls.handshake_timeout if ctx else None}


def client_context(ca: str = "", cert: str = "", key: str = "", verify: bool = True) -> ssl.SSLContext:
    """A client-side context; `ca` pins the server's CA, `cert`/`key` present a client certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca or None)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key or None)
    return ctx


def check_listener_tls(config: Config) -> None:
    """The certificate files of every enabled listener with TLS load (ConfigError naming the key and the file):
    checked before the hub opens its store, so a start that fails on them leaves nothing behind, and on reload."""
    for name in ("forward", "lumberjack", "segment"):
        section = getattr(config, name)
        if section.enabled and section.tls.enabled:
            check_tls_files(f"{name}.tls", section.tls)


def check_tls_files(where: str, tls: TLSConfig) -> None:
    """The certificate, key and client CA load (a reload refuses files that do not, naming them)."""
    for key in ("cert", "key", "client_ca"):
        path = getattr(tls, key)
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise ConfigError(f"config key '{where}.{key}' has value {path!r}: cannot read it: "
                                  f"{e.strerror or e}") from None
    try:
        server_context(tls)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise ConfigError(f"config key '{where}.cert' has value {tls.cert!r} (key {tls.key!r}, "
                          f"client_ca {tls.client_ca!r}): it does not load: {e}") from None
