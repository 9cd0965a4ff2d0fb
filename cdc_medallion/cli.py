"""`cdc-medallion`: run the pipeline, look at its tables, ingest files ad hoc.

Errors are printed as one line naming what is wrong (file, key, message, reason) and exit 2;
a failed expectation (`expect_or_fail`) exits 3; anything else, a defect, exits 1 in one line.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import os
import sys
from pathlib import Path
from typing import Any

from cdc_medallion.catalog import dataset_status, first_rows
from cdc_medallion.config import DEFAULT_MAX_MESSAGES_PER_BATCH
from cdc_medallion.errors import CdcMedallionError, ConfigError, ExpectationFailed, first_line
from cdc_medallion.names import SYSTEM_DIR

DEFAULT_CONF = "conf/local.yml"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-medallion", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the pipeline of a conf file (incremental)")
    run.add_argument("--conf", default=DEFAULT_CONF, help=f"pipeline conf (default {DEFAULT_CONF})")
    run.add_argument("--full-refresh", action="store_true", help="drop every table and rebuild from the inputs")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument(
        "--continuous", action="store_true", help="keep every flow running (Ctrl-C stops); no quality checks"
    )
    run.add_argument(
        "--no-quality",
        dest="quality",
        action="store_false",
        help="skip the accounting and Great Expectations checks run after the update",
    )

    for name, help_text in (("status", "list datasets with layer and row count"), ("show", "print a dataset's rows")):
        sub = commands.add_parser(name, help=help_text)
        if name == "show":
            sub.add_argument("dataset")
            sub.add_argument("--limit", type=int, default=20)
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--storage", help="storage root (default: the conf's)")
        where.add_argument("--conf", default=DEFAULT_CONF)
        sub.add_argument("--json", action="store_true", help="machine-readable output")

    report = commands.add_parser("report", help="write the HTML data-quality report (index.html + one page per update)")
    source = report.add_mutually_exclusive_group()
    source.add_argument("--conf", help=f"pipeline conf whose storage to report on (default {DEFAULT_CONF})")
    source.add_argument("--storage", help="storage root of a local pipeline")
    source.add_argument("--event-log-table", help="a Databricks pipeline event log table (catalog.schema.table)")
    report.add_argument("--tables-schema", help="with --event-log-table: catalog.schema of the pipeline's tables")
    report.add_argument("--output", help=f"folder for the pages (default <storage>/{SYSTEM_DIR}/quality/report)")
    report.add_argument("--max-updates", type=int, default=50, help="updates shown and trended (default 50)")
    report.add_argument("--open", action="store_true", help="open the report in a browser")

    ingest = commands.add_parser("ingest", help="run the whole pipeline ad hoc on files of one format")
    ingest.add_argument("--format", required=True, dest="fmt")
    ingest.add_argument("--input", required=True, help="a file or a directory of files")
    ingest.add_argument("--storage", required=True)
    ingest.add_argument("--key", action="append", default=[], metavar="TABLE=COL[,COL]")
    ingest.add_argument("--columns", action="append", default=[], metavar="TABLE=COL:TYPE[,COL:TYPE]")
    ingest.add_argument("--layout", choices=["json-lines", "kafka-dump", "files"], help="default: detected")
    ingest.add_argument("--topic", help="topic name for json-lines input (some formats take the table from it)")
    ingest.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="format option")
    ingest.add_argument(
        "--batch-size", type=int, default=DEFAULT_MAX_MESSAGES_PER_BATCH, help="messages landed per micro-batch"
    )
    ingest.add_argument("--full-refresh", action="store_true")
    ingest.add_argument("--quiet", action="store_true")
    discover = commands.add_parser(
        "discover", help="list the tables of sample messages (key, columns, types) in a conf's tables section"
    )
    discover.add_argument("--format", required=True, dest="fmt")
    discover.add_argument("--input", required=True, help="sample messages: a file or a directory of files")
    discover.add_argument("--conf", help="merge into this conf's tables (default: print the section)")
    discover.add_argument("--source", help="the conf's source they belong to (default: the one of --format)")
    discover.add_argument("--layout", choices=["json-lines", "kafka-dump", "files"], help="default: detected")
    discover.add_argument("--topic", help="topic name for json-lines input (some formats take the table from it)")
    discover.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="format option")
    generate = commands.add_parser("generate", help="write a simulated database history in every format")
    generate.add_argument("--formats", default="all", help="comma-separated format names, or 'all'")
    generate.add_argument("--out", required=True)
    generate.add_argument("--tables", type=int, default=3)
    generate.add_argument("--transactions", type=int, default=100)
    generate.add_argument("--seed", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        commands = {
            "run": _run,
            "status": _status,
            "show": _show,
            "ingest": _ingest,
            "report": _report,
            "discover": _discover,
            "generate": _generate,
        }
        return commands[args.command](args)
    except ExpectationFailed as error:
        print(f"cdc-medallion: {error}", file=sys.stderr)
        return 3
    except CdcMedallionError as error:
        print(f"cdc-medallion: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a defect of ours: still one line, the traceback on request
        if os.environ.get("CDC_MEDALLION_DEBUG"):
            raise
        print(
            f"cdc-medallion: [INTERNAL_ERROR] {type(error).__name__}: {first_line(error)} "
            "(set CDC_MEDALLION_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


# --- commands ---------------------------------------------------------------------------------
def _progress(args: argparse.Namespace):
    from cdc_medallion.runner.results import stderr_progress

    return None if getattr(args, "quiet", False) else stderr_progress


def _run(args: argparse.Namespace) -> int:
    from cdc_medallion.config import load_conf
    from cdc_medallion.pipeline import run_pipeline

    conf = load_conf(args.conf)
    summary = run_pipeline(
        conf,
        full_refresh=args.full_refresh,
        progress=_progress(args),
        quality=args.quality and not args.continuous,
        continuous=args.continuous,
    )
    _print_summary(conf.storage, summary)
    return 0


def _report(args: argparse.Namespace) -> int:
    from cdc_medallion.quality import report

    if args.event_log_table:
        if not args.output:
            raise ConfigError("--event-log-table needs --output (where to write the report)")
        from pyspark.sql import SparkSession

        if os.environ.get("DATABRICKS_RUNTIME_VERSION"):  # a Databricks job: its own session
            spark = SparkSession.builder.getOrCreate()
        else:
            from cdc_medallion.spark import get_spark

            spark = get_spark()
        index = report.report_for_event_log_table(
            spark, args.event_log_table, Path(args.output), args.tables_schema, args.max_updates
        )
    else:
        if args.storage:
            storage = Path(args.storage)
        else:
            from cdc_medallion.config import load_conf

            storage = load_conf(args.conf or DEFAULT_CONF).storage
        if not storage.is_dir():
            raise ConfigError(f"storage {storage} does not exist: run the pipeline first")
        index = report.report_for_storage(storage, Path(args.output) if args.output else None, None, args.max_updates)
    print(f"Report written to {index}")
    if args.open:
        import webbrowser

        webbrowser.open(index.resolve().as_uri())
    return 0


def _ingest(args: argparse.Namespace) -> int:
    from cdc_medallion.adhoc import adhoc_conf
    from cdc_medallion.pipeline import run_pipeline

    conf = adhoc_conf(
        fmt=args.fmt,
        input_path=Path(args.input),
        storage=Path(args.storage),
        keys=args.key,
        columns=args.columns,
        layout=args.layout,
        topic=args.topic,
        options=args.option,
        max_messages_per_batch=args.batch_size,
    )
    summary = run_pipeline(conf, full_refresh=args.full_refresh, progress=_progress(args))
    _print_summary(conf.storage, summary)
    return 0


def _discover(args: argparse.Namespace) -> int:
    from cdc_medallion.config import load_conf
    from cdc_medallion.spark import get_spark
    from cdc_medallion.tables_conf import discover_tables, merge_into, named_apart, render, sample_source

    options = {}
    for option in args.option:
        name, sep, value = option.partition("=")
        if not sep:
            raise ConfigError(f"--option {option!r}: expected NAME=VALUE")
        options[name] = value
    conf_path = Path(args.conf) if args.conf else None
    conf = load_conf(conf_path) if conf_path else None
    source = sample_source(args.fmt, Path(args.input), conf, args.source, args.layout, args.topic, options)
    entries = discover_tables(get_spark("cdc-medallion-discover"), source)
    if conf_path is None:
        print("tables:\n" + render(named_apart(entries, ())), end="")
        return 0
    added, listed = merge_into(conf_path, entries)
    print(f"{conf_path}: {len(added)} table(s) added to source {source.name!r}, {len(listed)} already listed")
    for entry in added:
        guesses = ["key"] if entry.guessed_key else []
        guesses += [f"type of {c}" for c in sorted(entry.guessed_types)]
        print(f"  + {entry.table}" + (f"  (guessed: {', '.join(guesses)})" if guesses else ""))
    return 0


def _generate(args: argparse.Namespace) -> int:
    try:
        from cdc_medallion.generator.history import generate_history
        from cdc_medallion.generator.output import generate
    except ModuleNotFoundError:  # the Databricks wheel leaves the development tools out
        print("error: `generate` is a development tool, not in this installation: install from a checkout (make setup)")
        return 2

    out = Path(args.out)
    history = generate_history(tables=args.tables, transactions=args.transactions, seed=args.seed)
    try:
        rendered = generate(history, [f.strip() for f in args.formats.split(",")], out)
    except KeyError as error:
        raise ConfigError(str(error.args[0])) from None
    for item in rendered:
        print(f"{item.format:<22} {item.messages:>8,} messages  {item.path}")
    print(f"Run them: cdc-medallion run --conf {out / 'conf.yml'}   (ground truth: {out / 'truth.json'})")
    return 0


def _print_summary(storage: Path, summary: Any) -> None:
    seconds = sum(u.seconds for u in summary.updates)
    print(f"Pipeline finished in {seconds:.1f}s. Tables are in {storage}")
    quality = getattr(summary, "quality", None)
    if getattr(summary, "quality_error", None):
        print(f"Quality checks could not run: {summary.quality_error}", file=sys.stderr)
    if quality is not None:
        unbalanced = [a.source for a in quality.accounting if not a.balanced]
        print(
            f"Quality: {len(quality.checks)} checks, {len(quality.failed)} failed, {len(quality.warnings)} warning(s); "
            + (f"accounting MISMATCH in {', '.join(unbalanced)}" if unbalanced else "every message accounted for")
            + ". Report: cdc-medallion report --storage "
            + str(storage)
        )
        if quality.data_docs:
            print(f"Great Expectations Data Docs: {quality.data_docs}")
    if summary.discovery and summary.discovery.unconfigured:
        print(
            "Unconfigured tables (in silver, no key known so no gold; add them under `tables:` in conf "
            "or pass --key TABLE=COL): " + ", ".join(summary.discovery.unconfigured)
        )


def _storage_of(args: argparse.Namespace) -> Path:
    if args.storage:
        return Path(args.storage)
    from cdc_medallion.config import load_conf

    return load_conf(args.conf).storage


def _status(args: argparse.Namespace) -> int:
    entries = dataset_status(_storage_of(args))
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print(f"{'dataset':<44} {'layer':<11} {'rows':>10}  details")
    for e in entries:
        details = f"{e['source_table']} (SCD{e['scd_type']})" if e["layer"] == "gold" else ""
        print(f"{e['name']:<44} {e['layer']:<11} {e['rows']:>10,}  {details}")
    from cdc_medallion.quality.stored import read_stored, summary_lines

    for line in summary_lines(read_stored(_storage_of(args))):
        print(line)
    return 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _show(args: argparse.Namespace) -> int:
    rows = [_jsonable(row) for row in first_rows(_storage_of(args), args.dataset, args.limit)]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
