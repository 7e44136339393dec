"""``memory://``: the embedded MetadataStore on sortedcontainers.

:class:`MemoryData` is the durable part (it survives a simulated broker crash); a
:class:`MemoryMetadataStore` is a client handle on it (``MemoryMetadataStore.open(data)``). Writes
push their change events synchronously, inside the write call, to every open handle, so runs are
deterministic. No network: ``round_trips`` stays 0.
"""

from __future__ import annotations

import builtins

import itertools
import threading
from typing import Any, Callable, Mapping, Sequence

from sortedcontainers import SortedDict, SortedList

from engine.errors import ConfigError, MetadataError
from metadata_v5.store.port import (
    Bounds, Capabilities, ChangeKind, Check, Delete, DeleteSequence, IndexEntry, IndexSpec,
    MetadataStore, Op, OpResult, Put, PutSequential, Record, Watch, condition_error,
    count_partitions, new_counters, sequential_key, validate_ops,
    validate_user_key, _Bound, Callback, RESERVED_PREFIX, sequence_of,
)
from metadata_v5.store.watches import Change, WatchHub

class DeferredSortedList:
    """A ``SortedList`` of unique items whose adds and removes are applied when it is next read.
    Most index entries are op records' that are written and collected before any query reads
    their index: such an entry costs two set operations instead of two O(log n) updates."""

    __slots__ = ("_items", "_added", "_removed")

    def __init__(self) -> None:
        self._items = SortedList()
        self._added: set[Any] = set()    # not in _items yet
        self._removed: set[Any] = set()  # still in _items

    def add(self, item: Any) -> None:
        if item in self._removed:
            self._removed.remove(item)
        else:
            self._added.add(item)

    def remove(self, item: Any) -> None:
        if item in self._added:
            self._added.remove(item)
        else:
            self._removed.add(item)

    def sorted(self) -> SortedList:
        """The items, up to date."""
        items = self._items
        if self._removed:
            for item in self._removed:
                items.remove(item)
            self._removed.clear()
        if self._added:
            items.update(self._added)
            self._added.clear()
        return items


_Entries = dict[str, tuple[str, int]]  # index name -> (member, score)
_IndexChange = tuple[str, "tuple[str, int] | None", "tuple[str, int] | None"]  # name, old, new
_Step = tuple[Op, str, "dict[str, str] | None", _Entries]  # op, its key, copied fields, new entries


class MemoryData:
    """The durable state of one in-process store: records by key (a ``SortedDict``, so prefix
    listing is ordered), one ``SortedList`` per index, sequence counters, the revision."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.records: SortedDict = SortedDict()  # key -> Record
        self.specs: dict[str, IndexSpec] = {}
        # the specs in definition order, runs with the same prefix grouped (one prefix test each)
        self._by_prefix: builtins.list[tuple[str, builtins.list[IndexSpec]]] = []
        self._numeric: set[str] = set()
        # numeric index: (score, key) items; lexicographic: member items
        self.index: dict[str, DeferredSortedList] = {}
        # lexicographic index: member -> its decoded entry, for the members in the index (a scan of
        # a segment's op records decodes the same members again on every cleanup)
        self.decoded: dict[str, dict[str, IndexEntry]] = {}
        # key -> {index name: (member, score)} for records with index entries: a write finds the
        # entries it replaces here instead of recomputing them from the old record
        self.entries: dict[str, dict[str, tuple[str, int]]] = {}
        self.seqs: dict[str, int] = {}
        self.revision = 0
        self.hubs: builtins.list[WatchHub] = []

    # -- index plumbing --

    def _entries(self, key: str, fields: Mapping[str, str]) -> _Entries:
        """The record's entries, in index definition order (watch events follow that order)."""
        out = {}
        for prefix, specs in self._by_prefix:
            if key.startswith(prefix):
                for spec in specs:
                    entry = spec.entry(key, fields)
                    if entry is not None:
                        out[spec.name] = entry
        return out

    def _item(self, name: str, entry: tuple[str, int]) -> Any:
        """An entry as its index's SortedList holds it."""
        return (entry[1], entry[0]) if name in self._numeric else entry[0]

    def _reindex(self, key: str, new: _Entries, counters: dict[str, int]) -> builtins.list[_IndexChange]:
        """Replace ``key``'s index entries with ``new``; the per-index changes, for watches."""
        old = self.entries.pop(key, None)
        if new:
            self.entries[key] = new
        index = self.index
        changes: builtins.list[_IndexChange] = []
        if not old:  # a new record (the common case): only adds
            for name, entry in new.items():
                index[name].add(self._item(name, entry))
                changes.append((name, None, entry))
            counters["index_writes"] += len(changes)
            return changes
        if not new:  # a deleted record, or one that left every index: only removes
            for name, entry in old.items():
                index[name].remove(self._item(name, entry))
                self._forget(name, entry)
                changes.append((name, entry, None))
            counters["index_writes"] += len(changes)
            return changes
        writes = 0
        for name in self.specs:  # definition order
            o, nw = old.get(name), new.get(name)
            if o is None and nw is None:
                continue
            if o != nw:
                if o is not None:
                    index[name].remove(self._item(name, o))
                    self._forget(name, o)
                    writes += 1
                if nw is not None:
                    index[name].add(self._item(name, nw))
                    writes += 1
            changes.append((name, o, nw))
        counters["index_writes"] += writes
        return changes

    def _forget(self, name: str, entry: tuple[str, int]) -> None:
        decoded = self.decoded.get(name)
        if decoded is not None:
            decoded.pop(entry[0], None)

    def scan(self, spec: IndexSpec, bounds: Bounds, limit: int | None, reverse: bool) -> builtins.list[IndexEntry]:
        if bounds.empty():
            return []
        sl = self.index[spec.name].sorted()
        if spec.numeric:
            lo = None if bounds.lo is None else (bounds.lo,)
            hi = None if bounds.hi is None else (bounds.hi + 1,)  # type: ignore[operator]
            it = sl.irange(lo, hi, inclusive=(True, False), reverse=reverse)
            return [IndexEntry(spec.name, score, key) for score, key in itertools.islice(it, limit)]
        it = sl.irange(bounds.lo, bounds.hi, inclusive=(True, False), reverse=reverse)
        decoded = self.decoded[spec.name]
        out = []
        for member in itertools.islice(it, limit):
            entry = decoded.get(member)
            if entry is None:
                entry = decoded[member] = spec.decode(member, 0)
            out.append(entry)
        return out

    # -- writes --

    def apply(self, ops: Sequence[Op], counters: dict[str, int]) -> builtins.list[OpResult]:
        """Apply a batch the caller has run through :func:`validate_ops` (once: this is the hot
        path of every write)."""
        if len(ops) == 1:
            return [self._apply_one(ops[0], counters)]
        for op in ops:
            if type(op) is not Delete or op.expected_version is not None:  # type: ignore[union-attr]
                return self._apply_many(ops, counters)
        return self._delete_all([op.key for op in ops], counters)  # type: ignore[union-attr]

    def _delete_all(self, keys: builtins.list[str], counters: dict[str, int]) -> builtins.list[OpResult]:
        """:meth:`apply` of unconditional deletes only (collecting a txn's op records): no
        conditions to check and no entries to compute, so no plan."""
        with self.lock:
            records = self.records
            revision = self.revision + 1
            results: builtins.list[OpResult] = []
            deleted: builtins.list[tuple[str, builtins.list[_IndexChange]]] = []
            for key in keys:
                old = records.get(key)
                if old is None:
                    results.append(OpResult(key, None))
                    continue
                deleted.append((key, self._reindex(key, {}, counters)))
                del records[key]
                results.append(OpResult(key, old.version))
            counters["batches"] += 1
            if deleted:
                self.revision = revision
                counters["writes"] += len(deleted)
                if len(deleted) > 1 and count_partitions(
                        k for k, _ in deleted if not k.startswith(RESERVED_PREFIX)) > 1:
                    counters["multi_partition_batches"] += 1
                hubs = [hub for hub in self.hubs if hub.watching]
                if hubs:
                    changes = [Change(k, ChangeKind.DELETE, revision, None, ic) for k, ic in deleted]
                    for hub in hubs:
                        hub.on_changes(changes)
            return results

    def _apply_many(self, ops: Sequence[Op], counters: dict[str, int]) -> builtins.list[OpResult]:
        with self.lock:
            conditional = self._check_conditions(ops, counters)
            plan, seqs = self._plan(ops)
            revision = self.revision + 1
            records = self.records
            results: builtins.list[OpResult] = []
            changes: builtins.list[Change] = []
            for op, key, fields, new_entries in plan:
                if fields is not None:  # Put, PutSequential
                    index_changes = self._reindex(key, new_entries, counters)
                    records[key] = Record(key, fields, revision)
                    results.append(OpResult(key, revision))
                    changes.append(Change(key, ChangeKind.PUT, revision, dict(fields), index_changes))
                    if isinstance(op, PutSequential):
                        counters["seq_allocs"] += 1
                elif isinstance(op, Delete):
                    old = records.get(key)
                    if old is None:
                        results.append(OpResult(key, None))
                        continue
                    index_changes = self._reindex(key, {}, counters)
                    del records[key]
                    results.append(OpResult(key, old.version))
                    changes.append(Change(key, ChangeKind.DELETE, revision, None, index_changes))
                elif isinstance(op, Check):  # the version now, after this batch's earlier ops
                    rec = records.get(key)
                    results.append(OpResult(key, rec.version if rec is not None else None))
                else:  # DeleteSequence
                    results.append(OpResult(key, None))
            counters["batches"] += 1
            if conditional:
                counters["cas_ok"] += 1
            forgot = any(n is None and p in self.seqs for p, n in seqs.items())
            if changes or forgot:  # a dropped counter is a change too (it takes a revision)
                self.revision = revision
                counters["writes"] += len(changes)
                if len(changes) > 1 and count_partitions(
                        c.key for c in changes if not c.key.startswith(RESERVED_PREFIX)) > 1:
                    counters["multi_partition_batches"] += 1
                for hub in tuple(self.hubs):
                    hub.on_changes(changes)
            for prefix, last in seqs.items():
                if last is None:
                    self.seqs.pop(prefix, None)
                else:
                    self.seqs[prefix] = last
            return results

    def _apply_one(self, op: Op, counters: dict[str, int]) -> OpResult:
        """:meth:`apply` of a one-op batch (nearly every write: an op record, a header create or
        CAS, one delete): the same checks, effects, counts and events in one pass, without the
        plan and the sequence overlay a multi-op batch needs."""
        kind = type(op)
        with self.lock:
            records = self.records
            if kind is PutSequential:
                assert isinstance(op, PutSequential)
                prefix = op.prefix
                n = self.seqs.get(prefix)
                n = (n if n is not None else self._highest(prefix)) + 1
                key = sequential_key(prefix, n)
                fields = dict(op.fields)
                result = self._put_one(key, fields, self._entries(key, fields), counters)  # raises before writing
                self.seqs[prefix] = n
                counters["seq_allocs"] += 1
                return result
            if kind is Put:
                assert isinstance(op, Put)
                key = op.key
                existing = records.get(key)
                if existing is not None:  # one copy of a rewritten key (a header's CAS), not two
                    key = existing.key
                conditional = op.expected_version is not None
                if conditional:
                    self._check_version(key, op.expected_version, counters)  # type: ignore[arg-type]
                fields = dict(op.fields)
                result = self._put_one(key, fields, self._entries(key, fields), counters)
                if conditional:
                    counters["cas_ok"] += 1
                return result
            if kind is Delete:
                assert isinstance(op, Delete)
                key = op.key
                conditional = op.expected_version is not None
                if conditional:
                    self._check_version(key, op.expected_version, counters)  # type: ignore[arg-type]
                    counters["cas_ok"] += 1
                counters["batches"] += 1
                old = records.get(key)
                if old is None:
                    return OpResult(key, None)
                revision = self.revision = self.revision + 1
                index_changes = self._reindex(key, {}, counters)
                del records[key]
                counters["writes"] += 1
                self._notify(key, ChangeKind.DELETE, revision, None, index_changes)
                return OpResult(key, old.version)
        return self._apply_many([op], counters)[0]  # Check, DeleteSequence: rare

    def _put_one(self, key: str, fields: dict[str, str], entries: _Entries, counters: dict[str, int]) -> OpResult:
        revision = self.revision = self.revision + 1
        index_changes = self._reindex(key, entries, counters)
        self.records[key] = Record(key, fields, revision)
        counters["batches"] += 1
        counters["writes"] += 1
        self._notify(key, ChangeKind.PUT, revision, fields, index_changes)
        return OpResult(key, revision)

    def _notify(self, key: str, kind: ChangeKind, revision: int, fields: dict[str, str] | None,
                index_changes: builtins.list[_IndexChange]) -> None:
        """Hand one change to every hub that may want it (most writes are op records nobody
        point-watches: for them the change is not even built)."""
        change = None
        for hub in tuple(self.hubs):  # a synchronous notifier may open or close handles
            if hub.may_want(key):
                if change is None:
                    change = Change(key, kind, revision, dict(fields) if fields is not None else None, index_changes)
                hub.on_changes((change,))

    def _check_version(self, key: str, expected: int, counters: dict[str, int]) -> None:
        rec = self.records.get(key)
        actual = rec.version if rec is not None else None
        if (expected == 0 and rec is not None) or (expected != 0 and actual != expected):
            counters["cas_conflict"] += 1
            raise condition_error(key, expected, actual)

    def _check_conditions(self, ops: Sequence[Op], counters: dict[str, int]) -> bool:
        """Raise for the first failing version condition; whether the batch had any."""
        conditional = False
        for op in ops:
            if isinstance(op, Check):
                expected = op.version
            elif isinstance(op, (Put, Delete)) and op.expected_version is not None:
                expected = op.expected_version
            else:
                continue
            conditional = True
            self._check_version(op.key, expected, counters)
        return conditional

    def _plan(self, ops: Sequence[Op]) -> tuple[builtins.list[_Step], dict[str, int | None]]:
        """Pass 1: resolve keys, copy fields, compute new index entries (a ``ValueError`` here
        writes nothing). Sequence counters this batch changes (``None``: forgotten) are an
        overlay applied only on success, not a copy of every counter (that made batches O(#txns))."""
        seqs: dict[str, int | None] = {}
        issued: dict[str, int] = {}  # prefix -> the highest seq this batch assigned (it outlives a DeleteSequence)
        seen: set[str] | None = set() if len(ops) > 1 else None  # one op cannot write a key twice
        plan: builtins.list[_Step] = []
        no_entries: dict[str, tuple[str, int]] = {}
        for op in ops:
            fields: dict[str, str] | None = None
            if isinstance(op, PutSequential):
                prefix = op.prefix
                current = seqs[prefix] if prefix in seqs else self.seqs.get(prefix)
                n = (current if current is not None else max(self._highest(prefix), issued.get(prefix, 0))) + 1
                seqs[prefix] = issued[prefix] = n
                key = sequential_key(prefix, n)
                fields = dict(op.fields)
            elif isinstance(op, Put):
                key, fields = op.key, dict(op.fields)
            elif isinstance(op, Delete):
                key = op.key
            elif isinstance(op, DeleteSequence):
                seqs[op.prefix] = None
                plan.append((op, op.prefix, None, no_entries))
                continue
            else:  # Check
                plan.append((op, op.key, None, no_entries))
                continue
            if seen is not None:
                if key in seen:
                    raise ValueError(f"batch writes {key!r} twice")
                seen.add(key)
            plan.append((op, key, fields, self._entries(key, fields) if fields is not None else no_entries))
        return plan, seqs

    def _highest(self, prefix: str) -> int:
        """Sequence number of the highest key under ``prefix`` (0: none, or not sequential)."""
        for key in self.records.irange(minimum=prefix, maximum=prefix + "\U0010ffff", reverse=True):
            return sequence_of(prefix, key) or 0
        return 0

    def define_index(self, spec: IndexSpec) -> None:
        with self.lock:
            existing = self.specs.get(spec.name)
            if existing == spec:
                return
            if existing is not None:
                raise ConfigError(f"index {spec.name} is already defined differently ({existing} vs {spec})")
            for key in self.records.irange(minimum=spec.prefix):
                if key.startswith(spec.prefix):
                    raise ConfigError(f"index {spec.name}: records under {spec.prefix!r} exist; define indexes first")
                break
            self.specs[spec.name] = spec
            if self._by_prefix and self._by_prefix[-1][0] == spec.prefix:
                self._by_prefix[-1][1].append(spec)
            else:
                self._by_prefix.append((spec.prefix, [spec]))
            if spec.numeric:
                self._numeric.add(spec.name)
            self.index[spec.name] = DeferredSortedList()
            if not spec.numeric:
                self.decoded[spec.name] = {}

    def check(self) -> None:
        """Every index entry is produced by an existing record, and every record's entries are
        in the index and in the entries cache; versions are at most the revision."""
        with self.lock:
            expected: dict[str, builtins.list[Any]] = {name: [] for name in self.specs}
            for key, rec in self.records.items():
                assert rec.key == key, (rec, key)
                assert 0 < rec.version <= self.revision, (rec, self.revision)
                entries = self._entries(key, rec.fields)
                assert self.entries.get(key, {}) == entries, (key, self.entries.get(key), entries)
                for name, entry in entries.items():
                    expected[name].append((entry[1], entry[0]) if self.specs[name].numeric else entry[0])
            for name, deferred in self.index.items():
                sl = deferred.sorted()
                sl._check()
                assert list(sl) == sorted(expected[name]), (name, list(sl), sorted(expected[name]))
            assert set(self.index) == set(self.specs)
            for name, decoded in self.decoded.items():  # the cache holds index members only, decoded right
                members = set(self.index[name].sorted())
                assert set(decoded) <= members, (name, set(decoded) - members)
                assert all(e == self.specs[name].decode(m, 0) for m, e in decoded.items()), name
            assert set(self.entries) <= set(self.records), set(self.entries) - set(self.records)
            for prefix, n in self.seqs.items():
                assert n >= 1, (prefix, n)


class MemoryMetadataStore(MetadataStore):
    """A handle on a :class:`MemoryData`. Every operation is one atomic step under the data's lock."""

    capabilities = Capabilities(native_indexes=True, native_sequences=True, range_watch_events=True,
                                in_process=True)

    def __init__(self, data: MemoryData | None = None) -> None:
        self.data = data if data is not None else MemoryData()
        self._counters = new_counters()
        self._hub = WatchHub(self._counters)
        self._closed = False
        with self.data.lock:
            self.data.hubs.append(self._hub)

    @classmethod
    def open(cls, data: MemoryData | None = None) -> MemoryMetadataStore:
        """A handle on ``data`` (a new, empty store when ``None``)."""
        return cls(data)

    @classmethod
    def from_url(cls, url: str) -> MemoryMetadataStore:
        return cls()

    def _live(self) -> MemoryData:
        if self._closed:
            raise MetadataError("metadata store handle is closed")
        return self.data

    def _spec(self, index: str) -> IndexSpec:
        try:
            return self.data.specs[index]
        except KeyError:
            raise MetadataError(f"no index named {index!r}") from None

    # -- records --

    def get(self, key: str) -> Record | None:
        data = self._live()
        self._counters["reads"] += 1
        return data.records.get(key)

    def get_many(self, keys: Sequence[str]) -> builtins.list[Record | None]:
        data = self._live()
        with data.lock:
            self._counters["reads"] += len(keys)
            return [data.records.get(k) for k in keys]

    def list(self, prefix: str, *, limit: int | None = None) -> builtins.list[Record]:
        data = self._live()
        with data.lock:
            self._counters["lists"] += 1
            out: builtins.list[Record] = []
            for key in data.records.irange(minimum=prefix):
                if not key.startswith(prefix) or (limit is not None and len(out) >= limit):
                    break
                out.append(data.records[key])
            self._counters["listed"] += len(out)
            return out

    def count(self, prefix: str) -> int:
        if prefix and ord(prefix[-1]) == 0x10FFFF:
            return len(self.list_keys(prefix))
        data = self._live()
        with data.lock:
            if not prefix:
                return len(data.records)
            # every key that starts with prefix sorts at or after it and before its successor
            end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            return data.records.bisect_left(end) - data.records.bisect_left(prefix)

    def batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        validate_ops(ops)
        return self._live().apply(ops, self._counters)

    def raw_batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        data = self._live()
        validate_ops(ops, user=False)
        return data.apply(ops, self._counters)

    # -- indexes --

    def define_index(self, spec: IndexSpec) -> None:
        self._live().define_index(spec)

    def indexes(self) -> dict[str, IndexSpec]:
        return dict(self._live().specs)

    def query(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
              inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
              limit: int | None = None, reverse: bool = False) -> builtins.list[IndexEntry]:
        data = self._live()
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        with data.lock:
            self._counters["index_queries"] += 1
            return data.scan(spec, bounds, limit, reverse)

    def query_records(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
                      inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
                      limit: int | None = None, reverse: bool = False) -> builtins.list[Record]:
        data = self._live()
        with data.lock:
            entries = self.query(index, minimum, maximum, inclusive=inclusive, prefix=prefix, limit=limit,
                                 reverse=reverse)
            self._counters["reads"] += len(entries)
            return [data.records[e.key] for e in entries]

    # -- watches --

    def watch(self, key: str, callback: Callback) -> Watch:
        validate_user_key(key)
        data = self._live()
        with data.lock:
            return self._hub.add(Watch(callback, data.records.get(key), data.revision, key=key))

    def watch_range(self, index: str, callback: Callback, minimum: _Bound = None, maximum: _Bound = None, *,
                    inclusive: tuple[bool, bool] = (True, True),
                    prefix: Sequence[str | int] | None = None) -> Watch:
        data = self._live()
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        with data.lock:
            initial = data.scan(spec, bounds, None, False)
            return self._hub.add(Watch(callback, initial, data.revision, spec=spec, bounds=bounds))

    def set_notifier(self, notifier: Callable[[Callable[[], None]], None] | None) -> None:
        self._live()
        self._hub.set_notifier(notifier)

    def poll_watches(self, timeout_s: float = 0.0) -> int:
        self._live()
        return self._hub.drain()

    # -- lifecycle --

    def stats(self) -> dict[str, int]:
        return dict(self._counters)

    def reopen(self) -> MemoryMetadataStore:
        return MemoryMetadataStore(self.data)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._hub.close()
        with self.data.lock:
            if self._hub in self.data.hubs:
                self.data.hubs.remove(self._hub)

    def _check(self) -> None:
        self.data.check()
