"""The peer: Apache Flink (PyFlink from PyPI) materialising the latest state per key of a
Debezium or Canal file, run in its own virtualenv (its pins conflict with ours).

Prints one JSON line: {"seconds": ..., "rows_in": ..., "keys": ...}. Run by bench/peer.py.

Flink SQL reads the file with the filesystem connector and the `debezium-json`/`canal-json`
format, which turn each message into changelog rows (+I, -U/+U, -D); a GROUP BY on the key with
LAST_VALUE (retractable) keeps the latest row per key in keyed state, as gold does. The
Debezium decimal (base64 bytes), date (days) and timestamp (micros) columns are read as the raw
STRING/INT/BIGINT Flink's JSON format accepts, so Flink does less conversion work than we do.
"""

from __future__ import annotations

import argparse
import json
import time

COLUMNS = {
    "debezium-json": [
        ("id", "INT"),
        ("name", "STRING"),
        ("balance", "STRING"),
        ("score", "DOUBLE"),
        ("active", "BOOLEAN"),
        ("born", "INT"),
        ("updated_at", "BIGINT"),
        ("notes", "STRING"),
        ("tier", "STRING"),
    ],
    "canal-json": [
        ("id", "INT"),
        ("name", "STRING"),
        ("balance", "DECIMAL(12, 2)"),
        ("score", "DOUBLE"),
        ("active", "STRING"),
        ("born", "STRING"),
        ("updated_at", "STRING"),
        ("notes", "STRING"),
        ("tier", "STRING"),
    ],
}
FORMAT_OPTIONS = {
    "debezium-json": {"debezium-json.schema-include": "true", "debezium-json.ignore-parse-errors": "true"},
    "canal-json": {"canal-json.ignore-parse-errors": "true"},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", required=True, choices=sorted(COLUMNS))
    parser.add_argument("--input", required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="also count live keys (streams every change back)")
    args = parser.parse_args()

    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", str(args.parallelism))
    env.get_config().set("table.exec.resource.default-parallelism", str(args.parallelism))
    columns = COLUMNS[args.format]
    options = {"connector": "filesystem", "path": args.input, "format": args.format, **FORMAT_OPTIONS[args.format]}
    with_clause = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    env.execute_sql(f"CREATE TABLE src ({', '.join(f'`{c}` {t}' for c, t in columns)}) WITH ({with_clause})")
    values = [(c, t) for c, t in columns if c != "id"]
    env.execute_sql(
        "CREATE TABLE latest (`id` INT, "
        + ", ".join(f"`{c}` {t}" for c, t in values)
        + ", PRIMARY KEY (`id`) NOT ENFORCED) WITH ('connector' = 'blackhole')"
    )
    select = ", ".join(f"LAST_VALUE(`{c}`) AS `{c}`" for c, _ in values)
    started = time.monotonic()
    env.execute_sql(f"INSERT INTO latest SELECT `id`, {select} FROM src GROUP BY `id`").wait()
    seconds = time.monotonic() - started
    keys = None
    if not args.check:
        print(json.dumps({"seconds": seconds, "keys": keys}))
        return
    with env.execute_sql("SELECT COUNT(*) FROM src").collect() as rows:  # live keys, to check the peer's reading
        for row in rows:
            keys = row[0]
    print(json.dumps({"seconds": seconds, "keys": keys}))


if __name__ == "__main__":
    main()
