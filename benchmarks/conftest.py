"""pytest-benchmark suites: every scenario x every engine configuration, grouped by engine.

Not part of the test suite (``testpaths = tests``). Run::

    .venv/bin/python -m pytest benchmarks --benchmark-save=mine --benchmark-group-by=param:engine
    .venv/bin/python -m pytest-benchmark compare 0001 0002   # two saved runs, side by side

Each benchmark times the engine code (CPU per operation in virtual time, embedded backends) with
warm-up and repeated rounds; the exact counts of the operation go into ``extra_info``.
"""

from __future__ import annotations

import pytest

from bench.config import RunConfig
from bench.engines import build
from engine.broker import Broker, BrokerConfig
from engine.clock import VirtualScheduler
from engine.dispatcher import DispatchMode

ENGINES = {
    "v4": RunConfig(engine="v4"),
    "v5-watch": RunConfig(engine="v5", v5_variant="watch"),
    "v5-events": RunConfig(engine="v5", v5_variant="events"),
}


class Rig:
    """A broker in virtual time over fresh embedded stores, rebuilt after a crash."""

    def __init__(self, cfg: RunConfig, mode: DispatchMode = DispatchMode.NOTIFY) -> None:
        self.sched = VirtualScheduler()
        self.setup = build(cfg)
        self.config = BrokerConfig(dispatch=mode)
        self.broker = self.new_broker()

    def new_broker(self) -> Broker:
        return Broker(self.sched, self.setup.ledgers, self.config, self.setup.engine)

    def run(self, us: int) -> None:
        self.sched.run_until(self.sched.now_us() + us)

    def close(self) -> None:
        self.broker.close()
        self.setup.close()


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def rig(engine: str):  # type: ignore[no-untyped-def]
    r = Rig(ENGINES[engine])
    yield r
    r.close()
