"""The v4 coordinator's handling fitted to the new-txns validations kept on this machine:
``txnbench calibrate --refit PROFILE --new-txn-from DIR [--new-txn-from DIR ...]``.

A coordinator request's handling (``coordinator.v4``) is what a new-txn takes beyond the calls the
model bills for it: a hop each way and the coordinator log's append (engine/broker.py
``new_txn``). On the v4 path it is the requests' passage through two pinned threads at each end:
the client's ``TransactionMetaStoreHandler`` hands the request and its answer to its
``internalPinnedExecutor`` (5.0.0-M1 L286, L309), and the coordinator runs
``MLTransactionMetadataStore.newTransaction`` on its own (``safeRunAsync(..., internalPinnedExecutor)``,
L250-293), as it does an END_TXN's status change (``updateTxnStatus`` L395) and a partition's
registration (``addProducedPartitionToTxn``). The calibration fits it as its txn probes' new-txn
less the model's (``bench.calibrate.coordinator_fit``): 0 for v4 in the default, whose probes
answered a new-txn as fast as a plain publish. The kept validations' brokers did not: there a
new-txn took about 0.4 ms more than a plain publish (v4 new-txn p50 1,886-2,581 µs over the 18
sets against plain publish p50 1,611-2,249), and once ``--hops-from`` had scaled the hops and the
append to their publishes, the model's v4 new-txn p50 was below every broker's on all 18 sets
(1,793-1,873 µs over the new-txns that overlapped none of the client's END_TXNs, the brokers'
1,886-2,581).

The fit, on the profile's kinds as they are (after the hops fit):

- **per set**: the broker's v4 ``new-txn p50`` and ``new-txn p99``, the rows its validation kept;
- **the kind**: flat at the p50 value up to its p90, then rising to the p99 value (a tail in the
  top tenth of the requests, none below: the shape the calibration's residual takes);
- **the p50 value**, then the p99 value, the other held, twice over (:data:`ROUNDS`: the tail
  also lifts the new-txn p50, as the requests it slows pass the median): each the one on a grid
  (:data:`STEP` µs) whose model v4 new-txn p50, then p99, has the least squared log error over
  the sets, the model replaying each trace at its pace (once per trace: the model's v4 takes
  nothing else from a set).

v5 is not fitted. Its new-txns that overlapped no END_TXN were answered at about the brokers'
p50 already; the rest of its new-txn misses are the requests that queue behind an END_TXN on the
connection's thread, and a tail for every coordinator request would land where the brokers had
none (``bench.calibrate.coordinator_fit``'s module doc). Every other kind and the resources stay.
The END_TXN and the txn publish rows, which bill the same kind once a request, are the checks
(datasets/validation/README.md, session 45).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.calibrate import fit_notes
from bench.calibrate.kept_fit import distinct, paced_latency, refitted, validations
from engine.clock import Distribution, coordinator_kind
from engine.errors import ConfigError
from engine.profile import LatencyProfile

DESIGN = "v4"
KIND = coordinator_kind(DESIGN)
ROWS = ("new-txn p50", "new-txn p99")  # bench.report.validate's rows, the broker's figures the fit matches
STEP = 25  # µs, the grid of both values
P50_MAX = 3_000  # µs: past a whole new-txn of the brokers'
P99_MAX = 40_000
ROUNDS = 2  # of fitting the p50, then the p99, the other held
NOTE = fit_notes.NEW_TXN  # how its note begins

Progress = Callable[[str], None]


def _broker(v: dict[str, Any]) -> dict[str, int]:
    """The broker's v4 :data:`ROWS` (µs) a validation kept, by row; {} unless it kept both."""
    rows = {c.get("metric"): c.get("broker") for c in v.get("checks") or () if c.get("design") == DESIGN}
    got = {r: int(rows[r]) for r in ROWS if rows.get(r)}
    return got if len(got) == len(ROWS) else {}


def kept_new_txns(folder: Path, qualified: bool = False) -> list[tuple[str, Path, dict[str, int]]]:
    """(name, trace, the broker's :data:`ROWS`) of every validation in ``folder`` that kept both."""
    kept = [(name, trace, _broker(v)) for name, trace, v in
            validations("--new-txn-from", folder, qualified, lambda v: bool(_broker(v)))]
    if not kept:
        raise ConfigError(f"calibrate --new-txn-from {folder}: no validation there kept the broker's v4 "
                          + " and ".join(repr(r) for r in ROWS))
    return kept


def handling(p50: int, p99: int) -> Distribution:
    """The kind's shape (module doc): ``p50`` up to its p90, rising to ``p99`` at its p99."""
    return Distribution.constant(p50) if p99 <= p50 else Distribution(((0.5, p50), (0.9, p50), (0.99, p99)))


def model_new_txn(profile: LatencyProfile, trace: Path) -> tuple[int, int]:
    """The model's v4 new-txn p50 and p99 (µs) replaying ``trace`` at its pace."""
    lat = paced_latency(profile, trace, DESIGN)["new_txn_us"]
    return int(lat["p50_us"]), int(lat["p99_us"])


def _least(error: Callable[[int], float], lo: int, hi: int) -> int:
    """The value in [lo, hi], on the :data:`STEP` grid, of least ``error``: up from ``lo`` by a
    quarter at a time to ``hi`` (a p50 of a hundred requests moves in steps, so the error has
    more than one valley), then around the best by halving steps down to :data:`STEP`."""
    error = functools.cache(error)
    best, v = lo, lo
    while v < hi:
        v = min(hi, max(v + STEP, round(v * 1.25 / STEP) * STEP))
        if error(v) < error(best):
            best = v
    step = max(STEP, round(best / 8 / STEP) * STEP)
    while True:
        for near in (best - step, best + step):
            if lo <= near <= hi and error(near) < error(best):
                best = near
        if step == STEP:
            return best
        step = max(STEP, step // 2 // STEP * STEP)


def fit(profile: LatencyProfile, folders: Sequence[Path],
        progress: Progress = lambda s: None) -> tuple[LatencyProfile, dict[str, Any], str]:
    """``profile`` with :data:`KIND` fitted to the kept sets in ``folders`` (module doc); also the
    fit's record (``provenance.extra["pulsar.new_txn_fit"]``) and a note in words."""
    if KIND not in profile.operations:
        raise ConfigError(f"calibrate --new-txn-from: {profile.name} has no {KIND} to fit")
    distinct("--new-txn-from", folders)
    kept = [k for f in folders for k in kept_new_txns(f, qualified=len(folders) > 1)]
    traces = sorted({trace for _, trace, _ in kept})
    where = ", ".join(str(f) for f in folders)
    models: dict[tuple[int, int], dict[Path, tuple[int, int]]] = {}

    def model(p50: int, p99: int) -> dict[Path, tuple[int, int]]:
        if (p50, p99) not in models:
            with_kind = profile.derived(operations={**profile.operations, KIND: handling(p50, p99)})
            models[p50, p99] = {t: model_new_txn(with_kind, t) for t in traces}
        return models[p50, p99]

    def error(p50: int, p99: int, row: int) -> float:
        got = model(p50, p99)
        err = sum(math.log(got[t][row] / b[ROWS[row]]) ** 2 if got[t][row] > 0 else math.inf for _, t, b in kept)
        progress(f"new-txn fit: {KIND} p50 {p50:,}, p99 {p99:,} µs: squared log error of the v4 {ROWS[row]} {err:.4f}")
        return err

    # each value in turn, the other held (the tail lifts the p50 too: the new-txns it slows pass the median)
    p50 = p99 = 0
    for _ in range(ROUNDS):
        p50 = _least(lambda v: error(v, max(v, p99), 0), 0, P50_MAX)
        p99 = _least(lambda v: error(p50, v, 1), p50, P99_MAX)
    got = model(p50, p99)
    was = profile.operations[KIND]
    record: dict[str, Any] = {
        "from": [str(f) for f in folders], "kind": KIND, "rows": [f"{DESIGN} {r}" for r in ROWS],
        "p50_us": p50, "p99_us": p99, "was": [list(p) for p in was.points],
        "broker": {name: b for name, _, b in kept},
        "model": {t.stem: dict(zip(ROWS, got[t])) for t in traces}, "replays": len(models) * len(traces)}
    off = {r: sorted((got[t][i] - b[r]) / b[r] for _, t, b in kept) for i, r in enumerate(ROWS)}
    note = (f"{NOTE} p50 and p99 the broker answered at in {len(kept)} kept validations in {where} "
            f"(bench/calibrate/new_txn_fit.py): {p50:,} µs up to its p90, {p99:,} at its p99 (was "
            + ", ".join(f"p{round(q * 100)} {v:,}" for q, v in was.points) + " µs); the model's then "
            + "; ".join(f"{r} {off[r][0]:+.0%} to {off[r][-1]:+.0%}" for r in ROWS) + " off the broker's")
    fitted = profile.derived(operations={**profile.operations, KIND: handling(p50, p99)})
    kinds = dict(fitted.provenance.get("kinds") or {})
    kinds[KIND] = {**dict(kinds.get(KIND) or {}), "how": "new_txn_fit", "source": note}
    return fitted.derived(provenance={**fitted.provenance, "kinds": kinds}), record, note


def with_new_txn(path: str, folders: Sequence[str], out: str, command: str,
                 progress: Progress = lambda s: None, name: str | None = None) -> LatencyProfile:
    """The profile at ``path`` with :data:`KIND` fitted to the validations in ``folders``
    (:func:`fit`), everything else as it was, named ``name`` (by default as it was); the notes
    and ``provenance.extra["pulsar.new_txn_fit"]`` say when, from what and by what command."""
    return refitted(fit, "pulsar.new_txn_fit", path, folders, out, command, progress, name)
