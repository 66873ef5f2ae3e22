"""The logjam messages among the source's events, and their fields read once: one cast of each record's VARIANT to
a struct of the fields the importer reads (no JSON parsing, no lookup per field).

A field whose meaning depends on whether it is there at all (`code`, `severity`, `action`, ...) is read as VARIANT
(SQL null: absent; a VARIANT null: present, JSON null), the others with their type: resources as double (a number,
true/false, or text holding a number; anything else counts as absent). The conversions below read a value as the
importer's JSON library (json-c) does (docs/pipeline.md "Malformed fields").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logport.lake.resources import Resources

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Message kinds, by the topic's prefix (specs 1.1); other topics (frontend.webvitals, mobile, unknown) are not counted.
REQUEST, PAGE, AJAX, JS, EVENT = 0, 1, 2, 3, 4
TOPIC_KINDS = (("logs", REQUEST), ("javascript", JS), ("events", EVENT), ("frontend.page", PAGE),
               ("frontend.ajax", AJAX))

# Read as VARIANT: present-but-malformed differs from absent.
VARIANT_FIELDS = ("action", "logjam_action", "code", "severity", "logjam_ignore_message", "description")
TYPED_FIELDS = (
    ("started_at", "string"), ("started_ms", "bigint"), ("request_id", "string"), ("logjam_request_id", "string"),
    ("caller_id", "string"), ("caller_action", "string"), ("sender_id", "string"), ("sender_action", "string"),
    ("exceptions", "array<string>"), ("soft_exceptions", "array<string>"),
    ("request_info", "struct<url:string,headers:struct<`User-Agent`:string>>"),
    ("rts", "string"), ("user_agent", "string"), ("label", "string"), ("host", "string"), ("cluster", "string"),
    ("uuid", "string"),
)
OPTION_FIELDS = "struct<source:string,app_env:string,topic:string,created_ms:bigint>"


def record_type(resources: Resources) -> str:
    """The struct the record VARIANT is cast to: the fields above and every resource (as double)."""
    fields = [f"{quoted(n)}:variant" for n in VARIANT_FIELDS]
    fields += [f"{quoted(n)}:double" for n in resources.names if n not in VARIANT_FIELDS]
    fields += [f"{quoted(n)}:{t}" for n, t in TYPED_FIELDS if n not in resources.names]
    return f"struct<{','.join(fields)}>"


# --- json-c's conversions of a present value (v: a VARIANT column; SQL null = absent) -------------------------

def quoted(name: str) -> str:
    """A column or field name in Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def number(v: Column) -> Column:
    """json_object_get_double: a number; true/false 1/0; a string holding a number (else 0); null, object, array
    0. Null when the field is absent."""
    from pyspark.sql import functions as F

    return F.when(v.isNotNull(), F.coalesce(F.try_variant_get(v, "$", "double"), F.lit(0.0)))


def integer(v: Column, kind: str = "int") -> Column:
    """json_object_get_int (or _int64 with kind bigint): a number truncated toward zero; true/false 1/0; a string
    holding a whole number; anything else, or out of range, 0. Null when absent."""
    from pyspark.sql import functions as F

    return F.when(v.isNotNull(), F.coalesce(F.try_variant_get(v, "$", kind), F.lit(0).cast(kind)))


def text(v: Column) -> Column:
    """json_object_get_string: a string; a number or boolean as its text; an object or array as its JSON; null for
    JSON null and when absent."""
    from pyspark.sql import functions as F

    return F.try_variant_get(v, "$", "string")


def truthy(v: Column) -> Column:
    """json_object_get_boolean: true; a non-zero number; a non-empty string. False otherwise (and when absent)."""
    from pyspark.sql import functions as F

    kind = F.schema_of_variant(v)
    as_text = F.try_variant_get(v, "$", "string")
    return (F.when(v.isNull(), False)
            .when(kind == "BOOLEAN", F.try_variant_get(v, "$", "boolean"))
            .when(kind == "STRING", F.length(as_text) > 0)
            .when(kind.rlike("^(BIGINT|INT|SMALLINT|TINYINT|DOUBLE|FLOAT|DECIMAL)"),
                  F.try_variant_get(v, "$", "double") != 0)
            .otherwise(False))


def logjam_messages(events: DataFrame, resources: Resources) -> DataFrame:
    """One row per logjam message: provenance, `time`, `kind`, `stream` (app-env), `created_ms`, `record` (the
    VARIANT, kept for the detail tables) and `r`, the struct of its fields.

    A message is an event of the logjam listener (source "logjam": the topic and stream in the option) or any
    event tagged `logs.*` (a shipper's logjam request: the topic is the tag; the stream the record's app and env,
    else the tag's `logs.<app>.<env>`).
    """
    from pyspark.sql import functions as F

    types = dict(events.dtypes)
    record = F.col("record") if types.get("record") == "variant" else F.try_parse_json("record")
    option = F.col("option") if types.get("option") == "variant" else F.try_parse_json("option")
    opt = F.try_variant_get(option, "$", OPTION_FIELDS)
    tag = F.col("tag")
    logjam = (F.col("source") == "logjam") & F.col("record").isNotNull()
    shipped = tag.startswith("logs.") & F.col("record").isNotNull()
    selected = events.where(logjam | shipped).select(
        "hub", "segment", "offset", "index", "time", "tag", F.col("source").alias("event_source"),
        opt.alias("opt"), record.alias("record"))
    r = F.try_variant_get("record", "$", record_type(resources))
    from_listener = F.col("event_source") == "logjam"
    topic = F.when(from_listener, F.col("opt.topic")).otherwise(tag)
    kind = F.lit(None).cast("tinyint")
    for prefix, code in reversed(TOPIC_KINDS):
        kind = F.when(topic.startswith(prefix), F.lit(code).cast("tinyint")).otherwise(kind)
    # a shipper's stream: the record's app and env, else the tag's logs.<app>.<env>
    tag_stream = F.nullif(F.regexp_replace(F.regexp_extract(tag, r"^logs\.(.+)\.[^.]+$", 0),
                                           r"^logs\.(.+)\.([^.]+)$", "$1-$2"), F.lit(""))
    app, env = (F.try_variant_get("record", f"$.{name}", "string") for name in ("app", "env"))
    stream = F.when(from_listener, F.col("opt.app_env")).otherwise(
        F.coalesce(F.when(app.isNotNull() & env.isNotNull(), F.concat_ws("-", app, env)), tag_stream))
    return selected.select(
        "hub", "segment", "offset", "index", "time", "record", r.alias("r"),
        F.col("opt.created_ms").alias("created_ms"), kind.alias("kind"), stream.alias("stream"))
