"""Which flows share one streaming query, and who the members of a shared query are.

A streaming query has a fixed cost (its start, its checkpoint, a few jobs per batch) whatever
it reads. Gold has a table per source table, each fed by a view over its source's silver, and
the side tables (schema changes, heartbeats) read the same silver: one query per reader made an
update's cost follow the tables that exist. So the flows whose query reads exactly one Delta
stream, row by row (no state, no join, no other input), share one query over that stream: each
micro-batch is read once and each member's query function runs on it as a batch. Flows that
keep state, read tables or read several inputs run in queries of their own, as before.

A member of a shared query sees only the batches read since it joined. So a flow that is new
to a stream whose shared query already ran runs in a query of its own first (reading the stream
from its start, as any new flow); it joins at the end of an update in which both caught up with
the same version of the stream. A member whose batch fails leaves at once (the file records it
before the batch commits), and so does a member still in the graph that an update's shared query
starts without (it was not planned yet): either takes the shared query's checkpoint up to the
batch it left at, application id included, and goes on from there in its own query, so a
replayed batch skips what it committed and nothing is read twice; it joins again as a new flow
does.

A member's query function runs on each batch, and with hundreds of members building them all
only to find most empty was most of a small update. So each member's plan also yields its
*stream filter* (`stream_filter`): the filters its rows pass while they are still the stream's
own rows. A member none of whose batch rows passes it has no rows, so a batch first finds, in one
job, which members' filters any of its rows pass, and builds only those members' rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyspark.sql import Column, DataFrame

#: Logical plan operators that act on each row alone: a query built only of these gives the same
#: rows whether it runs on a stream or on each of its micro-batches.
ROW_BY_ROW_OPERATORS = frozenset(
    {
        "Project",
        "Filter",
        "SubqueryAlias",
        "Generate",
        "MapInArrow",
        "PythonMapInArrow",
        "MapInPandas",
        "MapPartitionsInR",
        "SerializeFromObject",
        "DeserializeToObject",
        "StreamingRelationV2",
        "StreamingRelation",
        "StreamingExecutionRelation",
    }
)
MEMBERS_FILE = "cdc_medallion_members.json"


def operators(rows: DataFrame) -> set[str]:
    """The names of the operators in `rows`' analyzed logical plan."""
    names: set[str] = set()
    pending = [rows._jdf.queryExecution().analyzed()]
    while pending:
        node = pending.pop()
        names.add(str(node.nodeName()))
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return names


def row_by_row(rows: DataFrame) -> bool:
    return operators(rows) <= ROW_BY_ROW_OPERATORS


#: Operators that keep a stream row's own columns as they are (a filter drops rows, a
#: projection may add columns): a filter above only these still reads the stream's columns.
_KEEPS_STREAM_COLUMNS = frozenset({"Filter", "Project", "SubqueryAlias"})


def stream_filter(rows: DataFrame, stream: DataFrame) -> Column | None:
    """What each row of `stream` that becomes one of `rows` satisfies (None: nothing known).

    The filters of `rows`' plan that read only `stream`'s own columns, from the stream up to the
    first operator that is not a filter or a projection, or to the first filter that reads a
    computed column or is nondeterministic. They are combined with AND in the order the plan
    applies them, which evaluates left to right, so a filter that guards a later one (`x <> 0`,
    then `1 / x > 1`) still guards it.

    Only a necessary condition: a batch row that fails it yields no row of `rows`, one that
    passes may yield none. `rows` must read the stream through `stream` itself: its columns are
    then `stream`'s, and a micro-batch of a query over `stream` keeps them."""
    node = rows._jdf.queryExecution().analyzed()
    chain = []
    while node.children().size() == 1:
        chain.append(node)
        node = node.children().apply(0)
    if node.children().size() != 0:
        return None
    own = stream._jdf.queryExecution().analyzed().outputSet()
    conditions = []
    for step in reversed(chain):  # from the stream up
        operator = str(step.nodeName())
        if operator not in _KEEPS_STREAM_COLUMNS:
            break
        if operator == "Filter":
            condition = step.condition()
            if not condition.deterministic() or not condition.references().subsetOf(own):
                break
            conditions.append(condition)
    if not conditions:
        return None
    jvm = rows.sparkSession._jvm
    combined = conditions[0]
    for condition in conditions[1:]:
        combined = jvm.org.apache.spark.sql.catalyst.expressions.And(combined, condition)
    column_node = jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(combined)
    return Column(jvm.org.apache.spark.sql.Column(column_node))


class Members:
    """The members of one shared query, in a file beside its checkpoint (written atomically, so
    a crash leaves the old list or the new one)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MEMBERS_FILE

    def exists(self) -> bool:
        return self.path.is_file()

    def names(self) -> set[str]:
        try:
            return set(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return set()

    def write(self, names: set[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(sorted(names)), encoding="utf-8")
        os.replace(partial, self.path)

    def remove(self, name: str) -> None:
        self.write(self.names() - {name})
