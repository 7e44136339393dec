"""Exact counts: every component keeps a :class:`Counters` and runs report them next to times."""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping


class Counters(Counter[str]):
    """Named integer counts. ``merged`` sums several (e.g. every topic's dispatcher)."""

    @staticmethod
    def merged(parts: Iterable[Mapping[str, int]]) -> Counters:
        total = Counters()
        for part in parts:
            total.update(part)
        return total

    def prefixed(self, prefix: str) -> dict[str, int]:
        return {f"{prefix}{k}": v for k, v in sorted(self.items())}
