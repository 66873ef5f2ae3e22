"""Writes the pipeline's lake (docs/pipeline.md "The lake"): a batch's tables as Parquet files under
OUT/<table>/<partition>/, its state under `_state/`, both committed with one commit log entry; what a batch that
did not commit left is removed before it is tried again; the lake's settings are fixed at its first run.

A batch's files are written by Spark to `_staging/<batch>/`, then listed in `_staging/<batch>.moved` and renamed
into the table's directories as `<batch>-<n>.parquet`; the entry commits them. A batch that stops before its entry
leaves files no entry lists: its `.moved` list says which, and the next writer removes them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from logport.lake import sketch
from logport.lake.log import FORMAT, LAKE_FILE, LOG_DIR, Entry, LakeError, LakeLog, read_lake_info
from logport.lake.resources import DEFAULT_RESOURCES, Resources, ResourcesError
from logport.lake.resources import parse as parse_resources
from logport.lake.tables import Table
from logport.spark.context import STATE_PREFIX, TIME_BASES, LakeSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STAGING_DIR = "_staging"
STATE_DIR = "_state"
CHECKPOINT_DIR = "_checkpoints"
LOCK_FILE = "_lake.lock"
# What --rebuild removes besides the tables the log lists: everything the writer and Spark's checkpoint keep
LAKE_DIRS = (LOG_DIR, STATE_DIR, STAGING_DIR, CHECKPOINT_DIR)
# A table's partition directory is compacted (its files rewritten as one) once it holds this many batch files
COMPACT_FILES = 32


def sketch_parameters() -> dict[str, Any]:
    """What a reader of the sketch and histogram columns must agree on (lake/sketch.py)."""
    return {"gamma": sketch.GAMMA, "zero_key": sketch.ZERO_KEY, "hist_bounds": list(sketch.HIST_BOUNDS)}


def resources_file(resources: Resources) -> dict[str, list[str]]:
    """A resource list as `_lake.json` keeps it: logjam_resources.yml's structure (`time_resources: [...]`)."""
    return {f"{group}_resources": names for group, names in resources.as_json().items()}


def settings_of(info: Mapping[str, Any]) -> LakeSettings:
    """The LakeSettings a lake's `_lake.json` records."""
    try:
        return LakeSettings(info["time_basis"], parse_resources(info["resources"], LAKE_FILE))
    except (KeyError, ResourcesError) as e:
        raise LakeError(f"{LAKE_FILE}: no valid lake settings ({e})") from None


@dataclass
class BatchOutput:
    """What one batch commits: its tables (with their contract), state tables and blobs for the next batch, and
    what its log entry says besides."""

    tables: dict[str, tuple[Table, DataFrame]] = field(default_factory=dict)
    state: dict[str, DataFrame] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class LakeWriter:
    """The one writer of a lake directory (a lock file keeps a second one out) and its commit log."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.log = LakeLog(self.root)
        self._lock: IO[bytes] | None = None
        self._last: Entry | None = None
        self._last_read = False
        self._held: dict[str, dict[str, None]] | None = None  # table -> its committed files, when read

    # --- the lake as a whole -------------------------------------------------------------------

    def lock(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        f = open(self.root / LOCK_FILE, "ab")  # noqa: SIM115 (held until close())
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise LakeError(f"lake {str(self.root)!r} is being written by another logport pipeline; wait for it "
                            "to finish, or use another --out") from None
        self._lock = f

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def rebuild(self, tables: Iterable[str], checkpoint: Path | None = None) -> None:
        """Remove the lake: its settings, log, state, tables (those the log lists and `tables`) and the streaming
        checkpoint; other files in the directory stay."""
        logged = {name for entry in self.log.entries() for name in (*entry.files, *entry.replaces)}
        for name in (*LAKE_DIRS, *sorted(logged | set(tables))):
            shutil.rmtree(self.root / name, ignore_errors=True)
        if checkpoint is not None:
            shutil.rmtree(checkpoint, ignore_errors=True)
        (self.root / LAKE_FILE).unlink(missing_ok=True)
        self._last, self._last_read, self._held = None, True, None

    def settings(self, time_basis: str | None, resources: Resources | None, *, resources_from: str = "") -> LakeSettings:
        """The lake's settings: those of `_lake.json`, where this run asks for no others; at the first run, the
        ones asked for (else the defaults), written to `_lake.json`. A run asking for other settings than the
        lake's is refused: the lake's rows would mix two ways of counting."""
        info = read_lake_info(self.root)
        if info is None:
            self._refuse_foreign_content()
            chosen = LakeSettings(time_basis or "local", resources or DEFAULT_RESOURCES)
            write_json(self.root / LAKE_FILE, {
                "format": FORMAT, "time_basis": chosen.time_basis, "resources": resources_file(chosen.resources),
                "sketch": sketch_parameters(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            return chosen
        lake = settings_of(info)
        where = f"lake {str(self.root)!r}"
        fix = "use the lake's settings, --rebuild to start it over, or another --out"
        if time_basis is not None and time_basis != lake.time_basis:
            raise LakeError(f"{where} files minutes by --time {lake.time_basis}, not {time_basis}: {fix}")
        if resources is not None and resources.as_json() != lake.resources.as_json():
            raise LakeError(f"{where} sums other resources than {resources_from or 'the resources file'}: {fix}")
        if info.get("sketch") != sketch_parameters():
            raise LakeError(f"{where} was written with other sketch buckets ({info.get('sketch')!r}) than this "
                            "logport's: --rebuild it, or use another --out")
        if lake.time_basis not in TIME_BASES:
            raise LakeError(f"{where}: unknown time basis {lake.time_basis!r} in {LAKE_FILE}")
        return lake

    def _refuse_foreign_content(self) -> None:
        """No `_lake.json` yet: the directory must not hold another pipeline's output (an older logport's tables,
        which the new ones would be mixed with)."""
        ours = {LOCK_FILE, "report.html"}
        found = sorted(p.name for p in self.root.iterdir() if p.name not in ours) if self.root.is_dir() else []
        if found:
            raise LakeError(f"{str(self.root)!r} is not a lake (no {LAKE_FILE}) but holds {', '.join(found[:5])}"
                            f"{' ...' if len(found) > 5 else ''}: an older logport pipeline's output? Use another "
                            "--out, or --rebuild to replace it")

    # --- the log ---------------------------------------------------------------------------------

    @property
    def last(self) -> Entry | None:
        """The last committed entry (read from the log once, then kept as this writer commits)."""
        if not self._last_read:
            self._last, self._last_read = self.log.last(), True
        return self._last

    def next_batch(self) -> int:
        last = self.last
        return 0 if last is None else last.batch + 1

    # --- one batch -------------------------------------------------------------------------------

    def discard_uncommitted(self) -> None:
        """Remove what batches that did not commit left (their files, staging and state), and finish the clean-up
        of committed ones (the files their entry replaced)."""
        staging = self.root / STAGING_DIR
        for moved in sorted(staging.glob("*.moved")) if staging.is_dir() else []:
            listed = json.loads(moved.read_bytes())
            doomed = listed["replaces"] if self.log.is_committed(int(moved.stem)) else listed["files"]
            for name in doomed:
                (self.root / name).unlink(missing_ok=True)
            moved.unlink()
        shutil.rmtree(staging, ignore_errors=True)
        self._remove_unreferenced_state()

    def state_readers(self, spark: SparkSession) -> tuple[Callable[[str], DataFrame | None],
                                                          Callable[[str], bytes | None]]:
        """(state_in, blob_in) for BatchContext: the state the last committed batch left."""
        state = (self.last.info.get("state") if self.last else None) or {}

        def state_in(name: str) -> DataFrame | None:
            path = state.get("tables", {}).get(name)
            return spark.read.parquet(str(self.root / path)) if path else None

        def blob_in(name: str) -> bytes | None:
            path = state.get("blobs", {}).get(name)
            return (self.root / path).read_bytes() if path else None

        return state_in, blob_in

    def commit(self, batch: int, output: BatchOutput) -> Entry:
        """Write the batch's tables and state, then commit them with one entry; partitions that hold COMPACT_FILES
        batch files or more with this batch's are compacted in the same entry."""
        if self.log.is_committed(batch):
            raise LakeError(f"lake {str(self.root)!r}: batch {batch} is committed already")
        tag = f"{batch:020d}"
        staging = self.root / STAGING_DIR / tag
        moves: list[tuple[Path, str]] = []
        files: dict[str, list[str]] = {}
        for name, (table, df) in sorted(output.tables.items()):
            renames = self._renames(self._write_table(df, table, staging / name), staging / name, name, tag)
            files[name] = [rel for _, rel in renames]
            moves += renames
        replaces: dict[str, list[str]] = {}
        for name, (table, df) in sorted(output.tables.items()):
            for rel_dir, old in self._compactable(name, files[name]).items():
                new = self._compact(df.sparkSession, table, rel_dir, old, staging / "_compact" / name, tag)
                moves += new
                files[name].extend(rel for _, rel in new)
                replaces.setdefault(name, []).extend(old)
        state = self._write_state(batch, output)
        write_json(self.root / STAGING_DIR / f"{tag}.moved", {
            "files": [rel for _, rel in moves], "replaces": [p for names in replaces.values() for p in names]})
        for source, rel in moves:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.rename(source, self.root / rel)
        entry = Entry(batch, {k: v for k, v in files.items() if v}, replaces, {**output.info, "state": state})
        self.log.commit(entry)
        self._last, self._last_read = entry, True
        if self._held is not None:
            _hold(self._held, entry)
        self.discard_uncommitted()  # the replaced files, the staging directory, the state no entry reads now
        return entry

    def _write_table(self, df: DataFrame, table: Table, path: Path) -> list[Path]:
        """The table's rows as Parquet under `path` (one file per partition value for aggregates, as many as the
        session's cores for detail tables; each sorted by the table's keys); the files written."""
        partition = list(table.partition)
        keys = table.sort_columns
        # aggregates: few rows, one task writes them, one file per partition value; detail tables (events, stored
        # requests) at most a file per core and partition value, whatever the shuffles before them left
        df = df.coalesce(1 if table.merge is not None else df.sparkSession.sparkContext.defaultParallelism)
        writer = df.sortWithinPartitions(*partition, *keys).write.mode("overwrite")
        if partition:
            writer = writer.partitionBy(*partition)
        writer.parquet(str(path))
        return sorted(path.rglob("*.parquet"))

    @staticmethod
    def _renames(written: list[Path], staged: Path, table: str, tag: str) -> list[tuple[Path, str]]:
        """Where each staged file goes: `<table>/<partition dirs>/<batch>-<n>.parquet` (relative to the lake)."""
        return [(path, f"{table}/{path.parent.relative_to(staged)}/{tag}-{n:05d}.parquet".replace("/./", "/"))
                for n, path in enumerate(written)]

    def _compactable(self, table: str, adding: list[str]) -> dict[str, list[str]]:
        """Partition directories of `table` that will hold COMPACT_FILES batch files or more with this batch's
        (`adding`): their committed batch files (compacted files are never rewritten again)."""
        if self._held is None:  # the log read once; commit() keeps it up to date
            self._held = {}
            for entry in self.log.entries():
                _hold(self._held, entry)
        held: dict[str, list[str]] = {}
        for rel in self._held.get(table, {}):
            if not Path(rel).name.startswith("c"):
                held.setdefault(str(Path(rel).parent), []).append(rel)
        counts = {d: len(v) for d, v in held.items()}
        for rel in adding:
            counts[str(Path(rel).parent)] = counts.get(str(Path(rel).parent), 0) + 1
        return {d: held[d] for d, n in counts.items() if n >= COMPACT_FILES and d in held}

    def _compact(self, spark: SparkSession, table: Table, rel_dir: str, old: list[str], staging: Path,
                 tag: str) -> list[tuple[Path, str]]:
        """The rows of `old` (committed files of one partition directory) rewritten as one sorted file,
        `c<batch>-<n>.parquet`."""
        df = spark.read.parquet(*[str(self.root / p) for p in old])
        target = staging / rel_dir.replace("/", "_")
        df.coalesce(1).sortWithinPartitions(*table.sort_columns).write.mode("overwrite").parquet(str(target))
        written = sorted(target.rglob("*.parquet"))
        return [(path, f"{rel_dir}/c{tag}-{n:05d}.parquet") for n, path in enumerate(written)]

    def _write_state(self, batch: int, output: BatchOutput) -> dict[str, dict[str, str]]:
        """The batch's state under `_state/<batch>/`, and what the entry says of it: every name the last entry
        had, newer paths where this batch wrote them (a name a batch does not write is carried on)."""
        previous = (self.last.info.get("state") if self.last else None) or {}
        tables = dict(previous.get("tables", {}))
        blobs = dict(previous.get("blobs", {}))
        where = f"{STATE_DIR}/{batch:020d}"
        for name, df in sorted(output.state.items()):
            df.write.mode("overwrite").parquet(str(self.root / where / name))
            tables[name] = f"{where}/{name}"
        for name, data in sorted(output.blobs.items()):
            path = self.root / where / f"{name}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            blobs[name] = f"{where}/{name}.bin"
        return {"tables": tables, "blobs": blobs}

    def _remove_unreferenced_state(self) -> None:
        state_dir = self.root / STATE_DIR
        if not state_dir.is_dir():
            return
        state = (self.last.info.get("state") if self.last else None) or {}
        kept = {Path(p).parts[1] for kind in ("tables", "blobs") for p in state.get(kind, {}).values()}
        for path in state_dir.iterdir():
            if path.name not in kept:
                shutil.rmtree(path, ignore_errors=True)



def write_json(path: Path, data: Any) -> None:
    """A small JSON file, whole or not at all (a temporary file, synced, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps(data, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def _hold(held: dict[str, dict[str, None]], entry: Entry) -> None:
    """Apply a committed entry to table -> files held (as LakeLog.files reads the log)."""
    for name, names in entry.replaces.items():
        for rel in names:
            held.get(name, {}).pop(rel, None)
    for name, names in entry.files.items():
        held.setdefault(name, {}).update(dict.fromkeys(names))


def split_output(name: str, out: Mapping[str, DataFrame], contract: Mapping[str, Table]) -> BatchOutput:
    """A builder's `{table: DataFrame}` as tables (in the contract's column order) and state (`_state/<name>`)."""
    output = BatchOutput()
    for table, df in out.items():
        if table.startswith(STATE_PREFIX):
            output.state[table.removeprefix(STATE_PREFIX)] = df
        elif table in contract:
            spec = contract[table]
            output.tables[table] = (spec, df.select(*[c for c, _ in spec.columns]) if spec.values else df)
        else:
            raise LakeError(f"table builder {name} returned a table {table!r} that the lake's contract "
                            "(lake/tables.py) does not define")
    return output
