"""A profile's hops and appends scaled to the plain publishes validations kept on this machine:
``txnbench calibrate --refit PROFILE --hops-from DIR [--hops-from DIR ...]``.

A profile's ``rpc`` and ``ledger.append`` come from one calibration session: the probes'
publishes and the broker's publish Summary (``bench.calibrate.calibrate_pulsar``). The brokers
validated since answered faster. Over the fifteen fresh-broker sets of 2026-11-27/28
(``fresh-default-5`` to ``-9``), v4's plain publish p50 at the trace's pace was 1,611-2,249 µs.
The default's model answered in 2,387-2,449 µs, above every one of them. A plain publish is two
hops and an append (engine/broker.py ``publish``), so that one figure per set measures the hops
and the append together. Those sets are the record of this machine's brokers, where one
calibration is one session.

The fit is one scale, applied to every point of the kinds' distributions (:data:`KINDS`):

- **per set**: the broker's v4 plain publish p50, the ``publish (plain) p50`` row its validation
  kept;
- **per scale** (:data:`SCALES`): the model's v4 replay of the same trace at its pace, with the
  kinds scaled, gives its plain publish p50;
- **the scale**: the one whose squared log error over the sets is least.

The kinds keep their shape (the split between hop and append that the calibration measured). No
kept figure can split them: the runs record the publish Summary's count, not its quantiles.
``consumer.deliver`` is scaled with ``rpc``, as a calibration takes them equal. Every other kind
and the resources stay as they were. The kinds as they were are recorded: a structural
``calibrate --refit`` fits from the calibration's own records, so it restores them first and
applies the scale again after (:func:`unscaled`, :func:`rescaled`). ``--hops-from`` on a profile
fitted before also starts from them: its scale replaces the one recorded, where scaling the
scaled kinds again would compound the two. The saturated v4 rate is held
by the host's cores (``bench.calibrate.rates_fit``), not by these latencies, so ``--rates-from``
needs no second pass.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.calibrate import fit_notes
from bench.calibrate.kept_fit import distinct, paced_latency, refitted, validations
from engine.clock import Distribution
from engine.errors import ConfigError
from engine.profile import LatencyProfile

# what a plain publish is made of (engine/broker.py publish), and the consumer's hop, which a
# calibration takes equal to rpc (bench.calibrate.calibrate._rpc)
KINDS = ("rpc", "consumer.deliver", "ledger.append")
NOTE = fit_notes.HOPS  # how its note begins
AGAIN = fit_notes.HOPS_AGAIN  # how the note of its scale applied again after a refit begins
ROW = "publish (plain) p50"  # bench.report.validate's row, the broker's figure the fit matches
SCALES = tuple(round(0.5 + 0.025 * i, 3) for i in range(41))  # 0.5 to 1.5


@dataclasses.dataclass(frozen=True)
class KeptPublish:
    """One kept validation's broker v4 plain publish p50 at the trace's pace."""
    name: str
    trace: Path
    broker_p50_us: int


def _broker_p50(v: dict[str, Any]) -> int:
    """The broker's v4 :data:`ROW` (µs) a validation kept; 0 when it kept none."""
    row = next((c for c in v.get("checks") or () if c.get("design") == "v4" and c.get("metric") == ROW), None)
    return int(row.get("broker") or 0) if row is not None else 0


def kept_publishes(folder: Path, qualified: bool = False) -> list[KeptPublish]:
    """Every validation in ``folder`` (``*.json``) that kept the broker's v4 ``publish (plain)
    p50``; its trace is ``folder``'s parent's ``NAME.parquet``. ``qualified``: each named
    ``FOLDER/NAME``."""
    kept = [KeptPublish(name, trace, _broker_p50(v))
            for name, trace, v in validations("--hops-from", folder, qualified, lambda v: _broker_p50(v) > 0)]
    if not kept:
        raise ConfigError(f"calibrate --hops-from {folder}: no validation there kept the broker's v4 {ROW!r}")
    return kept


def scaled(profile: LatencyProfile, scale: float) -> LatencyProfile:
    """``profile`` with every point of :data:`KINDS` times ``scale`` (whole µs)."""
    ops = dict(profile.operations)
    for kind in KINDS:
        ops[kind] = Distribution(tuple((q, round(v * scale)) for q, v in ops[kind].points))
    return profile.derived(operations=ops)


def model_p50(profile: LatencyProfile, trace: Path) -> int:
    """The model's v4 plain publish p50 (µs) replaying ``trace`` at its pace."""
    return int(paced_latency(profile, trace, "v4")["publish_nontxn_us"]["p50_us"])


def fit(profile: LatencyProfile, folders: Sequence[Path],
        progress: Callable[[str], None] = lambda s: None) -> tuple[LatencyProfile, dict[str, Any], str]:
    """``profile`` with :data:`KINDS` scaled to the kept sets in ``folders`` (module doc); also
    the fit's record (``provenance.extra["pulsar.hops_fit"]``) and a note in words."""
    missing = [k for k in KINDS if k not in profile.operations]
    if missing:
        raise ConfigError(f"calibrate --hops-from: {profile.name} has no {', '.join(missing)} to scale")
    # from the calibration's own kinds: a profile fitted before is scaled afresh, not twice
    profile = unscaled(profile)
    distinct("--hops-from", folders)
    kept = [k for f in folders for k in kept_publishes(f, qualified=len(folders) > 1)]
    where = ", ".join(str(f) for f in folders)
    scan: list[dict[str, float]] = []  # per scale tried, its error
    models: dict[float, dict[str, int]] = {}  # per scale tried, the model's p50 per set
    for scale in SCALES:
        prof = scaled(profile, scale)
        got = models[scale] = {k.name: model_p50(prof, k.trace) for k in kept}
        err = sum(math.log(got[k.name] / k.broker_p50_us) ** 2 if got[k.name] > 0 else math.inf for k in kept)
        scan.append({"scale": scale, "error": round(err, 4)})
        progress(f"hops fit: x{scale}: model v4 plain publish p50 {got} µs (squared log error {err:.4f})")
        if len(scan) >= 3 and scan[-1]["error"] > scan[-2]["error"] > scan[-3]["error"]:
            break  # past the least (the error is one valley in the scale): the rest only grows
    scale = min(scan, key=lambda s: s["error"])["scale"]
    broker = {k.name: k.broker_p50_us for k in kept}
    record: dict[str, Any] = {"from": [str(f) for f in folders], "kinds": list(KINDS), "row": f"v4 {ROW}",
                              "scale": scale, "broker_p50_us": broker, "model_p50_us": models[scale], "scan": scan,
                              "was": {k: [list(p) for p in profile.operations[k].points] for k in KINDS}}
    off = sorted((models[scale][n] - b) / b for n, b in broker.items())
    note = (f"{NOTE}{scale} to the v4 plain publish p50 the broker answered at in "
            f"{len(kept)} kept validations in {where} (bench/calibrate/hops_fit.py): the model's then "
            f"{off[0]:+.0%} to {off[-1]:+.0%} off the broker's")
    fitted = scaled(profile, scale)
    kinds = dict(fitted.provenance.get("kinds") or {})
    for kind in KINDS:
        kinds[kind] = {**dict(kinds.get(kind) or {}), "scaled": {"by": scale, "how": "hops_fit", "source": note}}
    return fitted.derived(provenance={**fitted.provenance, "kinds": kinds}), record, note


def unscaled(profile: LatencyProfile) -> LatencyProfile:
    """``profile`` with the kinds a hops fit scaled as they were before it (as it is without one)."""
    was = (profile.provenance.get("extra", {}).get("pulsar.hops_fit") or {}).get("was")
    if not was:
        return profile
    return profile.derived(operations={**profile.operations,
                                       **{k: Distribution(tuple((q, v) for q, v in pts)) for k, pts in was.items()}})


def rescaled(profile: LatencyProfile) -> LatencyProfile:
    """``profile`` (fitted again from :func:`unscaled`) with its recorded hops fit's scale applied
    again, and the kinds before it recorded anew; as it is without one."""
    record = profile.provenance.get("extra", {}).get("pulsar.hops_fit")
    if not record:
        return profile
    scale = float(record["scale"])
    prov = dict(profile.provenance)
    prov["extra"] = {**prov["extra"], "pulsar.hops_fit": {
        **record, "was": {k: [list(p) for p in profile.operations[k].points] for k in KINDS}}}
    prov["notes"] = str(prov.get("notes", "")) + (f"; {AGAIN}{scale} again after the refit, as "
                                                  "the hops fit recorded (calibrate --hops-from to fit it again)")
    return scaled(profile, scale).derived(provenance=prov)


def with_hops(path: str, folders: Sequence[str], out: str, command: str,
              progress: Callable[[str], None] = lambda s: None, name: str | None = None) -> LatencyProfile:
    """The profile at ``path`` with :data:`KINDS` scaled to the validations in ``folders``
    (:func:`fit`), everything else as it was, named ``name`` (by default as it was); the notes,
    ``provenance.kinds`` and ``provenance.extra["pulsar.hops_fit"]`` say when, from what and by
    what command."""
    return refitted(fit, "pulsar.hops_fit", path, folders, out, command, progress, name)
