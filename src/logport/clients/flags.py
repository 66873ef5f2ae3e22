"""The flags every client command (`logport send ...`, `logport cat --server`) spells the same way:
--server HOST:PORT, --timeout, --tls, --tls-ca, --tls-cert, --tls-key, --tls-insecure. Older spellings
(--host/--port, --ca, --insecure, --tls-no-verify) stay as hidden aliases."""

from __future__ import annotations

import argparse
import ssl

from logport.errors import ConfigError
from logport.tls import client_context

DEFAULT_TIMEOUT = 30.0  # seconds a client retries an unreachable (or failing) server before it gives up


def add_server_argument(parser: argparse.ArgumentParser, default: str, *, host_port_aliases: bool = False) -> None:
    """`--server HOST:PORT`; with `host_port_aliases`, the old `--host` and `--port` too (they win over it)."""
    parser.add_argument("--server", default=default, metavar="HOST:PORT", help="the server to connect to")
    if host_port_aliases:
        parser.add_argument("--host", default=None, help=argparse.SUPPRESS)
        parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)


def add_timeout_argument(parser: argparse.ArgumentParser, what: str = "the server cannot be reached") -> None:
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"give up when {what} for this long (0: retry for ever)")


def add_tls_arguments(parser: argparse.ArgumentParser, *, ca_alias: str = "", insecure_alias: str = "") -> None:
    parser.add_argument("--tls", action="store_true", help="connect with TLS (implied by --tls-ca and --tls-cert)")
    parser.add_argument("--tls-ca", default="", metavar="PEM",
                        help="CA bundle to verify the server's certificate with (default: the system's)")
    parser.add_argument("--tls-cert", default="", metavar="PEM",
                        help="client certificate, for a server that verifies its clients")
    parser.add_argument("--tls-key", default="", metavar="PEM", help="the client certificate's key")
    parser.add_argument("--tls-insecure", action="store_true", help="do not verify the server's certificate")
    if ca_alias:
        parser.add_argument(ca_alias, dest="tls_ca", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    if insecure_alias:
        parser.add_argument(insecure_alias, dest="tls_insecure", action="store_true", default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client TLS context the --tls flags ask for, or None."""
    if not (args.tls or args.tls_ca or args.tls_cert):
        return None
    return client_context(args.tls_ca, args.tls_cert, args.tls_key, verify=not args.tls_insecure)


def parse_server(server: str, default_port: int) -> tuple[str, int]:
    """(host, port) of `HOST:PORT`, `[v6]:PORT`, `HOST` or `:PORT`."""
    host, sep, port = server.rpartition(":")
    if not sep or "]" in port:  # no port, or a bare [v6] address
        return server.strip("[]") or "127.0.0.1", default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--server {server!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def server_address(args: argparse.Namespace, default_port: int) -> tuple[str, int]:
    """(host, port) of --server, with the old --host/--port (where the command has them) taking precedence."""
    host, port = parse_server(args.server, default_port)
    return getattr(args, "host", None) or host, getattr(args, "port", None) or port


def retry_for(args: argparse.Namespace) -> float | None:
    """--timeout as a retry budget: None for 0 (for ever)."""
    return args.timeout if args.timeout > 0 else None
