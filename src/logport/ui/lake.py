"""The lake as the UI reads it: the committed files of each table (lake/log.py), narrowed to the dates a view
needs by their partition paths, queried with DuckDB (chosen over pyarrow datasets by `logport bench ui
--compare-engines`: docs/benchmarks-history.md "ui")."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from logport.lake.log import LOG_DIR, LakeError, LakeLog, read_lake_info
from logport.lake.resources import DEFAULT_RESOURCES, GROUPS, Resources
from logport.lake.tables import all_tables


class LakeReader:
    """Queries over one lake. Thread-safe: each query runs on a cursor of its own (the app serves requests from
    a thread pool); the file lists are read again when the commit log has new entries."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise LakeError(f"lake {str(self.root)!r} does not exist (the pipeline's --out directory)")
        info = read_lake_info(self.root) or {}
        self.info = info
        self.resources = _resources(info.get("resources"))
        self.tables = all_tables(self.resources)
        self._log = LakeLog(self.root)
        self._lock = threading.Lock()
        self._seen: tuple[str, ...] | None = None
        self._files: dict[str, dict[str, list[str]]] = {}  # table -> date ("" unpartitioned) -> files
        self._valued: dict[str, frozenset[str]] = {}  # file -> its columns that hold a value somewhere
        self._db = duckdb.connect(config={"threads": str(min(4, os.cpu_count() or 1))})
        # Parquet footers parsed once per file, not at every query (a day's minutes, 6 row groups of 228 columns,
        # take ~4 ms: a week's query spent ~30 ms on them). GLOBAL: each query runs on a cursor, a connection of
        # its own, which a session's SET does not reach (a cursor's progress bar is off already)
        self._db.execute("SET GLOBAL parquet_metadata_cache = true")

    def _refresh(self) -> None:
        try:
            names = tuple(sorted(os.listdir(self.root / LOG_DIR)))
        except FileNotFoundError:
            names = ()
        with self._lock:
            if names == self._seen:
                return
            files: dict[str, dict[str, list[str]]] = {}
            for name in self.tables:
                by_date: dict[str, list[str]] = {}
                for path in self._log.files(name):
                    date = next((p[5:] for p in path.parts if p.startswith("date=")), "")
                    by_date.setdefault(date, []).append(str(path))
                files[name] = by_date
            self._files, self._seen = files, names

    def files(self, table: str, days: Sequence[str] | None = None) -> list[str]:
        """The committed files of `table` (of these dates only, when given)."""
        self._refresh()
        by_date = self._files.get(table, {})
        if days is None:
            return [f for files in by_date.values() for f in files]
        return [f for day in days for f in by_date.get(day, [])]

    def dates(self, table: str = "totals") -> list[str]:
        self._refresh()
        return sorted(d for d, files in self._files.get(table, {}).items() if d and files)

    def has(self, table: str) -> bool:
        self._refresh()
        return any(self._files.get(table, {}).values())

    def source(self, table: str, days: Sequence[str] | None = None) -> str | None:
        """A FROM clause over the table's files (of these dates), None when it has none. The list is written into
        the SQL: DuckDB takes no parameter for read_parquet's files."""
        files = self.files(table, days)
        if not files:
            return None
        partitioned = bool(self.tables[table].partition)
        hive = ", hive_partitioning = true, hive_types = {'date': VARCHAR}" if partitioned else ""
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        return f"read_parquet([{listed}]{hive})"

    def columns_with_values(self, table: str, days: Sequence[str] | None = None) -> frozenset[str]:
        """The table's columns that hold a value in some committed file (of these dates): a column whose Parquet
        statistics count only nulls in every row group of every file is null there, so a view need not read it
        (a lake sums the resources its apps send, often a few of logjam's 60). Read from the files' footers once
        per file (files are never rewritten: compaction writes new ones)."""
        files = self.files(table, days)
        for path in files:
            if path not in self._valued:
                valued = _columns_with_values(path)
                with self._lock:
                    self._valued[path] = valued
        return frozenset(self.tables[table].partition).union(*(self._valued.get(f, ()) for f in files))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._db.cursor()
        try:
            return cursor.execute(sql, list(params)).fetchall()
        finally:
            cursor.close()

    def query_arrow(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """The answer as an Arrow table: maps and lists stay arrays (merge.py sums them), never Python objects.
        Integer sums (DuckDB's HUGEINT, Arrow's decimal128(38, 0)) come back as int64, as fetchall's ints."""
        cursor = self._db.cursor()
        try:
            found = cursor.sql(sql, params=list(params)).to_arrow_table()
        finally:
            cursor.close()
        for i, column in enumerate(found.schema):
            if pa.types.is_decimal(column.type) and column.type.scale == 0:
                found = found.set_column(i, column.name, found.column(i).cast(pa.int64()))
        return found

    def query_dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self._db.cursor()
        try:
            cursor.execute(sql, list(params))
            names = [d[0] for d in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def close(self) -> None:
        self._db.close()


def _resources(data: Any) -> Resources:
    """The lake's resource list from `_lake.json` (groups as Resources.as_json writes them, or as in a logjam
    resources file); the default list when it names none."""
    if not isinstance(data, dict) or not data:
        return DEFAULT_RESOURCES
    groups = {}
    for group in GROUPS:
        names = data.get(group, data.get(f"{group}_resources")) or []
        groups[group] = tuple(next(iter(n)) if isinstance(n, dict) else str(n) for n in names)
    return Resources(groups)


def _columns_with_values(path: str) -> frozenset[str]:
    """The top-level columns of a Parquet file that hold a value: those with a column chunk whose statistics do
    not count every value as null (or that has no statistics)."""
    meta = pq.read_metadata(path)
    found = set()
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for i in range(group.num_columns):
            chunk = group.column(i)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count < chunk.num_values:
                found.add(chunk.path_in_schema.split(".")[0])
    return frozenset(found)
