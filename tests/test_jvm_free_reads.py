"""`status`, `show` and `report` read the pipeline's tables with delta-rs, without a JVM, and see
what Spark sees: on tables with deletion vectors (rows a MERGE deleted or replaced are still in the files),
column mapping and TIMESTAMP_NTZ, written by the pipeline and by `DeltaStore`. A table delta-rs
does not read (type widening) is read by Spark."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from cdc_medallion import arrow_rows
from cdc_medallion.catalog import all_rows, dataset_status, first_rows, read_dataset
from cdc_medallion.cli import _jsonable
from cdc_medallion.lines import lines_of
from cdc_medallion.quality.figures import TableFigures
from cdc_medallion.quality.figures_step import table_figures
from cdc_medallion.quality.stored import read_stored
from cdc_medallion.storage import delta_rs
from cdc_medallion.storage.delta_store import DeltaStore
from tests.helpers import ingest

pytestmark = pytest.mark.xdist_group("jvm_free_reads")

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "debezium" / "shop.jsonl"
KEYS = {"customers": "id", "orders": "order_id", "order_lines": "order_id,line_no"}
MAPPED = "silver_mapped"  # a table whose column names need Delta's column mapping
WIDENED = "silver_widened"

#: The CLI in a process where Java cannot start (no JAVA_HOME, no `java` on PATH), reporting on
#: stderr, last line, whether pyspark or py4j were imported at all.
NO_JVM_CLI = """
import sys
from cdc_medallion.cli import main
code = main(sys.argv[1:])
print(sorted({m.split(".")[0] for m in sys.modules} & {"pyspark", "py4j"}), file=sys.stderr)
sys.exit(code)
"""


#: Spark gives a TIMESTAMP as a naive datetime in the process's local time: away from UTC, so
#: that a reader giving UTC (or the instant) shows.
LOCAL_TIME = "Asia/Kolkata"


def no_java_env() -> dict[str, str]:
    path = [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not os.path.exists(os.path.join(p, "java"))
    ]
    return {**os.environ, "JAVA_HOME": "/nonexistent/java", "PATH": os.pathsep.join(path), "TZ": LOCAL_TIME}


@contextmanager
def local_time(zone: str) -> Iterator[None]:
    """This process's local time zone (what Python's datetime.fromtimestamp uses) in the block."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def cli_without_jvm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_JVM_CLI, *args], env=no_java_env(), capture_output=True, text=True, timeout=600
    )


def stored_figures(storage: Path) -> TableFigures:
    """The table figures the last run stored, as the report and `status` read them (no JVM)."""
    figures = read_stored(storage).figures
    assert figures is not None, f"no figures stored in {storage}"
    return figures


def spark_show(spark: Any, storage: Path, name: str, limit: int) -> list[Any]:
    """What `show` printed when Spark read every table: ordered by all columns Spark can order,
    in the local time of the processes that run the CLI here."""
    df = read_dataset(spark, storage, name)
    ordered = [f.name for f in df.schema.fields if f.dataType.typeName() not in ("map", "array", "struct", "binary")]
    with local_time(LOCAL_TIME):
        return [_jsonable(r.asDict(recursive=True)) for r in df.orderBy(*ordered).limit(limit).collect()]


@contextmanager
def deletion_vectors(spark: Any) -> Iterator[None]:
    """Every table created in the block has deletion vectors (gold has them anyway): a MERGE or
    DELETE marks rows deleted in the files it leaves, rather than rewriting them."""
    key = "spark.databricks.delta.properties.defaults.enableDeletionVectors"
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.unset(key)


def deleted_rows(path: str) -> int:
    """Rows the table's deletion vectors mark deleted (still in its data files)."""
    import pyarrow as pa

    vectors = pa.RecordBatchReader.from_stream(delta_rs.open_table(path).deletion_vectors()).read_all()
    return sum(kept.count(False) for kept in vectors.column("selection_vector").to_pylist())


@pytest.fixture(scope="module")
def storage(spark, tmp_path_factory) -> Path:
    """The embedded Debezium sample in two runs, so that the second deletes and updates rows the
    first wrote (gold's MERGEs then leave deletion vectors); `placed_at` as TIMESTAMP_NTZ; and a
    column-mapped table with deleted rows."""
    folder = tmp_path_factory.mktemp("jvm-free")
    root, messages = folder / "storage", folder / "shop.jsonl"
    lines = lines_of(SAMPLE.read_text(encoding="utf-8"), keepends=True)
    with deletion_vectors(spark):
        for part in (lines[:120], lines[120:]):
            with messages.open("a", encoding="utf-8") as out:
                out.writelines(part)
            ingest(
                spark,
                "debezium-json",
                messages,
                root,
                keys=KEYS,
                columns={"orders": "placed_at:timestamp_ntz"},
                layout="kafka-dump",
            )
        store = DeltaStore(root, spark)
        rows = spark.range(0, 50).select(
            F.col("id").cast("int").alias("id"),
            F.concat(F.lit("item "), F.col("id").cast("string")).alias("unit name"),
            F.create_map(F.lit("k"), F.col("id").cast("string")).alias("tags"),
        )
        store.append(MAPPED, rows, None, {"layer": "silver"})
        store.merge_table(MAPPED, spark).delete("id % 7 = 0")
    return root


def test_the_tables_carry_deletion_vectors_and_every_verified_feature(storage):
    """The premise of the tests below: rows deleted by deletion vectors are still in the files
    (so a reader that ignored them would show them), in gold and in a column-mapped table."""
    status = {e["name"]: e for e in dataset_status(storage)}
    for name in ("gold_customers", "gold_customers_history", "gold_orders_history", MAPPED):
        assert deleted_rows(status[name]["path"]) > 0, name
    features = set()
    for entry in status.values():
        features |= set(delta_rs.open_table(entry["path"]).protocol().reader_features or [])
    assert features >= delta_rs.VERIFIED_READER_FEATURES


def test_status_needs_no_jvm_and_counts_what_spark_counts(spark, storage):
    result = cli_without_jvm("status", "--storage", str(storage), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "[]"  # neither pyspark nor py4j imported
    counted = {e["name"]: e["rows"] for e in json.loads(result.stdout)}
    assert {"gold_customers", "gold_orders_history", MAPPED, "event_log"} <= set(counted)
    assert counted == {name: read_dataset(spark, storage, name).count() for name in counted}


SHOW_EVERY_DATASET = """
import contextlib, io, json, sys
from cdc_medallion.cli import main
storage, names = sys.argv[1], sys.argv[2:]
shown = {}
for name in names:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", name, "--storage", storage, "--limit", "100000", "--json"]) == 0, name
    shown[name] = json.loads(out.getvalue())
print(json.dumps(shown))
print(sorted({m.split(".")[0] for m in sys.modules} & {"pyspark", "py4j"}), file=sys.stderr)
"""


def test_show_needs_no_jvm_and_shows_what_spark_reads(spark, storage):
    """Every dataset, every row, in order: deletion vectors applied, values as Spark gives them."""
    names = [e["name"] for e in dataset_status(storage)]
    result = subprocess.run(
        [sys.executable, "-c", SHOW_EVERY_DATASET, str(storage), *names],
        env=no_java_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "[]"
    shown = json.loads(result.stdout)
    for name in names:
        assert shown[name] == spark_show(spark, storage, name, 100000), name


def test_show_prints_the_first_rows_in_spark_order(spark, storage):
    """A limit below the table's size: the same first rows, printed one JSON object a line."""
    result = cli_without_jvm("show", "gold_customers_history", "--storage", str(storage), "--limit", "7")
    assert result.returncode == 0, result.stderr[-3000:]
    expected = spark_show(spark, storage, "gold_customers_history", 7)
    assert lines_of(result.stdout) == [json.dumps(row, ensure_ascii=False) for row in expected]


def test_show_of_an_unknown_dataset_lists_the_datasets(storage):
    result = cli_without_jvm("show", "gold_nothing", "--storage", str(storage))
    assert result.returncode == 2
    assert f"no dataset 'gold_nothing' in {storage} (have: bronze_debezium_json, " in result.stderr
    assert "Traceback" not in result.stderr


def test_report_needs_no_jvm_and_reports_what_spark_reads(spark, storage, tmp_path):
    result = cli_without_jvm("report", "--storage", str(storage), "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "index.html").is_file()
    without_jvm, with_spark = stored_figures(storage), table_figures(DeltaStore(storage, spark), None, "")
    assert dataclasses.replace(without_jvm, as_of=with_spark.as_of) == with_spark


def test_a_table_delta_rs_does_not_read_is_read_by_spark(spark, tmp_path):
    """Type widening (a DDL widened a column) is a reader feature delta-rs refuses: with
    deletion vectors too, `status` counts that table with Spark and `show` reads it with Spark."""
    store = DeltaStore(tmp_path / "storage", spark)
    schema = StructType([StructField("id", IntegerType()), StructField("name", StringType())])
    with deletion_vectors(spark):
        store.append(
            WIDENED, spark.createDataFrame([(i, f"n{i}") for i in range(10)], schema), None, {"layer": "silver"}
        )
        store.merge_table(WIDENED, spark).delete("id in (3, 4)")
    widened = StructType([StructField("id", LongType()), StructField("name", StringType())])
    store.evolve(WIDENED, widened)
    store.append(WIDENED, spark.createDataFrame([(2**40, "wide")], widened), None)
    path = store.path(WIDENED)
    assert {"deletionVectors", "typeWidening"} <= set(delta_rs.open_table(path).protocol().reader_features or [])
    assert not delta_rs.readable_without_jvm(path)

    [entry] = dataset_status(store.root)
    assert entry["rows"] == 9
    with local_time(LOCAL_TIME):
        shown = [_jsonable(r) for r in first_rows(store.root, WIDENED, 100)]
    assert shown == spark_show(spark, store.root, WIDENED, 100)
    assert [r["id"] for r in shown] == [0, 1, 2, 5, 6, 7, 8, 9, 2**40]


# --- dates and timestamps in years 1-9999 ---------------------------------------------------------
#: As sent, in the order of their ids: the first and last day, a year pyarrow's nanoseconds do not
#: reach, a day in the Julian/Gregorian gap, and the edges of the nanosecond range.
DATES = ["0001-01-01", "1000-01-01", "1582-10-10", "1677-09-21", "2262-04-12", "9999-12-31"]
TIMES = [
    "0001-01-01 00:00:00",
    "1000-01-01 00:00:00",
    "1582-10-10 12:00:00",
    "1677-09-21 00:12:43.145224",
    "2262-04-12 23:47:16.854776",
    "9999-12-31 23:59:59.999999",
]
#: Beyond years 1-9999, which gold holds as Spark's DATE and TIMESTAMP do (PostgreSQL's first
#: day, 1 BC, a year past 9999, PostgreSQL's last date, Debezium's long for `infinity`): they
#: show as Spark's cast spells them.
BEYOND = [
    ("-4712-01-01", "-4712-01-01 12:00:00"),
    ("0000-12-31", "0000-12-31 23:59:59.999999"),
    ("+10000-01-01", "+10000-01-01 00:00:00"),
    ("+5874897-12-31", "+294247-01-10 04:00:25.2"),
]
MOMENT_COLUMNS = {"moments": "id:int,d:date,t:timestamp,n:timestamp_ntz,k:int"}
TEXT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"
#: Microseconds since the epoch of 0001-01-01 00:00 and 9999-12-31 23:59:59.999999 UTC.
UTC_YEARS_1_TO_9999 = (-62135596800000000, 253402300799999999)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def test_a_table_only_spark_reads_shows_the_extremes(spark, tmp_path):
    """A table delta-rs does not read (type widening) holding timestamps in years 1 and 9999:
    `show` and `all_rows` read it with Spark and give the values gold holds, where Spark's own
    `collect()` fails (Python's `fromtimestamp` on year 1)."""
    store = DeltaStore(tmp_path / "storage", spark)
    schema = "id int, d date, t timestamp"
    rows = spark.sql(
        "SELECT * FROM VALUES "
        + ", ".join(f"({i}, DATE'{d}', TIMESTAMP'{t}Z')" for i, (d, t) in enumerate(zip(DATES, TIMES, strict=True)))
        + f" AS v({', '.join(c.split()[0] for c in schema.split(', '))})"
    )
    store.append(WIDENED, rows, None, {"layer": "silver"})
    store.evolve(WIDENED, StructType([StructField("id", LongType()), *rows.schema.fields[1:]]))
    path = store.path(WIDENED)
    assert not delta_rs.readable_without_jvm(path)
    micros = {
        r["id"]: r["m"]
        for r in read_dataset(spark, store.root, WIDENED).select("id", F.unix_micros("t").alias("m")).collect()
    }
    with local_time(LOCAL_TIME):
        expected = [
            {
                "id": i,
                "d": dt.date.fromisoformat(d),
                "t": arrow_rows.local_time(EPOCH + dt.timedelta(microseconds=micros[i])),
            }
            for i, d in enumerate(DATES)
        ]
        assert first_rows(store.root, WIDENED, 100) == expected
        assert sorted(all_rows(store.root, WIDENED, spark), key=lambda r: r["id"]) == expected
    assert expected[0]["t"].year == 1 and expected[-1]["t"].year == 9999


def moment(op: str, lsn: int, row: dict[str, Any]) -> str:
    message = {"op": op, "ts_ms": 1_700_000_000_000 + lsn, "source": {"table": "moments", "lsn": lsn}}
    return json.dumps({**message, "before": None, "after": row}) + "\n"


@pytest.fixture(scope="module")
def extremes(spark, tmp_path_factory) -> Path:
    """Gold typed from the extremes in two runs (the second MERGEs an update of each row), and
    a change quarantined by `values_cast` that carries them too, so the report samples them;
    the rows after the first `len(DATES)` hold years beyond 1-9999 (`BEYOND`)."""
    folder = tmp_path_factory.mktemp("extremes")
    feed, root = folder / "moments.jsonl", folder / "storage"
    moments = [*zip(DATES, TIMES, strict=True), *BEYOND]
    rows = [{"id": i, "d": d, "t": t, "n": t, "k": i} for i, (d, t) in enumerate(moments)]
    feed.write_text("".join(moment("c", 10 + r["id"], r) for r in rows), encoding="utf-8")
    ingest(spark, "debezium-json", feed, root, keys={"moments": "id"}, columns=MOMENT_COLUMNS, layout="json-lines")
    later = [moment("u", 100 + r["id"], {**r, "k": 100 + r["id"]}) for r in rows]
    later.append(moment("u", 200, {**rows[0], "k": "not a number"}))
    with feed.open("a", encoding="utf-8") as out:
        out.write("".join(later))
    ingest(spark, "debezium-json", feed, root, keys={"moments": "id"}, columns=MOMENT_COLUMNS, layout="json-lines")
    return root


@contextmanager
def spark_setting(spark: Any, key: str, value: str) -> Iterator[None]:
    before = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, before)


def session_time_zone(spark: Any, zone: str) -> Any:
    return spark_setting(spark, "spark.sql.session.timeZone", zone)


def parquet_timestamps(spark: Any, kind: str) -> Any:
    """Spark's Parquet timestamp type in the block (INT96: what storage written before had)."""
    return spark_setting(spark, "spark.sql.parquet.outputTimestampType", kind)


def spark_text(spark: Any, df: Any, limit: int) -> list[dict[str, Any]]:
    """What `show` must print, from Spark's own values, never through Python's datetime (whose
    `fromtimestamp`, which Spark's `collect` uses, fails on the first day of year 1): dates and
    timestamps as Spark's JVM formats them in the CLI's local time, with microseconds; a TIMESTAMP
    whose local time lies outside years 1-9999 as its UTC instant (`show`'s rule). A value whose
    year (in UTC) lies outside 1-9999 as Spark's `CAST(... AS STRING)` in UTC, an instant's with
    `+00:00`."""
    kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
    timed = [name for name, kind in kinds.items() if kind in ("date", "timestamp", "timestamp_ntz")]
    ordered = [name for name, kind in kinds.items() if kind not in ("map", "array", "struct", "binary")]
    picked = []
    for name, kind in kinds.items():
        column = F.col(f"`{name}`")
        if kind == "date":  # date_format overflows on a date beyond what TIMESTAMP holds
            picked.append(F.when(F.year(column).between(1, 9999), F.date_format(column, "yyyy-MM-dd")).alias(name))
        elif kind == "timestamp_ntz":
            picked += [F.date_format(column, TEXT).alias(name), F.year(column).alias(f"{name}__year")]
        elif kind == "timestamp":  # in local time only within years 1-9999 in UTC: Spark overflows beyond
            within = F.unix_micros(column).between(*UTC_YEARS_1_TO_9999)
            picked += [
                F.when(within, F.date_format(column, TEXT)).alias(name),
                F.when(within, F.year(column)).alias(f"{name}__year"),
                F.unix_micros(column).alias(f"{name}__micros"),
            ]
        else:
            picked.append(column.alias(name))
    in_utc = [F.year(F.col(f"`{n}`")).alias(f"{n}__utc_year") for n in timed]
    in_utc += [F.col(f"`{n}`").cast("string").alias(f"{n}__cast") for n in timed]
    with session_time_zone(spark, LOCAL_TIME):
        rows = [r.asDict(recursive=True) for r in df.orderBy(*ordered).limit(limit).select(*picked).collect()]
    with session_time_zone(spark, "UTC"):
        casts = [r.asDict() for r in df.orderBy(*ordered).limit(limit).select(*in_utc).collect()]
    shown = []
    for row, cast in zip(rows, casts, strict=True):
        for name in timed:
            year, micros = row.pop(f"{name}__year", None), row.pop(f"{name}__micros", None)
            if cast[f"{name}__utc_year"] is not None and not 1 <= cast[f"{name}__utc_year"] <= 9999:
                row[name] = cast[f"{name}__cast"] + ("+00:00" if kinds[name] == "timestamp" else "")
            elif micros is not None and not 1 <= year <= 9999:
                row[name] = (EPOCH + dt.timedelta(microseconds=micros)).isoformat(timespec="microseconds")
        shown.append({k: v if k in timed else _jsonable(v) for k, v in row.items()})
    return shown


def as_text(row: dict[str, Any], kinds: dict[str, str]) -> dict[str, Any]:
    """A row `show` printed, its timestamps with microseconds as `spark_text` gives them (a text
    with a signed year, beyond what Python's datetime holds, as it is)."""
    out = dict(row)
    for name, kind in kinds.items():
        if kind in ("timestamp", "timestamp_ntz") and out[name] is not None:
            with contextlib.suppress(ValueError):
                out[name] = dt.datetime.fromisoformat(out[name]).isoformat(timespec="microseconds")
    return out


def test_new_files_hold_timestamps_as_microseconds(extremes):
    """Spark's default, INT96, is nanoseconds to readers that follow the Parquet spec (delta-rs,
    pyarrow), which cannot hold a year before 1677 or after 2262: Delta's writer, appends and
    MERGEs alike, writes INT64 microseconds (`spark.py`)."""
    import pyarrow.parquet as pq

    checked = 0
    for entry in dataset_status(extremes):
        for uri in delta_rs.open_table(entry["path"]).file_uris():
            schema = pq.ParquetFile(uri.removeprefix("file://")).metadata.schema
            for i in range(len(schema)):
                column = schema.column(i)
                assert column.physical_type != "INT96", (entry["name"], column.path)
                checked += column.logical_type.type == "TIMESTAMP"
    assert checked > 10


def test_show_gives_spark_values_on_the_extremes(spark, extremes):
    """Every dataset, every row: dates and timestamps from year 1 to 9999 as Spark reads them,
    and beyond those as Spark's cast spells them."""
    names = [e["name"] for e in dataset_status(extremes)]
    result = subprocess.run(
        [sys.executable, "-c", SHOW_EVERY_DATASET, str(extremes), *names],
        env=no_java_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(result.stdout)
    gold = read_dataset(spark, extremes, "gold_moments")
    assert gold.count() == len(DATES) + len(BEYOND)
    for name in names:
        df = read_dataset(spark, extremes, name)
        kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
        assert [as_text(row, kinds) for row in shown[name]] == spark_text(spark, df, 100000), name
    last = next(r for r in shown["gold_moments"] if r["id"] == len(DATES) - 1)
    assert (last["d"], last["n"]) == ("9999-12-31", "9999-12-31T23:59:59.999999")
    assert last["t"] == "9999-12-31T23:59:59.999999+00:00"  # 10000-01-01 in local time: the instant
    beyond = sorted((r for r in shown["gold_moments"] if r["id"] >= len(DATES)), key=lambda r: r["id"])
    assert [(r["d"], r["n"], r["t"]) for r in beyond] == [
        ("-4712-01-01", "-4712-01-01 12:00:00", "-4712-01-01 12:00:00+00:00"),
        ("0000-12-31", "0000-12-31 23:59:59.999999", "0000-12-31 23:59:59.999999+00:00"),
        ("+10000-01-01", "+10000-01-01 00:00:00", "+10000-01-01 00:00:00+00:00"),
        ("+5874897-12-31", "+294247-01-10 04:00:25.2", "+294247-01-10 04:00:25.2+00:00"),
    ]


def test_status_and_the_report_on_the_extremes(spark, extremes, tmp_path):
    result = cli_without_jvm("status", "--storage", str(extremes), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    counted = {e["name"]: e["rows"] for e in json.loads(result.stdout)}
    assert counted == {name: read_dataset(spark, extremes, name).count() for name in counted}
    result = cli_without_jvm("report", "--storage", str(extremes), "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    without_jvm, with_spark = stored_figures(extremes), table_figures(DeltaStore(extremes, spark), None, "")
    assert dataclasses.replace(without_jvm, as_of=with_spark.as_of) == with_spark
    [sample] = [s for r in with_spark.quarantine if r.dataset == "changes_moments_quarantine" for s in r.samples]
    assert '"d": "0001-01-01", "t": "0001-01-01 00:00:00"' in sample["raw"]  # this process's local time: UTC


def test_status_prints_the_figures_the_report_reads(extremes):
    """`status` shows, below the tables, the figures the last run stored, read as the report
    reads them: the same quarantined rows and top reason."""
    result = cli_without_jvm("status", "--storage", str(extremes))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = stored_figures(extremes)
    rows, top = sum(figures.quarantine_rows.values()), figures.quarantine[0]
    assert rows > 0 and top.dataset == "changes_moments_quarantine"
    line = f"quarantined  {rows:,} row(s) in {len(figures.quarantine_rows)} table(s); most: {top.dataset} · {top.rule}"
    assert f"{line} ({top.count:,})" in result.stdout, result.stdout
    assert "figures stored by update " in result.stdout


def test_int96_files_of_an_older_storage_read_as_spark_reads_them(spark, tmp_path):
    """A table written before Spark wrote microseconds holds INT96 files: delta-rs reads them
    as microseconds too (`delta_rs.INT96_AS`), beside newer INT64 ones."""
    store = DeltaStore(tmp_path / "storage", spark)
    moments = spark.createDataFrame(
        [(i, d, t) for i, (d, t) in enumerate(zip(DATES, TIMES, strict=True))], "id int, d string, t string"
    ).selectExpr("id", "CAST(d AS date) AS d", "CAST(t AS timestamp) AS t", "CAST(t AS timestamp_ntz) AS n")
    with parquet_timestamps(spark, "INT96"):
        store.append("silver_old", moments, None, {"layer": "silver"})
    store.append("silver_old", moments.selectExpr("id + 10 AS id", "d", "t", "n"), None)
    path = store.path("silver_old")
    assert delta_rs.readable_without_jvm(path)
    with local_time(LOCAL_TIME):
        shown = [_jsonable(r) for r in first_rows(store.root, "silver_old", 100)]
    df = read_dataset(spark, store.root, "silver_old")
    kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
    assert [as_text(r, kinds) for r in shown] == spark_text(spark, df, 100)


def test_heartbeat_lag_on_the_extremes_stored_and_read_back(spark, tmp_path):
    """The report's latest heartbeat per source, from heartbeats in year 1 and 9999, as Spark
    computes it and as the event log stores it (JSON) and gives it back."""
    from cdc_medallion.quality.table_figures import heartbeat_lag

    store = DeltaStore(tmp_path / "storage", spark)
    beats = spark.createDataFrame(
        [("a", TIMES[0], "2026-01-01 00:00:00"), ("b", TIMES[-1], TIMES[-1]), ("b", TIMES[2], "2026-01-01 00:00:00")],
        "source_name string, event_ts string, ingest_ts string",
    ).selectExpr("source_name", "CAST(event_ts AS timestamp) AS event_ts", "CAST(ingest_ts AS timestamp) AS ingest_ts")
    store.append("silver_heartbeats", beats, None, {"layer": "silver"})
    with local_time(LOCAL_TIME):
        with_spark = heartbeat_lag(store.read("silver_heartbeats"))
    stored = json.loads(json.dumps(TableFigures(heartbeats=with_spark).as_dict()))
    assert TableFigures.from_dict(stored).heartbeats == with_spark
    assert [(h.source, h.count, h.latest_lag_seconds) for h in with_spark] == [("a", 1, 63902822400.0), ("b", 2, 0.0)]
    assert with_spark[1].latest_event == dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)  # see local_time
