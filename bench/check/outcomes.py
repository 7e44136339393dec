"""Each txn's outcome as the history heard it, and the txns whose outcome it never heard.

The checker decides an outcome only from what the history was told: the coordinator's final
status (``outcome``), the client hearing its commit (``heard``), or an abort request (a txn the
client asked to abort can only end aborted: Pulsar's ``TransactionMetadataStore`` moves OPEN to
ABORTING on that request, and a timeout aborts too). A txn whose *commit* was requested but whose
answer nobody heard (a crash ate it, and the coordinator has since forgotten or collected the
record) is **ambiguous**: the rules never pick an outcome for it from the deliveries they judge;
they only require what holds under either outcome, and :func:`ambiguous_outcomes` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.check.history import History

UNHEARD = (None, "unknown", "unfinished", "end_timed_out")  # outcomes that say nothing about the decision


@dataclass(frozen=True)
class Outcomes:
    """Txn labels by what the history says of their outcome (the three sets are disjoint;
    a txn in none of them is undecided: open, or never ended)."""

    committed: frozenset[str]
    aborted: frozenset[str]
    ambiguous: frozenset[str]

    def decided(self, txn: str | None) -> bool:
        return txn in self.committed or txn in self.aborted

    def may_commit(self, txn: str | None) -> bool:
        return txn in self.committed or txn in self.ambiguous


def classify(h: History) -> Outcomes:
    """The heard outcome of every txn the history names."""
    # COMMITTING/ABORTING: the coordinator has decided; participants may lag (v4 on a sealed
    # segment stalls there for ever: its writes then show up as lost).
    committed = {t for t, o in h.outcomes.items() if o in ("committed", "committing")}
    aborted = {t for t, o in h.outcomes.items() if o in ("aborted", "aborting")}
    ambiguous: set[str] = set()
    for t, (_, action) in h.end_requests.items():
        if t in committed or t in aborted or h.outcomes.get(t) not in UNHEARD:
            continue
        if t in h.heard_at:
            committed.add(t)  # the client heard the commit
        elif action != "commit":
            aborted.add(t)
        else:
            ambiguous.add(t)
    return Outcomes(frozenset(committed), frozenset(aborted), frozenset(ambiguous))


def ambiguous_outcomes(h: History) -> list[str]:
    """The txns whose commit was requested and whose outcome the history never heard, sorted."""
    return sorted(classify(h).ambiguous)
