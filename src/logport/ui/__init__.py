"""`logport ui`: a read-only web app over the pipeline's lake, and the static report exported from the same views.

lake.py reads the committed Parquet files with DuckDB; timerange.py parses the time ranges in URLs; views.py
computes what each view shows (the JSON API); app.py serves the pages and the API (FastAPI); live.py follows hubs
over the segment protocol for the live view; report.py writes the one-file HTML report.
"""
