"""A history checker: did consumers see exactly what the transactions promised?

A :class:`History` records, in the order they happened, the client operations of one run
(subscribes, publishes with their txn and message id, successful acks, end-txn requests and
outcomes), the faults injected (broker crash, coordinator restart, explicit redelivery...) and
every delivery. :func:`check` reads it after the run has quiesced and returns the violations,
each naming the subscription, the message and the txn at fault.

Definitions (``S`` a subscription on topic ``T``, ``m`` a message published on ``T``; a message
is *covered* on ``S`` by an ack on ``S`` that names it, or a cumulative ack on ``m``'s ledger at
or after ``m``'s position, issued by a plain ack or by a txn whose outcome is not ``aborted``):

``aborted_read``
    ``m`` of a txn whose final outcome is not ``committed`` (aborted, timed out, still open,
    unfinished) is delivered on any subscription.
``uncommitted_read``
    ``m`` of a txn is delivered before the client asked to commit that txn.
``lost_write``
    ``m`` is plain or of a committed txn, ``S`` was subscribed at some point (a new
    subscription reads from the earliest entry, so when does not matter), ``m`` was never
    delivered on ``S`` and is not covered on ``S`` by an ack issued before ``m``'s first
    delivery could have happened, i.e. anywhere in the history.
    A message stored behind an entry of a txn still undecided at the end of the run is
    blocked by design (maxReadPosition), not lost.
``torn_txn``
    the first delivery on ``S`` of a committed txn's message ``m2`` while an earlier message
    ``m1`` of the same txn on the same ledger had been neither delivered on ``S`` nor covered.
``duplicate``
    a second delivery of ``m`` on ``S`` with no redelivery cause since the previous one: a
    broker crash, an explicit redelivery request on ``S``, or the abort (requested, or a timeout)
    of a txn holding a pending ack that covers ``m`` on ``S``.
``out_of_order``
    first deliveries on ``S`` of one ledger not in position order, or of one key not in publish
    order (across segments of a scalable topic). Messages whose first delivery follows the
    abort of a pending ack on them are exempt: the abort legitimately re-opens them.
``acked_redelivered``
    ``m`` delivered on ``S`` after a plain ack or a committed txn's individual ack covered it,
    or while a txn's individual pending ack covered it (from the ack until the abort is
    requested). A txn's *cumulative* ack filters nothing while pending (as in Pulsar, only
    individually pending positions are held back); it binds from when the client heard the
    commit.
``aborted_ack_not_redelivered``
    a txn whose outcome is ``aborted`` individually acked ``m`` on ``S``; ``m`` is not
    delivered on ``S`` after the abort and no later ack covers it.

The run must be drained (every txn ended and time advanced past both designs' propagation)
before :meth:`History.finish` and :func:`check`; timing is judged by the order of events, never
by timestamps.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterable

KINDS = (
    "aborted_read",
    "uncommitted_read",
    "lost_write",
    "torn_txn",
    "duplicate",
    "out_of_order",
    "acked_redelivered",
    "aborted_ack_not_redelivered",
)

CAUSE_FAULTS = frozenset({"crash_broker"})  # faults after which every unacked message may come again


@dataclass(frozen=True)
class Violation:
    kind: str
    subscription: str | None
    msg: str | None
    txn: str | None
    detail: str

    def __str__(self) -> str:
        where = f" on {self.subscription}" if self.subscription else ""
        txn = f" (txn {self.txn})" if self.txn else ""
        return f"{self.kind}: {self.msg}{txn}{where}: {self.detail}"


@dataclass
class _Pub:
    seq: int
    msg: str
    topic: str
    txn: str | None
    key: str | None
    ledger: str
    position: Any


@dataclass
class _Ack:
    seq: int
    sub: str
    msgs: tuple[str, ...]
    cumulative: bool
    txn: str | None


@dataclass
class History:
    """One run's client operations, faults and deliveries, in the order they happened."""

    pubs: dict[str, _Pub] = field(default_factory=dict)
    acks: list[_Ack] = field(default_factory=list)
    subs: dict[tuple[str, str], int] = field(default_factory=dict)  # (topic, sub) -> first subscribe seq
    end_requests: dict[str, tuple[int, str]] = field(default_factory=dict)  # txn -> (seq, action)
    outcomes: dict[str, str] = field(default_factory=dict)  # txn -> final outcome
    heard_at: dict[str, int] = field(default_factory=dict)  # txn -> seq when the client heard it committed
    faults: list[tuple[int, str, Any]] = field(default_factory=list)  # (seq, kind, detail)
    deliveries: list[tuple[int, str, str, str, bool]] = field(default_factory=list)  # seq, topic, sub, msg, redelivery
    _seq: int = 0

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    # -- recording (call only for operations that succeeded) ------------------------------------

    def subscribe(self, topic: str, sub: str) -> None:
        self.subs.setdefault((topic, sub), self._next())

    def publish(self, msg: str, topic: str, txn: Hashable | None, key: str | None, message_id: Any) -> None:
        self.pubs[msg] = _Pub(self._next(), msg, topic, _label(txn), key, message_id.ledger, message_id.position)

    def ack(self, sub: str, msgs: Iterable[str], cumulative: bool, txn: Hashable | None) -> None:
        self.acks.append(_Ack(self._next(), sub, tuple(msgs), cumulative, _label(txn)))

    def end(self, txn: Hashable, action: str) -> None:
        self.end_requests.setdefault(_label(txn) or "", (self._next(), str(action)))

    def outcome(self, txn: Hashable, status: str) -> None:
        """A final outcome (``committed``/``aborted``) or a non-final one (``open``...)."""
        self.outcomes[_label(txn) or ""] = _status(status)

    def heard(self, txn: Hashable, status: Any) -> None:
        """The client heard the end-txn answer ``status`` (the end-txn callback)."""
        if _status(status) == "committed":
            self.heard_at.setdefault(_label(txn) or "", self._next())

    def fault(self, kind: str, detail: Any = None) -> None:
        """``crash_broker``, ``crash_tc``, ``redeliver`` (detail: subscription), or any other
        injected fault (counted, not a redelivery cause)."""
        self.faults.append((self._next(), kind, detail))

    def deliver(self, topic: str, sub: str, deliveries: Iterable[Any]) -> None:
        for d in deliveries:
            if d.msg is not None:
                self.deliveries.append((self._next(), topic, sub, d.msg, bool(d.redelivery)))

    def fault_counts(self) -> dict[str, int]:
        return dict(Counter(kind for _, kind, _ in self.faults))


def _label(txn: Hashable | None) -> str | None:
    return None if txn is None else str(txn)


def _status(status: Any) -> str:
    return str(getattr(status, "value", status))


def check(h: History) -> list[Violation]:
    """Every violation in a drained history (see the module docstring for the definitions)."""
    out: list[Violation] = []
    # COMMITTING/ABORTING: the coordinator has decided; participants may lag (v4 on a sealed
    # segment stalls there for ever: its writes then show up as lost).
    committed = {t for t, o in h.outcomes.items() if o in ("committed", "committing")}
    aborted = {t for t, o in h.outcomes.items() if o in ("aborted", "aborting")}
    # A commit whose answer the client never heard (a crash ate it) and whose record the
    # coordinator has since forgotten: the system chose one outcome; the deliveries tell which,
    # and every other rule then holds it to that choice (all or nothing, everywhere).
    seen = {h.pubs[m].txn for _, _, _, m, _ in h.deliveries if m in h.pubs}
    for t, (_, action) in h.end_requests.items():
        if t not in committed and t not in aborted and h.outcomes.get(t) in (None, "unknown", "unfinished"):
            (committed if action == "commit" and t in seen else aborted).add(t)
    crashes = [seq for seq, kind, _ in h.faults if kind in CAUSE_FAULTS]
    redeliver_req: dict[str, list[int]] = {}
    for seq, kind, detail in h.faults:
        if kind == "redeliver":
            redeliver_req.setdefault(str(detail), []).append(seq)

    def covers(a: _Ack, p: _Pub) -> bool:
        if p.msg in a.msgs and not a.cumulative:
            return True
        if a.cumulative:
            for m in a.msgs:
                q = h.pubs.get(m)
                if q is not None and q.ledger == p.ledger and p.position <= q.position:
                    return True
        return False

    def abort_seq(txn: str) -> int | None:
        """When ``txn``'s abort took (or may have taken) effect: the request, else (a timeout)
        from the start."""
        if txn not in aborted:
            return None
        req = h.end_requests.get(txn)
        return req[0] if req is not None else 0

    acks_by_sub: dict[str, list[_Ack]] = {}
    # Acks that can cover a message: individual ones naming it, cumulative ones on its ledger.
    # (Scanning every ack of the subscription per delivery made the check quadratic.)
    by_msg: dict[tuple[str, str], list[_Ack]] = {}
    by_ledger_cum: dict[tuple[str, str], list[_Ack]] = {}
    for a in h.acks:
        acks_by_sub.setdefault(a.sub, []).append(a)
        for m in a.msgs:
            if a.cumulative:
                q = h.pubs.get(m)
                if q is not None:
                    by_ledger_cum.setdefault((a.sub, q.ledger), []).append(a)
            else:
                by_msg.setdefault((a.sub, m), []).append(a)

    def candidates(sub: str, p: _Pub) -> list[_Ack]:
        """The acks of ``sub`` that may cover ``p``, in the order they happened."""
        found = {id(a): a for a in by_msg.get((sub, p.msg), ())}
        found.update((id(a), a) for a in by_ledger_cum.get((sub, p.ledger), ()))
        return sorted(found.values(), key=lambda a: a.seq)

    # deliveries per (sub, msg), in order
    per: dict[tuple[str, str], list[tuple[int, bool]]] = {}
    topic_of_sub: dict[str, str] = {}
    for seq, topic, sub, msg, redelivery in h.deliveries:
        per.setdefault((sub, msg), []).append((seq, redelivery))
        topic_of_sub[sub] = topic
        p = h.pubs.get(msg)
        if p is None:
            out.append(Violation("aborted_read", sub, msg, None, "delivered a message nobody published"))
            continue
        if p.txn is not None:
            if p.txn not in committed:
                out.append(Violation("aborted_read", sub, msg, p.txn,
                                     f"delivered a message of a txn whose outcome is {h.outcomes.get(p.txn, 'unknown')}"))
            else:
                req = h.end_requests.get(p.txn)
                if req is None or seq < req[0]:
                    out.append(Violation("uncommitted_read", sub, msg, p.txn, "delivered before the commit was requested"))

    def causes(sub: str, p: _Pub, lo: int, hi: int) -> bool:
        if any(lo < c < hi for c in crashes) or any(lo < c < hi for c in redeliver_req.get(sub, ())):
            return True
        for a in candidates(sub, p):
            if a.txn is not None and a.seq < hi and covers(a, p):
                ab = abort_seq(a.txn)
                if ab is not None and ab < hi and max(ab, a.seq) >= lo:
                    return True
        return False

    exempt: set[tuple[str, str]] = set()
    first: dict[tuple[str, str], int] = {}
    for (sub, msg), ds in per.items():
        p = h.pubs.get(msg)
        if p is None:
            continue
        first[(sub, msg)] = ds[0][0]
        if causes(sub, p, 0, ds[0][0]):
            exempt.add((sub, msg))
        for (prev, _), (seq, _) in zip(ds, ds[1:]):
            if not causes(sub, p, prev, seq):
                out.append(Violation("duplicate", sub, msg, p.txn, "delivered again with no redelivery cause"))
                break
        # acked messages delivered again
        reported = False
        for a in candidates(sub, p):
            if reported or not covers(a, p):
                continue
            start = a.seq
            if a.txn is not None and a.cumulative:
                if a.txn not in committed or a.txn not in h.heard_at:
                    continue
                start = max(a.seq, h.heard_at[a.txn])
            if a.txn is None or a.txn not in aborted:
                end = 1 << 62  # plain, committed, or still pending at the end: for ever
            else:
                end = abort_seq(a.txn) or 0  # pending until the abort was requested (0: a timeout)
            for seq, _ in ds:
                if start < seq < end:
                    what = "a plain" if a.txn is None else ("a committed" if a.txn in committed else "a pending")
                    out.append(Violation("acked_redelivered", sub, msg, a.txn or p.txn,
                                         f"delivered after {what} ack{' (cumulative)' if a.cumulative else ''} covered it"))
                    reported = True
                    break

    # ordering: per (sub, ledger) by position; per (sub, key) by publish order
    by_ledger: dict[tuple[str, str], list[tuple[int, _Pub]]] = {}
    by_key: dict[tuple[str, str, str], list[tuple[int, _Pub]]] = {}
    for (sub, msg), seq in first.items():
        if (sub, msg) in exempt:
            continue
        p = h.pubs[msg]
        by_ledger.setdefault((sub, p.ledger), []).append((seq, p))
        if p.key is not None:
            by_key.setdefault((sub, p.topic, p.key), []).append((seq, p))
    for (sub, ledger), items in by_ledger.items():
        items.sort(key=lambda x: x[0])
        for (_, before), (_, after) in zip(items, items[1:]):
            if not before.position < after.position:
                out.append(Violation("out_of_order", sub, after.msg, after.txn,
                                     f"delivered after {before.msg} but stored before it on {ledger}"))
                break
    for (sub, _topic, key), items in by_key.items():
        items.sort(key=lambda x: x[0])
        for (_, before), (_, after) in zip(items, items[1:]):
            if before.ledger != after.ledger and not before.seq < after.seq:
                out.append(Violation("out_of_order", sub, after.msg, after.txn,
                                     f"key {key}: delivered after {before.msg} but published before it"))
                break

    def covered(sub: str, p: _Pub, before: int | None = None) -> bool:
        return any(covers(a, p) and (a.txn is None or a.txn not in aborted) and (before is None or a.seq < before)
                   for a in candidates(sub, p))

    # torn txns: per committed txn and ledger, in position order
    txn_msgs: dict[tuple[str, str], list[_Pub]] = {}
    for p in h.pubs.values():
        if p.txn in committed:
            txn_msgs.setdefault((p.txn, p.ledger), []).append(p)
    subs_by_topic: dict[str, list[str]] = {}
    for topic, sub in h.subs:
        subs_by_topic.setdefault(topic, []).append(sub)
    for (txn, ledger), msgs in txn_msgs.items():
        msgs.sort(key=lambda p: p.position)
        for sub in subs_by_topic.get(msgs[0].topic, ()):
            for i, later in enumerate(msgs[1:], 1):
                at = first.get((sub, later.msg))
                if at is None:
                    continue
                missing = [e.msg for e in msgs[:i] if first.get((sub, e.msg), 1 << 62) > at and not covered(sub, e, at)
                           and (sub, e.msg) not in exempt]
                if missing:
                    out.append(Violation("torn_txn", sub, later.msg, txn, f"visible while earlier {', '.join(missing)} of the txn were not"))
                    break

    # lost writes; a message stored behind an entry of a txn still undecided at the end is
    # blocked (maxReadPosition holds it back, by design), not lost
    undecided: dict[str, Any] = {}
    for q in h.pubs.values():
        if q.txn is not None and q.txn not in committed and q.txn not in aborted:
            if q.ledger not in undecided or q.position < undecided[q.ledger]:
                undecided[q.ledger] = q.position
    for p in h.pubs.values():
        if p.txn is not None and p.txn not in committed:
            continue
        if p.ledger in undecided and undecided[p.ledger] < p.position:
            continue
        for sub in subs_by_topic.get(p.topic, ()):
            if (sub, p.msg) not in first and not covered(sub, p):
                out.append(Violation("lost_write", sub, p.msg, p.txn, "never delivered and never acked"))

    # aborted individual acks must be redelivered
    for a in h.acks:
        if a.txn is None or a.txn not in aborted or a.cumulative:
            continue
        ab = abort_seq(a.txn) or 0
        for msg in a.msgs:
            p = h.pubs.get(msg)
            if p is None:
                continue
            if any(seq > max(ab, a.seq) for seq, _ in per.get((a.sub, msg), ())):
                continue
            if any(covers(b, p) and b.seq > a.seq and (b.txn is None or b.txn not in aborted) for b in candidates(a.sub, p)):
                continue
            out.append(Violation("aborted_ack_not_redelivered", a.sub, msg, a.txn, "the txn aborted but the message never came back"))
    return out


@dataclass
class CheckSummary:
    """What a ``txnbench check`` run (or a test session) checked, for reports."""

    histories: int = 0
    deliveries: int = 0
    faults: Counter = field(default_factory=Counter)
    violations: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, h: History, violations: list[Violation]) -> None:
        self.histories += 1
        self.deliveries += len(h.deliveries)
        self.faults.update(h.fault_counts())
        self.violations.update(v.kind for v in violations)
        self.examples.extend(str(v) for v in violations[: max(0, 20 - len(self.examples))])

    def to_json(self) -> dict[str, Any]:
        return {"histories": self.histories, "deliveries": self.deliveries, "faults": dict(sorted(self.faults.items())),
                "violations": {k: self.violations.get(k, 0) for k in KINDS}, "total_violations": sum(self.violations.values()),
                "examples": self.examples}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def lines(self) -> list[str]:
        j = self.to_json()
        faults = ", ".join(f"{k} {v}" for k, v in j["faults"].items()) or "none"
        out = [f"histories checked: {j['histories']} ({j['deliveries']} deliveries)", f"faults injected: {faults}",
               f"violations: {j['total_violations']}"]
        out += [f"  {k}: {v}" for k, v in j["violations"].items() if v]
        out += [f"  e.g. {e}" for e in j["examples"][:10]]
        return out
