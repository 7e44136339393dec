"""Model vs broker: a model run and a real-broker run (``--target pulsar://...``) of the same
trace and design, row by row. Not an A/B comparison: the broker is the reference the model is
held against, so rows say whether they agree ("equal", "differs") and give broker/model, never
"better" or "worse".

Compared: what the consumers saw (the delivered (subscription, message) pairs, the order of first
deliveries per topic and subscription, each txn's outcome), latency percentiles under the same
metric names, and the counts the broker exports under the models' names
(:mod:`bench.pulsar.metrics`). Model latencies are in modelled (virtual) time unless the model
ran in wall time; the broker's are wall time on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

LATENCIES = ("new_txn_us", "publish_nontxn_us", "publish_txn_us", "end_txn_us", "commit_to_visible_us", "dispatch_nontxn_us",
             "dispatch_txn_us", "time_to_first_dispatch_after_crash_us")
PCTS = ("p50_us", "p99_us", "max_us")
# (label, count name) the broker exports under the models' names, see bench.pulsar.metrics
COUNTS = (
    ("deliveries", "deliveries"), ("txns committed", "txns.committed"), ("txns aborted", "txns.aborted"),
    ("txns unfinished at end", "txns.unfinished"), ("txns open at end", "txns.open"),
    ("committed txns never visible", "txns.committed_not_visible"), ("undelivered at end", "undelivered_at_end"),
    ("data entries", "ledger.appends.data"), ("commit/abort markers (v4)", "ledger.appends.marker"),
    ("coordinator log appends (v4)", "tc.log_appends"), ("TB snapshot writes (v4)", "snapshot.writes"),
    ("pending-ack log appends (v4)", "pending_ack.appends"), ("metadata reads", "meta.reads"),
    ("metadata puts + deletes", "meta.writes"), ("coordinator txns created", "tc.txns.created"),
    ("coordinator txns timed out", "tc.txns.timed_out"),
)
PER_TXN = (("coordinator log appends per txn", "tc.log_appends"), ("metadata reads per txn", "meta.reads"),
           ("metadata puts + deletes per txn", "meta.writes"))


def is_broker(rs: dict[str, Any]) -> bool:
    return rs["manifest"].get("target", {}).get("kind") == "pulsar"


def engine_of(rs: dict[str, Any], label: str) -> str:
    return str(rs["manifest"]["runs"][label].get("config", {}).get("engine", label))


def same_trace(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    ta, tb = a["manifest"].get("trace", {}), b["manifest"].get("trace", {})
    for k in ("rows", "profile", "seed", "events"):
        if ta.get(k) != tb.get(k):
            return f"different trace ({k}: {ta.get(k)} vs {tb.get(k)})"
    return None


@dataclass(frozen=True)
class Agreement:
    """What the consumers saw, model vs broker, for one design."""

    delivered_pairs: tuple[int, int]  # distinct (subscription, msg) pairs: model, broker
    only_model: tuple[str, ...]  # examples "sub/msg"
    only_broker: tuple[str, ...]
    order_equal: bool
    order_example: str | None
    outcomes: tuple[int, int]  # txns compared, txns whose outcome differs
    outcome_examples: tuple[str, ...]

    @property
    def delivered_equal(self) -> bool:
        return not self.only_model and not self.only_broker

    @property
    def outcomes_equal(self) -> bool:
        return self.outcomes[1] == 0


def _first_deliveries(path: Path, label: str) -> dict[tuple[str, str], list[str]]:
    """Per (topic, subscription): messages in the order of their first delivery."""
    t = pq.read_table(path / "deliveries.parquet").to_pylist()
    rows = sorted((r for r in t if r["engine"] == label), key=lambda r: r["delivered_ts_us"])
    seen: set[tuple[str, str]] = set()
    out: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        k = (r["subscription"], r["msg"])
        if k in seen:
            continue
        seen.add(k)
        out.setdefault((r["topic"], r["subscription"]), []).append(r["msg"])
    return out


def _outcomes(path: Path, label: str) -> dict[str, str]:
    return {r["txn"]: r["outcome"] for r in pq.read_table(path / "txns.parquet").to_pylist() if r["engine"] == label}


def agreement(model_dir: str | Path, model_label: str, broker_dir: str | Path, broker_label: str) -> Agreement:
    m = _first_deliveries(Path(model_dir), model_label)
    b = _first_deliveries(Path(broker_dir), broker_label)
    mp = {(s, msg) for (_, s), msgs in m.items() for msg in msgs}
    bp = {(s, msg) for (_, s), msgs in b.items() for msg in msgs}
    order_example = None
    for key in sorted(set(m) & set(b)):
        common = mp & bp
        ma = [x for x in m[key] if (key[1], x) in common]
        ba = [x for x in b[key] if (key[1], x) in common]
        if ma != ba:
            i = next(i for i, (x, y) in enumerate(zip(ma, ba)) if x != y)
            order_example = f"{key[0]} {key[1]}: #{i} is {ma[i]} in the model, {ba[i]} on the broker"
            break
    mo, bo = _outcomes(Path(model_dir), model_label), _outcomes(Path(broker_dir), broker_label)
    differ = sorted(t for t in set(mo) | set(bo) if mo.get(t) != bo.get(t))
    return Agreement(
        delivered_pairs=(len(mp), len(bp)),
        only_model=tuple(f"{s}/{x}" for s, x in sorted(mp - bp)[:5]),
        only_broker=tuple(f"{s}/{x}" for s, x in sorted(bp - mp)[:5]),
        order_equal=order_example is None, order_example=order_example,
        outcomes=(len(set(mo) | set(bo)), len(differ)),
        outcome_examples=tuple(f"{t}: {mo.get(t)} in the model, {bo.get(t)} on the broker" for t in differ[:5]),
    )


def pairs(model: dict[str, Any], broker: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(design, model label, broker label) for each design both sets ran."""
    b_by_engine = {engine_of(broker, lab): lab for lab in broker["manifest"].get("runs", {})}
    out = []
    for lab in model["manifest"].get("runs", {}):
        e = engine_of(model, lab)
        if e in b_by_engine:
            out.append((e, lab, b_by_engine[e]))
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return b / a


def comparison_rows(model: dict[str, Any], broker: dict[str, Any], row_cls: Any) -> list[tuple[str, list[Any], str]]:
    """One (design, rows, note) per design both sets ran; rows are ``row_cls`` (bench.report.report.Row)
    with values {"model", "broker"}, ratio broker/model and a verdict that only says agree/differ."""
    out = []
    for design, mlab, blab in pairs(model, broker):
        rows = []
        # "dir": where the tables are now (bench.report.report.build names them where they will be)
        a = agreement(model.get("dir", model["path"]), mlab, broker.get("dir", broker["path"]), blab)
        rows.append(row_cls("Agreement", "delivered (subscription, msg) pairs", "pairs",
                            {"model": a.delivered_pairs[0], "broker": a.delivered_pairs[1]}, None,
                            "equal" if a.delivered_equal else "differs"))
        rows.append(row_cls("Agreement", "first-delivery order per topic and subscription", "",
                            {"model": None, "broker": None}, None, "equal" if a.order_equal else "differs"))
        rows.append(row_cls("Agreement", "txn outcomes", "txns differing",
                            {"model": a.outcomes[0], "broker": a.outcomes[1]}, None,
                            "equal" if a.outcomes_equal else "differs"))
        ml, bl = model["latency"].get(mlab, {}), broker["latency"].get(blab, {})
        for name in LATENCIES:
            if name not in ml and name not in bl:
                continue
            for pct in PCTS:
                mv = ml.get(name, {}).get(pct)
                bv = bl.get(name, {}).get(pct)
                rows.append(row_cls("Latency", f"{name} {pct[:-3]}", "µs", {"model": mv, "broker": bv},
                                    _ratio(mv, bv), "model vs broker"))
        mc, bc = model["counts"].get(mlab, {}), broker["counts"].get(blab, {})
        for label, key in COUNTS:
            if key not in bc and key not in mc:
                continue
            mv, bv = mc.get(key, 0), bc.get(key)
            verdict = "n/a" if bv is None else ("equal" if mv == bv else "differs")
            rows.append(row_cls("Counts", label, "", {"model": mv, "broker": bv}, _ratio(mv, bv), verdict))
        mt, bt = mc.get("txns.started", 0), bc.get("txns.started", 0)
        for label, key in PER_TXN:
            if key not in bc:
                continue
            mv = round(mc.get(key, 0) / mt, 2) if mt else None
            bv = round(bc[key] / bt, 2) if bt else None
            rows.append(row_cls("Per txn", label, "ops/txn", {"model": mv, "broker": bv}, _ratio(mv, bv), "model vs broker"))
        mrun, brun = model["manifest"]["runs"][mlab], broker["manifest"]["runs"][blab]
        rates = brun.get("rates", {})
        rows.append(row_cls("Speed", "committed txns per second (broker: wall time)", "txn/s",
                            {"model": None, "broker": rates.get("committed_txns_per_s")}, None, "n/a"))
        rows.append(row_cls("Speed", "rows per second offered by the trace (broker: asap pacing offers no rate)", "rows/s",
                            {"model": None, "broker": rates.get("offered_rows_per_s")}, None, "n/a"))
        rows.append(row_cls("Speed", "rows per second the client achieved", "rows/s",
                            {"model": None, "broker": rates.get("achieved_rows_per_s")}, None, "n/a"))
        rows.append(row_cls("Speed", "largest lag behind the trace", "µs",
                            {"model": None, "broker": brun.get("max_lag_us")}, None, "n/a"))
        why = same_trace(model, broker)
        pulsar = brun.get("pulsar", {})
        notes = [f"Model vs broker, {design} design: model run `{mlab}` of `{model['path']}` "
                 f"({mrun.get('time_mode', 'virtual')} time) against broker run `{blab}` of `{broker['path']}` "
                 f"(Pulsar {pulsar.get('version', '?')}, {brun.get('pacing', '?')} pacing, wall time). "
                 "Not an A/B comparison: 'differs' marks where the model does not match the real broker."]
        if why:
            notes.append(f"Not the same trace: {why}.")
        if not a.delivered_equal:
            notes.append("Delivered only by the model: " + ", ".join(a.only_model) + "; only by the broker: "
                         + ", ".join(a.only_broker) + ".")
        if a.order_example:
            notes.append("Order: " + a.order_example + ".")
        if a.outcome_examples:
            notes.append("Outcomes: " + "; ".join(a.outcome_examples) + ".")
        if pulsar.get("topic_note"):
            notes.append("Topics: " + str(pulsar["topic_note"]) + ".")
        out.append((design, rows, " ".join(notes)))
    return out
