"""v5-specific behaviour of the PIP-text design (``Variant.PIP``) and the state-events ablation:
what PIP-473 promises (and where the PIP text falls short). The shipped design: test_v5_shipped.py."""

from __future__ import annotations

import pytest

from engine.dispatcher import DispatchMode
from engine.errors import ConfigError, ForeignTxnId, InvalidTxnState, TxnConflict
from engine.ids import Design, TxnID
from engine.memledger import MemoryLedgerFactory
from engine.ports import TxnStatus
from engine.scripted import reader_after_gc, slow_participant
from metadata_v5.engine import V5Engine
from metadata_v5.store.memory import MemoryMetadataStore
from metadata_v5.options import V5Options
from tests.harness import Combo, Durable, System

T = "persistent://public/default/x"
S = "topic://public/default/s"


def v5(mode: DispatchMode = DispatchMode.NOTIFY, **opts: object) -> System:
    opts.setdefault("variant", "pip")
    options = V5Options(**opts)  # type: ignore[arg-type]

    def durable() -> Durable:
        return Durable(MemoryLedgerFactory(max_entries_per_ledger=64), {"store": MemoryMetadataStore.open()})

    combo = Combo("v5", True, durable, lambda d: (lambda ctx: V5Engine(ctx, d.extra["store"].reopen(), options)))
    return System(combo, mode)


def test_commit_on_a_segment_sealed_mid_txn_completes_at_once() -> None:
    s = v5()
    s.subscribe(S, "sub")
    txn = s.new_txn()
    s.publish(S, "in-txn", txn=txn, key="k")
    s.broker.split(S)
    s.publish(S, "after-split", key="k")
    s.run(100_000)
    assert s.msgs(S, "sub") == []  # the open txn pins the sealed parent; children wait for it
    s.commit(txn)
    s.run(20_000)  # one CAS + one watch delay, then reads: well under 20 ms
    assert s.outcomes[txn] is TxnStatus.COMMITTED
    assert s.msgs(S, "sub") == ["in-txn", "after-split"]
    assert s.stats().get("ledger.appends.marker", 0) == 0


@pytest.mark.parametrize("participants", [1, 8, 32])
def test_end_txn_is_one_cas_whatever_the_participants(participants: int) -> None:
    costs = {}
    for variant in ("pip", "state-events"):
        s = v5(variant=variant)
        topics = [f"persistent://public/default/p{i}" for i in range(participants)]
        for t in topics:
            s.subscribe(t, "sub")
        txn = s.new_txn()
        for i, t in enumerate(topics):
            s.publish(t, f"m{i}", txn=txn)
        s.run(10_000)
        before = s.stats()
        s.commit(txn)
        s.run(1_000_000)
        after = s.stats()
        costs[variant] = (after["meta.cas"] - before["meta.cas"], after.get("tc.event_writes", 0))
        assert sorted(s.msgs(t, "sub")[0] for t in topics) == sorted(f"m{i}" for i in range(participants))
    assert costs["pip"] == (1, 0)
    assert costs["state-events"] == (1, participants)


def test_v4_ids_are_refused_and_use_after_end_is_an_error() -> None:
    s = v5()
    with pytest.raises(ForeignTxnId, match="v4 coordinator"):
        s.commit(TxnID(Design.V4, 0, 0))
    with pytest.raises(ForeignTxnId):
        s.publish(T, "m", txn=TxnID(Design.V4, 0, 0))
    txn = s.new_txn()
    s.publish(T, "m1", txn=txn)
    s.commit(txn)
    s.run(10_000)  # the header watch has reached the buffer
    with pytest.raises(TxnConflict, match="not open"):
        s.publish(T, "m2", txn=txn)
    with pytest.raises(InvalidTxnState):
        s.abort(txn)
    assert s.stats()["tc.header_cas.reject"] == 1


def test_late_write_race_the_cache_first_check_lets_through() -> None:
    """PIP-473's publish path reads the header cache-first, so a write that arrives after the
    commit CAS but before the header watch is accepted into the committed txn (v4's coordinator
    refuses ADD_PARTITION once the txn is COMMITTING)."""
    s = v5()
    s.subscribe(T, "sub")
    txn = s.new_txn()
    s.publish(T, "m1", txn=txn)
    s.commit(txn)
    s.publish(T, "late", txn=txn)  # same instant as the CAS: cache still says OPEN
    s.run(1_000_000)
    assert s.msgs(T, "sub") == ["m1", "late"]
    assert s.broker.transaction_buffer(T).stats.get("rejected_not_open", 0) == 0


def test_timeout_sweep_aborts_expired_txns() -> None:
    s = v5(timeout_sweep_ms=1_000)
    s.subscribe(T, "sub")
    txn = s.new_txn(timeout_ms=500)
    s.publish(T, "doomed", txn=txn)
    s.publish(T, "plain")
    s.run(3_000_000)
    assert s.broker.coordinator().status(txn) is TxnStatus.ABORTED
    assert s.msgs(T, "sub") == ["plain"]
    assert s.stats()["tc.timeouts"] == 1


def _slow_participant(gc: str) -> System:
    """A txn acks m0 and commits; the subscription's broker dies before the watch fires and
    stays away past the retention window while the coordinator's GC runs."""
    s = v5(gc=gc, retention_ms=1_000, gc_sweep_ms=500)
    slow_participant(s, T, "sub", away_us=5_000_000, back_us=100_000)
    return s


def test_pip_gc_loses_a_slow_participants_committed_ack_and_safe_gc_does_not() -> None:
    pip = _slow_participant("force")
    assert pip.stats()["tc.gc.forced_op_deletes"] == 1
    assert pip.msgs(T, "sub")[2:] == ["m0", "m1"]  # the committed ack of m0 is gone: redelivered
    safe = _slow_participant("wait")
    assert safe.msgs(T, "sub")[2:] == ["m1"]  # m0's ack was applied on recovery
    assert safe.stats().get("tc.gc.forced_op_deletes", 0) == 0


def _reader_after_gc(gc: str) -> list[str | None]:
    s = v5(gc=gc, retention_ms=1_000, gc_sweep_ms=500)
    reader_after_gc(s, T, "new-reader")
    return s.msgs(T, "new-reader")


def test_gc_vs_retention_new_reader_of_old_data() -> None:
    # PIP as written: unknown txn ids fall back to "aborted", so committed data vanishes.
    assert _reader_after_gc("force") == ["plain"]
    # Safe GC keeps abort ranges while data is retained: exactly the committed data.
    assert _reader_after_gc("wait") == ["c1", "plain"]


def test_recovery_reads_do_not_grow_with_the_ledger() -> None:
    reads = []
    for n in (100, 2_000):
        s = v5()
        for i in range(n):
            s.publish(T, f"m{i}")
        txn = s.new_txn()
        s.publish(T, "open", txn=txn)
        s.crash()
        s.subscribe(T, "sub")
        s.run(1_000_000)
        stats = [r for r in s.broker.recovery_stats() if r.component.startswith("tb-v5")]
        reads.append((stats[0].entries_replayed, stats[0].records_read, stats[0].queries))
        assert s.msgs(T, "sub") == [f"m{i}" for i in range(n)]  # the open txn pins 'open' only
    assert reads[0] == reads[1] == (0, 2, 2)


def test_counts_and_invariants() -> None:
    s = v5(mode=DispatchMode.POLLING)
    s.subscribe(T, "sub")
    for i in range(3):
        txn = s.new_txn()
        s.publish(T, f"m{i}a", txn=txn)
        s.publish(T, f"m{i}b", txn=txn)
        s.broker.check()
        (s.commit if i != 1 else s.abort)(txn)
        s.run(50_000)
        s.broker.check()
    st = s.stats()
    assert st["meta.op_writes"] == 6 and st["tc.header_cas.ok"] == 3
    assert st["tb.materialised.committed"] == 2 and st["tb.materialised.aborted"] == 1
    assert s.msgs(T, "sub") == ["m0a", "m0b", "m2a", "m2b"]
    engine = s.broker.engine
    assert isinstance(engine, V5Engine) and engine.outstanding_op_records() == 0


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown v5 variant"):
        V5Options(variant="gossip")
    with pytest.raises(ConfigError, match="unknown v5 options bogus"):
        V5Options.from_kwargs(bogus=1)


@pytest.mark.parametrize("gc", ["force", "wait"])
def test_participants_forget_decided_txns_once_their_data_is_trimmed(gc: str) -> None:
    # Ledgers roll over every 64 entries here and consumed ones are trimmed. What a buffer or a
    # pending-ack store remembers of decided txns must shrink with them, or a long replay's
    # memory grows with the trace (master keeps its cache bounded by the open txns).
    s = v5(gc=gc)
    s.subscribe(T, "sub")
    for i in range(300):
        txn = s.new_txn()
        s.publish(T, f"t{i}", txn=txn)
        (s.abort if i % 3 == 0 else s.commit)(txn)
        s.run(20_000)
        if i % 3:  # a committed message: ack it in a txn of its own
            ack = s.new_txn()
            s.ack("sub", f"t{i}", txn=ack)
            s.commit(ack)
            s.run(20_000)
    s.run(1_000_000)
    s.broker.check()
    tb = s.broker.transaction_buffer(T)
    pending = s.broker.pending_ack_store(T, "sub")
    st = s.stats()
    assert st["ledger.trimmed_ledgers"] >= 3 and st["pending_ack.materialised.committed"] == 200
    assert st["tb.decided_forgotten"] >= 3 * 64
    assert len(tb._headers.states) <= 64 and len(tb._aborted) <= 32  # type: ignore[attr-defined]
    assert pending._headers.states == {}  # type: ignore[attr-defined]
    aborted_records = len(s.durable.extra["store"].list_keys("/txn-aborted/"))
    if gc == "wait":
        assert st["tb.aborted_range_deletes"] >= 64 and aborted_records <= 32
    else:
        assert aborted_records == 0


def test_a_gc_sweep_collects_everything_due_not_one_page() -> None:
    # Master's sweeps scan the whole range. With more txns ending per sweep interval than an
    # index page holds, a one-page sweep would fall behind for good (and the store would grow
    # with the trace even with a short retention).
    s = v5(sweep_limit=7, retention_ms=1_000, gc_sweep_ms=10_000)
    for i in range(40):
        txn = s.new_txn()
        s.publish(T, f"m{i}", txn=txn)
        s.commit(txn)
    s.run(12_000_000)  # one GC sweep past the retention of all 40
    st = s.stats()
    assert st["tc.gc.headers_deleted"] == 40
    assert st["tc.index_queries"] >= 40 // 7 + 1  # page by page
    assert s.durable.extra["store"].list_keys("/txn/") == []


def test_the_gc_backlog_is_what_retention_keeps() -> None:
    s = v5(retention_ms=5_000, gc_sweep_ms=10_000)
    for i in range(3):
        txn = s.new_txn()
        s.publish(T, f"m{i}", txn=txn)
        s.commit(txn)
    open_txn = s.new_txn()
    s.publish(T, "open", txn=open_txn)
    s.run(1_000_000)
    assert s.broker.backlog() == {"gc.finished_headers_kept": 3, "gc.op_records_outstanding": 1}
    s.run(10_000_000)  # a sweep past the retention
    assert s.broker.backlog() == {"gc.finished_headers_kept": 0, "gc.op_records_outstanding": 1}


def test_index_query_latency_is_read_off_the_injected_clock() -> None:
    # Sweeps page through the deadline and final-state indexes; the PIP's query-latency
    # histogram gets each page's latency from the engine's clock: in virtual time a call takes
    # none, so it is the modelled list latency (0.5 ms), never a wall-clock reading.
    s = v5(timeout_sweep_ms=1_000, gc_sweep_ms=1_000)
    s.new_txn()  # the coordinator recovers: its first timeout sweep
    s.run(3_500_000)  # and three more rounds of each sweep
    engine = s.broker.engine
    assert isinstance(engine, V5Engine)
    registry = engine.metrics.registry
    count = registry.get_sample_value("pulsar_txn_metadata_store_index_query_seconds_count")
    total = registry.get_sample_value("pulsar_txn_metadata_store_index_query_seconds_sum")
    assert count == 1 + 3 + 3
    assert total == pytest.approx(count * 0.0005)
