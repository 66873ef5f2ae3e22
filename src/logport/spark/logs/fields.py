"""What a log record says, as Spark columns over its VARIANT: the message, the host, the event's time (for
segment-protocol JSON) and the level, read from the fields real shippers write and normalised to LEVELS.

docs/pipeline.md ("Levels") has the table this module implements; tests/spark/test_log_fields.py holds it to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

LEVELS = ("trace", "debug", "info", "notice", "warn", "error", "critical", "unknown")

# A level's name as shippers and loggers write it (compared in lower case) -> the level.
LEVEL_NAMES: dict[str, str] = {
    **dict.fromkeys(("trace", "trc", "finest", "finer", "verbose", "vrb", "t"), "trace"),
    # java.util.logging's FINE and CONFIG sit between its FINER and INFO
    **dict.fromkeys(("debug", "dbg", "dbug", "fine", "config", "d"), "debug"),
    **dict.fromkeys(("info", "inf", "information", "informational", "i"), "info"),
    **dict.fromkeys(("notice", "note", "n"), "notice"),
    **dict.fromkeys(("warn", "warning", "wrn", "w"), "warn"),
    **dict.fromkeys(("error", "err", "eror", "severe", "e"), "error"),
    # syslog's emerg/alert/crit, fatal (log4j, logrus, Ruby), panic and dpanic (zap, logrus)
    **dict.fromkeys(("critical", "crit", "fatal", "ftl", "f", "emerg", "emergency", "alert", "panic", "dpanic"),
                    "critical"),
}

# syslog severity (RFC 5424; journald's PRIORITY) -> level
SYSLOG_SEVERITIES = {0: "critical", 1: "critical", 2: "critical", 3: "error", 4: "warn", 5: "notice", 6: "info",
                     7: "debug"}
# pino and Bunyan write `level` as a number
PINO_LEVELS = {10: "trace", 20: "debug", 30: "info", 40: "warn", 50: "error", 60: "critical"}
# OpenTelemetry's SeverityNumber: 1-4 TRACE, 5-8 DEBUG, 9-12 INFO, 13-16 WARN, 17-20 ERROR, 21-24 FATAL
OTEL_LEVELS = ("trace", "debug", "info", "warn", "error", "critical")

# Where shippers put a level, first found wins: (top-level key, path inside it, how a number there reads).
LEVEL_FIELDS: tuple[tuple[str, str, str | None], ...] = (
    ("level", "$", "pino"),  # Fluent Bit/Fluentd parsers, zap, logrus, logback/log4j JSON, Serilog; pino, Bunyan
    ("log.level", "$", None),  # ECS with dotted keys (ecs-logging libraries)
    ("log", "$.level", None),  # ECS nested (Filebeat, Elastic Agent)
    ("severity", "$", "syslog"),  # Fluentd's syslog input, Google Cloud's LogEntry; syslog numbers
    ("log_level", "$", None),
    ("loglevel", "$", None),
    ("levelname", "$", None),  # Python's logging (python-json-logger)
    ("lvl", "$", None),  # log15, go-kit
    ("level_name", "$", None),  # Monolog
    ("severity_text", "$", None),  # OpenTelemetry
    ("severity_number", "$", "otel"),
    ("PRIORITY", "$", "syslog"),  # journald
    ("pri", "$", "pri"),  # syslog PRI: facility * 8 + severity (Fluent Bit's and Fluentd's syslog parsers)
)
HOST_FIELDS = (("host", "$.name"), ("host.name", "$"), ("host", "$"), ("hostname", "$"), ("_HOSTNAME", "$"),
               ("kubernetes", "$.host"), ("host", "$.hostname"))
# journald's MESSAGE is read on its own: a struct cannot hold it beside `message` (Spark's names ignore case)
MESSAGE_FIELDS = (("message", "$"), ("log", "$"), ("msg", "$"))
UPPER_MESSAGE = "$.MESSAGE"
# The event's own time, for segment-protocol JSON (stored without one): RFC 3339 text or epoch seconds,
# milliseconds, microseconds or nanoseconds.
TIME_FIELDS = ("@timestamp", "timestamp", "time", "ts")
STREAM = "stream"
# Every top-level key read, fetched from the record in one pass as a struct of VARIANTs (one lookup per key
# instead of one per path and type).
RECORD_KEYS = tuple(dict.fromkeys([k for k, _, _ in LEVEL_FIELDS] + [k for k, _ in HOST_FIELDS]
                                  + [k for k, _ in MESSAGE_FIELDS] + list(TIME_FIELDS) + [STREAM]))
RECORD_STRUCT = "struct<" + ",".join(f"`{key}`:variant" for key in RECORD_KEYS) + ">"

LINE_CHARS = 1000  # of a message's first line, what its level and pattern are read from

# --- a message's head: the header a logger writes before the text, and the level word in it ---------------

_LEVEL_WORD = ("(?i:trace|debug|information|info|notice|warning|warn|error|err|critical|crit|fatal|severe|"
               "emergency|emerg|alert|panic)")
# Timestamps at a line's start: ISO 8601 / RFC 3339 (also with / and a space), nginx/Apache, syslog, bare times.
TIMESTAMP = (r"(?:\d{4}[-/]\d{2}[-/]\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:\s?(?:Z|[+-]\d{2}:?\d{2}|UTC))?)?"
             r"|\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}(?:\.\d+)?(?: [+-]\d{4})?"
             r"|\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
             r"|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}"
             r"|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_KLOG = r"([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+[\w.-]+:\d+\]\s+"  # Kubernetes' klog, glog
_RUBY = r"[DIWEFAU], \[[^\]]*\]\s+(\w+) -- [^:]*:\s+"  # Ruby's Logger (Rails)
_STAMP = rf"\[?{TIMESTAMP}\]?"
# [timestamp] [logger -] [channel.]LEVEL: Log4j/Logback/Spring, Python's formats, nginx's error log, Monolog
_LEVELLED = rf"(?:{_STAMP}\s*(?:-\s+)?)?(?:[\w.$-]+\s+-\s+)?(?:[\w-]+\.)?[\[<(]?({_LEVEL_WORD})[\]>)]?(?!\w)"
# replaced by its groups: the level word of whichever form the line has, or nothing
LEVEL_HEAD = rf"^(?:{_KLOG}|{_RUBY}|{_LEVELLED}|)(?s:.*)"
LOGFMT_LEVEL = r"(?<![\w])(?:level|lvl|severity)=[\"']?(\w+)"  # logfmt (logrus, go-kit, containerd)
# what is removed from a line's start before its pattern is mined: the header, if it is one of those forms
BODY_HEAD = rf"^(?:{_KLOG}|{_RUBY}|{_STAMP}\s*(?:-\s+)?(?:[\[<(]?{_LEVEL_WORD}[\]>)]?(?:\s*[:|-]\s*|\s+))?|\[{_LEVEL_WORD}\]\s*|{_LEVEL_WORD}:\s*)"
LOGFMT_MESSAGE = r"(?:^|\s)msg=\"([^\"\\]*+(?:\\.[^\"\\]*+)*+)\""


def _map(items: dict[object, str]) -> Column:
    from pyspark.sql import functions as F

    return F.create_map(*[F.lit(x) for pair in items.items() for x in pair])


def record_fields(record: Column) -> Column:
    """The record's RECORD_KEYS as a struct of VARIANTs (null where absent); the functions below read it."""
    from pyspark.sql import functions as F

    return F.try_variant_get(record, "$", RECORD_STRUCT)


def _text(value: Column) -> Column:
    """A VARIANT's value as text when it is a scalar (an object or array is not text)."""
    from pyspark.sql import functions as F

    text = F.try_variant_get(value, "$", "string")
    nested = (F.try_variant_get(value, "$", "map<string,variant>").isNotNull()
              | F.try_variant_get(value, "$", "array<variant>").isNotNull())
    return F.when(text.startswith("{") | text.startswith("["), F.when(~nested, text)).otherwise(text)


def _at(fields: Column, key: str, path: str) -> Column:
    from pyspark.sql import functions as F

    value = fields.getField(key)
    return value if path == "$" else F.try_variant_get(value, path, "variant")


def host_column(fields: Column) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(*[_text(_at(fields, key, path)) for key, path in HOST_FIELDS])


def message_column(fields: Column, record: Column) -> Column:
    from pyspark.sql import functions as F

    found = [_text(_at(fields, key, path)) for key, path in MESSAGE_FIELDS]
    return F.coalesce(*found, _text(F.try_variant_get(record, UPPER_MESSAGE, "variant")))


def first_line(message: Column) -> Column:
    """The message's first non-blank line, trimmed, at most LINE_CHARS characters."""
    from pyspark.sql import functions as F

    blank = F.lit(" \t\r\n")
    line = F.substring_index(F.ltrim(message, blank), "\n", 1)
    return F.nullif(F.rtrim(F.substring(line, 1, LINE_CHARS), blank), F.lit(""))


def _number_level(value: Column, kind: str) -> Column:
    from pyspark.sql import functions as F

    if kind == "pino":
        return F.try_element_at(_map(PINO_LEVELS), value)  # type: ignore[arg-type]
    if kind == "syslog":
        return F.try_element_at(_map(SYSLOG_SEVERITIES), value)  # type: ignore[arg-type]
    if kind == "pri":
        return F.when(value >= 0, F.try_element_at(_map(SYSLOG_SEVERITIES), value % 8))  # type: ignore[arg-type]
    if kind == "otel":
        names = F.array(*[F.lit(n) for n in OTEL_LEVELS])
        return F.when(value.between(1, 24), F.element_at(names, ((value - 1) / 4).cast("int") + 1))
    raise ValueError(kind)


def level_column(fields: Column, line: Column) -> Column:
    """The level: the first level field with a known value, else the level word in the line's head, else
    `error` for a container's stderr (`stream`, a weak hint), else `unknown`."""
    from pyspark.sql import functions as F

    names = _map(LEVEL_NAMES)  # type: ignore[arg-type]
    found = []
    for key, path, numbers in LEVEL_FIELDS:
        value = _at(fields, key, path)
        found.append(F.try_element_at(names, F.lower(F.trim(F.try_variant_get(value, "$", "string")))))
        if numbers is not None:
            found.append(_number_level(F.try_variant_get(value, "$", "int"), numbers))
    head = F.regexp_replace(line, LEVEL_HEAD, "$1$2$3")
    logfmt = F.when(line.contains("level=") | line.contains("lvl=") | line.contains("severity="),
                    F.regexp_extract(line, LOGFMT_LEVEL, 1))
    found += [F.try_element_at(names, F.lower(head)), F.try_element_at(names, F.lower(logfmt))]
    stream = F.try_variant_get(fields.getField(STREAM), "$", "string")
    found.append(F.when(stream == "stderr", F.lit("error")))
    return F.coalesce(*found, F.lit("unknown"))


def body_column(line: Column) -> Column:
    """What a pattern is mined from: the `msg` of a logfmt line, else the line without its header (timestamp
    and level, klog's, Ruby Logger's)."""
    from pyspark.sql import functions as F

    logfmt = F.when(line.contains('msg="'), F.regexp_replace(F.regexp_extract(line, LOGFMT_MESSAGE, 1),
                                                             r"\\(.)", "$1"))
    return F.coalesce(F.nullif(logfmt, F.lit("")), F.regexp_replace(line, BODY_HEAD, ""))


def time_column(fields: Column) -> Column:
    """The record's own time (TIME_FIELDS): RFC 3339 text, or epoch s/ms/us/ns by its magnitude."""
    from pyspark.sql import functions as F

    times = []
    for key in TIME_FIELDS:
        value = fields.getField(key)
        number = F.try_variant_get(value, "$", "double")
        micros = (F.when(number < 1e11, number * 1e6).when(number < 1e14, number * 1e3)
                  .when(number < 1e17, number).otherwise(number / 1e3))
        times.append(F.coalesce(F.timestamp_micros(micros.cast("bigint")),
                                F.try_to_timestamp(F.try_variant_get(value, "$", "string"))))
    return F.coalesce(*times)
