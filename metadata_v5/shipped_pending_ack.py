"""MetadataPendingAckStore as Pulsar 5.0.1 ships it (``Variant.SHIPPED``; PULSAR5_CODE.md D2, D14,
D16). Line numbers are ``MetadataPendingAckStore``'s in 5.0.1 unless named.

* Ack (``appendAcks`` L210-240): one op record per position, no header read, written *before* the
  conflict checks (``PendingAckHandleImpl`` L240-257): a conflicting ack still leaves its records.
* Wake-up (``triggerReconcile`` L259-284): an event on the (segment, subscription) sequence makes
  the store read the header of every txn it tracks as OPEN; each terminal one is applied (cursor
  ack, or the positions become redeliverable), then its records are found by a scan of
  ``acks-by-segment-subscription`` and deleted one by one.
* Recovery (``replayAsync`` L109-193) collects only **txn ids** from that index and reads their
  headers; pending positions are not restored (nothing calls ``handleIndividualAckRecover``), so
  after a restart acks pending in open txns no longer hold their messages back, and a commit
  that was not yet applied acks nothing (``PendingAckHandleImpl`` L507/L522): the messages are
  redelivered. Every segment subscription pays the scan at load
  (``MetadataPendingAckStoreProvider.checkInitializedBefore`` L46 is always true).
"""

from __future__ import annotations

from typing import Iterable

from engine.counters import Counters
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.pending_acks import PendingAcks
from engine.ports import AckKind, CursorPort, EngineContext, PendingAckStore, RecoveryStats, TxnStatus
from engine.records import Position
from metadata_v5.options import V5Options
from metadata_v5.txnrecords import EVENT, LOAD, Op, TxnRecords


class ShippedPendingAckStore(PendingAckStore):
    def __init__(self, ctx: EngineContext, records: TxnRecords, ledger: ManagedLedger, subscription: str,
                 cursor: CursorPort, opts: V5Options) -> None:
        self._meter = ctx.meter  # bills every store call (the records are metered)
        self._sched = ctx.scheduler
        self._records = records
        self._segment = ledger.name
        self._sub = subscription
        self._where = f"{ledger.name} [{subscription}]"
        self.stats = Counters()
        self._pending = PendingAcks(cursor, self._where)
        self._txns: dict[TxnID, TxnStatus] = {}  # tracked txns, OPEN until applied
        self._applying: set[TxnID] = set()
        self._recovery: RecoveryStats | None = None
        self._closed = False

    def ack(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        txn.require(Design.V5)
        for pos in positions:  # the records first, whatever the checks say
            self._records.add_op(txn, Op("ack", self._segment, pos, self._sub, kind))
        self.stats["op_writes"] += len(positions)
        self._txns.setdefault(txn, TxnStatus.OPEN)
        self._pending.check(txn, positions, kind)
        self._pending.apply(txn, positions, kind)

    def is_pending(self, position: Position) -> bool:
        return self._pending.is_pending(position)

    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
        self._pending.on_non_txn_ack(positions)

    def _on_event(self) -> None:
        if self._closed:
            return
        if self._records.put_off(EVENT, self._sched.call_later, self._on_event):  # as the buffer's
            return
        self.stats["events"] += 1
        tracked = [t for t, s in self._txns.items() if s is TxnStatus.OPEN]
        decided = []
        with self._meter.batch() as took, self._records.on(EVENT):  # triggerReconcile L259-284: the reads issued at once
            for txn in tracked:
                header = self._records.get_header(txn)
                state = TxnStatus.ABORTED if header is None else header.state
                if state is not TxnStatus.OPEN and txn not in self._applying:
                    decided.append((txn, state))
                    self._applying.add(txn)
        self.stats["reconcile_header_reads"] += len(tracked)
        if decided:
            self._sched.call_later(took.us, self._apply_all, decided)

    def _apply_all(self, decided: list[tuple[TxnID, TxnStatus]]) -> None:
        if self._records.put_off(EVENT, self._sched.call_later, self._apply_all, decided):
            return
        with self._records.on(EVENT):
            for txn, state in decided:
                self._apply_terminal(txn, state)

    def _apply_terminal(self, txn: TxnID, state: TxnStatus) -> None:
        self._applying.discard(txn)
        if self._closed or self._txns.get(txn) is not TxnStatus.OPEN:
            return
        if state is TxnStatus.COMMITTED:
            self._pending.commit(txn)  # a txn the handle does not know (recovered): acks nothing
        else:
            self._pending.abort(txn)
        self._txns.pop(txn)  # nothing here needs the decision any more
        mine = self._records.acks_scan(self._segment, self._sub, txn)
        self.stats["cleanup_scans"] += 1
        for rec in mine:
            self._records.delete_op(rec)
        self.stats["op_deletes"] += len(mine)
        self.stats["materialised." + state.value] += 1

    def recover(self) -> None:
        self._records.watch_participant_events(self._segment, self._sub, self, self._on_event)
        with self._meter.tab() as took, self._records.on(LOAD):  # replayAsync: the scan, then every header at once
            recs = self._records.acks_scan(self._segment, self._sub)
            txns = sorted({r.txn for r in recs})  # txn ids only: the positions stay behind
            states = {}
            with self._meter.batch():  # FutureUtil.waitForAll
                for txn in txns:
                    header = self._records.get_header(txn)
                    states[txn] = TxnStatus.ABORTED if header is None else header.state
                    self._txns.setdefault(txn, TxnStatus.OPEN)
        self.stats["recovery_header_reads"] += len(txns)
        self.stats["recovered_txns"] += len(txns)
        self._recovery = RecoveryStats(f"pending-ack-v5:{self._segment}[{self._sub}]",
                                       records_read=len(recs) + len(txns), queries=1, modelled_us=took.us)
        decided = [(t, s) for t, s in states.items() if s is not TxnStatus.OPEN]
        self._applying.update(t for t, _ in decided)
        if decided:
            self._sched.call_later(took.us, self._apply_all, decided)

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery

    def close(self) -> None:
        self._closed = True

    def check(self) -> None:
        self._pending.check_invariants()
        for txn in self._pending.by_txn:
            assert self._txns.get(txn) is TxnStatus.OPEN, f"{self._where}: {txn} has pending acks but is not open"
