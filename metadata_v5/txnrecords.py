"""The port the v5 engine codes against for its records on a metadata store (PIP-473's records
and those of the variants); :mod:`metadata_v5.store.records` binds it to a
:class:`~metadata_v5.store.port.MetadataStore` and holds the one key layout (its module docstring).

The records, by role (a txn's own records share its partition key):

* the **header** — ``{state, timeout_us, created_us[, finalized_us]}``; its CAS is the commit
  point. Indexes: ``txn-by-deadline`` (OPEN headers by ``timeout_us``) and
  ``txn-by-final-state`` (final headers by ``finalized_us``).
* **op records** — one per transactional write or ack ``{kind, segment, position[,
  subscription, ack_kind]}``, under a server-assigned sequence. Indexes: ``writes-by-segment``
  and ``acks-by-segment-subscription`` (and 5.0.1's ``ops-by-txn``).
* **event records** — only in the ``state-events`` variant (an ablation, in no release): the
  coordinator writes one per participant after the CAS, carrying the decided state; participants
  watch their own (``events-by-participant``) instead of the headers. The shipped variant's
  participant event sequences are its own records (``/txn-pevents/``).
* **aborted ranges** — unless the GC mode is ``force`` (``V5Options.keeps_abort_ranges``): the
  positions of an aborted txn's entries on a segment, kept until that segment's data is trimmed
  past them, so a reader of old data still skips them after the header is collected.

:class:`TxnRecords` is the port the engine codes against; :mod:`metadata_v5.store.records` binds
it to a :class:`~metadata_v5.store.port.MetadataStore`. Every method is one store operation (one
round trip on a remote store) unless its docstring says otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Callable, NamedTuple

from engine.capacity import EVENT_THREAD, IO_THREAD
from engine.ids import TxnID
from engine.ports import AckKind, TxnStatus
from engine.records import Position


# Typed named tuples, not frozen dataclasses: a replay builds several per transactional write
# (see engine.records for the same choice), and a frozen dataclass's __init__ costs one
# object.__setattr__ call per field.


class Header(NamedTuple):
    txn: TxnID
    state: TxnStatus  # OPEN, COMMITTED or ABORTED (v5 has no COMMITTING/ABORTING)
    timeout_us: int
    created_us: int
    finalized_us: int | None
    version: int


class Op(NamedTuple):
    kind: str  # "write" | "ack"
    segment: str
    position: Position
    subscription: str | None = None
    ack_kind: AckKind | None = None


class OpRecord(NamedTuple):
    txn: TxnID
    seq: int
    op: Op
    key: str = ""  # where the store keeps it ("" for a record not read from or written to a store)


class AbortedRange(NamedTuple):
    txn: TxnID
    first: Position
    last: Position


HeaderListener = Callable[[Header | None], None]  # None: the header was deleted
SweepCursor = tuple[int, str]  # (sort score, key) of the last index entry a sweep's page returned
EventListener = Callable[[TxnID, TxnStatus], None]


# The broker thread a store call runs on. RocksdbMetadataStore runs storePut/storeDelete
# synchronously on the caller's thread, so one thread's writes are serial: the coordinator's
# requests and the publish/ack path run on the client connection's Netty IO thread (ServerCnx),
# a participant's reconcile and state tail on the store's notification thread
# (metadata-store-event, where subscribeSequence's listeners run), beside it. Both serve in
# arrival order (engine.capacity.IN_ORDER): plain publishes and deliveries wait for the IO thread
# too, and a participant's reconcile waits for every one notified before it.
IO = IO_THREAD
EVENT = EVENT_THREAD
# A participant's recovery starts where the topic or subscription is opened: MetadataTransactionBuffer's
# constructor (L147-154) and MetadataPendingAckStore.replayAsync (L102-118, from PendingAckHandleImpl's
# initPendingAckStore), run in the managed ledger's open callbacks, not on the client connection's
# IO thread (inferred from BrokerService's topic loading; not measured)
LOAD = "load"
# A publish's add completes on its managed ledger's executor (OpAddEntry L244: ml.getExecutor(), the
# BookKeeper client's worker chosen by the ledger's name, ManagedLedgerImpl L405: one of
# bookkeeperClientNumWorkerThreads = the cores), where PersistentTopic.addComplete runs the
# watermark CAS a plain publish chains on a segment's idle state tail, before the receipt. One
# instance here for those threads (2 on these machines): the model does not hash ledgers to them
ML = "ml"
# The coordinator's sweeps list the headers on their own executor (TransactionCoordinatorV5's
# sweepExecutor: sweepTimeouts, sweepGc), beside the IO thread
SWEEP = "sweep"


class TxnRecords(ABC):
    """The v5 schema over a metadata store. Watch callbacks are delivered through the
    notifier given at construction (so the engine decides when, in virtual or wall time)."""

    def on(self, thread: str) -> AbstractContextManager[None]:
        """The calls inside run on broker thread ``thread`` (:data:`IO`, :data:`EVENT`): what the
        metered port bills them to (``metadata_v5/metered.py``); nothing here."""
        return nullcontext()

    def issued_at_once(self) -> AbstractContextManager[object]:
        """The calls inside are issued without waiting for one another (a loop of puts or deletes
        whose futures are joined after): what the metered port bills as concurrent where the store
        lets them be (``metadata_v5/metered.py``); nothing here."""
        return nullcontext()

    def busy_for(self, thread: str) -> int:
        """How long broker thread ``thread`` stays busy with the store calls already issued on
        it, in µs (what the metered port books, ``metadata_v5/metered.py``): 0 here."""
        return 0

    @property
    def listeners(self) -> int:
        """The watches registered on the store through this handle (each a listener the store
        runs on every notification: ``AbstractMetadataStore.subscribeSequence`` L832-836)."""
        return 0

    def put_off(self, thread: str, call_later: Callable[..., object], fn: Callable[..., None], *args: object) -> bool:
        """Whether ``fn(*args)`` had to wait for broker thread ``thread``: if it is busy, call it
        again once it is free (and True: the caller returns), else False (the caller runs now)."""
        wait = self.busy_for(thread)
        if wait:
            call_later(wait, fn, *args)
        return bool(wait)

    # -- headers ------------------------------------------------------------------------------

    @abstractmethod
    def next_txn_seq(self, tc_id: int) -> int:
        """A new sequence number for coordinator ``tc_id`` (strictly increasing, durable)."""

    @abstractmethod
    def create_header(self, txn: TxnID, timeout_us: int, created_us: int) -> Header:
        """Create ``/txn/<txn>`` OPEN and index it by deadline, atomically."""

    @abstractmethod
    def get_header(self, txn: TxnID) -> Header | None: ...

    @abstractmethod
    def finalize(self, header: Header, state: TxnStatus, finalized_us: int) -> Header | None:
        """CAS the header from OPEN (at ``header.version``) to ``state``, set ``finalized_us``,
        move it from the deadline index to the final-state index — one atomic step. Returns
        the new header, or None if the version no longer matches (a concurrent end)."""

    @abstractmethod
    def delete_header(self, txn: TxnID, keep_sequence: bool = False) -> None:
        """Delete the header and its index entries (idempotent), and forget its op records'
        sequence unless ``keep_sequence`` (5.0.1's ``TxnMetadataStore.deleteHeader`` L98-100
        deletes the header alone: on a store without native sequences the counter stays)."""

    @abstractmethod
    def expired(self, now_us: int, limit: int, after: SweepCursor | None = None) -> tuple[list[TxnID], SweepCursor | None]:
        """One page of the OPEN txns whose deadline is ``<= now_us``, earliest first: at most
        ``limit``, after ``after`` (the cursor the previous page returned). Returns the page and
        the cursor of the next one, ``None`` after the last (one index range query, more only
        when a page's worth of entries share a deadline)."""

    @abstractmethod
    def finalized_before(self, before_us: int, limit: int,
                         after: SweepCursor | None = None) -> tuple[list[TxnID], SweepCursor | None]:
        """One page of the final txns finalized at or before ``before_us`` (both states), as
        :meth:`expired` pages."""

    @abstractmethod
    def count_headers(self) -> int: ...

    @abstractmethod
    def count_finished(self) -> int:
        """Headers in a final state (what GC has yet to collect)."""

    # -- op records ---------------------------------------------------------------------------

    @abstractmethod
    def add_op(self, txn: TxnID, op: Op) -> OpRecord:
        """Append a sequential op record with its index entry, atomically."""

    @abstractmethod
    def ops_of_txn(self, txn: TxnID) -> list[OpRecord]:
        """Every op record of ``txn`` in seq order (one partition: a prefix list)."""

    @abstractmethod
    def writes_on(self, segment: str) -> list[OpRecord]:
        """Write op records on ``segment`` (index ``writes-by-segment``), by (txn, seq)."""

    @abstractmethod
    def acks_on(self, segment: str, subscription: str) -> list[OpRecord]:
        """Ack op records on ``(segment, subscription)`` (index ``acks-by-segment-subscription``)."""

    @abstractmethod
    def delete_ops(self, records: list[OpRecord]) -> None:
        """Delete these op records and their index entries, atomically (one batch)."""

    @abstractmethod
    def count_ops(self) -> int:
        """Outstanding op records (the PIP's GC-backlog gauge)."""

    # -- watches ------------------------------------------------------------------------------

    @abstractmethod
    def watch_header(self, txn: TxnID, owner: object, listener: HeaderListener) -> None:
        """Point watch on ``/txn/<txn>``: ``listener(header or None)`` after each change.
        One watch per (txn, owner); watching again replaces the listener."""

    @abstractmethod
    def unwatch_header(self, txn: TxnID, owner: object) -> None: ...

    # -- state-events variant -----------------------------------------------------------------

    @abstractmethod
    def put_events(self, txn: TxnID, state: TxnStatus, participants: list[tuple[str, str | None]]) -> None:
        """Write one event record per (segment, subscription-or-None), as one batch."""

    @abstractmethod
    def watch_events(self, segment: str, subscription: str | None, owner: object, listener: EventListener) -> None:
        """Range watch on the events of one participant."""

    @abstractmethod
    def events_for(self, segment: str, subscription: str | None) -> list[tuple[TxnID, TxnStatus]]:
        """Current events of one participant (recovery)."""

    @abstractmethod
    def delete_event(self, segment: str, subscription: str | None, txn: TxnID) -> None: ...

    # -- aborted ranges (GC mode not force) --------------------------------------------------

    @abstractmethod
    def put_aborted(self, segment: str, ranges: list[AbortedRange]) -> None: ...

    @abstractmethod
    def aborted_on(self, segment: str) -> list[AbortedRange]: ...

    @abstractmethod
    def delete_aborted(self, segment: str, txns: list[TxnID]) -> None: ...

    # -- the shipped design (Pulsar 5.0.1's TxnMetadataStore) ------------------------------------

    @abstractmethod
    def next_txn_seq_each(self, tc_id: int) -> int:
        """A new sequence number for coordinator ``tc_id`` by one GET and one CAS on its counter
        per id (``TxnMetadataStore.nextTxnSequence`` L569-585; retried on BadVersion)."""

    @abstractmethod
    def ops_by_txn(self, txn: TxnID) -> list[OpRecord]:
        """Every op record of ``txn`` by an index scan (``listOpsByTxn``, TransactionCoordinatorV5
        L477): one scan; on an emulated store, a GET of every op record under the prefix."""

    def finalize_then_list_ops(self, header: Header, state: TxnStatus,
                               finalized_us: int) -> tuple[Header | None, list[OpRecord]]:
        """:meth:`finalize`, then, if it applied, :meth:`ops_by_txn` reading the state it left:
        END_TXN's CAS and the ``listOpsByTxn`` chained to it on the same thread
        (``TransactionCoordinatorV5`` L456, L477). ``(None, [])`` if the CAS lost. A store that
        pipelines sends both in one round trip."""
        new = self.finalize(header, state, finalized_us)
        return new, (self.ops_by_txn(header.txn) if new is not None else [])

    @abstractmethod
    def writes_scan(self, segment: str, txn: TxnID | None = None) -> list[OpRecord]:
        """:meth:`writes_on` as the shipped design issues it: one scan of ``writes-by-segment``
        over all the segment's write ops (``TxnMetadataStore`` L154-159, L290-317), noting its
        serial GETs in ``last_scan_gets``; with ``txn``, only that txn's records are returned
        (filtered on the client, as 5.0.1 does)."""

    @abstractmethod
    def acks_scan(self, segment: str, subscription: str, txn: TxnID | None = None) -> list[OpRecord]:
        """:meth:`acks_on` as one scan of ``acks-by-segment-subscription`` (L221-222); ``txn`` as
        in :meth:`writes_scan`."""

    @abstractmethod
    def aborted_scan(self, segment: str) -> list[AbortedRange]:
        """:meth:`aborted_on` as one scan of the segment's aborted records (recovery, pruning)."""

    @abstractmethod
    def put_participant_events(self, participants: list[tuple[str, str | None]], txn: TxnID,
                               state: TxnStatus) -> None:
        """Append one record to each participant's event sequence (``/txn/segment-events/<seg>-<seq>``
        or ``/txn/subscription-events/<seg>:<sub>-<seq>``, fanOutEvents L475-508), one store batch
        per participant, issued at once. Never deleted."""

    def put_participant_events_later(self, participants: list[tuple[str, str | None]], txn: TxnID,
                                     state: TxnStatus) -> list[tuple[int, Callable[[], None]]]:
        """:meth:`put_participant_events` with each event's effect left to a call of its own: per
        participant, in order, (when its put completes, µs after the first is issued; the call that
        writes it). The metered port bills the puts now, where the caller's thread makes them, and
        says when each completes, so that the caller lands each event at its own put's commit
        (``RocksdbMetadataStore.storePut`` notifies the watchers right after its commit); here
        nothing is billed and every put completes at once."""
        return [(0, partial(self.put_participant_events, [p], txn, state)) for p in participants]

    @abstractmethod
    def watch_participant_events(self, segment: str, subscription: str | None, owner: object,
                                 listener: Callable[[], None]) -> None:
        """``subscribeSequence`` on one participant's events: ``listener()`` per new event (the
        body is never read: MetadataTransactionBuffer L216, MetadataPendingAckStore L111-112)."""

    @abstractmethod
    def get_watermark(self, segment: str) -> tuple[Position | None, int]:
        """The segment's durable watermark and its version (``ABSENT`` when none was written)."""

    @abstractmethod
    def cas_watermark(self, segment: str, position: Position, version: int) -> int | None:
        """CAS ``/txn/segment-state/watermark/<seg>``: the new version, or None on BadVersion."""

    @abstractmethod
    def delete_op(self, record: OpRecord) -> None:
        """``deleteIfExists`` of one op record (TxnMetadataStore L290-317: one call per record)."""

    def delete_op_each(self, records: list[OpRecord]) -> None:
        """:meth:`delete_op` of each record, the calls issued at once and waited for together."""
        for record in records:
            self.delete_op(record)

    @abstractmethod
    def count_events(self) -> int:
        """Participant event records in the store (5.0.1 never deletes them: D10)."""

    def store_native_sequences(self) -> bool:
        """Whether a sequence-key append is one put (Oxia) or a counter GET + CAS + create."""
        return True

    last_scan_gets: int = 0  # GETs the last scan issued one by one (emulated stores; 0 when native)
    last_scan_keys: int = 0  # keys its listing iterated, sequence counters included (likewise)
    last_scan_entries: int = 0  # memtable entries its listing passed beyond those keys (likewise)

    # -- lifecycle ------------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Drop this client's watches (a crash calls it too)."""

    def stats(self) -> dict[str, int]:
        return {}
