"""TOML configuration: one dataclass per section, every setting with its default.

`load_config(path)` refuses unknown keys and badly typed values at start, naming
the key and the value; each section's `check()` beside its dataclass makes the
checks types cannot, at start and on every reload alike. Sizes are in bytes,
durations in seconds unless a name says otherwise. This module imports nothing
of logport but errors.py: the rules it shares with the store, the Forward client
and CurveZMQ (segment names, `host:port[:weight]`, Z85 keys) are written here.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from logport.errors import ConfigError, InvalidSegmentName

MiB = 1024 * 1024
MAX_SEGMENT_NAME_BYTES = 250  # a segment's name is its directory's name
_SEGMENT_NAME = re.compile(r"[A-Za-z0-9._-]+\Z")
# logjam's stream names: "application-environment", and the topics logjam's importer knows
# (protocols/logjam.py checks every message's against these; the config checks republish_routes' at load)
LOGJAM_APP_ENV = re.compile(rb"[A-Za-z][A-Za-z_-]*-[A-Za-z][A-Za-z_]*\Z")
_LOGJAM_TOPIC_PART = rb"(?:\.[A-Za-z][A-Za-z_-]*)*"
LOGJAM_TOPIC = re.compile(rb"(?:(?:logs|javascript|events)" + _LOGJAM_TOPIC_PART
                          + rb"|frontend\.page|frontend\.ajax|mobile)\Z")
_MAX_FILE_NAME_BYTES = 255  # NAME_MAX of Linux file systems (an output's name becomes a file name)
# open connections one client address may hold on a TCP listener (0 = no limit): about half of
# max_connections, so one address cannot fill a listener, yet far more than a shipper opens; behind
# NAT or a proxy, or with many local clients on a 127.0.0.1 bind, every client is one address
MAX_CONNECTIONS_PER_PEER = 512


@dataclass
class TLSConfig:
    """TLS for one listener: off unless `cert` and `key` are set."""

    cert: str = ""
    key: str = ""
    client_ca: str = ""  # CA bundle used to verify client certificates
    verify_client: bool = False  # require a client certificate signed by client_ca
    # seconds a connection may take to finish its handshake before it is closed: a connection is only
    # counted against max_connections once its handshake is done, so this bounds how long a silent
    # one holds a descriptor (asyncio's own default is 60 s)
    handshake_timeout: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.cert)

    def check(self, where: str) -> None:
        if bool(self.cert) != bool(self.key):
            raise ConfigError(f"config keys '{where}.cert' and '{where}.key' must be set together")
        if self.verify_client and not self.client_ca:
            raise ConfigError(f"config key '{where}.verify_client' is true but '{where}.client_ca' is empty")
        _check_positive(f"{where}.handshake_timeout", self.handshake_timeout)


@dataclass
class StoreConfig:
    """The store's own settings: the store takes this section as it is (logport.store.settings names it too)."""

    data_dir: str = "./data"
    fsync: Literal["always", "interval", "never"] = "always"
    fsync_interval: float = 1.0  # seconds between fdatasyncs with fsync = "interval"
    chunk_size: int = 64 * MiB  # a segment's chunk file rolls past this size
    prewrite_chunks: bool = False  # with no spare chunk, write the next one ahead (zeros) once a quarter full
    spare_chunks: int = 2  # chunks that retention drops kept to be the next ones (recycled), per segment
    max_frame_size: int = 16 * MiB  # largest event body the store accepts
    max_segments: int = 10000
    max_pending_bytes: int = 64 * MiB  # queued, unwritten appends per segment before appends wait
    writeback_bytes: int = 1 * MiB  # a commit larger than this starts the disk on each such slice; 0 = off
    direct_io: bool = False  # fsync = always: a commit into written blocks as one O_DIRECT|O_DSYNC write
    writer_state_limit: int = 100000  # writer ids (exactly-once state) kept per segment
    retention_bytes: int = 0  # per segment; 0 = keep everything
    retention_age: float = 0.0  # seconds; whole chunks older than this go; 0 = forever
    retention_check_interval: float = 60.0
    # at most this often, a segment's recovery point (the end below which every commit group is known durable,
    # store/marks.py) is recorded with one fdatasync of its marks file, off the append path
    recovery_point_interval: float = 1.0

    def check(self, where: str = "store") -> None:
        _check_positive(f"{where}.chunk_size", self.chunk_size)
        _check_positive(f"{where}.max_frame_size", self.max_frame_size)
        if self.max_frame_size + 8 > self.chunk_size:
            raise ConfigError(
                f"config key '{where}.max_frame_size' has value {self.max_frame_size}; "
                f"it must leave room for a frame header in {where}.chunk_size {self.chunk_size}"
            )
        for key in ("max_segments", "max_pending_bytes"):
            _check_positive(f"{where}.{key}", getattr(self, key))
        _check_positive(f"{where}.writeback_bytes", self.writeback_bytes, zero_ok=True)
        _check_positive(f"{where}.writer_state_limit", self.writer_state_limit)
        _check_positive(f"{where}.spare_chunks", self.spare_chunks, zero_ok=True)
        _check_positive(f"{where}.fsync_interval", self.fsync_interval)
        _check_positive(f"{where}.retention_bytes", self.retention_bytes, zero_ok=True)
        _check_positive(f"{where}.retention_age", self.retention_age, zero_ok=True)
        _check_positive(f"{where}.retention_check_interval", self.retention_check_interval)
        _check_positive(f"{where}.recovery_point_interval", self.recovery_point_interval)


@dataclass
class HubConfig:
    hostname: str = ""  # advertised host name; empty = socket.gethostname()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    # seconds SIGTERM may take: listeners stop accepting, answer what they received, outputs finish their
    # send in flight; what is left then is closed unanswered (its clients resend)
    shutdown_grace: float = 30.0
    health_timeout: float = 10.0  # GET /health answers 503 once the event loop has not turned this long
    ready_min_free_bytes: int = 64 * MiB  # GET /ready answers 503 ("disk full") below this free space
    pid_file: str = ""  # written at start, removed at exit: what `logport reload --pid-file` signals

    def check(self, where: str = "hub") -> None:
        """The checks types alone cannot make (run at start and on every reload alike)."""
        _check_positive(f"{where}.shutdown_grace", self.shutdown_grace, zero_ok=True)
        _check_positive(f"{where}.health_timeout", self.health_timeout)
        _check_positive(f"{where}.ready_min_free_bytes", self.ready_min_free_bytes, zero_ok=True)


@dataclass
class MetricsConfig:
    """The metrics listener: Prometheus text at /metrics, and GET /health and GET /ready."""

    enabled: bool = True
    bind: str = "127.0.0.1"
    port: int = 24231

    def check(self, where: str = "metrics") -> None:
        _check_port(f"{where}.port", self.port)


@dataclass
class RouteConfig:
    """Events whose tag matches `match` (Fluentd patterns: `*`, `**`, `{a,b}`) go to `segment`."""

    match: str = "**"
    segment: str = ""

    def check(self, where: str) -> None:
        if not self.segment:
            raise ConfigError(f"config key '{where}.segment' must name a segment")
        _check_segment_name(f"{where}.segment", self.segment)


@dataclass
class ForwardConfig:
    enabled: bool = True
    bind: str = "127.0.0.1"
    port: int = 24224
    segment: str = "forward"
    tls: TLSConfig = field(default_factory=TLSConfig)
    shared_key: str = ""  # turns the HELO/PING/PONG handshake on
    users: dict[str, str] = field(default_factory=dict)  # username -> password; empty = no user auth
    self_hostname: str = ""  # hostname in PONG; empty = hub.hostname
    keepalive: bool = True  # HELO's keepalive flag
    chunk_size_limit: int = 16 * MiB  # largest msgpack message (compressed size) before close
    decompression_size_limit: int = 256 * MiB  # largest decompressed CompressedPackedForward payload
    max_connections: int = 1024
    max_connections_per_peer: int = MAX_CONNECTIONS_PER_PEER
    idle_timeout: float = 300.0  # seconds without a byte before a connection is closed; 0 = never
    max_inflight_bytes: int = 8 * MiB  # per connection: received, not yet stored; reading pauses above
    max_total_inflight_bytes: int = 32 * MiB  # the same over all connections of the listener
    exactly_once: bool = True  # a retried chunk id is acked again but not stored twice
    add_tag_prefix: str = ""
    source_address_key: str = ""  # add the client's IP to every record under this key
    source_hostname_key: str = ""  # add the client's reverse-resolved hostname under this key

    def check(self, where: str = "forward") -> None:
        _check_listener(where, self)
        for key in ("chunk_size_limit", "decompression_size_limit", "max_connections", "max_inflight_bytes",
                    "max_total_inflight_bytes"):
            _check_positive(f"{where}.{key}", getattr(self, key))
        _check_positive(f"{where}.idle_timeout", self.idle_timeout, zero_ok=True)
        if self.users and not self.shared_key:
            raise ConfigError(f"config key '{where}.users' needs '{where}.shared_key' "
                              f"(user auth is part of the handshake)")
        _check_segment_name(f"{where}.segment", self.segment)


@dataclass
class LumberjackConfig:
    enabled: bool = True
    bind: str = "127.0.0.1"
    port: int = 5044
    segment: str = "lumberjack"
    tls: TLSConfig = field(default_factory=TLSConfig)
    tag: str = "beats"  # tag of stored batches
    tag_from_beat: bool = False  # tag = the event's @metadata.beat (e.g. "filebeat") when present
    max_payload_size: int = 64 * MiB  # one J, D or C frame's payload
    max_decompressed_size: int = 64 * MiB  # what one C frame may inflate to
    max_window_size: int = 100000  # events one W frame may announce
    # bytes of frames (as received, inflated) one window may collect: 2x a whole C frame or the largest J/D frame
    max_window_bytes: int = 128 * MiB
    keepalive_interval: float = 5.0  # seconds between keep-alive acks (A 0) while a window is stored
    idle_timeout: float = 60.0  # close a connection silent this long (Logstash client_inactivity_timeout); 0 = never
    max_connections: int = 1000
    max_connections_per_peer: int = MAX_CONNECTIONS_PER_PEER
    partial_window_delay: float = 0.2  # store (and ack) part of a window after its sender paused this long
    # processes that decode C frames of decode_offload_bytes or more; 0 = the event loop, which with the C pass
    # keeps up (docs/benchmarks.md, lumberjack 2026-11-25)
    decode_workers: int = 0
    decode_offload_bytes: int = 16 * 1024  # smaller C frames are decoded in the event loop (no round trip)

    def check(self, where: str = "lumberjack") -> None:
        _check_listener(where, self)
        for key in ("max_payload_size", "max_decompressed_size", "max_window_size", "keepalive_interval",
                    "max_connections", "partial_window_delay", "max_window_bytes"):
            _check_positive(f"{where}.{key}", getattr(self, key))
        for key in ("idle_timeout", "decode_workers", "decode_offload_bytes"):
            _check_positive(f"{where}.{key}", getattr(self, key), zero_ok=True)
        if not self.tag:
            raise ConfigError(f"config key '{where}.tag' must not be empty")
        _check_segment_name(f"{where}.segment", self.segment)


@dataclass
class SegmentServerConfig:
    enabled: bool = True
    bind: str = "127.0.0.1"
    port: int = 12345
    tls: TLSConfig = field(default_factory=TLSConfig)
    token: str = ""  # when set, a connection must send Authenticate with it first
    auto_create: bool = True  # SetupAppend creates a missing segment
    max_message_size: int = 16 * MiB - 1  # any one message (Pravega's cap)
    max_event_size: int = 8 * MiB  # one Event body
    max_block_size: int = 16 * MiB  # the data of one append block
    read_reply_max: int = 2 * MiB  # data in one SegmentRead reply
    read_wait: float = 60.0  # a ReadSegment at the tail without wait_ms waits this long
    keepalive_interval: float = 10.0  # KeepAlive to a reader waiting at the tail
    max_pending_bytes: int = 32 * MiB  # appended, unacknowledged bytes per connection before reading pauses
    max_total_pending_bytes: int = 64 * MiB  # the same over all connections of the listener
    receive_pool_bytes: int = 128 * MiB  # free append-block receive buffers kept for reuse; 0: none
    idle_timeout: float = 0.0  # close a connection silent this long; 0 = never
    max_connections: int = 1024  # further connections are closed at once
    max_connections_per_peer: int = MAX_CONNECTIONS_PER_PEER
    max_reads_per_connection: int = 64  # outstanding ReadSegments (each may wait at the tail)
    max_writers_per_connection: int = 1024  # connection ids one TCP connection may set up

    def check(self, where: str = "segment") -> None:
        _check_listener(where, self)
        for key in ("max_message_size", "max_event_size", "max_block_size", "read_reply_max", "keepalive_interval",
                    "max_pending_bytes", "max_total_pending_bytes", "max_connections", "max_reads_per_connection",
                    "max_writers_per_connection"):
            _check_positive(f"{where}.{key}", getattr(self, key))
        for key in ("read_wait", "idle_timeout", "receive_pool_bytes"):
            _check_positive(f"{where}.{key}", getattr(self, key), zero_ok=True)
        if self.max_message_size > 16 * MiB - 1:
            raise ConfigError(f"config key '{where}.max_message_size' has value {self.max_message_size}; "
                              f"the protocol allows at most {16 * MiB - 1}")
        if self.max_event_size + 8 > self.max_message_size:
            raise ConfigError(f"config key '{where}.max_event_size' has value {self.max_event_size}; "
                              f"an Event message must fit {where}.max_message_size {self.max_message_size}")


@dataclass
class LogjamRepublishRoute:
    """Republished events whose tag matches `match` get this app-env and topic (empty topic: from the tag)."""

    match: str = "**"
    app_env: str = "logport-production"
    topic: str = ""


@dataclass
class LogjamConfig:
    enabled: bool = True
    bind: str = "127.0.0.1"
    router_port: int = 9604
    pull_port: int = 9605
    pub_port: int = 9606
    segment: str = "logjam"
    device_id: int = 0  # device number on everything published; unique among logjam devices
    heartbeat_interval: float = 5.0  # seconds between heartbeats on PUB
    rcv_hwm: int = 100000  # ROUTER / PULL / SUB receive high-water mark (messages)
    pub_hwm: int = 1000000  # PUB send high-water mark; PUB drops past it
    publish_compression: Literal["none", "zlib", "snappy", "lz4"] = "none"  # for bodies received uncompressed
    max_message_size: int = 16 * MiB  # largest frame accepted (ZeroMQ maxmsgsize)
    max_decompressed_size: int = 16 * MiB  # largest JSON body after decompression
    max_batch: int = 1000  # messages taken from a socket per store append
    republish: list[str] = field(default_factory=list)  # segments whose new events are published on PUB
    republish_app_env: str = "logport-production"  # app-env of republished events no route matches
    republish_routes: list[LogjamRepublishRoute] = field(default_factory=list)
    subscribe: list[str] = field(default_factory=list)  # logjam PUB endpoints to consume ("tcp://host:9606")
    subscribe_app_envs: list[str] = field(default_factory=list)  # exact app-envs to keep; empty = all
    subscribe_segment: str = ""  # segment for consumed messages; empty = `segment`
    silence_timeout: float = 30.0  # reconnect a subscription that received nothing (not even heartbeats)
    curve_secret_key: str = ""  # Z85; when set, ROUTER, PULL and PUB speak CurveZMQ only (public key logged at start)
    curve_allowed_clients: list[str] = field(default_factory=list)  # Z85 client public keys; empty = any client
    subscribe_curve_server_key: str = ""  # Z85 public key of the devices in `subscribe`: they speak CurveZMQ

    def check(self, where: str = "logjam") -> None:
        for key in ("router_port", "pull_port", "pub_port"):
            _check_port(f"{where}.{key}", getattr(self, key))
        if self.curve_allowed_clients and not self.curve_secret_key:
            raise ConfigError(f"config key '{where}.curve_allowed_clients' needs {where}.curve_secret_key")
        if self.curve_secret_key:
            check_curve_key(f"{where}.curve_secret_key", self.curve_secret_key)
        for i, key in enumerate(self.curve_allowed_clients):
            check_curve_key(f"{where}.curve_allowed_clients[{i}]", key)
        if self.subscribe_curve_server_key:
            check_curve_key(f"{where}.subscribe_curve_server_key", self.subscribe_curve_server_key)
        if not 0 <= self.device_id <= 0xFFFFFFFF:
            raise ConfigError(f"config key '{where}.device_id' has value {self.device_id}; "
                              f"it must be 0..4294967295")
        for i, endpoint in enumerate(self.subscribe):
            _check_zmq_endpoint(f"{where}.subscribe[{i}]", endpoint)
        for key in ("heartbeat_interval", "rcv_hwm", "pub_hwm", "max_message_size", "max_decompressed_size",
                    "max_batch", "silence_timeout"):
            _check_positive(f"{where}.{key}", getattr(self, key))
        _check_segment_name(f"{where}.segment", self.segment)
        if self.subscribe_segment:  # empty: `segment`
            _check_segment_name(f"{where}.subscribe_segment", self.subscribe_segment)
        for i, segment in enumerate(self.republish):
            _check_segment_name(f"{where}.republish[{i}]", segment)
        self.check_republish_names(where)

    def check_republish_names(self, where: str = "logjam") -> None:
        """Republished events' app-envs and topics are ones logjam accepts (the republisher checks them too,
        when it starts on a section it was handed)."""
        for i, route in enumerate(self.republish_routes):
            if not LOGJAM_APP_ENV.match(route.app_env.encode()):
                raise ConfigError(f"config key '{where}.republish_routes[{i}].app_env' has value {route.app_env!r};"
                                  " it must be application-environment")
            if route.topic and not LOGJAM_TOPIC.match(route.topic.encode()):
                raise ConfigError(f"config key '{where}.republish_routes[{i}].topic' has value {route.topic!r};"
                                  " it must be a logjam topic (logs.*, events.*, ...)")
        if not LOGJAM_APP_ENV.match(self.republish_app_env.encode()):
            raise ConfigError(f"config key '{where}.republish_app_env' has value {self.republish_app_env!r};"
                              " it must be application-environment")


@dataclass
class ForwardOutputConfig:
    """One durable output to a Fluentd-compatible server."""

    name: str = ""
    segment: str = "forward"
    host: str = "127.0.0.1"
    port: int = 24224
    standby: list[str] = field(default_factory=list)  # "host:port" tried when the main server fails
    shared_key: str = ""
    username: str = ""
    password: str = ""
    self_hostname: str = ""  # hostname in PING; empty = hub.hostname
    tls: bool = False
    tls_ca: str = ""  # CA bundle to verify the server; empty = system CAs
    tls_verify: bool = True
    compress: Literal["", "gzip", "zstd"] = ""
    ack_timeout: float = 30.0  # no ack in time: reconnect and send again
    max_batch_bytes: int = 1 * MiB  # stored bytes read per send
    retry_wait: float = 1.0  # first reconnect delay; doubles up to 30 s
    # v1.5 `[[time, meta], record]` entries: "strip" sends them as `[time, record]` (older Fluentd and
    # @fluent-org/logger refuse the whole chunk), "keep" as stored (for receivers that read the metadata)
    metadata_entries: Literal["strip", "keep"] = "strip"

    def check(self, where: str) -> None:
        _check_port(f"{where}.port", self.port)
        _check_positive(f"{where}.ack_timeout", self.ack_timeout)
        _check_positive(f"{where}.retry_wait", self.retry_wait)  # 0 would reconnect in a busy loop
        for j, standby in enumerate(self.standby):
            _check_standby(f"{where}.standby[{j}]", standby)
        _check_positive(f"{where}.max_batch_bytes", self.max_batch_bytes)
        _check_segment_name(f"{where}.segment", self.segment)


@dataclass
class LumberjackOutputConfig:
    """One durable output to a Logstash-compatible (Beats input) server."""

    name: str = ""
    segment: str = "lumberjack"
    host: str = "127.0.0.1"
    port: int = 5044
    version: int = 2  # 2 (J frames, Beats) or 1 (D frames: string values only)
    window_size: int = 2048  # events per window
    compression_level: int = 3  # zlib level of the C frame; 0 = send frames uncompressed
    windows_in_flight: int = 2  # windows sent before waiting for the first ack
    ack_timeout: float = 30.0  # seconds without any ack (keep-alives count) before reconnecting
    reconnect_delay: float = 1.0  # first delay after a failure; doubles up to 30 s
    tls: bool = False
    tls_ca: str = ""  # CA bundle that signs the server certificate; empty: the system's
    tls_cert: str = ""  # client certificate (PEM), for servers that verify clients
    tls_key: str = ""
    tls_verify: bool = True  # verify the server certificate and host name

    def check(self, where: str) -> None:
        _check_port(f"{where}.port", self.port)
        if self.version not in (1, 2):
            raise ConfigError(f"config key '{where}.version' has value {self.version}; it must be 1 or 2")
        if not 0 <= self.compression_level <= 9:
            raise ConfigError(f"config key '{where}.compression_level' has value {self.compression_level}; 0..9")
        for key in ("window_size", "windows_in_flight", "ack_timeout", "reconnect_delay"):
            _check_positive(f"{where}.{key}", getattr(self, key))
        _check_segment_name(f"{where}.segment", self.segment)


@dataclass
class OutputsConfig:
    forward: list[ForwardOutputConfig] = field(default_factory=list)
    lumberjack: list[LumberjackOutputConfig] = field(default_factory=list)

    def check(self, where: str = "outputs") -> None:
        # names first: an unnamed output is named after its segment, and its refusal says so
        _check_output_names(self, where)
        for kind in ("forward", "lumberjack"):
            for i, out in enumerate(getattr(self, kind)):
                out.check(f"{where}.{kind}[{i}]")


@dataclass
class Config:
    hub: HubConfig = field(default_factory=HubConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    forward: ForwardConfig = field(default_factory=ForwardConfig)
    lumberjack: LumberjackConfig = field(default_factory=LumberjackConfig)
    segment: SegmentServerConfig = field(default_factory=SegmentServerConfig)
    logjam: LogjamConfig = field(default_factory=LogjamConfig)
    routes: list[RouteConfig] = field(default_factory=list)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)

    def check(self) -> None:
        """Every section's checks (`load_config` runs them at start and on every reload alike)."""
        for name in ("store", "hub", "metrics", "forward", "lumberjack", "segment", "logjam", "outputs"):
            getattr(self, name).check(name)
        for i, route in enumerate(self.routes):
            route.check(f"routes[{i}]")

    def listener_sections(self) -> list[Any]:
        return [self.forward, self.lumberjack, self.segment, self.logjam]

    def override_bind(self, bind: str) -> None:
        """`--bind` sets the address of every listener and of the metrics endpoint."""
        for section in self.listener_sections():
            section.bind = bind
        self.metrics.bind = bind


def load_config(path: str | Path | None = None, *, data_dir: str | None = None, bind: str | None = None) -> Config:
    """Read a TOML file (or take every default), then apply command-line overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from None
    config = build(Config, raw, "")
    if data_dir is not None:
        config.store.data_dir = data_dir
    if bind is not None:
        config.override_bind(bind)
    validate(config)
    return config


def build(cls: type, raw: Any, where: str) -> Any:
    """Build dataclass `cls` from a TOML table, refusing unknown keys and wrong types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where or 'root'}] must be a table, not {raw!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"unknown config key {_join(where, key)!r} (known: {', '.join(sorted(known))})")
    kwargs = {key: _coerce(hints[key], value, _join(where, key)) for key, value in raw.items()}
    return cls(**kwargs)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)  # type: ignore[arg-type]
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"config key {key!r} has value {value!r}; allowed: {', '.join(map(repr, allowed))}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"config key {key!r} must be a list, not {value!r}")
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"config key {key!r} must be a table, not {value!r}")
        return {str(k): _coerce(val_tp, v, f"{key}.{k}") for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            if option is type(None) and value is None:
                return None
            try:
                return _coerce(option, value, key)
            except ConfigError:
                continue
        raise ConfigError(f"config key {key!r} has value {value!r} of the wrong type ({tp})")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"config key {key!r} must be a number, not {value!r}")
        if not math.isfinite(value):  # TOML has nan and inf: a timeout of inf never fires, nan compares false
            raise ConfigError(f"config key {key!r} has value {value!r}; it must be a finite number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key {key!r} must be an integer, not {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ConfigError(f"config key {key!r} must be a {tp.__name__}, not {value!r}")
        return value
    if tp is Any:
        return value
    raise ConfigError(f"config key {key!r}: unsupported type {tp}")


def _check_port(key: str, port: int) -> None:
    if not 0 <= port <= 65535:
        raise ConfigError(f"config key {key!r} has value {port}; a port is 0..65535")


def _check_positive(key: str, value: float, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"config key {key!r} has value {value}; it must be {'>= 0' if zero_ok else '> 0'}")


def _check_listener(where: str, section: ForwardConfig | LumberjackConfig | SegmentServerConfig) -> None:
    """What every TCP listener's section shares: its port, its TLS and its limit per client address."""
    _check_port(f"{where}.port", section.port)
    section.tls.check(f"{where}.tls")
    _check_positive(f"{where}.max_connections_per_peer", section.max_connections_per_peer, zero_ok=True)


def parse_server_address(text: str) -> tuple[str, int, int]:
    """`host:port[:weight]` (a Forward server, as `outputs.forward.standby` and `logport send --server` write
    it) as (host, port, weight); ValueError when the port or weight is not a number."""
    parts = text.rsplit(":", 2) if text.count(":") >= 2 and not text.startswith("[") else text.rsplit(":", 1)
    host = parts[0] or "127.0.0.1"
    port = int(parts[1]) if len(parts) > 1 else 24224
    weight = int(parts[2]) if len(parts) > 2 else 60
    return host, port, weight


def _check_standby(key: str, text: str) -> None:
    """A standby server parses as the Forward output will parse it (`host:port[:weight]`), to a usable port."""
    try:
        _, port, weight = parse_server_address(text)
    except ValueError:
        raise ConfigError(f"config key {key!r} has value {text!r}; it must be \"host:port\" "
                          f"(or \"host:port:weight\")") from None
    if not 1 <= port <= 65535 or weight < 0:
        raise ConfigError(f"config key {key!r} has value {text!r}; the port must be 1..65535 and the weight >= 0")


_ZMQ_TCP_ENDPOINT = re.compile(r"tcp://(?P<host>[^\s:/]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})\Z")


def _check_zmq_endpoint(key: str, text: str) -> None:
    """An endpoint the SUB socket connects to: libzmq refuses a malformed one only at connect, in a
    background task, so the subscription would never run; tcp://host:port or ipc://path."""
    match = _ZMQ_TCP_ENDPOINT.match(text)
    if match and 1 <= int(match["port"]) <= 65535:
        return
    if text.startswith("ipc://") and len(text) > len("ipc://"):
        return
    raise ConfigError(f"config key {key!r} has value {text!r}; it must be \"tcp://host:port\" "
                      f"(port 1..65535) or \"ipc://path\"")


def default_output_name(out: ForwardOutputConfig | LumberjackOutputConfig) -> str:
    """The name of an output without one: `forward-<segment>` for a Forward output, the segment for a Lumberjack one."""
    return f"forward-{out.segment}" if isinstance(out, ForwardOutputConfig) else out.segment


def output_name(out: ForwardOutputConfig | LumberjackOutputConfig) -> str:
    """The name an output's files go by: `DATA/outputs/<name>.checkpoint`, and a Forward output's `<name>.id`.

    A Lumberjack output's is its name prefixed `lumberjack.`, so it may share a name with a Forward output."""
    name = out.name or default_output_name(out)
    return name if isinstance(out, ForwardOutputConfig) else f"lumberjack.{name}"


def check_curve_key(key_name: str, value: str) -> bytes:
    """A Z85 key from the config as bytes; a bad one is refused naming the key (not its value: it may be secret)."""
    import zmq  # only a config with CurveZMQ keys needs libzmq to check them
    from zmq.utils import z85

    if len(value) != 40:
        raise ConfigError(f"config key {key_name!r} must be a 40-character Z85 CurveZMQ key, got {len(value)} characters")
    try:
        z85.decode(value)
    except (ValueError, KeyError, IndexError):
        raise ConfigError(f"config key {key_name!r} is not Z85 text (a CurveZMQ key from zmq.curve_keypair())") from None
    if not zmq.has("curve"):
        raise ConfigError(f"config key {key_name!r} is set but this libzmq was built without CURVE support")
    return value.encode()


def check_segment_name(name: str) -> str:
    """`name` if the store accepts it as a segment's name (its directory's name), else InvalidSegmentName."""
    if not name:
        raise InvalidSegmentName(name, "empty")
    if len(name.encode()) > MAX_SEGMENT_NAME_BYTES:
        raise InvalidSegmentName(name, f"{len(name.encode())} bytes exceeds {MAX_SEGMENT_NAME_BYTES}")
    if not _SEGMENT_NAME.match(name):
        raise InvalidSegmentName(name, "only A-Z a-z 0-9 . _ - are allowed")
    if name in (".", ".."):
        raise InvalidSegmentName(name, "reserved")
    return name


def _segment_name_problem(name: str) -> str:
    """Why the store would refuse `name` as a segment name; empty when it would not."""
    try:
        check_segment_name(name)
    except InvalidSegmentName as e:
        return str(e).removeprefix(f"invalid segment name {name!r}: ")
    return ""


def _check_segment_name(key: str, name: str) -> None:
    """A segment a config key names must be one the store accepts: refused at start, not at the first event."""
    reason = _segment_name_problem(name)
    if reason:
        raise ConfigError(f"config key {key!r} has value {name!r}; not a segment name: {reason}")


def _check_output_file_name(out: ForwardOutputConfig | LumberjackOutputConfig, key: str, value: str,
                            unnamed: str) -> None:
    """An output's name is a file name under DATA/outputs: no `/` or NUL, not `.` or `..`, and
    `<name>.checkpoint`, its longest file name, fits NAME_MAX (any other character is fine: people write
    names like "to fluentd"). An unnamed output is named after its segment, which follows the segment rule."""
    if unnamed:
        reason = _segment_name_problem(value)
        if reason:
            raise ConfigError(f"config key {key!r} has value {value!r}; an output name is a file name "
                              f"and follows the segment name rule: {reason}{unnamed}")
    elif value in (".", "..") or "/" in value or "\0" in value:
        raise ConfigError(f"config key {key!r} has value {value!r}; an output name is a file name: "
                          f"no '/' or NUL, not '.' or '..'")
    file_name = f"{output_name(out)}.checkpoint"
    if len(file_name.encode()) > _MAX_FILE_NAME_BYTES:
        raise ConfigError(f"config key {key!r} has value {value!r}; its checkpoint file name {file_name!r} "
                          f"of {len(file_name.encode())} bytes exceeds {_MAX_FILE_NAME_BYTES}{unnamed}")


def _check_output_names(outputs: OutputsConfig, where_outputs: str = "outputs") -> None:
    """Each output's name is safe as a file name, and no two share one: outputs of one name would share
    a checkpoint file (each resuming from the other's commits); the hub keys its output services by it too."""
    taken: dict[str, str] = {}  # checkpoint file -> the output that has it
    for kind in ("forward", "lumberjack"):
        for i, out in enumerate(getattr(outputs, kind)):
            where = f"{where_outputs}.{kind}[{i}]"
            key, value = (f"{where}.name", out.name) if out.name else (f"{where}.segment", out.segment)
            unnamed = "" if out.name else f" (an output without a name is named {default_output_name(out)!r})"
            _check_output_file_name(out, key, value, unnamed)
            checkpoint = f"outputs/{output_name(out)}.checkpoint"
            other = taken.setdefault(checkpoint, where)
            if other != where:
                raise ConfigError(f"config key {key!r} has value {value!r}; output names must be unique, "
                                  f"but {other} has the same checkpoint file {checkpoint!r}{unnamed}")


def validate(config: Config) -> None:
    """The checks types alone cannot make: each section's own, written beside its dataclass."""
    config.check()
