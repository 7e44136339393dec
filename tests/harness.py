"""The conformance harness: one set of behavioural tests, run against every registered
(engine x backend) combination in both dispatch modes, in virtual time.

An engine's spec lists its test combinations (``EngineSpec.test_combos``); ``tests/combos.py``
makes each a :class:`Combo`, which knows how to build the durable stores once and a broker over
them as often as a crash test needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from engine.broker import Broker, BrokerConfig
from engine.clock import VirtualScheduler
from engine.dispatcher import Delivery, DispatchMode, PollingPolicy
from engine.ids import TxnID
from engine.memledger import MemoryLedgerFactory
from engine.ports import AckKind, EngineFactory, TxnAction, TxnStatus
from engine.records import MessageId


@dataclass
class Durable:
    """What survives a crash: the ledger store and whatever else the engine keeps durably."""

    ledgers: Any
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Combo:
    name: str
    transactional: bool
    make_durable: Callable[[], Durable]
    make_engine: Callable[[Durable], EngineFactory | None]
    needs: tuple[str, ...] = ()  # real services, e.g. ("redis",)
    close_durable: Callable[[Durable], None] = lambda d: None
    # Dispatch modes to run; None = both. A backend orthogonal to dispatching (a ledger store)
    # may run one mode to keep the suite fast; the other is covered on the embedded backends.
    modes: tuple[DispatchMode, ...] | None = None
    # False for a design that is known to break the crash tests' promises by design (the
    # shipped v5: PULSAR5_CODE.md D8, D13, D14); its windows are asserted as findings instead
    # (tests/unit/test_v5_shipped.py, ``txnbench scenarios restart``)
    crash_safe: bool = True


def memory_durable() -> Durable:
    return Durable(MemoryLedgerFactory(max_entries_per_ledger=64))


class System:
    """A broker over durable stores, with consumers that record what they receive."""

    def __init__(self, combo: Combo, mode: DispatchMode, polling: PollingPolicy | None = None) -> None:
        self.combo = combo
        self.mode = mode
        self.sched = VirtualScheduler()
        self.durable = combo.make_durable()
        self.config = BrokerConfig(dispatch=mode, polling=polling or PollingPolicy())
        self.received: dict[tuple[str, str], list[Delivery]] = {}
        self.ids: dict[str, MessageId] = {}
        self.outcomes: dict[TxnID, TxnStatus] = {}
        self._subs: list[tuple[str, str]] = []
        self.crashes = 0
        self.broker = self._new_broker()

    def _new_broker(self) -> Broker:
        return Broker(self.sched, self.durable.ledgers, self.config, self.combo.make_engine(self.durable))

    # client side -------------------------------------------------------------------------------

    def subscribe(self, topic: str, sub: str) -> None:
        self.received.setdefault((topic, sub), [])
        if (topic, sub) not in self._subs:
            self._subs.append((topic, sub))
        self.broker.subscribe(topic, sub, self.received[(topic, sub)].extend)

    def publish(self, topic: str, msg: str, *, txn: TxnID | None = None, key: str | None = None, size: int = 100) -> MessageId:
        mid = self.broker.publish(topic, msg, size, txn=txn, key=key)
        self.ids[msg] = mid
        return mid

    def ack(self, sub: str, *msgs: str, kind: AckKind = AckKind.INDIVIDUAL, txn: TxnID | None = None) -> None:
        self.broker.ack(sub, [self.ids[m] for m in msgs], kind, txn=txn)

    def new_txn(self, timeout_ms: int = 60_000) -> TxnID:
        return self.broker.new_txn(timeout_ms)

    def end(self, txn: TxnID, action: TxnAction) -> None:
        self.broker.end_txn(txn, action, lambda t, s: self.outcomes.__setitem__(t, s))

    def commit(self, txn: TxnID) -> None:
        self.end(txn, TxnAction.COMMIT)

    def abort(self, txn: TxnID) -> None:
        self.end(txn, TxnAction.ABORT)

    # time and faults ---------------------------------------------------------------------------

    def run(self, us: int = 1_000_000) -> None:
        """Advance virtual time by ``us`` (default one second), running what falls due."""
        self.sched.run_until(self.sched.now_us() + us)

    def crash(self) -> None:
        """Crash the broker (and its engine) and start a new one on the durable stores only;
        consumers reconnect."""
        self.broker.crash()
        self.crashes += 1
        self.broker = self._new_broker()
        for topic, sub in self._subs:
            self.broker.subscribe(topic, sub, self.received[(topic, sub)].extend)

    # observations ------------------------------------------------------------------------------

    def msgs(self, topic: str, sub: str) -> list[str | None]:
        return [d.msg for d in self.received.get((topic, sub), [])]

    def unique_msgs(self, topic: str, sub: str) -> list[str | None]:
        seen: list[str | None] = []
        for m in self.msgs(topic, sub):
            if m not in seen:
                seen.append(m)
        return seen

    def stats(self) -> dict[str, int]:
        return dict(self.broker.stats())
