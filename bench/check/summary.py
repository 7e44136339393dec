"""What a ``txnbench check`` run (or a test session) checked, for reports and ``check.json``."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.check.history import History
from bench.check.outcomes import ambiguous_outcomes
from bench.check.rules import KINDS, Violation


@dataclass
class CheckSummary:
    """Histories, deliveries, faults and violations counted over every history added; txns
    whose outcome was never heard are counted apart (``ambiguous_outcome``), not as violations."""

    histories: int = 0
    deliveries: int = 0
    faults: Counter = field(default_factory=Counter)
    violations: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    ambiguous_outcome: int = 0

    def add(self, h: History, violations: list[Violation]) -> None:
        self.histories += 1
        self.deliveries += len(h.deliveries)
        self.faults.update(h.fault_counts())
        self.violations.update(v.kind for v in violations)
        self.examples.extend(str(v) for v in violations[: max(0, 20 - len(self.examples))])
        self.ambiguous_outcome += len(ambiguous_outcomes(h))

    def to_json(self) -> dict[str, Any]:
        return {"histories": self.histories, "deliveries": self.deliveries, "faults": dict(sorted(self.faults.items())),
                "violations": {k: self.violations.get(k, 0) for k in KINDS}, "total_violations": sum(self.violations.values()),
                "ambiguous_outcome": self.ambiguous_outcome, "examples": self.examples}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def lines(self) -> list[str]:
        j = self.to_json()
        faults = ", ".join(f"{k} {v}" for k, v in j["faults"].items()) or "none"
        out = [f"histories checked: {j['histories']} ({j['deliveries']} deliveries)", f"faults injected: {faults}",
               f"violations: {j['total_violations']}"]
        out += [f"  {k}: {v}" for k, v in j["violations"].items() if v]
        if j["ambiguous_outcome"]:
            out.append(f"txns whose commit was asked but whose outcome was never heard (ambiguous_outcome, "
                       f"judged under either outcome): {j['ambiguous_outcome']}")
        out += [f"  e.g. {e}" for e in j["examples"][:10]]
        return out
