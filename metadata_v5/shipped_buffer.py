"""MetadataTransactionBuffer as Pulsar 5.0.1 ships it (``Variant.SHIPPED``; PULSAR5_CODE.md D2-D4,
D12, D13, D16). Line numbers are ``MetadataTransactionBuffer``'s in 5.0.1.

* Write path (L347-383): one header read per (txn, segment) cache miss, then the op record,
  with a 0/0 placeholder position, *before* the ledger append (L360-364).
* Wake-up (``triggerReconcile`` L425-454): an event on the segment's sequence (its body is never
  read) makes the buffer read the header of **every** txn it tracks as OPEN, queued-but-decided
  ones included, and enqueue the terminal ones.
* Materialisation is serial per segment on one ``stateTail`` (``enqueueApplyTerminal`` L463-471):
  ``applyTerminalNow`` (L478-525) changes the in-memory state and maxReadPosition first, then holds
  the tail for the aborted record (aborts, L543-551), the watermark CAS (L561-609) and the cleanup
  (a ``writes-by-segment`` scan of all the segment's write ops, one delete per record of the txn:
  TxnMetadataStore L290-317) before the next txn's state change. The tail is modelled in virtual
  time, so commit-to-visible lags when terminal txns arrive faster than it drains.
* And serial across segments: every segment's wake-up runs on the store's one notification thread
  (``AbstractMetadataStore.receivedNotification``: ``eventExecutor``), and on RocksDB each store
  call the reconcile chains completes on that thread, so the whole apply runs inside the wake-up.
  A txn's participants become visible one after another, each after the cleanup scans of those
  notified before it (``EVENT``: the reconcile and each tail item start once the thread is free).
* Plain publishes (``syncMaxReadPositionForNormalPublish`` L689-703) recompute maxReadPosition and
  queue a watermark CAS on the same tail (at most one queued: coalesced). When the tail is idle
  its ``thenCompose`` runs the CAS at once, on the thread completing the add, and the store call
  completes there (RocksDB): ``PersistentTopic.addComplete`` (M1 L747-760) calls it before the
  publish's receipt, so a plain publish to a segment with no open txn waits for the CAS (``ML``).
* Recovery (L216-310) does not gate dispatch: maxReadPosition starts at the LAC (L158) and the
  async recovery reads the watermark, scans the aborted records and the segment's write ops and
  reads each txn's header. Txns it finds OPEN have no positions (the placeholder), so they pin
  maxReadPosition at the durable watermark (or leave it at the LAC if none was ever written) until
  all of them end, and new txns' positions are not tracked meanwhile (L317-318, L409, L488-490,
  L620-623). Entries of txns still open can therefore be dispatched after a restart.
* Dispatch never reads a header: only txns in the aborted set are skipped (L668-675).
* Aborted records are pruned by a timer per loaded segment (``scheduleAbortedGc`` L169-197,
  ``pruneTrimmedAbortedTxns`` L730-776): one scan, one delete per trimmed record.
"""

from __future__ import annotations

from collections import deque
from typing import Union

from engine.counters import Counters
from engine.errors import TxnConflict
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.ports import EngineContext, MaxReadListener, RecoveryStats, TransactionBuffer, TxnStatus
from engine.records import EntryData, Position
from metadata_v5.options import V5Options
from metadata_v5.store.port import ABSENT
from metadata_v5.txnrecords import EVENT, LOAD, ML, AbortedRange, Op, TxnRecords

PLACEHOLDER = Position(0, 0)  # what 5.0.1 writes as a WRITE op record's position (L360)
_WATERMARK = "watermark"  # a queued watermark persist on the state tail
_Item = Union[tuple[TxnID, TxnStatus], str]


def _before(p: Position) -> Position:
    return Position(p.ledger_id, p.entry_id - 1)


class ShippedTransactionBuffer(TransactionBuffer):
    locks = True  # each item of the state tail runs under the buffer's lock (lock_free_at)

    def __init__(self, ctx: EngineContext, records: TxnRecords, ledger: ManagedLedger, opts: V5Options) -> None:
        self._sched = ctx.scheduler
        self._meter = ctx.meter  # bills every store call (the records are metered)
        self._records = records
        self._ledger = ledger
        self._segment = ledger.name
        self._opts = opts
        self.stats = Counters()
        self._txns: dict[TxnID, TxnStatus] = {}  # tracked txns; OPEN until applied (L486-498)
        # the OPEN ones, by first-tracked ordinal: a reconcile reads them in _txns' order without
        # walking the decided txns kept until trimmed (on an untrimmed log: every txn ever seen)
        self._open: dict[TxnID, int] = {}
        self._ordinal: dict[TxnID, int] = {}
        self._tracked_count = 0
        self._first: dict[TxnID, Position] = {}  # OPEN txns with a tracked first position, append order
        self._last: dict[TxnID, Position] = {}
        self._recovered_open: set[TxnID] = set()  # recoveryDiscoveredOpen: no positions known
        self._aborted: set[TxnID] = set()
        self._decided: deque[tuple[Position, TxnID]] = deque()
        self._tail: deque[_Item] = deque()
        self._queued: set[TxnID] = set()
        self._watermark_queued = False
        self._busy = False
        self._locked_until = 0  # the end of the tail item holding the buffer's lock (lock_free_at)
        self._durable: Position | None = None  # the persisted watermark, once loaded
        self._wm_version = ABSENT
        self._max_read = ledger.last_confirmed()  # L158: the LAC, before and during recovery
        self._listeners: list[MaxReadListener] = []
        self._recovery: RecoveryStats | None = None
        self._closed = False

    # -- the write path -----------------------------------------------------------------------------

    def append_buffer_to_txn(self, txn: TxnID, data: EntryData) -> Position:
        txn.require(Design.V5)
        state = self._txns.get(txn)
        if state is None:  # (txn, segment) cache miss: one header read on the publish's path
            header = self._records.get_header(txn)  # billed to the publish's open request
            self.stats["header_reads"] += 1
            if header is None or header.state is not TxnStatus.OPEN:
                state = TxnStatus.ABORTED if header is None else header.state  # missing = aborted (L352-355)
            else:
                state = self._track(txn, TxnStatus.OPEN)
        if state is not TxnStatus.OPEN:
            self.stats["rejected_not_open"] += 1
            raise TxnConflict(f"{self._segment}: {txn} is {state.value}, not open: TxnConflict")
        if self._ledger.sealed:
            self._ledger.append(data)  # raises LedgerSealed before any record is written
        self._records.add_op(txn, Op("write", self._segment, PLACEHOLDER))  # before the append (L361-364)
        self.stats["op_writes"] += 1
        pos = self._ledger.append(data)
        self._last[txn] = pos
        if txn not in self._first and not self._recovered_open:  # trackPosition ignores it meanwhile (L409)
            self._first[txn] = pos
        return pos

    def sync_max_read_position_for_normal_publish(self, position: Position) -> None:
        self._recompute()
        if self._busy or self._tail or self._closed:
            self._enqueue(_WATERMARK)
            return
        with self._records.on(ML):  # a completed stateTail: the CAS inline, billed to the publish
            self._persist_watermark()

    # -- what the dispatcher asks ----------------------------------------------------------------

    def max_read_position(self) -> Position:
        return self._max_read

    def is_txn_aborted(self, txn: TxnID, position: Position) -> bool:
        return txn in self._aborted  # no header read at dispatch (L668-675)

    def add_max_read_listener(self, listener: MaxReadListener) -> None:
        self._listeners.append(listener)

    # -- wake-up and the serial state tail -------------------------------------------------------

    def _on_event(self) -> None:
        """``triggerReconcile``: read the header of every txn tracked as OPEN, at once; once the
        store's notification thread has done what was notified before (``EVENT``)."""
        if self._closed:
            return
        if self._records.put_off(EVENT, self._sched.call_later, self._on_event):
            return
        self.stats["events"] += 1
        tracked = sorted(self._open, key=self._open.__getitem__)
        decided: list[tuple[TxnID, TxnStatus]] = []
        with self._meter.batch() as took, self._records.on(EVENT):  # the reads issued at once (FutureUtil.waitForAll)
            for txn in tracked:
                header = self._records.get_header(txn)
                state = TxnStatus.ABORTED if header is None else header.state
                if state is not TxnStatus.OPEN:
                    decided.append((txn, state))
        self.stats["reconcile_header_reads"] += len(tracked)
        if decided:
            self._sched.call_later(took.us, self._enqueue_terminal, decided)

    def _enqueue_terminal(self, decided: list[tuple[TxnID, TxnStatus]]) -> None:
        for txn, state in decided:
            if txn not in self._queued and self._txns.get(txn) is TxnStatus.OPEN:
                self._queued.add(txn)
                self._enqueue((txn, state))

    def _enqueue(self, item: _Item) -> None:
        if self._closed:
            return
        if item == _WATERMARK:
            if self._watermark_queued:
                return  # coalesced: one persist queued covers every advance before it runs
            self._watermark_queued = True
        self._tail.append(item)
        self._pump()

    def _pump(self) -> None:
        if self._busy or not self._tail or self._closed:
            return
        self._busy = True
        if self._records.put_off(EVENT, self._sched.call_later, self._tail_done):  # the tail runs on that thread
            return
        item = self._tail.popleft()
        with self._meter.tab() as took, self._records.on(EVENT):  # the tail is held for the item's store calls
            if isinstance(item, str):
                self._watermark_queued = False
                self._persist_watermark()
            else:
                self._apply_terminal_now(*item)
        self._locked_until = self._sched.now_us() + took.us  # each item runs under the buffer's lock
        self._sched.call_later(took.us, self._tail_done)

    def lock_free_at(self, at_us: int) -> int:
        """``getMaxReadPosition`` (L647) and ``isTxnAborted`` are ``synchronized (lock)``, which each
        tail item holds from its start to its end (``applyTerminalNow``, the watermark CAS): a
        reader waits for the item running at ``at_us`` (a dispatcher's read, at its start:
        ``Dispatcher._waited_for_lock``). Java Flight Recorder caught the IO threads waiting there
        89 times (p50 3.4 ms) while the store's event thread held it (datasets/validation/README.md,
        session 40)."""
        return self._locked_until if at_us < self._locked_until else at_us

    def _tail_done(self) -> None:
        self._busy = False
        self._pump()

    def _apply_terminal_now(self, txn: TxnID, state: TxnStatus) -> None:
        """State change first, then the durable steps (billed to the tail's tab, one after
        another)."""
        self._queued.discard(txn)
        self._track(txn, state)
        self._first.pop(txn, None)
        last = self._last.pop(txn, None)
        self._recovered_open.discard(txn)
        if state is TxnStatus.ABORTED:
            self._aborted.add(txn)
        self.stats["materialised." + state.value] += 1
        self._recompute()
        if state is TxnStatus.ABORTED:  # persistAbortedRecord: the last position, or the LAC if unknown
            at = last if last is not None else self._ledger.last_confirmed()
            self._records.put_aborted(self._segment, [AbortedRange(txn, at, at)])
            self.stats["aborted_record_writes"] += 1
        self._persist_watermark()
        mine = self._records.writes_scan(self._segment, txn)  # deleteWriteOpsForSegmentAndTxn
        self.stats["cleanup_scans"] += 1
        with self._records.issued_at_once():  # one after another on an emulated store
            self._records.delete_op_each(mine)
        self.stats["op_deletes"] += len(mine)
        if last is not None:
            self._decided.append((last, txn))
        self._forget_trimmed()

    def _track(self, txn: TxnID, state: TxnStatus) -> TxnStatus:
        """Set a tracked txn's state, keeping the OPEN index in step."""
        if txn not in self._txns:
            self._ordinal[txn] = self._tracked_count
            self._tracked_count += 1
        self._txns[txn] = state
        if state is TxnStatus.OPEN:
            self._open[txn] = self._ordinal[txn]
        else:
            self._open.pop(txn, None)
        return state

    def _persist_watermark(self) -> None:
        """``persistWatermarkIfAdvanced``: CAS the watermark if maxReadPosition passed it; on
        BadVersion read it back and try once more (L591-607)."""
        if self._durable is not None and self._max_read <= self._durable:
            return
        self.stats["watermark_cas"] += 1
        version = self._records.cas_watermark(self._segment, self._max_read, self._wm_version)
        if version is None:
            durable, self._wm_version = self._records.get_watermark(self._segment)
            self.stats["watermark_rereads"] += 1
            if durable is not None and self._max_read <= durable:
                self._durable = durable
                return
            self.stats["watermark_cas"] += 1
            version = self._records.cas_watermark(self._segment, self._max_read, self._wm_version)
            if version is None:
                return
        self._durable, self._wm_version = self._max_read, version

    def _recompute(self) -> None:
        """``recomputeMaxReadPositionLocked`` (L620-623)."""
        if self._recovered_open:
            target = self._durable if self._durable is not None else self._ledger.last_confirmed()
        elif self._first:
            target = _before(next(iter(self._first.values())))
        else:
            target = self._ledger.last_confirmed()
        if target != self._max_read:
            rose = target > self._max_read
            self._max_read = target
            if rose:
                for listener in self._listeners:
                    listener()

    def _forget_trimmed(self) -> None:
        """Forget applied txns whose entries are all trimmed (their state is no longer needed)."""
        while self._decided and self._ledger.is_trimmed(self._decided[0][0]):
            txn = self._decided.popleft()[1]
            if self._txns.get(txn) is not TxnStatus.OPEN:
                self._txns.pop(txn, None)
                self._ordinal.pop(txn, None)
            self.stats["decided_forgotten"] += 1

    def _prune_aborted(self) -> None:
        """``pruneTrimmedAbortedTxns``: one scan of the segment's aborted records, a delete per
        trimmed one; then again after ``gc_sweep_ms``."""
        if self._closed:
            return
        gone = [r.txn for r in self._records.aborted_scan(self._segment) if self._ledger.is_trimmed(r.last)]
        self.stats["aborted_scans"] += 1
        if gone:
            self._records.delete_aborted(self._segment, gone)
            self._aborted.difference_update(gone)
            self.stats["aborted_record_deletes"] += len(gone)
        self._sched.call_later(self._opts.gc_sweep_ms * 1000, self._prune_aborted)

    # -- recovery -----------------------------------------------------------------------------------

    def recover(self) -> None:
        """Subscribe to the segment's events, then (asynchronously, dispatch not waiting) the
        watermark, the aborted scan, the writes scan and each found txn's header at once."""
        self._records.watch_participant_events(self._segment, None, self, self._on_event)
        # in turn: the watermark, the two scans, the headers; on the thread that opened the topic
        with self._meter.tab() as took, self._records.on(LOAD):
            durable, version = self._records.get_watermark(self._segment)
            aborted = self._records.aborted_scan(self._segment)
            writes = self._records.writes_scan(self._segment)
            txns = sorted({r.txn for r in writes})
            states: dict[TxnID, TxnStatus] = {}
            with self._meter.batch():  # every header at once (D13: FutureUtil.waitForAll)
                for txn in txns:
                    header = self._records.get_header(txn)
                    states[txn] = TxnStatus.ABORTED if header is None else header.state
        self.stats["recovery_header_reads"] += len(txns)
        self._recovery = RecoveryStats(f"tb-v5:{self._segment}", records_read=(durable is not None) + len(aborted) + len(writes) + len(txns),
                                       queries=2, modelled_us=took.us)

        def landed() -> None:
            if self._closed:
                return
            if self._wm_version == ABSENT:  # unless a persist since the start already knows better
                self._durable, self._wm_version = durable, version
            self._aborted.update(r.txn for r in aborted)
            decided: list[tuple[TxnID, TxnStatus]] = []
            for txn, state in states.items():
                if state is TxnStatus.OPEN:
                    if txn not in self._first:  # found open, position unknown
                        self._track(txn, TxnStatus.OPEN)
                        self._recovered_open.add(txn)
                elif self._txns.get(txn, TxnStatus.OPEN) is TxnStatus.OPEN:
                    self._track(txn, TxnStatus.OPEN)
                    decided.append((txn, state))
            self.stats["recovered_open"] += len(self._recovered_open)
            self._recompute()
            self._enqueue_terminal(decided)
            self._sched.call_later(self._opts.gc_sweep_ms * 1000, self._prune_aborted)

        self._sched.call_later(took.us, landed)

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery

    def ongoing_txn_count(self) -> int:
        return len(self._open)

    def close(self) -> None:
        self._closed = True

    def check(self) -> None:
        """The port's name for :meth:`_check`."""
        self._check()

    def _check(self) -> None:
        """Invariants of 5.0.1's buffer (``SegmentTransactionBufferV5``):

        * every txn with a tracked first position is OPEN, first positions in append order, and
          (unless recovery found open txns of unknown position) maxReadPosition is before the
          first of them: ``recomputeMaxReadPositionLocked`` (L620-623) after every change.
        * maxReadPosition never passes the last entry (it is the LAC at most, L158).
        * recovered-open txns are OPEN; so are txns with a last position (both dropped when the
          tail applies their outcome); the OPEN index holds exactly them, in tracking order.
        * the serial state tail (L486-498): a txn is in ``_queued`` exactly while its outcome
          waits on the tail; the watermark flag is set exactly while a persist waits on it; and
          the tail is never left waiting while idle (``_pump`` runs on every enqueue and every
          completion).
        """
        open_txns = {t for t, s in self._txns.items() if s is TxnStatus.OPEN}
        in_order = [t for t in self._txns if t in open_txns]
        assert sorted(self._open, key=self._open.__getitem__) == in_order, f"{self._segment}: OPEN index {self._open} vs {in_order}"
        assert self._max_read <= self._ledger.last_confirmed(), (
            f"{self._segment}: max read {self._max_read} beyond the last entry {self._ledger.last_confirmed()}")
        assert set(self._last) <= open_txns, f"{self._segment}: a finished txn keeps its last position"
        waiting = {item[0] for item in self._tail if not isinstance(item, str)}
        assert self._closed or self._queued == waiting, f"{self._segment}: queued {self._queued} vs on the tail {waiting}"
        assert self._watermark_queued == (_WATERMARK in self._tail), f"{self._segment}: watermark flag is stale"
        assert self._closed or self._busy or not self._tail, f"{self._segment}: the tail waits while idle"
        for txn in self._first:
            assert self._txns.get(txn) is TxnStatus.OPEN, f"{self._segment}: {txn} pins but is {self._txns.get(txn)}"
        positions = list(self._first.values())
        assert positions == sorted(positions), f"{self._segment}: tracked txns out of position order"
        if self._first and not self._recovered_open:
            first = next(iter(self._first.values()))
            assert self._max_read < first, f"{self._segment}: max read {self._max_read} passes open txn at {first}"
        assert self._recovered_open <= {t for t, s in self._txns.items() if s is TxnStatus.OPEN}
