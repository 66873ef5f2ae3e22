"""The C extensions, the per-event loops of the wire protocols and the Spark source's VARIANT encoder; the
rest of the metadata is in pyproject.toml: PackedForward's entry scan, the segment protocol's event walk and
framing, Lumberjack windows and logjam bodies from JSON to stored entries (one JSON-to-msgpack transcoder,
_jsonpack.h), msgpack records to Spark VARIANT, and the store's commit engine and event count.

They are optional: without a C compiler logport installs all the same and runs those loops in
Python (slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension(f"logport.protocols.{name}", [f"src/logport/protocols/{name}.c"], optional=True, extra_compile_args=["-O2"],
              depends=["src/logport/protocols/_jsonpack.h"],
              libraries=["z"] if name == "_logjam_scan" else [])  # logjam's zlib bodies inflate in C
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
