"""The lake as the UI reads it: the committed files of each table (lake/log.py), narrowed to the dates a view
needs by their partition paths, queried with DuckDB (chosen over pyarrow datasets by `logport bench ui
--compare-engines`: docs/benchmarks.md "ui")."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

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
        self._db = duckdb.connect(config={"threads": str(min(4, os.cpu_count() or 1))})
        self._db.execute("SET enable_object_cache = true")  # Parquet footers read once per file, not per query
        self._db.execute("SET enable_progress_bar = false")

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

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._db.cursor()
        try:
            return cursor.execute(sql, list(params)).fetchall()
        finally:
            cursor.close()

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
