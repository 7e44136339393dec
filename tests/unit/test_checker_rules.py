"""One planted violation per rule of :mod:`bench.check.rules`: a hand-built history that breaks
exactly that rule and no other; a clean history that breaks none; and the outcomes the checker
infers rather than hears (``ambiguous_outcome``), counted apart and judged under either outcome."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from bench.check import KINDS, RULES, CheckSummary, History, ambiguous_outcomes, build, check
from bench.report.report import check_section
from engine.records import MessageId, Position

T = "persistent://public/default/x"


@dataclass
class _D:
    msg: str
    redelivery: bool = False


def _h(*subs: str) -> History:
    h = History()
    for sub in subs or ("s",):
        h.subscribe(T, sub)
    return h


def _pub(h: History, msg: str, pos: int, txn: str | None = None, key: str | None = None, ledger: str = T) -> None:
    h.publish(msg, T, txn, key, MessageId(ledger, Position(1, pos)))


def _commit(h: History, txn: str) -> None:
    h.end(txn, "commit")
    h.heard(txn, "committed")
    h.outcome(txn, "committed")


def _abort(h: History, txn: str) -> None:
    h.end(txn, "abort")
    h.outcome(txn, "aborted")


# -- one planted history per rule -----------------------------------------------------------------


def _aborted_read() -> History:
    h = _h()
    _pub(h, "a", 0, "t1")
    _abort(h, "t1")
    h.deliver(T, "s", [_D("a")])
    return h


def _uncommitted_read() -> History:
    h = _h()
    _pub(h, "a", 0, "t1")
    h.deliver(T, "s", [_D("a")])  # before the client asked to commit
    _commit(h, "t1")
    return h


def _lost_write() -> History:
    h = _h()
    _pub(h, "p", 0)
    return h


def _torn_txn() -> History:
    h = _h()
    _pub(h, "a", 0, "t1")
    _pub(h, "b", 1, "t1")
    _commit(h, "t1")
    h.deliver(T, "s", [_D("b")])  # a is neither delivered nor acked yet
    h.ack("s", ["a"], False, None)  # acked ahead afterwards: not lost, never out of order
    return h


def _duplicate() -> History:
    h = _h()
    _pub(h, "p", 0)
    h.deliver(T, "s", [_D("p")])
    h.fault("crash_tc")  # a coordinator restart rewinds no cursor
    h.deliver(T, "s", [_D("p", True)])
    return h


def _out_of_order() -> History:
    h = _h()
    _pub(h, "a", 0)
    _pub(h, "b", 1)
    h.deliver(T, "s", [_D("b"), _D("a")])
    return h


def _acked_redelivered() -> History:
    h = _h()
    _pub(h, "p", 0)
    h.deliver(T, "s", [_D("p")])
    h.ack("s", ["p"], False, None)
    h.fault("crash_broker")  # a cause for a redelivery, so not a duplicate; but p was acked
    h.deliver(T, "s", [_D("p", True)])
    return h


def _aborted_ack_not_redelivered() -> History:
    h = _h()
    _pub(h, "p", 0)
    h.deliver(T, "s", [_D("p")])
    h.ack("s", ["p"], False, "t1")
    _abort(h, "t1")  # p should come back, and never does
    return h


PLANTED: dict[str, Callable[[], History]] = {
    "aborted_read": _aborted_read,
    "uncommitted_read": _uncommitted_read,
    "lost_write": _lost_write,
    "torn_txn": _torn_txn,
    "duplicate": _duplicate,
    "out_of_order": _out_of_order,
    "acked_redelivered": _acked_redelivered,
    "aborted_ack_not_redelivered": _aborted_ack_not_redelivered,
}


def test_every_kind_has_one_rule_and_one_planted_history() -> None:
    assert tuple(RULES) == KINDS and set(PLANTED) == set(KINDS)
    assert all("Pulsar" in (rule.__doc__ or "") for rule in RULES.values())  # each names its guarantee


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_violation_breaks_its_rule_and_no_other(kind: str) -> None:
    h = PLANTED[kind]()
    ix = build(h)
    found = {k: [v.kind for v in rule(ix)] for k, rule in RULES.items()}
    assert found == {k: ([kind] if k == kind else []) for k in KINDS}
    assert [v.kind for v in check(h)] == [kind]
    assert ambiguous_outcomes(h) == []


def test_a_clean_history_breaks_no_rule() -> None:
    h = _h("s", "late")
    _pub(h, "a", 0, "t1")
    _pub(h, "b", 1, "t1")
    _pub(h, "p", 2)
    _pub(h, "x", 3, "t2")
    _commit(h, "t1")
    _abort(h, "t2")
    h.deliver(T, "s", [_D("a"), _D("b"), _D("p")])
    h.ack("s", ["a"], False, None)
    h.ack("s", ["b"], False, "t3")  # pending, then aborted: b comes back
    _abort(h, "t3")
    h.deliver(T, "s", [_D("b", True)])
    h.ack("s", ["p"], True, "t4")  # cumulative, committed: covers a, b, p from the commit on
    _commit(h, "t4")
    h.fault("crash_broker")
    h.deliver(T, "late", [_D("a"), _D("b"), _D("p")])
    h.fault("redeliver", "late")
    h.deliver(T, "late", [_D("p", True)])
    assert check(h) == []


def test_a_write_behind_a_txn_still_open_is_blocked_not_lost() -> None:
    h = _h()
    _pub(h, "o", 0, "t-open")  # never ended: maxReadPosition stays at o
    _pub(h, "p", 1)
    h.outcome("t-open", "open")
    assert check(h) == []
    _pub(h, "q", 0, ledger="other-ledger")  # another ledger is not held back
    assert [(v.kind, v.msg) for v in check(h)] == [("lost_write", "q")]


@pytest.mark.parametrize("latest", [True, False])
def test_a_latest_subscription_is_owed_only_what_was_published_after_it_subscribed(latest: bool) -> None:
    """SubscriptionInitialPosition.Latest (a real broker's subscriptions): a cursor starts at the
    last confirmed entry, and a txn's message is stored when published (visible at the commit), so
    a subscription opened after m1 and p1 were stored (at the same instant, earlier in the history)
    is not owed them, while p2, stored after it subscribed, is. The model's subscriptions start at
    the earliest entry: owed everything."""
    h = _h("s")
    _pub(h, "m1", 0, "t1")  # behind an open txn
    _pub(h, "p1", 1)
    h.subscribe(T, "late", latest=latest)
    _pub(h, "m2", 2, "t1")
    _pub(h, "p2", 3)
    _commit(h, "t1")
    h.deliver(T, "s", [_D("m1"), _D("p1"), _D("m2"), _D("p2")])
    h.deliver(T, "late", [_D("m2")])  # m2 without m1: m1 was stored before "late" existed
    found = [(v.kind, v.subscription, v.msg) for v in check(h)]
    if latest:
        assert found == [("lost_write", "late", "p2")]
    else:
        assert found == [("lost_write", "late", "m1"), ("lost_write", "late", "p1"), ("lost_write", "late", "p2"),
                         ("torn_txn", "late", "m2")]


# -- outcomes inferred, not heard -----------------------------------------------------------------


def _unheard(deliver_on: tuple[str, ...]) -> History:
    h = _h("s", "t")
    _pub(h, "a", 0, "t1")
    _pub(h, "b", 1, "t1")
    h.end("t1", "commit")  # the answer was lost to a crash; the coordinator forgot the txn
    h.outcome("t1", "unknown")
    for sub in deliver_on:
        h.deliver(T, sub, [_D("a"), _D("b")])
    return h


@pytest.mark.parametrize("deliver_on", [(), ("s", "t")])
def test_an_unheard_commit_is_counted_not_decided(deliver_on: tuple[str, ...]) -> None:
    """Visible everywhere (it committed) or nowhere (it aborted): either is fine."""
    h = _unheard(deliver_on)
    assert check(h) == []
    assert ambiguous_outcomes(h) == ["t1"]
    summary = CheckSummary()
    summary.add(h, check(h))
    j = summary.to_json()
    assert (j["ambiguous_outcome"], j["total_violations"]) == (1, 0)
    assert any("ambiguous_outcome" in line for line in summary.lines())


def test_an_unheard_commit_seen_on_one_subscription_only_is_torn() -> None:
    h = _unheard(("s",))
    assert [(v.kind, v.msg, v.subscription) for v in check(h)] == [("torn_txn", "a", "t")]


def test_an_unheard_commit_delivered_early_is_still_an_uncommitted_read() -> None:
    h = _h()
    _pub(h, "a", 0, "t1")
    h.deliver(T, "s", [_D("a")])
    h.end("t1", "commit")
    h.outcome("t1", "unfinished")
    assert [v.kind for v in check(h)] == ["uncommitted_read"]


def test_heard_answers_and_abort_requests_decide() -> None:
    heard = _h()
    _pub(heard, "a", 0, "t1")
    heard.end("t1", "commit")
    heard.heard("t1", "committed")  # the client heard it; the coordinator has since forgotten it
    heard.outcome("t1", "unknown")
    assert [v.kind for v in check(heard)] == ["lost_write"] and ambiguous_outcomes(heard) == []
    asked_abort = _h()
    _pub(asked_abort, "a", 0, "t1")
    asked_abort.end("t1", "abort")  # an abort request can only end aborted
    asked_abort.outcome("t1", "unknown")
    asked_abort.deliver(T, "s", [_D("a")])
    assert [v.kind for v in check(asked_abort)] == ["aborted_read"] and ambiguous_outcomes(asked_abort) == []


def test_an_ambiguous_pending_ack_is_not_held_against_a_redelivery() -> None:
    """It may have aborted (a timeout) at any time, which redelivers what it covered."""
    h = _h()
    _pub(h, "p", 0)
    h.deliver(T, "s", [_D("p")])
    h.ack("s", ["p"], False, "t1")
    h.end("t1", "commit")
    h.outcome("t1", "unknown")
    h.deliver(T, "s", [_D("p", True)])
    assert check(h) == [] and ambiguous_outcomes(h) == ["t1"]


def test_an_unheard_commit_held_back_by_an_open_txn_elsewhere_is_not_torn() -> None:
    h = _h("s", "t")
    _pub(h, "o", 0, "t-open", ledger="other")  # never ended: holds back what follows on "other"
    _pub(h, "a", 0, "t1")
    _pub(h, "b", 1, "t1", ledger="other")
    h.end("t1", "commit")
    h.outcome("t1", "unknown")
    h.outcome("t-open", "open")
    h.deliver(T, "s", [_D("a")])
    h.deliver(T, "t", [_D("a")])
    assert check(h) == [] and ambiguous_outcomes(h) == ["t1"]


def test_the_report_shows_the_ambiguous_count_beside_the_violations(tmp_path: Path) -> None:
    summary = CheckSummary()
    h = _unheard(())
    summary.add(h, check(h))
    summary.write(tmp_path / "check.json")
    _title, _cols, rows, _note = check_section(tmp_path / "check.json")
    (row,) = [r for r in rows if "ambiguous_outcome" in r.metric]
    assert row.values == {"value": 1}
    assert all(r.values == {"value": 0} for r in rows if r.section == "Violations")
