"""Traces in CSV and JSON lines, and short topic names (bench.trace.tracefmt), through the same
readers and checks as Parquet: bench.trace.trace, bench.scale.sharding."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.scale.sharding import plan_shards, shard_events, trace_aggregates
from bench.trace.trace import read_events, trace_metadata, validate
from bench.trace.tracefmt import expand_topic, open_trace
from engine.errors import TraceError

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "samples" / "small.parquet"


def to_csv(rows: list[dict], path: Path, columns: list[str] | None = None) -> Path:  # type: ignore[type-arg]
    columns = columns or sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items() if k in columns})
    return path


def to_jsonl(rows: list[dict], path: Path) -> Path:  # type: ignore[type-arg]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def sample_rows() -> list[dict]:  # type: ignore[type-arg]
    return pq.read_table(SAMPLE).to_pylist()


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_the_same_trace_in_csv_or_jsonl_reads_as_the_parquet_one(tmp_path: Path, sample_rows: list, kind: str) -> None:  # type: ignore[type-arg]
    path = (to_csv if kind == "csv" else to_jsonl)(sample_rows, tmp_path / f"t.{kind}")
    expected = list(read_events(SAMPLE))
    assert list(read_events(path, batch_rows=97)) == expected  # batches that do not divide the rows
    assert validate(path, batch_rows=128) == len(expected) == len(sample_rows)
    assert trace_metadata(path) == {}  # only Parquet carries the generator's notes
    # the Spark shards read it natively: the same plan and the same rows per shard
    assert trace_aggregates(path, batch_rows=300) == trace_aggregates(SAMPLE)
    rows_per_topic, sets = trace_aggregates(SAMPLE)
    plan = plan_shards(rows_per_topic, sets, 2)
    for shard in (0, 1):
        assert list(shard_events(path, plan, shard, batch_rows=200)) == list(shard_events(SAMPLE, plan, shard))


def test_format_by_extension_by_content_or_named(tmp_path: Path, sample_rows: list) -> None:  # type: ignore[type-arg]
    csv_noext = to_csv(sample_rows[:50], tmp_path / "trace-a")
    jsonl_noext = to_jsonl(sample_rows[:50], tmp_path / "trace-b")
    parquet_noext = tmp_path / "trace-c"
    parquet_noext.write_bytes(SAMPLE.read_bytes())
    assert [open_trace(p).format for p in (csv_noext, jsonl_noext, parquet_noext)] == ["csv", "jsonl", "parquet"]
    named = to_jsonl(sample_rows[:50], tmp_path / "rows.txt")
    assert open_trace(named, "jsonl").format == "jsonl" and validate(named, fmt="jsonl") == 50
    with pytest.raises(TraceError, match="unknown trace format 'xml'"):
        validate(named, fmt="xml")
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        validate(named, fmt="parquet")


def test_short_topic_names_expand_as_pulsar_clients_do(tmp_path: Path) -> None:
    assert expand_topic("my-topic") == "persistent://public/default/my-topic"
    assert expand_topic("acme/orders/t") == "persistent://acme/orders/t"
    assert expand_topic("topic://a/b/c") == "topic://a/b/c"
    assert expand_topic("acme/t") is None and expand_topic("a/b/c/d") is None
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": "my-topic", "subscription": "s"},
        {"ts_us": 1, "op": "publish", "topic": "my-topic", "msg": "m0", "size": 3},
        {"ts_us": 2, "op": "ack", "topic": "persistent://public/default/my-topic", "msg": "m0", "subscription": "s"},
        {"ts_us": 3, "op": "publish", "topic": "acme/orders/t", "msg": "m1", "size": 3},
    ]
    for path in (to_csv(rows, tmp_path / "s.csv"), to_jsonl(rows, tmp_path / "s.jsonl")):
        assert [e.topic for e in read_events(path)] == ["persistent://public/default/my-topic"] * 3 + [
            "persistent://acme/orders/t"]
        assert validate(path) == 4
        # the short and the full name are one topic to the shard planner
        assert trace_aggregates(path)[0] == {"persistent://public/default/my-topic": 3, "persistent://acme/orders/t": 1}
    bad = to_csv(rows + [{"ts_us": 4, "op": "publish", "topic": "orders/t", "msg": "m2", "size": 1}], tmp_path / "b.csv")
    with pytest.raises(TraceError, match=r"b\.csv: row 4: invalid short topic name 'orders/t'"):
        validate(bad)
    with pytest.raises(TraceError, match=r"row 4: invalid short topic name"):
        list(read_events(bad))


@pytest.mark.parametrize(
    ("kind", "row", "bad", "reason"),
    [
        ("csv", 2, {"ts_us": "soon", "op": "publish"}, "ts_us must be an integer, got 'soon'"),
        ("csv", 2, {"ts_us": 1, "op": "publish", "topic": "t", "msg": "m1", "size": "big"}, "size must be an integer"),
        ("csv", 2, {"ts_us": 0, "op": "publish", "topic": "t", "msg": "m1", "size": 1}, "ts_us goes backwards"),
        ("jsonl", 2, {"ts_us": "soon", "op": "publish"}, "ts_us must be an integer, got 'soon'"),
        ("jsonl", 2, {"ts_us": 1, "op": "publish", "colour": "red"}, "unknown fields 'colour'"),
        ("jsonl", 2, {"ts_us": 1, "op": 7}, "op must be a string"),
        ("jsonl", 2, {"ts_us": 1, "op": "ack", "topic": "t", "msg": "ghost", "subscription": "s"}, "unknown msg 'ghost'"),
    ],
)
def test_bad_rows_name_the_file_row_and_reason(tmp_path: Path, kind: str, row: int, bad: dict, reason: str) -> None:  # type: ignore[type-arg]
    rows = [{"ts_us": 1, "op": "new_txn", "txn": "t1"}, {"ts_us": 1, "op": "publish", "topic": "t", "msg": "m0", "size": 1}, bad]
    columns = ["ts_us", "op", "txn", "topic", "msg", "size", "subscription"]
    path = to_csv(rows, tmp_path / "t.csv", columns) if kind == "csv" else to_jsonl(rows, tmp_path / "t.jsonl")
    for check in (lambda: validate(path), lambda: list(read_events(path))):
        with pytest.raises(TraceError) as info:
            check()
        assert info.value.row == row and reason in str(info.value) and f"t.{kind}: row {row}:" in str(info.value)


def test_malformed_files_are_refused_whole(tmp_path: Path) -> None:
    garbage = tmp_path / "g.jsonl"
    garbage.write_text('{"ts_us": 0, "op": "crash_tc"}\n[1, 2]\n')
    with pytest.raises(TraceError, match=r"g\.jsonl: row 1: not a JSON object, got list"):
        validate(garbage)
    broken = tmp_path / "b.jsonl"
    broken.write_text('{"ts_us": 0, "op": "crash_tc"}\n{"ts_us": 1,\n')
    with pytest.raises(TraceError, match=r"row 1: not a JSON object \(Expecting"):
        validate(broken)
    headerless = tmp_path / "h.csv"
    headerless.write_text("0,crash_tc\n")
    with pytest.raises(TraceError, match=r"h\.csv: unknown columns 0, crash_tc"):
        validate(headerless)
    no_op = tmp_path / "n.csv"
    no_op.write_text("ts_us,topic\n0,t\n")
    with pytest.raises(TraceError, match="missing columns op in the CSV header"):
        validate(no_op)
    ragged = tmp_path / "r.csv"
    ragged.write_text("ts_us,op\n0,crash_tc\n1,crash_tc,extra\n")
    with pytest.raises(TraceError, match=r"r\.csv: row 1: 3 fields, the header names 2"):
        validate(ragged)


def test_a_long_jsonl_trace_streams_in_batches(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    with path.open("w") as f:
        for i in range(5000):
            f.write(json.dumps({"ts_us": i, "op": "publish", "topic": "t", "msg": f"m{i}", "size": 1}) + "\n")
    sizes = [b.num_rows for b in open_trace(path).iter_batches(batch_size=1024, columns=["op"])]
    assert sum(sizes) == 5000 and max(sizes) <= 1024 and len(sizes) >= 5  # never the whole file at once
    assert validate(path, batch_rows=1024) == 5000


def test_validate_trace_prints_the_counts_and_refuses_as_replay_does(tmp_path: Path, sample_rows: list,  # type: ignore[type-arg]
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": "my-topic", "subscription": "s"},
        {"ts_us": 10, "op": "new_txn", "txn": "t1"},
        {"ts_us": 20, "op": "publish", "txn": "t1", "topic": "my-topic", "msg": "m0", "size": 3},
        {"ts_us": 20, "op": "publish", "topic": "acme/orders/t", "msg": "m1", "size": 3},
        {"ts_us": 1_500_030, "op": "commit", "txn": "t1"},
    ]
    path = to_jsonl(rows, tmp_path / "t.log")  # no telling extension: --format says it
    assert main(["validate-trace", str(path), "--format", "jsonl"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{path}: valid jsonl trace", "rows: 5", "ops: new_txn 1, publish 2, commit 1, subscribe 1",
                   "topics: 2", "txns: 1", "time span: 1.500030 s (0 .. 1500030 us)"]
    bad = to_csv(rows + [{"ts_us": 7, "op": "publish", "topic": "t", "msg": "m2", "size": 1}], tmp_path / "bad.csv")
    assert main(["validate-trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert main(["replay", "--trace", str(bad), "--engine", "none", "--out", str(tmp_path / "out")]) == 2
    replay_err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.csv: row 5: ts_us goes backwards (7 after 1500030)" in err
    assert err.split("error: ", 1)[1] == replay_err.split("error: ", 1)[1]  # the same one-line message
    assert not (tmp_path / "out").exists()


def test_the_shipped_examples_read_and_generate(tmp_path: Path) -> None:
    from bench.trace.workloads import generate, load_profile

    examples = SAMPLE.parents[1] / "examples"
    as_csv, as_jsonl = list(read_events(examples / "orders.csv")), list(read_events(examples / "orders.jsonl"))
    assert as_csv == as_jsonl and len(as_csv) == 10
    assert {e.topic for e in as_csv if e.topic} == {"persistent://public/default/orders", "persistent://acme/payments/ledger"}
    profile = load_profile(str(examples / "my-profile.json"))
    assert (profile.namespace, profile.sub_type, profile.txn_messages) == ("acme/orders", "Shared", (2, 20))
    rows = generate(profile, 1000, 1, tmp_path / "my.parquet")
    assert validate(tmp_path / "my.parquet") == rows >= 1000


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_bad_value_past_the_first_block_is_named_by_its_row(tmp_path: Path, kind: str) -> None:
    # the readers parse 1 MB blocks; the row is counted from the blocks read before the bad one
    rows: list[dict] = [{"ts_us": i, "op": "publish", "topic": "persistent://public/default/orders",  # type: ignore[type-arg]
                         "msg": f"m{i}", "size": 1000} for i in range(20_000)]
    rows[18_765]["size"] = "huge"
    path = (to_csv if kind == "csv" else to_jsonl)(rows, tmp_path / f"t.{kind}")
    assert path.stat().st_size > 1 << 20
    with pytest.raises(TraceError) as info:
        validate(path)
    assert info.value.row == 18_765 and "size must be an integer, got 'huge'" in str(info.value)


def test_validate_trace_names_the_generator_of_a_generated_trace(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    assert main(["validate-trace", str(SAMPLE)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"rows: {validate(SAMPLE)}" and out[-1] == "generated by: profile small, seed 1, events 2000"
