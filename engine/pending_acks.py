"""In-memory pending-ack state with Pulsar's conflict rules (``PendingAckHandleImpl``), shared by
both designs so that they refuse exactly the same acks. Each design persists it its own way
(v4: a sibling ``__transaction_pending_ack`` ledger; v5: op records) and rebuilds it on recovery.

The rules (``PendingAckHandleImpl.internalIndividualAcknowledgeMessage`` /
``internalCumulativeAcknowledgeMessage``; Pulsar checks them in the callback of the store's
append, so v4 logs a refused ack too, see ``legacy_v4/pending_ack.py``):

* a txn ack of a position already acked on the subscription (``cursor.isMessageDeleted``), or
  pending in any txn (``individualAckPositions``), or covered by a pending cumulative ack,
  conflicts; a cumulative ack at or below mark-delete, or while another txn holds the pending
  cumulative ack, or not beyond its own, conflicts;
* a plain ack of a position pending in a txn applies to the cursor at once
  (``PersistentSubscription.acknowledgeMessage`` does not consult the handle): the position
  leaves the txn, whose abort then redelivers nothing and whose commit acks nothing more;
* replayed ACK records go through ``handleIndividualAckRecover`` / ``handleCumulativeAckRecover``:
  a record with a position already acked or pending is dropped whole, silently (so a record
  that conflicted when it was written changes nothing on recovery either).
"""

from __future__ import annotations

from typing import Iterable

from engine.errors import TxnConflict
from engine.ids import TxnID
from engine.ports import AckKind, CursorPort
from engine.records import Position


class PendingAcks:
    def __init__(self, cursor: CursorPort, where: str) -> None:
        self._cursor = cursor
        self._where = where
        self.individual: dict[Position, TxnID] = {}
        self.by_txn: dict[TxnID, set[Position]] = {}
        self.cumulative: tuple[TxnID, Position] | None = None

    # -- checks: raise before anything is recorded ---------------------------------------------

    def check(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        """Raise TxnConflict if Pulsar would refuse this ack; records nothing."""
        if kind is AckKind.CUMULATIVE:
            if len(positions) != 1:
                raise TxnConflict(f"{self._where}: a cumulative ack takes one position, got {len(positions)}")
            pos = positions[0]
            if pos <= self._cursor.mark_delete:
                raise TxnConflict(f"{self._where}: cumulative ack of {txn} at {pos} is at or below mark-delete")
            if self.cumulative is not None:
                cur_txn, cur_pos = self.cumulative
                if cur_txn != txn:
                    raise TxnConflict(f"{self._where}: {cur_txn} holds the pending cumulative ack; {txn} conflicts")
                if pos <= cur_pos:
                    raise TxnConflict(f"{self._where}: cumulative ack of {txn} at {pos} does not advance {cur_pos}")
            return
        seen: set[Position] = set()
        for pos in positions:
            if pos in seen or self._cursor.is_acked(pos):
                raise TxnConflict(f"{self._where}: {pos} is already acked; ack of {txn} conflicts")
            seen.add(pos)
            owner = self.individual.get(pos)
            if owner is not None:
                raise TxnConflict(f"{self._where}: {pos} is already pending in {owner}; ack of {txn} conflicts")
            if self.cumulative is not None and pos <= self.cumulative[1]:
                raise TxnConflict(
                    f"{self._where}: {pos} is covered by the pending cumulative ack of {self.cumulative[0]}"
                )

    # -- state changes -------------------------------------------------------------------------

    def apply(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        """Record an ack that passed :meth:`check` (or is being replayed on recovery)."""
        if kind is AckKind.CUMULATIVE:
            self.cumulative = (txn, positions[0])
            self.by_txn.setdefault(txn, set())
            return
        mine = self.by_txn.setdefault(txn, set())
        for pos in positions:
            self.individual[pos] = txn
            mine.add(pos)

    def recover(self, txn: TxnID, positions: list[Position], kind: AckKind) -> bool:
        """Re-apply a logged ack on recovery as Pulsar does; False if it was dropped."""
        if kind is AckKind.CUMULATIVE:  # handleCumulativeAckRecover
            pos = positions[0]
            if pos <= self._cursor.mark_delete:
                return False
            if self.cumulative is not None and (self.cumulative[0] != txn or pos <= self.cumulative[1]):
                return False
            self.apply(txn, positions, kind)
            return True
        for pos in positions:  # handleIndividualAckRecover: any acked/pending position drops it
            if self._cursor.is_acked(pos) or pos in self.individual:
                return False
        if len(set(positions)) != len(positions):
            return False
        self.apply(txn, positions, kind)
        return True

    def commit(self, txn: TxnID) -> None:
        """Apply the txn's acks to the cursor. Unknown txns are a no-op (idempotent END_TXN)."""
        positions = self.by_txn.pop(txn, set())
        for pos in positions:
            del self.individual[pos]
        if positions:
            self._cursor.ack_individual(sorted(positions))
        if self.cumulative is not None and self.cumulative[0] == txn:
            pos = self.cumulative[1]
            self.cumulative = None
            self._cursor.ack_cumulative(pos)

    def abort(self, txn: TxnID) -> None:
        """Drop the txn's acks: individually acked messages become redeliverable; an aborted
        cumulative ack redelivers nothing by itself (as in Pulsar)."""
        positions = self.by_txn.pop(txn, set())
        for pos in positions:
            del self.individual[pos]
        if self.cumulative is not None and self.cumulative[0] == txn:
            self.cumulative = None
        if positions:
            self._cursor.redeliver(sorted(positions))

    def first_individual(self) -> TxnID | None:
        """``individualAckOfTransaction.firstKey()``: the oldest txn holding individual acks."""
        for txn, positions in self.by_txn.items():
            if positions:
                return txn
        return None

    def has_individual(self, txn: TxnID) -> bool:
        return bool(self.by_txn.get(txn))

    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
        """A plain ack applied to the cursor: positions pending in a txn leave it."""
        for pos in positions:
            owner = self.individual.pop(pos, None)
            if owner is not None:
                self.by_txn[owner].discard(pos)

    def is_pending(self, position: Position) -> bool:
        return position in self.individual

    def txns(self) -> list[TxnID]:
        return sorted(self.by_txn)

    def check_invariants(self) -> None:
        flat = {p: t for t, ps in self.by_txn.items() for p in ps}
        assert flat == self.individual, f"{self._where}: pending index out of sync"
        if self.cumulative is not None:
            assert self.cumulative[0] in self.by_txn, f"{self._where}: cumulative txn not tracked"
