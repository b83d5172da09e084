"""Ingestion: events recognised strictly, chained by SHA-256, stored and projected in one
transaction; whole recordings; the run lock and chain records below it all (runs.py)."""
