"""Exact v4 write counts for one small scripted workload, and what its recovery reads."""

from __future__ import annotations

from engine.dispatcher import DispatchMode
from legacy_v4 import v4_engine
from tests.harness import Combo, System, memory_durable

T = "persistent://public/default/orders"
U = "persistent://public/default/shipments"


def test_counts_of_a_small_workload() -> None:
    s = System(Combo("v4", True, memory_durable, lambda d: v4_engine()), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    s.subscribe(U, "sub")
    for i in range(3):
        s.publish(T, f"p{i}")
    s.run()
    t1 = s.new_txn()  # 2 entries on T, 1 on U, acks p0: k = 3 participants
    s.publish(T, "a0", txn=t1)
    s.publish(T, "a1", txn=t1)
    s.publish(U, "a2", txn=t1)
    s.ack("sub", "p0", txn=t1)
    t2 = s.new_txn()  # 1 entry on T: k = 1
    s.publish(T, "b0", txn=t2)
    s.publish(T, "p3")
    s.commit(t1)
    s.abort(t2)
    s.run()
    s.broker.check()
    assert s.msgs(T, "sub") == ["p0", "p1", "p2", "a0", "a1", "p3"] and s.msgs(U, "sub") == ["a2"]
    st = s.stats()
    expected = {
        "ledger.appends.data": 8,  # 4 plain + 4 transactional
        "ledger.appends.marker": 3,  # commit on T and U, abort on T
        "tb.appends.data": 4,
        "tb.appends.marker": 3,
        "tb.snapshot_writes": 2,  # the first snapshot of T and of U
        "snapshot.writes": 2,
        "tc.log_appends": 10,  # (3 + 3) + (3 + 1)
        "tc.log_deleted_entries": 10,
        "pending_ack.appends": 2,  # ACK, COMMIT
        "tc.end_txn.rpcs_sent": 4,
        "dispatch.markers_skipped": 3,
        "dispatch.aborted_skipped": 1,
    }
    assert {k: st.get(k, 0) for k in expected} == expected
    assert st.get("tc.end_txn.rpcs_failed", 0) == st.get("tc.end_txn.retries", 0) == 0

    s.crash()
    s.run()
    s.broker.check()
    got = sorted((r.component, r.entries_replayed, r.modelled_us) for r in s.broker.recovery_stats())
    assert got == [
        ("pending-ack", 0, 0),  # U's subscription never acked transactionally: no store
        ("pending-ack", 2, 100),  # ACK + COMMIT
        ("tb", 3, 300),  # U: snapshot + a2 + commit marker; lookup rpc (200) + one read (100)
        ("tb", 7, 300),  # T: snapshot + a0 a1 b0 p3 + two markers; likewise
        ("tc", 1, 100),  # only the log's last entry (sequence); no live txn
    ]
