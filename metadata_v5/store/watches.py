"""The watch machinery every adapter shares: :class:`WatchHub`, one per handle, holds its point and
range watches and turns record changes (:class:`Change`) into pending events, delivered in order
as the port's module docstring states (:mod:`metadata_v5.store.port`)."""

from __future__ import annotations

import bisect
import builtins
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from metadata_v5.store.port import ChangeKind, IndexSpec, Watch, WatchEvent

__all__ = ["Change", "WatchHub"]


@dataclass
class Change:
    """One record change, as adapters log it: ``index`` holds per affected index
    ``(name, old (member, score) or None, new (member, score) or None)``."""

    key: str
    kind: ChangeKind
    version: int
    fields: dict[str, str] | None
    index: builtins.list[tuple[str, tuple[str, int] | None, tuple[str, int] | None]] = field(default_factory=list)


class _RangeTable:
    """The range watches of one index, arranged to find those whose bounds contain an entry
    without testing each: sorted by lower bound, with the running maximum of the upper bounds,
    so a scan down from the entry stops where no earlier-starting watch reaches it (at once for
    disjoint ranges such as one prefix per participant). Built for one state of the hub's list:
    ``current`` says whether that list has changed since (it is only appended to or replaced)."""

    def __init__(self, watches: builtins.list[Watch], numeric: bool) -> None:
        self.watches = watches
        self.size = len(watches)
        self.numeric = numeric
        bounds = [w.bounds for w in watches]
        assert all(b is not None for b in bounds)
        if numeric:  # closed [lo, hi]; None is unbounded
            lo = [b.lo if b.lo is not None else -_INF for b in bounds]  # type: ignore[union-attr]
            hi: builtins.list[Any] = [b.hi if b.hi is not None else _INF for b in bounds]  # type: ignore[union-attr]
        else:  # lo <= member < hi; hi as (0, s), or (1, "") for unbounded, so that maxima compare
            lo = [b.lo if b.lo is not None else "" for b in bounds]  # type: ignore[union-attr]
            hi = [(0, b.hi) if b.hi is not None else (1, "") for b in bounds]  # type: ignore[union-attr]
        self.order = sorted(range(len(watches)), key=lo.__getitem__)
        self.lo = [lo[i] for i in self.order]
        self.reach: builtins.list[Any] = []  # running max of hi along self.order
        for i in self.order:
            self.reach.append(hi[i] if not self.reach else max(self.reach[-1], hi[i]))

    def current(self, watches: builtins.list[Watch]) -> bool:
        return watches is self.watches and len(watches) == self.size

    def containing(self, member: str, score: int) -> builtins.list[int]:
        """Positions (registration order) of the watches whose bounds contain the entry."""
        x: Any = score if self.numeric else member
        beyond: Any = x if self.numeric else (0, x)  # reach <= beyond: nothing reaches the entry
        out = []
        for j in range(bisect.bisect_right(self.lo, x) - 1, -1, -1):
            if self.reach[j] < beyond or (self.reach[j] == beyond and not self.numeric):
                break
            i = self.order[j]
            if self.watches[i].bounds.contains(member, score):  # type: ignore[union-attr]
                out.append(i)
        out.sort()
        return out


_INF = float("inf")


class WatchHub:
    """Watch registry + pending-event queue of one handle (used by every adapter). Thread-safe
    for enqueueing; callbacks run on the thread calling :meth:`drain` or the notifier's."""

    def __init__(self, counters: dict[str, int]) -> None:
        self._counters = counters
        self._points: dict[str, builtins.list[Watch]] = {}
        self._ranges: dict[str, builtins.list[Watch]] = {}
        self._tables: dict[str, _RangeTable] = {}  # per index, rebuilt when its watches change
        self._pending: deque[Callable[[], None]] = deque()
        self._notifier: Callable[[Callable[[], None]], None] | None = None
        self._lock = threading.RLock()
        self.closed = False

    def add(self, watch: Watch) -> Watch:
        with self._lock:
            if not watch.active:  # cancelled before it was added: nothing to hold
                return watch
            if watch.key is not None:
                self._points.setdefault(watch.key, []).append(watch)
            else:
                assert watch.spec is not None
                self._ranges.setdefault(watch.spec.name, []).append(watch)
            self._counters["watches"] += 1
            watch._on_cancel = self._discard
        return watch

    def _discard(self, watch: Watch) -> None:
        """Drop a cancelled watch at once: a participant watches every header it caches and
        cancels the watch when the txn ends, so lazily pruned tables kept every watch (and its
        callback's closure) of the run alive, for the garbage collector to walk."""
        with self._lock:
            if watch.key is not None:
                table, name = self._points, watch.key
            else:
                assert watch.spec is not None
                table, name = self._ranges, watch.spec.name
            watches = table.get(name)
            if watches is None or watch not in watches:
                return
            alive = [w for w in watches if w is not watch]  # a new list: see _RangeTable.current
            if alive:
                table[name] = alive
            else:
                del table[name]

    @property
    def watching(self) -> bool:
        """Whether a change could concern this hub (it is open and holds a watch)."""
        return not self.closed and bool(self._points or self._ranges)

    def may_want(self, key: str) -> bool:
        """Whether a change of ``key`` could concern this hub: a point watch on it, or any range
        watch (a cheap filter for adapters: most writes are op records nobody watches by key)."""
        return not self.closed and (key in self._points or bool(self._ranges))

    def wants(self, key: str, indexes: Iterable[str]) -> bool:
        """Whether a change of ``key`` whose index entries are in ``indexes`` (names) could
        concern this hub: a point watch on the key, or a range watch on one of those indexes
        (:meth:`on_changes` emits nothing else; adapters skip decoding the rest)."""
        if self.closed:
            return False
        if key in self._points:
            return True
        ranges = self._ranges
        return bool(ranges) and any(name in ranges for name in indexes)

    def has_range_watches(self) -> bool:
        return bool(self._ranges)

    def range_watches(self) -> builtins.list[Watch]:
        with self._lock:
            return [w for ws in self._ranges.values() for w in ws]

    def has_watches(self) -> bool:
        # every watch the tables hold is live: a cancel removes its watch at once (_discard)
        return bool(self._points or self._ranges)

    def on_changes(self, changes: Iterable[Change], specs: Mapping[str, IndexSpec] | None = None,
                   range_watches: bool = True) -> None:
        """Turn changes into pending events for matching watches (in order)."""
        with self._lock:
            points, ranges = self._points, self._ranges if range_watches else None
            if self.closed or not (points or ranges):  # most handles watch nothing
                return
            for change in changes:
                if points:
                    for w in points.get(change.key, ()):
                        if w.active and change.version > w.revision:
                            self._emit(w, WatchEvent(change.key, change.kind, change.version, change.fields))
                if not ranges:
                    continue
                for name, old, new in change.index:
                    watches = ranges.get(name)
                    if not watches:
                        continue
                    for w in self._candidates(name, watches, old, new):
                        if not w.active or change.version <= w.revision:
                            continue
                        assert w.bounds is not None and w.spec is not None
                        if old is not None and old != new and w.bounds.contains(*old):
                            e = w.spec.decode(*old)
                            self._emit(w, WatchEvent(e.key, ChangeKind.DELETE, change.version, None, name, e.sort_key))
                        if new is not None and w.bounds.contains(*new):
                            e = w.spec.decode(*new)
                            self._emit(w, WatchEvent(e.key, ChangeKind.PUT, change.version, change.fields, name,
                                                     e.sort_key))

    def _candidates(self, name: str, watches: builtins.list[Watch], old: tuple[str, int] | None,
                    new: tuple[str, int] | None) -> builtins.list[Watch]:
        """The watches (in registration order) whose bounds contain ``old`` (when it leaves) or
        ``new``: the only ones the per-watch tests in :meth:`on_changes` can pass."""
        table = self._tables.get(name)
        if table is None or not table.current(watches):
            assert watches[0].spec is not None
            table = self._tables[name] = _RangeTable(watches, watches[0].spec.numeric)
        positions = table.containing(*new) if new is not None else []
        if old is not None and old != new:
            gone = table.containing(*old)
            positions = sorted(set(gone).union(positions)) if positions else gone
        return [watches[i] for i in positions]

    def emit(self, watch: Watch, event: WatchEvent) -> None:
        with self._lock:
            if not self.closed:
                self._emit(watch, event)

    def _emit(self, watch: Watch, event: WatchEvent) -> None:
        counters = self._counters

        done = False

        def deliver() -> None:  # one-shot: a second call is a no-op
            nonlocal done
            if not done and watch.active and not self.closed:
                done = True
                counters["watch_events"] += 1
                watch.callback(event)

        if self._notifier is not None:
            self._notifier(deliver)
        else:
            self._pending.append(deliver)

    def set_notifier(self, notifier: Callable[[Callable[[], None]], None] | None) -> None:
        with self._lock:
            self._notifier = notifier
            if notifier is not None:
                while self._pending:
                    notifier(self._pending.popleft())

    def drain(self) -> int:
        ran = 0
        while True:
            with self._lock:
                if not self._pending:
                    return ran
                deliver = self._pending.popleft()
            before = self._counters["watch_events"]
            deliver()
            ran += self._counters["watch_events"] - before

    def close(self) -> None:
        with self._lock:
            self.closed = True
            for table in (self._points, self._ranges):
                for ws in table.values():
                    for w in ws:
                        w.active = False
            self._points.clear()
            self._ranges.clear()
            self._tables.clear()
            self._pending.clear()
