"""A simulated source database and its change history, rendered in every supported format.

`history.generate_history` builds tables, transactions and the ground truth (final state and
SCD2 versions per table); `renderers` write that one history with each vendor's conventions.
Tests, the embedded samples and the benchmarks all use it.
"""
