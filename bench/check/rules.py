"""One rule per violation kind, each reading the shared :class:`~bench.check.index.HistoryIndex`.

``S`` is a subscription on topic ``T``, ``m`` a message published on ``T``; *covered* is defined
in :mod:`bench.check.index`. A txn whose outcome the history never heard (ambiguous, see
:mod:`bench.check.outcomes`) is judged only by what holds under either outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from bench.check.history import Ack, Pub
from bench.check.index import NEVER, HistoryIndex


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


Found = Iterator[Violation]


def aborted_read(ix: HistoryIndex) -> Found:
    """``m`` of a txn that did not commit (aborted, timed out, still open, unfinished), or a
    message nobody published, is delivered on any subscription. Pulsar: the transaction buffer
    filters aborted entries (``isTxnAborted``) and holds open ones behind maxReadPosition."""
    for _seq, _topic, sub, msg, _ in ix.h.deliveries:
        p = ix.h.pubs.get(msg)
        if p is None:
            yield Violation("aborted_read", sub, msg, None, "delivered a message nobody published")
        elif p.txn is not None and not ix.outcomes.may_commit(p.txn):
            yield Violation("aborted_read", sub, msg, p.txn,
                            f"delivered a message of a txn whose outcome is {ix.h.outcomes.get(p.txn, 'unknown')}")


def uncommitted_read(ix: HistoryIndex) -> Found:
    """``m`` of a txn that committed (or may have) is delivered before the client asked to
    commit it. Pulsar: read-committed isolation (maxReadPosition stops at the first open txn)."""
    for seq, _topic, sub, msg, _ in ix.h.deliveries:
        p = ix.h.pubs.get(msg)
        if p is None or p.txn is None or not ix.outcomes.may_commit(p.txn):
            continue
        req = ix.h.end_requests.get(p.txn)
        if req is None or seq < req[0]:
            yield Violation("uncommitted_read", sub, msg, p.txn, "delivered before the commit was requested")


def lost_write(ix: HistoryIndex) -> Found:
    """``m`` is plain or of a committed txn, owed to ``S`` (published after ``S`` subscribed, if
    ``S`` started at the latest entry: :meth:`HistoryIndex.owes`), ``m`` was never delivered on ``S``
    and no ack on ``S`` covers it. Pulsar: a durable subscription's cursor delivers every entry
    it has not acked. A message stored behind an entry of a txn still undecided at the end is
    blocked by design (maxReadPosition), not lost."""
    for p in ix.h.pubs.values():
        if (p.txn is not None and p.txn not in ix.outcomes.committed) or ix.blocked(p):
            continue
        for sub in ix.subs_by_topic.get(p.topic, ()):
            if (sub, p.msg) not in ix.first and ix.owes(sub, p) and not ix.covered(sub, p):
                yield Violation("lost_write", sub, p.msg, p.txn, "never delivered and never acked")


def torn_txn(ix: HistoryIndex) -> Found:
    """A txn's writes are seen all or nothing (Pulsar commits every participant's marker, and a
    reader sees a txn's entries from the first on). Two ways to break it:

    - the first delivery on ``S`` of ``m2`` of a committed (or ambiguous) txn while an earlier
      ``m1`` of the same txn on the same ledger had been neither delivered on ``S`` nor covered;
    - a txn of ambiguous outcome delivered somewhere but owed (never delivered, never covered,
      not blocked) elsewhere: wrong whichever way it ended.
    """
    yield from _torn_in_order(ix)
    yield from _torn_ambiguous(ix)


def _torn_in_order(ix: HistoryIndex) -> Found:
    txn_msgs: dict[tuple[str, str], list[Pub]] = {}
    for p in ix.h.pubs.values():
        if p.txn is not None and ix.outcomes.may_commit(p.txn):
            txn_msgs.setdefault((p.txn, p.ledger), []).append(p)
    for (txn, _ledger), msgs in txn_msgs.items():
        msgs.sort(key=lambda p: p.position)
        for sub in ix.subs_by_topic.get(msgs[0].topic, ()):
            for i, later in enumerate(msgs[1:], 1):
                at = ix.first.get((sub, later.msg))
                if at is None:
                    continue
                missing = [e.msg for e in msgs[:i] if ix.first.get((sub, e.msg), NEVER) > at and ix.owes(sub, e)
                           and not ix.covered(sub, e, at) and (sub, e.msg) not in ix.exempt]
                if missing:
                    yield Violation("torn_txn", sub, later.msg, txn, f"visible while earlier {', '.join(missing)} of the txn were not")
                    break


def _torn_ambiguous(ix: HistoryIndex) -> Found:
    msgs: dict[str, list[Pub]] = {}
    for p in ix.h.pubs.values():
        if p.txn in ix.outcomes.ambiguous:
            msgs.setdefault(p.txn, []).append(p)
    for txn, ps in sorted(msgs.items()):
        seen = next(((sub, p.msg) for p in ps for sub in ix.subs_by_topic.get(p.topic, ()) if (sub, p.msg) in ix.first), None)
        if seen is None:
            continue
        owed: dict[str, str] = {}
        for p in ps:
            for sub in ix.subs_by_topic.get(p.topic, ()):
                if (sub, p.msg) not in ix.first and ix.owes(sub, p) and not ix.blocked(p) and not ix.covered(sub, p):
                    owed.setdefault(sub, p.msg)
        for sub, msg in owed.items():
            yield Violation("torn_txn", sub, msg, txn, f"never visible while {seen[1]} of the txn was on {seen[0]} "
                                                      "(its outcome was never heard: neither allows that)")


def duplicate(ix: HistoryIndex) -> Found:
    """A second delivery of ``m`` on ``S`` with no redelivery cause since the previous one: a
    broker crash, an explicit redelivery request on ``S``, or the abort (requested, or a timeout)
    of a txn holding a pending ack that covers ``m`` on ``S``. Pulsar: a cursor moves its read
    position past what it dispatched and rewinds only on those events."""
    for (sub, msg), ds in ix.per.items():
        p = ix.h.pubs.get(msg)
        if p is None:
            continue
        for (prev, _), (seq, _) in zip(ds, ds[1:]):
            if not ix.causes(sub, p, prev, seq):
                yield Violation("duplicate", sub, msg, p.txn, "delivered again with no redelivery cause")
                break


def out_of_order(ix: HistoryIndex) -> Found:
    """First deliveries on ``S`` of one ledger not in position order, or of one key not in
    publish order (across segments of a scalable topic). Messages first delivered after a
    redelivery cause are exempt: the cause legitimately re-opens them. Pulsar: a cursor reads a
    ledger in order; Key_Shared keeps each key's order."""
    by_ledger: dict[tuple[str, str], list[tuple[int, Pub]]] = {}
    by_key: dict[tuple[str, str, str], list[tuple[int, Pub]]] = {}
    for (sub, msg), seq in ix.first.items():
        if (sub, msg) in ix.exempt:
            continue
        p = ix.h.pubs[msg]
        by_ledger.setdefault((sub, p.ledger), []).append((seq, p))
        if p.key is not None:
            by_key.setdefault((sub, p.topic, p.key), []).append((seq, p))
    for (sub, ledger), items in by_ledger.items():
        items.sort(key=lambda x: x[0])
        for (_, before), (_, after) in zip(items, items[1:]):
            if not before.position < after.position:
                yield Violation("out_of_order", sub, after.msg, after.txn, f"delivered after {before.msg} but stored before it on {ledger}")
                break
    for (sub, _topic, key), items in by_key.items():
        items.sort(key=lambda x: x[0])
        for (_, before), (_, after) in zip(items, items[1:]):
            if before.ledger != after.ledger and not before.seq < after.seq:
                yield Violation("out_of_order", sub, after.msg, after.txn, f"key {key}: delivered after {before.msg} but published before it")
                break


def acked_redelivered(ix: HistoryIndex) -> Found:
    """``m`` delivered on ``S`` after a plain ack or a committed txn's individual ack covered
    it, or while a txn's individual pending ack covered it (from the ack until the abort is
    requested). A txn's *cumulative* ack filters nothing while pending (as in Pulsar, only
    individually pending positions are held back: ``PendingAckHandleImpl.individualAckPositions``); it binds from when
    the client heard the commit. An ambiguous txn's ack may have aborted any time: not judged."""
    for (sub, msg), ds in ix.per.items():
        p = ix.h.pubs.get(msg)
        if p is None:
            continue
        for a in ix.candidates(sub, p):
            window = _ack_window(ix, a) if ix.covers(a, p) else None
            if window is not None and any(window[0] < seq < window[1] for seq, _ in ds):
                o = ix.outcomes
                what = "a plain" if a.txn is None else ("a committed" if a.txn in o.committed else "a pending")
                yield Violation("acked_redelivered", sub, msg, a.txn or p.txn,
                                f"delivered after {what} ack{' (cumulative)' if a.cumulative else ''} covered it")
                break


def _ack_window(ix: HistoryIndex, a: Ack) -> tuple[int, int] | None:
    """The sequence numbers between which ``a`` forbids delivering what it covers."""
    if a.txn is None:
        return a.seq, NEVER
    if a.txn in ix.outcomes.ambiguous:
        return None
    if a.cumulative:
        if a.txn not in ix.outcomes.committed or a.txn not in ix.h.heard_at:
            return None
        return max(a.seq, ix.h.heard_at[a.txn]), NEVER
    if a.txn not in ix.outcomes.aborted:
        return a.seq, NEVER  # committed, or still pending at the end: for ever
    return a.seq, ix.abort_seq(a.txn) or 0  # pending until the abort was requested (0: a timeout)


def aborted_ack_not_redelivered(ix: HistoryIndex) -> Found:
    """A txn whose outcome is ``aborted`` individually acked ``m`` on ``S``; ``m`` is not
    delivered on ``S`` after the abort and no later ack covers it. Pulsar: aborting a txn drops its
    individually pending positions (``PendingAckHandleImpl`` abort, ``individualAckPositions``), which
    makes them deliverable again (as ``engine/pending_acks.py`` ``abort`` does)."""
    for a in ix.h.acks:
        if a.txn is None or a.txn not in ix.outcomes.aborted or a.cumulative:
            continue
        after = max(ix.abort_seq(a.txn) or 0, a.seq)
        for msg in a.msgs:
            p = ix.h.pubs.get(msg)
            if p is None or any(seq > after for seq, _ in ix.per.get((a.sub, msg), ())):
                continue
            if any(b.seq > a.seq and b.txn not in ix.outcomes.aborted and ix.covers(b, p) for b in ix.candidates(a.sub, p)):
                continue
            yield Violation("aborted_ack_not_redelivered", a.sub, msg, a.txn, "the txn aborted but the message never came back")


RULES: dict[str, Callable[[HistoryIndex], Found]] = {
    "aborted_read": aborted_read,
    "uncommitted_read": uncommitted_read,
    "lost_write": lost_write,
    "torn_txn": torn_txn,
    "duplicate": duplicate,
    "out_of_order": out_of_order,
    "acked_redelivered": acked_redelivered,
    "aborted_ack_not_redelivered": aborted_ack_not_redelivered,
}
KINDS = tuple(RULES)
