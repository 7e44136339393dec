"""Exact v4 write counts for one small scripted workload, and what its recovery reads."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.dispatcher import DispatchMode
from engine.errors import LedgerError, TxnConflict
from engine.ports import TxnAction
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
        # every entry is passed once by its topic's one subscription: T's 7 messages and 2
        # markers, U's 1 and 1 (AbstractBaseDispatcher.filterEntriesForConsumer)
        "billed.dispatch.entry": 7 + 2 + 1 + 1,
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


# -- one test per row of legacy_v4/README.md "Counts per operation" ---------------------------
# Each scripts one operation and checks the writes it costs, derived from the Pulsar code the
# row cites (not from a run of the model).

def _system(participants: Any = None, **opts: Any) -> System:
    base = v4_engine(**opts)
    if participants is None:
        return System(Combo("v4", True, memory_durable, lambda d: base), DispatchMode.POLLING)

    def make(d: Any) -> Any:
        return lambda ctx: base(dataclasses.replace(ctx, participants=participants(ctx)))

    return System(Combo("v4", True, memory_durable, make), DispatchMode.POLLING)


def _delta(s: System, fn: Any) -> dict[str, int]:
    before = dict(s.stats())
    fn()
    s.run(10_000)
    after = s.stats()
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _writes(d: dict[str, int]) -> dict[str, int]:
    keys = ("tc.log_appends", "ledger.appends.data", "ledger.appends.marker", "snapshot.writes",
            "pending_ack.appends", "tc.end_txn.rpcs_sent", "tc.log_deleted_entries")
    return {k: d[k] for k in keys if d.get(k)}


def test_row_new_txn_and_registrations() -> None:
    # MLTransactionMetadataStore: NEW, ADD_PARTITION, ADD_SUBSCRIPTION are one log append each
    s = _system()
    s.subscribe(T, "sub")
    s.publish(T, "p0")
    s.run()
    holder: dict[str, Any] = {}
    assert _writes(_delta(s, lambda: holder.update(t=s.new_txn()))) == {"tc.log_appends": 1}
    t = holder["t"]
    s.publish(T, "warm", txn=t)  # the first snapshot and ADD_PARTITION of T: out of the way
    s.run()
    s.ack("sub", "p0", txn=t)  # ADD_SUBSCRIPTION + the ACK record
    d = _delta(s, lambda: s.publish(U, "u0", txn=t))  # ADD_PARTITION of U
    assert d["tc.log_appends.add_partition"] == 1 and d["tc.log_appends"] == 1
    d = _delta(s, lambda: s.publish(U, "u1", txn=t))  # registered already: none
    assert "tc.log_appends" not in d
    st = s.stats()
    assert st["tc.log_appends.add_subscription"] == 1 and st["tc.log_appends.new"] == 1


def test_row_txn_publish_and_the_first_snapshot() -> None:
    # 1 ledger append per txn publish; the first on a topic adds 1 snapshot-topic write
    s = _system()
    t = s.new_txn()
    s.publish(T, "p", txn=None)
    s.run()
    d = _delta(s, lambda: s.publish(T, "x0", txn=t))
    assert _writes(d) == {"tc.log_appends": 1, "ledger.appends.data": 1, "snapshot.writes": 1}
    d = _delta(s, lambda: s.publish(T, "x1", txn=t))
    assert _writes(d) == {"ledger.appends.data": 1}


def test_row_plain_publish_costs_nothing_extra() -> None:
    s = _system()
    t = s.new_txn()
    s.publish(T, "x0", txn=t)
    s.run()
    assert _writes(_delta(s, lambda: s.publish(T, "p1"))) == {"ledger.appends.data": 1}


def test_row_txn_ack_request_even_a_conflicting_one() -> None:
    # MLPendingAckStore: 1 append per ack request; PendingAckHandleImpl appends before its
    # conflict checks, so a refused ack costs one too (D21)
    s = _system()
    s.subscribe(T, "sub")
    s.publish(T, "p0")
    s.run()
    t1, t2 = s.new_txn(), s.new_txn()
    s.ack("sub", "p0", txn=t1)
    d = _delta(s, lambda: _conflict(lambda: s.ack("sub", "p0", txn=t2)))
    assert d["pending_ack.appends"] == 1 and d["pending_ack.conflicts"] == 1
    assert d["tc.log_appends"] == 1  # t2's ADD_SUBSCRIPTION: the client registered it first


def _conflict(fn: Any) -> None:
    try:
        fn()
    except TxnConflict:
        return
    raise AssertionError("expected a conflict")


@pytest.mark.parametrize("action", [TxnAction.COMMIT, TxnAction.ABORT])
def test_row_end_txn(action: TxnAction) -> None:
    # TC: 2 UPDATE appends, S+U END_TXN RPCs, then 3+k log positions deleted; each produced
    # partition 1 marker; each acked subscription 1 COMMIT/ABORT record (S=2, U=1, k=3)
    s = _system()
    s.subscribe(T, "sub")
    s.publish(T, "p0")
    s.run()
    t = s.new_txn()
    s.publish(T, "a", txn=t)
    s.publish(U, "b", txn=t)
    s.ack("sub", "p0", txn=t)
    s.run()
    d = _delta(s, lambda: s.end(t, action))
    assert _writes(d) == {
        "tc.log_appends": 2, "ledger.appends.marker": 2, "pending_ack.appends": 1,
        "tc.end_txn.rpcs_sent": 3, "tc.log_deleted_entries": 3 + 3,
    }
    assert d[f"pending_ack.appends.{action.value}"] == 1


class _FailOnce:
    """END_TXN handlers that fail the first RPC to ``ledger`` (a retryable error)."""

    def __init__(self, ctx: Any, ledger: str) -> None:
        self._inner, self._ledger, self.failed = ctx.participants, ledger, 0

    def end_txn_on_partition(self, ledger: str, txn: Any, action: Any, lwm: int) -> None:
        if ledger == self._ledger and not self.failed:
            self.failed += 1
            raise LedgerError("injected")
        self._inner.end_txn_on_partition(ledger, txn, action, lwm)

    def end_txn_on_subscription(self, *args: Any) -> None:
        self._inner.end_txn_on_subscription(*args)


def test_row_retries_resend_every_rpc() -> None:
    # TransactionMetadataStoreService: a failed step is retried whole after 1 s, so the
    # partition that succeeded the first time gets a second commit marker
    s = _system(lambda ctx: _FailOnce(ctx, U))
    t = s.new_txn()
    s.publish(T, "a", txn=t)
    s.publish(U, "b", txn=t)
    s.run()
    before = dict(s.stats())
    s.commit(t)
    s.run(2_000_000)
    st = s.stats()
    assert st["tc.end_txn.retries"] - before.get("tc.end_txn.retries", 0) == 1
    assert st["tc.end_txn.rpcs_sent"] - before.get("tc.end_txn.rpcs_sent", 0) == 4  # 2 rounds x S=2
    assert st["ledger.appends.marker"] - before.get("ledger.appends.marker", 0) == 3  # T twice, U once
    assert st["tc.log_appends"] - before.get("tc.log_appends", 0) == 2
