from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from bench.trace.schema import COLUMNS, SCHEMA
from bench.trace.trace import LabelSet, TraceWriter, read_events, validate
from engine.errors import TraceError

T = "persistent://public/default/x"


def write(path: Path, rows: list[dict]) -> Path:  # type: ignore[type-arg]
    with TraceWriter(path) as w:
        for r in rows:
            r = dict(r)
            w.add(r.pop("ts_us"), r.pop("op"), **r)
    return path


GOOD = [
    {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
    {"ts_us": 1, "op": "new_txn", "txn": "t1", "timeout_ms": 1000},
    {"ts_us": 2, "op": "publish", "txn": "t1", "topic": T, "msg": "m1", "size": 10},
    {"ts_us": 2, "op": "publish", "topic": T, "msg": "m2", "size": 10},
    {"ts_us": 3, "op": "commit", "txn": "t1"},
    {"ts_us": 4, "op": "ack", "topic": T, "msg": "m1", "subscription": "s", "ack_kind": "cumulative"},
    {"ts_us": 5, "op": "crash_broker"},
]


def test_a_good_trace_reads_back_in_order(tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", GOOD)
    events = list(read_events(path))
    assert [e.op for e in events] == [r["op"] for r in GOOD]
    assert [e.row for e in events] == list(range(len(GOOD)))
    assert validate(path) == len(GOOD)


@pytest.mark.parametrize(
    ("row", "bad", "reason"),
    [
        (2, {"ts_us": 0, "op": "publish", "topic": T, "msg": "mx", "size": 1}, "ts_us goes backwards"),
        (2, {"ts_us": 2, "op": "frobnicate", "topic": T}, "unknown op 'frobnicate'"),
        (2, {"ts_us": 2, "op": "publish", "txn": "nope", "topic": T, "msg": "mx", "size": 1}, "unknown txn 'nope'"),
        (2, {"ts_us": 2, "op": "ack", "topic": T, "msg": "ghost", "subscription": "s"}, "unknown msg 'ghost'"),
        (2, {"ts_us": 2, "op": "publish", "topic": "queue://t/ns/orders", "msg": "mx", "size": 1}, "bad topic name"),
        # short names are expanded (bench.trace.tracefmt); a two-part one is refused, as Pulsar's TopicName does
        (2, {"ts_us": 2, "op": "publish", "topic": "ns/orders", "msg": "mx", "size": 1}, "invalid short topic name"),
        (2, {"ts_us": 2, "op": "publish", "topic": T, "msg": "mx", "size": -1}, "size must be"),
        (2, {"ts_us": 2, "op": "split", "topic": T}, "needs a scalable topic"),
        (2, {"ts_us": 2, "op": "new_txn", "txn": "t1"}, "created twice"),
        (2, {"ts_us": 2, "op": "ack", "topic": T, "msg": "m0", "subscription": "s", "ack_kind": "sideways"}, "ack_kind"),
    ],
)
def test_bad_rows_are_refused_with_row_and_reason(tmp_path: Path, row: int, bad: dict, reason: str) -> None:  # type: ignore[type-arg]
    rows = [
        {"ts_us": 1, "op": "new_txn", "txn": "t1"},
        {"ts_us": 1, "op": "publish", "topic": T, "msg": "m0", "size": 1},
        bad,
    ]
    path = write(tmp_path / "t.parquet", rows)
    with pytest.raises(TraceError) as info:
        validate(path)
    assert info.value.row == row
    assert reason in str(info.value) and f"row {row}" in str(info.value) and "t.parquet" in str(info.value)


def test_use_after_end_is_refused(tmp_path: Path) -> None:
    rows = GOOD + [{"ts_us": 9, "op": "publish", "txn": "t1", "topic": T, "msg": "late", "size": 1}]
    with pytest.raises(TraceError, match=r"row 7: txn 't1' is used after it ended"):
        validate(write(tmp_path / "t.parquet", rows))


def test_not_parquet_missing_columns_and_wrong_types(tmp_path: Path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"definitely not parquet")
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        validate(junk)
    with pytest.raises(TraceError, match="no such trace file"):
        validate(tmp_path / "absent.parquet")
    partial = tmp_path / "partial.parquet"
    pq.write_table(pa.table({"ts_us": [1], "op": ["publish"]}), partial)
    with pytest.raises(TraceError, match="missing columns txn"):
        validate(partial)
    typed = tmp_path / "typed.parquet"
    cols = {c: pa.array([None], type=SCHEMA.field(c).type) for c in COLUMNS}
    cols["ts_us"] = pa.array(["soon"])
    pq.write_table(pa.table(cols), typed)
    with pytest.raises(TraceError, match="column ts_us has type string"):
        validate(typed)


def test_writer_leaves_nothing_when_generation_fails(tmp_path: Path) -> None:
    target = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError):
        with TraceWriter(target) as w:
            w.add(0, "crash_broker")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


ops = st.sampled_from(["new_txn", "publish", "ack", "commit", "abort", "subscribe", "split", "merge", "crash_broker", "crash_tc", "bogus", ""])
labels = st.one_of(st.none(), st.sampled_from(["t0", "t1", "m0", "m1", "s"]), st.text(max_size=3))
row_st = st.fixed_dictionaries({
    "ts_us": st.integers(min_value=-5, max_value=2**40), "op": ops, "txn": labels,
    "topic": st.one_of(st.none(), st.sampled_from([T, "topic://a/b/c", "bad", ""])), "msg": labels,
    "subscription": labels, "size": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    "timeout_ms": st.one_of(st.none(), st.integers(-(2**40), 2**40)), "ack_kind": st.one_of(st.none(), st.sampled_from(["individual", "cumulative", "x"])),
    "target": labels, "key": labels,
})


@settings(max_examples=150, deadline=None)
@given(st.lists(row_st, max_size=12))
def test_fuzzed_traces_either_validate_or_fail_with_a_row(tmp_path_factory: pytest.TempPathFactory, rows: list[dict]) -> None:  # type: ignore[type-arg]
    path = write(tmp_path_factory.mktemp("fz") / "t.parquet", rows)
    try:
        assert validate(path) == len(rows)
    except TraceError as exc:
        assert exc.row is not None and 0 <= exc.row < len(rows)


@given(st.lists(st.text(alphabet="mt0123456789x", min_size=1, max_size=6), max_size=40),
       st.lists(st.text(alphabet="mt0123456789x", min_size=1, max_size=6), max_size=40))
@settings(max_examples=200, deadline=None)
def test_label_set_is_a_set(added: list[str], probed: list[str]) -> None:
    labels = LabelSet()
    for a in added:
        labels.add(a)
    for p in added + probed:
        assert (p in labels) == (p in set(added)), p


def test_label_set_keeps_numbered_labels_as_bytes() -> None:
    labels = LabelSet()
    for i in range(100_000):
        labels.add(f"m{i}")
    assert "m99999" in labels and "m100000" not in labels and "m01" not in labels
    assert not labels._other and len(labels._bits["m"]) < 300_000


_ROW = st.fixed_dictionaries({
    "ts_us": st.sampled_from([0, 1, 2, 5, 5, 9, -1]),
    "op": st.sampled_from(["new_txn", "commit", "abort", "publish", "publish", "ack", "ack", "subscribe",
                           "split", "crash_tc", "bogus"]),
    "txn": st.sampled_from([None, None, "t1", "t2", "", "t01"]),
    "topic": st.sampled_from([T, T, None, "", "topic://public/default/s", "orders"]),
    "msg": st.sampled_from([None, "m1", "m2", "m3", ""]),
    "subscription": st.sampled_from(["s", None, ""]),
    "size": st.sampled_from([1, 1, None, -1]),
    "timeout_ms": st.sampled_from([None, 1000, 0]),
    "ack_kind": st.sampled_from([None, "individual", "cumulative", "sideways"]),
})


@given(st.lists(_ROW, min_size=1, max_size=14), st.integers(1, 5))
@settings(max_examples=300, deadline=None)
def test_fast_validate_agrees_with_the_row_by_row_check(tmp_path_factory: pytest.TempPathFactory,
                                                        rows: list[dict], batch: int) -> None:  # type: ignore[type-arg]
    rows = sorted(rows, key=lambda r: r["ts_us"]) if batch % 2 else rows  # ordered traces get further
    path = write(tmp_path_factory.mktemp("v") / "t.parquet", rows)

    def outcome(fn) -> str:  # type: ignore[no-untyped-def]
        try:
            return f"ok {fn()}"
        except TraceError as exc:
            return str(exc)

    assert outcome(lambda: validate(path, batch_rows=batch)) == \
        outcome(lambda: sum(1 for _ in read_events(path, batch_rows=batch)))



@pytest.mark.slow
def test_streaming_a_trace_holds_no_more_arrow_memory_at_its_end_than_at_its_start(tmp_path: Path) -> None:
    # pyarrow's pre-buffer cache keeps the ranges it has read until the file is closed: on a
    # file of several 32 MB ranges the memory a replay holds grew with the trace (here +20 MB
    # by the last batch of a 52 MB file). read_events, validate and the Spark shards stream
    # through bench.trace.trace.parquet_stream, which reads without it.
    import os

    rows, width = 5 * 65_536, 160
    noise = os.urandom(rows * width // 2).hex()  # incompressible labels: a big file, quickly
    cols = {c: pa.nulls(rows, SCHEMA.field(c).type) for c in COLUMNS}
    cols.update(ts_us=pa.array(range(rows), pa.int64()), op=pa.array(["publish"] * rows), topic=pa.array([T] * rows),
                msg=pa.array([noise[i * width:(i + 1) * width] for i in range(rows)]), size=pa.array([1] * rows, pa.int32()))
    trace = tmp_path / "big.parquet"
    pq.write_table(pa.table(cols, schema=SCHEMA), trace, row_group_size=65_536)
    assert trace.stat().st_size > 48 * 2**20
    held = [pa.total_allocated_bytes() for i, _ in enumerate(read_events(trace, validated=True)) if i % 65_536 == 0]
    assert max(held) - held[0] < 4 * 2**20, [h // 2**20 for h in held]
