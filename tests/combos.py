"""Every (engine x backend) combination the conformance suite runs. Engines add theirs here."""

from __future__ import annotations

from tests.harness import NO_TXN, Combo

COMBOS: list[Combo] = [NO_TXN]
