"""v4 TopicTransactionBuffer: maxReadPosition rules, states, markers, the aborted set and its
trimming, low-water marks, snapshot policy, replay recovery and its cost."""

from __future__ import annotations

import pytest

from engine.dispatcher import DispatchMode
from engine.errors import TxnConflict
from engine.ids import Design, TxnID
from engine.ports import TxnAction
from engine.records import EARLIEST, MarkerKind, Position
from legacy_v4 import v4_engine
from legacy_v4.buffer import TBState, TopicTransactionBuffer
from legacy_v4.snapshot import snapshot_ledger_name
from tests.harness import Combo, System, memory_durable

T = "persistent://public/default/t"


def v4(mode: DispatchMode = DispatchMode.NOTIFY, **options: object) -> System:
    return System(Combo("v4", True, memory_durable, lambda d: v4_engine(**options)), mode)


def tb(s: System, ledger: str = T) -> TopicTransactionBuffer:
    buf = s.broker.transaction_buffer(ledger)
    assert isinstance(buf, TopicTransactionBuffer)
    return buf


def test_states_and_the_first_snapshot() -> None:
    s = v4()
    s.publish(T, "p0")
    buf = tb(s)
    # TableView.readLatest: one round trip before NoSnapshot, dispatch blocked meanwhile (D17)
    assert buf.state is TBState.INITIALIZING and buf.max_read_position() == EARLIEST
    s.run(200)  # rpc
    assert buf.state is TBState.NO_SNAPSHOT and buf.max_read_position() == s.ids["p0"].position
    t = s.new_txn()
    s.publish(T, "x0", txn=t)
    # takeFirstSnapshot: FirstSnapshotting blocks all dispatch until the send to the snapshot
    # topic completes, rpc + ledger.append = 1.2 ms; the append waited as long (D18)
    assert buf.state is TBState.FIRST_SNAPSHOTTING and buf.max_read_position() == EARLIEST
    assert s.broker.last_publish_us == 2 * 200 + 1_000 + 1_200 + (2 * 200 + 1_000)  # + ADD_PARTITION
    s.publish(T, "p1")
    assert buf.max_read_position() == EARLIEST  # plain messages too
    s.run(1_199)
    assert buf.state is TBState.FIRST_SNAPSHOTTING
    s.run(1)
    assert buf.state is TBState.READY
    assert s.stats()["tb.snapshot_writes.first"] == 1 and s.stats()["tb.first_snapshot_blocked_us"] == 1_200
    assert s.durable.ledgers.exists(snapshot_ledger_name(T)) and snapshot_ledger_name(T).endswith(
        "public/default/__transaction_buffer_snapshot"
    )
    assert buf.max_read_position() == Position(s.ids["x0"].position.ledger_id, s.ids["x0"].position.entry_id - 1)
    s.broker.check()


def test_a_txn_append_during_the_snapshot_lookup_takes_the_first_snapshot_after_it() -> None:
    s = v4()
    t = s.new_txn()
    s.publish(T, "x0", txn=t)  # opens the partition: the lookup is in flight
    s.subscribe(T, "sub")
    buf = tb(s)
    assert buf.state is TBState.INITIALIZING
    s.run(200)
    assert buf.state is TBState.FIRST_SNAPSHOTTING and s.stats()["tb.snapshot_writes.first"] == 1
    s.run(1_200)
    assert buf.state is TBState.READY
    s.commit(t)
    s.run()
    assert s.msgs(T, "sub") == ["x0"]
    s.broker.check()


def test_max_read_position_follows_the_earliest_inserted_ongoing_txn() -> None:
    s = v4()
    t1, t2 = s.new_txn(), s.new_txn()
    s.publish(T, "p0")
    s.publish(T, "b0", txn=t2)
    s.publish(T, "a0", txn=t1)
    s.publish(T, "p1")  # a plain publish does not advance while a txn is ongoing
    s.run(2_000)  # the snapshot lookup, then the first snapshot
    buf = tb(s)
    before_b0 = Position(s.ids["b0"].position.ledger_id, s.ids["b0"].position.entry_id - 1)
    assert buf.max_read_position() == before_b0
    assert list(buf.ongoing()) == [t2, t1]
    s.commit(t1)
    s.run()
    assert buf.max_read_position() == before_b0
    s.commit(t2)
    s.run()
    assert buf.max_read_position() == s.broker.managed_ledger(T).last_confirmed()
    s.publish(T, "p2")
    assert buf.max_read_position() == s.ids["p2"].position
    s.broker.check()


def test_markers_are_empty_marker_entries_in_the_topic_ledger() -> None:
    s = v4()
    t1, t2 = s.new_txn(), s.new_txn()
    s.publish(T, "a", txn=t1)
    s.publish(T, "b", txn=t2)
    s.commit(t1)
    s.abort(t2)
    s.run()
    ledger = s.broker.managed_ledger(T)
    entries = ledger.read(ledger.first_position(), ledger.last_confirmed(), 100)
    markers = [(e.data.marker, e.data.txn, e.data.size, e.data.payload) for e in entries if e.data.marker]
    assert sorted(markers, key=lambda m: str(m[0])) == [(MarkerKind.ABORT, t2, 0, None), (MarkerKind.COMMIT, t1, 0, None)]
    buf = tb(s)
    abort_pos = next(e.position for e in entries if e.data.marker is MarkerKind.ABORT)
    assert buf.aborted() == {t2: abort_pos}
    assert buf.is_txn_aborted(t2, s.ids["b"].position) and not buf.is_txn_aborted(t1, s.ids["a"].position)
    st = s.stats()
    assert st["ledger.appends.marker"] == st["tb.appends.marker"] == 2


def test_aborted_set_is_trimmed_only_after_its_ledger_is_gone_and_a_later_end_txn() -> None:
    s = v4()
    t = s.new_txn()
    s.publish(T, "x", txn=t)
    s.abort(t)
    s.run()
    for i in range(130):  # 64 entries per ledger: two more ledgers
        s.publish(T, f"p{i}")
    ledger = s.broker.managed_ledger(T)
    assert ledger.trim(s.ids["p100"].position) > 0
    buf = tb(s)
    assert t in buf.aborted()  # still there until the next end-txn
    t2 = s.new_txn()
    s.publish(T, "y", txn=t2)
    s.commit(t2)
    s.run()
    assert buf.aborted() == {} and s.stats()["tb.aborts_trimmed"] == 1


def test_low_water_mark_refuses_late_appends_and_aborts_stale_txns_in_a_chain() -> None:
    s = v4()
    buf = tb(s)
    s.publish(T, "p0")
    stale1, stale2, fresh = (TxnID(Design.V4, 0, n) for n in (1, 2, 9))
    from engine.records import EntryData

    buf.append_buffer_to_txn(stale1, EntryData(10, 0, msg="s1", txn=stale1))
    buf.append_buffer_to_txn(stale2, EntryData(10, 0, msg="s2", txn=stale2))
    buf.append_buffer_to_txn(fresh, EntryData(10, 0, msg="f", txn=fresh))
    s.run(2_000)  # the snapshot lookup, then the first snapshot
    buf.end_txn(TxnID(Design.V4, 0, 5), TxnAction.COMMIT, low_water_mark=4)
    assert list(buf.ongoing()) == [fresh]
    assert set(buf.aborted()) == {stale1, stale2}
    assert buf.stats["lwm_aborts"] == 2
    with pytest.raises(TxnConflict, match="low-water mark"):
        buf.append_buffer_to_txn(TxnID(Design.V4, 0, 3), EntryData(10, 0, txn=TxnID(Design.V4, 0, 3)))
    with pytest.raises(AssertionError, match="finished txn"):
        buf.check()  # the coordinator knows none of these txns


def test_abort_without_a_snapshot_writes_no_marker() -> None:
    s = v4()
    s.publish(T, "p0")
    s.run(1_000)  # the snapshot lookup finds none
    buf = tb(s)
    buf.end_txn(TxnID(Design.V4, 0, 0), TxnAction.ABORT, 0)
    assert buf.stats["aborts_without_marker"] == 1 and s.stats().get("ledger.appends.marker", 0) == 0


def test_snapshot_after_n_advances_checked_at_end_txn() -> None:
    s = v4(snapshot_max_txn_count=3)
    for i in range(7):  # each commit advances maxReadPosition once: snapshots at the 3rd and 6th
        t = s.new_txn()
        s.publish(T, f"x{i}", txn=t)
        s.commit(t)
        s.run(10_000)
    st = s.stats()
    assert st["tb.snapshot_writes.first"] == 1 and st["tb.snapshot_writes.by_count"] == 2
    assert st.get("tb.snapshot_writes.by_time", 0) == 0


def test_snapshot_timer_writes_only_when_max_read_moved() -> None:
    s = v4()
    t = s.new_txn()
    s.publish(T, "x", txn=t)
    s.commit(t)
    s.run(5_100_000)
    assert s.stats()["tb.snapshot_writes.by_time"] == 1
    s.run(20_000_000)  # nothing moved since
    assert s.stats()["tb.snapshot_writes.by_time"] == 1


def test_notify_listeners_hear_every_advance() -> None:
    s = v4()
    s.publish(T, "p0")
    buf = tb(s)
    heard: list[Position] = []
    buf.add_max_read_listener(lambda: heard.append(buf.max_read_position()))
    t = s.new_txn()
    s.publish(T, "x", txn=t)
    s.publish(T, "p1")
    s.commit(t)
    s.run()
    assert heard[-1] == s.broker.managed_ledger(T).last_confirmed()
    assert heard == sorted(heard)


def _recovery(n: int) -> tuple[int, int, int]:
    s = v4(DispatchMode.POLLING)
    s.subscribe(T, "sub")
    t = s.new_txn()
    s.publish(T, "x", txn=t)  # first snapshot: its max read position is just before x
    for i in range(n):
        s.publish(T, f"p{i}")
    s.run(1_000)
    s.crash()
    buf = tb(s)
    assert buf.state is TBState.INITIALIZING and buf.max_read_position() == EARLIEST
    before = s.stats().get("dispatch.entries_dispatched", 0)
    s.run()
    assert buf.state is TBState.READY and s.stats().get("dispatch.entries_dispatched", 0) == before
    stats = buf.recovery_stats()
    assert stats is not None
    s.commit(t)
    s.run()
    assert len(s.unique_msgs(T, "sub")) == n + 1
    return stats.entries_replayed, stats.modelled_us, s.stats()["tb.recovery_reads"]


def test_recovery_cost_grows_with_entries_since_the_last_snapshot() -> None:
    # the snapshot lookup's round trip (200, D17), then the reads of 100 entries (100 each)
    assert _recovery(10) == (1 + 11, 200 + 100, 1)  # the snapshot + x and 10 entries, in one read
    assert _recovery(100) == (1 + 101, 200 + 200, 2)
    assert _recovery(1_000) == (1 + 1_001, 200 + 1_100, 11)


def test_recovery_rebuilds_ongoing_and_aborted_from_snapshot_and_replay() -> None:
    s = v4()
    t1, t2, t3 = s.new_txn(), s.new_txn(), s.new_txn()
    s.publish(T, "a", txn=t1)
    s.publish(T, "b", txn=t2)
    s.publish(T, "c", txn=t3)
    s.abort(t2)
    s.commit(t3)
    s.run()
    expected = (tb(s).ongoing(), tb(s).aborted(), tb(s).max_read_position())
    s.crash()
    tb(s)  # opening the partition starts its recovery
    s.run()
    assert (tb(s).ongoing(), tb(s).aborted(), tb(s).max_read_position()) == expected
    s.broker.check()


def test_consumed_ledgers_are_trimmed_and_recovery_after_a_crash_still_works() -> None:
    """With Pulsar's default retention, ledgers wholly below the subscription's mark-delete go at
    rollover; the aborted set forgets aborts whose marker went with them; a crash then recovers
    from the snapshot and what is left (``TopicTransactionBufferRecover`` starts at the first
    ledger left), rebuilding the same ongoing txn, aborts and maxReadPosition."""
    s = v4()
    s.subscribe(T, "sub")
    delivered = 0
    for r in range(30):  # 30 x 9 entries at 64 per ledger: four ledgers and more
        t = s.new_txn()
        for i in range(4):
            s.publish(T, f"x{r}.{i}", txn=t)
            s.publish(T, f"p{r}.{i}")
        s.abort(t) if r % 3 == 0 else s.commit(t)
        s.run()
        got = s.msgs(T, "sub")
        s.ack("sub", *(m for m in got[delivered:] if m is not None))
        delivered = len(got)
    ledger = s.broker.managed_ledger(T)
    buf = tb(s)
    st = s.stats()
    assert st["ledger.trimmed_ledgers"] >= 3 and st["ledger.trimmed_entries"] >= 3 * 64
    assert ledger.entry_count() == st["ledger.appends"] - st["ledger.trimmed_entries"] < 64 * 2
    assert ledger.is_trimmed(s.ids["x0.0"].position) and ledger.first_position() > s.ids["x0.0"].position
    assert st["tb.aborts_trimmed"] >= 5 and buf.aborted_txn_count() <= 10 - st["tb.aborts_trimmed"]
    assert all(ledger.first_position() <= p for p in buf.aborted().values())  # none refers to a trimmed ledger
    # Leave state for recovery: an open txn, an aborted one and committed messages not yet read.
    t_open, t_abort, t_commit = s.new_txn(), s.new_txn(), s.new_txn()
    s.publish(T, "open0", txn=t_open)
    s.publish(T, "gone0", txn=t_abort)
    s.publish(T, "late0", txn=t_commit)
    s.abort(t_abort)
    s.commit(t_commit)
    s.run()
    expected = (buf.ongoing(), buf.aborted(), buf.max_read_position())
    assert t_open in expected[0] and t_abort in expected[1]
    s.crash()
    recovered = tb(s)
    s.run()
    assert (recovered.ongoing(), recovered.aborted(), recovered.max_read_position()) == expected
    stats = recovered.recovery_stats()
    assert stats is not None and stats.entries_replayed <= ledger.entry_count() + 1  # nothing trimmed was read
    s.commit(t_open)
    s.run()
    msgs = set(s.msgs(T, "sub"))
    assert {"open0", "late0"} <= msgs and "gone0" not in msgs
    assert not any(m.startswith("x") and int(m[1:].split(".")[0]) % 3 == 0 for m in msgs if m)  # aborted: never
    assert len(set(m for m in msgs if m)) == 30 * 8 - 10 * 4 + 2
    s.broker.check()


def test_the_snapshot_topic_is_compacted_and_recovery_reads_one_record_per_topic() -> None:
    """Pulsar compacts system topics (threshold 0, checked every 60 s): the namespace's snapshot
    topic keeps one record per topic, so its table view, and a replay's memory, do not grow
    with every snapshot taken."""
    topics = [f"{T}-partition-{i}" for i in range(3)]
    s = v4(snapshot_max_txn_count=2)
    for r in range(41):  # 41 commits per topic: a snapshot every 2, over 2+ minutes
        for topic in topics:
            t = s.new_txn()
            s.publish(topic, f"x{r}", txn=t)
            s.commit(t)
        s.run(3_000_000)
    st = s.stats()
    snapshots = st["tb.snapshot_writes"]
    assert snapshots >= 60 and st["snapshot.compactions"] >= 2
    name = snapshot_ledger_name(T)
    stored = sum(s.durable.ledgers.open(n).entry_count() for n in s.durable.ledgers.names(name))
    assert stored == snapshots - st["snapshot.compaction_entries_dropped"]
    assert not s.durable.ledgers.exists(name) and stored < 30  # the base generation is gone
    expected = {topic: (tb(s, topic).aborted(), tb(s, topic).max_read_position()) for topic in topics}
    s.crash()
    for topic in topics:
        tb(s, topic)
    s.run()
    assert {topic: (tb(s, topic).aborted(), tb(s, topic).max_read_position()) for topic in topics} == expected
    assert s.stats()["snapshot.table_view_entries_read"] == stored
