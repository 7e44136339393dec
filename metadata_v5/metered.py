"""The v5 metadata port, metered: every call the engine makes on :class:`TxnRecords` is billed
(and counted) by the broker's :class:`~engine.metering.Meter`, through the ``metadata`` resource's
instance for the broker thread making it (:data:`~metadata_v5.txnrecords.IO` unless the caller
says otherwise with :meth:`MeteredTxnRecords.on`: RocksdbMetadataStore commits on the caller's
thread, so one thread's writes queue behind each other and two threads' do not).

What each call costs, as the store serves it (``TxnMetadataStore`` in 5.0.1; PULSAR5_CODE.md
§1.9 for emulated indexes and sequences):

* a point read (``getHeader``, the watermark): ``meta.read``; a create/put/delete: ``meta.write``;
  a versioned put (``finalize``, the watermark CAS): ``meta.cas``;
* an index scan: ``meta.list``, plus on a store without native indexes the listing's walk over
  every key under the prefix, ``meta.list_keys`` per thousand keys
  (``RocksdbMetadataStore.getChildrenFromStore`` L494 on: the sequence counters of every txn
  the store has held among them; ``TxnRecords.last_scan_keys``) and ``meta.list_entries`` per
  thousand entries it passes beyond them (older versions and tombstones in RocksDB's memtable;
  ``TxnRecords.last_scan_entries``), one call holding the thread, and one ``meta.scan_get`` per
  record it GETs, serially (``AbstractMetadataStore.storeScanByIndex`` M1 L624-660, a ``thenCompose``
  chain): ``TxnRecords.last_scan_gets``;
* ``nextTxnSequence`` (L569-585): a GET and a CAS of the counter;
* a sequence-key append (``appendOp`` L124-136, ``fanOutEvents`` L475-508): one put on Oxia; a
  counter GET + CAS, then the create, on an emulated store;
* a batch of records written or deleted together (``delete_ops``, ``put_events``,
  ``delete_aborted``): one ``meta.write``.

Every put and delete also queues the store's notifications on its single event thread
(``AbstractMetadataStore.receivedNotification`` L421-437), which runs every listener the store
holds for each: ``meta.notify`` per thousand listener calls, booked on that thread (:data:`EVENT`)
where nobody waits for it but what the thread serves after it (the buffers' reconciles). A key
created or deleted on RocksDB queues one notification more per ancestor
(``RocksdbMetadataStore`` L579-580, L640-643, ``notifyParentChildrenChanged`` L1044-1049: 3 for
``/txn/<family>/<key>``, 4 under ``/txn/segment-state/``), an update one; a store with native
sequences (Oxia) one per key. The listeners: the watches registered through the port
(``TxnRecords.listeners``: a buffer's and a pending-ack store's ``subscribeSequence``) and
``other_listeners`` (the broker's own, and those of the segments it loaded before the run).

Watch registrations cost nothing here (the delivery delay is the engine's notifier's).
Calls issued at once by the caller are billed as one batch by the caller's
``meter.batch()`` (e.g. recovery's header reads: ``FutureUtil.waitForAll``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any, Callable, Iterator

from engine.ids import TxnID
from engine.metering import Meter
from engine.ports import TxnStatus
from engine.records import Position
from metadata_v5.txnrecords import EVENT, IO, AbortedRange, Header, Op, OpRecord, SweepCursor, TxnRecords

_M = "metadata"  # the resource every call goes through (one store per run)


class MeteredTxnRecords(TxnRecords):
    """Delegates to ``inner``; bills each call to ``meter`` before returning its answer.
    ``other_listeners``: the store's listeners besides the watches registered through it."""

    def __init__(self, inner: TxnRecords, meter: Meter, other_listeners: int = 0) -> None:
        self.inner = inner
        self._meter = meter
        # every call is billed as self._bill(kind, _M, self._thread[, times]): through the store,
        # on the broker thread making it (written out at each call: a wrapper was a tenth of
        # billing's time, benchmarks.billing_share)
        self._bill = meter.bill
        self._book = meter.book_per_thousand
        self._thread = IO
        self._other_listeners = other_listeners
        self._native = inner.store_native_sequences()

    @contextmanager
    def on(self, thread: str) -> Iterator[None]:  # type: ignore[override]
        """The calls inside are billed to broker thread ``thread``'s instance of the resource."""
        saved, self._thread = self._thread, thread
        try:
            yield
        finally:
            self._thread = saved

    def issued_at_once(self) -> AbstractContextManager[object]:
        """Concurrent calls (the slowest one's time) on a store with native sequence keys. On an
        emulated one, RocksdbMetadataStore's storeGet/storePut/storeDelete complete on the
        calling thread before the caller's loop issues the next call, so the calls run one after
        another in its task and nothing that arrived meanwhile runs between them (an END_TXN's
        ``fanOutEvents``, L475-508, over ``putWithSequenceKeysCompat``, L725-765; a buffer's
        ``deleteWriteOpsForSegmentAndTxn``)."""
        return self._meter.batch(None) if self._native else nullcontext()

    def busy_for(self, thread: str) -> int:
        return self._meter.behind(_M, thread, in_tab=False)

    def _notify(self, keys: int, depth: int = 3) -> None:
        """The notifications of ``keys`` keys created or deleted ``depth`` levels below the root."""
        self._notified(keys if self._native else keys * depth)

    def _notified(self, notifications: int) -> None:
        """``notifications`` queued on the event thread, each running every listener."""
        self._book("meta.notify", notifications * (self.inner.listeners + self._other_listeners), _M, EVENT)

    @property
    def listeners(self) -> int:  # type: ignore[override]
        return self.inner.listeners

    def _scanned(self) -> None:
        gets, keys, entries = self.inner.last_scan_gets, self.inner.last_scan_keys, self.inner.last_scan_entries
        if not (gets or keys):
            self._bill("meta.list", _M, self._thread)
            return
        with self._meter.unit():
            self._bill("meta.list", _M, self._thread)
            if keys:  # the walk holds the calling thread (RocksDB iterates on it)
                self._meter.bill_per_thousand("meta.list_keys", keys, _M, self._thread,
                                              also=("meta.list_entries", entries))
            if gets:  # storeGet straight from RocksDB: not the metric's get (bench.calibrate.store_probe)
                self._bill("meta.scan_get", _M, self._thread, gets)

    @property
    def last_scan_gets(self) -> int:  # type: ignore[override]  # the inner store's, read-only
        return self.inner.last_scan_gets

    @property
    def last_scan_keys(self) -> int:  # type: ignore[override]
        return self.inner.last_scan_keys

    @property
    def last_scan_entries(self) -> int:  # type: ignore[override]
        return self.inner.last_scan_entries

    # -- headers ----------------------------------------------------------------------------------

    def next_txn_seq(self, tc_id: int) -> int:
        # the PIP's coordinator reserves ids in blocks (one GET + CAS per block, storerecords
        # ID_BLOCK) and no waiter waits on it: not billed
        return self.inner.next_txn_seq(tc_id)

    def create_header(self, txn: TxnID, timeout_us: int, created_us: int) -> Header:
        out = self.inner.create_header(txn, timeout_us, created_us)
        self._bill("meta.write", _M, self._thread)
        self._notify(1)
        return out

    def get_header(self, txn: TxnID) -> Header | None:
        out = self.inner.get_header(txn)
        self._bill("meta.read", _M, self._thread)
        return out

    def finalize(self, header: Header, state: TxnStatus, finalized_us: int) -> Header | None:
        out = self.inner.finalize(header, state, finalized_us)
        self._bill("meta.cas", _M, self._thread)
        if out is not None:  # a CAS that lost wrote nothing
            self._notified(1)
        return out

    def delete_header(self, txn: TxnID, keep_sequence: bool = False) -> None:
        self.inner.delete_header(txn, keep_sequence)
        self._bill("meta.write", _M, self._thread)
        self._notify(1)

    def expired(self, now_us: int, limit: int, after: SweepCursor | None = None) -> tuple[list[TxnID], SweepCursor | None]:
        out = self.inner.expired(now_us, limit, after)
        self._scanned()  # an emulated store walks and GETs every header under /txn
        return out

    def finalized_before(self, before_us: int, limit: int,
                         after: SweepCursor | None = None) -> tuple[list[TxnID], SweepCursor | None]:
        out = self.inner.finalized_before(before_us, limit, after)
        self._scanned()
        return out

    def count_headers(self) -> int:  # end-of-run accounting, not a modelled call
        return self.inner.count_headers()

    def count_finished(self) -> int:
        return self.inner.count_finished()

    # -- op records ---------------------------------------------------------------------------------

    def add_op(self, txn: TxnID, op: Op) -> OpRecord:
        """A sequence-key append (``TxnMetadataStore.appendOp`` L124-136, ``APPEND_DELTAS``):
        billed as :meth:`put_participant_events` bills one event."""
        out = self.inner.add_op(txn, op)
        self._bill_sequence_append()
        return out

    def ops_of_txn(self, txn: TxnID) -> list[OpRecord]:
        out = self.inner.ops_of_txn(txn)
        self._bill("meta.list", _M, self._thread)
        return out

    def writes_on(self, segment: str) -> list[OpRecord]:
        out = self.inner.writes_on(segment)
        self._bill("meta.list", _M, self._thread)
        return out

    def acks_on(self, segment: str, subscription: str) -> list[OpRecord]:
        out = self.inner.acks_on(segment, subscription)
        self._bill("meta.list", _M, self._thread)
        return out

    def delete_ops(self, records: list[OpRecord]) -> None:
        self.inner.delete_ops(records)
        self._bill("meta.write", _M, self._thread)
        self._notify(len(records))

    def count_ops(self) -> int:
        return self.inner.count_ops()

    # -- watches (no cost: the notifier models the delivery) -----------------------------------------

    def watch_header(self, txn: TxnID, owner: object, listener: Any) -> None:
        self.inner.watch_header(txn, owner, listener)

    def unwatch_header(self, txn: TxnID, owner: object) -> None:
        self.inner.unwatch_header(txn, owner)

    def watch_events(self, segment: str, subscription: str | None, owner: object, listener: Any) -> None:
        self.inner.watch_events(segment, subscription, owner, listener)

    def watch_participant_events(self, segment: str, subscription: str | None, owner: object,
                                 listener: Callable[[], None]) -> None:
        self.inner.watch_participant_events(segment, subscription, owner, listener)

    # -- events -------------------------------------------------------------------------------------

    def put_events(self, txn: TxnID, state: TxnStatus, participants: list[tuple[str, str | None]]) -> None:
        self.inner.put_events(txn, state, participants)
        self._bill("meta.write", _M, self._thread)
        self._notify(len(participants))

    def events_for(self, segment: str, subscription: str | None) -> list[tuple[TxnID, TxnStatus]]:
        out = self.inner.events_for(segment, subscription)
        self._bill("meta.list", _M, self._thread)
        return out

    def delete_event(self, segment: str, subscription: str | None, txn: TxnID) -> None:
        self.inner.delete_event(segment, subscription, txn)
        self._bill("meta.write", _M, self._thread)
        self._notify(1)

    # -- aborted ranges -----------------------------------------------------------------------------

    def put_aborted(self, segment: str, ranges: list[AbortedRange]) -> None:
        self.inner.put_aborted(segment, ranges)
        self._bill("meta.write", _M, self._thread)
        self._notify(len(ranges), 4)

    def aborted_on(self, segment: str) -> list[AbortedRange]:
        out = self.inner.aborted_on(segment)
        self._bill("meta.list", _M, self._thread)
        return out

    def delete_aborted(self, segment: str, txns: list[TxnID]) -> None:
        self.inner.delete_aborted(segment, txns)
        self._bill("meta.write", _M, self._thread)
        self._notify(len(txns), 4)

    # -- the shipped design -------------------------------------------------------------------------

    def next_txn_seq_each(self, tc_id: int) -> int:
        out = self.inner.next_txn_seq_each(tc_id)
        with self._meter.unit():
            self._bill("meta.read", _M, self._thread)
            self._bill("meta.cas", _M, self._thread)
        self._notified(1)
        return out

    def ops_by_txn(self, txn: TxnID) -> list[OpRecord]:
        out = self.inner.ops_by_txn(txn)
        self._scanned()
        return out

    def finalize_then_list_ops(self, header: Header, state: TxnStatus,
                               finalized_us: int) -> tuple[Header | None, list[OpRecord]]:
        """Billed as the two calls it stands for, one after the other (a pipeline is the
        adapter's, not the broker's: RocksDB runs the scan after the CAS on the same thread)."""
        out = self.inner.finalize_then_list_ops(header, state, finalized_us)
        self._bill("meta.cas", _M, self._thread)
        if out[0] is not None:
            self._notified(1)
            self._scanned()
        return out

    def writes_scan(self, segment: str, txn: TxnID | None = None) -> list[OpRecord]:
        out = self.inner.writes_scan(segment, txn)
        self._scanned()
        return out

    def acks_scan(self, segment: str, subscription: str, txn: TxnID | None = None) -> list[OpRecord]:
        out = self.inner.acks_scan(segment, subscription, txn)
        self._scanned()
        return out

    def aborted_scan(self, segment: str) -> list[AbortedRange]:
        out = self.inner.aborted_scan(segment)
        self._scanned()
        return out

    def put_participant_events(self, participants: list[tuple[str, str | None]], txn: TxnID,
                               state: TxnStatus) -> None:
        """Billed as :meth:`put_participant_events_later` bills them, and written now."""
        self.put_participant_events_later(participants, txn, state)
        self.inner.put_participant_events(participants, txn, state)

    def put_participant_events_later(self, participants: list[tuple[str, str | None]], txn: TxnID,
                                     state: TxnStatus) -> list[tuple[int, Callable[[], None]]]:
        """One ``meta.write`` per event (a counter read and CAS before it where the store has no
        native sequences), billed now, so the thread making them is held for them from here,
        before any request that arrives later. Issued at once where they can be
        (:meth:`issued_at_once`): each put completes its own time after the first is issued; on
        an emulated store one after another, so the times add up. Each event's call writes it."""
        out: list[tuple[int, Callable[[], None]]] = []
        done = 0
        with self.issued_at_once():
            for participant in participants:
                took = self._bill_sequence_append()
                done = took if self._native else done + took
                out.append((done, partial(self.inner.put_participant_events, [participant], txn, state)))
        return out

    def _bill_sequence_append(self) -> int:
        """Its time: one put on a store with native sequence keys (Oxia); elsewhere
        ``AbstractMetadataStore.putWithSequenceKeysCompat`` (L725-765): the counter's GET and
        CAS, then the create, serially."""
        if self._native:
            took = self._bill("meta.write", _M, self._thread)
            self._notify(1)
            return took
        with self._meter.unit() as unit:
            self._bill("meta.read", _M, self._thread)
            self._bill("meta.cas", _M, self._thread)
            self._bill("meta.write", _M, self._thread)
        self._notified(1 + 3)  # the counter's update (its first write creates it: not told apart), the key's create
        return unit.us

    def get_watermark(self, segment: str) -> tuple[Position | None, int]:
        out = self.inner.get_watermark(segment)
        self._bill("meta.read", _M, self._thread)
        return out

    def cas_watermark(self, segment: str, position: Position, version: int) -> int | None:
        out = self.inner.cas_watermark(segment, position, version)
        self._bill("meta.cas", _M, self._thread)
        if out is not None:
            self._notified(1)
        return out

    def delete_op(self, record: OpRecord) -> None:
        self.inner.delete_op(record)
        self._bill("meta.write", _M, self._thread)
        self._notify(1)

    def delete_op_each(self, records: list[OpRecord]) -> None:
        """One ``meta.write`` per record; the caller's ``issued_at_once()`` makes them concurrent
        where they can be."""
        self.inner.delete_op_each(records)
        for _ in records:
            self._bill("meta.write", _M, self._thread)
        self._notify(len(records))

    def count_events(self) -> int:
        return self.inner.count_events()

    def store_native_sequences(self) -> bool:
        return self.inner.store_native_sequences()

    def close(self) -> None:
        self.inner.close()

    def stats(self) -> dict[str, int]:
        return self.inner.stats()
