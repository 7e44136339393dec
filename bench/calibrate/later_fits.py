"""The notes and records the fits made after a calibration leave in a profile, as a refit of
the calibration's own fits keeps them.

A structural ``calibrate --refit`` fits again what the calibration fitted (``rpc``, the
coordinator kinds, the resources), each writing its note again; ``--coordinator-only`` fits the
coordinator kinds alone. The fits to kept validations came after those (``--rates-from``,
``--hops-from``, ``--walk-from``, ``--new-txn-from``; the notify probe's kind, added by hand on
2026-11-27): their notes follow the calibration's in ``provenance.notes``. A refit keeps them
and says, in each, what of its values it replaced; their records in ``provenance.extra`` say it
too (``replaced``). Each note is found by how it begins (:mod:`bench.calibrate.fit_notes`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from bench.calibrate import hops_fit, new_txn_fit, rates_fit, walk_fit
from bench.calibrate.saturation import WALK
from engine.clock import Distribution
from engine.profile import LatencyProfile

REPLACED = " [replaced by the refit of "  # how a refit's word on a kept fit's note begins


def _bookie(record: dict[str, Any], profile: LatencyProfile) -> bool:
    bookie = profile.resources.get("bookie")
    return (bookie.concurrency if bookie is not None else None) == record.get("bookie")  # None: unbounded


def _walk(record: dict[str, Any], profile: LatencyProfile) -> bool:
    return profile.operations.get(WALK) == Distribution.constant(int(record.get("walk_us_per_thousand", -1)))


def _handling(record: dict[str, Any], profile: LatencyProfile) -> bool:
    was = new_txn_fit.handling(int(record.get("p50_us", -1)), int(record.get("p99_us", -1)))
    return profile.operations.get(new_txn_fit.KIND) == was


@dataclasses.dataclass(frozen=True)
class Later:
    """A fit to kept validations: its record's key, how its note begins, what of its values a
    refit may replace, the flag that fits it again, and whether a profile still has what the
    fit gave (from its record)."""
    key: str
    note: str
    what: str
    flag: str
    holds: Callable[[dict[str, Any], LatencyProfile], bool]


FITS = (Later("pulsar.rates_fit", rates_fit.NOTE, "bookie", "--rates-from", _bookie),
        Later("pulsar.walk_fit", walk_fit.NOTE, WALK, "--walk-from", _walk),
        Later("pulsar.new_txn_fit", new_txn_fit.NOTE, new_txn_fit.KIND, "--new-txn-from", _handling))


def replaced(extra: dict[str, Any], after: LatencyProfile) -> dict[str, list[str]]:
    """Per kept fit's record in ``extra``, what of the values it gave ``after`` no longer has."""
    return {f.key: [f.what] for f in FITS if isinstance(extra.get(f.key), dict) and not f.holds(extra[f.key], after)}


def kept(later: list[str], extra: dict[str, Any], after: LatencyProfile, when: str,
         rescaled: bool = False) -> list[str]:
    """The later fits' notes a refit at ``when`` keeps in ``after``: each as the fit wrote it,
    said so where ``after`` no longer has what the fit gave (:func:`replaced`; the rates fit's
    cores stay, its bookie may not). ``rescaled``: the refit applies the hops fit's scale again
    and says so (``hops_fit.rescaled``), so the earlier "scaled again" notes go."""
    gone = replaced(extra, after)
    out = []
    for note in later:
        note = note.split(REPLACED)[0]  # an earlier refit's word on it
        if rescaled and note.startswith(hops_fit.AGAIN):
            continue
        fit = next((f for f in FITS if note.startswith(f.note) and f.key in gone), None)
        if fit is not None:
            kept_too = ", its cpu kept" if fit.key == "pulsar.rates_fit" else ""
            note += (f"{REPLACED}{when}: its {fit.what} fitted again to the calibration's own records{kept_too}; "
                     f"calibrate {fit.flag} to fit it to the kept runs again]")
        out.append(note)
    return out


def marked(extra: dict[str, Any], after: LatencyProfile, when: str) -> dict[str, Any]:
    """``extra`` with each kept fit's record saying what of its values ``after`` no longer has
    (``replaced``: when and what), or nothing where it has them all."""
    gone = replaced(extra, after)
    out = {k: ({x: y for x, y in v.items() if x != "replaced"} if isinstance(v, dict) and any(f.key == k for f in FITS)
               else v) for k, v in extra.items()}
    for key, what in gone.items():
        out[key] = {**out[key], "replaced": {"at": when, "what": what}}
    return out
