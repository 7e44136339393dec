"""Every (engine x backend) combination the conformance suite runs: each registered engine's
(``EngineSpec.test_combos``, in its own package), over the ledger backend it names."""

from __future__ import annotations

import os
import uuid
from typing import Callable

from bench.replay import registry
from engine.dispatcher import DispatchMode
from engine.kafkaledger import KafkaLedgerFactory
from engine.memledger import MemoryLedgerFactory
from engine.registry import TestCombo
from tests.harness import Combo, Durable


def _ledgers(backend: str) -> object:
    if backend == "kafka":  # on the broker the test command started, in a fresh namespace
        url = f"{os.environ['TXNBENCH_KAFKA_URL']}?namespace=t{uuid.uuid4().hex[:12]}/"
        return KafkaLedgerFactory.from_url(url)
    return MemoryLedgerFactory(max_entries_per_ledger=64)


def _combo(transactional: bool, spec: TestCombo) -> Combo:
    def durable() -> Durable:
        services = {need: os.environ[f"TXNBENCH_{need.upper()}_URL"] for need in spec.needs if need != spec.ledgers}
        opened = spec.open(services)
        return Durable(_ledgers(spec.ledgers), {"engine": opened.factory, "closers": opened.closers})

    def close(d: Durable) -> None:
        for closer in reversed(d.extra["closers"]):
            closer()
        if spec.ledgers != "memory":
            d.ledgers.close()

    make_engine: Callable[[Durable], object] = lambda d: d.extra["engine"]
    return Combo(spec.name, transactional, durable, make_engine, needs=spec.needs,  # type: ignore[arg-type]
                 close_durable=close, modes=(DispatchMode.POLLING,) if spec.polling_only else None,
                 crash_safe=spec.crash_safe)


COMBOS: list[Combo] = [_combo(s.transactional, c) for s in registry.ENGINES.values() for c in s.test_combos()]
