"""The v5 MetadataStore port: what PIP-473 needs from a metadata store, and its record types.

PIP-473 extends Pulsar's ``MetadataStore`` with three capabilities: *partition-key
co-location*, *sequential keys*, and *secondary indexes with range queries and range watches*.
This module is the port; :mod:`metadata_v5.store.memory` (sortedcontainers), :mod:`metadata_v5.store.redis`
(hashes + sorted sets + a stream) and :mod:`metadata_v5.store.degraded` (client-maintained indexes and
re-list, as on ZooKeeper) are its adapters, picked by URL in :mod:`metadata_v5.store.registry`.

Data model
----------
* A **record** is a key (a non-empty ``str``) holding a flat mapping of ``str`` field names to
  ``str`` values, plus a ``version``. A put replaces every field (no merge). Field names must be
  non-empty and must not start with ``$`` (reserved for adapters). Typed values (ints, states) are
  the caller's to encode.
* **Versions are store revisions**: every batch that changes something takes the next revision of
  the whole store (1, 2, 3, ...) and every record it writes gets that revision as its version. So a
  key's version increases monotonically across delete and re-create (no ABA), and every change
  event carries the revision of the batch that made it.
* **Partition key**: a key may carry its partition key as a hash tag, the text between the first
  ``{`` and the next ``}`` (Redis Cluster's rule), e.g. ``/txn/{7}`` and ``/txn-op/{7}/...``.
  Records with the same tag are co-located (on Redis they hash to one slot); see
  :func:`partition_key`. Adapters count batches that span more than one partition.
* Keys starting with :data:`RESERVED_PREFIX` belong to adapters and are rejected.

Secondary indexes
-----------------
An :class:`IndexSpec` is declared once (:meth:`MetadataStore.define_index`), before any record
under its ``prefix`` exists, and from then on the store maintains it atomically with every record
write. A record is in the index when its key starts with ``prefix``, every ``where`` condition
holds and every key field is present; its *sort key* is then

* ``numeric=True``: one integer field (|value| <= 2**53), ordered as a number;
* otherwise: the tuple of the key fields (``str``, or ``int`` for names in ``int_fields``), ordered
  as Python orders tuples (a shorter tuple sorts before its extensions).

Entries with equal sort keys are ordered by primary key. Index component strings must not contain
``\\x00`` or ``\\x01``.

Atomic batches
--------------
:meth:`MetadataStore.batch` applies a list of :class:`Check`, :class:`Put`, :class:`PutSequential`,
:class:`Delete` and :class:`DeleteSequence` all-or-nothing: every condition is checked first; if one
fails nothing is written (no record, no index entry, no revision, no event) and the error is
raised. The single-record methods are one-op batches.

Watches and time
----------------
Adapters never run caller code on their own threads. A change becomes a *pending event* on a
handle when the handle learns of it: in-process adapters learn during the write call that made
it (whichever handle wrote); Redis learns when :meth:`MetadataStore.poll_watches` reads the
store's change stream. Pending events are then, in order,

* handed one by one to the *notifier* if one is set (:meth:`MetadataStore.set_notifier`): the
  notifier gets a zero-argument ``deliver`` closure per event and decides when to run it (the
  engine schedules it on its scheduler after the modelled watch latency); or
* kept until :meth:`MetadataStore.poll_watches`, which runs them on the caller's thread.

Events reach a handle in revision order; within a batch in op order; for one change in watch
registration order. A cancelled watch or a closed handle turns undelivered ``deliver`` closures
into no-ops. See :class:`Capabilities` for how a degraded store differs. The adapters' shared watch
registry and event queue is :class:`metadata_v5.store.watches.WatchHub`.
"""

from __future__ import annotations

import builtins

import enum
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Final, Iterable, Mapping, NamedTuple, Sequence, Union

from engine.errors import BadVersion, KeyExists, MetadataError, NoSuchKey

__all__ = [
    "ABSENT", "RESERVED_PREFIX", "SEQ_WIDTH", "STAT_KEYS",
    "Record", "IndexSpec", "IndexEntry", "Bounds", "Check", "Put", "PutSequential", "Delete",
    "DeleteSequence", "Op", "OpResult", "ChangeKind", "WatchEvent", "Watch", "Capabilities",
    "MetadataStore", "partition_key", "sequential_key",
    "MetadataError", "BadVersion", "KeyExists", "NoSuchKey",
]

ABSENT: Final = 0
"""``expected_version=ABSENT`` means "the key must not exist" (create)."""

RESERVED_PREFIX: Final = "/__txnbench/"
"""Keys under this prefix are the adapters' own (degraded index records, sequence counters)."""

SEQ_WIDTH: Final = 20
"""Sequential keys are ``prefix + f"{seq:020d}"``: lexicographic order is numeric order."""

MAX_SCORE: Final = 2**53
_INT_OFFSET: Final = 2**63

STAT_KEYS: Final = (
    "reads",            # records fetched by get/get_many (per key asked)
    "scan_reads",       # emulated: records an index scan fetched one by one (storeGet, which
                        # Pulsar's pulsar_metadata_store_ops get counter does not count)
    "scan_keys",        # emulated: keys its scans' listings iterated (the sequence counters among them)
    "scan_entries",     # emulated: entries its listings passed without returning a key (older versions
                        # and tombstones in RocksDB's memtable)
    "lists",            # list/list_keys calls
    "listed",           # records returned by lists
    "index_queries",    # query/query_records calls (and degraded re-lists of an index)
    "batches",          # batches applied (single-record writes are one-op batches)
    "writes",           # records put or deleted by applied batches (incl. adapter records)
    "seq_allocs",       # sequential keys assigned
    "cas_ok",           # applied batches that carried a version condition
    "cas_conflict",     # batches rejected by a version condition
    "multi_partition_batches",  # applied batches whose keys span more than one partition
    "index_writes",     # index entries added or removed (native or client-maintained)
    "index_record_writes",  # degraded: client-maintained index records written/deleted
    "relists",          # degraded: range watches re-listed
    "watches",          # watches registered
    "watch_events",     # watch callbacks run
    "round_trips",      # network calls (0 for in-process stores)
)


def partition_key(key: str) -> str | None:
    """The partition key carried by ``key``: the text inside its first ``{...}`` hash tag, or
    ``None`` (Redis Cluster's rule: an empty tag ``{}`` counts as no tag)."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1:end]


def sequential_key(prefix: str, seq: int) -> str:
    """The key that sequence number ``seq`` gets under ``prefix``."""
    return f"{prefix}{seq:0{SEQ_WIDTH}d}"


def sequence_of(prefix: str, key: str) -> int | None:
    """The sequence number of ``key`` if it is a sequential key under ``prefix``, else ``None``."""
    rest = key[len(prefix):]
    if key.startswith(prefix) and len(rest) == SEQ_WIDTH and rest.isdigit():
        return int(rest)
    return None


# --- records --------------------------------------------------------------------------------


class Record(NamedTuple):
    """A stored record. ``fields`` must not be mutated (adapters hand out private copies).

    A typed named tuple rather than a frozen dataclass: every write builds one, and a v5 store
    keeps every finished txn's header for its retention (900 s), so its size is the store's
    memory per txn (64 bytes, against 112 for a dataclass instance and its ``__dict__``)."""

    key: str
    fields: Mapping[str, str]
    version: int

    @property
    def partition_key(self) -> str | None:
        return partition_key(self.key)


def _norm_where(where: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    items = where.items() if isinstance(where, Mapping) else where
    out = []
    for name, allowed in items:
        values = (allowed,) if isinstance(allowed, str) else tuple(allowed)
        out.append((str(name), tuple(sorted(values))))
    return tuple(sorted(out))


@dataclass(frozen=True)
class IndexSpec:
    """A secondary index over records whose key starts with ``prefix``.

    ``where`` (a mapping or pairs of field -> allowed value(s)) restricts it to records whose
    field has one of the allowed values, e.g. ``{"kind": "write"}`` or
    ``{"state": ("COMMITTED", "ABORTED")}``. A key field that is missing leaves the record out of
    the index; a numeric or ``int_fields`` field that is not an integer is a ``ValueError`` at
    write time (nothing is written).
    """

    name: str
    prefix: str
    fields: tuple[str, ...]
    numeric: bool = False
    int_fields: tuple[str, ...] = ()
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "int_fields", tuple(sorted(self.int_fields)))
        object.__setattr__(self, "where", _norm_where(self.where))
        if not self.name or any(c in self.name for c in "\x00\x01/{}"):
            raise ValueError(f"index name {self.name!r} must be non-empty without '/', braces or control chars")
        if not self.fields:
            raise ValueError(f"index {self.name}: needs at least one key field")
        if self.numeric and (len(self.fields) != 1 or self.int_fields):
            raise ValueError(f"index {self.name}: a numeric index has exactly one (integer) field")
        if not set(self.int_fields) <= set(self.fields):
            raise ValueError(f"index {self.name}: int_fields must be key fields")

    # -- sort keys and their encodings (shared by every adapter) --

    def sort_key(self, fields: Mapping[str, str]) -> int | tuple[str | int, ...] | None:
        """The record's sort key in this index, or ``None`` when it is not indexed (ignores the
        prefix; see :meth:`covers`)."""
        for name, allowed in self.where:
            if fields.get(name) not in allowed:
                return None
        values = []
        for name in self.fields:
            value = fields.get(name)
            if value is None:
                return None
            values.append(value)
        if self.numeric:
            return _parse_int(self, self.fields[0], values[0], MAX_SCORE)
        out: builtins.list[str | int] = []
        for name, value in zip(self.fields, values):
            if name in self.int_fields:
                out.append(_parse_int(self, name, value, _INT_OFFSET - 1))
            else:
                _check_component(self, value)
                out.append(value)
        return tuple(out)

    def covers(self, key: str) -> bool:
        return key.startswith(self.prefix)

    def entry(self, key: str, fields: Mapping[str, str]) -> tuple[str, int] | None:
        """``(member, score)`` of the record's entry, or ``None``. Numeric indexes: member = key,
        score = sort key. Lexicographic: member = encoded sort key + ``\\x00`` + key, score 0.
        (Every write computes this for every index: it is ``encode(sort_key(fields))`` without
        the intermediate tuple, with the same checks in the same order.)"""
        if not key.startswith(self.prefix):
            return None
        for name, allowed in self.where:
            if fields.get(name) not in allowed:
                return None
        values: builtins.list[str] = []
        for name in self.fields:
            value = fields.get(name)
            if value is None:
                return None
            values.append(value)
        if self.numeric:
            return key, _parse_int(self, self.fields[0], values[0], MAX_SCORE)
        parts = []
        for name, value in zip(self.fields, values):
            if name in self.int_fields:
                parts.append(f"{_parse_int(self, name, value, _INT_OFFSET - 1) + _INT_OFFSET:020d}")
            else:
                _check_component(self, value)
                parts.append(value)
        return "\x01".join(parts) + "\x00" + key, 0

    def encode(self, sort_key: Sequence[str | int]) -> str:
        """Order-preserving string form of a (possibly partial, leading) lexicographic sort key."""
        parts = []
        for name, value in zip(self.fields, sort_key):
            if name in self.int_fields:
                if not isinstance(value, int):
                    raise ValueError(f"index {self.name}: {name} is an integer component, got {value!r}")
                parts.append(f"{value + _INT_OFFSET:020d}")
            else:
                _check_component(self, str(value))
                parts.append(str(value))
        if len(sort_key) > len(self.fields):
            raise ValueError(f"index {self.name}: sort key {tuple(sort_key)!r} has more than {len(self.fields)} parts")
        return "\x01".join(parts)

    def decode(self, member: str, score: int) -> IndexEntry:
        if self.numeric:
            return IndexEntry(self.name, score, member)
        encoded, _, key = member.partition("\x00")
        parts: builtins.list[str | int] = []
        for name, text in zip(self.fields, encoded.split("\x01")):
            parts.append(int(text) - _INT_OFFSET if name in self.int_fields else text)
        return IndexEntry(self.name, tuple(parts), key)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "prefix": self.prefix, "fields": list(self.fields),
                           "numeric": self.numeric, "int_fields": list(self.int_fields),
                           "where": [[n, list(v)] for n, v in self.where]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> IndexSpec:
        d = json.loads(text)
        return cls(d["name"], d["prefix"], tuple(d["fields"]), d["numeric"], tuple(d["int_fields"]),
                   tuple((n, tuple(v)) for n, v in d["where"]))


def _parse_int(spec: IndexSpec, name: str, value: str, bound: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"index {spec.name}: field {name}={value!r} is not an integer") from None
    if abs(number) > bound:
        raise ValueError(f"index {spec.name}: field {name}={number} is out of range (|x| <= {bound})")
    return number


def _check_component(spec: IndexSpec, value: str) -> None:
    if "\x00" in value or "\x01" in value:
        raise ValueError(f"index {spec.name}: component {value!r} contains \\x00 or \\x01")


@dataclass(frozen=True)
class IndexEntry:
    """One index entry: ``sort_key`` (an ``int`` for numeric indexes, else a tuple) -> ``key``."""

    index: str
    sort_key: int | tuple[str | int, ...]
    key: str


_Bound = Union[int, Sequence[Union[str, int]], None]


@dataclass(frozen=True)
class Bounds:
    """A range of one index in adapter form. Numeric: closed ``[lo, hi]`` on the score (``None``
    = unbounded). Lexicographic: ``lo <= member < hi`` on encoded members (``None`` = unbounded).
    Build it with :meth:`of`."""

    numeric: bool
    lo: int | str | None
    hi: int | str | None

    @classmethod
    def of(cls, spec: IndexSpec, minimum: _Bound = None, maximum: _Bound = None,
           inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None) -> Bounds:
        lo_inc, hi_inc = inclusive
        if spec.numeric:
            if prefix is not None:
                raise ValueError(f"index {spec.name}: prefix= needs a lexicographic index")
            lo = hi = None
            if minimum is not None:
                if not isinstance(minimum, int):
                    raise ValueError(f"index {spec.name}: numeric bound must be an int, got {minimum!r}")
                lo = minimum if lo_inc else minimum + 1
            if maximum is not None:
                if not isinstance(maximum, int):
                    raise ValueError(f"index {spec.name}: numeric bound must be an int, got {maximum!r}")
                hi = maximum if hi_inc else maximum - 1
            return cls(True, lo, hi)
        slo: str | None = None
        shi: str | None = None
        if prefix is not None:
            if minimum is not None or maximum is not None:
                raise ValueError("give either prefix= or minimum/maximum, not both")
            if len(prefix) == 0:
                return cls(False, None, None)
            enc = spec.encode(tuple(prefix))
            return cls(False, enc + "\x00", enc + "\x02")
        if minimum is not None:
            slo = spec.encode(_as_tuple(minimum)) + ("\x00" if lo_inc else "\x01")
        if maximum is not None:
            shi = spec.encode(_as_tuple(maximum)) + ("\x01" if hi_inc else "\x00")
        return cls(False, slo, shi)

    def contains(self, member: str, score: int) -> bool:
        if self.numeric:
            return (self.lo is None or score >= self.lo) and (self.hi is None or score <= self.hi)  # type: ignore[operator]
        return (self.lo is None or member >= self.lo) and (self.hi is None or member < self.hi)  # type: ignore[operator]

    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and (
            self.lo > self.hi if self.numeric else self.lo >= self.hi)  # type: ignore[operator]


def _as_tuple(bound: Any) -> tuple[str | int, ...]:
    if isinstance(bound, (str, int)):
        return (bound,)
    return tuple(bound)


# --- batch operations -----------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """Condition only: the key's version is ``version`` (``ABSENT``: the key does not exist)."""

    key: str
    version: int


# The three ops of every transactional write and its collection fill __dict__ directly (see
# Record.__init__): they stay frozen, without the generated __init__'s setattr per field.


@dataclass(frozen=True, init=False)
class Put:
    """Create or replace ``key`` with ``fields``; with ``expected_version`` a compare-and-set
    (``ABSENT`` = create only)."""

    key: str
    fields: Mapping[str, str]
    expected_version: int | None = None

    def __init__(self, key: str, fields: Mapping[str, str], expected_version: int | None = None) -> None:
        d = self.__dict__
        d["key"], d["fields"], d["expected_version"] = key, fields, expected_version


@dataclass(frozen=True, init=False)
class PutSequential:
    """Create ``prefix + seq`` (see :func:`sequential_key`) with the prefix's next sequence number:
    1, 2, ... strictly increasing per prefix, never reused while the prefix's counter exists. With
    no counter (never used, or dropped by :class:`DeleteSequence`) numbering continues after the
    highest sequential key under the prefix (1 when there is none). A sequential prefix should hold
    only keys made by ``PutSequential``."""

    prefix: str
    fields: Mapping[str, str]

    def __init__(self, prefix: str, fields: Mapping[str, str]) -> None:
        d = self.__dict__
        d["prefix"], d["fields"] = prefix, fields


@dataclass(frozen=True, init=False)
class Delete:
    """Delete ``key``. Without ``expected_version`` deleting an absent key is a no-op."""

    key: str
    expected_version: int | None = None

    def __init__(self, key: str, expected_version: int | None = None) -> None:
        d = self.__dict__
        d["key"], d["expected_version"] = key, expected_version


@dataclass(frozen=True)
class DeleteSequence:
    """Forget ``prefix``'s sequence counter (GC of a finished txn's op prefix, in the batch that
    deletes its last records); a later :class:`PutSequential` continues after the highest key
    still under the prefix, as of the state before its batch, or after the highest this batch
    has already assigned there, whichever is higher (a key assigned before the forgetting stays,
    and must not be assigned again)."""

    prefix: str


Op = Union[Check, Put, PutSequential, Delete, DeleteSequence]


@dataclass(frozen=True, init=False)
class OpResult:
    """Per op of an applied batch: the key (the assigned one for :class:`PutSequential`) and the
    version the record now has (puts), had (deletes; ``None`` if it was absent), or checked."""

    key: str
    version: int | None

    def __init__(self, key: str, version: int | None) -> None:
        d = self.__dict__  # one per op of every batch: see Record.__init__
        d["key"], d["version"] = key, version


class ChangeKind(str, enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True)
class WatchEvent:
    """A change seen by a watch. ``version`` is the revision of the change (``None`` only for a
    deletion noticed by a degraded re-list). ``fields`` is the new content for puts. Range-watch
    events also carry the ``index`` and the entry's ``sort_key``."""

    key: str
    kind: ChangeKind
    version: int | None
    fields: Mapping[str, str] | None = None
    index: str | None = None
    sort_key: int | tuple[str | int, ...] | None = None


Callback = Callable[[WatchEvent], None]


class Watch:
    """A registered watch. ``initial`` is the snapshot taken atomically with the registration: the
    record (or ``None``) for a point watch, the index entries in range for a range watch. Events
    are exactly the changes after that snapshot."""

    def __init__(self, callback: Callback, initial: Any, revision: int,
                 key: str | None = None, spec: IndexSpec | None = None, bounds: Bounds | None = None) -> None:
        self.callback = callback
        self.initial = initial
        self.revision = revision
        self.key = key
        self.spec = spec
        self.bounds = bounds
        self.active = True
        self._on_cancel: Callable[[Watch], None] | None = None  # set by the hub holding it

    def cancel(self) -> None:
        """Stop the watch; its undelivered events are dropped. Idempotent."""
        self.active = False
        on_cancel, self._on_cancel = self._on_cancel, None
        if on_cancel is not None:
            on_cancel(self)


@dataclass(frozen=True)
class Capabilities:
    """What the backend does natively. ``range_watch_events=False``: range watches only learn of
    changes when :meth:`MetadataStore.relist` runs, and report the net difference since the last
    re-list (intermediate states are not seen; a deleted entry's event has ``version=None``).
    ``native_indexes``/``native_sequences``: index entries and sequence counters cost no extra
    record writes."""

    native_indexes: bool = True
    native_sequences: bool = True
    range_watch_events: bool = True
    in_process: bool = True


# --- the port -------------------------------------------------------------------------------


class MetadataStore(ABC):
    """A client handle on a metadata store (see the module docstring for the data model).

    Handles are cheap; the data they reach is durable: :meth:`reopen` gives a fresh handle on the
    same data (a broker restarting after a crash). Errors: :class:`BadVersion` / :class:`KeyExists`
    / :class:`NoSuchKey` for failed conditions, ``BackendUnavailable`` when a real backend cannot be
    reached, :class:`MetadataError` for anything else the store refuses (closed handle, a
    change stream that lost events); ``ValueError`` for malformed arguments (a caller bug).
    """

    capabilities: Capabilities = Capabilities()

    # -- records --

    @abstractmethod
    def get(self, key: str) -> Record | None:
        """The record at ``key`` or ``None``. O(1); one round trip."""

    @abstractmethod
    def get_many(self, keys: Sequence[str]) -> builtins.list[Record | None]:
        """Records for ``keys``, in the same order (``None`` where absent); one round trip, one
        consistent snapshot."""

    @abstractmethod
    def list(self, prefix: str, *, limit: int | None = None) -> builtins.list[Record]:
        """Records whose key starts with ``prefix``, ascending by key (so sequential keys come in
        sequence order), at most ``limit``. One round trip, one consistent snapshot."""

    def list_keys(self, prefix: str, *, limit: int | None = None) -> builtins.list[str]:
        """Keys of :meth:`list`."""
        return [r.key for r in self.list(prefix, limit=limit)]

    def count(self, prefix: str) -> int:
        """How many keys :meth:`list` would return for ``prefix``; O(log n) where the store keeps
        its keys sorted. A size the emulated store bills a listing by (``scan_keys``), not an
        operation the stats count."""
        return len(self.list_keys(prefix))

    @abstractmethod
    def batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        """Apply ``ops`` all-or-nothing, in order; one result per op. Every condition
        (:class:`Check`, ``expected_version``) is evaluated against the state before the batch;
        the first failing one raises (:class:`NoSuchKey` if the key is absent but a version was
        expected, :class:`KeyExists` if ``ABSENT`` was expected, else :class:`BadVersion`) and
        nothing is written. At most one write op per key, counting the keys ``PutSequential``
        assigns (``ValueError``, nothing written). A batch that changes anything takes
        one new revision. One round trip on Redis."""

    def batches(self, groups: Sequence[Sequence[Op]]) -> builtins.list[builtins.list[OpResult]]:
        """Independent batches issued at once (what Pulsar does with several futures it waits for
        together): each applies all-or-nothing as by :meth:`batch`, in any order relative to the
        others, and every one is attempted; the first failure (in ``groups`` order) is raised
        after all were tried. One round trip on Redis (a pipeline), one result list per batch."""
        return each_batch(groups, lambda _i, ops: self.batch(ops))

    def batch_then_query_records(self, ops: Sequence[Op], index: str, *, prefix: Sequence[str | int] | None = None
                                 ) -> tuple[builtins.list[OpResult], builtins.list[Record]]:
        """:meth:`batch`, then :meth:`query_records` of ``index`` over ``prefix`` reading the state
        the batch left (a CAS and the scan chained to it); a refused batch raises and nothing is
        listed. One round trip on Redis (a pipeline the server runs in order)."""
        results = self.batch(ops)
        return results, self.query_records(index, prefix=prefix)

    def put(self, key: str, fields: Mapping[str, str], expected_version: int | None = None) -> Record:
        """Create or replace ``key`` (compare-and-set with ``expected_version``)."""
        result = self.batch([Put(key, fields, expected_version)])[0]
        assert result.version is not None
        return Record(key, dict(fields), result.version)

    def create(self, key: str, fields: Mapping[str, str]) -> Record:
        """Create ``key``; :class:`KeyExists` if it exists."""
        return self.put(key, fields, ABSENT)

    def put_sequential(self, prefix: str, fields: Mapping[str, str]) -> Record:
        """Create the next sequential key under ``prefix`` (see :class:`PutSequential`)."""
        result = self.batch([PutSequential(prefix, fields)])[0]
        assert result.version is not None
        return Record(result.key, dict(fields), result.version)

    def delete(self, key: str, expected_version: int | None = None) -> bool:
        """Delete ``key``; ``True`` if it existed. Idempotent without ``expected_version``."""
        return self.batch([Delete(key, expected_version)])[0].version is not None

    # -- indexes --

    @abstractmethod
    def define_index(self, spec: IndexSpec) -> None:
        """Declare ``spec`` (durably: every handle on the data sees it). Idempotent for an equal
        spec; ``ConfigError`` for a different spec under the same name, or for a new index whose
        prefix already holds records (indexes are schema, declared before data)."""

    def define_indexes(self, specs: Sequence[IndexSpec]) -> None:
        """:meth:`define_index` for each of ``specs`` in order (a remote store does it in one
        round trip)."""
        for spec in specs:
            self.define_index(spec)

    @abstractmethod
    def indexes(self) -> dict[str, IndexSpec]:
        """The declared indexes by name."""

    @abstractmethod
    def query(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
              inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
              limit: int | None = None, reverse: bool = False) -> builtins.list[IndexEntry]:
        """Entries of ``index`` in a range, like ``SortedList.irange``: sort keys from ``minimum``
        to ``maximum`` (``None``: unbounded), bounds inclusive per ``inclusive``; for a
        lexicographic index bounds are (partial) tuples ordered as Python tuples, and
        ``prefix=(a, b)`` selects every sort key starting with ``a, b``. Ascending by (sort key,
        primary key), descending with ``reverse``; the first ``limit`` of that order. One round
        trip. ``MetadataError`` for an unknown index."""

    @abstractmethod
    def query_records(self, index: str, minimum: _Bound = None, maximum: _Bound = None, *,
                      inclusive: tuple[bool, bool] = (True, True), prefix: Sequence[str | int] | None = None,
                      limit: int | None = None, reverse: bool = False) -> builtins.list[Record]:
        """The records of :meth:`query`'s entries, in the same order, from one snapshot."""

    # -- watches --

    @abstractmethod
    def watch(self, key: str, callback: Callback) -> Watch:
        """Point watch: ``callback`` gets every put and delete of ``key`` after the snapshot in
        ``Watch.initial`` (the current record or ``None``), taken atomically with registration."""

    @abstractmethod
    def watch_range(self, index: str, callback: Callback, minimum: _Bound = None, maximum: _Bound = None, *,
                    inclusive: tuple[bool, bool] = (True, True),
                    prefix: Sequence[str | int] | None = None) -> Watch:
        """Range watch on ``index`` (bounds as in :meth:`query`). ``Watch.initial`` is the list of
        entries in range; then per record change: ``DELETE`` for an entry that leaves the range or
        the index (or is replaced by a different entry), ``PUT`` for every write of an entry in
        range (a re-put of an unchanged entry fires again). See :class:`Capabilities` for degraded
        stores."""

    @abstractmethod
    def raw_batch(self, ops: Sequence[Op]) -> builtins.list[OpResult]:
        """:meth:`batch` that also writes keys under :data:`RESERVED_PREFIX`: what a wrapper store
        (:mod:`.emulated`, :mod:`.degraded`) keeps its own counters and index records with, in the
        same atomic batch as the caller's records. Never for callers outside the adapters."""

    def attach(self, call_later: Callable[[int, Callable[[], None]], object]) -> None:
        """Give the handle its caller's timer (``call_later(delay_us, fn)``, the engine's scheduler),
        so that the store itself keeps its watches fed: a store that learns of changes by reading
        (Redis) reads its change stream once after each burst of writes; one whose range watches
        learn only at :meth:`relist` (degraded) re-lists on a period. Callers then never branch on
        :attr:`capabilities` to drive watches. In-process native stores need nothing: a no-op."""

    @abstractmethod
    def set_notifier(self, notifier: Callable[[Callable[[], None]], None] | None) -> None:
        """Hand pending events to ``notifier`` (one zero-arg, one-shot ``deliver`` closure per
        event, in order, exactly once each; already pending events are handed over at once). ``None``
        goes back to :meth:`poll_watches`. The notifier is always called on a thread of the
        caller's: during a write (in-process) or during :meth:`poll_watches` (Redis)."""

    @abstractmethod
    def poll_watches(self, timeout_s: float = 0.0) -> int:
        """Learn of new changes (Redis: read the change stream, waiting up to ``timeout_s`` when
        nothing is pending) and run the pending events' callbacks (or, with a notifier, hand them
        over). Returns the number of callbacks run."""

    def relist(self) -> int:
        """Re-list every range watch and raise events for the differences (degraded stores; call
        it on a schedule). Native stores: a no-op returning 0. Returns the events raised."""
        return 0

    # -- lifecycle and counters --

    @abstractmethod
    def stats(self) -> dict[str, int]:
        """This handle's counters (every name in :data:`STAT_KEYS`)."""

    @abstractmethod
    def reopen(self) -> MetadataStore:
        """A new handle on the same durable data (works on a closed handle)."""

    @abstractmethod
    def close(self) -> None:
        """Drop the handle: its watches die, pending events are discarded. Idempotent."""

    @abstractmethod
    def _check(self) -> None:
        """Assert internal consistency (index entries <-> records). For tests."""

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- shared machinery for adapters ----------------------------------------------------------


def validate_key(key: str, what: str = "key") -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"{what} must be a non-empty str, got {key!r}")
    if "\x00" in key or "\x01" in key:
        raise ValueError(f"{what} {key!r} contains \\x00 or \\x01")


def validate_user_key(key: str, what: str = "key") -> None:
    validate_key(key, what)
    if key.startswith(RESERVED_PREFIX):
        raise ValueError(f"{what} {key!r} is under the reserved prefix {RESERVED_PREFIX}")


def validate_fields(fields: Mapping[str, str]) -> dict[str, str]:
    """``fields`` checked, as a private copy."""
    check_fields(fields)
    return dict(fields)


def check_fields(fields: Mapping[str, str]) -> None:
    for name, value in fields.items():
        if isinstance(value, str) and isinstance(name, str) and name and name[0] != "$":
            continue  # one test for a good field: every write checks each of its fields
        if not isinstance(name, str) or not name or name.startswith("$"):
            raise ValueError(f"field name {name!r} must be a non-empty str not starting with '$'")
        raise ValueError(f"field {name}={value!r} must be a str")


def validate_ops(ops: Sequence[Op], user: bool = True) -> None:
    """Argument checks shared by adapters (before anything is sent or written)."""
    check = validate_user_key if user else validate_key
    written: set[str] = set()
    for op in ops:
        if isinstance(op, PutSequential):  # first: most writes are op records
            check(op.prefix, "prefix")
            check_fields(op.fields)
        elif isinstance(op, (Put, Delete, Check)):
            check(op.key)
            version = op.version if isinstance(op, Check) else op.expected_version
            if version is not None and (not isinstance(version, int) or version < 0):
                raise ValueError(f"version for {op.key!r} must be an int >= 0, got {version!r}")
            if not isinstance(op, Check):
                if op.key in written:
                    raise ValueError(f"batch writes {op.key!r} twice")
                written.add(op.key)
            if isinstance(op, Put):
                check_fields(op.fields)
        elif isinstance(op, DeleteSequence):
            check(op.prefix, "prefix")
        else:
            raise ValueError(f"not a batch op: {op!r}")


def each_batch(groups: Sequence[Sequence[Op]],
               settle: Callable[[int, Sequence[Op]], builtins.list[OpResult]]) -> builtins.list[builtins.list[OpResult]]:
    """:meth:`MetadataStore.batches`' rule for every adapter: ``settle(i, ops)`` each group in
    order, then raise the first refusal (every group was tried)."""
    out: builtins.list[builtins.list[OpResult]] = []
    failed: Exception | None = None
    for i, ops in enumerate(groups):
        try:
            out.append(settle(i, ops))
        except (MetadataError, ValueError) as e:
            failed = failed or e
            out.append([])
    if failed is not None:
        raise failed
    return out


def condition_error(key: str, expected: int, actual: int | None) -> MetadataError:
    """The error for a failed version condition (one rule for every adapter)."""
    if expected == ABSENT:
        return KeyExists(f"{key}: exists (version {actual}), expected absent")
    if actual is None:
        return NoSuchKey(f"{key}: absent, expected version {expected}")
    return BadVersion(f"{key}: version {actual}, expected {expected}")


def conditions(ops: Sequence[Op]) -> builtins.list[tuple[str, int]]:
    out = []
    for op in ops:
        if isinstance(op, Check):
            out.append((op.key, op.version))
        elif isinstance(op, (Put, Delete)) and op.expected_version is not None:
            out.append((op.key, op.expected_version))
    return out


def new_counters() -> dict[str, int]:
    return {k: 0 for k in STAT_KEYS}


def count_partitions(keys: Iterable[str]) -> int:
    return len({partition_key(k) or k for k in keys})
