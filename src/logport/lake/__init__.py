"""The pipeline's lake: the Parquet tables `logport pipeline` writes and `logport ui` reads.

Pure Python (no PySpark): the table names and columns (tables.py), the distributions' bucket mappings
(sketch.py), the logjam resource list (resources.py) and the commit log that says which files a table holds
(log.py). docs/pipeline.md describes all of it.
"""
