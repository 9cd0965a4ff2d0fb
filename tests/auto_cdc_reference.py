"""Databricks' auto CDC as its reference documents it, applied to a whole source at once.

The Databricks stand-ins record `create_auto_cdc_flow` / `apply_changes` calls; this applies one
to the rows of its source, in plain Python over collected rows (`tests/scd_model.py`), written
apart from the local runner's `runner/auto_cdc/`, so that a test comparing the two compares
two implementations. What it follows ([CDC-REF]: the `create_auto_cdc_flow` Python reference and
the SQL `AUTO CDC INTO` reference):

- `keys` identify a row; `sequence_by` orders a key's events, a late event taking its place;
- `apply_as_deletes` ends a key's row (SCD1) or closes its open version at the delete's
  sequence (SCD2); `apply_as_truncates` (SCD type 1 only) empties the table;
- `column_list` / `except_column_list` choose the target's columns;
- `ignore_null_updates`: a NULL in an update keeps the existing value (explicit NULLs too);
- SCD type 2: a version per change of a tracked column (`track_history_column_list` /
  `track_history_except_column_list`, default every column but the keys), `__START_AT` /
  `__END_AT` of the sequence's type; changes to untracked columns update the version in place.

What it does not take, it refuses: `ignore_null_updates_column_list`,
`ignore_null_updates_except_column_list`, `columns_to_update` (semantics not documented as far
as this project could establish), Column keys, and events without a sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from tests.scd_model import History

KEY, SEQ = "__key", "__seq"
_REFUSED = ("ignore_null_updates_column_list", "ignore_null_updates_except_column_list", "columns_to_update")


@dataclass(frozen=True)
class CdcFlow:
    """A recorded auto CDC call, checked against its source's columns."""

    keys: list[str]
    sequence_by: str | Column
    data: list[str]  # the target's columns, keys among them (source spelling)
    deletes: str | Column | None
    truncates: str | Column | None
    ignore_null_updates: bool
    scd_type: int
    tracked: list[str]

    @classmethod
    def of(cls, options: Mapping[str, Any], columns: list[str], what: str) -> CdcFlow:
        by_name = {c.lower(): c for c in columns}  # Spark resolves column names case-insensitively

        def column(name: Any, role: str) -> str:
            assert isinstance(name, str), f"{what}: {role} {name!r}: the reference implementation takes names"
            assert name.lower() in by_name, f"{what}: {role} {name!r} is not a column of its source {columns}"
            return by_name[name.lower()]

        for option in _REFUSED:
            assert not options.get(option), f"{what}: {option} is not executed by the stand-in"
        keys = [column(k, "key") for k in options["keys"]]
        if isinstance(options["sequence_by"], str):
            column(options["sequence_by"], "sequence_by")
        if options.get("column_list"):
            data = [column(c, "column_list entry") for c in options["column_list"]]
        else:
            excluded = {column(c, "except_column_list entry") for c in options.get("except_column_list") or ()}
            data = [c for c in columns if c not in excluded]
        assert all(k in data for k in keys), f"{what}: a key is not among the target's columns {data}"
        values = [c for c in data if c not in keys]
        if options.get("track_history_column_list"):
            listed = {column(c, "track_history_column_list entry") for c in options["track_history_column_list"]}
            tracked = [c for c in values if c in listed]
        else:
            skipped = {
                column(c, "track_history_except_column_list entry")
                for c in options.get("track_history_except_column_list") or ()
            }
            tracked = [c for c in values if c not in skipped]
        return cls(
            keys=keys,
            sequence_by=options["sequence_by"],
            data=data,
            deletes=options.get("apply_as_deletes"),
            truncates=options.get("apply_as_truncates"),
            ignore_null_updates=bool(options.get("ignore_null_updates")),
            scd_type=int(options["stored_as_scd_type"]),
            tracked=tracked,
        )


def _column(value: str | Column | None, default: bool) -> Column:
    if value is None:
        return F.lit(default)
    return F.expr(value) if isinstance(value, str) else value


def target_schema(flow: CdcFlow, source: DataFrame) -> StructType:
    """The target's columns: the chosen source columns, then for SCD2 `__START_AT` / `__END_AT`
    of the sequence's type ([CDC-REF] "with the same data type as the sequence_by")."""
    fields = [StructField(source.schema[c].name, source.schema[c].dataType) for c in flow.data]
    if flow.scd_type == 2:
        sequence = source.select(_sequence(flow)).schema.fields[0].dataType
        fields += [StructField("__START_AT", sequence), StructField("__END_AT", sequence)]
    return StructType(fields)


def _sequence(flow: CdcFlow) -> Column:
    return F.col(f"`{flow.sequence_by}`") if isinstance(flow.sequence_by, str) else flow.sequence_by


def apply(flow: CdcFlow, source: DataFrame) -> DataFrame:
    """The target table that applying every row of `source` gives."""
    columns = [F.col(f"`{c}`") for c in flow.data]
    rows = source.select(
        *columns,
        _sequence(flow).alias(SEQ),
        F.coalesce(_column(flow.deletes, False), F.lit(False)).alias("__delete"),
        F.coalesce(_column(flow.truncates, False), F.lit(False)).alias("__truncate"),
    ).collect()
    events = [_event(flow, row) for row in rows]
    history = History(columns=(KEY, *flow.data, SEQ), key=KEY, sequence=SEQ)
    width = len(flow.data)
    if flow.scd_type == 1:
        table = [tuple(r[1 : 1 + width]) for r in history.scd1(events)]
    else:
        table = [(*r[1 : 1 + width], r[-2], r[-1]) for r in history.scd2(events, flow.tracked)]
    return source.sparkSession.createDataFrame(table, target_schema(flow, source))


def _event(flow: CdcFlow, row: Row) -> tuple[Any, ...]:
    values = [row[i] for i in range(len(flow.data))]
    sequence = row[SEQ]
    assert sequence is not None, f"an event without a sequence: {row}"
    key = tuple(row[flow.data.index(k)] for k in flow.keys)
    op = "T" if row["__truncate"] else "D" if row["__delete"] else "U"
    present = None
    if flow.ignore_null_updates and op == "U":  # a NULL is "keep what the row had"
        present = (KEY, SEQ, *[c for c, v in zip(flow.data, values, strict=True) if v is not None])
    return (key, *values, sequence, op, present)
