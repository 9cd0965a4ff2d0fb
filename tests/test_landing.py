"""Bronze landing's micro-batches: bounded in messages and in bytes, resuming exactly where the
last committed batch ended, so a backlog of big messages never lands in one huge batch."""

from __future__ import annotations

from cdc_medallion.config import InputConf, SourceConf
from cdc_medallion.sources.files import FileLanding, FileRange


def land_all(source: SourceConf, max_messages: int, max_bytes: int) -> list[list[bytes]]:
    offset = None
    batches = []
    while True:
        batch = FileLanding(source, max_messages, max_bytes).next_batch(offset)
        if not batch.messages:
            return batches
        batches.append(batch.to_arrow().column("value").to_pylist())
        offset = batch.offset  # where the stream's checkpoint says the next batch starts


def test_batches_are_bounded_in_bytes_and_lose_nothing(tmp_path):
    lines = [(f'{{"n": {i}, "pad": "' + "x" * (i * 37 % 500) + '"}').encode() for i in range(120)]
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"".join(line + b"\n" for line in lines))
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=feed, layout="json-lines"))

    batches = land_all(source, max_messages=1000, max_bytes=4000)

    assert [value for batch in batches for value in batch] == lines  # each line once, in order
    assert len(batches) > 1
    for batch in batches:  # a batch stops at the first line that reaches the budget
        assert sum(len(v) + 1 for v in batch[:-1]) < 4000


def test_message_count_still_bounds_small_messages(tmp_path):
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"".join(b'{"n": %d}\n' % i for i in range(25)))
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=feed, layout="json-lines"))

    batches = land_all(source, max_messages=10, max_bytes=1 << 20)

    assert [len(b) for b in batches] == [10, 10, 5]


def test_one_message_bigger_than_the_budget_still_lands(tmp_path):
    feed = tmp_path / "feed.jsonl"
    big = b'{"blob": "' + b"y" * 10_000 + b'"}'
    feed.write_bytes(big + b"\n" + b'{"n": 1}\n')
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=feed, layout="json-lines"))

    assert land_all(source, max_messages=10, max_bytes=100) == [[big], [b'{"n": 1}']]


def test_a_backlog_flows_through_every_layer_in_bounded_batches(spark, tmp_path):
    """Silver and gold read a backlog in batches of about max_bytes_per_batch too, and the
    result is the same as reading it at once: gold equals the history's truth."""
    from dataclasses import replace

    from cdc_medallion.adhoc import adhoc_conf
    from cdc_medallion.generator.compare import diff_scd1, diff_scd2
    from cdc_medallion.generator.history import generate_history
    from cdc_medallion.generator.renderers import render
    from cdc_medallion.pipeline import run_pipeline
    from tests.helpers import gold_rows

    history = generate_history(tables=2, transactions=30, seed=3)  # 241 kB: 5 batches of 60 kB
    rendered = render(history, "debezium-json", tmp_path / "in")
    keys = [f"{t}={','.join(k)}" for t, k in rendered.keys.items()]
    conf = adhoc_conf("debezium-json", rendered.path, tmp_path / "storage", keys, [])
    conf = replace(conf, max_bytes_per_batch=60_000)

    summary = run_pipeline(conf, spark=spark)

    assert all(f.seconds > 0 for u in summary.updates for f in u.flows.values() if f.batches)
    batches: dict[str, int] = {}
    for update in summary.updates:  # bronze and silver run in the first update, gold in the second
        for flow in update.flows.values():
            batches[flow.target] = batches.get(flow.target, 0) + flow.batches
    assert batches["bronze_debezium_json"] > 2
    assert batches["silver_debezium_json"] > 1  # silver read bronze's versions a few at a time
    assert all(batches[f"gold_{t}"] > 1 for t in rendered.keys)
    for table in rendered.keys:
        assert not diff_scd1(history, table, gold_rows(spark, conf.storage, table, 1))
        assert not diff_scd2(history, table, gold_rows(spark, conf.storage, table, 2))


def test_a_missing_input_is_reported_not_silently_empty(spark, tmp_path):
    from cdc_medallion.adhoc import adhoc_conf
    from cdc_medallion.pipeline import run_pipeline

    feed = tmp_path / "later.jsonl"
    feed.write_text("")  # the conf is checked against an existing path; then the path goes away
    conf = adhoc_conf("debezium-json", feed, tmp_path / "storage", [], [])
    feed.unlink()
    lines: list[str] = []

    run_pipeline(conf, spark=spark, progress=lines.append)

    assert any(f"input {feed} does not exist (yet): nothing to land" in line for line in lines), lines


def test_a_big_file_range_is_read_in_pieces_that_hold_each_line_once(tmp_path):
    """One file's range of a batch is cut at newlines into a piece per core, so bronze lands a
    big file on every core; the pieces' lines, numbered on, are the whole range's."""
    from cdc_medallion.sources.files import MIN_PIECE_BYTES

    lines = [b'{"n": %d, "pad": "%s"}' % (i, b"z" * (i * 7919 % 3000)) for i in range(9000)]
    lines[4321] += b"\r"  # a carriage return is part of its message
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"\n".join(lines))  # the last line has no newline
    assert feed.stat().st_size > 3 * MIN_PIECE_BYTES
    source = SourceConf(name="s", format="debezium-json", input=InputConf(path=feed, layout="json-lines"))
    landing = FileLanding(source, max_messages=100_000, max_bytes=1 << 30, pieces=3)
    start = {"files": {str(feed): [len(lines[0]) + 1, 1]}}  # resumed after a batch that landed line 0

    end = landing.plan(start)
    pieces = landing.ranges(start, end)

    assert len(pieces) == 3
    assert [p.start for p in pieces[1:]] == [p.end for p in pieces[:-1]]  # contiguous
    read = [landing.read(piece) for piece in pieces]
    assert [v for table in read for v in table.column("value").to_pylist()] == lines[1:]
    assert [n for table in read for n in table.column("_line").to_pylist()] == list(range(1, len(lines)))
    assert FileLanding(source, 100_000, 1 << 30, pieces=1).ranges(start, end) == [
        FileRange(str(feed), start["files"][str(feed)][0], end["files"][str(feed)][0], 1)
    ]
