"""Transactional behaviour every transaction engine must show, in both dispatch modes.

Written once against the :class:`~tests.harness.System` / broker API only: every engine that
registers a transactional combo (``tests/combos.py``) must deliver exactly this. Engine-specific
behaviour (v4's sealed-segment stall, write counts) lives in ``tests/unit``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from engine.errors import ForeignTxnId, InvalidTxnState, TxnConflict, TxnError, TxnNotFound
from engine.ids import Design, TxnID
from engine.ports import AckKind, TxnAction, TxnStatus
from tests.harness import System

T = "persistent://public/default/txn-orders"
U = "persistent://public/default/txn-shipments"
ENDED = (InvalidTxnState, TxnNotFound)


def _checked(s: System, us: int = 1_000_000) -> None:
    s.run(us)
    s.broker.check()


# -- visibility ----------------------------------------------------------------------------------


def test_open_txn_hides_its_messages_and_pins_later_plain_ones(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    s.publish(T, "before")
    t = s.new_txn()
    s.publish(T, "t1", txn=t)
    s.publish(T, "t2", txn=t)
    s.publish(T, "after")  # published after the txn's first entry: waits for it
    _checked(s)
    assert s.msgs(T, "sub") == ["before"]
    s.commit(t)
    _checked(s)
    assert s.msgs(T, "sub") == ["before", "t1", "t2", "after"]
    assert s.outcomes[t] is TxnStatus.COMMITTED


def test_abort_discards_the_txn_and_releases_later_messages(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    s.publish(T, "before")
    t = s.new_txn()
    s.publish(T, "x1", txn=t)
    s.publish(T, "after")
    s.publish(T, "x2", txn=t)
    s.abort(t)
    _checked(s)
    assert s.msgs(T, "sub") == ["before", "after"]
    assert s.outcomes[t] is TxnStatus.ABORTED


def test_interleaved_txns_deliver_in_publish_order_once_the_first_commits(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    t1, t2 = s.new_txn(), s.new_txn()
    s.publish(T, "a1", txn=t1)
    s.publish(T, "b1", txn=t2)
    s.publish(T, "a2", txn=t1)
    s.publish(T, "b2", txn=t2)
    s.commit(t2)
    _checked(s)
    assert s.msgs(T, "sub") == []  # t1's first entry pins everything after it
    assert s.outcomes[t2] is TxnStatus.COMMITTED
    s.commit(t1)
    _checked(s)
    assert s.msgs(T, "sub") == ["a1", "b1", "a2", "b2"]


def test_aborting_the_pinning_txn_releases_the_committed_one(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    t1, t2 = s.new_txn(), s.new_txn()
    s.publish(T, "a1", txn=t1)
    s.publish(T, "b1", txn=t2)
    s.publish(T, "p1")
    s.commit(t2)
    _checked(s)
    assert s.msgs(T, "sub") == []
    s.abort(t1)
    _checked(s)
    assert s.msgs(T, "sub") == ["b1", "p1"]


def test_a_txn_spanning_topics_becomes_visible_on_both(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    s.subscribe(U, "sub")
    t = s.new_txn()
    s.publish(T, "t-order", txn=t)
    s.publish(U, "u-ship", txn=t)
    _checked(s)
    assert s.msgs(T, "sub") == [] and s.msgs(U, "sub") == []
    s.commit(t)
    _checked(s)
    assert s.msgs(T, "sub") == ["t-order"] and s.msgs(U, "sub") == ["u-ship"]


def test_aborted_entries_are_never_dispatched_even_on_redelivery_or_to_new_subscriptions(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    s.publish(T, "m0")
    t = s.new_txn()
    s.publish(T, "x0", txn=t)
    s.publish(T, "m1")
    s.abort(t)
    _checked(s)
    assert s.msgs(T, "sub") == ["m0", "m1"]
    s.broker.redeliver_unacked(T, "sub")
    _checked(s)
    assert s.msgs(T, "sub")[2:] == ["m0", "m1"]
    s.subscribe(T, "late")
    _checked(s)
    assert s.msgs(T, "late") == ["m0", "m1"]


def test_markers_and_aborted_entries_are_acked_for_the_consumer(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    t1 = s.new_txn()
    s.publish(T, "c0", txn=t1)
    s.commit(t1)
    _checked(s)
    t2 = s.new_txn()
    s.publish(T, "a0", txn=t2)
    s.abort(t2)
    _checked(s)
    assert s.msgs(T, "sub") == ["c0"]
    s.ack("sub", "c0")
    ledger = s.ids["c0"].ledger
    assert s.broker.cursor(ledger, "sub").mark_delete == s.broker.managed_ledger(ledger).last_confirmed()


def test_commit_outcome_reaches_the_client(txn_system: System) -> None:
    s = txn_system
    t = s.new_txn()
    s.publish(T, "m", txn=t)
    s.commit(t)
    _checked(s)
    assert s.outcomes == {t: TxnStatus.COMMITTED}
    empty = s.new_txn()  # a txn without participants commits too
    s.abort(empty)
    _checked(s)
    assert s.outcomes[empty] is TxnStatus.ABORTED


# -- timeouts and misuse -------------------------------------------------------------------------


def test_timeout_aborts_the_txn_and_unpins_the_topic(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    t = s.new_txn(timeout_ms=500)
    s.publish(T, "x", txn=t)
    s.publish(T, "after")
    _checked(s, 300_000)
    assert s.msgs(T, "sub") == []
    # Within the coordinator's sweep period: v4 ticks every 100 ms, v5 (Pulsar master) sweeps
    # every 60 s; how long the txn pins the topic is measured by the reports, not asserted here.
    _checked(s, 61_000_000)
    assert s.msgs(T, "sub") == ["after"]
    with pytest.raises(ENDED):
        s.commit(t)
    with pytest.raises(ENDED):
        s.publish(T, "late", txn=t)


def test_using_a_txn_after_its_end_is_an_error(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    s.publish(T, "m0")
    t = s.new_txn()
    s.publish(T, "x", txn=t)
    s.commit(t)
    with pytest.raises(ENDED):
        s.abort(t)  # already committing / committed
    _checked(s)
    with pytest.raises(ENDED):
        s.publish(T, "late", txn=t)
    with pytest.raises(ENDED):
        s.ack("sub", "m0", txn=t)
    with pytest.raises(ENDED):
        s.commit(t)
    with pytest.raises(ENDED):
        s.abort(t)
    assert "late" not in s.msgs(T, "sub")


def test_unknown_and_foreign_txn_ids_are_refused(txn_system: System) -> None:
    s = txn_system
    design = s.broker.coordinator().design
    other = Design.V5 if design is Design.V4 else Design.V4
    foreign = TxnID(other, 0, 0)
    with pytest.raises(ForeignTxnId):
        s.commit(foreign)
    with pytest.raises(ForeignTxnId):
        s.publish(T, "x", txn=foreign)
    with pytest.raises(ForeignTxnId):
        s.broker.coordinator().status(foreign)
    with pytest.raises(TxnNotFound):
        s.commit(TxnID(design, 0, 987_654_321))


# -- pending acks --------------------------------------------------------------------------------


def _delivered(s: System, n: int, topic: str = T, sub: str = "sub") -> None:
    s.subscribe(topic, sub)
    for i in range(n):
        s.publish(topic, f"m{i}")
    _checked(s)
    assert s.msgs(topic, sub) == [f"m{i}" for i in range(n)]


def test_individual_pending_ack_conflicts(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 4)
    t1, t2 = s.new_txn(), s.new_txn()
    s.ack("sub", "m0", txn=t1)
    with pytest.raises(TxnConflict):
        s.ack("sub", "m0", txn=t2)  # pending in another txn
    with pytest.raises(TxnConflict):
        s.ack("sub", "m0", txn=t1)  # pending in the same txn
    s.ack("sub", "m1")
    with pytest.raises(TxnConflict):
        s.ack("sub", "m1", txn=t2)  # already acked on the cursor
    s.ack("sub", "m2", txn=t2)  # a conflict records nothing: t2 can still ack others
    s.commit(t1)
    s.commit(t2)
    _checked(s)
    cursor = s.broker.cursor(s.ids["m0"].ledger, "sub")
    assert all(cursor.is_acked(s.ids[m].position) for m in ("m0", "m1", "m2"))
    assert not cursor.is_acked(s.ids["m3"].position)


def test_cumulative_pending_ack_conflicts(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 5)
    t1, t2 = s.new_txn(), s.new_txn()
    s.ack("sub", "m1", kind=AckKind.CUMULATIVE, txn=t1)
    with pytest.raises(TxnConflict):
        s.ack("sub", "m3", kind=AckKind.CUMULATIVE, txn=t2)  # another txn holds the cumulative ack
    with pytest.raises(TxnConflict):
        s.ack("sub", "m1", kind=AckKind.CUMULATIVE, txn=t1)  # does not advance it
    s.ack("sub", "m2", kind=AckKind.CUMULATIVE, txn=t1)
    with pytest.raises(TxnConflict):
        s.ack("sub", "m0", txn=t2)  # covered by the pending cumulative ack
    s.commit(t1)
    _checked(s)
    cursor = s.broker.cursor(s.ids["m0"].ledger, "sub")
    assert cursor.mark_delete == s.ids["m2"].position
    t3 = s.new_txn()
    with pytest.raises(TxnConflict):
        s.ack("sub", "m2", kind=AckKind.CUMULATIVE, txn=t3)  # at or below mark-delete
    s.ack("sub", "m4", kind=AckKind.CUMULATIVE, txn=t3)
    s.abort(t3)
    s.abort(t2)
    _checked(s)


def test_pending_acks_are_not_redelivered_and_abort_makes_them_redeliverable(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 3)
    t = s.new_txn()
    s.ack("sub", "m0", "m1", txn=t)
    s.broker.redeliver_unacked(T, "sub")
    _checked(s)
    assert s.msgs(T, "sub")[3:] == ["m2"]  # pending positions are not dispatched
    s.abort(t)
    _checked(s)
    assert sorted(s.msgs(T, "sub")[4:]) == ["m0", "m1"]  # type: ignore[type-var]
    assert all(d.redelivery for d in s.received[(T, "sub")][4:])


def test_committed_acks_stay_acked(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 3)
    t = s.new_txn()
    s.ack("sub", "m0", "m2", txn=t)
    s.commit(t)
    _checked(s)
    s.broker.redeliver_unacked(T, "sub")
    _checked(s)
    assert s.msgs(T, "sub")[3:] == ["m1"]


def test_aborted_cumulative_ack_redelivers_nothing_by_itself(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 3)
    t = s.new_txn()
    s.ack("sub", "m1", kind=AckKind.CUMULATIVE, txn=t)
    s.abort(t)
    _checked(s)
    assert s.msgs(T, "sub") == ["m0", "m1", "m2"]
    s.broker.redeliver_unacked(T, "sub")
    _checked(s)
    assert s.msgs(T, "sub")[3:] == ["m0", "m1", "m2"]


def test_plain_ack_of_a_pending_position_succeeds_and_clears_it(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 2)
    t = s.new_txn()
    s.ack("sub", "m0", txn=t)
    s.ack("sub", "m0")
    s.abort(t)
    _checked(s)
    s.broker.redeliver_unacked(T, "sub")
    _checked(s)
    assert s.msgs(T, "sub")[2:] == ["m1"]


def test_consume_transform_produce_is_atomic(txn_system: System) -> None:
    s = txn_system
    _delivered(s, 2)
    s.subscribe(U, "out")
    ok, bad = s.new_txn(), s.new_txn()
    s.ack("sub", "m0", txn=ok)
    s.publish(U, "from-m0", txn=ok)
    s.ack("sub", "m1", txn=bad)
    s.publish(U, "from-m1", txn=bad)
    s.commit(ok)
    s.abort(bad)
    _checked(s)
    assert s.msgs(U, "out") == ["from-m0"]
    assert s.msgs(T, "sub")[2:] == ["m1"]  # the aborted ack is redelivered


# -- crashes -------------------------------------------------------------------------------------


def _needs_crash_safety(s: System) -> None:
    if not s.combo.crash_safe:
        pytest.skip(f"{s.combo.name}: not crash-safe by design (PULSAR5_CODE.md D8, D13, D14); its windows are "
                    "asserted as findings in tests/unit/test_v5_shipped.py")


def test_open_txn_survives_a_broker_crash(txn_system: System) -> None:
    _needs_crash_safety(txn_system)
    s = txn_system
    s.subscribe(T, "sub")
    s.publish(T, "before")
    t = s.new_txn()
    s.publish(T, "x0", txn=t)
    s.publish(T, "after")
    _checked(s)
    s.crash()
    s.publish(T, "x1", txn=t)
    _checked(s)
    assert s.unique_msgs(T, "sub") == ["before"]
    s.commit(t)
    _checked(s)
    assert s.unique_msgs(T, "sub") == ["before", "x0", "after", "x1"]


def test_aborted_txn_stays_invisible_after_a_crash(txn_system: System) -> None:
    _needs_crash_safety(txn_system)
    s = txn_system
    s.subscribe(T, "sub")
    t = s.new_txn()
    s.publish(T, "x0", txn=t)
    s.publish(T, "p0")
    s.abort(t)
    _checked(s)
    s.crash()
    s.subscribe(T, "late")
    _checked(s)
    assert s.unique_msgs(T, "sub") == ["p0"]
    assert s.msgs(T, "late") == ["p0"]


@pytest.mark.parametrize("crash_after_us", [0, 300, 1_500, 2_500, 3_500, 20_000])
@pytest.mark.parametrize("what", ["broker", "coordinator"])
def test_crash_during_end_txn_completes_it(txn_system: System, crash_after_us: int, what: str) -> None:
    _needs_crash_safety(txn_system)
    s = txn_system
    s.subscribe(T, "sub")
    s.subscribe(U, "sub")
    s.publish(T, "m0")
    _checked(s)
    keep, drop = s.new_txn(), s.new_txn()
    s.publish(T, "k0", txn=keep)
    s.publish(U, "k1", txn=keep)
    s.ack("sub", "m0", txn=keep)
    s.publish(T, "d0", txn=drop)
    s.commit(keep)
    s.abort(drop)
    s.run(crash_after_us)
    if what == "broker":
        s.crash()
    else:
        s.broker.restart_coordinator()
    _checked(s, 5_000_000)
    assert s.unique_msgs(T, "sub") == ["m0", "k0"]
    assert s.unique_msgs(U, "sub") == ["k1"]
    s.broker.redeliver_unacked(T, "sub")
    _checked(s)
    assert "m0" not in s.msgs(T, "sub")[1:]  # the committed ack holds


@pytest.mark.parametrize("action", [TxnAction.COMMIT, TxnAction.ABORT])
def test_pending_acks_survive_a_crash(txn_system: System, action: TxnAction) -> None:
    _needs_crash_safety(txn_system)
    s = txn_system
    _delivered(s, 3)
    t = s.new_txn()
    s.ack("sub", "m0", "m1", txn=t)
    s.crash()
    _checked(s)
    assert s.msgs(T, "sub")[3:] == ["m2"]  # pending positions are not redelivered after the crash
    t2 = s.new_txn()
    with pytest.raises(TxnConflict):
        s.ack("sub", "m0", txn=t2)
    s.end(t, action)
    _checked(s)
    redelivered = sorted(m for m in s.msgs(T, "sub")[4:] if m)
    assert redelivered == ([] if action is TxnAction.COMMIT else ["m0", "m1"])


def test_coordinator_restart_keeps_open_txns_and_their_ids_unique(txn_system: System) -> None:
    s = txn_system
    s.subscribe(T, "sub")
    t1 = s.new_txn()
    s.publish(T, "a", txn=t1)
    s.broker.restart_coordinator()
    t2 = s.new_txn()
    assert t2 != t1
    s.publish(T, "b", txn=t2)
    s.publish(T, "c", txn=t1)
    s.commit(t1)
    s.commit(t2)
    _checked(s)
    assert s.msgs(T, "sub") == ["a", "b", "c"]


# -- crashes at random points of a scripted workload --------------------------------------------

GAP_US = 200_000
ACK_AGE = 8  # steps between a message's publish and a scripted ack of it (> retry + recovery)
SUBS = ((T, "a"), (T, "c"), (U, "b"))


@dataclass
class _Script:
    """A seeded workload: plain and transactional publishes (keyed), plain and transactional
    acks of older plain messages, commits and aborts, several txns open at once."""

    steps: list[tuple[str, ...]] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)


def _script(seed: int, n: int = 40) -> _Script:
    rng = random.Random(seed)
    sc = _Script()
    open_txns: list[str] = []
    plain: list[tuple[int, str, str]] = []  # (step, topic, msg) not yet acked
    counter = 0
    for i in range(n):
        roll = rng.random()
        ackable = [p for p in plain if p[0] <= i - ACK_AGE and p[1] == T]
        if roll < 0.15 and len(open_txns) < 3:
            label = f"t{counter}"
            counter += 1
            open_txns.append(label)
            sc.steps.append(("new", label))
        elif roll < 0.45 and open_txns:
            label = rng.choice(open_txns)
            topic = rng.choice((T, U))
            msg = f"{label}-x{counter}"
            counter += 1
            sc.keys[msg] = f"k{rng.randrange(3)}"
            sc.steps.append(("tpub", label, topic, msg))
        elif roll < 0.55 and open_txns and ackable:
            label = rng.choice(open_txns)
            target = rng.choice(ackable)
            plain.remove(target)
            sc.steps.append(("tack", label, target[2]))
        elif roll < 0.65 and open_txns:
            label = open_txns.pop(rng.randrange(len(open_txns)))
            sc.steps.append(("commit" if rng.random() < 0.7 else "abort", label))
        elif roll < 0.72 and ackable:
            target = rng.choice(ackable)
            plain.remove(target)
            sc.steps.append(("ack", target[2]))
        else:
            topic = rng.choice((T, U))
            msg = f"p{counter}"
            counter += 1
            sc.keys[msg] = f"k{rng.randrange(3)}"
            plain.append((i, topic, msg))
            sc.steps.append(("pub", topic, msg))
    for label in open_txns:
        sc.steps.append(("commit", label))
    return sc


def _play(s: System, sc: _Script, crashes: dict[int, tuple[int, str]]) -> dict[tuple[str, str], list[str]]:
    for topic, sub in SUBS:
        s.subscribe(topic, sub)
    txns: dict[str, TxnID] = {}
    for i, step in enumerate(sc.steps):
        op = step[0]
        if op == "new":
            txns[step[1]] = s.new_txn()
        elif op == "tpub":
            s.publish(step[2], step[3], txn=txns[step[1]], key=sc.keys[step[3]])
        elif op == "tack":
            s.ack("a", step[2], txn=txns[step[1]])
        elif op in ("commit", "abort"):
            s.end(txns[step[1]], TxnAction(op))
        elif op == "ack":
            s.ack("a", step[1])
        else:
            s.publish(step[1], step[2], key=sc.keys[step[2]])
        if i in crashes:
            offset, what = crashes[i]
            s.run(offset)
            if what == "broker":
                s.crash()
            else:
                s.broker.restart_coordinator()
            s.run(GAP_US - offset)
        else:
            s.run(GAP_US)
        s.broker.check()
    s.run(5_000_000)
    s.broker.check()
    return {(topic, sub): [m for m in s.unique_msgs(topic, sub) if m] for topic, sub in SUBS}


def _per_key(msgs: list[str], keys: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in msgs:
        out.setdefault(keys[m], []).append(m)
    return out


@pytest.mark.parametrize("seed", range(1, 11))
def test_crashes_at_random_points_deliver_what_an_uncrashed_run_delivers(txn_system: System, seed: int) -> None:
    _needs_crash_safety(txn_system)
    sc = _script(seed)
    baseline = System(txn_system.combo, txn_system.mode)
    expected = _play(baseline, sc, {})
    rng = random.Random(1000 + seed)
    crashes = {
        rng.randrange(len(sc.steps)): (
            rng.choice((0, 100, 700, 1_300, 2_100, 2_700, 4_000, 50_000)),
            rng.choice(("broker", "broker", "coordinator")),
        )
        for _ in range(3)
    }
    got = _play(txn_system, sc, crashes)
    assert txn_system.crashes + sum(1 for _, w in crashes.values() if w == "coordinator") >= 1
    for key in expected:
        assert set(got[key]) == set(expected[key]), f"{key}: crash points {crashes}"
        assert _per_key(got[key], sc.keys) == _per_key(expected[key], sc.keys), f"{key}: order, crashes {crashes}"
    # the uncrashed run delivers every plain and committed message not acked before delivery
    committed = {s[1] for s in sc.steps if s[0] == "commit"}
    published = {s[2]: s[1] for s in sc.steps if s[0] == "pub"}
    published.update({s[3]: s[2] for s in sc.steps if s[0] == "tpub" and s[1] in committed})
    for (topic, sub), msgs in expected.items():
        assert set(msgs) <= {m for m, tp in published.items() if tp == topic}
        if sub != "a":
            assert set(msgs) == {m for m, tp in published.items() if tp == topic}
