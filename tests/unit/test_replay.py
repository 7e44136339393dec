"""The replayer's own state stays bounded on long traces, and forgetting acked messages keeps
Pulsar's semantics (a second ack of an acked message is a no-op)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from bench.config import RunConfig
from bench.replay import Replayer
from bench.trace import Event, read_events
from bench.workloads import generate, load_profile
from tests.unit.test_trace import T, write


def _peaks(trace: Path, engine: str) -> tuple[dict[str, int], dict[str, int]]:
    replayer = Replayer(RunConfig(engine=engine))
    peak = {"msgs": 0, "txns": 0}

    def watched(events: Iterator[Event]) -> Iterator[Event]:
        for e in events:
            yield e
            peak["msgs"] = max(peak["msgs"], len(replayer.msgs))
            peak["txns"] = max(peak["txns"], len(replayer.txns) + len(replayer.by_id))

    return peak, replayer.run(watched(read_events(trace))).counts


def test_message_and_txn_state_do_not_grow_with_the_trace(tmp_path: Path) -> None:
    short, long = tmp_path / "short.parquet", tmp_path / "long.parquet"
    profile = load_profile("omb-1-topic-16-partitions-1kb")
    generate(profile, 8_000, 3, short)
    generate(profile, 32_000, 3, long)
    for engine in ("v4", "v5"):
        (short_peak, _), (long_peak, counts) = _peaks(short, engine), _peaks(long, engine)
        assert counts["events.publish"] > 14_000 and counts["events.new_txn"] > 1_400
        # what is in flight (a few ms of traffic), not what the trace has published: 4x the trace,
        # about the same peak (the state grew 4x before messages and txns were forgotten)
        for what in ("msgs", "txns"):
            assert 0 < long_peak[what] < 1.5 * short_peak[what], (engine, what, short_peak, long_peak)
        assert counts.get("acks.after_all_acked", 0) == 0 and counts["acks.never_applied"] == 0


def test_an_ack_after_every_subscription_acked_is_a_counted_no_op(tmp_path: Path) -> None:
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 10, "op": "publish", "topic": T, "msg": "m1", "size": 1},
        {"ts_us": 10, "op": "new_txn", "txn": "t1"},
        {"ts_us": 10, "op": "publish", "topic": T, "msg": "m2", "size": 1},
        {"ts_us": 100_000, "op": "ack", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 100_000, "op": "ack", "txn": "t1", "topic": T, "msg": "m2", "subscription": "s"},
        {"ts_us": 100_001, "op": "abort", "txn": "t1"},  # the txn ack is rolled back: m2 stays known
        {"ts_us": 200_000, "op": "ack", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 200_000, "op": "ack", "topic": T, "msg": "m2", "subscription": "s"},
    ]
    trace = write(tmp_path / "t.parquet", rows)
    for engine in ("v4", "v5"):
        replayer = Replayer(RunConfig(engine=engine))
        counts = replayer.run(read_events(trace)).counts
        assert counts["acks.after_all_acked"] == 1, engine  # the second ack of m1
        assert "m2" not in replayer.msgs and not replayer.msgs


def test_a_txn_trace_on_a_broker_without_transactions_counts_refusals(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 1500, 4, trace)
    counts = Replayer(RunConfig(engine="none")).run(read_events(trace)).counts
    # every new_txn is refused, and so is every later use of that txn, as a client would see it
    assert counts["txns.never_opened"] == counts["events.new_txn"] > 0
    txn_uses = counts["events.commit"] + counts.get("events.abort", 0)
    assert counts["client_errors.UnsupportedOperation"] > counts["events.new_txn"] + txn_uses
    assert counts["deliveries"] > 0  # non-transactional traffic flows
