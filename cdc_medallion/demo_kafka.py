"""The pipeline on live CDC: PostgreSQL -> Debezium -> Kafka -> bronze, silver, gold (`make demo-kafka`).

    python -m cdc_medallion.demo_kafka

starts a Kafka broker, a throwaway PostgreSQL cluster (`wal_level=logical`) with a small shop
(`customers`, and `order_lines` with a composite key) and Kafka Connect running Debezium's
PostgreSQL connector (JSON with schemas). Once the snapshot is in Kafka it runs a short workload
(inserts, updates, deletes, a key update, in several transactions), waits until the connector's
committed offset passes the last transaction, and runs the pipeline from the topics (full
refresh, storage `.data/demo-kafka/`, quality checks on). It prints `cdc-medallion status` and
where the quality report is, then compares each gold SCD1 table with `SELECT *` of its source
table value by value: `source and gold agree: <tables> tables, <rows> rows` and exit 0, or what
differs and exit 1. Everything it started is stopped on the way out, Ctrl-C included. Exit 2:
PostgreSQL is not installed (`make postgres` installs Debian's package).
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from cdc_medallion.lines import lines_of
from cdc_medallion.names import gold_name

REPO = Path(__file__).resolve().parents[1]
STORAGE = REPO / ".data" / "demo-kafka"
PREFIX = "demo"  # Debezium's topic prefix and the pipeline's source name: topics demo.public.<table>
CONNECTOR = "demo-postgres"
KEYS = {"customers": ("id",), "order_lines": ("order_id", "line_no")}

SCHEMA = """
CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, email text, vip boolean, credit numeric(10,2));
CREATE TABLE order_lines (
  order_id integer, line_no integer, product text, qty integer, price numeric(10,2), gift boolean,
  PRIMARY KEY (order_id, line_no)
);
INSERT INTO customers VALUES (1, 'Ana', 'ana@example.com', true, 120.50), (2, 'Bo', NULL, false, 0),
  (3, 'Cy', 'cy@example.com', NULL, NULL);
INSERT INTO order_lines VALUES (100, 1, 'tea', 2, 4.20, false), (100, 2, 'mug', 1, 9.99, true),
  (101, 1, 'coffee', 3, 7.10, false);
"""

# Transactions run once the snapshot is in Kafka; the last one reports its id to wait for.
WORKLOAD = [
    """
    INSERT INTO customers VALUES (4, 'Di', 'di@example.com', false, 15.00);
    INSERT INTO order_lines VALUES (102, 1, 'kettle', 1, 34.90, false), (102, 2, 'tea', 5, 4.20, NULL);
    """,
    """
    UPDATE customers SET vip = true, credit = credit + 10.25 WHERE id = 2;
    UPDATE order_lines SET qty = 4, price = 3.95 WHERE order_id = 100 AND line_no = 1;
    DELETE FROM order_lines WHERE order_id = 101;
    """,
    """
    UPDATE order_lines SET line_no = 3 WHERE order_id = 100 AND line_no = 2;
    UPDATE customers SET id = 30, name = 'Cy (moved)' WHERE id = 3;
    DELETE FROM customers WHERE id = 1;
    """,
    """
    INSERT INTO customers VALUES (1, 'Ana again', NULL, false, 0.01);
    UPDATE customers SET email = 'bo@example.com' WHERE id = 2;
    """,
]
LAST = "INSERT INTO order_lines VALUES (103, 1, 'last', 1, 1.00, false); SELECT txid_current();"


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def connector(pg: Any) -> dict[str, str]:
    from cdc_medallion.services.kafka_connect import postgres_connector

    return postgres_connector(pg, [f"public.{t}" for t in KEYS], PREFIX, schemas=True)


def source_rows(pg: Any, table: str) -> list[dict[str, Any]]:
    out = pg.sql(f"SELECT to_jsonb(t) FROM {table} AS t").stdout
    return [json.loads(line, parse_float=decimal.Decimal) for line in lines_of(out) if line]


def pipeline_conf(bootstrap_servers: str) -> Any:
    from cdc_medallion.config import SourceConf, TableConf, load_conf
    from cdc_medallion.sources.kafka_settings import KafkaSettings

    base = load_conf(REPO / "conf" / "local.yml")
    kafka = KafkaSettings(bootstrap_servers=bootstrap_servers, subscribe_pattern=rf"{PREFIX}\.public\..*")
    sources = (SourceConf(name=PREFIX, format="debezium-json", kafka=kafka),)
    tables = tuple(TableConf(source=PREFIX, table=f"public.{t}", keys=k, name=t) for t, k in KEYS.items())
    return dataclasses.replace(base, name="demo-kafka", storage=STORAGE, sources=sources, tables=tables)


def _value(value: Any) -> Any:
    """One form per type: integers, text and booleans as they are, numeric as Decimal."""
    if isinstance(value, float | decimal.Decimal):
        return decimal.Decimal(str(value))
    return value


def compare(expected: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What differs between each source table and its gold SCD1 table (nothing: they agree)."""
    from cdc_medallion.catalog import dataset_status
    from cdc_medallion.storage.delta_rs import read_table

    paths = {d["name"]: d["path"] for d in dataset_status(STORAGE)}
    differences: list[str] = []
    for table, keys in KEYS.items():
        if gold_name(table) not in paths:
            differences.append(f"{table}: no gold_{table} table")
            continue
        gold = read_table(paths[gold_name(table)]).to_pylist()
        want = {tuple(r[k] for k in keys): r for r in expected[table]}
        have = {tuple(r[k] for k in keys): r for r in gold}
        for key in sorted(want.keys() - have.keys()):
            differences.append(f"{table} {key}: in the source, not in gold")
        for key in sorted(have.keys() - want.keys()):
            differences.append(f"{table} {key}: in gold, not in the source")
        for key in sorted(want.keys() & have.keys()):
            for column, value in want[key].items():
                got = have[key].get(column)
                if _value(got) != _value(value):
                    differences.append(f"{table} {key} {column}: gold {got!r}, source {value!r}")
    return differences


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop like Ctrl-C: everything is closed
    from cdc_medallion.services.postgres import PostgresCluster, Unavailable

    try:
        pg = PostgresCluster()
    except Unavailable as error:
        print(f"demo-kafka: PostgreSQL is not available ({error}); `make postgres` installs it", file=sys.stderr)
        return 2

    from cdc_medallion import cli
    from cdc_medallion.pipeline import run_pipeline
    from cdc_medallion.runner.results import stderr_progress
    from cdc_medallion.services.kafka_broker import KafkaBroker
    from cdc_medallion.services.kafka_connect import KafkaConnect

    try:
        say("demo-kafka: starting the Kafka broker")
        with KafkaBroker(say=say) as broker:
            try:
                say(f"demo-kafka: broker on {broker.bootstrap_servers}; starting PostgreSQL")
                pg.start()
                pg.transaction(SCHEMA)
                say(f"demo-kafka: PostgreSQL on port {pg.port}; starting Kafka Connect with Debezium")
                with KafkaConnect(broker.bootstrap_servers, {CONNECTOR: connector(pg)}, say=say) as connect:
                    say("demo-kafka: waiting for the snapshot to be in Kafka")
                    connect.wait_for_offsets(
                        [CONNECTOR],
                        lambda o: o.get("snapshot_completed") is True or "snapshot" not in o,
                        "the end of its snapshot",
                    )
                    say(f"demo-kafka: running the workload ({len(WORKLOAD) + 1} transactions)")
                    for script in WORKLOAD:
                        pg.transaction(script)
                    txid = int(pg.sql(f"BEGIN; {LAST} COMMIT;").stdout.split()[-1])
                    say(f"demo-kafka: waiting for the connector's offset to pass transaction {txid}")
                    connect.wait_for_offsets(
                        [CONNECTOR], lambda o: int(o.get("txId") or 0) >= txid, f"transaction {txid}"
                    )
                expected = {table: source_rows(pg, table) for table in KEYS}
            finally:
                say("demo-kafka: stopping PostgreSQL")
                pg.close()
            say(f"demo-kafka: running the pipeline from Kafka (full refresh, storage {STORAGE})")
            run_pipeline(
                pipeline_conf(broker.bootstrap_servers), full_refresh=True, progress=stderr_progress, quality=True
            )
            say("demo-kafka: stopping the Kafka broker")
        cli.main(["status", "--storage", str(STORAGE)])
        cli.main(["report", "--storage", str(STORAGE)])
        differences = compare(expected)
    except Unavailable as error:
        print(f"demo-kafka: PostgreSQL does not start here ({error}); `make postgres` installs it", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        say("demo-kafka: interrupted; everything it started is stopped")
        return 130
    if differences:
        print(f"source and gold differ ({len(differences)}):")
        for line in differences:
            print(f"  {line}")
        return 1
    print(f"source and gold agree: {len(KEYS)} tables, {sum(len(r) for r in expected.values())} rows")
    return 0


if __name__ == "__main__":
    code = main()
    # Everything the demo started is stopped and its output written. It exits without the
    # interpreter's teardown: there, a native (C++) thread of one of the libraries it loads has
    # aborted the process after a clean run, once in two ("terminate called without an active
    # exception"), turning a passed demo into a failed one. Spark's JVM ends when its stdin
    # closes, as after any exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
