"""The history checker: each rule on a hand-written history, silence on correct engines, and
bite on deliberately broken ones (so a clean report means something)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest

from bench.check import KINDS, CheckSummary, History, ambiguous_outcomes, check
from engine.dispatcher import DispatchMode
from engine.ports import AckKind
from engine.records import MessageId, Position
from legacy_v4 import v4_engine
from metadata_v5.engine import open_v5
from tests.harness import Combo, Durable, memory_durable
from tests.stateful.checked import CheckedSystem

T = "persistent://public/default/x"
U = "persistent://public/default/y"


# -- the rules on hand-written histories ----------------------------------------------------------


@dataclass
class _D:
    msg: str
    redelivery: bool = False


def _h() -> History:
    h = History()
    h.subscribe(T, "s")
    return h


def _pub(h: History, msg: str, pos: int, txn: str | None = None, key: str | None = None, ledger: str = T) -> None:
    h.publish(msg, T, txn, key, MessageId(ledger, Position(1 if ledger == T else 2, pos)))


def _kinds(h: History) -> list[str]:
    return sorted(v.kind for v in check(h))


def test_a_correct_history_has_no_violations() -> None:
    h = _h()
    _pub(h, "a", 0, "t1")
    _pub(h, "p", 1)
    h.end("t1", "commit")
    h.outcome("t1", "committed")
    h.deliver(T, "s", [_D("a"), _D("p")])
    h.fault("crash_broker")
    h.deliver(T, "s", [_D("p", True)])
    assert check(h) == []


def test_aborted_and_uncommitted_reads() -> None:
    h = _h()
    _pub(h, "a", 0, "t1")
    _pub(h, "b", 1, "t2")
    h.deliver(T, "s", [_D("b")])  # before t2's commit request
    h.end("t1", "abort")
    h.end("t2", "commit")
    h.outcome("t1", "aborted")
    h.outcome("t2", "committed")
    h.deliver(T, "s", [_D("a")])
    assert _kinds(h) == ["aborted_read", "out_of_order", "uncommitted_read"]
    (v,) = [v for v in check(h) if v.kind == "aborted_read"]
    assert (v.msg, v.txn, v.subscription) == ("a", "t1", "s")


def test_lost_write_and_what_does_not_count() -> None:
    h = _h()
    h.subscribe(T, "other")
    for i, m in enumerate(("p0", "p1", "p2", "p3")):
        _pub(h, m, i)
    h.ack("s", ["p1"], True, None)  # cumulative ahead of delivery: covers p0, p1
    h.ack("s", ["p2"], False, "t-aborted")  # an aborted ack covers nothing
    h.end("t-aborted", "abort")
    h.outcome("t-aborted", "aborted")
    h.deliver(T, "other", [_D(m) for m in ("p0", "p1", "p2", "p3")])
    h.deliver(T, "s", [_D("p3")])
    vs = check(h)
    assert sorted((v.kind, v.msg) for v in vs) == [("aborted_ack_not_redelivered", "p2"), ("lost_write", "p2")]


def test_torn_txn() -> None:
    h = _h()
    _pub(h, "a", 0, "t1")
    _pub(h, "b", 1, "t1")
    h.end("t1", "commit")
    h.outcome("t1", "committed")
    h.deliver(T, "s", [_D("b")])
    h.deliver(T, "s", [_D("a")])
    assert "torn_txn" in _kinds(h)
    assert [v.txn for v in check(h) if v.kind == "torn_txn"] == ["t1"]


def test_duplicates_need_a_cause() -> None:
    h = _h()
    _pub(h, "p", 0)
    h.deliver(T, "s", [_D("p")])
    h.fault("redeliver", "s")
    h.deliver(T, "s", [_D("p", True)])
    h.fault("crash_tc")  # a coordinator restart redelivers nothing
    h.deliver(T, "s", [_D("p", True)])
    assert _kinds(h) == ["duplicate"]


def test_out_of_order_per_ledger_and_per_key_across_segments() -> None:
    h = _h()
    _pub(h, "a", 0, key="k", ledger="segment://p/0")
    _pub(h, "b", 5, key="k", ledger="segment://p/1")
    _pub(h, "c", 1, key="j", ledger="segment://p/0")
    h.deliver(T, "s", [_D("b"), _D("a"), _D("c")])
    assert sorted((v.kind, v.msg) for v in check(h)) == [("out_of_order", "a")]
    h2 = _h()
    _pub(h2, "a", 0)
    _pub(h2, "b", 1)
    h2.deliver(T, "s", [_D("b"), _D("a")])
    assert _kinds(h2) == ["out_of_order"]


def test_acked_messages_must_not_come_back() -> None:
    h = _h()
    for i, m in enumerate(("p0", "p1", "p2")):
        _pub(h, m, i)
    h.deliver(T, "s", [_D("p0"), _D("p1"), _D("p2")])
    h.ack("s", ["p0"], False, "t1")  # pending...
    h.fault("crash_broker")
    h.deliver(T, "s", [_D("p0", True), _D("p1", True), _D("p2", True)])  # ...yet redelivered
    h.end("t1", "commit")
    h.outcome("t1", "committed")
    h.ack("s", ["p2"], True, None)
    h.fault("crash_broker")
    h.deliver(T, "s", [_D("p1", True)])  # covered by the cumulative ack
    assert sorted((v.kind, v.msg) for v in check(h)) == [("acked_redelivered", "p0"), ("acked_redelivered", "p1")]


def test_aborted_ack_is_redelivered_or_reacked() -> None:
    h = _h()
    _pub(h, "p0", 0)
    _pub(h, "p1", 1)
    h.deliver(T, "s", [_D("p0"), _D("p1")])
    h.ack("s", ["p0", "p1"], False, "t1")
    h.end("t1", "abort")
    h.outcome("t1", "aborted")
    h.deliver(T, "s", [_D("p0", True)])
    assert [(v.kind, v.msg) for v in check(h)] == [("aborted_ack_not_redelivered", "p1")]
    h.ack("s", ["p1"], False, None)
    assert check(h) == []


def test_unheard_commit_is_ambiguous_and_held_to_either_outcome() -> None:
    h = _h()
    h.subscribe(T, "t")
    _pub(h, "a", 0, "t1")
    h.end("t1", "commit")  # the answer was lost to a crash; the coordinator forgot the txn
    h.outcome("t1", "unknown")
    h.deliver(T, "s", [_D("a")])
    # visible on s, not on t: wrong whether t1 committed (lost on t) or aborted (read on s)
    assert [(v.kind, v.subscription) for v in check(h)] == [("torn_txn", "t")]
    assert ambiguous_outcomes(h) == ["t1"]


def test_summary_counts_and_renders() -> None:
    h = _h()
    _pub(h, "p", 0)
    h.fault("crash_broker")
    summary = CheckSummary()
    summary.add(h, check(h))
    j = summary.to_json()
    assert j["histories"] == 1 and j["faults"] == {"crash_broker": 1}
    assert j["violations"]["lost_write"] == 1 and set(j["violations"]) == set(KINDS)
    assert any("lost_write" in line for line in summary.lines())


# -- on real engines ------------------------------------------------------------------------------


class _Proxy:
    def __init__(self, inner: Any, **overrides: Any) -> None:
        self._inner = inner
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _broken(factory: Callable[[Any], Any], defect: str) -> Callable[[Any], Any]:
    def make(ctx: Any) -> Any:
        engine = factory(ctx)

        def tb(ledger: Any) -> Any:
            inner = engine.transaction_buffer(ledger)
            if defect == "reads-past-max-read":
                return _Proxy(inner, max_read_position=ledger.last_confirmed)
            if defect == "never-marks-aborts":
                return _Proxy(inner, is_txn_aborted=lambda txn, pos: False)
            return inner

        def pending(ledger: Any, sub: str, cursor: Any) -> Any:
            inner = engine.pending_ack_store(ledger, sub, cursor)
            if defect == "forgets-pending-acks":
                return _Proxy(inner, is_pending=lambda pos: False)
            return inner

        return _Proxy(engine, transaction_buffer=tb, pending_ack_store=pending)

    return make


def _v5_durable() -> Durable:
    d = memory_durable()
    d.extra["v5"], d.extra["close"] = open_v5("memory://")
    return d


DESIGNS = {
    "v4": (memory_durable, lambda d: v4_engine()),
    "v5": (_v5_durable, lambda d: d.extra["v5"]),
}


def _workload(s: CheckedSystem) -> list[Any]:
    s.subscribe(T, "sub")
    s.subscribe(U, "out")
    for i in range(3):
        s.publish(T, f"m{i}")
    s.run(100_000)
    ok, bad, late = s.new_txn(), s.new_txn(), s.new_txn()
    s.ack("sub", "m0", txn=ok)
    s.publish(U, "ok-1", txn=ok)
    s.publish(U, "ok-2", txn=ok)
    s.ack("sub", "m1", txn=bad)
    s.publish(U, "bad-1", txn=bad)
    s.publish(U, "plain")
    s.ack("sub", "m2", txn=late)
    s.redeliver_unacked(T, "sub")  # pending acks must hold
    s.run(100_000)
    s.commit(ok)
    s.abort(bad)
    s.run(2_000_000)
    s.ack("sub", "m2")
    s.abort(late)
    s.crash()
    s.run(2_000_000)
    return s.finish()


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("mode", list(DispatchMode))
def test_correct_engines_pass(design: str, mode: DispatchMode) -> None:
    durable, engine = DESIGNS[design]
    s = CheckedSystem(Combo(design, True, durable, engine), mode)
    assert _workload(s) == []
    assert s.msgs(U, "out")[:3] == ["ok-1", "ok-2", "plain"]


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize(
    "defect, expected",
    [
        ("reads-past-max-read", {"uncommitted_read", "aborted_read"}),
        ("never-marks-aborts", {"aborted_read"}),
        ("forgets-pending-acks", {"acked_redelivered"}),
    ],
)
def test_broken_engines_are_caught(design: str, defect: str, expected: set[str]) -> None:
    durable, engine = DESIGNS[design]
    s = CheckedSystem(Combo(f"{design}-{defect}", True, durable, lambda d: _broken(engine(d), defect)), DispatchMode.POLLING)
    kinds = {v.kind for v in _workload(s)}
    assert expected <= kinds, kinds


def test_a_txn_ack_ahead_of_delivery_then_aborted_is_delivered_once_in_order() -> None:
    """Regression (engine/dispatcher.py): an aborted pending ack of a message not yet read used
    to be replayed at once, past maxReadPosition, and then read again: a duplicate."""
    for design, (durable, engine) in DESIGNS.items():
        s = CheckedSystem(Combo(design, True, durable, engine), DispatchMode.POLLING)
        s.subscribe(T, "sub")
        t1 = s.new_txn()
        s.publish(T, "t1-a", txn=t1)
        s.publish(T, "m0")
        s.run(100_000)
        t2 = s.new_txn()
        s.ack("sub", "m0", txn=t2)
        s.abort(t2)
        s.run(100_000)
        assert s.msgs(T, "sub") == [], design
        s.commit(t1)
        s.run(1_000_000)
        assert s.msgs(T, "sub") == ["t1-a", "m0"], design
        assert s.finish() == []


def test_cumulative_txn_ack_then_abort() -> None:
    s = CheckedSystem(Combo("v4", True, memory_durable, lambda d: v4_engine()), DispatchMode.NOTIFY)
    s.subscribe(T, "sub")
    for i in range(3):
        s.publish(T, f"m{i}")
    s.run(100_000)
    t = s.new_txn()
    s.ack("sub", "m1", kind=AckKind.CUMULATIVE, txn=t)
    s.abort(t)
    s.run(1_000_000)
    s.redeliver_unacked(T, "sub")
    s.run(1_000_000)
    assert s.finish() == []
