"""What the pipeline's runner hands each table builder for one batch: the session, the batch's id, the lake's
settings and the state the previous batch left (docs/pipeline.md "The lake").

Table builders (logport.spark.logjam, logport.spark.logs) are functions `(events, ctx) -> {table: DataFrame}`;
a name `_state/<name>` in what they return is state for the next batch (a DataFrame the runner writes beside the
batch's tables and commits with them), and `ctx.blobs_out` takes state that is not a table (the pattern miner's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logport.lake.resources import DEFAULT_RESOURCES, Resources

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STATE_PREFIX = "_state/"
TIME_BASES = ("local", "utc")


@dataclass(frozen=True)
class LakeSettings:
    """Fixed for a lake at its first run (`_lake.json`): how minutes are filed and what is summed."""

    time_basis: str = "local"  # "local": the producer's wall time in started_at, as logjam; "utc": the instant
    resources: Resources = DEFAULT_RESOURCES


@dataclass
class BatchContext:
    spark: SparkSession
    batch_id: int
    lake: LakeSettings
    streaming: bool
    # per-stream settings from --streams (logjam's /admin/streams JSON), app-env -> settings; None: every stream
    # is accepted with logjam_app's defaults
    streams: Mapping[str, Mapping[str, Any]] | None = None
    state_in: Callable[[str], DataFrame | None] = lambda name: None  # the previous batch's state table `name`
    blob_in: Callable[[str], bytes | None] = lambda name: None  # the previous batch's state blob `name`
    blobs_out: dict[str, bytes] = field(default_factory=dict)  # state blobs for the next batch
    # what the builders want the batch's log entry to say (rows dropped and why, ...): name -> count
    counters: dict[str, int] = field(default_factory=dict)
    # the runner calls each once the batch's tables and state are written (or the batch failed): builders release
    # what they persisted for the batch (DataFrame.unpersist)
    after_commit: list[Callable[[], object]] = field(default_factory=list)
