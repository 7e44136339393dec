"""JSON forms of ids and positions inside system-ledger payloads (txn log, snapshots, pending
acks): every ledger backend must be able to store them."""

from __future__ import annotations

from typing import Any, Sequence

from engine.ids import Design, TxnID
from engine.records import Position


def pos_out(p: Position) -> list[int]:
    return [p.ledger_id, p.entry_id]


def pos_in(v: Sequence[Any]) -> Position:
    return Position(int(v[0]), int(v[1]))


def txn_out(t: TxnID) -> list[int]:
    return [t.most_bits, t.least_bits]


def txn_in(v: Sequence[Any]) -> TxnID:
    return TxnID(Design.V4, int(v[0]), int(v[1]))


def previous(p: Position) -> Position:
    """Pulsar's ``ManagedLedger.getPreviousPosition``: ``(L, e-1)``; ``(L, -1)`` sorts after
    every entry of earlier ledgers (see :class:`engine.records.Position`)."""
    return Position(p.ledger_id, p.entry_id - 1)
