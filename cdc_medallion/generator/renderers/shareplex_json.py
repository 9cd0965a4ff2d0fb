"""Quest SharePlex JSON conventions (as DTS writes them): `meta` with `op` ins / upd / del /
truncate, `table` OWNER.TABLE, the transaction's commit `scn` (text), transaction `trans`, `seq`
of `size` (`idx`), `rowid`, `time`; values as Oracle text. An update is a partial image: `data` holds only the changed
columns' new values and `key` the before image of the key (so an update that changes the key
has the new key in `data` and the old one in `key`; `key` also holds the changed columns' before
values, as in the DTS example). An update that moves the row to a new key carries the whole before
image in `key` (all columns supplementally logged), since the new key's row is built from it:
with only the key there, the columns the update did not change would be lost.. SharePlex writes no messages for the
initial copy: the snapshot rows are rendered as `ins`. ADD COLUMN replicates without a message:
later images carry the new column. Text values name no type, so the conf types the columns;
binary (RAW) values are written base64."""

from __future__ import annotations

from pathlib import Path

from cdc_medallion.generator.history import History
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import Step, dumps, finish, image, text_value, topic, walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

OPS = {"SNAPSHOT": "ins", "INSERT": "ins", "UPDATE": "upd", "DELETE": "del", "TRUNCATE": "truncate"}


def _document(step: Step, scn: int, seq: int, size: int) -> dict:
    change = step.change
    meta = {
        "op": OPS[change.op],
        "table": f"{step.spec.schema}.{step.spec.name}".upper(),
        "scn": str(scn),
        "trans": f"{step.tx.number}.{step.tx.number % 32}.{700 + step.tx.number}",
        "seq": seq,
        "size": size,
        "idx": f"{seq}/{size}",
        "time": step.tx.commit_ts.isoformat(timespec="seconds") + "Z",
        "posttime": step.tx.commit_ts.isoformat(timespec="seconds") + "Z",
        "rowid": f"AAAR{step.tx.number:06d}AAB{seq:04d}",
    }
    document: dict = {"meta": meta}
    if change.op == "UPDATE":
        document["data"] = image(step.columns, change.after, text_value, only=change.changed)
        where = None if step.key_moved() else (*step.spec.keys, *change.changed)  # None: every column
        document["key"] = image(step.columns, change.before, text_value, only=where)
    elif change.op != "TRUNCATE":
        document["data"] = image(step.columns, change.after or change.before, text_value)
    return document


@register_renderer("shareplex-json")
def render(history: History, out: Path) -> RenderedSource:
    dump = KafkaDump()
    scn = 80_000_000
    steps = [s for s in walk(history) if s.change.op != "DDL"]
    sizes: dict[int, int] = {}
    for step in steps:
        sizes[step.tx.number] = sizes.get(step.tx.number, 0) + 1
    seqs: dict[int, int] = {}
    for step in steps:
        scn += 0 if seqs.get(step.tx.number) else 7  # the transaction's commit SCN
        seq = seqs[step.tx.number] = seqs.get(step.tx.number, 0) + 1
        document = _document(step, scn, seq, sizes[step.tx.number])
        dump.add(topic(step.spec), dumps(document), None, step.tx.commit_ts)
    return finish("shareplex-json", dump, out / "shareplex.jsonl", history)
