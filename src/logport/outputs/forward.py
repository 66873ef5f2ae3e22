"""Durable Forward output: follow a segment from its checkpoint and forward each stored batch to a
Fluentd-compatible server, committing the checkpoint only after the server acknowledged everything read.

Stored batches already are PackedForward messages; each is sent with a chunk id derived from the
output's identity (random, kept beside its checkpoint), segment and offset, so a logport server
downstream deduplicates a resend after a restart, but never mistakes another hub's batch for one.
Forward v1.5 entries with metadata, which older receivers refuse, are sent as plain entries unless
`metadata_entries = "keep"`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import weakref

import msgpack
from prometheus_client import Counter

from logport import tls as tls_contexts
from logport.batch import BatchDecodeError, decode_batch
from logport.clients.forward import MAX_RETRY_WAIT, ForwardSender, SenderConfig, ServerAddress
from logport.clients.retry import Backoff
from logport.config import ForwardOutputConfig, output_name
from logport.errors import OffsetTruncated, PeerUnavailable
from logport.outputs.follower import SegmentFollower
from logport.outputs.lag import OutputLag
from logport.protocols import forward as fp
from logport.runtime import Runtime

log = logging.getLogger("logport.forward.output")

_PASSED_OPTIONS = ("fluent_signal", "metadata")  # what a downstream Fluentd / Fluent Bit may use
# A stored entry is a fixarray of 2 (what the Forward server keeps and logport packs); in a v1.5 entry
# `[[time, meta], record]` an array header follows it. A batch without any of these byte pairs has no
# v1.5 entry, which a few C searches tell without walking its entries.
_METADATA_MARKS = (b"\x92\x92", b"\x92\xdc", b"\x92\xdd")
_ARRAY_FIRST = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_UNREADABLE = (msgpack.OutOfData, ValueError, TypeError, IndexError, msgpack.FormatError, msgpack.StackError)


def strip_metadata(entries: bytes) -> bytes | None:
    """`entries` with each v1.5 `[[time, meta], record]` entry rewritten to `[time, record]` and every other
    byte as it was; None when there is no such entry (or the entries are not msgpack: sent as stored).

    @fluent-org/logger's FluentServer and older Fluentd refuse a whole chunk holding one such entry,
    without an ack, so the output would resend it for ever. Records are skipped, never decoded.
    """
    if not any(mark in entries for mark in _METADATA_MARKS):
        return None
    up = msgpack.Unpacker(max_buffer_size=max(len(entries), 1), ext_hook=msgpack.ExtType, strict_map_key=False)
    up.feed(entries)
    pieces: list[bytes] = []
    copied = pos = 0  # entries[copied:pos] go out unchanged
    n = len(entries)
    try:
        while pos < n:
            if entries[pos] != 0x92 or entries[pos + 1] not in _ARRAY_FIRST:
                up.skip()
                pos = up.tell()
                continue
            up.read_array_header()
            inner = up.read_array_header()
            time_start = up.tell()
            up.skip()
            time_end = up.tell()
            for _ in range(inner - 1):  # the meta (of a v1.5 entry; anything else is left as it is)
                up.skip()
            record_start = up.tell()
            up.skip()
            end = up.tell()
            if inner == 2:
                pieces += (entries[copied:pos], b"\x92", entries[time_start:time_end], entries[record_start:end])
                copied = end
            pos = end
    except _UNREADABLE:
        return None
    if not pieces:
        return None
    pieces.append(entries[copied:])
    return b"".join(pieces)


def chunk_id(identity: str, segment: str, offset: int) -> str:
    """Deterministic per output and stored batch: the same batch resent gets the same chunk id.

    `identity` (SegmentFollower.identity) is what keeps two hubs, or one hub before and after its
    data directory was recreated, from sending the same ids for the same offsets of a same-named output.
    An output that a version before identities ran has its name as identity: these were its ids then.
    """
    digest = hashlib.sha256(f"{identity}\0{segment}\0{offset}".encode()).digest()[:16]
    return base64.b64encode(digest).decode()


_METRICS: weakref.WeakKeyDictionary[object, tuple[Counter, Counter]] = weakref.WeakKeyDictionary()


def _metrics(runtime: Runtime) -> tuple[Counter, Counter]:
    """One pair of counters per hub registry, labelled by output (several outputs share them)."""
    registry = runtime.metrics.registry
    if registry not in _METRICS:
        _METRICS[registry] = (
            Counter("logport_forward_output_events", "Events acknowledged downstream", ["output"], registry=registry),
            Counter("logport_forward_output_failures", "Failed sends (resent later)", ["output"], registry=registry),
        )
    return _METRICS[registry]


class ForwardOutput:
    def __init__(self, runtime: Runtime, config: ForwardOutputConfig) -> None:
        self.runtime = runtime
        self.config = config
        self.name = output_name(config)
        self.follower = SegmentFollower(runtime.store, config.segment, self.name, max_bytes=config.max_batch_bytes)
        self.identity = self.follower.identity()
        self.lag = OutputLag(runtime, self.name, self.follower)
        servers = [ServerAddress(config.host, config.port)]
        servers += [ServerAddress.parse(s, standby=True) for s in config.standby]
        context = tls_contexts.client_context(config.tls_ca, verify=config.tls_verify) if config.tls else None
        self.sender = ForwardSender(SenderConfig(
            servers=servers, compress=config.compress, require_ack=True, ack_timeout=config.ack_timeout,
            retries=max(len(servers), 1), retry_wait=config.retry_wait, shared_key=config.shared_key,
            username=config.username, password=config.password,
            hostname=config.self_hostname or runtime.hostname, tls=context))
        sent, failures = _metrics(runtime)
        self.sent_events = sent.labels(self.name)
        self.failures = failures.labels(self.name)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> ForwardOutput:
        await self.sender.start()
        self.lag.start()
        self._task = asyncio.ensure_future(self._run())
        return self

    async def drain(self, timeout: float) -> None:
        """Take nothing new; let the send in flight be acknowledged and checkpointed (at most `timeout` s)."""
        self._stopping = True
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=max(timeout, 0.0))

    async def close(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.lag.close()
        await self.sender.close()

    def messages(self, events: list[tuple[int, bytes]]) -> tuple[list[tuple[bytes, str | bytes | None]], int]:
        """The wire messages for stored batches, and how many events they carry."""
        out: list[tuple[bytes, str | bytes | None]] = []
        count = 0
        for offset, body in events:
            try:
                batch = decode_batch(body)
            except BatchDecodeError:
                log.warning("stored event is not a batch; skipped",
                            extra={"segment": self.config.segment, "offset": offset})
                continue
            option = {k: batch.option[k] for k in _PASSED_OPTIONS if k in batch.option}
            option["chunk"] = chunk_id(self.identity, self.config.segment, offset)
            size = batch.size if batch.size is not None else fp.scan_entries(batch.entries)[1]
            option["size"] = size
            entries = batch.entries
            if self.config.metadata_entries == "strip":
                stripped = strip_metadata(entries)
                if stripped is not None:
                    entries = stripped
            out.extend(self.sender.messages(batch.tag, entries, size, option))
            count += size
        return out, count

    async def _run(self) -> None:
        retry = Backoff(self.config.retry_wait, MAX_RETRY_WAIT).retrying()
        while not self._stopping:
            try:
                if await self._send_next():
                    retry.succeeded()
                continue
            except Exception as e:
                wait = retry.failed() or 0.0  # it never gives up: never None
                if isinstance(e, PeerUnavailable):
                    log.warning("forward output: %s; retrying in %.1f s", e, wait, extra={"output": self.name})
                else:  # anything else (a store read, a checkpoint write) must not stop forwarding for good
                    log.exception("forward output failed; retrying from the checkpoint in %.1f s", wait,
                                  extra={"output": self.name})
            self.failures.inc()
            self.follower.rewind()
            await asyncio.sleep(wait)

    async def _send_next(self) -> bool:
        """Send the next stored batches and commit them once acknowledged; False if there was nothing."""
        try:
            batch = await self.follower.next_batch(wait=1.0)
        except OffsetTruncated as e:
            log.error("retention removed unsent events; continuing after them",
                      extra={"segment": self.config.segment, "offset": e.offset, "start_offset": e.start_offset})
            return False
        if batch is None:
            return False
        messages, count = self.messages(batch.events)
        if messages:
            await self.sender.send_messages(messages)
        await self.follower.commit(batch.next_offset)
        self.sent_events.inc(count)
        return True


async def start(runtime: Runtime, output_config: ForwardOutputConfig) -> ForwardOutput:
    return await ForwardOutput(runtime, output_config).start()
