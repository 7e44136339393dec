"""In-memory pending-ack state with Pulsar's conflict rules (``PendingAckHandleImpl``), shared by
both designs so that they refuse exactly the same acks. Each design persists it its own way
(v4: a sibling ``__transaction_pending_ack`` ledger; v5: op records) and rebuilds it on recovery.
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

    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
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
