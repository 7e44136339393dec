"""The history read once into the lookups every rule shares.

Built by :func:`build` in a few passes over a drained :class:`~bench.check.history.History`:
outcomes (:mod:`bench.check.outcomes`), acks by the message or ledger they may cover, deliveries
per (subscription, message) in order, first deliveries, subscriptions per topic, redelivery
causes, the positions held back by undecided txns. Rules only read it.

*Covered*: a message ``m`` is covered on ``S`` by an ack on ``S`` that names it, or by a
cumulative ack on ``m``'s ledger at or after ``m``'s position.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from bench.check.history import Ack, History, Pub
from bench.check.outcomes import Outcomes, classify

CAUSE_FAULTS = frozenset({"crash_broker"})  # faults after which every unacked message may come again
NEVER = 1 << 62  # a sequence number after every event


@dataclass(frozen=True, eq=False)  # compared by identity: it holds the whole history
class HistoryIndex:
    h: History
    outcomes: Outcomes
    by_msg: dict[tuple[str, str], list[Ack]]  # (sub, msg) -> individual acks naming it
    by_ledger_cum: dict[tuple[str, str], list[Ack]]  # (sub, ledger) -> cumulative acks on it
    per: dict[tuple[str, str], list[tuple[int, bool]]]  # (sub, msg) -> deliveries (seq, redelivery)
    first: dict[tuple[str, str], int]  # (sub, msg) -> first delivery seq (published messages only)
    subs_by_topic: dict[str, list[str]]
    crashes: list[int]
    redeliver_req: dict[str, list[int]]  # sub -> explicit redelivery requests
    undecided: dict[str, Any]  # ledger -> lowest position of a txn still undecided at the end
    exempt: frozenset[tuple[str, str]]  # (sub, msg) first delivered after a redelivery cause

    # -- covering acks ----------------------------------------------------------------------

    def covers(self, a: Ack, p: Pub) -> bool:
        if not a.cumulative:
            return p.msg in a.msgs
        for m in a.msgs:
            q = self.h.pubs.get(m)
            if q is not None and q.ledger == p.ledger and p.position <= q.position:
                return True
        return False

    def candidates(self, sub: str, p: Pub) -> list[Ack]:
        """The acks of ``sub`` that may cover ``p``, in the order they happened (looked up by
        message and ledger: scanning every ack of the subscription made the check quadratic)."""
        named = self.by_msg.get((sub, p.msg), ())
        cumulative = self.by_ledger_cum.get((sub, p.ledger), ())
        if not cumulative:
            return list(named)  # recorded in order, once each (build)
        found = {id(a): a for a in named}
        found.update((id(a), a) for a in cumulative)
        return sorted(found.values(), key=lambda a: a.seq)

    def covered(self, sub: str, p: Pub, before: int = NEVER) -> bool:
        """``p`` covered on ``sub`` before ``before`` by an ack not known to be aborted (an ack
        of an ambiguous txn gets the benefit of the doubt)."""
        return any(a.seq < before and a.txn not in self.outcomes.aborted and self.covers(a, p)
                   for a in self.candidates(sub, p))

    # -- redelivery causes ------------------------------------------------------------------

    def abort_seq(self, txn: str) -> int | None:
        """When ``txn``'s abort took (or may have taken) effect: the request, else (a timeout)
        from the start; 0 for an ambiguous txn (it may have timed out any time); None if it
        cannot have aborted."""
        if txn in self.outcomes.ambiguous:
            return 0
        if txn not in self.outcomes.aborted:
            return None
        req = self.h.end_requests.get(txn)
        return req[0] if req is not None else 0

    def causes(self, sub: str, p: Pub, lo: int, hi: int) -> bool:
        """A reason between ``lo`` and ``hi`` for ``p`` to be delivered (again) on ``sub``: a
        broker crash, a redelivery request on ``sub``, or the abort of a pending ack covering it
        (Pulsar redelivers all unacked messages on each of these)."""
        if any(lo < c < hi for c in self.crashes) or any(lo < c < hi for c in self.redeliver_req.get(sub, ())):
            return True
        for a in self.candidates(sub, p):
            if a.txn is not None and a.seq < hi and self.covers(a, p):
                ab = self.abort_seq(a.txn)
                if ab is not None and ab < hi and max(ab, a.seq) >= lo:
                    return True
        return False

    def owes(self, sub: str, p: Pub) -> bool:
        """``S`` should see ``p``: always if ``S`` started at the earliest entry (the model's
        subscriptions); if it started at the latest (``SubscriptionInitialPosition.Latest``, the
        consumer's default and what the reference client asks for: ``ManagedCursorImpl``'s
        initial position is the last confirmed entry), only if ``p`` was published after ``S``
        subscribed. A txn's message is stored when published and visible at the commit, so one
        stored before the subscription (behind an open txn) is not owed to it either."""
        key = (p.topic, sub)
        return key not in self.h.latest_subs or p.seq > self.h.subs.get(key, 0)

    def blocked(self, p: Pub) -> bool:
        """``p`` is stored behind an entry of a txn still undecided at the end: maxReadPosition
        holds it back by design (``TopicTransactionBuffer`` maxReadPosition rules)."""
        return p.ledger in self.undecided and self.undecided[p.ledger] < p.position


def build(h: History) -> HistoryIndex:
    """Index ``h`` (drained) once for every rule."""
    outcomes = classify(h)
    by_msg: dict[tuple[str, str], list[Ack]] = {}
    by_ledger_cum: dict[tuple[str, str], list[Ack]] = {}
    for a in h.acks:
        for m in a.msgs:
            q = h.pubs.get(m)
            if not a.cumulative:
                _append_once(by_msg.setdefault((a.sub, m), []), a)
            elif q is not None:
                _append_once(by_ledger_cum.setdefault((a.sub, q.ledger), []), a)
    per: dict[tuple[str, str], list[tuple[int, bool]]] = {}
    for seq, _topic, sub, msg, redelivery in h.deliveries:
        per.setdefault((sub, msg), []).append((seq, redelivery))
    subs_by_topic: dict[str, list[str]] = {}
    for topic, sub in h.subs:
        subs_by_topic.setdefault(topic, []).append(sub)
    redeliver_req: dict[str, list[int]] = {}
    for seq, kind, detail in h.faults:
        if kind == "redeliver":
            redeliver_req.setdefault(str(detail), []).append(seq)
    index = HistoryIndex(
        h, outcomes, by_msg, by_ledger_cum, per,
        first={k: ds[0][0] for k, ds in per.items() if k[1] in h.pubs},
        subs_by_topic=subs_by_topic,
        crashes=[seq for seq, kind, _ in h.faults if kind in CAUSE_FAULTS],
        redeliver_req=redeliver_req, undecided=_undecided(h, outcomes), exempt=frozenset())
    exempt = frozenset(k for k, seq in index.first.items() if index.causes(k[0], h.pubs[k[1]], 0, seq))
    return replace(index, exempt=exempt)  # exemptions need the causes, hence a second step


def _append_once(acks: list[Ack], a: Ack) -> None:
    """Acks arrive in order, so an ack naming a message (or ledger) twice is the last one."""
    if not acks or acks[-1] is not a:
        acks.append(a)


def _undecided(h: History, outcomes: Outcomes) -> dict[str, Any]:
    """Per ledger, the lowest position of a txn neither decided nor ambiguous (open at the end)."""
    out: dict[str, Any] = {}
    for q in h.pubs.values():
        if q.txn is not None and not outcomes.decided(q.txn) and q.txn not in outcomes.ambiguous:
            if q.ledger not in out or q.position < out[q.ledger]:
                out[q.ledger] = q.position
    return out
