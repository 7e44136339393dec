"""pytest-benchmark suites: every scenario x every engine x every backend, grouped by engine.

Not part of the test suite (``testpaths = tests``). Run::

    .venv/bin/python -m pytest benchmarks --benchmark-save=mine --benchmark-group-by=param:engine
    .venv/bin/python -m pytest-benchmark compare 0001 0002   # two saved runs, side by side

Each benchmark times the engine code in virtual time (the CPU and round trips per operation) with
warm-up and repeated rounds; the exact counts of the operation go into ``extra_info``. Backends:
the embedded ones always; v4 on a real Kafka broker and v5 on a real redis-server when
``TXNBENCH_KAFKA_URL`` / ``TXNBENCH_REDIS_URL`` are set (``scripts/kafka.sh`` / ``scripts/redis.sh``
start them), skipped otherwise.
"""

from __future__ import annotations

import os

import pytest

from bench.replay import registry
from bench.replay.config import RunConfig
from bench.replay.engines import build
from engine.broker import BrokerConfig
from engine.dispatcher import DispatchMode
from engine.scripted import ScriptedClient

ENGINES = {label: RunConfig(**fields) for label, fields in registry.variant_configs().items()}
# The real backend each engine can run on besides the embedded one: the metadata store on Redis
# for a design that keeps its state there, else the ledgers on Kafka (the URL field of RunConfig
# it replaces, and the variable that names it).
REAL_BACKEND = {label: ("redis", "metadata_url") if registry.spec(cfg.engine).uses_metadata_store
                else ("kafka", "ledger_url") for label, cfg in ENGINES.items()}


def config(engine: str, backend: str) -> RunConfig:
    """The run config of ``engine`` on ``backend`` (``memory`` or its real backend; skips when the
    real one's URL is not set)."""
    cfg = ENGINES[engine]
    if backend == "memory":
        return cfg
    name, field = REAL_BACKEND[engine]
    url = os.environ.get(f"TXNBENCH_{name.upper()}_URL")
    if not url:
        pytest.skip(f"no {name}: set TXNBENCH_{name.upper()}_URL to benchmark {engine} on it")
    if field == "metadata_url":
        return RunConfig(engine=cfg.engine, options=cfg.options, metadata_url=url)
    return RunConfig(engine=cfg.engine, options=cfg.options, ledger_url=url)


class Rig(ScriptedClient):
    """A broker in virtual time over fresh stores of a run config, rebuilt after a crash
    (:class:`engine.scripted.ScriptedClient`)."""

    def __init__(self, cfg: RunConfig, mode: DispatchMode = DispatchMode.NOTIFY) -> None:
        self.setup = build(cfg)
        super().__init__(self.setup.ledgers, BrokerConfig(dispatch=mode), self.setup.engine)

    def close(self) -> None:
        self.broker.close()
        self.setup.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every benchmark that takes ``engine`` runs on each engine x backend (ids like
    ``v4-kafka``); ``--benchmark-group-by=param:engine`` groups them by engine."""
    if "engine" in metafunc.fixturenames:
        combos = [(e, b) for e in sorted(ENGINES) for b in ("memory", REAL_BACKEND[e][0])]
        names = ("engine", "backend") if "backend" in metafunc.fixturenames else ("engine",)
        values = combos if len(names) == 2 else [(e,) for e in sorted(ENGINES)]
        metafunc.parametrize(names, values, ids=["-".join(v) for v in values])


@pytest.fixture
def rig(engine: str, backend: str):  # type: ignore[no-untyped-def]
    r = Rig(config(engine, backend))
    yield r
    r.close()
