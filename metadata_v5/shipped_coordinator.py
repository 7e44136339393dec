"""TransactionCoordinatorV5 as Pulsar 5.0.1 ships it (``Variant.SHIPPED``; PULSAR5_CODE.md D1,
D5-D8, D11 and §1.1). What it adds to the PIP's coordinator (:mod:`metadata_v5.coordinator`):

* new_txn: 1 GET + 1 CAS on the coordinator's sequence key, then the header create (D5).
* ADD_PARTITION / ADD_SUBSCRIPTION: the client sends each registration once per (txn, segment)
  and (txn, subscription) and waits for it (M1 client ``TransactionImpl.registerProducedTopic``
  L106-119, ``registerAckedTopic`` L147-160); the broker reads the header to verify ownership
  (``ServerCnx.verifyTxnOwnership`` L4357-4373); the coordinator itself does nothing (L406, L412).
* END_TXN: the ownership read (L4359), the header read (L431), the CAS (L456), ``listOpsByTxn``
  (L477) and one sequence-key event per segment and per (segment, subscription)
  (``fanOutEvents`` L475-508). On an emulated store every call completes on the connection's
  thread, so the chain holds it from the first read to the last event's put: a request that
  arrives meanwhile waits for all of it (2026-11-27, three validation sets: the broker answered
  15 of 22, 29 of 34 and 41 of 51 new-txns that overlapped an end-txn after that end-txn's
  answer, a median 1.6-2.6 ms after it). Each event lands at its own put's commit, after the scan
  (``RocksdbMetadataStore.storePut`` notifies the watchers right after it): a crash between the
  CAS and the fan-out leaves the participants unaware of the decision (D8). A repeated END_TXN
  with the same action skips the CAS and re-runs the fan-out (L439-446, D7); a lost CAS is
  returned to the client, not retried (L456). The answer leaves with the batch of commands the
  connection's thread read with the END_TXN: Netty's
  ``FlushConsolidationHandler`` (``PulsarChannelInitializer``) flushes a batch's writes when the
  batch is done, so END_TXNs that queued behind one another are answered together, after the
  last of them (2026-11-28, the 18 kept validation sets: omb's 32 END_TXNs at the trace's last
  instant left the broker in 2-4 flushes, 29-31 of them in one).
* GC (``gcFinalized`` L572-595, ``gcOneTxn`` L608-633): a finished txn with op records left gets
  its events re-published (``GcMode.REPAIR``); without, its header is deleted.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from engine.errors import InvalidTxnState, TxnConflict, TxnNotFound
from engine.ids import Design, TxnID
from engine.ports import EndTxnCallback, TxnAction, TxnStatus
from metadata_v5.coordinator import FINAL, CoordinatorV5
from metadata_v5.txnrecords import SWEEP, Header, OpRecord


class ShippedCoordinator(CoordinatorV5):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # what the client has registered, per open txn (the client's own set: TransactionImpl)
        self._registered: dict[TxnID, set[tuple[str, str | None]]] = {}
        # txns whose END_TXN the client has had answered: it refuses to end them again
        # (TransactionImpl's state check); an unanswered one it retries, which is D7's repeat
        self._answered: set[TxnID] = set()

    # -- client operations ------------------------------------------------------------------------

    def new_txn(self, timeout_ms: int) -> TxnID:
        self._live()
        txn = TxnID(Design.V5, self._opts.tc_id, self._records.next_txn_seq_each(self._opts.tc_id))
        self.stats["seq_cas"] += 1
        now = self._sched.now_us()
        self._records.create_header(txn, now + timeout_ms * 1000, now)  # createHeader L95-96
        self.stats["header_creates"] += 1
        return txn

    def _verify_ownership(self, txn: TxnID) -> Header:
        """``ServerCnx.verifyTxnOwnership``: one header read (TransactionCoordinatorV5 L391-396)."""
        txn.require(Design.V5)
        header = self._records.get_header(txn)
        self.stats["ownership_reads"] += 1
        if header is None:
            raise TxnNotFound(f"v5 coordinator {self._opts.tc_id}: no txn {txn}")
        return header

    def _register(self, txn: TxnID, ledger: str, subscription: str | None) -> None:
        self._live()
        txn.require(Design.V5)
        done = self._registered.setdefault(txn, set())
        if (ledger, subscription) in done:  # the client registers each participant once
            return
        # client -> broker -> client around the ownership read, waited for before the send or
        # ack (billed to the request in progress by the meter)
        self._meter.bill("rpc")
        self._meter.serve("coordinator")
        self._meter.bill("coordinator.v5")
        header = self._verify_ownership(txn)
        self._meter.bill("rpc")
        if header.state is not TxnStatus.OPEN:  # the client's own state check refuses it too
            raise InvalidTxnState(f"{txn} is {header.state.value}; cannot add {ledger} to it")
        done.add((ledger, subscription))
        self.stats["registrations"] += 1

    def add_produced_partition(self, txn: TxnID, ledger: str) -> None:
        self._register(txn, ledger, None)

    def add_acked_subscription(self, txn: TxnID, ledger: str, subscription: str) -> None:
        self._register(txn, ledger, subscription)

    def end_txn(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None = None) -> None:
        self._live()
        if txn in self._answered:
            raise InvalidTxnState(f"{txn} has ended; the client refuses to {action.value} it again")
        # the request hop, the ownership read, the header read, the CAS, the ops scan, the events:
        # on an emulated store one uninterrupted run of the connection's thread (every store call
        # completes on it, so each thenCompose runs there at once: L431-508), which a request
        # arriving meanwhile waits behind whole
        with self._meter.tab() as took:
            self._meter.bill("rpc")  # the client's END_TXN reaching the broker (ServerCnx.handleEndTxn)
            self._meter.serve("coordinator")
            self._meter.bill("coordinator.v5")
            self._verify_ownership(txn)
            header = self._open_header(txn)
            state = FINAL[action]
            if header.state is state:  # a repeated END_TXN: no CAS, the fan-out again (D7)
                self.stats["end_txn.repeated"] += 1
                ops = self._list_ops(txn)
            elif header.state is TxnStatus.OPEN:
                new, ops = self._finalize_and_list(header, state, self._sched.now_us())
                if new is None:  # BadVersion goes back to the client (L456)
                    self.stats["header_cas.conflict"] += 1
                    raise TxnConflict(f"{txn}: the header changed under END_TXN (BadVersion)")
                self.stats["header_cas.ok"] += 1
                self.stats["ended." + state.value] += 1
            else:
                self.stats["header_cas.reject"] += 1
                raise InvalidTxnState(f"{txn} is {header.state.value}; cannot {action.value} it")
            scanned_us = took.us
            publish = self._fan_out_billed(txn, state, ops)
        self._registered.pop(txn, None)
        # Each event lands at its put's commit, after the scan: a crash before it loses it (D8).
        # The answer follows the last event's put, flushed with its batch.
        publish(scanned_us)
        if on_done is not None:
            self._answer_later(took.us, self._answer, on_done, txn, state)

    def _check(self) -> None:
        """The base's sweep timers, and the client's sets: no txn both still registering and
        answered (END_TXN drops its registrations before the answer is scheduled)."""
        super()._check()
        both = set(self._registered) & self._answered
        assert not both, f"shipped v5 coordinator: txns registered after their answer: {both}"

    def _list_ops(self, txn: TxnID) -> list[OpRecord]:
        """``listOpsByTxn`` (L477) alone: a repeated END_TXN's fan-out again (D7)."""
        self.stats["op_lists"] += 1
        return self._records.ops_by_txn(txn)

    def _finalize_and_list(self, header: Header, state: TxnStatus, now_us: int) -> tuple[Header | None, list[OpRecord]]:
        """The CAS (L456) and ``listOpsByTxn`` (L477) chained right after it on the thread that
        made it: the store state the scan reads is the CAS's, not a later one (a participant's
        reconcile that sees the decided header cannot delete the records in between, as it could
        if the scan ran at the end of the CAS's modelled time while its write took effect at
        once)."""
        new, ops = self._records.finalize_then_list_ops(header, state, now_us)
        if new is not None:
            self.stats["op_lists"] += 1
        return new, ops

    def _fan_out_billed(self, txn: TxnID, state: TxnStatus, ops: list[OpRecord]) -> Callable[[int], None]:
        """``fanOutEvents`` (L475-508) in the open tab, on its thread right after the scan whose
        records it groups: the puts billed now, issued without waiting for one another (one after
        another on an emulated store: ``TxnRecords.issued_at_once``). The returned call, given
        when the fan-out was issued (µs from now), lands each event at its own put's commit, where
        ``RocksdbMetadataStore.storePut`` notifies the watchers."""
        puts = self._records.put_participant_events_later(self._participants(ops), txn, state)

        def land(write: Callable[[], None]) -> None:
            if not self._closed:  # a crash before its put's commit loses the event (D8)
                write()
                self.stats["event_writes"] += 1

        def publish(issued_us: int) -> None:
            for done_us, write in puts:
                self._sched.call_later(issued_us + done_us, partial(land, write))
        return publish

    def _answer(self, on_done: EndTxnCallback, txn: TxnID, state: TxnStatus) -> None:
        if not self._closed:
            self._answered.add(txn)
            on_done(txn, state)

    @staticmethod
    def _participants(ops: list[OpRecord]) -> list[tuple[str, str | None]]:
        """One per segment written and per (segment, subscription) acked (``fanOutEvents``)."""
        return sorted({(r.op.segment, r.op.subscription if r.op.kind == "ack" else None) for r in ops},
                      key=lambda p: (p[0], p[1] or ""))

    def _fan_out(self, txn: TxnID, state: TxnStatus, ops: list[OpRecord]) -> None:
        """One event per participant of ``ops`` (found by the scan before it), the appends
        issued at once (``fanOutEvents`` L475-508), billed now, each landing at its put's commit."""
        self._fan_out_billed(txn, state, ops)(0)

    # -- sweeps -------------------------------------------------------------------------------------

    def _timeout_sweep(self) -> None:
        if self._closed:
            return
        now = self._sched.now_us()
        for txn in self._scan(lambda after: self._records.expired(now, self._opts.sweep_limit, after)):
            # the abort runs on the sweep executor, as the listing did (sweepTimeouts)
            with self._meter.tab() as took, self._records.on(SWEEP):
                header = self._records.get_header(txn)  # END_TXN without the ownership read
                self.stats["header_reads"] += 1
                if header is None or header.state is not TxnStatus.OPEN:
                    continue
                new, ops = self._finalize_and_list(header, TxnStatus.ABORTED, now)
                if new is None:
                    self.stats["header_cas.conflict"] += 1
                    continue
                scanned_us = took.us
                publish = self._fan_out_billed(txn, TxnStatus.ABORTED, ops)  # on the sweep thread, as END_TXN's
            self.stats["header_cas.ok"] += 1
            self.stats["ended.aborted"] += 1
            self.stats["timeouts"] += 1
            self._registered.pop(txn, None)
            publish(scanned_us)
        self._timers["timeout"] = self._sched.call_later(self._opts.timeout_sweep_ms * 1000, self._timeout_sweep)

    def _repair(self, txn: TxnID, ops: list[OpRecord]) -> bool:
        header = self._records.get_header(txn)
        self.stats["header_reads"] += 1
        if header is not None and header.state is not TxnStatus.OPEN:
            self._fan_out(txn, header.state, ops)  # gcOneTxn L626-628
            self.stats["gc.refanouts"] += 1
        return True

    def _gc_sweep(self) -> None:
        if self._closed:
            return
        horizon = self._sched.now_us() - self._opts.retention_ms * 1000
        for txn in self._scan(lambda after: self._records.finalized_before(horizon, self._opts.sweep_limit, after)):
            with self._records.on(SWEEP):  # gcOneTxn on the sweep executor, as the listing
                ops = self._records.ops_by_txn(txn)
                self.stats["op_lists"] += 1
                if ops and self._leftovers.keep_header(txn, ops, self._records, self.stats, self._repair):
                    continue
                self._records.delete_header(txn, keep_sequence=True)  # deleteHeader L98-100: the header alone
                self.stats["gc.headers_deleted"] += 1
        self._timers["gc"] = self._sched.call_later(self._opts.gc_sweep_ms * 1000, self._gc_sweep)
