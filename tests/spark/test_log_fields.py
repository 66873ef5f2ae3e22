"""The log tables' reading of records, as tables of cases: the level from the fields shippers write (and the
message head, and stderr), the host, the message, the header a pattern is mined without, and the masks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from logport.spark.logs.fields import LEVELS

LEVEL_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("Fluent Bit / zap", {"level": "info", "msg": "x"}, "info"),
    ("logrus JSON", {"level": "warning", "msg": "x"}, "warn"),
    ("logback JSON", {"level": "TRACE", "message": "x"}, "trace"),
    ("Serilog", {"level": "Verbose"}, "trace"),
    ("zap dpanic", {"level": "dpanic"}, "critical"),
    ("logrus fatal", {"level": "fatal"}, "critical"),
    ("level with blanks", {"level": " Error "}, "error"),
    ("pino number", {"level": 30}, "info"),
    ("pino error", {"level": 50}, "error"),
    ("pino fatal", {"level": 60}, "critical"),
    ("unknown number", {"level": 35}, "unknown"),
    ("unknown word", {"level": "loud"}, "unknown"),
    ("level object", {"level": {"x": 1}}, "unknown"),
    ("ECS nested", {"log": {"level": "warn", "logger": "a"}, "message": "x"}, "warn"),
    ("ECS dotted", {"log.level": "ERROR", "message": "x"}, "error"),
    ("Fluentd syslog name", {"severity": "err"}, "error"),
    ("Google Cloud", {"severity": "WARNING"}, "warn"),
    ("Google Cloud notice", {"severity": "NOTICE"}, "notice"),
    ("Google Cloud emergency", {"severity": "EMERGENCY"}, "critical"),
    ("syslog severity number", {"severity": 3}, "error"),
    ("syslog severity text number", {"severity": "7"}, "debug"),
    ("log_level", {"log_level": "debug"}, "debug"),
    ("loglevel", {"loglevel": "INFO"}, "info"),
    ("Python levelname", {"levelname": "CRITICAL", "message": "x"}, "critical"),
    ("Python WARNING", {"levelname": "WARNING"}, "warn"),
    ("log15 lvl", {"lvl": "dbug"}, "debug"),
    ("Monolog level_name", {"level_name": "NOTICE"}, "notice"),
    ("OpenTelemetry text", {"severity_text": "Information"}, "info"),
    ("OpenTelemetry number", {"severity_number": 17}, "error"),
    ("OpenTelemetry number info", {"severity_number": 9}, "info"),
    ("OpenTelemetry out of range", {"severity_number": 25}, "unknown"),
    ("journald PRIORITY", {"PRIORITY": "3", "MESSAGE": "x"}, "error"),
    ("journald info", {"PRIORITY": "6"}, "info"),
    ("syslog pri text", {"pri": "13"}, "notice"),  # facility 1 (user), severity 5
    ("syslog pri number", {"pri": 30}, "info"),  # facility 3 (daemon), severity 6
    ("syslog pri emerg", {"pri": "128"}, "critical"),  # local0.emerg
    ("a level field beats the head", {"level": "info", "message": "ERROR: not this"}, "info"),
    ("an unknown field value falls through", {"level": "loud", "message": "WARN something"}, "warn"),
    ("a field beats stderr", {"level": "info", "stream": "stderr", "log": "x"}, "info"),
    ("Spring Boot line", {"log": "2026-11-18 10:00:00.123  WARN 1 --- [main] c.e.App : slow\n", "stream": "stdout"},
     "warn"),
    ("log4j line", {"message": "2026-11-18T10:00:00,123 ERROR [pool-1] c.e.Job - failed"}, "error"),
    ("nginx error log", {"log": "2026/11/18 10:00:00 [crit] 7#0: *1 SSL_do_handshake() failed", "stream": "stderr"},
     "critical"),
    ("nginx notice", {"log": "2026/11/18 10:00:00 [notice] 1#1: signal process started"}, "notice"),
    ("klog info on stderr", {"log": "I1118 10:00:00.123456       1 kubelet.go:123] started\n", "stream": "stderr"},
     "info"),
    ("klog warning", {"log": "W1118 10:00:00.123456       1 reflector.go:5] watch closed"}, "warn"),
    ("Ruby Logger", {"message": "E, [2026-11-18T10:00:00.123456 #12] ERROR -- : boom"}, "error"),
    ("Ruby Logger info", {"message": "I, [2026-11-18T10:00:00.123456 #12]  INFO -- app: Started"}, "info"),
    ("Python basicConfig", {"message": "INFO:root:hello"}, "info"),
    ("Python with names", {"message": "2026-11-18 10:00:00,123 - app.tasks - WARNING - slow"}, "warn"),
    ("Python asctime levelname name", {"message": "2026-11-18 10:00:00,123 DEBUG app.db: query"}, "debug"),
    ("logrus text", {"log": 'time="2026-11-18T10:00:00Z" level=warning msg="disk almost full"'}, "warn"),
    ("go-kit logfmt", {"message": 'ts=2026-11-18T10:00:00Z caller=main.go:12 lvl=error msg="failed"'}, "error"),
    ("Monolog line", {"message": "[2026-11-18 10:00:00] production.ERROR: Payment failed"}, "error"),
    ("bracketed level", {"message": "[WARN] disk almost full"}, "warn"),
    ("Go panic on stderr", {"log": "panic: runtime error: index out of range", "stream": "stderr"}, "critical"),
    ("leading word", {"message": "Error connecting to db"}, "error"),
    ("stderr, no level", {"log": "something happened\n", "stream": "stderr"}, "error"),
    ("stdout, no level", {"log": "GET /x 200\n", "stream": "stdout"}, "unknown"),
    ("a word inside is not a level", {"message": "user info page viewed"}, "unknown"),
    ("nothing at all", {"n": 1}, "unknown"),
]

HOST_CASES: list[tuple[dict[str, Any], str | None]] = [
    ({"host": "web-1"}, "web-1"),
    ({"host": {"name": "web-2", "os": {"family": "debian"}}}, "web-2"),
    ({"host.name": "web-3"}, "web-3"),
    ({"host": {"hostname": "web-4"}}, "web-4"),
    ({"hostname": "gateway-1"}, "gateway-1"),
    ({"_HOSTNAME": "node-1"}, "node-1"),
    ({"kubernetes": {"host": "ip-10-0-1-17.ec2.internal", "pod_name": "x"}}, "ip-10-0-1-17.ec2.internal"),
    ({"host": {"ip": ["10.0.0.1"]}}, None),
    ({"message": "x"}, None),
]

MESSAGE_CASES: list[tuple[dict[str, Any], str | None]] = [
    ({"message": "a"}, "a"),
    ({"log": "b\n"}, "b"),
    ({"msg": "c"}, "c"),
    ({"MESSAGE": "d"}, "d"),
    ({"log": {"offset": 1, "file": {"path": "/x"}}, "message": "e"}, "e"),  # Beats: `log` is ECS's object
    ({"message": {"x": 1}, "log": "f"}, "f"),
    ({"message": "  \n first line\r\nsecond"}, "first line"),
    ({"message": "   "}, None),
    ({"n": 1}, None),
]

BODY_CASES: list[tuple[str, str]] = [
    ("I1118 10:00:00.123456       1 kubelet.go:123] \"SyncLoop ADD\" source=\"api\"", "\"SyncLoop ADD\" source=\"api\""),
    ("E, [2026-11-18T10:00:00.123456 #12] ERROR -- : [req-1] boom", "[req-1] boom"),
    ("2026-11-18 10:00:00.123  WARN 1 --- [main] c.e.App : slow", "1 --- [main] c.e.App : slow"),
    ("2026/11/18 10:00:00 [error] 7#0: *1 open() failed", "7#0: *1 open() failed"),
    ("2026-11-18 10:00:00,123 - app.tasks - WARNING - slow", "app.tasks - WARNING - slow"),
    ("[WARN] disk almost full", "disk almost full"),
    ("INFO:root:hello", "root:hello"),
    ('time="2026-11-18T10:00:00Z" level=info msg="StartContainer for \\"abc\\" returns" x=1',
     'StartContainer for "abc" returns'),
    ("Started GET \"/\" for 10.0.0.1", "Started GET \"/\" for 10.0.0.1"),
]

MASK_CASES: list[tuple[str, str | None]] = [
    ('Started GET "/users/1" for 10.0.0.1 at 2026-11-18 06:13:20 +0000', "Started GET <_> for <_> at <_>"),
    ('"SyncLoop ADD" source="api" pods=["ns/pod-1"]', '"SyncLoop ADD" source=<_> pods=[<_>]'),
    ("Completed 200 OK in 12ms (Views: 3.4ms | ActiveRecord: 1.2ms)",
     "Completed <_> OK in <_> (Views: <_> | ActiveRecord: <_>)"),
    ("user alice@example.com logged in from 2001:db8:0:0:0:0:0:1", "user <_> logged in from <_>"),
    ("trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7 flags 0x01", "trace <_> span <_> flags <_>"),
    ("took 1m30.5s, retry in 250ms; 3.5MiB of 80%", "took <_>, retry in <_>; <_> of <_>"),
    ("job 8f3a2b1c-1111-4abc-a123-0123456789ab done", "job <_> done"),
    ("fetch https://api.example.com/v1/x?y=1 failed: 503", "fetch <_> failed: <_>"),
    ("can't open 'data file.txt' (errno=2)", "can't open <_> (errno=<_>)"),
    ("connect to 10.1.2.3:5432 refused", "connect to <_> refused"),
    ("Java 17.0.9 on HTTP/1.1, v1.4.2", "Java <_> on HTTP/<_>, v1.4.2"),
    ("deadbeef  is   not\ta number", "deadbeef is not a number"),
    ("worker-3 pid:4021 [http-nio-8080-exec-7]", "worker-<_> pid:<_> [http-nio-<_>-exec-<_>]"),
    ('err="failed to \\"StartContainer\\" for \\"web\\"" pod="a/b"', "err=<_> pod=<_>"),
    ("<_> stays", "<_> stays"),
    ("12:00:01", "<_>"),
    ("  \t ", None),
]


def _records(spark: Any, records: list[Any]) -> Any:
    """A DataFrame of the source's columns with these records (VARIANT), as Forward events."""
    from pyspark.sql import functions as F

    rows = [(f"s{i}", i, 0, "app", None, orjson.dumps(r).decode(), "forward", None, "hub")
            for i, r in enumerate(records)]
    df = spark.createDataFrame(rows, "segment string, offset bigint, index int, tag string, time timestamp, "
                                     "record string, source string, raw binary, hub string")
    return df.withColumn("record", F.parse_json("record"))


def test_level_cases(spark: Any) -> None:
    from pyspark.sql import functions as F

    from logport.spark.logs.fields import first_line, level_column, message_column, record_fields

    df = _records(spark, [r for _, r, _ in LEVEL_CASES]).withColumn("f", record_fields(F.col("record")))
    line = first_line(message_column(F.col("f"), F.col("record")))
    got = {r["offset"]: r["level"] for r in df.select("offset", level_column(F.col("f"), line).alias("level")).collect()}
    wrong = [(name, record, got[i], expected) for i, (name, record, expected) in enumerate(LEVEL_CASES)
             if got[i] != expected]
    assert not wrong, "\n".join(f"{name}: {record} -> {g}, expected {e}" for name, record, g, e in wrong)
    assert {e for _, _, e in LEVEL_CASES} == set(LEVELS)


def test_host_and_message_cases(spark: Any) -> None:
    from pyspark.sql import functions as F

    from logport.spark.logs.fields import first_line, host_column, message_column, record_fields

    records = [r for r, _ in HOST_CASES] + [r for r, _ in MESSAGE_CASES]
    df = _records(spark, records).withColumn("f", record_fields(F.col("record")))
    rows = {r["offset"]: r for r in df.select(
        "offset", host_column(F.col("f")).alias("host"),
        first_line(message_column(F.col("f"), F.col("record"))).alias("line")).collect()}
    assert [rows[i]["host"] for i in range(len(HOST_CASES))] == [h for _, h in HOST_CASES]
    assert [rows[len(HOST_CASES) + i]["line"] for i in range(len(MESSAGE_CASES))] == [m for _, m in MESSAGE_CASES]


@pytest.mark.parametrize("column", ["body", "masked"])
def test_body_and_mask_cases(spark: Any, column: str) -> None:
    from pyspark.sql import functions as F

    from logport.spark.logs.fields import body_column
    from logport.spark.logs.masks import masked_column

    cases = BODY_CASES if column == "body" else MASK_CASES
    df = spark.createDataFrame([(i, text) for i, (text, _) in enumerate(cases)], "i int, text string")
    made = body_column(F.col("text")) if column == "body" else masked_column(F.col("text"))
    got = {r["i"]: r["out"] for r in df.select("i", made.alias("out")).collect()}
    assert [got[i] for i in range(len(cases))] == [expected for _, expected in cases]
