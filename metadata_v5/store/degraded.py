"""Degraded mode: a store *without* native secondary indexes, sequential keys or range watches —
what PIP-473 says a ZooKeeper backend would have to do instead.

:class:`DegradedMetadataStore` wraps any MetadataStore and uses only its plain records, atomic
multi-op batches (ZooKeeper ``multi``), prefix listing (``getChildren``) and point watches:

* **Indexes** are client-maintained index records ``/__txnbench/idx/<index>/<primary key>``
  (fields ``m`` = encoded member, ``s`` = score), written in the same batch as their record. To know
  which entries to remove, every write first reads the records it replaces (one extra read round
  trip), then the batch guards them with version checks and retries on a race.
* **Queries** list the whole index (``/__txnbench/idx/<index>/``) and filter/sort client-side.
* **Sequential keys** come from client counter records ``/__txnbench/seq/<prefix>`` read before
  the batch and CAS-incremented in it.
* **Range watches** are re-lists: :meth:`relist` (every :data:`RELIST_US` once attached (:meth:`attach`) to
  the engine's scheduler; callers may also run it) lists each
  watched index once, diffs it with the last listing and raises the net changes (so
  ``Capabilities.range_watch_events`` is ``False``: nothing arrives between re-lists, intermediate
  states are never seen, a re-put of an unchanged entry raises nothing, deletions carry
  ``version=None``). Point watches are the wrapped store's own.

Counts: ``reads``/``writes``/``lists``/``round_trips`` are the wrapped store's physical ones
(index records and counters included: the write amplification); ``cas_*``, ``seq_allocs``,
``index_*`` and ``relists`` are this wrapper's, at the caller's level.
"""

from __future__ import annotations

import builtins

from dataclasses import replace
from typing import Callable, Mapping, Sequence

from engine.errors import BadVersion, ConfigError, MetadataError, NoSuchKey
from metadata_v5.store.port import (
    ABSENT, RESERVED_PREFIX, Bounds, Callback, ChangeKind, Check, Delete, DeleteSequence, IndexEntry,
    IndexSpec, MetadataStore, Op, OpResult, Put, PutSequential, Record, Watch, WatchEvent, condition_error, conditions, count_partitions, new_counters, sequence_of, sequential_key, validate_fields,
    validate_ops, _Bound,
)
from metadata_v5.store.watches import WatchHub
from metadata_v5.store.wrapped import WrappedStore

IDX = RESERVED_PREFIX + "idx/"
SEQ = RESERVED_PREFIX + "seq/"
SCHEMA = RESERVED_PREFIX + "schema/"
SCHEMA_VERSION = RESERVED_PREFIX + "schema-version"
MAX_ATTEMPTS = 16
RELIST_US = 1_000_000  # range watches re-list this often (virtual time) once attached to a scheduler

_OWN = ("cas_ok", "cas_conflict", "seq_allocs", "multi_partition_batches", "index_queries", "index_writes",
        "index_record_writes", "relists")


def _idx_key(index: str, key: str) -> str:
    return f"{IDX}{index}/{key}"


class DegradedMetadataStore(WrappedStore):
    """Wraps ``inner`` (a fresh or degraded-only store: never one with native indexes defined)."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.capabilities = replace(inner.capabilities, native_indexes=False, native_sequences=False,
                                    range_watch_events=False)
        self._counters = new_counters()
        self._hub = WatchHub(self._counters)
        # range watch -> {primary key: (member, score, index-record version)} at the last re-list
        self._seen: dict[int, dict[str, tuple[str, int, int]]] = {}
        self._watches: dict[int, Watch] = {}
        self._specs: dict[str, IndexSpec] = {}
        self._closed = False
        self._load_schema()

    @classmethod
    def wrap(cls, inner: MetadataStore) -> DegradedMetadataStore:
        return cls(inner)

    def _load_schema(self) -> None:
        # SCHEMA and SCHEMA_VERSION share a prefix: one listing reads both consistently
        records = self.inner.list(RESERVED_PREFIX + "schema")
        self._specs = {r.key[len(SCHEMA):]: IndexSpec.from_json(r.fields["spec"])
                       for r in records if r.key.startswith(SCHEMA)}
        versions = [r.version for r in records if r.key == SCHEMA_VERSION]
        self._schema_version = versions[0] if versions else ABSENT

    def _spec(self, index: str) -> IndexSpec:
        if index not in self._specs:
            self._load_schema()
        try:
            return self._specs[index]
        except KeyError:
            raise MetadataError(f"no index named {index!r}") from None

    # -- records --

    def batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        validate_ops(ops)
        for op in ops:
            if isinstance(op, (Put, PutSequential)):
                validate_fields(op.fields)
        for _ in range(MAX_ATTEMPTS):
            plan = self._plan(ops)
            if plan is None:
                continue
            inner_ops, picks, written = plan
            try:
                results = self.inner.raw_batch(inner_ops)
            except (BadVersion, NoSuchKey):
                # a concurrent writer (or a new index) moved something between our read and the
                # batch; the caller's own conditions were checked against the read: retry
                self._load_schema()
                continue
            c = self._counters
            if conditions(ops):
                c["cas_ok"] += 1
            c["seq_allocs"] += sum(1 for op in ops if isinstance(op, PutSequential))
            if count_partitions(written) > 1:
                c["multi_partition_batches"] += 1
            n_idx = sum(1 for op in inner_ops if isinstance(op, (Put, Delete)) and op.key.startswith(IDX))
            c["index_record_writes"] += n_idx
            c["index_writes"] += n_idx
            return [OpResult(key, results[i].version) if i is not None else OpResult(key, None)
                    for key, i in picks]
        raise BadVersion(f"gave up after {MAX_ATTEMPTS} attempts: records kept changing under the batch")

    def _plan(self, ops: Sequence[Op]) -> tuple[builtins.list[Op], builtins.list[tuple[str, int | None]], builtins.list[str]] | None:
        """Read what the batch replaces, check the caller's conditions, and build the inner batch:
        (inner ops, per caller op (key, index of its inner op or None), written user keys)."""
        specs = self._specs
        keys: builtins.list[str] = []
        for op in ops:
            if isinstance(op, (Put, Delete, Check)):
                keys.append(op.key)
            elif isinstance(op, (PutSequential, DeleteSequence)):
                keys.append(SEQ + op.prefix)
        uniq = list(dict.fromkeys(keys))
        got = dict(zip(uniq, self.inner.get_many(uniq)))
        for key, expected in conditions(ops):
            rec = got[key]
            actual = rec.version if rec is not None else None
            if (expected == ABSENT and rec is not None) or (expected != ABSENT and actual != expected):
                self._counters["cas_conflict"] += 1
                raise condition_error(key, expected, actual)
        # the index records below follow the specs this handle loaded: fail (and reload) if another
        # handle declared an index since
        inner_ops: builtins.list[Op] = [Check(SCHEMA_VERSION, self._schema_version)]
        picks: builtins.list[tuple[str, int | None]] = []
        written: builtins.list[str] = []
        seqs: dict[str, int] = {}
        seq_read: dict[str, Record | None] = {}
        issued: dict[str, int] = {}  # prefix -> the highest seq this batch assigned (it outlives a DeleteSequence)

        def guard(key: str) -> int:
            rec = got.get(key)
            return rec.version if rec is not None else ABSENT

        def index_ops(key: str, old: Record | None, new: Mapping[str, str] | None) -> None:
            for name, spec in specs.items():
                o = spec.entry(key, old.fields) if old is not None else None
                n = spec.entry(key, new) if new is not None else None
                if o == n:
                    continue
                if n is not None:
                    inner_ops.append(Put(_idx_key(name, key), {"m": n[0], "s": str(n[1]), "k": key}))
                else:
                    inner_ops.append(Delete(_idx_key(name, key)))

        for op in ops:
            if isinstance(op, Check):
                inner_ops.append(op)
                picks.append((op.key, len(inner_ops) - 1))
            elif isinstance(op, Put):
                fields = validate_fields(op.fields)
                index_ops(op.key, got[op.key], fields)  # may raise ValueError: nothing written
                inner_ops.append(Put(op.key, fields, guard(op.key)))
                picks.append((op.key, len(inner_ops) - 1))
                written.append(op.key)
            elif isinstance(op, Delete):
                old = got[op.key]
                if old is None:
                    picks.append((op.key, None))
                    continue
                index_ops(op.key, old, None)
                inner_ops.append(Delete(op.key, old.version))
                picks.append((op.key, len(inner_ops) - 1))
                written.append(op.key)
            elif isinstance(op, PutSequential):
                ck = SEQ + op.prefix
                if op.prefix not in seq_read:
                    seq_read[op.prefix] = got[ck]
                    seqs[op.prefix] = int(got[ck].fields["n"]) if got[ck] is not None else 0  # type: ignore[union-attr]
                    if got[ck] is None:
                        seqs[op.prefix] = -1
                if seqs[op.prefix] == -1:
                    # no counter record: continue after the highest key (a listing, as ZooKeeper would)
                    # or the highest this batch assigned before forgetting the counter
                    seqs[op.prefix] = max([sequence_of(op.prefix, k) or 0 for k in self.inner.list_keys(op.prefix)]
                                          + [issued.get(op.prefix, 0)])
                seqs[op.prefix] += 1
                issued[op.prefix] = seqs[op.prefix]
                key = sequential_key(op.prefix, seqs[op.prefix])
                fields = validate_fields(op.fields)
                index_ops(key, None, fields)
                inner_ops.append(Put(key, fields))
                picks.append((key, len(inner_ops) - 1))
                written.append(key)
            else:
                assert isinstance(op, DeleteSequence)
                ck = SEQ + op.prefix
                if op.prefix not in seq_read:
                    seq_read[op.prefix] = got[ck]
                seqs[op.prefix] = -1
                picks.append((op.prefix, None))
        for prefix, n in seqs.items():
            ck, read = SEQ + prefix, seq_read[prefix]
            expected = read.version if read is not None else ABSENT
            if n == -1:
                if read is not None:
                    inner_ops.append(Delete(ck, expected))
            else:
                inner_ops.append(Put(ck, {"n": str(n)}, expected))
        touched = [key for key, i in picks if i is not None and not isinstance(inner_ops[i], Check)]
        touched += [op.key for op in ops if isinstance(op, Delete) and got[op.key] is None]
        if len(set(touched)) != len(touched):
            dup = next(k for k in touched if touched.count(k) > 1)
            raise ValueError(f"batch writes {dup!r} twice")
        return inner_ops, picks, written

    # -- indexes --

    def define_index(self, spec: IndexSpec) -> None:
        key = SCHEMA + spec.name
        for _ in range(MAX_ATTEMPTS):
            current = self.inner.get(key)
            if current is not None:
                existing = IndexSpec.from_json(current.fields["spec"])
                if existing != spec:
                    raise ConfigError(f"index {spec.name} is already defined differently ({existing} vs {spec})")
                self._load_schema()
                return
            if self.list(spec.prefix, limit=1):
                raise ConfigError(f"index {spec.name}: records under {spec.prefix!r} exist; define indexes first")
            version = self.inner.get(SCHEMA_VERSION)
            try:
                self.inner.raw_batch([
                    Put(key, {"spec": spec.to_json()}, ABSENT),
                    Put(SCHEMA_VERSION, {"n": "1"}, version.version if version else ABSENT)])
            except BadVersion:
                continue
            self._load_schema()
            return
        raise ConfigError(f"index {spec.name}: schema kept changing while defining it")

    def indexes(self) -> dict[str, IndexSpec]:
        return dict(self._specs)

    def _scan(self, spec: IndexSpec, bounds: Bounds) -> builtins.list[tuple[str, int, str, int]]:
        """The whole index listed, filtered and sorted: (member, score, primary key, version)."""
        rows = []
        for r in self.inner.list(f"{IDX}{spec.name}/"):
            member, score = r.fields["m"], int(r.fields["s"])
            if bounds.contains(member, score):
                rows.append((member, score, r.fields["k"], r.version))
        rows.sort(key=(lambda x: (x[1], x[0])) if spec.numeric else (lambda x: x[0]))
        return rows

    def _entries(self, index: str, minimum: _Bound, maximum: _Bound, inclusive: tuple[bool, bool],
                 prefix: Sequence[str | int] | None, limit: int | None, reverse: bool) -> builtins.list[IndexEntry]:
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        self._counters["index_queries"] += 1
        rows = [] if bounds.empty() else self._scan(spec, bounds)
        if reverse:
            rows.reverse()
        return [spec.decode(m, s) for m, s, _, _ in rows[:limit]]

    def query(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
              inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
              limit: int | None = None, reverse: bool = False) -> builtins.list[IndexEntry]:
        return self._entries(index, minimum, maximum, inclusive, prefix, limit, reverse)

    def query_records(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
                      inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
                      limit: int | None = None, reverse: bool = False) -> builtins.list[Record]:
        entries = self._entries(index, minimum, maximum, inclusive, prefix, limit, reverse)
        # index records and records are written in one batch, but the list and the get are two
        # reads: skip a record deleted in between
        return [r for r in self.inner.get_many([e.key for e in entries]) if r is not None]

    # -- watches --

    def watch(self, key: str, callback: Callback) -> Watch:
        return self.inner.watch(key, callback)

    def watch_range(self, index: str, callback: Callback, minimum: _Bound = None, maximum: _Bound = None, *,
                    inclusive: tuple[bool, bool] = (True, True),
                    prefix: Sequence[str | int] | None = None) -> Watch:
        spec = self._spec(index)
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        rows = [] if bounds.empty() else self._scan(spec, bounds)
        self._counters["index_queries"] += 1
        watch = self._hub.add(Watch(callback, [spec.decode(m, s) for m, s, _, _ in rows], 0, spec=spec,
                                    bounds=bounds))
        self._watches[id(watch)] = watch
        self._seen[id(watch)] = {k: (m, s, v) for m, s, k, v in rows}
        return watch

    def relist(self) -> int:
        """List each watched index once and raise the net changes since the last re-list."""
        by_index: dict[str, builtins.list[Watch]] = {}
        for wid, w in list(self._watches.items()):
            if not w.active:
                del self._watches[wid]
                del self._seen[wid]
                continue
            assert w.spec is not None
            by_index.setdefault(w.spec.name, []).append(w)
        raised = 0
        for name, watches in by_index.items():
            spec = watches[0].spec
            assert spec is not None
            rows = self._scan(spec, Bounds(spec.numeric, None, None))
            self._counters["relists"] += 1
            pending: builtins.list[tuple[Watch, tuple[str, int, str, int]]] = []
            for w in watches:
                assert w.bounds is not None
                seen = self._seen[id(w)]
                now = {k: (m, s, v) for m, s, k, v in rows if w.bounds.contains(m, s)}
                for k, (m, s, _) in seen.items():
                    if k not in now or now[k][:2] != (m, s):
                        e = spec.decode(m, s)
                        self._hub.emit(w, WatchEvent(k, ChangeKind.DELETE, None, None, name, e.sort_key))
                        raised += 1
                for m, s, k, v in rows:
                    if k in now and seen.get(k) != (m, s, v):
                        pending.append((w, (m, s, k, v)))
                self._seen[id(w)] = now
            if pending:
                records = dict(zip([p[1][2] for p in pending], self.inner.get_many([p[1][2] for p in pending])))
                for w, (m, s, k, v) in pending:
                    rec = records.get(k)
                    e = spec.decode(m, s)
                    self._hub.emit(w, WatchEvent(k, ChangeKind.PUT, v, dict(rec.fields) if rec else None, name,
                                                 e.sort_key))
                    raised += 1
        return raised

    def attach(self, call_later: Callable[[int, Callable[[], None]], object]) -> None:
        super().attach(call_later)

        def tick() -> None:
            if not self._closed:
                self.relist()
                call_later(RELIST_US, tick)

        call_later(RELIST_US, tick)

    def set_notifier(self, notifier: Callable[[Callable[[], None]], None] | None) -> None:
        self.inner.set_notifier(notifier)
        self._hub.set_notifier(notifier)

    def poll_watches(self, timeout_s: float = 0.0) -> int:
        return self.inner.poll_watches(timeout_s) + self._hub.drain()

    # -- lifecycle --

    def stats(self) -> dict[str, int]:
        out = self.inner.stats()
        for k in _OWN:
            out[k] = self._counters[k]
        out["watches"] += self._counters["watches"]
        out["watch_events"] += self._counters["watch_events"]
        return out

    def reopen(self) -> DegradedMetadataStore:
        return DegradedMetadataStore(self.inner.reopen())

    def close(self) -> None:
        self._closed = True
        self._hub.close()
        self._watches.clear()
        self._seen.clear()
        self.inner.close()

    def _check(self) -> None:
        """Index records <-> records, sequence counters >= the keys they issued, and the wrapped
        store's own check."""
        self.inner._check()
        self._load_schema()
        everything = self.inner.list("")
        records = {r.key: r for r in everything if not r.key.startswith(RESERVED_PREFIX)}
        expected: dict[str, tuple[str, str, str]] = {}
        for key, rec in records.items():
            for name, spec in self._specs.items():
                entry = spec.entry(key, rec.fields)
                if entry is not None:
                    expected[_idx_key(name, key)] = (entry[0], str(entry[1]), key)
        actual = {r.key: (r.fields["m"], r.fields["s"], r.fields["k"]) for r in everything if r.key.startswith(IDX)}
        assert actual == expected, (set(actual.items()) ^ set(expected.items()))
        for r in everything:
            if r.key.startswith(IDX):
                primary = records[r.fields["k"]]
                assert r.version <= primary.version, (r, primary)


def degraded(store: MetadataStore) -> DegradedMetadataStore:
    """``store`` seen through degraded mode (see the module docstring)."""
    return DegradedMetadataStore(store)


__all__ = ["DegradedMetadataStore", "degraded"]
