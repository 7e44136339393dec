"""The history checker: did consumers see exactly what the transactions promised?

:class:`History` (:mod:`.history`) records one run; :func:`check` indexes it once
(:mod:`.index`) and runs one rule per violation kind (:mod:`.rules`, each rule's docstring says
what it checks and which Pulsar guarantee it encodes). Outcomes are only those the history heard
(:mod:`.outcomes`); a txn whose commit was asked but never answered is counted apart as
``ambiguous_outcome`` and judged only by what holds under either outcome.

The run must be drained (every txn ended and time advanced past both designs' propagation)
before :func:`check`; timing is judged by the order of events, never by timestamps.
"""

from __future__ import annotations

from bench.check.history import Ack, History, Pub
from bench.check.index import CAUSE_FAULTS, HistoryIndex, build
from bench.check.outcomes import ambiguous_outcomes
from bench.check.rules import KINDS, RULES, Violation
from bench.check.summary import CheckSummary


def check(h: History) -> list[Violation]:
    """Every violation in a drained history, rule by rule in :data:`KINDS` order."""
    ix = build(h)
    return [v for rule in RULES.values() for v in rule(ix)]


__all__ = ["Ack", "CAUSE_FAULTS", "CheckSummary", "History", "HistoryIndex", "KINDS", "Pub", "RULES", "Violation",
           "ambiguous_outcomes", "build", "check"]
