"""Independent units of a trace: topics joined by the transactions that span them.

Two topics belong to the same unit when one txn writes or acks on both; a unit is replayed
whole by one engine instance. Units are bin-packed into shards by row count (largest first
onto the lightest shard), so a shard is a few large groups, as Spark likes them.

:func:`plan_shards` works on aggregates only (rows per topic, the distinct sets of topics a txn
touches), whose size depends on the topics, not on the trace's length
(:func:`trace_aggregates` computes them with Arrow).
:func:`shard_events` streams one shard's rows out of the trace with vectorised filters.
Both read any trace format through :func:`bench.trace.tracefmt.open_trace` (Parquet, CSV, JSON lines;
short topic names expanded), natively: nothing is converted first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from bench.trace.schema import COLUMNS
from bench.trace.trace import Event, event_columns, event_of_row, trace_columns
from bench.trace.tracefmt import TraceFile, open_trace

CRASH_OPS = pa.array(["crash_broker", "crash_tc"])  # a crash hits the whole broker: every shard
_OP, _TXN, _TOPIC = COLUMNS.index("op"), COLUMNS.index("txn"), COLUMNS.index("topic")


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


def plan_shards(rows_per_topic: Mapping[str, int], txn_topic_sets: Iterable[Iterable[str]],
                shards: int) -> dict[str, int]:
    """Map every topic to a shard in ``range(shards)``, keeping each unit on one shard."""
    uf = _UnionFind()
    for topic in rows_per_topic:
        uf.find(topic)
    for topics in txn_topic_sets:
        first, *rest = list(topics)
        for other in rest:
            uf.union(first, other)
    units: dict[str, int] = {}
    for topic, n in rows_per_topic.items():
        root = uf.find(topic)
        units[root] = units.get(root, 0) + n
    load = [0] * max(1, shards)
    unit_shard: dict[str, int] = {}
    for unit, n in sorted(units.items(), key=lambda kv: (-kv[1], kv[0])):
        i = min(range(len(load)), key=lambda j: (load[j], j))
        unit_shard[unit] = i
        load[i] += n
    return {t: unit_shard[uf.find(t)] for t in sorted(rows_per_topic)}


END_OPS = pa.array(["commit", "abort"])


def trace_aggregates(trace: str | Path, batch_rows: int = 262_144) -> tuple[dict[str, int], list[list[str]]]:
    """What :func:`plan_shards` needs, from the trace with Arrow group-bys in one streaming pass:
    rows per topic and the distinct sets of topics one txn touches. Only the (txn, topic) pairs
    of txns still open at the end of a batch are carried to the next, and a txn's set becomes a
    string of sorted topic numbers of which only the distinct ones (a handful) become Python
    objects: the driver's memory does not grow with the trace."""
    pf = open_trace(trace)
    rows_per_topic: dict[str, int] = {}
    topic_ids: dict[str, int] = {}
    sets: set[tuple[int, ...]] = set()
    carry: pa.Table | None = None  # (txn, n) pairs of txns not ended yet
    for batch in pf.iter_batches(batch_size=batch_rows, columns=["op", "txn", "topic"]):
        t = pa.Table.from_batches([batch])
        on_topic = t.filter(pc.is_valid(t["topic"]))
        for row in on_topic.group_by("topic").aggregate([("topic", "count")]).to_pylist():
            rows_per_topic[row["topic"]] = rows_per_topic.get(row["topic"], 0) + row["topic_count"]
            topic_ids.setdefault(row["topic"], len(topic_ids))
        in_txn = on_topic.filter(pc.is_valid(on_topic["txn"]))
        numbers = pc.index_in(in_txn["topic"], value_set=pa.array(list(topic_ids), pa.string()))
        pairs = pa.table({"txn": in_txn["txn"], "n": numbers})
        if carry is not None:
            pairs = pa.concat_tables([carry, pairs])
        pairs = pairs.group_by(["txn", "n"]).aggregate([])
        ended = pc.is_in(pairs["txn"], value_set=t.filter(pc.is_in(t["op"], value_set=END_OPS))["txn"])
        sets.update(_topic_sets(pairs.filter(ended)))
        carry = pairs.filter(pc.invert(ended))
    if carry is not None:
        sets.update(_topic_sets(carry))  # txns still open when the trace ends
    names = list(topic_ids)
    return rows_per_topic, sorted(sorted(names[i] for i in s) for s in sets)


def _topic_sets(pairs: pa.Table) -> set[tuple[int, ...]]:
    """The distinct sets of topic numbers of the txns in ``pairs`` (txn, n)."""
    if pairs.num_rows == 0:
        return set()
    ordered = pairs.sort_by([("txn", "ascending"), ("n", "ascending")])
    per_txn = ordered.group_by("txn", use_threads=False).aggregate([("n", "list")])
    keys = pc.binary_join(pc.cast(per_txn["n_list"], pa.list_(pa.string())), ",")
    return {tuple(int(i) for i in key.split(",")) for key in pc.unique(keys).to_pylist()}


def _shard_txns(pf: TraceFile, topics: pa.Array, topicless: bool, batch_rows: int) -> pa.Array:
    """Labels of the txns that touch ``topics`` (plus, if ``topicless``, those that touch no
    topic at all), as one Arrow array: a few bytes a txn, not a Python set."""
    parts = []
    for batch in pf.iter_batches(batch_size=batch_rows, columns=["txn", "topic"]):
        t = pa.Table.from_batches([batch]).filter(pc.is_valid(batch.column(0)))
        t = t.append_column("mine", pc.fill_null(pc.is_in(t["topic"], value_set=topics), False))
        t = t.append_column("has_topic", pc.is_valid(t["topic"]))
        parts.append(t.group_by("txn").aggregate([("mine", "any"), ("has_topic", "any")])
                     .rename_columns(["txn", "mine", "has_topic"]))
    if not parts:
        return pa.array([], pa.string())
    txns = pa.concat_tables(parts).group_by("txn").aggregate([("mine", "any"), ("has_topic", "any")])
    keep = txns["mine_any"]
    if topicless:
        keep = pc.or_(keep, pc.invert(txns["has_topic_any"]))
    return txns.filter(keep)["txn"].combine_chunks()


def shard_events(trace: str | Path, topic_shard: Mapping[str, int], shard: int,
                 batch_rows: int = 65_536) -> Iterator[Event]:
    """The rows of ``shard`` in trace order, with their row numbers in the whole trace: rows on
    its topics, topicless txn rows (new_txn/commit/abort) of its txns, and every crash. Txns
    that touch no topic go to shard 0. Trusts the trace: validate it first."""
    pf = open_trace(trace)
    topics = pa.array(sorted(t for t, s in topic_shard.items() if s == shard), pa.string())
    txns = _shard_txns(pf, topics, shard == 0, batch_rows)
    row = 0
    columns = trace_columns(pf)  # with the optional ones the trace has
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        topic, txn = batch.column(_TOPIC), batch.column(_TXN)
        keep = pc.or_kleene(pc.is_in(topic, value_set=topics), pc.is_in(batch.column(_OP), value_set=CRASH_OPS))
        keep = pc.or_kleene(keep, pc.and_kleene(pc.is_null(topic), pc.is_in(txn, value_set=txns)))
        keep = pc.fill_null(keep, False)
        rows = pc.add(pc.indices_nonzero(keep), row).to_pylist()
        mine = batch.filter(keep)
        yield from map(event_of_row, zip(rows, *event_columns(mine, columns)))
        row += batch.num_rows
