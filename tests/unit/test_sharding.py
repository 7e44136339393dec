"""Shards of a trace (the Spark replay's units of work), without Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale.sharding import plan_shards, shard_events, trace_aggregates
from bench.trace.trace import read_events
from bench.trace.workloads import generate, load_profile


@pytest.mark.parametrize("profile", ["small", "omb-1-topic-16-partitions-1kb", "hanging-txns", "long-log-crash"])
def test_shards_split_the_trace_by_unit_and_keep_its_order(tmp_path: Path, profile: str) -> None:
    trace = tmp_path / "t.parquet"
    generate(load_profile(profile), 4000, 5, trace)
    events = list(read_events(trace))
    rows_per_topic, topic_sets = trace_aggregates(trace, batch_rows=1000)
    assert rows_per_topic == {t: sum(1 for e in events if e.topic == t) for t in rows_per_topic}
    by_txn: dict[str, set[str]] = {}
    for e in events:
        if e.txn is not None and e.topic is not None:
            by_txn.setdefault(e.txn, set()).add(e.topic)
    assert topic_sets == sorted(sorted(s) for s in {frozenset(s) for s in by_txn.values()})  # txns cross batches
    assert trace_aggregates(trace, batch_rows=97) == (rows_per_topic, topic_sets)
    topic_shard = plan_shards(rows_per_topic, topic_sets, 3)
    shards = [list(shard_events(trace, topic_shard, s, batch_rows=777)) for s in range(3)]

    crashes = [e for e in events if e.op.startswith("crash")]
    seen: dict[int, int] = {}
    for s, rows in enumerate(shards):
        assert [e.row for e in rows] == sorted(e.row for e in rows)  # trace order
        assert [e for e in rows if e.op.startswith("crash")] == crashes  # every crash, everywhere
        for e in rows:
            assert e == events[e.row]  # the row itself, with its number in the whole trace
            if not e.op.startswith("crash"):
                assert e.row not in seen
                seen[e.row] = s
    assert sorted(seen) == [e.row for e in events if not e.op.startswith("crash")]  # nothing lost
    txn_shard: dict[str, int] = {}
    for row, s in seen.items():  # a txn's rows (with or without a topic) all land on one shard
        txn = events[row].txn
        if txn is not None:
            assert txn_shard.setdefault(txn, s) == s, txn
    if profile == "omb-1-topic-16-partitions-1kb":  # 8 independent partition groups: balanced
        loads = [len(rows) for rows in shards]
        assert max(loads) < 1.5 * min(loads), loads
