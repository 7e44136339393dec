"""v4 -> v5 migration of a topic's transactional state (bench/scenarios/migrate.py): a v5 reader of the
old data sees exactly what a v4 reader sees; refusals; rollback until the first v5 txn write."""

from __future__ import annotations

import pytest

from bench.scenarios.migrate import MigrationRefused, migrate, plan_migration
from engine.broker import Broker
from engine.dispatcher import DispatchMode
from engine.ids import Design
from engine.ports import TxnStatus
from legacy_v4 import v4_engine
from metadata_v5.engine import V5Engine
from metadata_v5.store.memory import MemoryMetadataStore
from metadata_v5.options import GcMode, V5Options
from tests.harness import Combo, System, memory_durable

T = "persistent://public/default/old"


def _v4_history(mode: DispatchMode = DispatchMode.NOTIFY) -> tuple[System, object]:
    """Committed, aborted and plain data, a consumer part-way, and one txn still open."""
    s = System(Combo("v4", True, memory_durable, lambda d: v4_engine(snapshot_max_txn_count=2)), mode)
    s.subscribe(T, "sub")
    for i in range(6):
        txn = s.new_txn()
        s.publish(T, f"t{i}a", txn=txn)
        s.publish(T, f"p{i}")
        s.publish(T, f"t{i}b", txn=txn)
        (s.abort if i % 3 == 1 else s.commit)(txn)
        s.run(20_000)
    s.ack("sub", *[m for m in s.unique_msgs(T, "sub")[:4] if m is not None])
    opened = s.new_txn(timeout_ms=30_000)
    s.publish(T, "open-a", txn=opened)
    s.publish(T, "p-after")
    s.publish(T, "open-b", txn=opened)
    s.run(1_000_000)
    return s, opened


def _fingerprint(s: System) -> dict[str, object]:
    """Every v4 ledger's entries and cursors: what rollback depends on."""
    ledgers = s.durable.ledgers
    out: dict[str, object] = {}
    for name in ledgers.names(""):
        ml = ledgers.open(name)
        entries = ml.read(ml.first_position(), ml.last_confirmed(), 1_000_000)
        out[name] = ([(str(e.position), e.data.msg, str(e.data.txn), e.data.marker) for e in entries],
                     {c: ml.load_cursor(c) for c in ml.cursor_names()})
    return out


def _v5_broker(s: System, store: MemoryMetadataStore, **opts: object) -> Broker:
    # migrated data is the PIP design's (op records with positions, abort ranges): 5.0.1 has no
    # migration of txn state (PULSAR5_CODE.md §5.1), so its readers run the PIP variant
    options = V5Options(variant="pip", **opts)  # type: ignore[arg-type]
    return Broker(s.sched, s.durable.ledgers, s.config, lambda ctx: V5Engine(ctx, store.reopen(), options))


def _read_all(s: System, broker: Broker, sub: str, us: int = 1_000_000) -> list[str | None]:
    got: list = []
    broker.subscribe(T, sub, got.extend)
    s.run(us)
    return [d.msg for d in got]


@pytest.mark.parametrize("gc", [GcMode.WAIT, GcMode.FORCE])
def test_v5_reader_of_migrated_data_sees_what_a_v4_reader_sees(gc: GcMode) -> None:
    s, opened = _v4_history()
    v4_fresh = _read_all(s, s.broker, "fresh-v4")
    v4_sub = s.unique_msgs(T, "sub")
    assert "t1a" not in v4_fresh and v4_fresh[-1] == "t5b"  # aborted skipped; open txn pins the rest
    s.broker.crash()
    before = _fingerprint(s)
    store = MemoryMetadataStore.open()
    result = migrate(s.durable.ledgers, [T], store.reopen(), gc=gc)
    assert (len(result.plan.committed), len(result.plan.aborted), len(result.plan.open)) == (4, 2, 1)
    assert result.op_records == 2 and _fingerprint(s) == before  # v4 data untouched
    b5 = _v5_broker(s, store, gc=gc, timeout_sweep_ms=1_000)
    assert _read_all(s, b5, "fresh-v5", 100_000) == v4_fresh
    sub_after: list = []
    b5.subscribe(T, "sub", sub_after.extend)  # the old subscription resumes from its cursor
    s.run(100_000)
    assert [d.msg for d in sub_after] == [m for m in v4_sub if m not in s.unique_msgs(T, "sub")[:4]]
    # The open txn times out under v5 as it would have under v4: its entries are skipped.
    s.run(40_000_000)
    assert b5.coordinator().status(opened.__class__(Design.V5, opened.most_bits, opened.least_bits)) is TxnStatus.ABORTED
    tail = _read_all(s, b5, "late-v5")
    assert tail == v4_fresh + ["p-after"]
    # ... and new v5 txns never reuse a migrated id.
    assert b5.new_txn().least_bits > opened.least_bits


def test_v4_timeout_gives_the_same_tail() -> None:
    s, _ = _v4_history()
    s.run(40_000_000)
    assert _read_all(s, s.broker, "late-v4")[-1] == "p-after"
    assert "open-a" not in _read_all(s, s.broker, "late-v4b")


def test_refused_while_a_txn_is_committing_and_nothing_is_written() -> None:
    s = System(Combo("v4", True, memory_durable, lambda d: v4_engine()), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    txn = s.new_txn()
    s.publish(T, "x", txn=txn)
    s.commit(txn)  # COMMITTING is logged at once; the marker lands a round trip later
    s.broker.crash()
    store = MemoryMetadataStore.open()
    with pytest.raises(MigrationRefused, match="committing"):
        migrate(s.durable.ledgers, [T], store)
    assert store.list_keys("/") == []


def test_refused_when_an_open_txn_holds_pending_acks() -> None:
    s = System(Combo("v4", True, memory_durable, lambda d: v4_engine()), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    s.publish(T, "m")
    s.run(10_000)
    txn = s.new_txn()
    s.ack("sub", "m", txn=txn)
    s.broker.crash()
    with pytest.raises(MigrationRefused, match="pending acks"):
        plan_migration(s.durable.ledgers, [T])


def test_rollback_works_until_the_first_v5_txn_write() -> None:
    s, _ = _v4_history()
    v4_fresh = _read_all(s, s.broker, "fresh-v4")
    s.broker.crash()
    store = MemoryMetadataStore.open()
    migrate(s.durable.ledgers, [T], store.reopen())
    b5 = _v5_broker(s, store)
    b5.publish(T, "plain-under-v5", 100)  # non-transactional: still reversible
    s.run(100_000)
    b5.crash()
    back = Broker(s.sched, s.durable.ledgers, s.config, v4_engine(snapshot_max_txn_count=2))
    assert _read_all(s, back, "rollback") == v4_fresh  # same view (the open txn still pins)
    back.crash()
    b5 = _v5_broker(s, store)
    txn = b5.new_txn(600_000)
    b5.publish(T, "v5-txn", 100, txn=txn)
    b5.crash()
    with pytest.raises(MigrationRefused, match="already has v5 transactions"):
        plan_migration(s.durable.ledgers, [T])


def test_cli_refuses_an_unknown_topic_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    assert main(["migrate", "--topic", "persistent://public/default/none", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no ledger" in err


def test_an_open_txn_that_times_out_after_migration_stays_aborted_after_gc() -> None:
    """The open v4 txn is aborted by the v5 timeout sweep; once GC has collected its header, a
    reader of the old data still skips its entries (the abort range keeps the v4 id)."""
    s, opened = _v4_history()
    s.broker.crash()
    store = MemoryMetadataStore.open()
    migrate(s.durable.ledgers, [T], store.reopen(), gc=GcMode.WAIT)
    b5 = _v5_broker(s, store, gc=GcMode.WAIT, timeout_sweep_ms=1_000, gc_sweep_ms=1_000, retention_ms=1_000)
    b5.transaction_buffer(T)
    s.run(40_000_000)  # the 30 s timeout passes, the sweep aborts it, GC collects the header
    assert b5.engine is not None and b5.engine.stats()["tc.gc.headers_deleted"] >= 1
    b5.crash()
    late = _v5_broker(s, store, gc=GcMode.WAIT)
    got = _read_all(s, late, "late-reader")
    assert "open-a" not in got and "open-b" not in got
    assert "p-after" in got
