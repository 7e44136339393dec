"""The coordinator requests' own handling (``coordinator.v4``, ``coordinator.v5``): what the
client's new-txn took at the broker beyond what the model bills for it.

The broker exports no latency of a coordinator request, and the model's new-txn already bills
every call it makes (engine/broker.py ``new_txn``: a hop each way, then v4's log append,
``MLTransactionMetadataStore.newTransaction``, or v5's sequence read and CAS and header create,
``TransactionCoordinatorV5.newTransaction`` L373-381). What is left is the request's passage
through the broker: ``ServerCnx.handleNewTxn`` handing it to the coordinator, the storage
callbacks completing on their own threads, the answer written from there. The calibration's txn
probes measured new-txn at the client (``provenance.extra["pulsar.client_observed_us"]``), so each
design's kind is that less the model's new-txn on the same trace with the kind at 0, per
percentile (as ``rpc`` is the client's publish less the broker's append, halved). The kind is
billed once per request the design's coordinator handles (new-txn, end-txn, a registration), so
end-txn and the txn publishes are checked by ``validate``, not fitted.

Fitted over the whole runs (profiles measured before 2026-11-27 07:40, which recorded no other
figures), the p99 is not: the kind's tail stops at its p90. A whole run's p99 holds more than a
request's handling: the first txns' set-up, and stalls of the whole broker (in the default
profile's probe the v5 plain publishes, which no coordinator handles, had a p99 of 29.5 ms
against the model's 7.6). Drawn for every coordinator request, such a tail lands where the broker
had none: the default's v5 tail so fitted (p90 326 µs, p99 23,752) put the p99 of the kept
validations' v5 new-txns that overlapped none of the client's END_TXNs at 25.3 ms on omb and 25.7
on small, where the brokers' were 6.1-10.4 and 6.9-11.0 ms; stopped at p90, 8.7 on both
(datasets/validation/README.md, session 43).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from engine.clock import PERCENTILES, Distribution, coordinator_kind
from engine.profile import LatencyProfile

DESIGNS = ("v4", "v5")
QUANTILES = ("p50", "p90", "p99")


def observed(profile: LatencyProfile) -> dict[str, dict[str, int]]:
    """Per design, the client's new-txn p50/p90/p99 (µs) in the calibration's txn probes: over
    their measured txns (``pulsar.client_measured_us``, recorded from 2026-11-27 07:40), else over
    the whole runs, their first txns' set-up included (``pulsar.client_observed_us``, profiles
    measured before); {} for a profile that recorded none (not calibrated on a broker). The
    model's new-txn it is set against is the whole run's: the model has no set-up."""
    extra = profile.provenance.get("extra", {}) if isinstance(profile.provenance, dict) else {}
    seen = extra.get("pulsar.client_measured_us") or extra.get("pulsar.client_observed_us") or {}
    out: dict[str, dict[str, int]] = {}
    for design in DESIGNS:
        lat = ((seen.get(design) or {}).get("new_txn_us")) or {}
        if all(f"{q}_us" in lat for q in QUANTILES):
            out[design] = {q: int(lat[f"{q}_us"]) for q in QUANTILES}
    return out


def model_new_txn(profile: LatencyProfile, trace: Path, history: int) -> dict[str, dict[str, int]]:
    """Per design, the model's new-txn p50/p90/p99 (µs) replaying ``trace`` at its pace, v5's
    store starting from ``history`` txns."""
    from bench.pulsar.validate_run import model_configs
    from bench.replay.replay import Replayer
    from bench.trace.trace import read_events
    from bench.trace.tracestats import summarize

    latency = profile.to_latency_model(1).with_resources(profile.resources)
    out: dict[str, dict[str, int]] = {}
    for cfg in model_configs(latency, profile, history, summarize(trace).ops_per_txn if history else 1, trace=trace):
        lat = Replayer(cfg).run(read_events(trace)).latency["new_txn_us"]
        out[cfg.engine] = {q: int(lat[f"{q}_us"]) for q in QUANTILES}
    return out


def _residual(broker: dict[str, int], model: dict[str, int], tail: bool = True) -> Distribution:
    """Per percentile ``broker - model``, at least 0 and non-decreasing; a constant when every
    percentile comes out the same (0 included). Without ``tail`` the p99 is the p90's (the
    figures' tail is not the request's handling: module doc)."""
    last, points = 0, []
    for q in QUANTILES:
        if tail or q != "p99":
            last = max(last, broker[q] - model[q], 0)
        points.append((PERCENTILES[q], last))
    return Distribution.constant(last) if len({v for _, v in points}) == 1 else Distribution(tuple(points))


def fit(profile: LatencyProfile, designs: tuple[str, ...] = DESIGNS) -> tuple[LatencyProfile, str]:
    """``profile`` with ``coordinator.v4`` and ``coordinator.v5`` (those of ``designs``) measured
    from the new-txn its txn probes recorded, and a note saying how and what the model's new-txn
    then is; the profile as it is, and "", when it recorded none. Each design's fit is its own:
    the model's new-txn of one does not move with the other's kind."""
    from bench.calibrate.calibrate_pulsar import write_trace

    seen = {d: q for d, q in observed(profile).items() if d in designs}
    if not seen:
        return profile, ""
    extra: dict[str, Any] = profile.provenance.get("extra", {})
    samples = int(profile.provenance.get("samples") or 0)
    # the probes ran on the warmed broker: its v5 store held the warm-up's txns
    history = int(((extra.get("pulsar.broker_warm_up") or {}).get("warm_up_txns") or {}).get("v5") or 0)
    measured = bool(extra.get("pulsar.client_measured_us"))  # else whole runs: no tail fitted (module doc)
    zero = {coordinator_kind(d): Distribution.constant(0) for d in DESIGNS}
    with tempfile.TemporaryDirectory(prefix="txnbench-coordinator-fit-") as tmp:
        trace = write_trace(Path(tmp) / "probe.parquet", samples)
        without = model_new_txn(profile.derived(operations={**profile.operations, **zero}), trace, history)
        kinds = {coordinator_kind(d): _residual(seen[d], without[d], tail=measured) if d in seen
                 else zero[coordinator_kind(d)] for d in DESIGNS if d in designs}
        fitted = profile.derived(operations={**profile.operations, **kinds})
        got = model_new_txn(fitted, trace, history)
    parts = []
    for d in DESIGNS:
        if d not in seen:
            continue
        kind = coordinator_kind(d)
        parts.append(f"{kind}: the client's new-txn {seen[d]} less the model's without it {without[d]} µs "
                     f"(p50/p90/p99; the model's with it {got[d]})")
    over = ("the client's over the measured ones, the model's over the whole run" if measured
            else "both over the whole run, so the kind's p99 is its p90: a whole run's tail is not the handling's")
    note = (f"residual of the txn probes' new-txn ({samples} + warm-up txns per design, {over}; v5's store from "
            f"{history} txns): " + "; ".join(parts))
    prov = dict(profile.provenance)
    kinds_prov = dict(prov.get("kinds") or {})
    for d in DESIGNS:
        if d in seen:
            kinds_prov[coordinator_kind(d)] = {"how": "residual", "backend": "pulsar", "source": note}
    prov["kinds"] = kinds_prov
    return fitted.derived(provenance=prov), note
