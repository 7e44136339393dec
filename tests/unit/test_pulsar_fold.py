"""The trace client's events -> the result contract (bench.pulsar.fold), and the broker's
counters -> our count names (bench.pulsar.metrics), on small inputs worked out by hand."""

from __future__ import annotations

from typing import Any

from bench.check import check
from bench.pulsar.fold import EventFold, position_of
from bench.pulsar.metrics import counter_deltas, map_metrics, parse_prometheus

T = "persistent://public/bench/t0-partition-0"  # the trace's name
B = "persistent://public/tb-r-v4-bench/t0-partition-0"  # the broker's
# trace rows: (topic, key, subscription, ack_kind) by row number
ROWS: list[tuple[str | None, str | None, str | None, str | None]] = [
    (T, None, "s", None),  # 0 subscribe
    (None, None, None, None),  # 1 new_txn t0
    (T, None, None, None),  # 2 publish m0
    (T, None, None, None),  # 3 publish m1 in t0
    (None, None, None, None),  # 4 commit t0
    (None, None, None, None),  # 5 new_txn t1
    (T, None, None, None),  # 6 publish m2 in t1
    (None, None, None, None),  # 7 abort t1
    (None, None, None, None),  # 8 new_txn t2 (left open)
    (None, None, None, None),  # 9 new_txn t3
    (None, None, None, None),  # 10 commit t3 (the coordinator had timed it out)
    (T, None, "s", "individual"),  # 11 ack m0
]


def op(row: int, name: str, start: int, end: int, ok: bool = True, **kw: Any) -> dict[str, Any]:
    return {"ev": "op", "row": row, "op": name, "due_us": start, "start_us": start, "end_us": end, "ok": ok,
            "error": None if ok else kw.pop("error"), **kw}


def deliver(msg: str, t: int, redelivery: bool = False) -> dict[str, Any]:
    return {"ev": "deliver", "topic": B, "subscription": "s", "msg": msg, "t_us": t, "redelivery": redelivery,
            "message_id": None}


EVENTS: list[dict[str, Any]] = [
    {"ev": "ready", "t0_epoch_ms": 1, "setup_ms": 5, "client": {"batching": False}},
    {"ev": "subscribed", "row": 0, "topic": B, "subscription": "s", "type": "Failover", "t_us": 10},
    op(1, "new_txn", 20, 60, txn="t0", txn_id="(0,1)"),
    op(2, "publish", 100, 400, msg="m0", message_id="7:0:-1"),
    op(3, "publish", 200, 700, msg="m1", txn="t0", message_id="7:1:-1"),
    deliver("m0", 500),
    deliver("m1", 2500),  # reported before the commit's answer: the fold orders nothing by arrival
    op(4, "commit", 1000, 3000, txn="t0"),
    op(5, "new_txn", 3100, 3200, txn="t1"),
    op(6, "publish", 3300, 3600, msg="m2", txn="t1", message_id="7:2:-1"),
    op(7, "abort", 4000, 4500, txn="t1"),
    op(8, "new_txn", 4600, 4700, txn="t2"),
    op(9, "new_txn", 4800, 4900, txn="t3"),
    op(10, "commit", 5000, 5100, ok=False, txn="t3",
       error="TransactionCoordinatorClientException$InvalidTxnStatusException: txn (0,4) is aborted"),
    op(11, "ack", 5200, 5300, msg="m0"),
    deliver("m0", 6000, redelivery=True),  # after the ack: the checker must call it out
    {"ev": "done", "t_us": 9000, "rows": 12, "max_lag_us": 40, "paused_us": 7, "drain_ms": 2000},
]


def fold(history: bool = False, events: list[dict[str, Any]] = EVENTS, rows: list[Any] = ROWS, span_us: int = 10_000) -> Any:
    f = EventFold("v4", rows, {B: T}, trace_span_us=span_us, history=history)
    for ev in events:
        f.feed(ev)
    return f.finish()


def test_txn_rows_follow_the_model_meaning_of_each_time() -> None:
    r = fold()
    rows = {t: dict(zip(r.txns, vals)) for t, *vals in zip(r.txns["txn"], *r.txns.values())}
    assert [rows[t]["outcome"] for t in ("t0", "t1", "t2", "t3")] == ["committed", "aborted", "open", "aborted"]
    t0 = rows["t0"]
    assert (t0["commit_requested_ts_us"], t0["end_ts_us"], t0["visible_ts_us"], t0["messages"]) == (1000, 3000, 2500, 1)
    assert (rows["t1"]["visible_ts_us"], rows["t1"]["messages"], rows["t1"]["end_ts_us"]) == (None, 1, 4500)
    assert rows["t2"]["commit_requested_ts_us"] is None and rows["t2"]["end_ts_us"] is None
    assert set(r.txns["engine"]) == {"v4"}


def test_latencies_carry_the_models_names() -> None:
    lat = fold().latency
    def one(name: str) -> int:
        assert lat[name]["count"] == 1, name
        return int(lat[name]["min_us"])
    assert one("publish_nontxn_us") == 300
    assert lat["publish_txn_us"]["count"] == 2  # m1 and m2: 500 and 300
    assert lat["publish_txn_us"]["sum_us"] == 800
    assert lat["end_txn_us"]["count"] == 3 and lat["end_txn_us"]["sum_us"] == 2000 + 500 + 100
    assert lat["new_txn_us"]["count"] == 4 and lat["new_txn_us"]["sum_us"] == 40 + 100 + 100 + 100
    assert one("commit_to_visible_us") == 1500  # commit asked at 1000, m1 first delivered at 2500
    assert one("dispatch_nontxn_us") == 400  # sent at 100, first delivered at 500
    assert one("dispatch_txn_us") == 2300


def test_deliveries_keep_the_trace_names_and_counts_add_up() -> None:
    r = fold()
    assert r.deliveries["topic"] == [T, T, T] and r.deliveries["msg"] == ["m0", "m1", "m0"]
    assert r.deliveries["redelivery"] == [False, False, True]
    c = r.counts
    assert c["deliveries"] == 3 and c["txns.started"] == 4
    assert (c["txns.committed"], c["txns.aborted"], c["txns.open"]) == (1, 2, 1)
    assert c["client_errors.TransactionCoordinatorClientException$InvalidTxnStatusException"] == 1
    assert c["undelivered_at_end"] == 0  # m2's txn aborted
    assert r.rates["rows"] == 12 and r.rates["offered_rows_per_s"] == 1200.0
    # acks aside (one waits for its message): 10 rows issued from 20 to 5000 µs
    assert r.rates["achieved_rows_per_s"] == round(10 / 0.00498, 1) and r.rates["max_issue_lag_us"] == 0
    assert r.rates["max_lag_us"] == 40 and r.rates["paused_us"] == 7 and r.client == {"t0_epoch_ms": 1, "setup_ms": 5, "client": {"batching": False}}
    # one commit, answered at 3000 µs, over the txn phase from t0's new_txn issued at 20 µs
    assert r.rates["committed_txns_per_s"] == round(1 / 0.00298, 1)
    assert dict(zip(r.txns["txn"], r.txns["opened_ts_us"])) == {"t0": 20, "t1": 3100, "t2": 4600, "t3": 4800}
    # and heard new_txn's answer: the op's end
    assert dict(zip(r.txns["txn"], r.txns["new_txn_answered_ts_us"])) == {"t0": 60, "t1": 3200, "t2": 4700, "t3": 4900}


def test_the_history_feeds_the_projects_checker() -> None:
    h = fold(history=True).history
    assert h.outcomes == {"t0": "committed", "t1": "aborted", "t2": "open", "t3": "aborted"}
    assert [d[3] for d in h.deliveries] == ["m0", "m1", "m0"]
    kinds = sorted(v.kind for v in check(h))
    # the second m0 came after a plain ack covered it and with no redelivery cause
    assert kinds == ["acked_redelivered", "duplicate"]


def test_a_clean_history_has_no_violations() -> None:
    f = EventFold("v4", ROWS, {B: T}, history=True)
    for ev in EVENTS[:-3] + EVENTS[-1:]:  # without the ack and the second m0
        f.feed(ev)
    assert check(f.finish().history) == []


def test_a_txn_the_trace_ends_without_an_answer_is_unfinished() -> None:
    # t2 has no end row in EVENTS; if the trace ends it, the client just never reported it
    f = EventFold("v4", ROWS, {B: T}, ended=frozenset({"t2"}))
    for ev in EVENTS:
        f.feed(ev)
    r = f.finish()
    assert dict(zip(r.txns["txn"], r.txns["outcome"]))["t2"] == "unfinished"
    assert "txns.open" not in r.counts and r.counts["txns.unfinished"] == 1


def test_message_ids_order_by_their_numbers() -> None:
    assert position_of("7:1:-1") < position_of("7:10:-1") < position_of("8:0:-1")
    assert position_of(None) == ()


def test_a_message_id_names_its_stored_position_whatever_partition_index_it_carries() -> None:
    # the send's answer on a partition addressed as a topic (-1) and the consumer's id of the same entry (1)
    assert position_of("227:21:-1") == position_of("227:21:1") == (227, 21)
    assert position_of("227:21:1:3") == (227, 21, 3) != position_of("227:21:1:4")
    v5 = "MessageIdV5{segment=2, id=22:0:-1, positions=0}"
    assert position_of(v5) == (2, 22, 0, 0) < position_of("MessageIdV5{segment=2, id=22:1:-1, positions=0}")


def test_resent_copies_are_judged_at_the_copies_stored_first() -> None:
    """As a broker ran it (CI, small's first 300 rows): the producer re-sent m1 and m2 after a
    reconnection and the broker stored both copies of each, m2's first copy before m1's; the sends
    were answered with the second copies (-1 for the partition, where the consumer's ids carry
    it). The client acks the copy it received first. The history judges the first copies (the
    order the cursor read them in, the copy the ack covered) and leaves the later ones out, so
    the checker finds nothing wrong."""
    def at(ev: dict[str, Any], message_id: str) -> dict[str, Any]:
        return {**ev, "message_id": message_id}

    rows = ROWS[:2] + [(T, None, None, None)] * 2 + [(T, None, "s", "individual")]
    events = [
        {"ev": "subscribed", "row": 0, "topic": B, "subscription": "s", "type": "Failover", "t_us": 10},
        op(2, "publish", 100, 4000, msg="m1", message_id="7:5:-1"),
        op(3, "publish", 200, 4100, msg="m2", message_id="7:6:-1"),
        at(deliver("m2", 5000), "7:2:0"),
        at(deliver("m1", 5010), "7:3:0"),
        op(4, "ack", 5015, 5016, msg="m1"),
        at(deliver("m1", 5020, redelivery=True), "7:5:0"),
        at(deliver("m2", 5030, redelivery=True), "7:6:0"),
        {"ev": "done", "t_us": 9000, "rows": 5, "max_lag_us": 0, "drain_ms": 2000},
    ]
    r = fold(True, events, rows, 0)
    assert r.counts["deliveries"] == 4 and r.counts["deliveries.of_resent_copies"] == 2
    assert {m: p.position for m, p in r.history.pubs.items()} == {"m1": (7, 3), "m2": (7, 2)}
    assert [d[3] for d in r.history.deliveries] == ["m2", "m1"] and check(r.history) == []


METRICS_BEFORE = """# TYPE pulsar_txn_append_log_count gauge
pulsar_txn_append_log_count{cluster="standalone",coordinator_id="0"} 10
pulsar_txn_created_count{cluster="standalone",coordinator_id="0"} 2
pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="get",status="success"} 100.0
pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="put",status="success"} 50.0
pulsar_metadata_store_ops_latency_ms_sum{cluster="standalone",name="metadata-store",type="put",status="success"} 9.5
jvm_threads_current 40
"""
METRICS_AFTER = """pulsar_txn_append_log_count{cluster="standalone",coordinator_id="0"} 18
pulsar_txn_append_log_count{cluster="standalone",coordinator_id="1"} 4
pulsar_txn_created_count{cluster="standalone",coordinator_id="0"} 5
pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="get",status="success"} 108.0
pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="put",status="success"} 57.0
pulsar_metadata_store_ops_latency_ms_count{cluster="standalone",name="metadata-store",type="del",status="success"} 1.0
pulsar_metadata_store_ops_latency_ms_sum{cluster="standalone",name="metadata-store",type="put",status="success"} 19.5
jvm_threads_current 44
"""


def test_broker_counters_map_onto_our_names() -> None:
    before, after = parse_prometheus(METRICS_BEFORE), parse_prometheus(METRICS_AFTER)
    assert before[("pulsar_txn_created_count", (("cluster", "standalone"), ("coordinator_id", "0")))] == 2.0
    counts = map_metrics(counter_deltas(before, after))
    assert counts["tc.log_appends"] == 8 + 4  # two coordinators, one new
    assert counts["tc.txns.created"] == 3
    assert (counts["meta.reads"], counts["meta.writes"]) == (8, 7 + 1)
    assert (counts["pulsar.metadata.gets"], counts["pulsar.metadata.puts"], counts["pulsar.metadata.deletes"]) == (8, 7, 1)
    assert counts["pulsar.pulsar_txn_append_log_count"] == 12
    assert not any("jvm_threads" in k or k.endswith("_sum") for k in counts)  # gauges and sums are no counts
    assert counts["pulsar.metadata.puts_ms"] == 10  # 19.5 - 9.5: the puts' time, for their mean
    assert "pulsar.metadata.gets_ms" not in counts  # no sum exported for them here


def test_a_restart_window_explains_what_came_again_in_it() -> None:
    """m0 is delivered, the broker restarts (crash at 1000, resumed at 9000) and m0 comes again
    three times: while the broker shut down (5000), when the consumer is back (9500), and once
    more with no cause (12000)."""
    rows = ROWS[:3] + [(None, None, None, None)]  # row 3: crash_broker
    events = [
        {"ev": "subscribed", "row": 0, "topic": B, "subscription": "s", "type": "Failover", "t_us": 10},
        op(2, "publish", 100, 400, msg="m0", message_id="7:0:-1"),
        {"ev": "crash", "row": 3, "t_us": 1000},
        deliver("m0", 1500),
        deliver("m0", 5000, redelivery=True),
        {"ev": "resumed", "row": 3, "t_us": 9000},
        deliver("m0", 9500, redelivery=True),
        deliver("m0", 12_000, redelivery=True),
        {"ev": "done", "t_us": 20_000, "rows": 4, "max_lag_us": 0, "drain_ms": 2000},
    ]
    r = fold(True, events, rows, 0)
    assert r.counts["crashes.broker"] == 1 and r.counts["deliveries"] == 4
    # one redelivery seen in the window, one for the subscription when the broker was back
    assert r.history.fault_counts() == {"crash_broker": 1, "redeliver": 2}
    (v,) = check(r.history)  # only 12000 has no cause
    assert v.kind == "duplicate" and v.msg == "m0"
    # from the crash to the first delivery once the broker was back (9500); the restart took 8 ms
    assert r.latency["time_to_first_dispatch_after_crash_us"]["sum_us"] == 8500
    assert r.counts["pulsar.restart_ms"] == 8


def test_a_resent_copy_is_kept_in_the_deliveries_and_left_out_of_the_checked_history() -> None:
    """m0 stored twice (the producer re-sent it, deduplication off): its second message id is a
    copy the broker delivers as a new message, not a redelivery of the first."""
    def with_id(ev: dict[str, Any], message_id: str) -> dict[str, Any]:
        return {**ev, "message_id": message_id} if ev.get("ev") == "deliver" and ev["msg"] == "m0" else ev

    events = [with_id(ev, "7:0:-1") for ev in EVENTS]
    events[-2] = with_id(events[-2], "7:3:-1")  # the m0 delivered after the ack: a copy at 7:3
    f = EventFold("v4", ROWS, {B: T}, trace_span_us=10_000, history=True)
    for ev in events:
        f.feed(ev)
    r = f.finish()
    assert r.deliveries["msg"] == ["m0", "m1", "m0"] and r.counts["deliveries.of_resent_copies"] == 1
    assert [d[3] for d in r.history.deliveries] == ["m0", "m1"] and check(r.history) == []
    # the same message id twice is the same stored entry: a redelivery, judged as before
    same = EventFold("v4", ROWS, {B: T}, trace_span_us=10_000, history=True)
    for ev in [with_id(ev, "7:0:-1") for ev in EVENTS]:
        same.feed(ev)
    assert sorted(v.kind for v in check(same.finish().history)) == ["acked_redelivered", "duplicate"]
