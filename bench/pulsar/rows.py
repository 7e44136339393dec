"""Trace rows -> the trace client's input rows (``jvm/PROTOCOL.md``, "Input").

Every topic is renamed into the run's own namespace, so repeated runs on one broker never see
each other's topics, subscriptions or transaction state:

- v4 design: ``persistent://T/N/x`` -> ``persistent://public/tb-<run>-N/x`` (``T`` other than
  ``public`` joins the namespace: ``tb-<run>-T-N``); a ``-partition-k`` name stays a partition
  of the partitioned topic ``x`` that the client creates.
- v5 design: the same rename on ``topic://``. A trace's ``persistent://.../x-partition-k`` topic
  becomes its own one-segment scalable topic ``topic://.../x-pk`` (the broker's TopicName reads
  ``-partition-k`` in any name as a partition of ``x``, and fails on segment names built from it):
  Pulsar 5 routes only
  ``topic://`` names to the v5 path (``DispatchingTransactionBufferProvider``), and a
  partition's order per topic is what a one-segment scalable topic keeps.

Rows the broker cannot run are refused before anything runs, with the trace's row number.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from engine.errors import TraceError
from engine.topics import TopicName
from bench.trace.trace import Event

_PARTITION = re.compile(r"-partition-(\d+)$")
TENANT = "public"  # the standalone's tenant; a run's namespaces are created under it


def new_run_id() -> str:
    return secrets.token_hex(3)


def namespace_of(run_id: str, design: str, name: TopicName) -> str:
    ns = name.namespace if name.tenant == TENANT else f"{name.tenant}-{name.namespace}"
    return f"{TENANT}/tb-{run_id}-{design}-{ns}"


def map_topic(topic: str, design: str, run_id: str) -> str:
    name = TopicName.parse(topic)
    if design == "v4":
        return f"persistent://{namespace_of(run_id, design, name)}/{name.local}"
    # The broker reads "-partition-N" in any local name as a partition suffix (TopicName): the
    # scalable topic made of a trace's partition is named "<x>-p<N>" instead.
    local = _PARTITION.sub(r"-p\1", name.local)
    return f"topic://{namespace_of(run_id, design, name)}/{local}"


def refusal(e: Event, design: str, restartable: bool) -> str | None:
    """Why the real broker cannot run row ``e`` under ``design``, or None."""
    if e.op == "crash_tc":
        return ("crash_tc: the broker cannot restart its transaction coordinator alone "
                "(use crash_broker, a restart of the whole broker)")
    if e.op == "crash_broker" and not restartable:
        return ("crash_broker: the broker was not started by scripts/pulsar.sh here, so it cannot be restarted "
                "(give --pulsar-dir DIR or TXNBENCH_PULSAR_DIR)")
    if design == "v4":
        if e.op in ("split", "merge"):
            return f"{e.op}: the v4 design has no scalable topics to {e.op}"
        if e.topic and TopicName.parse(e.topic).scalable:
            return f"{e.op} on {e.topic}: a scalable topic (topic://) runs only under the v5 design"
    return None


@dataclass
class MappedRows:
    path: Path
    rows: int = 0
    run_id: str = ""
    design: str = ""
    topics: dict[str, str] = field(default_factory=dict)  # trace name -> broker name
    namespaces: set[str] = field(default_factory=set)
    timeouts_ms: set[int] = field(default_factory=set)
    first_ts_us: int = 0
    last_ts_us: int = 0
    ops: dict[str, int] = field(default_factory=dict)

    def manifest(self) -> dict[str, object]:
        note = None
        if self.design == "v5" and any(t.startswith("persistent://") for t in self.topics):
            note = ("each persistent:// topic of the trace (a partition x-partition-k) ran as its own one-segment "
                    "scalable topic://.../x-pk, the only names Pulsar 5 runs on the v5 path")
        return {"run_id": self.run_id, "namespaces": sorted(self.namespaces), "topics": dict(sorted(self.topics.items())),
                "v5_txn_timeouts_ms": sorted(self.timeouts_ms) if self.design == "v5" else None,
                **({"topic_note": note} if note else {})}


def write_rows(events: Iterable[Event], path: Path, *, design: str, run_id: str, restartable: bool,
               source: str) -> MappedRows:
    """Write the protocol rows of ``events`` (a validated trace) to ``path``. The first row the
    broker cannot run raises TraceError naming ``source``, the row and why (the caller writes
    ``path`` in a scratch directory, so nothing is left behind)."""
    out = MappedRows(path=path, run_id=run_id, design=design)
    topics = out.topics
    first = True
    typed: dict[tuple[str, str], Event] = {}  # v5: (topic, subscription) -> its first typed subscribe row
    cumulative: set[tuple[str, str]] = set()
    with path.open("w") as f:
        for e in events:
            if design == "v5" and e.op == "subscribe" and e.sub_type is not None:
                typed.setdefault((e.topic or "", e.subscription or ""), e)
            elif e.op == "ack" and e.ack_kind == "cumulative":
                cumulative.add((e.topic or "", e.subscription or ""))
            why = refusal(e, design, restartable)
            if why is not None:
                raise TraceError(f"the Pulsar broker cannot run this row ({design} design): {why}", row=e.row, source=source)
            topic = None
            if e.topic:
                topic = topics.get(e.topic)
                if topic is None:
                    topic = topics[e.topic] = map_topic(e.topic, design, run_id)
                    out.namespaces.add(topic.split("://", 1)[1].rsplit("/", 1)[0])
            if e.op == "new_txn":
                out.timeouts_ms.add(e.timeout_ms or 60_000)
            if first:
                out.first_ts_us, first = e.ts_us, False
            out.last_ts_us = e.ts_us
            out.ops[e.op] = out.ops.get(e.op, 0) + 1
            f.write(json.dumps({
                "row": e.row, "ts_us": e.ts_us, "op": e.op, "txn": e.txn, "topic": topic, "msg": e.msg,
                "subscription": e.subscription, "size": e.size,
                "timeout_ms": (e.timeout_ms or 60_000) if e.op == "new_txn" else None, "ack_kind": e.ack_kind,
                "target": e.target, "key": e.key, "sub_type": e.sub_type,
            }, separators=(",", ":")) + "\n")
            out.rows += 1
    for key, e in typed.items():
        gives = "Exclusive" if key in cumulative else "Shared"
        if e.sub_type != gives:
            consumer = "a StreamConsumer (Exclusive)" if gives == "Exclusive" else "a QueueConsumer (Shared)"
            acks = "cumulative" if gives == "Exclusive" else "individual"
            raise TraceError(f"the Pulsar broker cannot run this row (v5 design): subscription {e.subscription} on "
                             f"{e.topic} is named {e.sub_type}, but the V5 SDK has no subscription types: its "
                             f"{acks} acks make it {consumer} (jvm V5Backend.subscribe)", row=e.row, source=source)
    return out


def v5_sdk_sub_types(events: Iterable[Event]) -> tuple[tuple[str, str, str], ...]:
    """(topic, subscription, type) for each subscription ``events`` leave untyped, as the trace
    client makes it under v5: the V5 SDK has no subscription types, only consumers
    (jvm ``V5Backend.subscribe``). A QueueConsumer, the one that acks messages one by one, is a
    Shared subscription on each segment; a StreamConsumer, the one that acks cumulatively, an
    Exclusive one (``Rows.check`` refuses a subscription with both). Their dispatchers poll
    differently (``engine.dispatcher.SubscriptionType``), so the model's run of the trace takes
    these types (``RunConfig.sub_types``)."""
    untyped: dict[tuple[str, str], bool] = {}  # (topic, subscription) -> acks cumulatively
    for e in events:
        if e.op == "subscribe" and e.sub_type is None:
            untyped.setdefault((e.topic or "", e.subscription or ""), False)
        elif e.op == "ack" and e.ack_kind == "cumulative" and (e.topic or "", e.subscription or "") in untyped:
            untyped[(e.topic or "", e.subscription or "")] = True
    return tuple((topic, sub, "Exclusive" if cumulative else "Shared")
                 for (topic, sub), cumulative in untyped.items())
