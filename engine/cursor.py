"""A subscription's cursor on one partition/segment: mark-delete, individual acks, read position.

Cursor state is saved to the ledger's cursor store on every ack, so a crash loses no ack
(Pulsar persists lazily and may redeliver after a crash; saving each ack keeps crash runs
comparable to uncrashed ones, and ``cursor_writes`` counts the cost).
"""

from __future__ import annotations

from typing import Callable, Iterable

from sortedcontainers import SortedSet

from engine.ledger import CursorState, ManagedLedger
from engine.records import Position


class Cursor:
    def __init__(self, ledger: ManagedLedger, name: str) -> None:
        self._ledger = ledger
        self.name = name
        state = ledger.load_cursor(name)
        if state is None:  # a new subscription starts at the earliest stored entry
            first = ledger.first_position()
            state = CursorState(Position(first.ledger_id, first.entry_id - 1))
            ledger.save_cursor(name, state)
        self._mark_delete = state.mark_delete
        self._acked: SortedSet = SortedSet(state.individually_acked)
        self.read_position = ledger.next_position(self._mark_delete)
        self.redeliver_hook: Callable[[list[Position]], None] | None = None

    @property
    def mark_delete(self) -> Position:
        return self._mark_delete

    def is_acked(self, position: Position) -> bool:
        return position <= self._mark_delete or position in self._acked

    def ack_individual(self, positions: Iterable[Position]) -> None:
        changed = False
        for pos in positions:
            if pos > self._mark_delete and pos not in self._acked:
                self._acked.add(pos)
                changed = True
        if changed:
            self._advance()
            self._save()

    def ack_cumulative(self, position: Position) -> None:
        if position <= self._mark_delete:
            return
        self._mark_delete = position
        for pos in list(self._acked.irange(maximum=position)):
            self._acked.remove(pos)
        self._advance()
        self._save()

    def redeliver(self, positions: Iterable[Position]) -> None:
        if self.redeliver_hook is not None:
            self.redeliver_hook([p for p in positions if not self.is_acked(p)])

    def state(self) -> CursorState:
        return CursorState(self._mark_delete, tuple(self._acked))

    def _advance(self) -> None:
        # Fold individually acked positions that directly follow mark-delete into it.
        acked = self._acked
        nxt = self._ledger.next_position(self._mark_delete)
        while acked and acked[0] <= nxt:
            head = acked.pop(0)
            if head == nxt:
                self._mark_delete = nxt
                nxt = self._ledger.next_position(nxt)

    def _save(self) -> None:
        self._ledger.save_cursor(self.name, self.state())
