"""`logport spark-package`: which distributions it packs, and a packed environment that runs on its own."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import logport
from logport.spark import package
from logport.spark.package import ENV_NAME, PackageError, base_interpreter, distribution_files, pack

CLOSURE = [
    # (distribution, packed, why)
    ("logport", True, "the root"),
    ("pyarrow", True, "a requirement (the source hands Arrow batches to Spark)"),
    ("msgpack", True, "a requirement"),
    ("packaging", True, "a requirement"),
    ("pyspark", False, "the cluster's Spark puts its own on every Python worker's path"),
    ("py4j", False, "pyspark's, likewise"),
    ("pytest", False, "an extra's (dev)"),
    ("cffi", False, "pyzmq's only on PyPy (its marker)"),
]


@pytest.mark.parametrize(("name", "packed"), [c[:2] for c in CLOSURE], ids=[c[0] for c in CLOSURE])
def test_runtime_distributions(name: str, packed: bool) -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in package.runtime_distributions("logport")}
    assert (name in names) == packed, sorted(names)


def test_an_editable_logport_is_packed_from_where_it_imports() -> None:
    files = dict((relative, path) for path, relative in distribution_files(
        __import__("importlib.metadata").metadata.distribution("logport")))
    here = Path(logport.__file__).parent
    assert files["logport/__init__.py"] == here / "__init__.py"
    compiled = [r for r in files if r.startswith("logport/spark/_variant_encode") and r.endswith(".so")]
    assert compiled, "the C extensions go with it"
    assert not [r for r in files if "__pycache__" in r or r.endswith((".c", ".pyc"))]


def test_a_packed_environment_runs_on_its_own(tmp_path: Path) -> None:
    packed = pack(tmp_path / "job", root="msgpack")  # a small closure: the layout is the same
    assert [d.split("==")[0] for d in packed.distributions] == ["msgpack"]
    with tarfile.open(packed.archive) as tar:
        python = tar.getmember("bin/python")
        assert python.issym() and python.linkname == base_interpreter()
        names = tar.getnames()
    assert any(n.startswith("lib/python3") and n.endswith("/msgpack/__init__.py") for n in names)
    assert not [n for n in names if "__pycache__" in n]
    # unpacked elsewhere, as an executor does, its Python imports from it and not from this venv
    unpacked = tmp_path / "executor" / ENV_NAME
    unpacked.mkdir(parents=True)
    with tarfile.open(packed.archive) as tar:
        tar.extractall(unpacked, filter="tar")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([f"./{ENV_NAME}/bin/python", "-c", "import msgpack, sys; print(msgpack.__file__)"],
                          cwd=unpacked.parent, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(unpacked), done.stdout
    refused = subprocess.run([f"./{ENV_NAME}/bin/python", "-c", "import pytest"], cwd=unpacked.parent, env=env,
                             capture_output=True, timeout=60)
    assert refused.returncode != 0  # nothing of this venv but what was packed
    conf = packed.properties.read_text()
    assert f"spark.archives {packed.archive.as_uri()}#{ENV_NAME}\n" in conf
    assert f"spark.pyspark.python ./{ENV_NAME}/bin/python\n" in conf
    assert (tmp_path / "job" / ENV_NAME / "bin" / "python").is_symlink()  # the driver's copy
    assert "logport.cli" in packed.launcher.read_text()
    pack(tmp_path / "job", root="msgpack")  # packed again over its own output


def test_a_directory_it_did_not_write_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ENV_NAME).mkdir()
    (tmp_path / ENV_NAME / "mine.txt").write_text("not yours")
    with pytest.raises(PackageError, match="is not an environment logport spark-package wrote"):
        pack(tmp_path, root="msgpack")
    assert (tmp_path / ENV_NAME / "mine.txt").read_text() == "not yours"


def test_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "logport.cli", "spark-package", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "spark-submit" in done.stdout
