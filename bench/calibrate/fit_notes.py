"""How the notes of the fits made after a calibration begin, and where each note of a profile's
``provenance.notes`` ends. A note's ``; `` is no boundary (notes hold their own), so a later
fit's note is found by how it begins and runs up to the next one's beginning. A leaf: the fits
(``bench.calibrate.rates_fit``, ``hops_fit``, ``walk_fit``, ``new_txn_fit``) write their notes
with these beginnings, and :mod:`bench.calibrate.kept_fit` and :mod:`bench.calibrate.later_fits`
read them.
"""

from __future__ import annotations

NOTIFY = "meta.notify ["  # the notify probe's kind's note, added by hand on 2026-11-27
RATES = "resources fitted to the broker's runs at saturation kept in"  # --rates-from
HOPS = "rpc and consumer.deliver and ledger.append scaled x"  # --hops-from (hops_fit.KINDS)
HOPS_AGAIN = "rpc, consumer.deliver, ledger.append scaled x"  # its scale applied again after a refit
WALK = "meta.list_keys (a listing's walk, µs per thousand keys it passes) fitted to"  # --walk-from
NEW_TXN = "coordinator.v4 fitted to the v4 new-txn"  # --new-txn-from
BEGINNINGS = (NOTIFY, RATES, HOPS, HOPS_AGAIN, WALK, NEW_TXN)
OWN = {"pulsar.rates_fit": (RATES,), "pulsar.hops_fit": (HOPS, HOPS_AGAIN), "pulsar.walk_fit": (WALK,),
       "pulsar.new_txn_fit": (NEW_TXN,)}  # by the fit's record's key, how its notes begin


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


def without_own(notes: str, key: str) -> str:
    """``notes`` without the earlier notes of the fit whose record is ``key`` (:data:`OWN`): a fit
    made again writes its note anew."""
    if key not in OWN:
        return notes
    head, later = split(notes)
    return "; ".join(n for n in (head, *[n for n in later if not n.startswith(OWN[key])]) if n)
