"""The C extensions, the per-event loops of the wire protocols and the Spark source's VARIANT encoder; the
rest of the metadata is in pyproject.toml: PackedForward's entry scan, the segment protocol's event walk and
framing, Lumberjack windows and logjam bodies from JSON to stored entries (one JSON-to-msgpack transcoder,
_jsonpack.h), msgpack records to Spark VARIANT, and the store's commit engine and event count.

They are optional: without a C compiler logport installs all the same and runs those loops in
Python (slower).
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

# `logport ui` and its report ship Apache ECharts inside the package: the minified file npm installs from
# package-lock.json (`npm ci`), copied at build time, never committed and never fetched when a page loads
ECHARTS_SOURCE = Path("node_modules/echarts/dist/echarts.min.js")
ECHARTS_TARGET = Path("src/logport/ui/static/echarts.min.js")


def copy_echarts() -> None:
    if ECHARTS_SOURCE.exists() and (not ECHARTS_TARGET.exists()
                                    or ECHARTS_TARGET.read_bytes() != ECHARTS_SOURCE.read_bytes()):
        shutil.copyfile(ECHARTS_SOURCE, ECHARTS_TARGET)


class BuildWithCharts(build_py):
    def run(self) -> None:
        copy_echarts()
        super().run()


copy_echarts()  # an editable install (pip install -e) runs no build_py for the package's own files

setup(cmdclass={"build_py": BuildWithCharts}, ext_modules=[
    Extension(f"logport.protocols.{name}", [f"src/logport/protocols/{name}.c"], optional=True, extra_compile_args=["-O2"],
              depends=["src/logport/protocols/_jsonpack.h"],
              # logjam's zlib bodies inflate in C; its socket drain finds pyzmq's libzmq with dlopen (built only
              # where libzmq's headers are, zmq.h: the Makefile installs them)
              libraries=["z", "dl"] if name == "_logjam_scan" else [])
    for name in ("_forward_scan", "_segment_scan", "_lumberjack_scan", "_logjam_scan")
] + [
    # the Spark source's msgpack -> VARIANT encoder (logport/spark/variant.py is its reference)
    Extension("logport.spark._variant_encode", ["src/logport/spark/_variant_encode.c"], optional=True,
              extra_compile_args=["-O2"]),
    # store.direct_io's commit engine: groups written back to back by a native thread (store/engine.py)
    Extension("logport.store._commitengine", ["src/logport/store/_commitengine.c"], optional=True,
              extra_compile_args=["-O2", "-pthread"], extra_link_args=["-pthread"]),
    # the store's per-frame loop of its event counts (logport/store/counting.py is its reference)
    Extension("logport.store._eventscan", ["src/logport/store/_eventscan.c"], optional=True,
              extra_compile_args=["-O2"]),
])
