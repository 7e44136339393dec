"""One scripted client for scripted workloads: the tests' ``System``, the scenarios' ``Run`` and
the benchmarks' ``Rig`` are this class over their own stores, and the scripts they share (a slow
participant, a new reader after GC, a sealed segment, a crash right after a commit, a step script
with a crash at step k) are written here once.

A :class:`ScriptedClient` is a broker over durable ledgers in virtual time with consumers that
record what they receive; ``crash()`` drops the broker and starts a new one on the same durable
stores (the engine factory reopens its own). It drives the broker API only, so it lives in
``engine`` and the tests, ``bench`` and ``benchmarks`` all import it from here.

Subclasses adapt three hooks: :meth:`new_broker` (how a broker is built), :meth:`_consumer` (what
a delivery callback records) and :meth:`fault` (where a fault is noted; a no-op here, the checked
system's history in ``tests/stateful``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from engine.broker import Broker, BrokerConfig
from engine.clock import VirtualScheduler
from engine.dispatcher import Delivery
from engine.errors import ConfigError, TxnbenchError
from engine.ids import TxnID
from engine.ledger import LedgerFactory
from engine.ports import AckKind, EngineFactory, TxnAction, TxnStatus
from engine.records import MessageId


# The Java client's operationTimeoutMs (ClientConfigurationData, default 30 s): an END_TXN the
# coordinator never answers (a broker or coordinator crash cut it off) fails at the client with
# ``PulsarClientException.TimeoutException("Transaction coordinator request is timeout.")`` once
# TransactionMetaStoreHandler.run finds it in its timeoutQueue that long after it was sent; a late
# answer then finds no pending op and is dropped. TransactionImpl.commit passes the failure on
# and leaves the txn COMMITTING: what happened to it is the coordinator's business (its timeout
# aborts a txn it never saw end; one it did end stays as decided).
OPERATION_TIMEOUT_US = 30_000_000


class ScriptedClient:
    """A broker over durable stores in virtual time, with recording consumers.

    ``outcomes`` holds the status each end-txn answered with, ``outcome_us`` the virtual time of
    the answer, ``timed_out`` the virtual time an end-txn failed unanswered after the client's
    operation timeout (:data:`OPERATION_TIMEOUT_US`); ``ids`` maps every published message to its
    id (scripts name messages)."""

    def __init__(self, ledgers: LedgerFactory, config: BrokerConfig, engine: EngineFactory | None,
                 sched: VirtualScheduler | None = None) -> None:
        self.sched = sched or VirtualScheduler()
        self.ledgers = ledgers
        self.config = config
        self.engine_factory = engine
        self.received: dict[tuple[str, str], list[Delivery]] = {}
        self.ids: dict[str, MessageId] = {}
        self.outcomes: dict[TxnID, TxnStatus] = {}
        self.outcome_us: dict[TxnID, int] = {}
        self.timed_out: dict[TxnID, int] = {}
        self._pending_ends: dict[TxnID, object] = {}  # txn -> its latest unanswered end-txn request
        self._subs: list[tuple[str, str]] = []
        self.crashes = 0
        self.broker = self.new_broker()

    def new_broker(self) -> Broker:
        return Broker(self.sched, self.ledgers, self.config, self.engine_factory)

    # client side -------------------------------------------------------------------------------

    def _consumer(self, topic: str, sub: str) -> Callable[[list[Delivery]], None]:
        return self.received[(topic, sub)].extend

    def subscribe(self, topic: str, sub: str) -> None:
        self.received.setdefault((topic, sub), [])
        if (topic, sub) not in self._subs:
            self._subs.append((topic, sub))
        self.broker.subscribe(topic, sub, self._consumer(topic, sub))

    def publish(self, topic: str, msg: str, *, txn: TxnID | None = None, key: str | None = None, size: int = 100) -> MessageId:
        mid = self.broker.publish(topic, msg, size, txn=txn, key=key)
        self.ids[msg] = mid
        return mid

    def ack(self, sub: str, *msgs: str, kind: AckKind = AckKind.INDIVIDUAL, txn: TxnID | None = None) -> None:
        self.broker.ack(sub, [self.ids[m] for m in msgs], kind, txn=txn)

    def new_txn(self, timeout_ms: int = 60_000) -> TxnID:
        return self.broker.new_txn(timeout_ms)

    def _answered(self, txn: TxnID, status: TxnStatus) -> None:
        self.outcomes[txn] = status
        self.outcome_us[txn] = self.sched.now_us()

    def end(self, txn: TxnID, action: TxnAction = TxnAction.COMMIT) -> int:
        """End ``txn``; returns the virtual time of the call (the answer lands in ``outcomes``,
        or, if none comes within the operation timeout, the failure in ``timed_out``)."""
        request = object()
        self._pending_ends[txn] = request
        timer = self.sched.call_later(OPERATION_TIMEOUT_US, self._end_timed_out, txn, request)

        def answered(t: TxnID, status: TxnStatus) -> None:
            if self._pending_ends.get(t) is not request:
                return  # timed out (or superseded by a retry) already: no pending op, dropped
            del self._pending_ends[t]
            timer.cancel()
            self._answered(t, status)

        self.broker.end_txn(txn, action, answered)
        return self.sched.now_us()

    def _end_timed_out(self, txn: TxnID, request: object) -> None:
        if self._pending_ends.get(txn) is request:
            del self._pending_ends[txn]
            self.timed_out[txn] = self.sched.now_us()

    def commit(self, txn: TxnID) -> None:
        self.end(txn, TxnAction.COMMIT)

    def abort(self, txn: TxnID) -> None:
        self.end(txn, TxnAction.ABORT)

    # time and faults ---------------------------------------------------------------------------

    def run(self, us: int = 1_000_000) -> None:
        """Advance virtual time by ``us`` (default one second), running what falls due."""
        self.sched.run_until(self.sched.now_us() + us)

    def fault(self, kind: str, detail: Any = None) -> None:
        """Note a fault the script injects (a no-op here; a checked system records it)."""

    def crash(self, reconnect: bool = True) -> None:
        """Crash the broker (and its engine) and start a new one on the durable stores only;
        consumers reconnect unless ``reconnect`` is false (then :meth:`reconnect` brings them)."""
        self.fault("crash_broker")
        self.broker.crash()
        self.crashes += 1
        self.broker = self.new_broker()
        if reconnect:
            self.reconnect()

    def reconnect(self) -> None:
        for topic, sub in self._subs:
            self.broker.subscribe(topic, sub, self._consumer(topic, sub))

    def restart_coordinator(self) -> None:
        self.fault("crash_tc")
        self.broker.restart_coordinator()

    # observations ------------------------------------------------------------------------------

    def msgs(self, topic: str, sub: str) -> list[str | None]:
        return [d.msg for d in self.received.get((topic, sub), [])]

    def unique_msgs(self, topic: str, sub: str) -> list[str | None]:
        seen: list[str | None] = []
        for m in self.msgs(topic, sub):
            if m not in seen:
                seen.append(m)
        return seen

    def delivered_at(self, topic: str, sub: str, msg: str) -> int | None:
        return next((d.delivered_ts_us for d in self.received.get((topic, sub), []) if d.msg == msg), None)

    def stats(self) -> dict[str, int]:
        return dict(self.broker.stats())


# -- the shared scripts ---------------------------------------------------------------------------


def slow_participant(c: ScriptedClient, topic: str, sub: str, *, timeout_ms: int = 60_000,
                     away_us: int = 5_000_000, back_us: int = 100_000) -> TxnID:
    """A txn acks ``m0`` (of ``m0``, ``m1``) and commits; the subscription's broker dies before
    the outcome reaches its pending-ack store, the coordinator comes back at once, and the
    subscriber stays away ``away_us`` (past a short GC retention) before it reconnects and
    ``back_us`` passes. Returns the txn."""
    c.subscribe(topic, sub)
    c.publish(topic, "m0")
    c.publish(topic, "m1")
    c.run(10_000)
    txn = c.new_txn(timeout_ms)
    c.ack(sub, "m0", txn=txn)
    c.end(txn, TxnAction.COMMIT)
    c.crash(reconnect=False)  # before the outcome reaches the pending-ack store
    c.broker.coordinator()  # the coordinator comes back at once; the subscriber does not
    c.fault("participant_delayed_past_retention")
    c.run(away_us)
    c.reconnect()  # the slow participant finally reconnects
    c.run(back_us)
    return txn


def reader_after_gc(c: ScriptedClient, topic: str, sub: str, *, timeout_ms: int = 60_000,
                    gc_wait_us: int = 10_000_000, read_us: int = 1_000_000) -> dict[str, int]:
    """One txn writes ``c1`` and commits, one writes ``a1`` and aborts, ``plain`` is published
    outside; ``gc_wait_us`` passes (past a short retention: a v5 GC collects both headers), the
    broker crashes (buffers rebuilt from durable state only) and a new subscription ``sub``
    reads the retained data from the start for ``read_us``. Returns the broker's counts just
    before the crash (what the GC did)."""
    committed, aborted = c.new_txn(timeout_ms), c.new_txn(timeout_ms)
    c.publish(topic, "c1", txn=committed)
    c.publish(topic, "a1", txn=aborted)
    c.publish(topic, "plain")
    c.end(committed, TxnAction.COMMIT)
    c.end(aborted, TxnAction.ABORT)
    c.run(gc_wait_us)
    before = c.stats()
    c.crash()
    c.subscribe(topic, sub)
    c.run(read_us)
    return before


@dataclass(frozen=True)
class SealedSegment:
    txn: TxnID  # wrote ``x`` on the segment before it split; still open
    children: list[str]  # the segments the split made


def sealed_segment(c: ScriptedClient, topic: str, sub: str, *, timeout_ms: int = 60_000,
                   pause_us: int = 1_000_000) -> SealedSegment:
    """On scalable ``topic``: ``before`` (plain), ``x`` (in a txn), ``after`` (plain), all on key
    ``a``; ``pause_us`` later the segment splits and ``child`` (plain, key ``a``) lands in a child.
    The txn is left open: the caller ends it."""
    c.subscribe(topic, sub)
    c.publish(topic, "before", key="a")
    txn = c.new_txn(timeout_ms)
    c.publish(topic, "x", txn=txn, key="a")
    c.publish(topic, "after", key="a")
    c.run(pause_us)
    children = c.broker.split(topic)
    c.publish(topic, "child", key="a")
    return SealedSegment(txn, list(children))


@dataclass(frozen=True)
class RestartWindows:
    open_txn: TxnID  # wrote ``x``; open at the crash
    pending: TxnID  # acked ``m0``; open at the crash
    committed: TxnID  # acked ``m1`` and committed just before the crash


def crash_after_commit(c: ScriptedClient, topic: str, sub: str, *, timeout_ms: int = 60_000,
                       plain: str | None = None) -> RestartWindows:
    """``m0``, ``m1`` delivered; three txns: one writes ``x`` (open), one acks ``m0`` (open), one
    acks ``m1`` and commits; (``plain`` is published outside any txn, if given); the broker
    crashes right after the commit call, before the decision reaches the pending-ack store, and
    1 s passes. Then the two open txns abort and 1 s passes."""
    c.subscribe(topic, sub)
    c.publish(topic, "m0")
    c.publish(topic, "m1")
    c.run(100_000)  # m0, m1 delivered
    w = RestartWindows(c.new_txn(timeout_ms), c.new_txn(timeout_ms), c.new_txn(timeout_ms))
    c.ack(sub, "m0", txn=w.pending)
    c.ack(sub, "m1", txn=w.committed)
    c.publish(topic, "x", txn=w.open_txn)
    if plain is not None:
        c.publish(topic, plain)
    c.run(100_000)
    c.end(w.committed, TxnAction.COMMIT)
    c.crash()  # before the decision reaches the pending-ack store
    c.run(1_000_000)
    return w


def abort_open(c: ScriptedClient, w: RestartWindows) -> None:
    """The second half of :func:`crash_after_commit`'s window: abort the txns left open, 1 s."""
    c.end(w.open_txn, TxnAction.ABORT)
    c.end(w.pending, TxnAction.ABORT)
    c.run(1_000_000)


# A step of :func:`play`: ("pub", topic, msg) | ("new", txn) | ("tpub", txn, topic, msg) |
# ("tack", txn, sub, msg) | ("cack", txn, sub, msg) | ("commit", txn) | ("abort", txn) |
# ("ack", sub, msg) | ("wait", us). Txns are named; messages go on key "k".
Step = tuple[Any, ...]


@dataclass(frozen=True)
class CrashAt:
    step: int  # after this step (its index in the script)...
    offset_us: int  # ...and this much virtual time,
    what: str  # "broker" crashes the broker, "coordinator" restarts the coordinator alone

    def __post_init__(self) -> None:
        if self.what not in ("broker", "coordinator"):
            raise ConfigError(f"crash at step {self.step}: what must be broker or coordinator, got {self.what!r}")


def play(c: ScriptedClient, steps: list[Step], subscriptions: list[tuple[str, str]], crash: CrashAt | None = None,
         *, step_us: int = 100_000, settle_us: int = 10_000_000) -> None:
    """Subscribe, then run ``steps`` with ``step_us`` after each, crashing at ``crash`` if given;
    then ``settle_us``. A cumulative txn ack that the design refuses (it conflicts with the
    txn's own pending individual ack) is recorded nowhere and the script goes on."""
    for topic, sub in subscriptions:
        c.subscribe(topic, sub)
    txns: dict[str, TxnID] = {}
    for i, step in enumerate(steps):
        op = step[0]
        if op == "pub":
            c.publish(step[1], step[2], key="k")
        elif op == "new":
            txns[step[1]] = c.new_txn()
        elif op == "tpub":
            c.publish(step[2], step[3], txn=txns[step[1]], key="k")
        elif op == "tack":
            c.ack(step[2], step[3], txn=txns[step[1]])
        elif op == "cack":
            try:
                c.ack(step[2], step[3], kind=AckKind.CUMULATIVE, txn=txns[step[1]])
            except TxnbenchError:
                pass
        elif op in ("commit", "abort"):
            c.end(txns[step[1]], TxnAction(op))
        elif op == "ack":
            c.ack(step[1], step[2])
        elif op == "wait":
            c.run(step[1])
        else:
            raise ConfigError(f"script step {i}: unknown op {op!r}")
        if crash is not None and crash.step == i:
            c.run(crash.offset_us)
            if crash.what == "broker":
                c.crash()
            else:
                c.restart_coordinator()
        c.run(step_us)
    c.run(settle_us)


__all__ = ["ScriptedClient", "slow_participant", "reader_after_gc", "sealed_segment", "SealedSegment", "crash_after_commit",
           "RestartWindows", "abort_open", "play", "Step", "CrashAt"]
