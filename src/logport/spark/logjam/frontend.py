"""Frontend page and ajax messages: their timings from `rts`, the match to their backend request within 5 minutes
(one frontend message per backend request id; backend-only pages take no part), the drop reasons (specs 6.2-6.5),
and the state that carries the match across batches (backend ids of the last 5 minutes, frontend messages waiting
for theirs).

A frontend message whose backend request has not come is not decided while the newest message time seen (the
clock, kept in the state) is within 5 minutes of it: it waits, in the state, for a later batch. Fixed on purpose
(docs/pipeline.md): a failed match is `illegal` for pages too, and an accepted message is filed under its backend
request's day and minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from logport.spark.logjam.fields import AJAX, PAGE, REQUEST

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from logport.spark.logjam.aggregate import Cache

MATCH_WINDOW_US = 5 * 60 * 1_000_000  # a frontend message and its backend request: at most 5 minutes apart
OUTLIER_MS = 60_000  # page_time / ajax_time above this are outliers (importer-parser.h)
REASONS = ("accepted", "outlier", "nav_timing", "illegal", "corrupted", "invalid")
PAGE_TIMINGS = 16  # rts of a page: Navigation Timing's 16 marks; of an ajax call: its start and end

# What a frontend message keeps while it waits (its columns in the `frontend_waiting` state), and r_<resource>.
CANDIDATE_COLUMNS = ("hub", "segment", "offset", "index", "time", "kind", "app", "env", "date", "minute", "page",
                     "module", "rts", "frontend_key", "user_agent")
BACKEND_ID_COLUMNS = ("key", "time", "date", "minute")


@dataclass
class FrontendOutcome:
    accepted: DataFrame  # stats rows of the accepted messages (their backend request's date and minute)
    outcomes: DataFrame  # app, env, date, user_agent, reason: every message decided in this batch
    backend_ids: DataFrame  # state: backend ids of the last 5 minutes not matched yet
    waiting: DataFrame  # state: frontend messages not decided yet


def timings(kind: Column, rts: Column) -> tuple[Column, Column, dict[str, Column], Column]:
    """(drop reason before the match: corrupted or null, drop reason after it: nav_timing / invalid / outlier or
    null, the timing resources, the page apdex value) of a frontend message's `rts` (importer-processor.c:1104-1205,
    1330-1373)."""
    from pyspark.sql import functions as F

    parts = F.split(rts, ",")
    count = F.when(kind == PAGE, PAGE_TIMINGS).otherwise(2)
    well_formed = (F.size(parts) == count) & F.forall(parts, lambda p: p.rlike("^[0-9]{0,18}$"))
    corrupted = F.when(rts.isNull() | ~F.coalesce(well_formed, F.lit(False)), F.lit("corrupted"))
    values_ = F.transform(parts, lambda p: F.coalesce(F.nullif(p, F.lit("")).try_cast("bigint"), F.lit(0)))

    def t(i: int) -> Column:  # the i-th mark (null beyond the end: a message whose rts is corrupted)
        return F.try_element_at(values_, F.lit(i + 1))

    # a page: relative to navigationStart (fetchStart when that is 0); positive marks only
    base = F.when(t(0) == 0, t(1)).otherwise(t(0))

    def rel(i: int) -> Column:
        value = base if i == 0 else t(i)
        return F.when(value > 0, value - base).otherwise(value)

    nav, fetch, request, response, response_end = rel(0), rel(1), rel(6), rel(7), rel(8)
    dom_interactive, dom_complete, load_end = rel(10), rel(13), rel(15)
    ordered = (nav >= 0) & (dom_interactive > 0) & (nav <= request) & (request <= response) & \
        (response <= response_end) & (response_end <= dom_complete)
    page_time = F.when(load_end == 0, 1).otherwise(load_end)
    page_reason = (F.when(base == 0, F.when(F.forall(values_, lambda v: v == 0), F.lit("nav_timing"))
                          .otherwise(F.lit("invalid")))
                   .when(~ordered, F.lit("invalid"))
                   .when(page_time > OUTLIER_MS, F.lit("outlier")))
    ajax = t(1) - t(0)
    ajax_time = F.when(ajax == 0, 1).otherwise(ajax)
    ajax_reason = F.when(ajax < 0, F.lit("invalid")).when(ajax_time > OUTLIER_MS, F.lit("outlier"))
    page_values = {
        "navigation_time": fetch, "connect_time": request - fetch, "request_time": response - request,
        "response_time": response_end - response, "processing_time": dom_complete - response_end,
        "load_time": load_end - dom_complete, "page_time": page_time, "dom_interactive": dom_interactive,
        "frontend_time": page_time,
    }
    values = {name: F.when(kind == PAGE, v.cast("double")) for name, v in page_values.items()}
    values["ajax_time"] = F.when(kind == AJAX, ajax_time.cast("double"))
    values["frontend_time"] = F.when(kind == PAGE, page_time).otherwise(ajax_time).cast("double")
    after = F.when(kind == PAGE, page_reason).otherwise(ajax_reason)
    return corrupted, after, values, F.when(kind == PAGE, load_end.cast("double"))


def match_frontend(msgs: DataFrame, waiting_in: DataFrame | None, backend_in: DataFrame | None,
                   clock_us: int | None, resources: tuple[str, ...], cache: Cache) -> FrontendOutcome:
    """Decide this batch's frontend messages and those waiting from earlier batches against the backend requests
    of this batch and of the last 5 minutes before it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counted = F.col("status").isNull()
    columns = [*CANDIDATE_COLUMNS, *(f"r_{n}" for n in resources)]
    candidates = msgs.where(counted & F.col("kind").isin(PAGE, AJAX)).select(*columns)
    if waiting_in is not None:
        candidates = candidates.unionByName(waiting_in.select(*columns))
    backend = msgs.where(counted & (F.col("kind") == REQUEST) & F.col("request_id").isNotNull()
                         & ~F.col("backend_only")).select(
        F.concat_ws("-", "stream", "request_id").alias("key"), "time", "date", "minute")
    if backend_in is not None:
        backend = backend.unionByName(backend_in.select(*BACKEND_ID_COLUMNS))
    # a duplicate backend id is refused: the earliest request keeps it
    first = Window.partitionBy("key").orderBy("time", "date", "minute")
    backend = backend.withColumn("n", F.row_number().over(first)).where("n = 1").drop("n")

    kind, rts = F.col("kind"), F.col("rts")
    corrupted, after, values, papdex = timings(kind, rts)
    parsed = candidates.select("*", corrupted.alias("corrupted"))
    f, b = parsed.alias("f"), backend.alias("b")
    near = F.abs(F.unix_micros(F.col("f.time")) - F.unix_micros(F.col("b.time"))) <= MATCH_WINDOW_US
    joined = f.join(b, (F.col("f.frontend_key") == F.col("b.key")) & F.col("f.corrupted").isNull() & near, "left")
    # of the messages that found one backend request, the earliest uses it up
    earliest = Window.partitionBy("b.key").orderBy("f.time", "f.hub", "f.segment", "f.offset", "f.index")
    ranked = joined.select("f.*", F.col("b.key").alias("matched"), F.col("b.date").alias("b_date"),
                           F.col("b.minute").alias("b_minute"), F.col("b.time").alias("b_time"),
                           F.when(F.col("b.key").isNotNull(), F.row_number().over(earliest)).alias("rank"))
    late = F.lit(True) if clock_us is None else F.unix_micros("time") < F.lit(clock_us - MATCH_WINDOW_US)
    reason = (F.when(F.col("corrupted").isNotNull(), F.col("corrupted"))
              .when(F.col("rank") == 1, F.coalesce(after, F.lit("accepted")))
              .when(F.col("rank") > 1, F.lit("illegal"))
              .when(late, F.lit("illegal")))  # null: not decided, waits
    decided = ranked.select("*", reason.alias("reason"), papdex.alias("papdex"),
                            *[v.alias(f"t_{name}") for name, v in values.items() if name in resources])
    decided = cache(decided)

    # the timings computed for the message's kind; what it gave for the others
    timed = {name: F.coalesce(F.col(f"t_{name}"), F.col(f"r_{name}")) for name in values if name in resources}
    accepted = decided.where(F.col("reason") == "accepted").select(
        "app", "env", F.col("b_date").alias("date"), F.col("b_minute").alias("minute"), "page", "module", "kind",
        *[timed.get(name, F.col(f"r_{name}")).alias(f"r_{name}") for name in resources], "papdex")
    outcomes = decided.where(F.col("reason").isNotNull()).select("app", "env", "date", "user_agent", "reason")
    waiting = decided.where(F.col("reason").isNull()).select(*columns)
    used = decided.where(F.col("rank") == 1).select(F.col("matched").alias("key"))
    recent = backend if clock_us is None else backend.where(
        F.unix_micros("time") >= F.lit(clock_us - MATCH_WINDOW_US))
    backend_out = recent.join(used, "key", "left_anti").select(*BACKEND_ID_COLUMNS)
    return FrontendOutcome(accepted, outcomes, backend_out, waiting)
