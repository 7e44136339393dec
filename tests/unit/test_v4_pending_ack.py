"""v4 MLPendingAckStore: the sibling ledger, its records, replay, trimming and low-water marks."""

from __future__ import annotations

from engine.dispatcher import DispatchMode
from engine.errors import TxnConflict
from engine.ids import Design, TxnID
from engine.ports import AckKind, TxnAction
from legacy_v4 import v4_engine
from legacy_v4.pending_ack import MLPendingAckStore, pending_ack_ledger_name
from tests.harness import Combo, System, memory_durable

T = "persistent://public/default/t"
LOG = "persistent://public/default/t-sub__transaction_pending_ack"


def v4(**options: object) -> System:
    s = System(Combo("v4", True, memory_durable, lambda d: v4_engine(**options)), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    for i in range(6):
        s.publish(T, f"m{i}")
    s.run()
    return s


def store(s: System) -> MLPendingAckStore:
    st = s.broker.pending_ack_store(T, "sub")
    assert isinstance(st, MLPendingAckStore)
    return st


def records(s: System) -> list[tuple[str, str | None]]:
    log = s.durable.ledgers.open(LOG)
    out = []
    for e in log.read(log.first_position(), log.last_confirmed(), 100):
        assert e.data.payload is not None
        out.append((str(e.data.payload["op"]), e.data.payload.get("kind")))
    return out


def test_the_store_is_a_sibling_ledger_created_on_first_use() -> None:
    assert pending_ack_ledger_name(T, "sub") == LOG
    s = v4()
    assert not s.durable.ledgers.exists(LOG)
    t = s.new_txn()
    s.ack("sub", "m0", "m1", txn=t)
    s.commit(t)
    s.run()
    t2 = s.new_txn()
    s.ack("sub", "m3", kind=AckKind.CUMULATIVE, txn=t2)
    s.abort(t2)
    s.run()
    assert records(s) == [("ack", "individual"), ("commit", None), ("ack", "cumulative"), ("abort", None)]
    st = s.stats()
    assert st["pending_ack.appends"] == 4 and st["pending_ack.appends.ack"] == 2
    assert st["tc.end_txn.rpcs_sent.subscription"] == 2


def test_a_conflicting_ack_is_logged_before_its_check_and_dropped_on_replay() -> None:
    # PendingAckHandleImpl.internalIndividualAcknowledgeMessage appends first, checks in the
    # append's callback; handleIndividualAckRecover drops the record again on replay.
    s = v4()
    t1, t2 = s.new_txn(), s.new_txn()
    s.ack("sub", "m0", txn=t1)
    try:
        s.ack("sub", "m0", txn=t2)
        raise AssertionError("the second txn ack of m0 must conflict")
    except TxnConflict:
        pass
    assert records(s) == [("ack", "individual"), ("ack", "individual")]
    st = s.stats()
    assert st["pending_ack.conflicts"] == 1 and st["pending_ack.appends.ack"] == 2
    s.crash()
    pa = store(s)
    assert pa.pending_txns() == [t1] and pa.stats["recovery_acks_dropped"] == 1
    assert pa.recovery_stats() is not None and pa.recovery_stats().entries_replayed == 2  # type: ignore[union-attr]
    s.broker.check()


def test_a_txn_ack_of_a_message_already_acked_conflicts() -> None:
    s = v4()
    s.ack("sub", "m2")  # plain ack
    t = s.new_txn()
    try:
        s.ack("sub", "m2", txn=t)
        raise AssertionError("a txn ack of an acked message must conflict")
    except TxnConflict:
        pass
    t2 = s.new_txn()
    s.ack("sub", "m0", kind=AckKind.CUMULATIVE)
    try:  # at or below mark-delete
        s.ack("sub", "m0", kind=AckKind.CUMULATIVE, txn=t2)
        raise AssertionError("a cumulative txn ack at mark-delete must conflict")
    except TxnConflict:
        pass
    assert s.stats()["pending_ack.conflicts"] == 2


def test_a_plain_ack_of_a_pending_position_applies_at_once_and_the_abort_redelivers_nothing() -> None:
    s = v4()
    t1 = s.new_txn()
    s.ack("sub", "m0", "m1", txn=t1)
    s.ack("sub", "m0")  # PersistentSubscription.acknowledgeMessage: straight to the cursor
    assert s.broker.cursor(T, "sub").is_acked(s.ids["m0"].position)
    s.abort(t1)
    s.run()
    assert s.msgs(T, "sub")[6:] == ["m1"]  # m1 comes back; m0 does not


def test_recovery_drops_a_record_with_a_position_acked_since() -> None:
    # handleIndividualAckRecover returns at the first acked position: the whole record goes,
    # so m0 (logged with m1 in one record) is no longer pending after the restart.
    s = v4()
    t1, t2 = s.new_txn(), s.new_txn()
    s.ack("sub", "m0", "m1", txn=t1)
    s.ack("sub", "m2", txn=t2)
    s.ack("sub", "m1")  # a plain ack clears m1 from t1
    s.commit(t2)
    s.run()
    assert store(s).is_pending(s.ids["m0"].position)
    s.crash()
    st = store(s)
    stats = st.recovery_stats()
    assert stats is not None and stats.entries_replayed == 3
    assert not st.is_pending(s.ids["m0"].position)
    assert not st.is_pending(s.ids["m1"].position) and not st.is_pending(s.ids["m2"].position)
    # t1's record (m1 acked since) and t2's (m2 acked by its commit) are both dropped
    assert st.pending_txns() == [] and st.stats["recovery_acks_dropped"] == 2
    s.broker.check()


def test_the_log_is_trimmed_once_the_subscription_passes_its_index_points() -> None:
    s = v4(pending_ack_log_index_min_lag=1)
    for i in range(6):
        t = s.new_txn()
        s.ack("sub", f"m{i}", txn=t)
        s.commit(t)
        s.run()
    assert s.broker.cursor(T, "sub").mark_delete == s.ids["m5"].position
    log = s.durable.ledgers.open(LOG)
    state = log.load_cursor("__pending_ack_log")
    assert state is not None and state.mark_delete >= log.first_position()
    s.crash()
    stats = store(s).recovery_stats()
    assert stats is not None and stats.entries_replayed <= 1  # only the last commit record is left


def test_low_water_mark_aborts_a_stale_first_txn_after_an_individual_commit() -> None:
    s = v4()
    pa = store(s)
    stale, live = TxnID(Design.V4, 0, 100), TxnID(Design.V4, 0, 200)
    pa.ack(stale, [s.ids["m0"].position], AckKind.INDIVIDUAL)
    pa.ack(live, [s.ids["m1"].position], AckKind.INDIVIDUAL)
    pa.end_txn(live, TxnAction.COMMIT, low_water_mark=150)
    assert pa.pending_txns() == [] and pa.stats["lwm_aborts"] == 1
    s.run()
    assert s.msgs(T, "sub")[6:] == ["m0"]  # the stale txn's ack was aborted: m0 is redelivered


def test_low_water_mark_is_also_handled_after_an_abort_and_chains() -> None:
    # internalAbortTxn calls handleLowWaterMark too (PendingAckHandleImpl, D21); each stale
    # abort re-enters it once the semaphore is released, so both stale txns go.
    s = v4()
    pa = store(s)
    stale1, stale2, live = TxnID(Design.V4, 0, 100), TxnID(Design.V4, 0, 120), TxnID(Design.V4, 0, 200)
    pa.ack(stale1, [s.ids["m0"].position], AckKind.INDIVIDUAL)
    pa.ack(stale2, [s.ids["m1"].position], AckKind.INDIVIDUAL)
    pa.ack(live, [s.ids["m2"].position], AckKind.INDIVIDUAL)
    pa.end_txn(live, TxnAction.ABORT, low_water_mark=150)
    assert pa.pending_txns() == [] and pa.stats["lwm_aborts"] == 2
    assert pa.stats["appends.abort"] == 3
    s.run()
    assert sorted(str(m) for m in s.msgs(T, "sub")[6:]) == ["m0", "m1", "m2"]


def test_a_commit_waits_for_the_cursor_write_the_mark_delete_limiter_grants() -> None:
    """``internalCommitTxn`` answers once ``acknowledgeMessageAsync`` completes, which waits for
    the cursor's ledger write only when its ``markDeleteLimiter`` (Guava, 1 a second) grants a
    permit: after a second or more idle, one stored permit and one borrowed ahead, then none
    until that second has passed."""
    s = v4()  # nothing has acked on the cursor since it was made, a second ago
    took = []

    def commit(msg: str) -> None:
        t = s.new_txn()
        s.ack("sub", msg, txn=t)
        t0 = s.end(t)
        s.run(10_000)
        took.append(s.outcome_us[t] - t0)

    for msg in ("m0", "m1", "m2"):
        commit(msg)
    s.run(2_000_000)
    commit("m3")
    # request 200, UPDATE(COMMITTING) 1000, RPC 200 + commit mark 1000, [cursor write 1000],
    # answer 200, UPDATE(COMMITTED) 1000, reply 200
    assert took == [4_800, 4_800, 3_800, 4_800]
    assert s.stats()["pending_ack.commit_cursor_writes"] == 3


def test_plain_acks_take_the_cursor_writes_a_commit_would_wait_for() -> None:
    s = v4()
    s.ack("sub", "m0")
    s.ack("sub", "m1")  # the stored permit and the borrowed one
    t = s.new_txn()
    s.ack("sub", "m2", txn=t)
    t0 = s.end(t)
    s.run(10_000)
    assert s.outcome_us[t] - t0 == 3_800


def test_an_abort_writes_no_cursor_position() -> None:
    s = v4()
    t = s.new_txn()
    s.ack("sub", "m0", txn=t)
    t0 = s.end(t, TxnAction.ABORT)
    s.run(100_000)
    assert s.outcome_us[t] - t0 == 3_800
    assert s.stats().get("pending_ack.commit_cursor_writes", 0) == 0
