"""The C extensions, the per-event loops of two wire protocols; the rest of the metadata is in
pyproject.toml: PackedForward's entry scan, the segment protocol's event walk and framing, Lumberjack
windows and logjam bodies from JSON to stored entries (one JSON-to-msgpack transcoder, _jsonpack.h).

They are optional: without a C compiler logport installs all the same and runs those loops in
Python (slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension(f"logport.protocols.{name}", [f"src/logport/protocols/{name}.c"], optional=True, extra_compile_args=["-O2"],
              depends=["src/logport/protocols/_jsonpack.h"])
    for name in ("_forward_scan", "_segment_scan", "_lumberjack_scan", "_logjam_scan")
])
