"""The notes and records the fits made after a calibration leave in a profile, as a structural
``calibrate --refit`` keeps them.

A structural refit fits again what the calibration fitted (``rpc``, the coordinator kinds, the
resources), each writing its note again. The fits to kept validations came after those
(``--rates-from``, ``--hops-from``, ``--walk-from``; the notify probe's kind, added by hand on
2026-11-27): their notes follow the calibration's in ``provenance.notes``. The refit keeps them
and says, in each, what of its values it replaced; their records in ``provenance.extra`` say it
too (``replaced``). A note's ``; `` is no boundary (notes hold their own), so each is found by
how it begins.
"""

from __future__ import annotations

from typing import Any

from bench.calibrate import hops_fit, rates_fit, store_probe, walk_fit
from bench.calibrate.saturation import WALK
from engine.profile import LatencyProfile

NOTIFY = store_probe.NOTIFY_KIND + " ["  # its note as added on 2026-11-27 (provenance.extra["pulsar.notify_probe"])
BEGINNINGS = (NOTIFY, rates_fit.NOTE, hops_fit.NOTE, hops_fit.AGAIN, walk_fit.NOTE)


def split(notes: str) -> tuple[str, list[str]]:
    """``notes`` up to the first later fit's note, and each later fit's note in order."""
    starts = sorted(i for b in BEGINNINGS for i in _at(notes, b))
    if not starts:
        return notes, []
    ends = [s - 2 for s in starts[1:]] + [len(notes)]  # each up to the "; " before the next
    return notes[:max(0, starts[0] - 2)], [notes[s:e] for s, e in zip(starts, ends)]


def _at(notes: str, beginning: str) -> list[int]:
    """Where the notes that begin with ``beginning`` begin: at the start, or after a ``; ``."""
    found = [0] if notes.startswith(beginning) else []
    i = notes.find("; " + beginning)
    while i >= 0:
        found.append(i + 2)
        i = notes.find("; " + beginning, i + 2)
    return found


CPU_KEPT = " [its cpu kept by the refit of "
WALK_REPLACED = " [replaced by the refit of "


def replaced(extra: dict[str, Any], after: LatencyProfile) -> dict[str, list[str]]:
    """Per kept fit's record in ``extra``, what of the values it gave ``after`` no longer has: the
    rates fit's bookie (``record["bookie"]``, None unbounded), the walk fit's walk."""
    out: dict[str, list[str]] = {}
    rates = extra.get("pulsar.rates_fit")
    if isinstance(rates, dict) and "bookie" in rates:
        bookie = after.resources.get("bookie")
        if (bookie.concurrency if bookie is not None else None) != rates["bookie"]:
            out["pulsar.rates_fit"] = ["bookie"]
    walk = extra.get("pulsar.walk_fit")
    if isinstance(walk, dict) and "walk_us_per_thousand" in walk:
        now = after.operations.get(WALK)
        if now is None or not now.is_constant or now.points[0][1] != walk["walk_us_per_thousand"]:
            out["pulsar.walk_fit"] = [WALK]
    return out


def kept(later: list[str], extra: dict[str, Any], after: LatencyProfile, when: str) -> list[str]:
    """The later fits' notes a structural refit at ``when`` keeps in ``after``: each as the fit
    wrote it, said so where ``after`` no longer has what the fit gave (:func:`replaced`); the hops
    fit's "scaled again" notes go (the refit applies its scale again and says so)."""
    gone = replaced(extra, after)
    out = []
    for note in later:
        note = note.split(CPU_KEPT)[0].split(WALK_REPLACED)[0]  # an earlier refit's word on it
        if note.startswith(hops_fit.AGAIN):
            continue
        if note.startswith(rates_fit.NOTE) and "pulsar.rates_fit" in gone:
            note += (f"{CPU_KEPT}{when}, which fitted the bookie again to the calibration's own rates: "
                     "calibrate --rates-from to fit it to the kept runs again]")
        elif note.startswith(walk_fit.NOTE) and "pulsar.walk_fit" in gone:
            note += (f"{WALK_REPLACED}{when}, which fitted the walk again to the calibration's own v5 runs: "
                     "calibrate --walk-from to fit it to the kept runs again]")
        out.append(note)
    return out


def marked(extra: dict[str, Any], after: LatencyProfile, when: str) -> dict[str, Any]:
    """``extra`` with each kept fit's record saying what of its values ``after`` no longer has
    (``replaced``: when and what), or nothing where it has them all."""
    gone = replaced(extra, after)
    out = {k: ({x: y for x, y in v.items() if x != "replaced"} if k in ("pulsar.rates_fit", "pulsar.walk_fit")
               and isinstance(v, dict) else v) for k, v in extra.items()}
    for key, what in gone.items():
        out[key] = {**out[key], "replaced": {"at": when, "what": what}}
    return out
