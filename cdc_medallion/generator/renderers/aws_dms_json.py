"""AWS DMS (Kafka / Kinesis target) conventions: `{"data", "metadata"}` messages, the full load
as `load` records, then `insert` / `update` / `delete` with IncludeTransactionDetails
(`transaction-id`), BeforeImageSettings (`before-image`, ColumnFilter all: an update that changes
the key shows the old key there), IncludeNullAndEmpty (NULLs written, so the source declares
`include_null_and_empty: true`), partition key schema-table; the ADD COLUMN is an `add-column`
control record and the truncate a `truncate-table` control record. DMS messages name no key and
values are typed JSON, so the conf gives keys and column types."""

from __future__ import annotations

from pathlib import Path

from cdc_medallion.generator.history import History
from cdc_medallion.generator.renderers import RenderedSource, register_renderer
from cdc_medallion.generator.renderers._json_common import dumps, finish, image, topic, walk
from cdc_medallion.generator.renderers.kafka_dump import KafkaDump

OPS = {"SNAPSHOT": "load", "INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
CONTROL = {"DDL": "add-column", "TRUNCATE": "truncate-table"}


@register_renderer("aws-dms-json")
def render(history: History, out: Path) -> RenderedSource:
    dump = KafkaDump()
    for step in walk(history):
        change = step.change
        metadata = {
            "timestamp": step.tx.commit_ts.isoformat(timespec="microseconds") + "Z",
            "record-type": "control" if change.op in CONTROL else "data",
            "operation": CONTROL.get(change.op) or OPS[change.op],
            "partition-key-type": "schema-table",
            "schema-name": step.spec.schema,
            "table-name": step.spec.name,
        }
        if not step.tx.snapshot:
            metadata["transaction-id"] = 5_000_000 + step.tx.number
        document: dict = {"data": None, "metadata": metadata}
        if change.op == "DDL" and change.added is not None:
            document["data"] = {change.added.name: change.added.sql_type}
        elif change.op != "TRUNCATE":
            document["data"] = image(step.columns, change.after if change.after is not None else change.before)
            if change.op == "UPDATE":
                document["before-image"] = image(step.columns, change.before)
        dump.add(topic(step.spec), dumps(document), None, step.tx.commit_ts)
    options = {"include_null_and_empty": True}
    return finish("aws-dms-json", dump, out / "aws_dms.jsonl", history, options)
