"""Benchmarks: our pipeline against Spark's own floors and Apache Flink, measured in one run.

`make bench` (or `python -m bench`) writes `bench/results/latest.json` and a dated Markdown
report with a chart. Nothing here is a test: no time is asserted anywhere.
"""
