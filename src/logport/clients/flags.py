"""The flags every client command (`logport send ...`, `logport cat --server`) spells the same way:
--server HOST:PORT, --timeout, --tls, --tls-ca, --tls-cert, --tls-key, --tls-insecure, and the senders'
--flush-interval, --drain-timeout, --skip-lines. The older spellings (--host/--port, --ca, --insecure,
--tls-no-verify) are hidden aliases that every command with the flag takes."""

from __future__ import annotations

import argparse
import ssl

from logport.errors import ConfigError
from logport.tls import client_context

DEFAULT_TIMEOUT = 30.0  # seconds a client retries an unreachable (or failing) server before it gives up
DEFAULT_FLUSH_INTERVAL = 1.0  # seconds a line waits for its batch to fill (Fluent Bit's `flush` default)
DEFAULT_DRAIN_TIMEOUT = 10.0  # seconds a stopped sender waits for the acks of what it sent


def add_server_argument(parser: argparse.ArgumentParser, default: str, *, repeatable: bool = False,
                        metavar: str = "HOST:PORT", help: str = "the server to connect to") -> None:
    """`--server` (repeatable: a list, for senders that fail over), and the old `--host` and `--port`, which
    stand for one `--server` with the default's other half (server_list reads them)."""
    if repeatable:
        parser.add_argument("--server", action="append", default=[], metavar=metavar,
                            help=f"{help} (repeatable; default: {default})")
    else:
        parser.add_argument("--server", default=None, metavar=metavar, help=f"{help} (default: {default})")
    parser.add_argument("--host", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)


def server_list(args: argparse.Namespace, default: str) -> list[str]:
    """The servers --server names (the default when none), or the one the old --host/--port name."""
    given = args.server if isinstance(args.server, list) else [args.server] if args.server is not None else []
    host, port = getattr(args, "host", None), getattr(args, "port", None)
    if host is None and port is None:
        return given or [default]
    if given:
        raise ConfigError("give --server HOST:PORT, or the older --host and --port, not both")
    default_host, default_port = parse_server(default, 0)
    host = host or default_host
    return [f"[{host}]:{port or default_port}" if ":" in host else f"{host}:{port or default_port}"]


def server_address(args: argparse.Namespace, default: str) -> tuple[str, int]:
    """(host, port) of a single-server command's --server (or --host/--port)."""
    _, default_port = parse_server(default, 0)
    return parse_server(server_list(args, default)[0], default_port)


def add_timeout_argument(parser: argparse.ArgumentParser, what: str = "the server cannot be reached") -> None:
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"give up when {what} for this long (0: retry for ever)")


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls", action="store_true", help="connect with TLS (implied by --tls-ca and --tls-cert)")
    parser.add_argument("--tls-ca", default="", metavar="PEM",
                        help="CA bundle to verify the server's certificate with (default: the system's)")
    parser.add_argument("--tls-cert", default="", metavar="PEM",
                        help="client certificate, for a server that verifies its clients")
    parser.add_argument("--tls-key", default="", metavar="PEM", help="the client certificate's key")
    parser.add_argument("--tls-insecure", action="store_true", help="do not verify the server's certificate")
    parser.add_argument("--ca", dest="tls_ca", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parser.add_argument("--insecure", "--tls-no-verify", dest="tls_insecure", action="store_true",
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_stream_arguments(parser: argparse.ArgumentParser, *, skip_lines: bool = True) -> None:
    """What every `logport send` does with stdin: batches by size or age, and how it stops (SIGINT, SIGTERM)."""
    parser.add_argument("--flush-interval", type=float, default=DEFAULT_FLUSH_INTERVAL, metavar="SECONDS",
                        help="send a batch that is not full once its first line has waited this long")
    parser.add_argument("--drain-timeout", type=float, default=DEFAULT_DRAIN_TIMEOUT, metavar="SECONDS",
                        help="on Ctrl-C or SIGTERM: stop reading, then wait this long for the acks of what was "
                             "read (a second Ctrl-C stops at once)")
    if skip_lines:
        parser.add_argument("--skip-lines", type=int, default=0, metavar="N",
                            help="skip the first N lines of the input (what an interrupted run acknowledged: "
                                 "it prints the command that resumes)")


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client TLS context the --tls flags ask for, or None."""
    if not (args.tls or args.tls_ca or args.tls_cert):
        return None
    for flag, path in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise ConfigError(f"{flag} {path}: cannot read it: {e.strerror or e}") from None
    try:
        return client_context(args.tls_ca, args.tls_cert, args.tls_key, verify=not args.tls_insecure)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(f"--tls-ca {args.tls_ca!r} / --tls-cert {args.tls_cert!r} / --tls-key "
                          f"{args.tls_key!r}: they do not load: {e}") from None


def parse_server(server: str, default_port: int) -> tuple[str, int]:
    """(host, port) of `HOST:PORT`, `[v6]:PORT`, `HOST` or `:PORT`."""
    host, sep, port = server.rpartition(":")
    if not sep or "]" in port:  # no port, or a bare [v6] address
        return server.strip("[]") or "127.0.0.1", default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--server {server!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def retry_for(args: argparse.Namespace) -> float | None:
    """--timeout as a retry budget: None for 0 (for ever)."""
    return args.timeout if args.timeout > 0 else None
