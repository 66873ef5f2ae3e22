"""What the source does to the Python worker process a Spark task reads in, tested in this process (no Spark):
the modules it holds moved out of the garbage collector's sight once, and no import tried per batch."""

from __future__ import annotations

import gc
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from logport.spark import source
from logport.spark.source import LogportBatchReader, SegmentRange, read_range
from tests.spark.sample import forward_batches, write_bodies


@pytest.fixture
def unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process whose collector has frozen nothing, and the source's once-per-process flag reset; as found after."""
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(source, "_imports_frozen", False)
    yield
    gc.unfreeze()


def test_a_task_freezes_what_the_worker_holds_once(unfrozen: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's daemon runs gc.collect() in a reused worker after every task; frozen, the modules it imported
    are not walked again each time."""
    source.freeze_worker_imports()
    assert gc.get_freeze_count() == 0  # not in a Spark task (a test, a driver): nothing frozen
    monkeypatch.setattr(source.TaskContext, "get", staticmethod(lambda: object()))
    source.freeze_worker_imports()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # pyarrow's, pyspark's and logport's modules, classes and functions
    kept = [[i] for i in range(1000)]  # a task's objects, after the first task
    source.freeze_worker_imports()
    assert gc.get_freeze_count() == frozen and len(kept) == 1000  # once: what later tasks make is collected


class _Refused(importlib.abc.MetaPathFinder):
    """Records every import looked for (and finds none: the real finders after it do)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: object, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        self.names.append(fullname)
        return None


def test_no_import_is_looked_for_while_reading(tmp_path: Path, unfrozen: None) -> None:
    """pyarrow looks for `dateutil` each time it infers the type of an untyped Python value, and in a worker
    whose sys.path holds Spark's zip files that search cost 2-4% of its CPU: once per batch, for a scalar."""
    data_dir = str(tmp_path)
    write_bodies(data_dir, {"app": forward_batches(6, 50)})
    options = {"path": data_dir, "rowsperbatch": "50"}
    (partition,) = LogportBatchReader(options).partitions()
    assert isinstance(partition, SegmentRange)
    assert sum(b.num_rows for b in read_range(options, partition)) == 300  # imports done: the first read
    finder = _Refused()
    sys.meta_path.insert(0, finder)
    try:
        batches = list(read_range(options, partition))
    finally:
        sys.meta_path.remove(finder)
    assert len(batches) == 6 and finder.names == []  # a batch per frame
