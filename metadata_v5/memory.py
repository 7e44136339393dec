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
from metadata_v5.store import (
    Bounds, Capabilities, Change, ChangeKind, Check, Delete, DeleteSequence, IndexEntry, IndexSpec,
    MetadataStore, Op, OpResult, Put, PutSequential, Record, Watch, WatchHub, condition_error,
    conditions, count_partitions, new_counters, sequential_key, validate_fields, validate_ops,
    validate_user_key, _Bound, Callback, RESERVED_PREFIX, sequence_of,
)


class MemoryData:
    """The durable state of one in-process store: records by key (a ``SortedDict``, so prefix
    listing is ordered), one ``SortedList`` per index, sequence counters, the revision."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.records: SortedDict = SortedDict()  # key -> Record
        self.specs: dict[str, IndexSpec] = {}
        # numeric index: SortedList[(score, key)]; lexicographic: SortedList[member]
        self.index: dict[str, SortedList] = {}
        self.seqs: dict[str, int] = {}
        self.revision = 0
        self.hubs: builtins.list[WatchHub] = []

    # -- index plumbing --

    def _entries(self, key: str, fields: Mapping[str, str] | None) -> dict[str, tuple[str, int]]:
        if fields is None:
            return {}
        out = {}
        for name, spec in self.specs.items():
            entry = spec.entry(key, fields)
            if entry is not None:
                out[name] = entry
        return out

    def _add(self, name: str, entry: tuple[str, int]) -> None:
        if self.specs[name].numeric:
            self.index[name].add((entry[1], entry[0]))
        else:
            self.index[name].add(entry[0])

    def _remove(self, name: str, entry: tuple[str, int]) -> None:
        if self.specs[name].numeric:
            self.index[name].remove((entry[1], entry[0]))
        else:
            self.index[name].remove(entry[0])

    def scan(self, spec: IndexSpec, bounds: Bounds, limit: int | None, reverse: bool) -> builtins.list[IndexEntry]:
        if bounds.empty():
            return []
        sl = self.index[spec.name]
        if spec.numeric:
            lo = None if bounds.lo is None else (bounds.lo,)
            hi = None if bounds.hi is None else (bounds.hi + 1,)  # type: ignore[operator]
            it = sl.irange(lo, hi, inclusive=(True, False), reverse=reverse)
            return [IndexEntry(spec.name, score, key) for score, key in itertools.islice(it, limit)]
        it = sl.irange(bounds.lo, bounds.hi, inclusive=(True, False), reverse=reverse)
        return [spec.decode(member, 0) for member in itertools.islice(it, limit)]

    # -- writes --

    def apply(self, ops: Sequence[Op], counters: dict[str, int]) -> builtins.list[OpResult]:
        validate_ops(ops, user=False)
        with self.lock:
            conds = conditions(ops)
            for key, expected in conds:
                rec = self.records.get(key)
                actual = rec.version if rec is not None else None
                if (expected == 0 and rec is not None) or (expected != 0 and actual != expected):
                    counters["cas_conflict"] += 1
                    raise condition_error(key, expected, actual)
            # pass 1: resolve keys and new index entries (ValueError here writes nothing).
            # Sequence counters this batch changes (None: forgotten) are an overlay applied only on
            # success, not a copy of every counter (that made batches O(#txns)).
            seqs: dict[str, int | None] = {}
            seen: set[str] = set()
            plan: builtins.list[tuple[Op, str, dict[str, str] | None, dict[str, tuple[str, int]]]] = []
            for op in ops:
                if isinstance(op, PutSequential):
                    current = seqs[op.prefix] if op.prefix in seqs else self.seqs.get(op.prefix)
                    n = (current if current is not None else self._highest(op.prefix)) + 1
                    seqs[op.prefix] = n
                    key = sequential_key(op.prefix, n)
                    fields: dict[str, str] | None = validate_fields(op.fields)
                elif isinstance(op, Put):
                    key, fields = op.key, validate_fields(op.fields)
                elif isinstance(op, DeleteSequence):
                    seqs[op.prefix] = None
                    key, fields = op.prefix, None
                else:
                    key, fields = op.key, None
                if isinstance(op, (Put, PutSequential, Delete)):
                    if key in seen:
                        raise ValueError(f"batch writes {key!r} twice")
                    seen.add(key)
                plan.append((op, key, fields, self._entries(key, fields)))
            # pass 2: apply
            revision = self.revision + 1
            results: builtins.list[OpResult] = []
            changes: builtins.list[Change] = []
            for op, key, fields, new_entries in plan:
                if isinstance(op, Check):
                    rec = self.records.get(key)
                    results.append(OpResult(key, rec.version if rec is not None else None))
                    continue
                if isinstance(op, DeleteSequence):
                    results.append(OpResult(key, None))
                    continue
                old = self.records.get(key)
                if isinstance(op, Delete) and old is None:
                    results.append(OpResult(key, None))
                    continue
                old_entries = self._entries(key, old.fields) if old is not None else {}
                index_changes = []
                for name in self.specs:
                    o, nw = old_entries.get(name), new_entries.get(name)
                    if o is None and nw is None:
                        continue
                    if o is not None and o != nw:
                        self._remove(name, o)
                        counters["index_writes"] += 1
                    if nw is not None and o != nw:
                        self._add(name, nw)
                        counters["index_writes"] += 1
                    index_changes.append((name, o, nw))
                if isinstance(op, Delete):
                    assert old is not None
                    del self.records[key]
                    results.append(OpResult(key, old.version))
                    changes.append(Change(key, ChangeKind.DELETE, revision, None, index_changes))
                else:
                    assert fields is not None
                    self.records[key] = Record(key, fields, revision)
                    results.append(OpResult(key, revision))
                    changes.append(Change(key, ChangeKind.PUT, revision, dict(fields), index_changes))
                    if isinstance(op, PutSequential):
                        counters["seq_allocs"] += 1
            counters["batches"] += 1
            if conds:
                counters["cas_ok"] += 1
            forgot = any(n is None and p in self.seqs for p, n in seqs.items())
            if changes or forgot:  # a dropped counter is a change too (it takes a revision)
                self.revision = revision
                counters["writes"] += len(changes)
                if count_partitions(c.key for c in changes if not c.key.startswith(RESERVED_PREFIX)) > 1:
                    counters["multi_partition_batches"] += 1
                for hub in list(self.hubs):
                    hub.on_changes(changes)
            for prefix, last in seqs.items():
                if last is None:
                    self.seqs.pop(prefix, None)
                else:
                    self.seqs[prefix] = last
            return results

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
            self.index[spec.name] = SortedList()

    def check(self) -> None:
        """Every index entry is produced by an existing record, and every record's entries are
        in the index; versions are at most the revision."""
        with self.lock:
            expected: dict[str, builtins.list[Any]] = {name: [] for name in self.specs}
            for key, rec in self.records.items():
                assert rec.key == key, (rec, key)
                assert 0 < rec.version <= self.revision, (rec, self.revision)
                for name, entry in self._entries(key, rec.fields).items():
                    expected[name].append((entry[1], entry[0]) if self.specs[name].numeric else entry[0])
            for name, sl in self.index.items():
                sl._check()
                assert list(sl) == sorted(expected[name]), (name, list(sl), sorted(expected[name]))
            assert set(self.index) == set(self.specs)
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

    def batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        validate_ops(ops)
        return self._raw_batch(ops)

    def _raw_batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        """:meth:`batch` without the reserved-prefix check (for the degraded wrapper)."""
        return self._live().apply(ops, self._counters)

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
