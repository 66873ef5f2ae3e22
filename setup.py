"""The one C extension, PackedForward's entry scan; the rest of the metadata is in pyproject.toml.

It is optional: without a C compiler logport installs all the same and scans in Python (slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("logport.protocols._forward_scan", ["src/logport/protocols/_forward_scan.c"], optional=True,
                             extra_compile_args=["-O2"])])
