"""A subscription's cursor on one partition/segment: mark-delete, individual acks, read position.

Cursor state is saved to the ledger's cursor store on every ack, so a crash loses no ack
(Pulsar persists lazily and may redeliver after a crash; saving each ack keeps crash runs
comparable to uncrashed ones, and ``cursor_writes`` counts the cost).

What Pulsar's cursor *waits* for is modelled apart: ``ManagedCursorImpl.asyncDelete`` and
``asyncMarkDelete`` write the cursor's position to its ledger, and complete only once that write
is done, when the cursor's ``markDeleteLimiter`` grants a permit (broker
``managedLedgerDefaultMarkDeleteRateLimit``, 1 per second); without one they complete at once and
the position is written later. :attr:`Cursor.persisted` counts the acks that got a permit: a
caller that waits for its ack (a txn commit, ``PendingAckHandleImpl.internalCommitTxn``) waits
for that write too.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import partial
from typing import Callable, Iterable

from engine.ledger import CursorState, ManagedLedger
from engine.records import Position

MARK_DELETE_RATE_PER_S = 1.0  # ServiceConfiguration.managedLedgerDefaultMarkDeleteRateLimit


class MarkDeleteLimiter:
    """``ManagedCursorImpl.markDeleteLimiter``: Guava ``RateLimiter.create(rate)`` (SmoothBursty:
    one second's permits stored at most, a permit borrowed ahead when none is stored) asked with
    ``tryAcquire()``, which never waits: True when a permit is free at ``now_us``."""

    __slots__ = ("_interval", "_max", "_stored", "_next_free")

    def __init__(self, rate_per_s: float, now_us: int) -> None:
        self._interval = 1_000_000 / rate_per_s
        self._max = rate_per_s  # maxBurstSeconds = 1
        self._stored = 0.0
        self._next_free = float(now_us)  # created with nothing stored, the first permit free

    def try_acquire(self, now_us: int) -> bool:
        if now_us < self._next_free:  # canAcquire with no timeout
            return False
        # resync: the permits stored while idle, then reserveEarliestAvailable for one permit
        self._stored = min(self._max, self._stored + (now_us - self._next_free) / self._interval)
        self._next_free = float(now_us)
        spent = min(1.0, self._stored)
        self._stored -= spent
        self._next_free += (1.0 - spent) * self._interval
        return True


class Cursor:
    """Individually acked positions live in a sorted ``list`` searched with :mod:`bisect`: acks
    mostly arrive in order, so inserts land at the end and folds into mark-delete take a prefix;
    with tuple positions every comparison runs in C (a ``SortedSet`` cost several Python calls
    per membership test and insert)."""

    def __init__(self, ledger: ManagedLedger, name: str, now: Callable[[], int] | None = None) -> None:
        """``now``: the broker's clock, for the mark-delete limiter (None: no limiter, nothing
        waits for a cursor write; a log's own cursor)."""
        self._ledger = ledger
        self.name = name
        self._now = now
        self._limiter = MarkDeleteLimiter(MARK_DELETE_RATE_PER_S, now()) if now is not None else None
        self.persisted = 0  # acks that waited for the cursor's ledger write (a limiter permit)
        state = ledger.load_cursor(name)
        if state is None:  # a new subscription starts at the earliest stored entry
            first = ledger.first_position()
            state = CursorState(Position(first.ledger_id, first.entry_id - 1))
            ledger.save_cursor(name, state)
        self._mark_delete = state.mark_delete
        self._acked: list[Position] = sorted(set(state.individually_acked))
        self.read_position = ledger.next_position(self._mark_delete)
        self.redeliver_hook: Callable[[list[Position]], None] | None = None

    @property
    def mark_delete(self) -> Position:
        return self._mark_delete

    def is_acked(self, position: Position) -> bool:
        if position <= self._mark_delete:
            return True
        acked = self._acked
        if not acked:
            return False
        i = bisect_left(acked, position)
        return i < len(acked) and acked[i] == position

    def ack_individual(self, positions: Iterable[Position]) -> None:
        mark_delete = self._mark_delete
        acked = self._acked
        if not acked and type(positions) is list and len(positions) == 1:
            # The common case, an in-order ack of the entry after mark-delete: fold it at once.
            pos = positions[0]
            if pos == self._ledger.next_position(mark_delete):
                self._mark_delete = pos
                self._save()
                self._persist()
                return
        changed = False
        for pos in positions:
            if pos > mark_delete:
                i = bisect_left(acked, pos)
                if i == len(acked) or acked[i] != pos:
                    acked.insert(i, pos)
                    changed = True
        if changed:  # asyncDelete with something newly deleted asks the limiter
            self._advance()
            self._save()
            self._persist()

    def ack_cumulative(self, position: Position) -> None:
        if position <= self._mark_delete:
            return
        self._mark_delete = position
        del self._acked[: bisect_right(self._acked, position)]
        self._advance()
        self._save()
        self._persist()

    def _persist(self) -> None:
        limiter = self._limiter
        if limiter is not None and limiter.try_acquire(self._now()):  # type: ignore[misc]
            self.persisted += 1

    def redeliver(self, positions: Iterable[Position]) -> None:
        if self.redeliver_hook is not None:
            self.redeliver_hook([p for p in positions if not self.is_acked(p)])

    def state(self) -> CursorState:
        return CursorState(self._mark_delete, tuple(self._acked))

    def _advance(self) -> None:
        # Fold individually acked positions that directly follow mark-delete into it.
        acked = self._acked
        if not acked:
            return
        next_position = self._ledger.next_position
        mark_delete = self._mark_delete
        nxt = next_position(mark_delete)
        k, n = 0, len(acked)
        while k < n and acked[k] <= nxt:
            if acked[k] == nxt:
                mark_delete = nxt
                nxt = next_position(nxt)
            k += 1
        if k:
            del acked[:k]
            self._mark_delete = mark_delete

    def _check(self) -> None:
        """Invariants of the hand-tuned ack state:

        * ``_acked`` is strictly increasing (sorted, no duplicate): every insert goes through
          ``bisect_left`` and skips a position already there; ``is_acked`` bisects it.
        * every individually acked position is after mark-delete: inserts skip positions at or
          before it, and ``ack_cumulative`` drops the prefix it covers.
        * the first of them does not directly follow mark-delete: ``_advance`` folds such a run
          into mark-delete after every change (the single in-order ack fast path folds at once).
        * the saved state is the in-memory one: every change ends with ``_save`` (no ack is lost
          by a crash; see the module docstring).
        """
        acked, md = self._acked, self._mark_delete
        assert all(a < b for a, b in zip(acked, acked[1:])), f"cursor {self.name}: acked positions not strictly sorted"
        assert not acked or acked[0] > md, f"cursor {self.name}: acked {acked[0]} at or before mark-delete {md}"
        assert not acked or acked[0] != self._ledger.next_position(md), (
            f"cursor {self.name}: acked {acked[0]} directly follows mark-delete {md} but was not folded")
        saved = self._ledger.load_cursor(self.name)
        assert saved is not None and (saved.mark_delete, tuple(saved.individually_acked)) == (md, tuple(acked)), (
            f"cursor {self.name}: saved state {saved} differs from ({md}, {acked})")

    def _save(self) -> None:
        self._ledger.save_cursor(self.name, _cursor_state((self._mark_delete, tuple(self._acked))))


# Build cursor states without the named tuple's Python-level ``__new__`` (once per ack).
_cursor_state: Callable[[tuple[Position, tuple[Position, ...]]], CursorState] = partial(tuple.__new__, CursorState)  # type: ignore[assignment]
