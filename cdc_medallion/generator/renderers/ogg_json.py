"""Oracle GoldenGate for Big Data JSON formatter conventions: one message per operation with
`op_type` I / U / D / T, full `before` and `after` images (an update that changes the key is a
U whose images differ in the key: pkUpdateHandling=update), `table` as SCHEMA.TABLE, the trail
position `pos`, `op_ts` / `current_ts`, `primary_keys`. The initial load is written as inserts
(GoldenGate initial-load records are I). The JSON formatter emits no DDL: after the ADD COLUMN
the images carry the new column. Values are typed JSON (binary base64), so the conf types them."""

from __future__ import annotations

from pathlib import Path

from cdc_medallion.generator.history import History
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import dumps, finish, image, topic, walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

OPS = {"SNAPSHOT": "I", "INSERT": "I", "UPDATE": "U", "DELETE": "D", "TRUNCATE": "T"}


@register_renderer("ogg-json")
def render(history: History, out: Path) -> RenderedSource:
    dump = KafkaDump()
    position = 1_000
    for step in walk(history):
        change = step.change
        if change.op == "DDL":
            continue
        position += 1
        stamp = step.tx.commit_ts.isoformat(sep=" ", timespec="microseconds")
        document = {
            "table": f"{step.spec.schema}.{step.spec.name}".upper(),
            "op_type": OPS[change.op],
            "op_ts": stamp,
            "current_ts": step.tx.commit_ts.isoformat(timespec="microseconds"),
            "pos": f"{position:023d}",
            "primary_keys": list(step.spec.keys),
        }
        if change.op != "TRUNCATE":
            if change.before is not None:
                document["before"] = image(step.columns, change.before)
            if change.after is not None:
                document["after"] = image(step.columns, change.after)
        dump.add(topic(step.spec), dumps(document), None, step.tx.commit_ts)
    return finish("ogg-json", dump, out / "ogg.jsonl", history)
