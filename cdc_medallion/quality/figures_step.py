"""The step of a local run that stores the report's table figures: after its updates, every
`run` and `ingest` computes them (`table_figures.py`) and logs them as a `quality_check` event of
its last update (suite `figures`), for the HTML report and `status` to read (`stored.py`). The
source accounting is the quality step's (`checks.py`), stored there.

Each table's figures are remembered with its Delta version (`memo.py`): a run that did not write
a quarantine table or the heartbeats does not read them again, and figures equal to the last
stored are not logged again.
"""

from __future__ import annotations

from cdc_medallion.catalog import dataset_status
from cdc_medallion.names import HEARTBEATS
from cdc_medallion.quality.checks import quality_dir
from cdc_medallion.quality.events import QUALITY_CHECK
from cdc_medallion.quality.figures import (
    FIGURES,
    RAW_LIMIT,
    SAMPLES_PER_REASON,
    TOP_REASONS,
    QuarantineReason,
    TableFigures,
)
from cdc_medallion.quality.memo import QualityMemo
from cdc_medallion.quality.table_figures import heartbeat_lag, quarantine_reasons
from cdc_medallion.runner.event_log import EventLog
from cdc_medallion.storage.delta_store import DeltaStore


def table_figures(store: DeltaStore, memo: QualityMemo | None, update_id: str) -> TableFigures:
    """The storage's figures now: each quarantine table that holds rows, with samples' raw
    messages from bronze, and the heartbeats. With a memo, a table unchanged since it was last
    figured is not read again."""
    status = dataset_status(store.root)
    quarantines = [e["name"] for e in status if e["layer"] == "quarantine" and e["rows"]]
    bronze = [e["name"] for e in status if e["layer"] == "bronze"]
    figures = TableFigures()
    missed: dict[str, str] = {}  # table -> its memo key, figured now
    for name in quarantines:
        key = memo.key(f"{FIGURES}/{name}", (name,), (TOP_REASONS, SAMPLES_PER_REASON, RAW_LIMIT)) if memo else ""
        recalled = memo.recall(f"{FIGURES}/{name}", key) if memo else None
        if recalled is not None:
            figures.quarantine += [QuarantineReason(**r) for r in recalled["results"]["reasons"]]
            figures.quarantine_rows[name] = recalled["results"]["rows"]
        else:
            missed[name] = key
    if missed:
        found, totals = quarantine_reasons(
            {n: store.read(n) for n in missed},
            lambda: [store.read(b) for b in bronze],  # read only when a sample needs its raw message
            rows={e["name"]: e["rows"] for e in status},
        )
        figures.quarantine += found
        figures.quarantine_rows.update(totals)
        for name, key in missed.items():
            if memo is not None and name in totals:
                reasons = [r.__dict__ for r in found if r.dataset == name]
                memo.remember(f"{FIGURES}/{name}", key, update_id, {"reasons": reasons, "rows": totals[name]})
    figures.quarantine.sort(key=lambda r: (-r.count, r.dataset, r.rule))
    figures.quarantine_rows = dict(sorted(figures.quarantine_rows.items()))
    if any(e["name"] == HEARTBEATS and e["rows"] for e in status):
        key = memo.key(f"{FIGURES}/{HEARTBEATS}", (HEARTBEATS,), "heartbeat_lag") if memo else ""
        if memo is not None and (recalled := memo.recall(f"{FIGURES}/{HEARTBEATS}", key)) is not None:
            figures.heartbeats = TableFigures.from_dict({"heartbeats": recalled["results"]}).heartbeats
        else:
            figures.heartbeats = heartbeat_lag(store.read(HEARTBEATS))
            if memo is not None:
                memo.remember(f"{FIGURES}/{HEARTBEATS}", key, update_id, figures.as_dict()["heartbeats"])
    else:
        figures.heartbeats = []
    return figures


def record_table_figures(store: DeltaStore, pipeline_name: str, update_id: str) -> TableFigures:
    """Compute the storage's figures and log them under `update_id` (a `quality_check` event of
    suite `figures`), for the report and `status` to read. Figures equal to the last ones stored
    are not logged again (an update that wrote no quarantine or heartbeat adds no commit): the
    update that stored them still names them."""
    memo = QualityMemo(store, quality_dir(store.root))
    figures = table_figures(store, memo, update_id)
    stored = {k: v for k, v in figures.as_dict().items() if k != "as_of"}
    last = memo.recall(FIGURES, "")  # the figures stored last
    if last is not None and last["results"] == stored:
        memo.save()
        return figures
    log = EventLog(store, pipeline_name, update_id)
    quarantined = sum(figures.quarantine_rows.values())
    log.emit(
        QUALITY_CHECK,
        f"table figures: {quarantined} quarantined row(s) in {len(figures.quarantine_rows)} table(s), "
        f"heartbeats of {len(figures.heartbeats or [])} source(s)",
        {QUALITY_CHECK: {"suite": FIGURES, FIGURES: figures.as_dict()}},
    )
    log.flush()
    memo.remember(FIGURES, "", update_id, stored)  # after the event's commit: a crash between logs them again
    memo.save()
    return figures
