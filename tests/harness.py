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
from engine.dispatcher import DispatchMode, PollingPolicy
from engine.memledger import MemoryLedgerFactory
from engine.ports import EngineFactory
from engine.scripted import ScriptedClient


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


class System(ScriptedClient):
    """A broker over a combo's durable stores (:class:`engine.scripted.ScriptedClient`): the
    engine factory is rebuilt from the durable stores for every new broker."""

    def __init__(self, combo: Combo, mode: DispatchMode, polling: PollingPolicy | None = None) -> None:
        self.combo = combo
        self.mode = mode
        self.durable = combo.make_durable()
        super().__init__(self.durable.ledgers, BrokerConfig(dispatch=mode, polling=polling or PollingPolicy()), None)

    def new_broker(self) -> Broker:
        return Broker(self.sched, self.durable.ledgers, self.config, self.combo.make_engine(self.durable))

    _new_broker = new_broker  # the name the tests have used
