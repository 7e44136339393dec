"""Every (engine x backend) combination the conformance suite runs. Engines add theirs here."""

from __future__ import annotations

from legacy_v4 import v4_engine
from tests.harness import NO_TXN, Combo, memory_durable

COMBOS: list[Combo] = [NO_TXN]
COMBOS.append(Combo("v4/memory", True, memory_durable, lambda d: v4_engine()))
