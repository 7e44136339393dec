"""What one run did, in the order it happened: the record :func:`bench.check.check` judges.

A :class:`History` records the client operations of one run (subscribes, publishes with their
txn and message id, successful acks, end-txn requests and outcomes), the faults injected
(broker crash, coordinator restart, explicit redelivery...) and every delivery, each stamped
with a sequence number: rules judge timing by that order, never by timestamps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable


@dataclass(frozen=True)
class Pub:
    """One publish: its order, message, topic, txn, key and where it was stored."""

    seq: int
    msg: str
    topic: str
    txn: str | None
    key: str | None
    ledger: str
    position: Any


@dataclass(frozen=True)
class Ack:
    """One successful ack on a subscription (plain when ``txn`` is None)."""

    seq: int
    sub: str
    msgs: tuple[str, ...]
    cumulative: bool
    txn: str | None


@dataclass
class History:
    """One run's client operations, faults and deliveries, in the order they happened."""

    pubs: dict[str, Pub] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    subs: dict[tuple[str, str], int] = field(default_factory=dict)  # (topic, sub) -> first subscribe seq
    # subscriptions that started at the latest entry (SubscriptionInitialPosition.Latest: a real
    # broker's, the reference client asks for it); the model's start at the earliest entry
    latest_subs: set[tuple[str, str]] = field(default_factory=set)
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

    def subscribe(self, topic: str, sub: str, latest: bool = False) -> None:
        """``latest``: the subscription's cursor started at the last confirmed entry (else at the
        earliest, as the model's do)."""
        if (topic, sub) not in self.subs and latest:
            self.latest_subs.add((topic, sub))
        self.subs.setdefault((topic, sub), self._next())

    def publish(self, msg: str, topic: str, txn: Hashable | None, key: str | None, message_id: Any) -> None:
        self.pubs[msg] = Pub(self._next(), msg, topic, _label(txn), key, message_id.ledger, message_id.position)

    def ack(self, sub: str, msgs: Iterable[str], cumulative: bool, txn: Hashable | None) -> None:
        self.acks.append(Ack(self._next(), sub, tuple(msgs), cumulative, _label(txn)))

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
