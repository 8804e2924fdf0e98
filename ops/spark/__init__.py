"""Audits of segment archives too big for one machine: a Spark data source over Kafka's files and the jobs.

`archive` (find segments, plan byte ranges, read one range) and `checks` (what one range shows) need no
Spark, so they serve tests and local runs; `findings` folds the per-range summaries into the report.
Only `source` and `jobs` import pyspark, and only when a job runs.
"""
