"""Emulated mode: the metadata store as Pulsar's standalone runs it (RocksDB, ZooKeeper, memory).

Only Oxia implements the v5 store options natively; every other backend falls back to
``AbstractMetadataStore`` (pulsar-metadata 5.0.0-M1, PULSAR5_CODE.md §1.9):

* **Index scans** (``storeScanByIndex`` L624-660) list *every child of the scan prefix* and GET
  each one **serially** (a ``thenCompose`` chain), filtering on the client: a query costs one list
  plus one read per record under the index's prefix, whatever the range asks for.
* **Sequence keys** (L725-765) go through a ``__seq_counter__`` sidecar: 1 GET + 1 CAS on the
  counter, plus the create of the record. No code path deletes a counter
  (``atomicIncrementSequenceCounter`` L740 on), and a counter is a sibling of its records: the
  listing of a scan prefix (RocksdbMetadataStore ``getChildrenFromStore`` L494 on: every key under
  it, parsed) iterates the counter of every sequence prefix ever used under it, though the scan
  skips them (``isSequenceCounterChild``). ``scan_keys`` counts the keys the listings iterated,
  the counters among them: they grow with every txn the store has held (op records live under
  one per txn).
* The listing's iterator also passes every entry RocksDB's memtable holds under the prefix: each
  version a counter had and each deleted record's put and tombstone (the broker's memtable never
  flushed in a session here; bench.calibrate.store_probe timed the walk growing with them).
  :class:`Memtable` counts every put and delete under each scan prefix, shared by every handle on
  the store (a restart replays the WAL into it); ``scan_entries`` counts the entries the listings
  passed beyond the keys they returned.
* Notifications are the store's own (every backend delivers change notifications, which
  ``subscribeSequence`` and the watches listen to), so watches are the wrapped store's.

:class:`EmulatedMetadataStore` wraps a native store and keeps its records, batches and watches;
the wrapped store still maintains its indexes (only so that its range watches can notify), but
no query reaches them. This is not :mod:`metadata_v5.store.degraded`, which models the PIP text's idea
of a ZooKeeper backend (client-maintained index records, re-lists instead of range watches):
Pulsar ships the scan fallback, not index records.

Counts follow what the broker's ``pulsar_metadata_store_ops`` counters see: ``reads`` are the
GETs through ``AbstractMetadataStore.get`` (L359-379: the counter GETs among them), while a scan's
serial GETs go to ``storeGet`` directly (L605, L648), which records no metric: they are counted
apart as ``scan_reads``. ``writes`` include the counter CASes; ``index_queries``,
``seq_allocs``, ``scan_keys`` and ``scan_entries`` are this wrapper's.
"""

from __future__ import annotations

import builtins
from dataclasses import replace
from typing import Callable, Sequence

from engine.errors import BadVersion
from metadata_v5.store.port import (
    ABSENT, RESERVED_PREFIX, Bounds, Callback, DeleteSequence, IndexEntry, IndexSpec, MetadataStore, Op,
    OpResult, Put, PutSequential, Record, Watch, Delete, condition_error, conditions, sequence_of, sequential_key,
    validate_fields, validate_ops,
    _Bound,
)
from metadata_v5.store.wrapped import WrappedStore

COUNTER = RESERVED_PREFIX + "seq-counter/"  # Pulsar: "<prefix>__seq_counter__"; kept out of the prefix's listing here
MAX_ATTEMPTS = 16


class Memtable:
    """The entries RocksDB's memtable holds under each scan prefix: one per put (a counter's every
    version included) and one per delete (its tombstone), counted since the store opened."""

    __slots__ = ("entries", "_under")

    def __init__(self) -> None:
        self.entries: dict[str, int] = {}  # scan prefix -> entries under it
        self._under: dict[str, tuple[str, str]] = {}  # scan prefix -> its keys' and its counters' prefixes

    def watch(self, prefix: str, inner: MetadataStore) -> None:
        """Count under ``prefix`` from now on, starting from one entry per key already there."""
        if prefix not in self.entries:
            self.entries[prefix] = inner.count(prefix) + inner.count(COUNTER + prefix)
            self._under[prefix] = (prefix, COUNTER + prefix)

    def wrote(self, ops: Sequence[Op], results: Sequence[OpResult]) -> None:
        """An applied batch: a put each, and a tombstone each delete of a key that was there
        (RocksdbMetadataStore.storeDelete writes none for an absent one)."""
        for op, res in zip(ops, results):
            if isinstance(op, Put) or (isinstance(op, Delete) and res.version is not None):
                for prefix, under in self._under.items():
                    if op.key.startswith(under):
                        self.entries[prefix] += 1


class EmulatedMetadataStore(WrappedStore):
    """Wraps ``inner`` (a native store); see the module docstring. ``memtable``: the one every
    handle on the same store shares."""

    def __init__(self, inner: MetadataStore, memtable: Memtable | None = None) -> None:
        self.inner = inner
        self.capabilities = replace(inner.capabilities, native_indexes=False, native_sequences=False)
        self.memtable = memtable if memtable is not None else Memtable()
        self._index_queries = 0
        self._seq_allocs = 0
        self._scan_reads = 0
        self._scan_keys = 0
        self._scan_entries = 0

    # -- records --

    def batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        validate_ops(ops)
        if not any(isinstance(op, (PutSequential, DeleteSequence)) for op in ops):
            out = self.inner.batch(ops)
            self.memtable.wrote(ops, out)
            return out
        for op in ops:
            if isinstance(op, PutSequential):
                validate_fields(op.fields)
        for _ in range(MAX_ATTEMPTS):
            inner_ops = self._with_counters(ops)
            self._check_before_duplicates(ops, inner_ops)
            try:
                results = self.inner.raw_batch(inner_ops)
            except BadVersion:
                if not self._counter_moved(inner_ops[len(ops):]):
                    raise  # the caller's own condition failed
                continue  # another handle moved a counter between our GET and the CAS: retry
            self._seq_allocs += sum(1 for op in ops if isinstance(op, PutSequential))
            self.memtable.wrote(inner_ops, results)
            return results[:len(ops)]
        raise BadVersion(f"gave up after {MAX_ATTEMPTS} attempts: sequence counters kept changing")

    def _check_before_duplicates(self, ops: Sequence[Op], inner_ops: Sequence[Op]) -> None:
        """Two writes of one assigned key are a ValueError, but only once the caller's conditions
        hold (the order the port's other adapters check them in)."""
        keys = [op.key for op in inner_ops if isinstance(op, (Put, Delete))]
        if len(keys) == len(set(keys)):
            return
        for key, expected in conditions(ops):
            rec = self.inner.get(key)
            actual = rec.version if rec else None
            if (actual or ABSENT) != expected:
                raise condition_error(key, expected, actual)
        raise ValueError("a batch writes one key twice (counting the keys PutSequential assigns)")

    def _counter_moved(self, counter_ops: Sequence[Op]) -> bool:
        """Whether a counter this batch CASes changed since its GET (a race, worth a retry)."""
        for op in counter_ops:
            if isinstance(op, Put) and op.expected_version is not None:
                rec = self.inner.get(op.key)
                if (rec.version if rec else ABSENT) != op.expected_version:
                    return True
        return False

    def _with_counters(self, ops: Sequence[Op]) -> builtins.list[Op]:
        """The caller's ops, each PutSequential turned into a create of its key, then per counter
        used one CAS (GET it first: 1 read each), or a delete if a DeleteSequence came last."""
        out: builtins.list[Op] = []
        version: dict[str, int] = {}  # prefix -> the counter's version (ABSENT: none)
        nxt: dict[str, int | None] = {}  # prefix -> last seq issued; None: forgotten (DeleteSequence)
        last_forgets: dict[str, bool] = {}
        forgot: set[str] = set()  # forgotten since their last PutSequential in this batch
        issued: dict[str, int] = {}  # prefix -> the highest seq this batch assigned (it outlives a forgetting)

        def counter(prefix: str) -> None:
            if prefix not in version:
                rec = self.inner.get(COUNTER + prefix)
                version[prefix] = rec.version if rec else ABSENT
                nxt[prefix] = int(rec.fields["n"]) if rec else None

        for op in ops:
            if isinstance(op, PutSequential):
                prefix = op.prefix
                counter(prefix)
                n = None if prefix in forgot else nxt[prefix]
                forgot.discard(prefix)
                if n is None:
                    # No counter (a new prefix, or one forgotten by DeleteSequence): continue
                    # after the highest key there before the batch or assigned in it, as the
                    # port promises.
                    seqs = [sequence_of(prefix, k) for k in self.inner.list_keys(prefix)]
                    n = max([q for q in seqs if q is not None] + [issued.get(prefix, 0)])
                nxt[prefix] = issued[prefix] = n + 1
                last_forgets[prefix] = False
                out.append(Put(sequential_key(prefix, n + 1), op.fields, ABSENT))
            elif isinstance(op, DeleteSequence):
                forgot.add(op.prefix)
                last_forgets[op.prefix] = True
                out.append(op)  # the wrapped store forgets its own (unused) counter too
            else:
                out.append(op)
        for prefix in {**version, **dict.fromkeys(forgot)}:
            if last_forgets.get(prefix):
                out.append(Delete(COUNTER + prefix))  # no version needed: it goes either way
            else:
                out.append(Put(COUNTER + prefix, {"n": str(nxt[prefix])}, version[prefix]))
        return out

    # -- indexes: a full listing of the prefix, then a GET per child, filtered here --

    def define_index(self, spec: IndexSpec) -> None:
        self.inner.define_index(spec)
        self.memtable.watch(spec.prefix, self.inner)

    def indexes(self) -> dict[str, IndexSpec]:
        return self.inner.indexes()

    def _scan(self, index: str, minimum: _Bound, maximum: _Bound, inclusive: tuple[bool, bool],
              prefix: Sequence[str | int] | None, limit: int | None,
              reverse: bool) -> builtins.list[tuple[IndexEntry, Record]]:
        specs = self.inner.indexes()
        if index not in specs:
            return [(e, Record(e.key, {}, 0)) for e in self.inner.query(index)]  # raises MetadataError
        spec = specs[index]
        bounds = Bounds.of(spec, minimum, maximum, inclusive, prefix)
        self._index_queries += 1
        rows: builtins.list[tuple[tuple[object, ...], IndexEntry, Record]] = []
        keys = self.inner.list_keys(spec.prefix)
        # the listing iterates the prefix's counters too (kept apart here, under COUNTER), and
        # passes every other entry the memtable holds there
        returned = len(keys) + self.inner.count(COUNTER + spec.prefix)
        self._scan_keys += returned
        self.memtable.watch(spec.prefix, self.inner)
        self._scan_entries += max(0, self.memtable.entries[spec.prefix] - returned)
        for key in keys:
            if key.startswith(RESERVED_PREFIX):
                continue
            rec = self.inner.get(key)  # serially, one GET per child (AbstractMetadataStore L624-660)
            self._scan_reads += 1
            if rec is None:
                continue
            entry = spec.entry(key, rec.fields)
            if entry is None or not bounds.contains(*entry):
                continue
            member, score = entry
            rows.append(((score, member) if spec.numeric else (member,), spec.decode(member, score), rec))
        rows.sort(key=lambda r: r[0])  # type: ignore[arg-type, return-value]
        if reverse:
            rows.reverse()
        return [(e, r) for _, e, r in rows[:limit]]

    def query(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
              inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
              limit: int | None = None, reverse: bool = False) -> builtins.list[IndexEntry]:
        return [e for e, _ in self._scan(index, minimum, maximum, inclusive, prefix, limit, reverse)]

    def query_records(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
                      inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
                      limit: int | None = None, reverse: bool = False) -> builtins.list[Record]:
        return [r for _, r in self._scan(index, minimum, maximum, inclusive, prefix, limit, reverse)]

    # -- watches: the store's own notifications --

    def watch(self, key: str, callback: Callback) -> Watch:
        return self.inner.watch(key, callback)

    def watch_range(self, index: str, callback: Callback, minimum: _Bound = None, maximum: _Bound = None, *,
                    inclusive: tuple[bool, bool] = (True, True),
                    prefix: Sequence[str | int] | None = None) -> Watch:
        return self.inner.watch_range(index, callback, minimum, maximum, inclusive=inclusive, prefix=prefix)

    def set_notifier(self, notifier: Callable[[Callable[[], None]], None] | None) -> None:
        self.inner.set_notifier(notifier)

    def poll_watches(self, timeout_s: float = 0.0) -> int:
        return self.inner.poll_watches(timeout_s)

    # -- lifecycle --

    def stats(self) -> dict[str, int]:
        out = self.inner.stats()
        out["index_queries"] = self._index_queries
        out["seq_allocs"] = self._seq_allocs
        out["reads"] -= self._scan_reads  # the inner store counted them as plain gets
        out["scan_reads"] = self._scan_reads
        out["scan_keys"] = self._scan_keys
        out["scan_entries"] = self._scan_entries
        return out

    def reopen(self) -> EmulatedMetadataStore:
        return EmulatedMetadataStore(self.inner.reopen(), self.memtable)

    def close(self) -> None:
        self.inner.close()

    def _check(self) -> None:
        """The wrapped store's check, and every counter at or past the keys it issued."""
        self.inner._check()
        for rec in self.inner.list(COUNTER):
            prefix = rec.key[len(COUNTER):]
            seqs = [sequence_of(prefix, k) for k in self.inner.list_keys(prefix)]
            assert max([s for s in seqs if s is not None], default=0) <= int(rec.fields["n"]), rec


def emulated(store: MetadataStore) -> EmulatedMetadataStore:
    """``store`` seen as Pulsar's ``AbstractMetadataStore`` fallback sees it."""
    return EmulatedMetadataStore(store)


__all__ = ["EmulatedMetadataStore", "Memtable", "emulated"]
