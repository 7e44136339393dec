"""One planted bug per hand-tuned structure: its ``_check()`` passes on a healthy state, then
fails once one invariant is broken the way a slip in its fast code would break it; a bug in a
part is found by ``Broker._check()`` too (it recurses)."""

from __future__ import annotations

import heapq
from typing import Any

import pytest

from engine.clock import Timer
from engine.dispatcher import DispatchMode
from engine.ids import TxnID
from engine.memledger import MemoryLedgerFactory
from legacy_v4 import v4_engine
from metadata_v5.engine import V5Engine
from metadata_v5.store.memory import MemoryMetadataStore
from metadata_v5.options import V5Options
from tests.harness import Combo, Durable, System, memory_durable

T = "persistent://public/default/inv"


def _v4() -> System:
    return System(Combo("v4", True, memory_durable, lambda d: v4_engine()), DispatchMode.NOTIFY)


def _v5(variant: str) -> System:
    options = V5Options(variant=variant)  # type: ignore[arg-type]

    def durable() -> Durable:
        return Durable(MemoryLedgerFactory(max_entries_per_ledger=64), {"store": MemoryMetadataStore.open()})

    return System(Combo("v5", True, durable, lambda d: (lambda ctx: V5Engine(ctx, d.extra["store"].reopen(), options))),
                  DispatchMode.NOTIFY)


def _busy(s: System) -> TxnID:
    """m0..m3 delivered, m2 acked alone (a pending individual ack), a txn open with one entry."""
    s.subscribe(T, "sub")
    for i in range(4):
        s.publish(T, f"m{i}")
    s.run(100_000)
    s.ack("sub", "m2")
    txn = s.new_txn()
    s.publish(T, "x", txn=txn)
    s.run(100_000)
    s.broker._check()
    return txn


def _planted(part: Any, s: System, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        part._check()
    with pytest.raises(AssertionError, match=match):
        s.broker._check()


def test_cursor_check_finds_a_duplicate_individual_ack() -> None:
    s = _v4()
    _busy(s)
    cursor = s.broker.cursor(T, "sub")
    cursor._acked.append(cursor._acked[0])  # an insert that skipped its bisect
    _planted(cursor, s, "not strictly sorted")


def test_cursor_check_finds_an_unfolded_ack() -> None:
    s = _v4()
    _busy(s)
    cursor = s.broker.cursor(T, "sub")
    cursor._mark_delete = s.ids["m1"].position  # m2 now directly follows it: _advance was skipped
    with pytest.raises(AssertionError, match="not folded"):
        cursor._check()


def test_ledger_check_finds_a_stale_current_list() -> None:
    s = _v4()
    _busy(s)
    ml = s.broker.managed_ledger(T)
    ml._d.current = list(ml._d.current)  # type: ignore[attr-defined]  # a rollover that forgot to repoint the append list
    _planted(ml, s, "current is not the last ledger")


def test_scheduler_check_finds_a_timer_due_in_the_past() -> None:
    s = _v4()
    _busy(s)
    now = s.sched.now_us()
    s.sched._seq += 1
    heapq.heappush(s.sched._queue, (now - 1, s.sched._seq, Timer(now - 1, print, ())))  # an unclamped push
    _planted(s.sched, s, "before now")


def test_v4_coordinator_check_finds_an_open_txn_without_a_deadline() -> None:
    s = _v4()
    _busy(s)
    service = s.broker.coordinator()
    tc = service.coordinators[0]  # type: ignore[attr-defined]
    tc._deadlines.clear()  # a new txn whose timeout was never tracked
    with pytest.raises(AssertionError, match="no timeout deadline"):
        tc._check()
    _planted(service, s, "no timeout deadline")


def test_v4_buffer_check_finds_max_read_past_an_open_txn() -> None:
    s = _v4()
    _busy(s)
    tb = s.broker.transaction_buffer(T)
    tb._max_read = s.broker.managed_ledger(T).last_confirmed()  # type: ignore[attr-defined]  # a normal publish that ignored the open txn
    _planted(tb, s, "maxReadPosition")


def test_v5_coordinator_check_finds_a_sweep_that_stopped_rearming() -> None:
    s = _v5("pip")
    _busy(s)
    tc = s.broker.coordinator()
    tc._timers["gc"].cancel()  # type: ignore[attr-defined]
    _planted(tc, s, "gc sweep")


def test_shipped_coordinator_check_finds_a_registration_after_the_answer() -> None:
    s = _v5("shipped")
    txn = _busy(s)
    tc = s.broker.coordinator()
    tc._answered.add(txn)  # type: ignore[attr-defined]
    _planted(tc, s, "registered after their answer")


def test_pip_buffer_check_finds_its_txn_maps_disagreeing() -> None:
    s = _v5("pip")
    txn = _busy(s)
    tb = s.broker.transaction_buffer(T)
    tb._last.pop(txn)  # type: ignore[attr-defined]
    _planted(tb, s, "txn maps disagree")


def test_shipped_buffer_check_finds_a_stale_watermark_flag() -> None:
    s = _v5("shipped")
    _busy(s)
    tb = s.broker.transaction_buffer(T)
    assert not tb._tail  # type: ignore[attr-defined]
    tb._watermark_queued = True  # type: ignore[attr-defined]  # a persist that never cleared it: coalesces all later ones away
    _planted(tb, s, "watermark flag is stale")


def test_shipped_buffer_check_finds_an_open_txn_missing_from_the_open_index() -> None:
    s = _v5("shipped")
    txn = _busy(s)
    tb = s.broker.transaction_buffer(T)
    tb._open.pop(txn)  # type: ignore[attr-defined]  # a reconcile would never read its header again
    _planted(tb, s, "OPEN index")
