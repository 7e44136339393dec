"""v4 coordinator: ids, the transaction log (3 + k entries, deletion, recovery of live txns
only), low-water marks, END_TXN fan-out timing, retries, RPC timeouts and the timeout tracker."""

from __future__ import annotations

import dataclasses

import pytest

from engine.clock import LatencyModel
from engine.dispatcher import DispatchMode
from engine.errors import ConfigError, TxnNotFound, TxnTimeout
from engine.ids import Design, TxnID
from engine.ports import TxnAction, TxnStatus
from legacy_v4 import V4Engine, v4_engine
from legacy_v4.coordinator import V4CoordinatorService, transaction_log_name
from tests.harness import Combo, System, memory_durable

T = "persistent://public/default/t"
U = "persistent://public/default/u"


def v4(**options: object) -> System:
    return System(Combo("v4", True, memory_durable, lambda d: v4_engine(**options)), DispatchMode.NOTIFY)


def engine(s: System) -> V4Engine:
    e = s.broker.engine
    assert isinstance(e, V4Engine)
    return e


def tc(s: System) -> V4CoordinatorService:
    return engine(s).coordinator()


def test_ids_carry_the_coordinator_and_a_sequence_from_zero() -> None:
    s = v4(coordinators=2)
    ids = [s.new_txn() for _ in range(4)]
    assert ids == [TxnID(Design.V4, 0, 0), TxnID(Design.V4, 1, 0), TxnID(Design.V4, 0, 1), TxnID(Design.V4, 1, 1)]
    assert s.durable.ledgers.exists(transaction_log_name(0)) and s.durable.ledgers.exists(transaction_log_name(1))
    with pytest.raises(TxnNotFound):
        s.commit(TxnID(Design.V4, 7, 0))


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown v4 option"):
        v4_engine(snapshot_every=3)
    with pytest.raises(ConfigError):
        v4_engine(end_txn_rpc_timeout_ms=0)


def test_a_txn_writes_three_plus_k_log_entries_and_deletes_them_when_finished() -> None:
    s = v4()
    s.subscribe(T, "sub")
    s.publish(T, "m0")
    s.run()
    t = s.new_txn()
    s.publish(T, "a", txn=t)
    s.publish(T, "b", txn=t)  # the same partition is registered once
    s.publish(U, "c", txn=t)
    s.ack("sub", "m0", txn=t)
    s.commit(t)
    s.run()
    st = s.stats()
    assert st["tc.log_appends"] == 3 + 3  # NEW, 2 x ADD_PARTITION, 1 x ADD_SUBSCRIPTION, 2 x UPDATE
    assert st["tc.log_appends.add_partition"] == 2 and st["tc.log_appends.add_subscription"] == 1
    assert st["tc.log_appends.update"] == 2 and st["tc.log_deleted_entries"] == 6
    log = s.durable.ledgers.open(transaction_log_name(0))
    cursor = log.load_cursor("transaction.subscription")
    assert cursor is not None and cursor.mark_delete == log.last_confirmed()


def test_recovery_replays_only_live_txns_and_continues_the_sequence() -> None:
    s = v4()
    for i in range(5):
        t = s.new_txn()
        s.publish(T, f"done{i}", txn=t)
        s.commit(t)
        s.run()
    live = [s.new_txn() for _ in range(2)]
    for i, t in enumerate(live):
        s.publish(T, f"live{i}", txn=t)
    s.broker.restart_coordinator()
    stats = tc(s).recovery_stats()
    assert stats is not None
    assert stats.entries_replayed == 1 + 2 * 2  # the last entry (sequence) + NEW and ADD_PARTITION per live txn
    assert s.new_txn() == TxnID(Design.V4, 0, 7)
    assert [s.broker.coordinator().status(t) for t in live] == [TxnStatus.OPEN, TxnStatus.OPEN]
    s.broker.check()


def test_recovery_over_trimmed_ledgers_reads_only_live_entries() -> None:
    s = v4()  # 64 entries per ledger: 100 finished txns fill several txn-log ledgers
    for _ in range(100):
        s.abort(s.new_txn())
        s.run(10_000)
    keep = s.new_txn()
    st = s.stats()
    assert st["tc.log_trimmed_entries"] > 0
    s.crash()
    stats = tc(s).recovery_stats()
    assert stats is not None and stats.entries_replayed == 2  # the last entry + keep's NEW
    assert s.broker.coordinator().status(keep) is TxnStatus.OPEN


def test_end_txn_timing_and_rpc_counts() -> None:
    s = v4()
    done: list[int] = []
    t = s.new_txn()
    s.publish(T, "a", txn=t)
    s.publish(U, "b", txn=t)
    t0 = s.sched.now_us()
    s.broker.end_txn(t, TxnAction.COMMIT, lambda _t, _s: done.append(s.sched.now_us()))
    s.run()
    # request 200 (ServerCnx.handleEndTxn), UPDATE(COMMITTING) 1000, RPC 200 + marker 1000,
    # answer 200, UPDATE(COMMITTED) 1000, reply 200
    assert done == [t0 + 3_800]
    st = s.stats()
    assert st["tc.end_txn.rpcs_sent"] == 2 and st["tc.end_txn.rpcs_sent.partition"] == 2
    assert st.get("tc.end_txn.rpcs_failed", 0) == 0 and st.get("tc.end_txn.retries", 0) == 0


def test_the_end_txn_fan_out_travels_on_the_brokers_own_client() -> None:
    """END_TXN_ON_PARTITION and its answer are the broker's own requests
    (TransactionBufferClientImpl on PulsarService.getClient): each costs ``rpc.broker``, and the
    client's END_TXN and its reply ``rpc``."""
    def commit_time(**latency: int) -> int:
        s = v4()
        s.config = dataclasses.replace(s.config, latency=LatencyModel().with_overrides(**latency))
        s.broker = s.new_broker()
        done: list[int] = []
        t = s.new_txn()
        s.publish(T, "a", txn=t)
        s.publish(U, "b", txn=t)
        s.run()
        t0 = s.sched.now_us()
        s.broker.end_txn(t, TxnAction.COMMIT, lambda _t, _s: done.append(s.sched.now_us() - t0))
        s.run()
        return done[0]

    base = commit_time(rpc=200, rpc_broker=200)
    assert base == 3_800  # as above: rpc.broker is rpc in the constants
    assert commit_time(rpc=200, rpc_broker=1_200) == base + 2 * 1_000  # the fan-out's two hops, its partitions at once
    assert commit_time(rpc=1_200, rpc_broker=200) == base + 2 * 1_000  # the client's request and reply


def test_low_water_mark_is_smallest_live_sequence_minus_one() -> None:
    s = v4()
    t0, t1 = s.new_txn(), s.new_txn()
    s.publish(T, "a", txn=t1)
    s.commit(t1)
    s.run()
    tb = s.broker.transaction_buffer(T)
    assert tb.low_water_marks() == {0: -1}  # type: ignore[attr-defined]
    s.abort(t0)
    t2 = s.new_txn()
    s.publish(T, "b", txn=t2)
    s.commit(t2)
    s.run()
    assert tb.low_water_marks() == {0: 1}  # type: ignore[attr-defined]


def test_timeout_tracker_aborts_at_the_first_tick_after_the_deadline() -> None:
    s = v4()
    t = s.new_txn(timeout_ms=250)
    s.publish(T, "x", txn=t)
    s.run(299_000)
    assert s.broker.coordinator().status(t) is TxnStatus.OPEN
    s.run(1_000)
    assert s.broker.coordinator().status(t) is TxnStatus.ABORTING
    with pytest.raises(TxnTimeout):
        s.commit(t)
    s.run()
    assert s.stats()["tc.txns.timed_out"] == 1
    with pytest.raises(TxnNotFound):
        s.broker.coordinator().status(t)


def test_timeouts_survive_a_coordinator_restart() -> None:
    s = v4()
    t = s.new_txn(timeout_ms=500)
    s.run(200_000)
    s.broker.restart_coordinator()
    s.run(400_000)
    assert s.stats()["tc.txns.timed_out"] == 1


def test_end_txn_waits_for_a_recovering_buffer_and_times_out_then_retries() -> None:
    s = v4(recovery_read_batch=1, end_txn_rpc_timeout_ms=50)
    s.subscribe(T, "sub")
    t = s.new_txn()
    s.publish(T, "x", txn=t)  # first snapshot here: the replay starts before x
    for i in range(1_000):
        s.publish(T, f"p{i}")
    s.run()
    s.crash()  # the new TB replays 1001 entries, one per read: ~100 ms
    s.commit(t)
    s.run(20_000)
    assert s.broker.coordinator().status(t) is TxnStatus.COMMITTING
    s.run(3_000_000)
    st = s.stats()
    assert st["tc.end_txn.rpcs_timed_out"] == 1 and st["tc.end_txn.retries"] == 1
    assert s.unique_msgs(T, "sub")[:2] == ["x", "p0"] and len(s.unique_msgs(T, "sub")) == 1_001
    assert s.outcomes[t] is TxnStatus.COMMITTED


def test_end_txn_waits_within_the_timeout_without_failing() -> None:
    s = v4(recovery_read_batch=1)
    t = s.new_txn()
    s.publish(T, "x", txn=t)
    for i in range(300):
        s.publish(T, f"p{i}")
    s.run()
    s.crash()
    s.commit(t)
    s.run()
    st = s.stats()
    assert st["tc.end_txn.rpcs_waited_not_ready"] == 1 and st.get("tc.end_txn.rpcs_failed", 0) == 0
    assert s.outcomes[t] is TxnStatus.COMMITTED


def test_coordinator_check_catches_a_broken_log() -> None:
    s = v4()
    t = s.new_txn()
    s.publish(T, "x", txn=t)
    s.broker.check()
    meta = tc(s).coordinators[0].live()[0]
    meta.log_positions.pop()
    with pytest.raises(AssertionError, match="log records"):
        s.broker.check()
