"""The notes and records the fits made after a calibration leave in a profile, as a refit of
the calibration's own fits keeps them.

A structural ``calibrate --refit`` fits again what the calibration fitted (``rpc``, the
coordinator kinds, the resources), each writing its note again; ``--coordinator-only`` fits the
coordinator kinds alone. The fits to kept validations came after those (``--rates-from``,
``--hops-from``, ``--walk-from``, ``--new-txn-from``; the notify probe's kind, added by hand on
2026-11-27): their notes follow the calibration's in ``provenance.notes``. A refit keeps them
and says, in each, what of its values it replaced; their records in ``provenance.extra`` say it
too (``replaced``). A note's ``; `` is no boundary (notes hold their own), so each is found by
how it begins.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from bench.calibrate import hops_fit, new_txn_fit, rates_fit, store_probe, walk_fit
from bench.calibrate.saturation import WALK
from engine.clock import Distribution
from engine.profile import LatencyProfile

NOTIFY = store_probe.NOTIFY_KIND + " ["  # its note as added on 2026-11-27 (provenance.extra["pulsar.notify_probe"])
BEGINNINGS = (NOTIFY, rates_fit.NOTE, hops_fit.NOTE, hops_fit.AGAIN, walk_fit.NOTE, new_txn_fit.NOTE)


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


def without_own(notes: str, key: str) -> str:
    """``notes`` without the earlier notes of the fit whose record is ``key`` (the hops fit's
    "scaled again" ones too): a fit made again writes its note anew."""
    own = {f.key: (f.note,) for f in FITS} | {"pulsar.hops_fit": (hops_fit.NOTE, hops_fit.AGAIN)}
    if key not in own:
        return notes
    head, later = split(notes)
    return "; ".join(n for n in (head, *[n for n in later if not n.startswith(own[key])]) if n)


def replaced(extra: dict[str, Any], after: LatencyProfile) -> dict[str, list[str]]:
    """Per kept fit's record in ``extra``, what of the values it gave ``after`` no longer has."""
    return {f.key: [f.what] for f in FITS if isinstance(extra.get(f.key), dict) and not f.holds(extra[f.key], after)}


def kept(later: list[str], extra: dict[str, Any], after: LatencyProfile, when: str) -> list[str]:
    """The later fits' notes a refit at ``when`` keeps in ``after``: each as the fit wrote it,
    said so where ``after`` no longer has what the fit gave (:func:`replaced`; the rates fit's
    cores stay, its bookie may not); the hops fit's "scaled again" notes go (a structural refit
    applies its scale again and says so)."""
    gone = replaced(extra, after)
    out = []
    for note in later:
        note = note.split(REPLACED)[0]  # an earlier refit's word on it
        if note.startswith(hops_fit.AGAIN):
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
