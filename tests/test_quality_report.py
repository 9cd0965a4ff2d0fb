"""The quality report end to end on a sample with planted problems: bad Qlik masks, DataWorks
heartbeats, an incomplete IBM segmented transaction and malformed messages, each with known
counts. One pipeline run (with the accounting and the GX suites) serves the whole module; the
report is built through the CLI and checked as HTML and in headless Chromium."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from cdc_medallion.cli import main
from cdc_medallion.config import load_conf
from cdc_medallion.formats import format_names
from cdc_medallion.pipeline import run_pipeline
from cdc_medallion.quality.accounting import SourceAccounting, account_source
from cdc_medallion.quality.events import (
    Check,
    DatasetRun,
    ExpectationRun,
    StaleKeys,
    Update,
    read_event_log,
    read_stored_event_log,
)
from cdc_medallion.quality.figures_step import table_figures
from cdc_medallion.quality.report import HeartbeatLag, QuarantineReason, TableState, build_pages, report_from_event_log
from cdc_medallion.quality.stored import read_stored
from cdc_medallion.storage.delta_store import DeltaStore
from tests.conftest import REPO

# One worker builds this module's shared storage once (make test runs pytest-xdist).
pytestmark = pytest.mark.xdist_group("quality_report")

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
# A malformed IBM record holding markup: its raw message is shown in the report, as text.
MARKUP_RECORD = 'not a record <script>alert("planted")</script> & <img src=x onerror=alert(1)>'
QLIK_METADATA = {
    "magic": "atMSG",
    "type": "MD",
    "headers": None,
    "messageSchemaId": "E1",
    "messageSchema": None,
    "message": {
        "schemaId": "E1",
        "lineage": {"server": "r1", "task": "hr", "schema": "hr", "table": "employees", "tableVersion": 1},
        "tableStructure": {
            "tableColumns": {
                "emp_no": {"ordinal": 1, "type": "INT4", "primaryKeyPosition": 1, "nullable": False},
                "name": {"ordinal": 2, "type": "STRING", "primaryKeyPosition": 0, "nullable": True},
                "salary": {"ordinal": 3, "type": "NUMERIC", "precision": 10, "scale": 2, "primaryKeyPosition": 0},
            }
        },
    },
}
HEARTBEAT = {
    "schema": {"dataColumn": None, "primaryKey": None, "source": None},
    "payload": {
        "before": None,
        "after": None,
        "sequenceId": None,
        "timestamp": {"eventTime": 1704445209500, "checkpointTime": 1704445209500},
        "op": "MHEARTBEAT",
        "ddl": None,
    },
    "version": "0.0.1",
}


def qlik_insert(emp: int, change_mask: str) -> str:
    return json.dumps(
        {
            "magic": "atMSG",
            "type": "DT",
            "headers": None,
            "messageSchemaId": "E1",
            "messageSchema": None,
            "message": {
                "data": {"emp_no": emp, "name": f"emp {emp}", "salary": "10.00"},
                "beforeData": None,
                "headers": {
                    "operation": "INSERT",
                    "changeSequence": f"20240105090000000000000000{emp:09d}",
                    "timestamp": "2024-01-05 09:00:00.000000",
                    "streamPosition": "",
                    "transactionId": "0A",
                    "changeMask": change_mask,
                    "columnMask": "07",
                    "externalSchemaId": None,
                },
            },
        }
    )


def ibm_record(tx: int, seg: int, op: str, before: tuple | None, after: tuple | None) -> str:
    """One Q Replication delimited record of table BANK.ACCT (ID, OWNER, BALANCE)."""

    def value(v):
        return "" if v is None else f'"{v}"' if isinstance(v, str) else str(v)

    values = [value(v) for v in (before or (None,) * 3)] + [value(v) for v in (after or (None,) * 3)]
    return (
        f'10,"IBM","2026012","120000000000","BANK","ACCT","{op}","0000:0000:0388:{tx:04x}:0000:0000",'
        f'"0000:0000:0000:0271:{tx:04x}:0000:0000:0000","2026-01-12-12.00.00","ASNQCAP",{seg:04d},' + ",".join(values)
    )


def write_planted(folder: Path) -> Path:
    """The inputs and a conf; the expected counts are asserted in the tests below."""
    folder.mkdir(parents=True, exist_ok=True)
    qlik = [
        json.dumps(QLIK_METADATA),  # schema change
        qlik_insert(1, "07"),  # fine
        qlik_insert(2, "Z7"),  # mask not hexadecimal: quarantined (mask_is_hex)
        qlik_insert(3, "070"),  # odd length and bits beyond the 3 columns: warned, applied
        qlik_insert(4, "03"),  # an INSERT lacking a column: warned, applied
    ]
    (folder / "qlik.jsonl").write_text("\n".join(qlik) + "\n", encoding="utf-8")
    dataworks = [
        json.dumps(HEARTBEAT),
        '{"schema": {"dataColumn": null}, "payload": {"op": "INSERT", "after": [',  # malformed JSON
    ]
    (folder / "dataworks.jsonl").write_text("\n".join(dataworks) + "\n", encoding="utf-8")
    ibm = [
        # one message per line: a transaction in three segments (0001, 0002, 0000), applied whole
        ibm_record(1, 1, "ISRT", None, (11, "ann", 100)),
        ibm_record(1, 2, "REPL", (11, "ann", 100), (11, "ann", 110)),
        ibm_record(1, 0, "REPL", (11, "ann", 110), (11, "ann", 120)),
        # segment 0001 of a transaction whose other segments never come: held
        ibm_record(2, 1, "ISRT", None, (21, "cy", 5)),
        MARKUP_RECORD,  # malformed: quarantined
    ]
    (folder / "ibm.del").write_text("\n".join(ibm) + "\n", encoding="utf-8")
    conf = folder / "pipeline.yml"
    conf.write_text(
        f"""
pipeline:
  name: planted_problems
  storage: {folder / "storage"}
  transformations: {REPO / "transformations"}
  expectations: {REPO / "expectations"}
sources:
  - name: hr
    format: qlik-json
    input: {{path: {folder / "qlik.jsonl"}, layout: json-lines}}
  - name: sync
    format: dataworks-json
    input: {{path: {folder / "dataworks.jsonl"}, layout: json-lines}}
  - name: bank
    format: ibm-qrep-delimited
    input: {{path: {folder / "ibm.del"}, layout: json-lines}}
    options:
      tables:
        BANK.ACCT: {{ID: INTEGER, OWNER: VARCHAR(20), BALANCE: "DECIMAL(11,2)"}}
tables:
  - {{source: bank, table: ACCT, keys: [ID]}}
""",
        encoding="utf-8",
    )
    return conf


class Elements(HTMLParser):
    """Every element's tag and attributes (the report puts its numbers in data-* attributes), and
    the page's text as a browser reads it (entities resolved)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.texts.append(data)

    def tags(self) -> set[str]:
        return {tag for tag, _ in self.found}

    def rows(self, cls: str, **match: str) -> list[dict[str, str | None]]:
        wanted = {f"data-{k.replace('_', '-')}": v for k, v in match.items()}
        return [
            a
            for tag, a in self.found
            if tag == "tr" and cls in (a.get("class") or "").split() and all(a.get(k) == v for k, v in wanted.items())
        ]

    def one(self, cls: str, **match: str) -> dict[str, str | None]:
        rows = self.rows(cls, **match)
        assert len(rows) == 1, (cls, match, rows)
        return rows[0]


def elements(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser


@pytest.fixture(scope="module")
def planted(spark, tmp_path_factory):
    missing = {"qlik-json", "dataworks-json", "ibm-qrep-delimited"} - set(format_names())
    if missing:
        pytest.skip(f"formats {sorted(missing)} are not in this tree")
    folder = tmp_path_factory.mktemp("planted")
    conf = load_conf(write_planted(folder))
    summary = run_pipeline(conf, spark=spark, quality=True)
    output = folder / "report"
    assert main(["report", "--storage", str(conf.storage), "--output", str(output)]) == 0
    return conf, summary, output


@pytest.fixture(scope="module")
def index(planted) -> str:
    return (planted[2] / "index.html").read_text(encoding="utf-8")


def test_accounting_adds_up_per_source(planted, index):
    _, summary, _ = planted
    by_source = {a.source: a for a in summary.quality.accounting}
    assert {s: (a.bronze, a.balanced) for s, a in by_source.items()} == {
        "hr": (5, True),
        "sync": (2, True),
        "bank": (5, True),
    }
    assert by_source["hr"].outcomes == {"schema_change": 1, "change": 3, "quarantined": 1}
    assert by_source["sync"].outcomes == {"heartbeat": 1, "quarantined": 1}
    assert by_source["bank"].outcomes == {"change": 3, "held": 1, "quarantined": 1}
    page = elements(index)
    bank = page.one("accounting", source="bank")
    assert (bank["data-bronze"], bank["data-outcome-change"], bank["data-outcome-held"]) == ("5", "3", "1")
    assert bank["data-outcome-quarantined"] == "1" and bank["data-balanced"] == "true"
    assert page.one("accounting", source="sync")["data-outcome-heartbeat"] == "1"
    assert "MISMATCH" not in index


def test_bad_masks_show_with_their_counts(index):
    page = elements(index)
    # counted by the silver flow of `hr` (one update): 4 data messages + 1 metadata message
    assert page.one("expectation", dataset="silver_hr", expectation="mask_is_hex")["data-failed"] == "1"
    assert page.one("expectation", dataset="silver_hr", expectation="mask_even_length")["data-failed"] == "1"
    assert page.one("expectation", dataset="silver_hr", expectation="insert_mask_complete")["data-failed"] == "2"
    assert page.one("expectation", dataset="silver_hr", expectation="mask_even_length")["data-passed"] == "4"
    reason = page.one("reason", dataset="silver_hr_quarantine", rule="mask_is_hex")
    assert reason["data-count"] == "1"
    assert "not hexadecimal" in index and "Z7" in index  # the reason and the raw message, escaped


def test_heartbeat_lag_shows_per_source(index):
    page = elements(index)
    heartbeat = page.one("heartbeat", source="sync")
    assert heartbeat["data-count"] == "1"
    assert float(heartbeat["data-lag-seconds"]) > 0  # landed now, sent in January 2024
    assert page.one("expectation", dataset="silver_sync", expectation="not_heartbeat")["data-failed"] == "1"


def test_incomplete_transaction_shows_as_held(index):
    page = elements(index)
    [held] = page.rows("held", source="bank")
    assert held["data-ref"].endswith("ibm.del:3")
    assert "missing the final segment 0000" in index
    assert page.one("expectation", dataset="silver_bank", expectation="not_held")["data-failed"] == "1"
    assert page.one("expectation", dataset="silver_bank", expectation="ibm_transaction_complete")["data-failed"] == "1"


def test_malformed_messages_are_quarantined_with_their_bronze_reference(index):
    page = elements(index)
    assert page.one("reason", dataset="silver_bank_quarantine", rule="message_parsed")["data-count"] == "1"
    assert page.one("reason", dataset="silver_sync_quarantine", rule="message_parsed")["data-count"] == "1"
    samples = [a["data-ref"] for tag, a in page.found if tag == "div" and "sample" in (a.get("class") or "")]
    assert any(ref.endswith("ibm.del:4") for ref in samples)
    assert any(ref.endswith("dataworks.jsonl:1") for ref in samples)
    assert "not a record" in index


def test_markup_in_a_raw_message_shows_as_text(index):
    """The malformed record's `<script>` and `<img>` are the sample's text, not elements."""
    page = elements(index)
    assert MARKUP_RECORD in page.texts  # the raw message, whole, as the <pre>'s text
    assert not page.tags() & {"script", "img"}
    assert MARKUP_RECORD not in index and "&lt;script&gt;" in index and "&amp;" in index


MARKUP = '<script>alert("x")</script> & \'q\' "><img src=x onerror=alert(1)>'


def test_every_value_from_the_data_is_escaped_on_every_page():
    """Table, rule, source and check names, reasons, raw messages, errors and links come from the
    data: markup in any of them shows as text, and an attribute holding quotes keeps its whole value."""
    table = f"silver_{MARKUP}"
    update = Update("0123456789abcdef", dt.datetime(2026, 1, 5, 9, 0), state="FAILED")
    gold = f"gold_{MARKUP}"
    update.datasets = {table: DatasetRun(table, 3, 1, 1), gold: DatasetRun(gold, stale=StaleKeys(2, 1, (MARKUP,)))}
    update.expectations = {(table, MARKUP): ExpectationRun(table, MARKUP, 2, 1)}
    update.checks = [
        Check("great_expectations", table, MARKUP, False, observed=MARKUP, expected=MARKUP, description=MARKUP)
    ]
    update.failed_flows = [MARKUP]
    update.errors = [MARKUP]
    held = {"bronze_ref": MARKUP, "tx_id": MARKUP, "source_table": MARKUP, "detail": MARKUP}
    accounting = SourceAccounting(MARKUP, 2, {"change": 1}, unaccounted=1, held=[held], unaccounted_samples=[MARKUP])
    update.accounting = [accounting.as_dict()]
    state = TableState(
        quarantine=[
            QuarantineReason(f"{table}_quarantine", MARKUP, 1, [{"bronze_ref": MARKUP, "error": MARKUP, "raw": MARKUP}])
        ],
        quarantine_rows={f"{table}_quarantine": 1},
        heartbeats=[HeartbeatLag(MARKUP, 1, None, 5.0, 5.0)],
        accounting=[accounting],
        row_counts=[{"name": table, "layer": "silver", "rows": 3}],
    )
    pages = build_pages([update], state, MARKUP, docs_href=MARKUP)
    assert sorted(pages) == ["index.html", f"{update.slug}.html"]
    for name, html in pages.items():
        page = elements(html)
        assert not page.tags() & {"script", "img"}, name
        assert MARKUP not in html, name
        assert MARKUP in page.texts, name  # the title, at least
        assert page.one("expectation", dataset=table, expectation=MARKUP)["data-failed"] == "1"
        described = [a for tag, a in page.found if tag == "td" and a.get("title") == MARKUP]
        assert len(described) == 1, name  # the check, its description in a title attribute
        assert page.one("accounting", source=MARKUP)["data-balanced"] == "false"
        assert page.one("stale", dataset=gold)["data-stale-keys"] == "2"
    index = elements(pages["index.html"])
    assert index.one("reason", dataset=f"{table}_quarantine", rule=MARKUP)["data-count"] == "1"
    assert index.one("held", source=MARKUP, ref=MARKUP)
    assert index.one("heartbeat", source=MARKUP)["data-count"] == "1"
    assert index.one("dataset", name=table)["data-rows"] == "3"
    assert [a["href"] for tag, a in index.found if tag == "a" and a.get("id") == "gx-docs"] == [MARKUP]
    for text in ("MISMATCH in " + MARKUP, f"{table}_quarantine · {MARKUP}"):  # a badge, a chart's tooltip
        assert any(text in t for t in index.texts), text


def test_gx_suites_ran_and_their_data_docs_exist(planted, index):
    conf, summary, output = planted
    docs = conf.storage / "_system" / "quality" / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert docs.is_file() and summary.quality.data_docs == docs
    checks = {(c.dataset, c.name): c for c in summary.quality.checks}
    assert checks[("gold_acct", "key_unique")].success
    assert checks[("gold_acct_history__keys", "one_open_version_per_live_key")].success
    assert checks[("silver_hr", "op_known")].success
    assert checks[("silver_bank", "row_count_matches_event_log")].success
    assert not [c for c in summary.quality.failed], summary.quality.failed
    link = re.search(r'id="gx-docs" href="([^"]+)"', index)
    assert link and (output / link.group(1)).resolve() == docs.resolve()
    # one page per update, linked from the index
    pages = sorted(p.name for p in output.glob("update-*.html"))
    assert len(pages) == len(summary.updates) and all(p in index for p in pages)


def test_the_report_reads_without_a_jvm_what_spark_reads(spark, planted):
    """`cdc-medallion report` (the pages above) reads the figures the run stored in the event log,
    without a JVM: they equal what Spark computes from the same tables now, held messages,
    samples and lags included, and so does the accounting the quality step recorded."""
    storage = planted[0].storage
    stored = read_stored(storage)
    assert stored.figures is not None and stored.accounting is not None
    store = DeltaStore(storage, spark)
    now = table_figures(store, None, "")
    assert stored.figures.quarantine and stored.figures.heartbeats
    assert dataclasses.replace(stored.figures, as_of=now.as_of) == now
    assert any(a.held for a in stored.accounting)
    for recorded in stored.accounting:
        names = [f"bronze_{recorded.source}", f"silver_{recorded.source}", f"silver_{recorded.source}_quarantine"]
        tables = [store.read(name) if store.exists(name) else None for name in names]
        assert recorded == account_source(recorded.source, *tables)
    events = store.read("_system/event_log")
    assert read_stored_event_log(storage / "_system" / "event_log") == read_event_log(events)
    assert read_stored(storage, spark=spark).updates == stored.updates


def test_the_report_reads_no_table_but_the_event_log(planted, tmp_path):
    """The report's figures are the stored ones: with every table but the event log gone, the
    pages still show the quarantine reasons, samples, heartbeats and accounting of the run."""
    storage = tmp_path / "storage"
    shutil.copytree(planted[0].storage, storage)
    for table in storage.iterdir():
        if table.is_dir() and table.name != "_system":
            shutil.rmtree(table)
    output = tmp_path / "report"
    assert main(["report", "--storage", str(storage), "--output", str(output)]) == 0
    page = elements((output / "index.html").read_text(encoding="utf-8"))
    assert page.one("reason", dataset="silver_hr_quarantine", rule="mask_is_hex")["data-count"] == "1"
    assert page.one("heartbeat", source="sync")["data-count"] == "1"
    assert page.one("accounting", source="sync")["data-outcome-heartbeat"] == "1"
    [held] = page.rows("held", source="bank")
    assert held["data-ref"].endswith("ibm.del:3")


def test_report_from_a_databricks_style_event_log_dataframe(spark, planted):
    """The function the Databricks job uses: event log DataFrame (+ quarantine, heartbeats) -> HTML."""
    conf, _, _ = planted
    store = DeltaStore(conf.storage, spark)
    html = report_from_event_log(
        store.read("_system/event_log"),
        quarantine={"silver_bank_quarantine": store.read("silver_bank_quarantine")},
        heartbeats=store.read("silver_heartbeats"),
        title="from the event log",
    )
    page = elements(html)
    assert page.one("expectation", dataset="silver_hr", expectation="mask_is_hex")["data-failed"] == "1"
    assert page.one("reason", dataset="silver_bank_quarantine", rule="message_parsed")["data-count"] == "1"
    assert page.one("heartbeat", source="sync")["data-count"] == "1"
    # the accounting recorded in the event log by the local run is shown when no tables are given
    assert page.one("accounting", source="bank")["data-outcome-held"] == "1"


def test_report_renders_in_headless_chromium(planted):
    """No console errors, every chart drawn with a size, markup from a message shown as text, a
    screenshot kept in test-artifacts/."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (`make test` installs Debian's chromium as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[dev]')")
    _, _, output = planted
    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((output / "index.html").as_uri())
            sizes = page.eval_on_selector_all(
                "svg.chart", "els => els.map(e => [e.getBoundingClientRect().width, e.getBoundingClientRect().height])"
            )
            marks = page.eval_on_selector_all("svg.chart .mark", "els => els.length")
            held = page.eval_on_selector_all("tr.held", "els => els.map(e => e.dataset.ref)")
            injected = page.eval_on_selector_all("script, img", "els => els.length")
            raw = page.eval_on_selector_all("div.sample pre", "els => els.map(e => e.textContent)")
            page.screenshot(path=str(ARTIFACTS / "quality-report.png"), full_page=True)
            update_page = next(output.glob("update-*.html"))
            page.goto(update_page.as_uri())
            update_sizes = page.eval_on_selector_all(
                "svg.chart", "els => els.map(e => e.getBoundingClientRect().width)"
            )
        finally:
            browser.close()
    assert errors == []
    assert len(sizes) >= 6 and all(w > 0 and h > 0 for w, h in sizes), sizes
    assert marks > 0 and update_sizes and all(w > 0 for w in update_sizes)
    assert len(held) == 1
    assert injected == 0 and MARKUP_RECORD in raw  # the planted markup is shown as text
    assert (ARTIFACTS / "quality-report.png").stat().st_size > 10_000
    shutil.copy(output / "index.html", ARTIFACTS / "quality-report.html")


def test_cli_report_from_an_event_log_table(spark, planted, tmp_path, capsys):
    """What the Databricks job runs: `report --event-log-table NAME --output DIR`."""
    conf, _, _ = planted
    DeltaStore(conf.storage, spark).read("_system/event_log").createOrReplaceTempView("planted_event_log")
    assert main(["report", "--event-log-table", "planted_event_log", "--output", str(tmp_path / "job")]) == 0
    assert str(tmp_path / "job" / "index.html") in capsys.readouterr().out
    page = elements((tmp_path / "job" / "index.html").read_text(encoding="utf-8"))
    assert page.one("expectation", dataset="silver_bank", expectation="message_parsed")["data-failed"] == "1"
    assert len(list((tmp_path / "job").glob("update-*.html"))) == 2


def test_cli_report_needs_output_with_an_event_log_table(capsys):
    assert main(["report", "--event-log-table", "catalog.schema.event_log"]) == 2
    assert "--event-log-table needs --output" in capsys.readouterr().err
