"""Independent units of a trace: topics joined by the transactions that span them.

Two topics belong to the same unit when one txn writes or acks on both; a unit is replayed
whole by one engine instance. Units are bin-packed into shards by row count (largest first
onto the lightest shard), so a shard is a few large groups, as Spark likes them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.trace import read_events


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        root = parent.setdefault(x, x)
        while root != parent[root]:
            root = parent[root]
        while x != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def plan_shards(trace: str | Path, shards: int) -> tuple[dict[str, int], int]:
    """Validate ``trace`` (raises TraceError) and map every topic to a shard in
    ``range(shards)``. Returns (topic -> shard, rows)."""
    uf = _UnionFind()
    txn_topic: dict[str, str] = {}
    rows_per_topic: Counter[str] = Counter()
    rows = 0
    for e in read_events(trace):
        rows += 1
        if e.topic is None:
            continue
        rows_per_topic[e.topic] += 1
        uf.find(e.topic)
        if e.txn is not None:
            first = txn_topic.setdefault(e.txn, e.topic)
            if first != e.topic:
                uf.union(first, e.topic)
    units: Counter[str] = Counter()
    for topic, n in rows_per_topic.items():
        units[uf.find(topic)] += n
    load = [0] * max(1, shards)
    unit_shard: dict[str, int] = {}
    for unit, n in sorted(units.items(), key=lambda kv: (-kv[1], kv[0])):
        i = min(range(len(load)), key=lambda j: (load[j], j))
        unit_shard[unit] = i
        load[i] += n
    return {t: unit_shard[uf.find(t)] for t in rows_per_topic}, rows
