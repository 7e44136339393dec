"""A row of a report table: one metric across the columns of a result set (engines, or the
labels of a scenario), with the verdict of the last column against the first."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Row:
    section: str
    metric: str
    unit: str
    values: dict[str, float | None]
    ratio: float | None  # last engine / first engine (within a set) or new / baseline
    verdict: str  # "better", "worse", "same", "n/a", "not comparable"
    deterministic: bool = True
    # stable id: the counts.json key (or derived.*), or "<latency.json key>.<pct>" e.g. end_txn_us.p50
    id: str = ""
    # over ``replay --repeat N``: label -> [min, max] of the repeats (values are then the medians)
    spread: dict[str, list[float]] | None = None
