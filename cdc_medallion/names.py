"""Every name the engine owns, spelled here and nowhere else.

Dataset names (`bronze_<source>`, `silver_<source>`, `gold_<table>` and its `_history`, gold's
`changes_<table>` view, each dataset's `_quarantine`), the side tables, the storage's own
folders (`_system`, `_state`, `_checkpoints`, `_lock`) and the bookkeeping columns gold's tables
carry (`__sequence`, `__START_AT`, `__END_AT`). Users read these names in their catalog and
queries, and the local runner, the Databricks graph, the quality step and the readers must agree
on each: a name spelled twice is a name that can drift. Names built from a user's text go through
`identifiers.dataset_name`, which validates them.
"""

from __future__ import annotations

from cdc_medallion.identifiers import dataset_name

# --- datasets -------------------------------------------------------------------------------------
BRONZE, SILVER, GOLD = "bronze", "silver", "gold"
#: Gold's typed change feed of one source table (a temporary view): `changes_<table>`.
CHANGES = "changes"
HISTORY_SUFFIX = "_history"  # gold's SCD2 table beside its SCD1 one
QUARANTINE_SUFFIX = "_quarantine"
CHECKED_SUFFIX = "__checked"  # a dataset's rows marked by its expectations (Databricks graph)
INPUT_SUFFIX = "__input"  # `<flow>__input`: an auto CDC flow's source as Databricks can take it
STALE_SUFFIX = "__stale"  # a gold feed's stale keys, beside its tombstones in `_state/`
SCHEMA_CHANGES = "silver_schema_changes"
HEARTBEATS = "silver_heartbeats"

# --- storage --------------------------------------------------------------------------------------
SYSTEM_DIR = "_system"  # the event log and the quality step's memo
STATE_DIR = "_state"  # auto CDC tombstones and stale keys
CHECKPOINT_DIR = "_checkpoints"
LOCK_FILE = "_lock"
EVENT_LOG = f"{SYSTEM_DIR}/event_log"

# --- columns --------------------------------------------------------------------------------------
SCD1_SEQUENCE = "__sequence"  # an SCD1 row's sequence
START_AT, END_AT = "__START_AT", "__END_AT"  # an SCD2 version's (DLT's names)
FAILED = "failed_expectations"  # a quarantined row's failed rules, on both engines


def bronze_name(source: str) -> str:
    return dataset_name(BRONZE, source)


def silver_name(source: str) -> str:
    return dataset_name(SILVER, source)


def gold_name(table: str) -> str:
    return dataset_name(GOLD, table)


def changes_name(gold: str) -> str:
    """Gold's change-feed view of the table whose SCD1 dataset is `gold`."""
    return dataset_name(CHANGES, gold.removeprefix(f"{GOLD}_"))


def history_name(gold: str) -> str:
    return f"{gold}{HISTORY_SUFFIX}"


def quarantine_name(dataset: str) -> str:
    return f"{dataset}{QUARANTINE_SUFFIX}"


def layer_of(dataset: str) -> str:
    """bronze, silver (side tables and quarantines included) or gold (with its `_state/` tables),
    read off a dataset's name: what progress lines and kill points name."""
    return next((layer for layer in (BRONZE, SILVER) if dataset.startswith(f"{layer}_")), GOLD)
