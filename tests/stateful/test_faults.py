"""Fault injection, judged by the history checker: crash the broker or the coordinator at every
point of a short scripted workload, drop or delay v4's END_TXN RPCs, and keep a v5 participant
away past the GC retention window. Every run ends with :func:`bench.check.check`: zero
violations, except exactly where a design is known to lose (the PIP's GC)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from typing import Any, Callable, Iterator

import pytest

from bench.check import CheckSummary
from engine.dispatcher import DispatchMode
from engine.errors import TxnbenchError
from engine.ports import EngineContext
from engine.scripted import CrashAt, Step, play, reader_after_gc, slow_participant
from legacy_v4 import v4_engine
from legacy_v4.buffer import ParticipantNotReady
from metadata_v5.engine import V5Engine
from metadata_v5.store.memory import MemoryMetadataStore
from metadata_v5.options import V5Options
from tests.harness import Combo, Durable, memory_durable
from tests.stateful.checked import CheckedSystem

T = "persistent://public/default/f-in"
U = "persistent://public/default/f-out"
S = "topic://public/default/f-seg"

SUMMARY = CheckSummary()  # what this module checked (printed after its tests: _print_summary)


def _v5_combo(**opts: Any) -> Combo:
    opts.setdefault("variant", "pip")  # the shipped design's windows: test_v5_shipped.py
    options = V5Options(**opts)

    def durable() -> Durable:
        return Durable(memory_durable().ledgers, {"store": MemoryMetadataStore.open()})

    return Combo("v5", True, durable, lambda d: (lambda ctx: V5Engine(ctx, d.extra["store"].reopen(), options)))


def _v4_combo(participants: Callable[[Any], Any] | None = None, **opts: Any) -> Combo:
    base = v4_engine(**opts)
    if participants is None:
        return Combo("v4", True, memory_durable, lambda d: base)

    def make(d: Durable) -> Any:
        def factory(ctx: EngineContext) -> Any:
            return base(dataclasses.replace(ctx, participants=participants(ctx)))

        return factory

    return Combo("v4", True, memory_durable, make)


def _checked(s: CheckedSystem, expected: Counter | None = None) -> None:
    violations = s.finish()
    SUMMARY.add(s.history, violations)
    got = Counter(v.kind for v in violations)
    assert got == (expected or Counter()), "; ".join(map(str, violations))


# -- crashes at every point of a scripted workload ------------------------------------------------

STEPS: list[Step] = [
    ("pub", T, "p0"), ("pub", T, "p1"), ("pub", T, "p2"),
    ("new", "t1"), ("tpub", "t1", U, "t1-a"), ("tack", "t1", "in", "p0"), ("tpub", "t1", S, "t1-s"),
    ("tpub", "t1", U, "t1-b"), ("pub", U, "u0"), ("commit", "t1"),
    # the cumulative ack conflicts with t2's own individual pending ack: refused, recorded nowhere
    ("new", "t2"), ("tpub", "t2", U, "t2-a"), ("tack", "t2", "in", "p1"), ("cack", "t2", "in", "p1"), ("abort", "t2"),
    ("wait", 6_000_000),  # past v4's snapshot timer (transactionBufferSnapshotMinTimeInMillis)
    ("pub", S, "s0"), ("ack", "in", "p2"), ("pub", T, "p3"),
]
SUBSCRIPTIONS = [(T, "in"), (U, "out"), (S, "seg")]
OFFSETS_US = (0, 400, 1_500, 3_000, 30_000)


def _play(s: CheckedSystem, crash: CrashAt | None) -> None:
    play(s, STEPS, SUBSCRIPTIONS, crash)


CRASHES = [CrashAt(i, off, what) for i in range(len(STEPS)) for off in OFFSETS_US for what in ("broker", "coordinator")]


@pytest.mark.parametrize("design", ["v4", "v5"])
@pytest.mark.parametrize("mode", list(DispatchMode))
def test_crash_at_every_point(design: str, mode: DispatchMode) -> None:
    combo = _v4_combo() if design == "v4" else _v5_combo()
    baseline = CheckedSystem(combo, mode)
    _play(baseline, None)
    _checked(baseline)
    expected = {k: set(baseline.unique_msgs(*k)) for k in baseline.received}
    for crash in CRASHES:
        s = CheckedSystem(combo, mode)
        _play(s, crash)
        _checked(s)
        for key, msgs in expected.items():  # and the same messages as without the crash
            assert set(s.unique_msgs(*key)) == msgs, f"{key} after {crash}"


# -- END_TXN RPCs dropped or delayed (v4) ---------------------------------------------------------


class _FlakyParticipants:
    """The broker's END_TXN handlers behind a faulty network: the first ``drop`` RPCs fail,
    the next ``delay`` ones are answered ``delay_us`` late (beyond the RPC timeout they fail)."""

    def __init__(self, ctx: EngineContext, drop: int, delay: int, delay_us: int) -> None:
        self._inner = ctx.participants
        self._sched = ctx.scheduler
        self.drop, self.delay, self.delay_us = drop, delay, delay_us
        self.injected: Counter = Counter()
        self._delayed: set[tuple[Any, ...]] = set()

    def _fault(self, key: tuple[Any, ...]) -> None:
        if key in self._delayed:
            self._delayed.discard(key)
            return
        if self.drop > 0:
            self.drop -= 1
            self.injected["end_txn_dropped"] += 1
            raise TxnbenchError(f"END_TXN {key} dropped")
        if self.delay > 0:
            self.delay -= 1
            self.injected["end_txn_delayed"] += 1
            self._delayed.add(key)
            raise ParticipantNotReady(f"END_TXN {key} delayed", self._sched.now_us() + self.delay_us)

    def end_txn_on_partition(self, ledger: str, txn: Any, action: Any, lwm: int) -> None:
        self._fault((ledger, txn, action))
        self._inner.end_txn_on_partition(ledger, txn, action, lwm)

    def end_txn_on_subscription(self, ledger: str, sub: str, txn: Any, action: Any, lwm: int) -> None:
        self._fault((ledger, sub, txn, action))
        self._inner.end_txn_on_subscription(ledger, sub, txn, action, lwm)


@pytest.mark.parametrize("drop, delay, delay_us", [(1, 0, 0), (5, 0, 0), (0, 2, 500_000), (0, 3, 5_000_000), (2, 2, 4_000_000)])
def test_dropped_and_delayed_end_txn_rpcs(drop: int, delay: int, delay_us: int) -> None:
    made: list[_FlakyParticipants] = []

    def participants(ctx: EngineContext) -> _FlakyParticipants:
        made.append(_FlakyParticipants(ctx, drop, delay, delay_us))
        return made[-1]

    for mode in DispatchMode:
        made.clear()
        s = CheckedSystem(_v4_combo(participants), mode)
        _play(s, None)
        for p in made:
            for kind, n in p.injected.items():
                s.history.fault(kind, n)
        assert sum(sum(p.injected.values()) for p in made) == drop + delay
        _checked(s)
        assert set(s.unique_msgs(U, "out")) == {"t1-a", "t1-b", "u0"}


def test_crash_between_the_v5_commit_cas_and_its_watch() -> None:
    """v5 participants learn outcomes from watches: a broker crash right after the CAS loses the
    notification; recovery must read the outcome from the store."""
    for variant in ("pip", "state-events"):
        for mode in DispatchMode:
            for offset in (0, 50, 200, 1_000):
                s = CheckedSystem(_v5_combo(variant=variant), mode)
                s.subscribe(T, "in")
                s.subscribe(U, "out")
                s.publish(T, "p0")
                s.run(100_000)
                t = s.new_txn()
                s.ack("in", "p0", txn=t)
                s.publish(U, "x", txn=t)
                s.commit(t)
                s.run(offset)
                s.crash()
                s.run(1_000_000)
                s.redeliver_unacked(T, "in")
                s.run(1_000_000)
                _checked(s)
                assert s.msgs(U, "out") == ["x"]


# -- a participant away past the GC retention window (v5) -----------------------------------------


def _slow_participant(gc: str) -> CheckedSystem:
    s = CheckedSystem(_v5_combo(gc=gc, retention_ms=1_000, gc_sweep_ms=500), DispatchMode.NOTIFY)
    # the crash polls outcomes first: the CAS is the commit point, committed whatever the participant does
    slow_participant(s, T, "in", away_us=5_000_000, back_us=1_000_000)
    return s


def test_pip_gc_loses_a_slow_participants_committed_ack_and_the_checker_says_so() -> None:
    s = _slow_participant("force")
    violations = s.finish()
    SUMMARY.add(s.history, [v for v in violations if v.kind != "acked_redelivered"])  # the known loss
    assert [(v.kind, v.msg) for v in violations] == [("acked_redelivered", "m0")]
    assert "committed" in str(violations[0])
    _checked(_slow_participant("wait"))


def _new_reader_after_gc(gc: str) -> CheckedSystem:
    s = CheckedSystem(_v5_combo(gc=gc, retention_ms=1_000, gc_sweep_ms=500), DispatchMode.POLLING)
    reader_after_gc(s, T, "new-reader")
    return s


def test_pip_gc_vs_retention_loses_committed_data_for_a_new_reader() -> None:
    s = _new_reader_after_gc("force")
    violations = s.finish()
    SUMMARY.add(s.history, [v for v in violations if v.kind != "lost_write"])  # the known loss
    assert [(v.kind, v.msg, v.subscription) for v in violations] == [("lost_write", "c1", "new-reader")]
    _checked(_new_reader_after_gc("wait"))


def test_a_txn_the_coordinator_timed_out_and_forgot_is_judged_aborted() -> None:
    """v4 aborts a txn at its timeout and forgets it (its coordinator drops finished txns): the
    history must not call it open, or its pending ack, dropped by the abort, would make the
    redelivery it causes an acked_redelivered and a duplicate (the campaign's false positive)."""
    s = CheckedSystem(_v4_combo(), DispatchMode.NOTIFY)
    s.subscribe(T, "in")
    s.publish(T, "p0")
    s.run(100_000)
    t = s.new_txn(1_500)
    s.ack("in", "p0", txn=t)
    s.run(3_000_000)  # past the timeout: the abort drops the pending ack, p0 comes back
    assert s.msgs(T, "in") == ["p0", "p0"]
    with pytest.raises(TxnbenchError):
        s.broker.coordinator().status(t)  # forgotten: the client never heard an outcome
    _checked(s)
    assert s.history.outcomes[str(t)] == "aborted"


@pytest.fixture(scope="module", autouse=True)
def _print_summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints what this module checked once its tests ran (with -s). A report, not a test: every
    test asserts its own violations (``_checked``), and a summary test would pass on an empty
    summary when run alone."""
    yield
    if SUMMARY.histories:
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            print("\n" + "\n".join("fault injection: " + line for line in SUMMARY.lines()))
