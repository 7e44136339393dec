"""The replayer's own state stays bounded on long traces, and forgetting acked messages keeps
Pulsar's semantics (a second ack of an acked message is a no-op)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from bench.replay.config import RunConfig
from bench.replay.replay import Replayer
from bench.trace.trace import Event, read_events
from bench.trace.workloads import generate, load_profile
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


def test_acks_that_waited_for_one_delivery_go_out_grouped(tmp_path: Path) -> None:
    # Four messages stored before the subscription exists arrive in one delivery; their acks,
    # all in the trace before it, wait for it and then go out as the Java client sends them:
    # individual acks grouped into one request, a cumulative ack on its own, in trace order.
    rows = [{"ts_us": i, "op": "publish", "topic": T, "msg": f"m{i}", "size": 1} for i in range(4)]
    rows += [{"ts_us": 1_000, "op": "subscribe", "topic": T, "subscription": "s"}]
    rows += [{"ts_us": 1_000, "op": "ack", "topic": T, "msg": f"m{i}", "subscription": "s", "ack_kind": kind}
             for i, kind in enumerate(["individual", "individual", "cumulative", "individual"])]
    trace = write(tmp_path / "t.parquet", rows)
    for engine in ("v4", "v5", "none"):
        replayer = Replayer(RunConfig(engine=engine))
        counts = replayer.run(read_events(trace)).counts
        assert counts["deliveries"] == 4 and counts["acks.deferred"] == 4, engine
        assert counts["acks.grouped_requests"] == 3, engine  # [m0, m1], [m2 cumulative], [m3]
        assert counts["ledger.cursor_writes"] == 1 + 3, engine  # the subscription's creation, one per request
        assert not replayer.msgs and not replayer.deferred, engine


def test_a_txn_trace_on_a_broker_without_transactions_counts_refusals(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile("small"), 1500, 4, trace)
    counts = Replayer(RunConfig(engine="none")).run(read_events(trace)).counts
    # every new_txn is refused, and so is every later use of that txn, as a client would see it
    assert counts["txns.never_opened"] == counts["events.new_txn"] > 0
    txn_uses = counts["events.commit"] + counts.get("events.abort", 0)
    assert counts["client_errors.UnsupportedOperation"] > counts["events.new_txn"] + txn_uses
    assert counts["deliveries"] > 0  # non-transactional traffic flows


def test_publish_latency_is_what_each_design_puts_on_the_publish_path(tmp_path: Path) -> None:
    # rpc 200 + append 1000 + rpc 200 for every publish; v4 adds, on a txn's first publish to a
    # partition, the TC registration (rpc + log append + rpc) and, on the topic's first
    # transactional append, the first snapshot (an append); v5 adds the op-record write (1000)
    # to every transactional publish and a header read (300) on a participant's cache miss; the
    # shipped v5 (the default) also the client's registration (rpc + rpc) with its ownership read
    # (300) on a txn's first publish to a segment (ServerCnx.handleAddPartitionToTxn L4152-4176).
    U = "persistent://public/default/u"
    rows = [{"ts_us": 0, "op": "publish", "topic": T, "msg": "plain", "size": 1},
            {"ts_us": 10, "op": "new_txn", "txn": "t1"}]
    rows += [{"ts_us": 20 + i, "op": "publish", "topic": tp, "msg": f"m{i}", "size": 1, "txn": "t1"}
             for i, tp in enumerate([T, T, T, U])]
    rows += [{"ts_us": 100, "op": "commit", "txn": "t1"}]
    trace = write(tmp_path / "t.parquet", rows)
    sums = {}
    for engine, variant in (("v4", "shipped"), ("v5", "shipped"), ("v5-pip", "pip")):
        latency = Replayer(RunConfig(engine=engine[:2], options={"variant": variant} if engine != "v4" else {})).run(read_events(trace)).latency
        # the shipped v5's plain publish waits for its segment's first watermark CAS (1 000),
        # which the idle state tail runs before the receipt (syncMaxReadPositionForNormalPublish)
        plain_us = 1_400 + (1_000 if (engine, variant) == ("v5", "shipped") else 0)
        assert (latency["publish_nontxn_us"]["count"], latency["publish_nontxn_us"]["sum_us"]) == (1, plain_us)
        sums[engine] = (latency["publish_txn_us"]["count"], latency["publish_txn_us"]["sum_us"])
    # two partitions: two registrations (1 400 each); every txn publish that finds its TB not
    # ready is parked until the snapshot lookup (200 us from the TB's start, D17) and the first
    # snapshot (rpc + append, 1 200, D18) are done. The client sends the txn's publishes once
    # new_txn is answered, at 10 + 1 400 (rpc + log append + rpc): T's TB, started at 0, has
    # looked up by then, so its three publishes wait for the first snapshot only (1 200 each);
    # U's TB starts with its publish: 200 + 1 200.
    assert sums["v4"] == (4, 4 * 1_400 + 2 * 1_400 + 3 * 1_200 + (200 + 1_200))
    assert sums["v5"] == (4, 4 * (1_400 + 1_000) + 2 * (2 * 200 + 300 + 300))  # two registrations, two header reads
    assert sums["v5-pip"] == (4, 4 * (1_400 + 1_000) + 2 * 300)  # two participants: two header reads


def test_a_message_a_txn_acked_before_its_delivery_is_never_delivered(tmp_path: Path) -> None:
    # Pulsar's dispatcher skips positions in pending ack (AbstractBaseDispatcher.filterEntriesForConsumer,
    # PersistentSubscription.getPositionInPendingAck) and the commit acks them: m1, acked in t1 a
    # microsecond after its publish (by the id the publish returned), never reaches the consumer;
    # m2, acked in t2 long after its delivery, was delivered. (Both txns are open, their new_txn
    # answered, by the publishes: a txn ack waits for that answer.)
    rows = [
        {"ts_us": 0, "op": "subscribe", "topic": T, "subscription": "s"},
        {"ts_us": 0, "op": "new_txn", "txn": "t1"},
        {"ts_us": 0, "op": "new_txn", "txn": "t2"},
        {"ts_us": 10_000, "op": "publish", "topic": T, "msg": "m1", "size": 1},
        {"ts_us": 10_000, "op": "publish", "topic": T, "msg": "m2", "size": 1},
        {"ts_us": 10_001, "op": "ack", "txn": "t1", "topic": T, "msg": "m1", "subscription": "s"},
        {"ts_us": 500_000, "op": "ack", "txn": "t2", "topic": T, "msg": "m2", "subscription": "s"},
        {"ts_us": 600_000, "op": "commit", "txn": "t1"},
        {"ts_us": 600_000, "op": "commit", "txn": "t2"},
    ]
    trace = write(tmp_path / "t.parquet", rows)
    for engine in ("v4", "v5"):
        counts = Replayer(RunConfig(engine=engine)).run(read_events(trace)).counts
        assert counts["acks.txn_before_delivery"] == 1, engine
        assert counts["acks.txn_after_delivery"] == 1, engine  # m2's, half a second after its delivery
        assert counts["deliveries"] == 1, engine  # m2 only
        assert counts["undelivered_at_end"] == 1, engine  # m1: its one subscription took the txn ack first
        assert counts["txns.committed"] == 2, engine


def test_txns_record_when_new_txn_was_answered(tmp_path: Path) -> None:
    # v4's new_txn: rpc + the coordinator's log append + rpc, 1 400 after its issue at 10 µs;
    # v5's is what latency.json measured for its one new_txn
    rows = [{"ts_us": 10, "op": "new_txn", "txn": "t1"},
            {"ts_us": 20, "op": "publish", "topic": T, "msg": "m0", "size": 1, "txn": "t1"},
            {"ts_us": 100, "op": "commit", "txn": "t1"}]
    trace = write(tmp_path / "t.parquet", rows)
    v4 = Replayer(RunConfig(engine="v4")).run(read_events(trace))
    assert (v4.txns["opened_ts_us"], v4.txns["new_txn_answered_ts_us"]) == ([10], [10 + 1_400])
    v5 = Replayer(RunConfig(engine="v5")).run(read_events(trace))
    took = v5.txns["new_txn_answered_ts_us"][0] - v5.txns["opened_ts_us"][0]
    assert took == v5.latency["new_txn_us"]["sum_us"] and took > 1_400  # the sequence CAS and the header create
