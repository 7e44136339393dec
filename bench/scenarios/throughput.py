"""The ``throughput`` scenario: offered txn rate against achieved rate and commit-to-visible,
per design, with shared resources of finite capacity (engine/capacity.py), so saturation shows.

Each point generates a trace of the same shape at a higher rate (:data:`SHAPE`: 4-message txns
over 4 partitions, one subscription, no plain traffic) and replays it in virtual time as fast as
the trace demands (open loop: a commit is issued at its timestamp whatever is still queued).
Achieved rate: committed txns per second over the txn phase, first new_txn to last commit
answered (:func:`bench.replay.measure.committed_rate`, the rule ``validate`` counts the broker's
saturation rate by). Past a design's capacity the achieved rate stops following the offered one
and commit-to-visible grows with the queues; the highest offered rate is past both designs'
capacity under the default profile, so the peak ratio is a ratio at saturation. On the store a
standalone runs v5's capacity falls with the txns the store has run (every scan walks their
sequence counters): with a profile that records its calibration's histories, v5 also runs on a
store that has run the median run's (:func:`calibrated_history`).

Resources: the latency profile's when it has some (the default profile's are fitted by
``calibrate --pulsar`` to a standalone broker's saturated rates: :mod:`bench.calibrate.saturation`;
v5 then runs on the store a standalone runs, ``EMULATED_STORE``, whose sequence keys and index
scans cost what the fit assumed);
else :data:`RESOURCES`, illustrative, chosen to put both designs' saturation in the range the
real broker showed on this 2-core machine (PULSAR.md "First measurements": 10-message txns, v4
94-119 txn/s, v5 25-51 txn/s), not measured.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from bench.replay import registry
from bench.replay.config import EMULATED_STORE, RunConfig
from bench.replay.measure import committed_rate
from bench.replay.replay import Replayer
from bench.trace.trace import read_events
from bench.trace.workloads import Profile, generate
from engine.clock import LatencyModel, ResourceSpec

# offered committed txns per second: past the default profile's v4 capacity (1,534 txn/s on the
# saturation mix, calibrate's fit), so that "highest achieved" is each design's saturated rate
RATES = (20, 40, 80, 160, 320, 640, 1280, 2560)
TXNS = 60  # txns per point: a p99 of the last few, and the whole sweep stays a few seconds
SEED = 17
RESOURCES = {
    "metadata": ResourceSpec(service_us=1_000, concurrency=1),  # a RocksDB-backed store: one writer per broker thread
    "bookie": ResourceSpec(service_us=2_000, concurrency=1),  # one journal per ledger
    "coordinator": ResourceSpec(service_us=200, concurrency=1),  # the TC's single thread
    "dispatch": ResourceSpec(service_us=50, concurrency=1),
}
SHAPE = Profile(name="throughput", description="4-message txns, 4 partitions, commits only",
                topics=1, partitions=4, message_size=1024, txn_fraction=1.0, txn_messages=(4, 4),
                txn_partitions=(1, 2), concurrent_txns=4, abort_ratio=0.0, subscriptions=1, ack_delay_ms=5.0)
# each registered design as it runs by default (v4; v5 as shipped)
DESIGNS = {RunConfig(engine=name).label: {"engine": name} for name in registry.designs()}


def aged(history: int) -> str:
    """The series of v5 as shipped on a store that has run ``history`` txns (``V5Options.history``)."""
    return f"v5-shipped after {history:,} txns"


def _point(trace: Path, design: str, latency: LatencyModel, store: str | None = None,
           history: int = 0) -> dict[str, float | None]:
    """One design on one trace; ``store``: v5's metadata store URL (None: the default);
    ``history``: the txns v5's store has run before."""
    spec = DESIGNS[design]
    extra: dict[str, Any] = {"metadata_url": store} if store is not None and spec["engine"] == "v5" else {}
    cfg = RunConfig(latency=latency, drain_ms=5_000, **spec, **extra).with_history(history)  # type: ignore[arg-type]
    result = Replayer(cfg).run(read_events(trace))
    rows = result.txns
    visible = [v for o, v in zip(rows["outcome"], rows["visible_ts_us"]) if o == "committed" and v is not None]
    c2v = result.latency.get("commit_to_visible_us", {})
    ms = lambda key: round(c2v[key] / 1000, 2) if key in c2v else None  # noqa: E731
    achieved = committed_rate({"outcome": o, "end_ts_us": e, "opened_ts_us": s}
                              for o, e, s in zip(rows["outcome"], rows["end_ts_us"], rows["opened_ts_us"]))
    return {"committed": float(len(visible)), "achieved": achieved, "p50": ms("p50_us"), "p99": ms("p99_us")}


def run(rates: tuple[int, ...] = RATES, txns: int = TXNS, resources: dict[str, ResourceSpec] | None = None,
        latency: LatencyModel | None = None, history: int = 0) -> dict[str, dict[int, dict[str, float | None]]]:
    """Per design, per offered rate: committed txns, achieved rate (txn/s), commit-to-visible
    p50/p99 (ms). ``latency``: the operations' latencies (default: the constants); ``resources``
    (default: ``latency``'s when it has some, else :data:`RESOURCES`); ``history``: also v5 as
    shipped on a store that has run that many txns (series :func:`aged`)."""
    base = latency or LatencyModel()
    # the profile's own resources were fitted on a standalone broker: v5 then runs on the store a
    # standalone runs (RocksDB's emulated scans and sequence keys), as validate runs it
    store = EMULATED_STORE if resources is None and base.resources else None
    if resources is None:
        resources = dict(base.resources) or RESOURCES
    latency = base.with_resources(dict(resources))
    series = {d: (d, 0) for d in DESIGNS}
    if history:
        series[aged(history)] = ("v5-shipped", history)
    out: dict[str, dict[int, dict[str, float | None]]] = {s: {} for s in series}
    with tempfile.TemporaryDirectory(prefix="txnbench-throughput-") as tmp:
        for rate in rates:
            shape = dataclasses.replace(SHAPE, rate_per_s=float(rate * SHAPE.txn_messages[0]))
            trace = Path(tmp) / f"r{rate}.parquet"
            # a txn is ~2 + 2 x messages rows (new, publishes, acks, commit)
            generate(shape, txns * (2 + 2 * SHAPE.txn_messages[0]), SEED, trace)
            for name, (design, before) in series.items():
                out[name][rate] = _point(trace, design, latency, store, before)
    return out


def calibrated_history(provenance: Any) -> int:
    """The txns v5's coordinator had created before the saturation run a profile's fit matched
    (``provenance.extra["pulsar.saturation"]``: :func:`bench.calibrate.saturation.median_history`);
    0 when it records none."""
    from bench.calibrate.saturation import median_history

    return median_history(((provenance or {}).get("extra") or {}).get("pulsar.saturation"))


def describe_resources(resources: dict[str, ResourceSpec]) -> str:
    return ", ".join(f"{n} {r.describe(n)}" for n, r in resources.items())


def figure(vals: dict[str, dict[int, dict[str, Any]]], rates: tuple[int, ...]) -> dict[str, Any]:
    def lines(key: str) -> dict[str, list[list[float]]]:
        return {d: [[r, v] for r in rates if (v := vals[d][r][key]) is not None] for d in vals}

    offered = {"offered": [[r, float(r)] for r in rates]}
    return {"file": "throughput_vs_offered.png", "title": "Throughput vs offered txn rate (finite capacity)",
            "x": "offered txn/s", "x_scale": "log2",
            "panels": [{"title": "achieved committed txn/s", "y": "txn/s", "lines": {**lines("achieved"), **offered}},
                       {"title": "commit to visible p50", "y": "ms", "y_scale": "log", "lines": lines("p50")},
                       {"title": "commit to visible p99", "y": "ms", "y_scale": "log", "lines": lines("p99")}]}
