"""The Pulsar target's trace -> protocol row mapping and the rows it refuses (bench.pulsar.rows),
and the CLI's one-line errors for them, with no broker needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.pulsar.rows import map_topic, write_rows
from bench.pulsar.target import parse_target
from bench.trace.trace import TraceWriter, read_events
from engine.errors import ConfigError, TraceError

P0 = "persistent://public/bench/t0-partition-0"
P1 = "persistent://public/bench/t0-partition-1"


def _trace(path: Path, rows: list[tuple[int, str, dict[str, object]]]) -> Path:
    typed = any("sub_type" in fields for _, _, fields in rows)
    with TraceWriter(path, optional=("sub_type",) if typed else ()) as w:
        for ts, op, fields in rows:
            w.add(ts, op, **fields)
    return path


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return _trace(tmp_path / "t.parquet", [
        (0, "subscribe", {"topic": P0, "subscription": "s"}),
        (5, "new_txn", {"txn": "t0"}),  # no timeout: the trace's default, 60 s
        (6, "publish", {"txn": "t0", "topic": P1, "msg": "m0", "size": 10, "key": "k"}),
        (9, "commit", {"txn": "t0"}),
        (12, "publish", {"topic": P0, "msg": "m1", "size": 3}),
        (20, "ack", {"topic": P0, "msg": "m1", "subscription": "s", "ack_kind": "cumulative"}),
    ])


def test_names_go_into_the_runs_own_namespace() -> None:
    assert map_topic(P1, "v4", "ab12cd") == "persistent://public/tb-ab12cd-v4-bench/t0-partition-1"
    # v5: a partition becomes its own scalable topic, named without "-partition-"
    assert map_topic(P1, "v5", "ab12cd") == "topic://public/tb-ab12cd-v5-bench/t0-p1"
    assert map_topic("topic://acme/orders/x", "v5", "r") == "topic://public/tb-r-v5-acme-orders/x"


def test_rows_keep_the_trace_row_numbers_and_fields(tmp_path: Path, small: Path) -> None:
    mapped = write_rows(read_events(small), tmp_path / "rows.jsonl", design="v5", run_id="r1", restartable=False, source="t")
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["row"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert [r["ts_us"] for r in rows] == [0, 5, 6, 9, 12, 20]
    assert rows[1]["timeout_ms"] == 60_000 and rows[2]["timeout_ms"] is None
    assert rows[2] == {"row": 2, "ts_us": 6, "op": "publish", "txn": "t0", "topic": "topic://public/tb-r1-v5-bench/t0-p1",
                       "msg": "m0", "subscription": None, "size": 10, "timeout_ms": None, "ack_kind": None, "target": None, "key": "k",
                       "sub_type": None}
    assert rows[5]["ack_kind"] == "cumulative" and rows[5]["subscription"] == "s"
    assert mapped.rows == 6 and mapped.namespaces == {"public/tb-r1-v5-bench"}
    assert mapped.first_ts_us == 0 and mapped.last_ts_us == 20 and mapped.timeouts_ms == {60_000}
    assert mapped.ops == {"subscribe": 1, "new_txn": 1, "publish": 2, "commit": 1, "ack": 1}
    assert "one-segment scalable" in str(mapped.manifest()["topic_note"])


@pytest.mark.parametrize(("design", "row", "restartable", "words"), [
    ("v4", (3, "crash_tc", {}), True, "crash_tc"),
    ("v5", (3, "crash_tc", {}), True, "crash_tc"),
    ("v4", (3, "crash_broker", {}), False, "cannot be restarted"),
    ("v4", (3, "subscribe", {"topic": "topic://public/b/x", "subscription": "s"}), True, "only under the v5 design"),
    ("v4", (3, "split", {"topic": "topic://public/b/x"}), True, "no scalable topics"),
])
def test_rows_the_broker_cannot_run_are_refused_with_their_row(tmp_path: Path, design: str, row: tuple[int, str, dict[str, object]],
                                                                restartable: bool, words: str) -> None:
    trace = _trace(tmp_path / "t.parquet", [(0, "subscribe", {"topic": P0, "subscription": "s"}),
                                             (1, "publish", {"topic": P0, "msg": "m0", "size": 1}), row])
    with pytest.raises(TraceError) as err:
        write_rows(read_events(trace), tmp_path / "rows.jsonl", design=design, run_id="r", restartable=restartable, source="t")
    assert err.value.row == 2 and words in str(err.value)


def _subs(tmp_path: Path, typed: dict[str, str | None], cumulative: set[str], topic: str = "topic://public/b/x") -> Path:
    """On ``topic``, a subscription per ``typed`` (its sub_type), each acking m0 (cumulatively
    when named in ``cumulative``)."""
    subs = [(0, "subscribe", {"topic": topic, "subscription": s, **({"sub_type": t} if t else {})})
            for s, t in typed.items()]
    acks = [(2, "ack", {"topic": topic, "msg": "m0", "subscription": s,
                        "ack_kind": "cumulative" if s in cumulative else "individual"}) for s in typed]
    return _trace(tmp_path / f"subs-{topic.split(':')[0]}.parquet", [*subs, (1, "publish", {"topic": topic, "msg": "m0", "size": 1}), *acks])


def test_v5_subscriptions_take_the_type_of_the_v5_sdks_consumer_for_their_acks(tmp_path: Path) -> None:
    from bench.pulsar.rows import v5_sdk_sub_types
    trace = _subs(tmp_path, {"q": None, "st": None, "named": "Shared"}, cumulative={"st"})
    # a QueueConsumer (individual acks) is Shared, a StreamConsumer (cumulative) Exclusive; a typed one is the trace's
    assert v5_sdk_sub_types(read_events(trace)) == (("topic://public/b/x", "q", "Shared"),
                                                    ("topic://public/b/x", "st", "Exclusive"))
    mapped = write_rows(read_events(trace), tmp_path / "rows.jsonl", design="v5", run_id="r", restartable=False, source="t")
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert mapped.rows == 7 and [r["sub_type"] for r in rows[:3]] == [None, None, "Shared"]


@pytest.mark.parametrize(("typed", "cumulative", "words"), [
    ({"s": "Failover"}, set(), "named Failover, but the V5 SDK has no subscription types: its individual acks make it "
                               "a QueueConsumer (Shared)"),
    ({"s": "Shared"}, {"s"}, "its cumulative acks make it a StreamConsumer (Exclusive)"),
    ({"s": "Key_Shared"}, set(), "named Key_Shared"),
])
def test_v5_refuses_a_subscription_type_its_consumer_does_not_give(tmp_path: Path, typed: dict[str, str | None],
                                                                   cumulative: set[str], words: str) -> None:
    trace = _subs(tmp_path, typed, cumulative)
    with pytest.raises(TraceError) as err:
        write_rows(read_events(trace), tmp_path / "rows.jsonl", design="v5", run_id="r", restartable=False, source="t")
    assert err.value.row == 0 and words in str(err.value)
    # v4's classic consumer takes every type (a cumulative ack on Shared fails at the ack: ConsumerBase refuses it)
    v4 = _subs(tmp_path, typed, cumulative, topic=P0)
    assert write_rows(read_events(v4), tmp_path / "v4.jsonl", design="v4", run_id="r", restartable=False,
                      source="t").rows == 3


def test_a_restartable_broker_takes_crash_broker_and_v5_takes_split(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", [(0, "subscribe", {"topic": "topic://public/b/x", "subscription": "s"}),
                                             (1, "split", {"topic": "topic://public/b/x"}), (2, "crash_broker", {})])
    mapped = write_rows(read_events(trace), tmp_path / "rows.jsonl", design="v5", run_id="r", restartable=True, source="t")
    assert mapped.rows == 3


def test_target_options() -> None:
    t = parse_target("pulsar://127.0.0.1:6651", None, "asap", "/x/y")
    assert (t.service_url, t.host, t.port, t.pacing, t.restartable) == ("pulsar://127.0.0.1:6651", "127.0.0.1", 6651, "asap", True)
    assert parse_target("pulsar://h:1", "http://h:9/").admin_url == "http://h:9"
    for bad in ("http://h:1", "pulsar://", "pulsar://h:1/x"):
        with pytest.raises(ConfigError, match="--target"):
            parse_target(bad)
    with pytest.raises(ConfigError, match="--pacing"):
        parse_target("pulsar://h:1", pacing="fast")


def test_cli_refuses_an_unsupported_row_in_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TXNBENCH_PULSAR_DIR", raising=False)
    trace = _trace(tmp_path / "t.parquet", [(0, "subscribe", {"topic": P0, "subscription": "s"}), (4, "crash_tc", {})])
    out = tmp_path / "res"
    # port 1 on loopback: nothing listens, and the row is refused before the broker is asked
    code = main(["replay", "--trace", str(trace), "--target", "pulsar://127.0.0.1:1", "--admin-url", "http://127.0.0.1:1",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "row 1" in err and "crash_tc" in err
    assert not out.exists() and not list(tmp_path.glob(".res*"))


def test_cli_unreachable_broker_is_one_line_and_writes_nothing(tmp_path: Path, small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for verb in (["replay", "--trace", str(small)], ["check", "--trace", str(small)]):
        out = tmp_path / "res"
        code = main([*verb, "--target", "pulsar://127.0.0.1:1", "--admin-url", "http://127.0.0.1:1", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "unreachable" in err, err
        assert not out.exists() and not list(tmp_path.glob(".res*"))
