"""Data-quality rules as data, and (later) suites and reports."""
