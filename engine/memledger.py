"""The embedded ``memory://`` ledger backend: the durable layer of in-process runs and crash tests.

:class:`MemoryLedgerFactory` holds the data (it plays BookKeeper and the metadata store that
keeps cursor positions); the broker's :class:`MemoryManagedLedger` handles die with the broker.

Consumed ledgers are deleted as Pulsar deletes them with the default retention (time 0, size 0),
so a long replay keeps only what some subscription still needs (``trims_consumed``). Pulsar,
``ManagedLedgerImpl`` (managed-ledger/src/main/java/org/apache/bookkeeper/mledger/impl/):

* ``ledgerClosed`` (a rollover) and ``onCursorMarkDeletePositionUpdated`` (the slowest durable
  cursor moved to another ledger), also ``deleteCursor``, call ``trimConsumedLedgersInBackground``;
* ``internalTrimLedgers`` deletes, oldest first, every ledger before the one holding the slowest
  *durable* cursor's mark-delete position (that one too if mark-delete is its last entry), never
  the current ledger. Non-durable cursors are not in the trimming heap (``addCursor`` gives them no
  ordering position): they never hold a trim back. Nor does the transaction buffer: its recovery
  (``TopicTransactionBufferRecover``) opens a *non-durable* cursor at the snapshot's
  maxReadPosition and simply starts at the first ledger left. Nothing recovery needs is lost:
  dispatchers read only up to maxReadPosition, which stays before the first entry of every ongoing
  txn, so the slowest mark-delete does too; a trimmed ledger holds only entries of finished txns,
  and an abort marker in it covers entries that are gone with it (that is why
  ``SingleSnapshotAbortedTxnProcessorImpl.trimExpiredAbortedTxns`` can drop those aborts).

Deviation: Pulsar also trims a managed ledger that has *no* durable cursor, down to its current
ledger. Here a ledger without cursors is kept whole: such ledgers are the system ledgers that
stand for compacted topics (transaction-buffer snapshots, read whole by the table view) or for
metadata (scalable-topic layouts), and subscriptions in this model start at the earliest stored
entry, so a trace may publish before it subscribes.
"""

from __future__ import annotations

import itertools
from functools import partial
from bisect import bisect_left, bisect_right
from typing import Callable

from engine.counters import Counters
from engine.errors import ConfigError, LedgerSealed
from engine.ledger import CursorState, LedgerFactory, ManagedLedger
from engine.records import Entry, EntryData, Position

# Build records without the named tuples' Python-level ``__new__`` (hot paths only).
_position: Callable[[tuple[int, int]], Position] = partial(tuple.__new__, Position)  # type: ignore[assignment]
_entry: Callable[[tuple[Position, EntryData]], Entry] = partial(tuple.__new__, Entry)  # type: ignore[assignment]

# Pulsar's managedLedgerMaxEntriesPerLedger default: a ledger rolls over after this many entries.
DEFAULT_MAX_ENTRIES_PER_LEDGER = 50_000


class _LedgerData:
    """Durable content of one managed ledger."""

    __slots__ = ("ledger_ids", "entries", "trimmed_ids", "sealed", "cursors", "listeners", "notify",
                 "current", "current_id")

    def __init__(self, first_ledger_id: int) -> None:
        self.ledger_ids: list[int] = [first_ledger_id]
        self.entries: dict[int, list[EntryData]] = {first_ledger_id: []}
        self.trimmed_ids: list[int] = []  # sorted: ids are allocated increasingly
        self.sealed = False
        self.cursors: dict[str, CursorState] = {}
        # Volatile, keyed by handle: kept here so every handle sees every append.
        self.listeners: dict[int, list[Callable[[Position], None]]] = {}
        self.notify: tuple[Callable[[Position], None], ...] = ()  # every listener, flattened
        # The ledger being written (the last of ledger_ids; trimming never deletes it).
        self.current_id = first_ledger_id
        self.current: list[EntryData] = self.entries[first_ledger_id]

    def relisten(self) -> None:
        self.notify = tuple(f for fs in self.listeners.values() for f in fs)

    def _check(self, max_entries: int) -> None:
        """Invariants of the slotted record the hot paths read directly:

        * ``ledger_ids`` is strictly increasing and names exactly the stored ledgers: ids come
          from one counter, rollovers append, trims pop the oldest (``read`` and
          ``next_position`` bisect it).
        * the current ledger is the last one, and ``current`` is its entry list itself
          (``append`` writes through it; ``last_confirmed`` and ``next_position`` shortcut on it).
        * every ledger before the current one is full: a rollover happens only when the
          current one holds ``max_entries`` entries.
        * ``trimmed_ids`` is sorted, older than every stored ledger and disjoint from them.
        * ``notify`` is ``listeners`` flattened: every change to listeners calls ``relisten``.
        """
        ids = self.ledger_ids
        assert ids and all(a < b for a, b in zip(ids, ids[1:])), f"ledger ids not strictly increasing: {ids}"
        assert set(self.entries) == set(ids), f"stored ledgers {sorted(self.entries)} differ from ids {ids}"
        assert self.current_id == ids[-1] and self.current is self.entries[ids[-1]], "current is not the last ledger"
        for lid in ids[:-1]:
            assert len(self.entries[lid]) == max_entries, f"ledger {lid} rolled over at {len(self.entries[lid])} entries"
        trimmed = self.trimmed_ids
        assert trimmed == sorted(trimmed) and (not trimmed or trimmed[-1] < ids[0]), f"trimmed ids {trimmed} vs {ids}"
        assert self.notify == tuple(f for fs in self.listeners.values() for f in fs), "notify is stale"


class MemoryLedgerFactory(LedgerFactory):
    def __init__(self, max_entries_per_ledger: int = DEFAULT_MAX_ENTRIES_PER_LEDGER) -> None:
        if max_entries_per_ledger < 1:
            raise ConfigError(f"max_entries_per_ledger must be >= 1, got {max_entries_per_ledger}")
        self.url = "memory://"
        self.max_entries_per_ledger = max_entries_per_ledger
        self._ledgers: dict[str, _LedgerData] = {}
        self._next_ledger_id = itertools.count(1)
        self._handles = itertools.count(1)

    @classmethod
    def from_url(cls, url: str) -> MemoryLedgerFactory:
        from engine.backends import query_int

        return cls(query_int(url, "max_entries_per_ledger", DEFAULT_MAX_ENTRIES_PER_LEDGER))

    def open(self, name: str) -> MemoryManagedLedger:
        data = self._ledgers.get(name)
        if data is None:
            data = self._ledgers[name] = _LedgerData(next(self._next_ledger_id))
        return MemoryManagedLedger(name, data, self, next(self._handles))

    def exists(self, name: str) -> bool:
        return name in self._ledgers

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._ledgers if n.startswith(prefix))

    def delete(self, name: str) -> None:
        self._ledgers.pop(name, None)

    def _new_ledger_id(self) -> int:
        return next(self._next_ledger_id)


class MemoryManagedLedger(ManagedLedger):
    trims_consumed = True

    def __init__(self, name: str, data: _LedgerData, factory: MemoryLedgerFactory, handle: int) -> None:
        self.name = name
        self.stats = Counters()
        self._d = data
        self._factory = factory
        self._handle = handle
        self._max = factory.max_entries_per_ledger

    def append(self, data: EntryData) -> Position:
        d = self._d
        if d.sealed:
            raise LedgerSealed(f"ledger {self.name} is sealed; append refused")
        current = d.current
        if len(current) >= self._max:  # roll over, as a managed ledger does when a ledger is full
            lid = self._factory._new_ledger_id()
            d.ledger_ids.append(lid)
            current = d.entries[lid] = d.current = []
            d.current_id = lid
            self._trim_consumed()  # ledgerClosed -> trimConsumedLedgersInBackground
        current.append(data)
        pos = _position((d.current_id, len(current) - 1))
        stats = self.stats
        stats["appends"] += 1
        if data.marker is not None:
            stats["appends.marker"] += 1
        elif data.payload is not None:
            stats["appends.system"] += 1
        else:
            stats["appends.data"] += 1
        for listener in d.notify:
            listener(pos)
        return pos

    def read(self, start: Position, end: Position, max_entries: int) -> list[Entry]:
        d = self._d
        out: list[Entry] = []
        ids = d.ledger_ids
        start_lid, start_eid = start
        end_lid, end_eid = end
        i = bisect_left(ids, start_lid) if start_lid != d.current_id else len(ids) - 1
        while i < len(ids) and len(out) < max_entries:
            lid = ids[i]
            if lid > end_lid:
                break
            entries = d.entries[lid]
            first = start_eid if lid == start_lid and start_eid > 0 else 0
            last = len(entries) - 1 if lid < end_lid else min(end_eid, len(entries) - 1)
            stop = min(last + 1, first + (max_entries - len(out)))
            if first < stop:
                out += [_entry((_position((lid, eid)), entries[eid])) for eid in range(first, stop)]
            i += 1
        stats = self.stats
        stats["reads"] += 1
        stats["entries_read"] += len(out)
        return out

    def last_confirmed(self) -> Position:
        d = self._d
        if d.current:
            return _position((d.current_id, len(d.current) - 1))
        for lid in reversed(d.ledger_ids):
            n = len(d.entries[lid])
            if n:
                return Position(lid, n - 1)
        return Position(d.ledger_ids[-1], -1)

    def first_position(self) -> Position:
        d = self._d
        for lid in d.ledger_ids:
            if d.entries[lid]:
                return Position(lid, 0)
        return Position(d.ledger_ids[-1], 0)

    def next_position(self, position: Position) -> Position:
        d = self._d
        lid, eid = position
        if lid == d.current_id:  # the common case: within the ledger being written
            return _position((lid, eid + 1))
        ids = d.ledger_ids
        i = bisect_left(ids, lid)
        if i < len(ids) and ids[i] == lid:
            if eid + 1 < len(d.entries[lid]) or i == len(ids) - 1:
                return Position(lid, eid + 1)
            return Position(ids[i + 1], 0)
        # A trimmed or never-existing ledger id: the next stored position after it.
        if i < len(ids):
            return Position(ids[i], 0)
        return Position(ids[-1], len(d.entries[ids[-1]]))

    def seal(self) -> None:
        self._d.sealed = True

    @property
    def sealed(self) -> bool:
        return self._d.sealed

    def trim(self, before: Position) -> int:
        removed = self._delete_ledgers(before, inclusive=False)
        self.stats["trimmed_entries"] += removed
        return removed

    def _delete_ledgers(self, bound: Position, *, inclusive: bool) -> int:
        """Delete the oldest ledgers whose last entry is before ``bound`` (at or before it when
        ``inclusive``), never the current one. Counts ``trimmed_ledgers``; returns entries deleted."""
        d = self._d
        ids = d.ledger_ids
        removed = ledgers = 0
        while len(ids) > 1:
            lid = ids[0]
            entries = d.entries[lid]
            last = (lid, len(entries) - 1)
            if last > bound or (last == bound and not inclusive):
                break
            removed += len(entries)
            ledgers += 1
            del d.entries[lid]
            ids.pop(0)
            d.trimmed_ids.append(lid)
        if ledgers:
            self.stats["trimmed_ledgers"] += ledgers
        return removed

    def _trim_consumed(self) -> None:
        """``internalTrimLedgers`` with retention 0: delete every ledger wholly at or before the
        slowest durable cursor's mark-delete (see the module docstring). Every cursor saved here
        is durable; a ledger with none is kept (the documented deviation)."""
        d = self._d
        if len(d.ledger_ids) < 2 or not d.cursors:
            return
        slowest = min(state.mark_delete for state in d.cursors.values())
        removed = self._delete_ledgers(slowest, inclusive=True)
        if removed:
            self.stats["trimmed_entries"] += removed

    def is_trimmed(self, position: Position) -> bool:
        ids = self._d.trimmed_ids
        i = bisect_right(ids, position.ledger_id)
        return i > 0 and ids[i - 1] == position.ledger_id

    def entry_count(self) -> int:
        return sum(len(self._d.entries[lid]) for lid in self._d.ledger_ids)

    def add_listener(self, listener: Callable[[Position], None]) -> None:
        self._d.listeners.setdefault(self._handle, []).append(listener)
        self._d.relisten()

    def save_cursor(self, name: str, state: CursorState) -> None:
        d = self._d
        cursors = d.cursors
        old = cursors.get(name)
        cursors[name] = state
        self.stats["cursor_writes"] += 1
        # onCursorMarkDeletePositionUpdated: a trim is due when a mark-delete moves to another ledger.
        if len(d.ledger_ids) > 1 and old is not None and old.mark_delete[0] != state.mark_delete[0]:
            self._trim_consumed()

    def load_cursor(self, name: str) -> CursorState | None:
        return self._d.cursors.get(name)

    def delete_cursor(self, name: str) -> None:
        if self._d.cursors.pop(name, None) is not None:
            self._trim_consumed()  # the slowest cursor may be gone

    def cursor_names(self) -> list[str]:
        return sorted(self._d.cursors)

    def close(self) -> None:
        self._d.listeners.pop(self._handle, None)
        self._d.relisten()

    def _check(self) -> None:
        """The durable record's invariants (:meth:`_LedgerData._check`)."""
        self._d._check(self._max)
