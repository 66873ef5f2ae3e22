"""The variable parts of a message, masked in Spark before Drain mines its pattern: quoted strings, URLs,
e-mail addresses, timestamps, UUIDs, IP addresses and numbers (with a unit, hex ids, versions) become MASK, so
messages that differ only there are one masked message, mined once. Words (user names, paths, hosts) stay:
Drain makes a <*> of a word that varies.

MASK is not Drain's <*>: Drain counts a template's <*> as unlike any token, a masked token as like the same
mask, so a message whose variables are all masked still reaches the similarity threshold of its cluster (as
drain3's own masks, <NUM>, <IP>, ... do). Templates show both as <*> (miner.py).

One regular expression, one pass over each message: the alternatives are tried where a token starts, in this
order, and the leftmost match wins (a quoted string or URL is one <*>, whatever it holds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logport.spark.logs.fields import TIMESTAMP

if TYPE_CHECKING:
    from pyspark.sql import Column

MASK = "<_>"
_HEX = "[0-9a-fA-F]"
# Possessive quantifiers (*+, ++) where a failed match must not backtrack: most tokens are words that are
# none of these, and each alternative should give up on a word after one scan of it.
QUOTED = r"\"[^\"\\]*+(?:\\.[^\"\\]*+)*+\""  # a "quoted string" with \" escapes, as an unrolled loop
VARIABLES: tuple[str, ...] = (
    QUOTED,
    r"'[^'\\]*+(?:\\.[^'\\]*+)*+'(?!\w)",  # 'quoted'
    r"[a-zA-Z][a-zA-Z0-9+.-]*+://[^\s\"'<>]++",  # URL
    r"[\w.+-]++@[\w-]+(?:\.[\w-]+)+",  # e-mail address
    TIMESTAMP,
    rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}(?!\w)",  # UUID
    r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?!\w|\.\d)",  # IPv4[:port]
    rf"(?:{_HEX}{{1,4}}:){{7}}{_HEX}{{1,4}}(?![\w:])",  # IPv6 (uncompressed)
    # numbers: hex, Go's compound durations, decimals and versions with a unit of up to 3 letters (12ms,
    # 3.5MiB, 80%), hex ids with a digit
    r"[-+]?(?:0x[0-9a-fA-F]++|(?:\d+(?:\.\d+)?(?:h|m|s|ms|us|µs|ns)){2,}|\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?"
    r"[a-zA-Zµ%]{0,3}|[a-fA-F]*+\d[0-9a-fA-F]*+)(?!\w|\.\w)",
)
# A variable starts a token: not right after a letter, digit, `_` or `.` (a test that fails at once inside words).
VARIABLE = r"(?<![\w.])(?:" + "|".join(VARIABLES) + ")"
# A body that starts with a quoted string (klog's structured messages: "SyncLoop ADD" pods=[...]) keeps it:
# it is the message, the rest its values.
LEADING_QUOTED = "^" + QUOTED


def masked_column(body: Column) -> Column:
    """The body with its variables masked (after a leading quoted string) and runs of white space made one
    space; null where nothing is left."""
    from pyspark.sql import functions as F

    lead = F.regexp_extract(body, LEADING_QUOTED, 0)
    rest = F.regexp_replace(body.substr(F.length(lead) + 1, F.lit(1 << 30)), VARIABLE, MASK)
    return F.nullif(F.trim(F.regexp_replace(F.concat(lead, rest), r"\s+", " ")), F.lit(""))
