"""Every (engine x backend) combination the conformance suite runs. Engines add theirs here."""

from __future__ import annotations

import os
import uuid

from engine.dispatcher import DispatchMode
from engine.memledger import MemoryLedgerFactory
from legacy_v4 import v4_engine
from metadata_v5.engine import open_v5
from metadata_v5.options import Variant
from tests.harness import NO_TXN, Combo, Durable, memory_durable

COMBOS: list[Combo] = [NO_TXN]
COMBOS.append(Combo("v4/memory", True, memory_durable, lambda d: v4_engine()))


def _kafka_durable() -> Durable:
    """Kafka-backed ledgers on the broker the test command started, in a fresh namespace."""
    from engine.kafkaledger import KafkaLedgerFactory

    url = f"{os.environ['TXNBENCH_KAFKA_URL']}?namespace=t{uuid.uuid4().hex[:12]}/"
    return Durable(KafkaLedgerFactory.from_url(url))


COMBOS.append(Combo("v4/kafka", True, _kafka_durable, lambda d: v4_engine(), needs=("kafka",),
                    close_durable=lambda d: d.ledgers.close(), modes=(DispatchMode.POLLING,)))


def _v5(variant: str, backend: str) -> Combo:
    """v5 on a metadata store: ``memory``, ``memory-degraded``, ``memory-emulated`` or ``redis``
    (a fresh key prefix per test on the server the test command started)."""

    def durable() -> Durable:
        if backend == "redis":
            url = f"{os.environ['TXNBENCH_REDIS_URL']}?prefix=t{uuid.uuid4().hex[:12]}:&exclusive=1"
        else:
            url = {"memory-degraded": "memory://?degraded=1", "memory-emulated": "memory://?emulated=1"}.get(
                backend, "memory://")
        factory, close = open_v5(url, variant=variant)
        return Durable(MemoryLedgerFactory(max_entries_per_ledger=64), {"v5": factory, "close": close})

    return Combo(f"v5-{variant}/{backend}", True, durable, lambda d: d.extra["v5"],
                 needs=("redis",) if backend == "redis" else (), close_durable=lambda d: d.extra["close"](),
                 crash_safe=Variant(variant) is not Variant.SHIPPED)


for _variant in ("shipped", "pip", "state-events"):
    COMBOS.append(_v5(_variant, "memory"))
    COMBOS.append(_v5(_variant, "redis"))
COMBOS.append(_v5("shipped", "memory-emulated"))  # Pulsar's standalone: the AbstractMetadataStore fallback
COMBOS.append(_v5("pip", "memory-degraded"))
