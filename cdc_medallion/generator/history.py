"""A history of transactions over the simulated tables, and its ground truth.

Truth follows the pipeline's documented semantics: SCD1 is the final state; SCD2 has a new
version whenever a column value changes, a delete or truncate closes the open version, and an
update that changes the key closes the old key and opens the new one.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cdc_medallion.generator.database import ADDED_COLUMN, Column, TableSpec, make_tables

Row = dict[str, Any]
Key = tuple[Any, ...]


@dataclass(frozen=True)
class Change:
    """One row change (or a DDL) inside a transaction."""

    table: str
    op: str  # SNAPSHOT, INSERT, UPDATE, DELETE, TRUNCATE, DDL
    before: Row | None = None
    after: Row | None = None
    changed: tuple[str, ...] = ()  # UPDATE: the columns whose value changed
    ddl: str | None = None
    added: Column | None = None


@dataclass(frozen=True)
class Transaction:
    number: int  # 1, 2, ... in commit order
    commit_ts: dt.datetime
    changes: tuple[Change, ...]
    snapshot: bool = False


@dataclass
class Version:
    row: Row
    start: tuple[int, int]  # (transaction number, change index)
    end: tuple[int, int] | None = None


@dataclass
class History:
    tables: list[TableSpec]
    transactions: list[Transaction] = field(default_factory=list)

    _by_name: dict[str, TableSpec] = field(default_factory=dict, init=False, repr=False, compare=False)

    def table(self, name: str) -> TableSpec:
        spec = self._by_name.get(name)  # looked up once per change: a dict, not a scan, at 1M changes
        if spec is None:
            spec = self._by_name[name] = next(t for t in self.tables if t.name == name)
        return spec

    def columns_at_end(self, table: str) -> list[Column]:
        spec = self.table(table)
        added = [c.added for t in self.transactions for c in t.changes if c.table == table and c.added]
        return [*spec.columns, *added]

    # --- ground truth -------------------------------------------------------------------------
    def final_state(self) -> dict[str, dict[Key, Row]]:
        return {
            name: {k: v[-1].row for k, v in versions.items() if v[-1].end is None}
            for name, versions in self.versions().items()
        }

    def versions(self) -> dict[str, dict[Key, list[Version]]]:
        """SCD2 truth for every keyed table: each key's versions in order."""
        result: dict[str, dict[Key, list[Version]]] = {t.name: {} for t in self.tables if t.keys}
        for tx in self.transactions:
            for index, change in enumerate(tx.changes):
                spec = self.table(change.table)
                if not spec.keys:
                    continue
                at = (tx.number, index)
                table = result[change.table]
                if change.op == "TRUNCATE":
                    for history in table.values():
                        if history[-1].end is None:
                            history[-1].end = at
                    continue
                if change.op == "DDL":
                    continue
                if change.op in ("DELETE", "UPDATE") and change.before is not None:
                    old = tuple(change.before[k] for k in spec.keys)
                    new = tuple(change.after[k] for k in spec.keys) if change.after else None
                    if change.op == "DELETE" or old != new:
                        history = table.get(old)
                        if history and history[-1].end is None:
                            history[-1].end = at
                        if change.op == "DELETE":
                            continue
                key = tuple(change.after[k] for k in spec.keys)
                history = table.setdefault(key, [])
                if history and history[-1].end is None:
                    if same_row(history[-1].row, change.after):
                        continue
                    history[-1].end = at
                history.append(Version(dict(change.after), at))
        return result


def same_row(a: Row, b: Row) -> bool:
    """Whether two images of a row hold the same values. A column missing from an image is NULL:
    a row made before an ADD COLUMN has the column, NULL, in the database, though the
    simulation's dict of it was made without."""
    return all(a.get(c) == b.get(c) for c in a.keys() | b.keys())


SMALL_TABLE = 4096  # up to this many live rows, a row is picked from the sorted keys (as histories always were)


class _KeyPool:
    """Live keys of one table, so that picking a random row stays O(1) in benchmark-sized histories
    while small histories (every test's) keep picking exactly as before."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.index: dict[Key, int] = {}

    def add(self, key: Key) -> None:
        if key not in self.index:
            self.index[key] = len(self.keys)
            self.keys.append(key)

    def remove(self, key: Key) -> None:
        at = self.index.pop(key)
        last = self.keys.pop()
        if at < len(self.keys):
            self.keys[at] = last
            self.index[last] = at

    def clear(self) -> None:
        self.keys.clear()
        self.index.clear()

    def pick(self, rnd: random.Random) -> Key:
        if len(self.keys) <= SMALL_TABLE:
            return rnd.choice(sorted(self.keys, key=repr))
        return self.keys[rnd.randrange(len(self.keys))]


def generate_history(
    tables: int = 3, transactions: int = 40, seed: int = 1, snapshot_rows: int = 4, table_events: bool = True
) -> History:
    """A reproducible history: a snapshot (full load), then random transactions.

    `table_events=False` leaves out the one DDL and the one TRUNCATE, which touch every row of a
    table: a measurement of how cost follows the rows a change touches needs row changes only.
    """
    history, stream = stream_history(tables, transactions, seed, snapshot_rows, table_events)
    history.transactions.extend(stream)
    return history


def stream_history(
    tables: int = 3, transactions: int = 40, seed: int = 1, snapshot_rows: int = 4, table_events: bool = True
) -> tuple[History, Iterator[Transaction]]:
    """The same history with its transactions made as they are consumed, once.

    Only the live rows are held, not every change: a ten-million-change benchmark input is
    rendered from this (the whole history would not fit in memory). The returned `History`
    names the tables and holds no transactions, so it has no ground truth.
    """
    specs = make_tables(tables)
    return History(specs), _transactions(specs, transactions, seed, snapshot_rows, table_events)


def _transactions(
    specs: list[TableSpec], transactions: int, seed: int, snapshot_rows: int, table_events: bool
) -> Iterator[Transaction]:
    rnd = random.Random(seed)
    clock = dt.datetime(2026, 3, 1, 8, 0, 0)
    state: dict[str, dict[Key, Row]] = {t.name: {} for t in specs}
    pools = {t.name: _KeyPool() for t in specs}
    extra: dict[str, list[Column]] = {t.name: [] for t in specs}
    counters = {t.name: 0 for t in specs}

    def new_row(spec: TableSpec) -> Row:
        counters[spec.name] += 1
        row: Row = {}
        for column in [*spec.columns, *extra[spec.name]]:
            if column.name in spec.keys:
                row[column.name] = counters[spec.name] * (10 if column.spark_type == "bigint" else 1)
            elif rnd.random() < 0.12:
                row[column.name] = None
            else:
                row[column.name] = column.value(rnd, long=rnd.random() < 0.05)
        if len(spec.keys) == 2:  # composite: order id and line number
            row[spec.keys[0]] = 1000 + counters[spec.name] // 3
            row[spec.keys[1]] = counters[spec.name] % 3 + 1
        return row

    def key_of(spec: TableSpec, row: Row) -> Key:
        return tuple(row[k] for k in spec.keys) if spec.keys else (id(row),)

    snapshot: list[Change] = []
    for spec in specs:
        for _ in range(snapshot_rows):
            row = new_row(spec)
            state[spec.name][key_of(spec, row)] = row
            pools[spec.name].add(key_of(spec, row))
            # Shared with the state, not copied: rows are never changed in place (an update
            # makes a new dict), and a 10M-row snapshot held twice would not fit in memory.
            snapshot.append(Change(spec.name, "SNAPSHOT", after=row))
    yield Transaction(1, clock, tuple(snapshot), snapshot=True)

    ddl_done = truncate_done = not table_events
    key_moved = False
    for number in range(2, transactions + 2):
        clock += dt.timedelta(seconds=rnd.randint(1, 120), microseconds=rnd.randint(0, 999_999))
        changes: list[Change] = []
        for _ in range(rnd.randint(1, 4)):
            spec = rnd.choice(specs)
            rows = state[spec.name]
            roll = rnd.random()
            if number > transactions // 2 and not ddl_done and spec.keys and roll < 0.3:
                ddl_done = True
                extra[spec.name].append(ADDED_COLUMN)
                sql = f"ALTER TABLE {spec.schema}.{spec.name} ADD COLUMN {ADDED_COLUMN.name} {ADDED_COLUMN.sql_type}"
                changes.append(Change(spec.name, "DDL", ddl=sql, added=ADDED_COLUMN))
            elif number > transactions * 3 // 4 and not truncate_done and roll < 0.08 and rows:
                truncate_done = True
                rows.clear()
                pools[spec.name].clear()
                changes.append(Change(spec.name, "TRUNCATE"))
            elif roll < 0.4 or not rows or not spec.keys:
                row = new_row(spec)
                rows[key_of(spec, row)] = row
                pools[spec.name].add(key_of(spec, row))
                changes.append(Change(spec.name, "INSERT", after=dict(row)))
            elif roll < 0.8:
                key = pools[spec.name].pick(rnd)
                before = rows[key]
                after = dict(before)
                candidates = [c for c in [*spec.values, *extra[spec.name]]]
                picked = rnd.sample(candidates, k=rnd.randint(1, min(3, len(candidates))))
                for column in picked:
                    after[column.name] = None if rnd.random() < 0.1 else column.value(rnd)
                if len(spec.keys) == 2 and (not key_moved or rnd.random() < 0.15):  # an update that changes the key
                    key_moved = True
                    after[spec.keys[1]] = 10 + counters[spec.name]
                    counters[spec.name] += 1
                changed = tuple(c for c in after if after[c] != before.get(c))
                del rows[key]
                pools[spec.name].remove(key)
                rows[key_of(spec, after)] = after
                pools[spec.name].add(key_of(spec, after))
                changes.append(Change(spec.name, "UPDATE", before=dict(before), after=after, changed=changed))
            else:
                key = pools[spec.name].pick(rnd)
                pools[spec.name].remove(key)
                changes.append(Change(spec.name, "DELETE", before=dict(rows.pop(key))))
        yield Transaction(number, clock, tuple(changes))
