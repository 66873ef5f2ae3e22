"""Which logjam messages count, and their fields as the importer normalises them (specs 1.1-1.3, 2.2, 5.1), in one
projection of the messages: day and minute, page and module, response code, severity, total_time, exceptions,
other_time, allocated_memory, API caller defaults, callers and senders, and the reasons to store a request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logport.lake.resources import Resources
from logport.spark.logjam.fields import (
    AJAX,
    EVENT,
    JS,
    PAGE,
    REQUEST,
    integer,
    quoted,
    text,
    truthy,
)
from logport.spark.logjam.streams import StreamColumns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

UNKNOWN_PAGE = "Unknown#unknown_method"
MAX_DRIFT_MS = 172_800_000  # started_at within 2 days of the message's arrival (specs 1.1)
# other_time: total_time minus the time resources present, except these (importer-resources.c:69-83)
NOT_IN_OTHER_TIME = ("total_time", "gc_time", "other_time")
SLOT_BYTES = 40  # allocated_memory = allocated_bytes + 40 * allocated_objects (a 64-bit Ruby's slot)
DRAW_SCALE = 4294967296.0  # crc32's range: a draw is crc32(identity/check) / 2**32 < sampling_rate_400s
# Why a message is not counted (ctx.counters "logjam_dropped_<status>").
DROP_STATUSES = ("topic", "stream", "started_at", "clock", "ignored", "description")


def given_page(action: Column | None, logjam_action: Column) -> Column:
    """The page as given: `action` (if present), else `logjam_action`, else Unknown#unknown_method (a JSON null
    too) (importer-processor.c:91-126)."""
    from pyspark.sql import functions as F

    if action is None:
        raw = F.when(logjam_action.isNotNull(), text(logjam_action))
    else:
        raw = F.when(action.isNotNull(), text(action)).otherwise(
            F.when(logjam_action.isNotNull(), text(logjam_action)))
    return F.coalesce(raw, F.lit(UNKNOWN_PAGE))


def completed_page(page: Column) -> Column:
    """A page completed to Controller#method as the importer does."""
    from pyspark.sql import functions as F

    return (F.when(page == "", F.lit(UNKNOWN_PAGE))
            .when(~page.contains("#"), F.concat(page, F.lit("#unknown_method")))
            .when(page.endswith("#"), F.concat(page, F.lit("unknown_method")))
            .otherwise(page))


def module_of(page: Column) -> Column:
    """`::` and the page's text before its first `:`, or else before its `#` (importer-processor.c:128-159)."""
    from pyspark.sql import functions as F

    return F.concat(F.lit("::"), F.when(F.instr(page, ":") > 0, F.substring_index(page, ":", 1))
                    .otherwise(F.substring_index(page, "#", 1)))


def lines_severity(record: Column) -> Column:
    """The highest level among the `lines` ([level, time, text]; lines and levels that are null are skipped), 1
    when there is none or it is above 5 (importer-processor.c:264-307)."""
    from pyspark.sql import functions as F

    lines = F.try_variant_get(record, "$.lines", "array<variant>")
    levels = F.transform(lines, lambda line: F.try_variant_get(line, "$[0]", "variant"))
    return F.coalesce(F.aggregate(
        levels, F.lit(-1),
        lambda top, v: F.when(v.isNull() | F.is_variant_null(v), top).otherwise(F.greatest(top, integer(v))),
        lambda top: F.when((top < 0) | (top > 5), F.lit(1)).otherwise(top)), F.lit(1))


def caller_app(caller_id: Column) -> Column:
    """The app of `<app>-<env>-<request id>`: caller_id without its last two `-` parts; null with fewer than two."""
    from pyspark.sql import functions as F

    return F.when(caller_id.rlike("-.*-"), F.regexp_extract(caller_id, r"^(.*)-[^-]*-[^-]*$", 1))


def counter_key(caller_id: Column, caller_action: Column) -> Column:
    """`callers`/`senders` key `<app>@<action>`: both parts present and not empty, the id `<app>-<env>-<rid>`."""
    from pyspark.sql import functions as F

    ok = (F.coalesce(F.length(caller_action), F.lit(0)) > 0) & (F.coalesce(F.length(caller_id), F.lit(0)) > 0)
    return F.when(ok, F.concat(caller_app(caller_id), F.lit("@"), caller_action))


def url_path(url: Column) -> Column:
    """The URL without `scheme://host`, from its first `/` (empty when it has none)."""
    from pyspark.sql import functions as F

    after = F.when(F.instr(url, "://") > 0, url.substr(F.instr(url, "://") + 3, F.length(url))).otherwise(url)
    path = F.when(F.instr(after, "/") > 0, after.substr(F.instr(after, "/"), F.length(after))).otherwise(F.lit(""))
    return F.when(url.isNotNull(), path)


def _draw(check: str, rate: Column) -> Column:
    """A deterministic random draw that succeeds with probability `rate`: crc32 of the message's identity and the
    check (a rerun stores the same requests)."""
    from pyspark.sql import functions as F

    identity = F.concat_ws("/", "hub", "segment", "offset", "index", F.lit(check))
    return F.when(rate >= 1, True).otherwise(F.crc32(identity) / F.lit(DRAW_SCALE) < rate)


def _day_and_minute(started_at: Column, time_basis: str) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    if time_basis == "utc":
        micros = F.unix_micros("time")
        day = F.date_from_unix_date(F.floor(micros / 86_400_000_000).cast("int")).cast("string")
        minute = F.floor(F.pmod(micros, F.lit(86_400_000_000)) / 60_000_000)
    else:  # the producer's wall time as written in started_at, the offset ignored (specs 1.1)
        day = F.substring(started_at, 1, 10)
        minute = F.substring(started_at, 12, 2).try_cast("int") * 60 + F.substring(started_at, 15, 2).try_cast("int")
    return day, minute.cast("smallint")


def resource_columns(resources: Resources) -> list[str]:
    """`r_<name>` for every resource (as given, null when absent); a request's with the derived ones: total_time
    defaulted, other_time recomputed, allocated_memory when absent (specs 2.2)."""
    given = {n: f"r.{quoted(n)}" for n in resources.names}
    derived = {"total_time": "total_time"}
    others = [f"coalesce({given[n]}, 0D)" for n in resources.groups.get("time", ()) if n not in NOT_IN_OTHER_TIME]
    derived["other_time"] = " - ".join(["total_time", *others])
    if "allocated_memory" in resources.names:
        whole = "CAST(TRY_CAST({} AS BIGINT) AS DOUBLE)"  # json_object_get_int64: truncated
        derived["allocated_memory"] = (f"coalesce({given['allocated_memory']}, {whole.format('r.allocated_bytes')} "
                                       f"+ {SLOT_BYTES} * {whole.format('r.allocated_objects')})")
    return [f"CASE WHEN kind = {REQUEST} THEN {derived[n]} ELSE {given[n]} END AS r_{n}" if n in derived
            else f"{given[n]} AS r_{n}" for n in resources.names]


def normalised(messages: DataFrame, resources: Resources, time_basis: str, streams: StreamColumns) -> DataFrame:
    """`messages` (fields.logjam_messages) with what every table needs: `status` (null: counted; else why not),
    app, env, date, minute, page, module, and for requests the normalised fields, `res` (every resource) and
    `reasons` (why it is stored, empty when not). `record` is kept only where a detail table needs it.

    In steps (selects), so that what several columns read is computed once.
    """
    from pyspark.sql import functions as F

    r = F.col("r")
    kind = F.col("kind")
    request = kind == REQUEST
    started_at = F.col("r.started_at")
    wall = F.concat(F.substring(started_at, 1, 10), F.lit(" "), F.substring(started_at, 12, 8))
    valid_started_at = (F.length(started_at) >= 19) & F.substring(started_at, 11, 1).isin("T", " ") & \
        F.try_to_timestamp(wall, F.lit("yyyy-MM-dd HH:mm:ss")).isNotNull()
    drift_ok = F.col("created_ms").isNull() | (F.abs(F.unix_millis("time") - F.col("created_ms")) <= MAX_DRIFT_MS)
    day, minute = _day_and_minute(started_at, time_basis)
    env = F.substring_index("stream", "-", -1)
    app = F.col("stream").substr(F.lit(1), F.length("stream") - F.length(env) - 1)
    page = F.when(kind == JS, given_page(None, r["logjam_action"])).otherwise(
        given_page(r["action"], r["logjam_action"]))
    exceptions = F.filter(r["exceptions"], lambda x: x.isNotNull())
    soft = F.filter(r["soft_exceptions"], lambda x: x.isNotNull())
    given = messages.select(
        "*", app.alias("app"), env.alias("env"), day.alias("date"), minute.alias("minute"), page.alias("page_given"),
        url_path(F.col("r.request_info.url")).alias("path"),
        F.coalesce(valid_started_at, F.lit(False)).alias("valid_started_at"),
        F.coalesce(drift_ok, F.lit(True)).alias("drift_ok"),
        F.when(request, F.coalesce(integer(r["code"]), F.lit(500))).alias("response_code"),
        F.when(request, F.coalesce(integer(r["severity"]), lines_severity(F.col("record")))).alias("severity"),
        F.when(request, exceptions).alias("exceptions_given"), F.when(request, soft).alias("soft_given"),
    )
    ignored = truthy(r["logjam_ignore_message"]) | F.coalesce(
        (streams.ignored_request_uri != "") & F.col("path").startswith(streams.ignored_request_uri), F.lit(False))
    status = (F.when(kind.isNull(), F.lit("topic"))
              .when(~streams.accepted, F.lit("stream"))
              .when(~F.col("valid_started_at"), F.lit("started_at"))
              .when(~F.col("drift_ok"), F.lit("clock"))
              .when(request & ignored, F.lit("ignored"))
              .when((kind == JS) & (F.coalesce(text(r["description"]), F.lit("x")) == ""), F.lit("description")))
    given_total = F.col("r.total_time")
    page = completed_page(F.col("page_given"))
    step = given.select(
        "*", status.alias("status"), page.alias("page"),
        F.when(request, F.when(given_total.isNull() | (given_total == 0), F.lit(1.0)).otherwise(given_total))
        .alias("total_time"),
        F.when(F.size("exceptions_given") > 0, F.col("exceptions_given")).alias("exceptions"),
        F.when(F.size("soft_given") > 0, F.col("soft_given")).alias("soft_exceptions"),
    )
    return _requests(step.withColumn("module", module_of(F.col("page"))), resources, streams)


def _requests(base: DataFrame, resources: Resources, streams: StreamColumns) -> DataFrame:
    """The request fields that read the page and module: API caller defaults, callers, senders, the reasons to
    store it; then the columns every table reads."""
    from pyspark.sql import functions as F

    r = F.col("r")
    kind = F.col("kind")
    request = kind == REQUEST
    frontend = kind.isin(PAGE, AJAX)
    counted = F.col("status").isNull()
    bare_module = F.regexp_replace("module", "^:+", "")
    api = F.col("path").isNotNull() & streams.api_request(bare_module)
    unknown_caller = F.concat(F.lit("unknown-"), F.col("env"), F.lit("-unknown"))
    caller_id = F.when(api & (F.coalesce(r["caller_id"], F.lit("")) == ""), unknown_caller).otherwise(r["caller_id"])
    caller_action = F.when(api & (F.coalesce(r["caller_action"], F.lit("")) == ""), F.lit("Unknown#unknown")) \
        .otherwise(r["caller_action"])
    heap_growth = F.coalesce(r["heap_growth"].try_cast("int"), F.lit(0)) if "heap_growth" in resources.names else F.lit(0)
    req = base.select(
        "*", F.when(request, caller_id).alias("caller_id"), F.when(request, caller_action).alias("caller_action"),
        F.when(request, heap_growth).alias("heap_growth"), bare_module.alias("bare_module"))
    sev, rc, tt = F.col("severity"), F.col("response_code"), F.col("total_time")
    rate = streams.sampling_rate_400s
    module_threshold = streams.module_threshold(F.col("bare_module"))
    reasons = [
        ("slow", (tt > streams.import_threshold) | F.coalesce(tt > module_threshold, F.lit(False))),
        ("fatal", sev >= 4),
        # a severity 3 the first draw missed gets the warning's draw too (importer-processor.c:671-685)
        ("error", (sev == 3) & ((rc >= 500) | _draw("error", rate) | _draw("warning", rate))),
        ("warning", (sev == 2) & _draw("warning", rate)),
        ("5xx", rc >= 500),
        ("4xx", (rc >= 400) & (rc < 500) & _draw("4xx", rate)),
        ("code0", rc == 0),
        ("exceptions", F.col("exceptions").isNotNull()),
        ("heap_growth", F.col("heap_growth") > 0),
    ]
    why = F.filter(F.array(*[F.when(cond, F.lit(name)) for name, cond in reasons]), lambda x: x.isNotNull())
    with_reasons = req.select("*", F.when(request & counted, why).alias("reasons")).selectExpr(
        "*", *resource_columns(resources))
    stored = (request & (F.size("reasons") > 0)) | (counted & kind.isin(JS, EVENT))
    return with_reasons.select(
        "hub", "segment", "offset", "index", "time", "kind", "status", "app", "env", "stream", "date", "minute",
        F.col("r.started_at").alias("started_at"), F.col("r.started_ms").alias("started_ms"), "page", "module",
        *[f"r_{n}" for n in resources.names], "response_code", "severity", "total_time", "exceptions",
        "soft_exceptions", "caller_id", "caller_action",
        F.when(request, F.col("r.sender_id")).alias("sender_id"),
        F.when(request, F.col("r.sender_action")).alias("sender_action"),
        F.when(request, counter_key(F.col("caller_id"), F.col("caller_action"))).alias("caller"),
        F.when(request, counter_key(F.col("r.sender_id"), F.col("r.sender_action"))).alias("sender"),
        F.col("r.request_id").alias("request_id"),
        F.when(request, F.col("r.request_info.headers.`User-Agent`")).otherwise(F.col("r.user_agent"))
        .alias("user_agent"),
        F.col("r.request_info.url").alias("url"), F.col("r.host").alias("host"), "reasons",
        F.when(request, streams.backend_only(F.col("page"))).alias("backend_only"),
        F.when(frontend, F.col("r.rts")).alias("rts"),
        F.when(frontend, F.coalesce("r.logjam_request_id", "r.request_id")).alias("frontend_key"),
        F.when(kind == JS, F.coalesce(text(r["description"]), F.lit("unknown_exception"))).alias("description"),
        F.col("r.logjam_request_id").alias("logjam_request_id"),
        F.col("r.label").alias("label"), F.col("r.cluster").alias("cluster"), F.col("r.uuid").alias("uuid"),
        F.when(stored, F.col("record")).alias("record"),
    )
