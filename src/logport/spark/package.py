"""`logport spark-package OUT`: logport and the libraries it needs, packed for Spark's executors.

The Spark way for Python packages with native code (logport's C extensions, pyarrow, orjson,
msgpack...; wheels on --py-files would not load them): a virtual environment packed for
`--archives`, as venv-pack makes one, and a properties file that makes the Python workers use it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from logport.errors import LogportError

ENV_NAME = "logport-env"  # the directory the archive unpacks to in each executor's working directory
ARCHIVE = f"{ENV_NAME}.tar.gz"
PROPERTIES = "spark.conf"  # spark-submit --properties-file
LAUNCHER = "pipeline.py"  # the driver's script: `logport pipeline` under spark-submit
# The cluster's Spark puts its own pyspark (and py4j) on every Python worker's path, in the version of its JVM.
PROVIDED_BY_SPARK = {"pyspark", "py4j"}
# `logport ui`'s web stack: the hub's machine runs it, never an executor.
NOT_ON_EXECUTORS = {"fastapi", "uvicorn", "duckdb"}
# Nothing an executor imports: sources, headers, caches (rebuilt there), pyarrow's C++ headers and tests.
SKIPPED_SUFFIXES = {".pyc", ".pyx", ".pxd", ".pxi", ".h", ".hpp", ".c", ".cc", ".cpp"}
SKIPPED_TREES = ("pyarrow/include/", "pyarrow/tests/")
MARK = "packed-by = logport spark-package"  # in pyvenv.cfg: a directory this command may replace
GZIP_LEVEL = 1  # most of the bytes are shared libraries, which level 9 shrinks little more, several times slower

LAUNCHER_TEXT = '''\
"""spark-submit ... pipeline.py batch|stream ...: `logport pipeline` as spark-submit's Python driver."""
import sys

from logport.cli import main

sys.exit(main(["pipeline", *sys.argv[1:]]))
'''


class PackageError(LogportError):
    """The environment cannot be packed as it is (a required library is not installed)."""


@dataclass(frozen=True)
class Packed:
    archive: Path
    properties: Path
    launcher: Path
    distributions: list[str]  # name==version, as packed
    bytes: int  # of the archive


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help=f"directory to write {ENV_NAME}/, {ARCHIVE}, {PROPERTIES} and {LAUNCHER} to; "
                               "run spark-submit there")


def main(args: argparse.Namespace) -> int:
    packed = pack(Path(args.out))
    print(f"packed {', '.join(packed.distributions)} ({packed.bytes / 2**20:.0f} MiB): {packed.archive}")
    print(f"every executor needs Python {python_version()} at {base_interpreter()}, nothing else; in "
          f"{packed.archive.parent}, run")
    print(f"  spark-submit --master spark://HOST:7077 --properties-file {PROPERTIES} {LAUNCHER} batch|stream ...")
    return 0


def pack(out: Path, root: str = "logport") -> Packed:
    """Write, in OUT: logport-env/ (a virtual environment of this Python with the distribution `root` and
    what it needs to run), logport-env.tar.gz (the same, for --archives), spark.conf (spark-submit's
    settings) and pipeline.py (the job's driver script). spark-submit runs in OUT: Spark plans a Python
    data source on the driver with the executors' Python, ./logport-env/bin/python, from its working
    directory."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    dists = runtime_distributions(root)
    env = out / ENV_NAME
    if env.exists() and not _ours(env):
        raise PackageError(f"{env} exists and is not an environment logport spark-package wrote: remove it, "
                           "or pack into another directory")
    staging = Path(tempfile.mkdtemp(dir=out, prefix=f".{ENV_NAME}."))
    staging.chmod(0o755)  # as a directory made by mkdir
    try:
        lay_out_environment(staging, dists)
        archive = write_archive(staging, out / ARCHIVE)
        _replace(staging, env)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    properties = out / PROPERTIES
    properties.write_text(spark_properties(archive))
    launcher = out / LAUNCHER
    launcher.write_text(LAUNCHER_TEXT)
    return Packed(archive, properties, launcher, [f"{d.metadata['Name']}=={d.version}" for d in dists],
                  archive.stat().st_size)


def spark_properties(archive: Path) -> str:
    """spark-submit's settings: ship the archive, and run the driver's and the executors' Python from it."""
    return (f"# logport spark-package: spark-submit --properties-file {PROPERTIES} ..., in {archive.parent}\n"
            f"spark.archives {archive.as_uri()}#{ENV_NAME}\n"
            f"spark.pyspark.python ./{ENV_NAME}/bin/python\n"
            f"spark.pyspark.driver.python ./{ENV_NAME}/bin/python\n")


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def base_interpreter() -> str:
    """The interpreter this one runs on (a virtual environment's is its base's): the packed one links to it."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def runtime_distributions(root: str) -> list[importlib.metadata.Distribution]:
    """`root` and every distribution it requires at run time, transitively, but what Spark provides and the web
    app's own.

    Requirements of extras, and those whose marker does not hold here (another platform or Python),
    are left out.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found or name in PROVIDED_BY_SPARK or name in NOT_ON_EXECUTORS:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as e:
            raise PackageError(f"{name}, which {root} needs, is not installed in {sys.prefix}: "
                               f"pip install {name}") from e
        found[name] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[name] for name in sorted(found)]


def _skipped(relative: Path) -> bool:
    return (relative.suffix in SKIPPED_SUFFIXES or "__pycache__" in relative.parts
            or relative.as_posix().startswith(SKIPPED_TREES))


def distribution_files(dist: importlib.metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """(file on disk, its path under site-packages) of what the distribution installed there.

    An editable install (logport from a checkout) lists only a path hook; its packages are copied
    from where they import, with their compiled extensions.
    """
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        yield from _editable_files(dist)
        return
    site = Path(str(dist.locate_file(""))).resolve()
    for entry in dist.files or []:
        path = Path(str(dist.locate_file(entry))).resolve()
        try:
            relative = path.relative_to(site)
        except ValueError:  # a script in bin/ or data outside site-packages: executors run no console script
            continue
        if not _skipped(relative) and path.is_file():
            yield path, relative.as_posix()


def _editable_files(dist: importlib.metadata.Distribution) -> Iterator[tuple[Path, str]]:
    import importlib.util

    top_level = (dist.read_text("top_level.txt") or "").split() or [dist.metadata["Name"].replace("-", "_")]
    for name in top_level:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise PackageError(f"{dist.metadata['Name']} is installed editable, and its package {name} does not import")
        package = Path(next(iter(spec.submodule_search_locations))).resolve()
        for path in sorted(package.rglob("*")):
            relative = Path(name) / path.relative_to(package)
            if path.is_file() and not _skipped(relative):
                yield path, relative.as_posix()


def lay_out_environment(root: Path, dists: list[importlib.metadata.Distribution]) -> None:
    """A virtual environment of this Python's base interpreter at `root`, as `python -m venv` lays one out,
    with the distributions in its site-packages. Its bin/python links to the base interpreter by absolute
    path, so a machine that runs it needs that interpreter at the same path (as with venv-pack)."""
    site = root / sysconfig.get_path("purelib", vars={"base": ".", "platbase": "."})
    base = base_interpreter()
    (root / "pyvenv.cfg").write_text(f"home = {Path(base).parent}\ninclude-system-site-packages = false\n"
                                     f"version = {'.'.join(map(str, sys.version_info[:3]))}\n{MARK}\n")
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(base)
    for alias in ("python3", f"python{python_version()}"):
        (root / "bin" / alias).symlink_to("python")
    for dist in dists:
        for path, relative in distribution_files(dist):
            target = site / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def write_archive(root: Path, archive: Path) -> Path:
    """`root`'s content as a .tar.gz (symlinks kept), written beside `archive` and renamed over it: a
    spark-submit meanwhile ships a whole one."""
    with tempfile.NamedTemporaryFile(dir=archive.parent, prefix=f".{archive.name}.", delete=False) as tmp:
        try:
            with tarfile.open(fileobj=tmp, mode="w:gz", compresslevel=GZIP_LEVEL) as tar:
                for child in sorted(root.iterdir()):
                    tar.add(child, arcname=child.name)
            tmp.flush()
            os.fsync(tmp.fileno())
            os.chmod(tmp.name, 0o644)
            os.replace(tmp.name, archive)
        except BaseException:
            os.unlink(tmp.name)
            raise
    return archive


def _ours(env: Path) -> bool:
    try:
        return MARK in (env / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return False


def _replace(new: Path, old: Path) -> None:
    """Put directory `new` where `old` is (an environment this command wrote before, if any)."""
    if not old.exists():
        new.rename(old)
        return
    trash = Path(tempfile.mkdtemp(dir=old.parent, prefix=f".{old.name}.old."))
    old.rename(trash / old.name)
    new.rename(old)
    shutil.rmtree(trash)
