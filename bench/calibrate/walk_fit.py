"""A profile's listing walk fitted to the v5 rates validations kept on this machine:
``txnbench calibrate --refit PROFILE --walk-from DIR [--walk-from DIR ...]``.

At saturation v5's rate is bound by its metadata store's threads (the ``metadata`` resource).
One of the things that holds them is a listing's walk over the keys under its prefix
(``meta.list_keys``, µs per thousand keys). ``RocksdbMetadataStore.getChildrenFromStore``
passes every key under the prefix, including the sequence counters that every earlier txn left
among them, so the walk slows v5 as the store's history grows. Calibrate fits the walk on its own
saturation trace, against the broker's runs of one session (``bench.calibrate.saturation``). This
fit does the same over the saturated v5 runs kept in validations: sets from several days'
brokers and from three traces (many-participants, omb, small), as ``--rates-from`` fits v4's
cores (``bench.calibrate.rates_fit``).

- **per run**: each of a kept set's v5 runs as fast as possible, the broker's committed txn/s
  (``broker_saturation_runs``), and the txns its coordinator had created before it
  (``broker_saturation_txns_before``);
- **per walk**: the model replays the set's saturation rows as fast as possible, its store
  starting from each run's history and the set's listeners (``model_v5_listeners``), as
  ``txnbench validate`` does;
- **the walk**: the one whose squared log error over every run is least
  (:func:`bench.calibrate.saturation.search_walk`).

Every other kind and every resource stay, the metadata writes' service time too: the broker's
runs record their mean put (``MetadataStoreStats``), which calibrate takes as the service time.
v4 writes nothing to the store, so its rates are untouched. A structural ``calibrate --refit``
fits the walk from the calibration's records again, so this fit goes after it, as
``--rates-from`` does.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.calibrate import fit_notes
from bench.calibrate.kept_fit import distinct, refitted, saturated_replay, scratch, validations
from bench.calibrate.saturation import WALK, search_walk
from engine.clock import Distribution
from engine.errors import ConfigError
from engine.profile import LatencyProfile

NOTE = fit_notes.WALK  # how its note begins


@dataclasses.dataclass(frozen=True)
class KeptV5:
    """One kept validation's v5 runs at saturation: what the fit reads."""
    name: str
    trace: Path
    repeat: dict[str, int]
    runs: list[tuple[int, float]]  # (txns the coordinator had created before, committed txn/s), as measured
    listeners: int


def _usable(v: dict[str, Any]) -> bool:
    """A validation that kept the broker's v5 runs at saturation with each one's history."""
    rates = (v.get("broker_saturation_runs") or {}).get("v5") or []
    before = (v.get("broker_saturation_txns_before") or {}).get("v5") or []
    return bool(rates) and len(before) == len(rates) and all(h is not None for h in before)


def kept_sets(folder: Path, qualified: bool = False) -> list[KeptV5]:
    """Every validation in ``folder`` (``*.json``) with the broker's v5 runs at saturation and the
    history of each; its trace is ``folder``'s parent's ``NAME.parquet``. ``qualified``: each set
    named ``FOLDER/NAME``."""
    sets = [KeptV5(name, trace, {d: int(n) for d, n in (v.get("saturation_repeat") or {}).items()},
                   [(int(h), float(r)) for h, r in zip(v["broker_saturation_txns_before"]["v5"],
                                                      v["broker_saturation_runs"]["v5"])],
                   int((v.get("model_v5_listeners") or {}).get("asap", 0)))
            for name, trace, v in validations("--walk-from", folder, qualified, _usable)]
    if not sets:
        raise ConfigError(f"calibrate --walk-from {folder}: no validation there records the broker's v5 runs at "
                          "saturation with the txns each started from (broker_saturation_txns_before)")
    return sets


def fit(profile: LatencyProfile, folders: Sequence[Path],
        progress: Callable[[str], None] = lambda s: None) -> tuple[LatencyProfile, dict[str, Any], str]:
    """``profile`` with ``meta.list_keys`` fitted to the v5 runs kept in ``folders`` (module doc);
    also the fit's record (``provenance.extra["pulsar.walk_fit"]``) and a note in words."""
    distinct("--walk-from", folders)
    metadata = profile.resources.get("metadata")
    if metadata is None or (metadata.kinds is not None and WALK not in metadata.kinds):  # None: every kind
        raise ConfigError(f"calibrate --walk-from: {profile.name} has no metadata resource whose threads a "
                          f"listing's walk ({WALK}) holds: fit its resources first (calibrate --pulsar, or --refit)")
    sets = [s for f in folders for s in kept_sets(f, qualified=len(folders) > 1)]
    before = profile.operations[WALK]
    was = before.points[0][1] if before.is_constant else None
    where = ", ".join(str(f) for f in folders)
    rates: dict[tuple[int, str, int], float] = {}  # (walk, set, history) -> the model's v5 rate: each replayed once
    errors: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="txnbench-walk-fit-") as tmp:
        def model(k: int, s: KeptV5) -> list[float]:
            for h, _ in s.runs:
                if (k, s.name, h) not in rates:
                    walked = profile.derived(operations={**profile.operations, WALK: Distribution.constant(k)})
                    rates[k, s.name, h] = saturated_replay(walked, dict(walked.resources), s.trace, s.repeat, "v5",
                                                           scratch(tmp, s.name), h, s.listeners)[0]
            return [rates[k, s.name, h] for h, _ in s.runs]

        def error(k: int) -> float:
            """Every run's squared log error with a walk of ``k`` µs per thousand keys."""
            if k not in errors:
                errors[k] = sum(math.log(m / r) ** 2 if m > 0 else math.inf
                                for s in sets for m, (_, r) in zip(model(k, s), s.runs))
                progress(f"walk fit: {k:,} µs per thousand keys: squared log error {errors[k]:.4f} over "
                         f"{sum(len(s.runs) for s in sets)} v5 runs")
            return errors[k]

        best = search_walk(error)
        got = {s.name: model(best, s) for s in sets}
    record: dict[str, Any] = {
        "from": str(folders[0]) if len(folders) == 1 else [str(f) for f in folders],
        "walk_before_us_per_thousand": was, "walk_us_per_thousand": best,
        "scan": [{"walk": k, "error": round(e, 4)} for k, e in sorted(errors.items())],
        "sets": {s.name: {"txns_before": [h for h, _ in s.runs], "broker": [r for _, r in s.runs],
                          "model": [round(m, 1) for m in got[s.name]], "listeners": s.listeners} for s in sets}}
    note = (f"{NOTE} the broker's v5 runs at saturation kept in {where} (bench/calibrate/walk_fit.py): {best:,}"
            + (f" (was {was:,})" if was is not None else "")
            + ", each run replayed from the txns its coordinator had created before it; "
            + "; ".join(f"{n}: at " + "/".join(f"{h:,}" for h in x["txns_before"]) + " txns before, broker "
                        + "/".join(f"{r:.1f}" for r in x["broker"]) + ", model " + "/".join(f"{m:.1f}" for m in x["model"])
                        + " txn/s" for n, x in record["sets"].items())
            + f" (median of the broker's {statistics.median(r for s in sets for _, r in s.runs):.1f}, the model's "
              f"{statistics.median(m for ms in got.values() for m in ms):.1f})")
    return profile.derived(operations={**profile.operations, WALK: Distribution.constant(best)}), record, note


def with_walk(path: str, folders: Sequence[str], out: str, command: str,
              progress: Callable[[str], None] = lambda s: None, name: str | None = None) -> LatencyProfile:
    """The profile at ``path`` with ``meta.list_keys`` fitted to the v5 runs kept in ``folders``
    (:func:`fit`), every other kind and the resources as they were, named ``name`` (by default as
    it was); the notes and ``provenance.extra["pulsar.walk_fit"]`` say when, from what and by what
    command."""
    return refitted(fit, "pulsar.walk_fit", path, folders, out, command, progress, name)
