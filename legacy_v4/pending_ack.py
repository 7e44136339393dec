"""Pulsar's ``PendingAckHandleImpl`` over an ``MLPendingAckStore``: transactional acks of one
subscription, logged to a sibling ledger ``<topic>-<sub>__transaction_pending_ack``.

The log holds ACK, COMMIT and ABORT records. It is created on first use (a transactional ack
or an END_TXN_ON_SUBSCRIPTION; ``initPendingAckStore``) and replayed on recovery from its
cursor. Log trimming follows ``MLPendingAckStore.clearUselessLogData``: every
``pending_ack_log_index_min_lag`` records the store remembers (largest acked position so far ->
log position); once the subscription's mark-delete passes that position, the log's cursor
mark-deletes up to the log position and whole ledgers before it are trimmed.

The conflict rules and the in-memory state are :class:`engine.pending_acks.PendingAcks`.
"""

from __future__ import annotations

from typing import Iterable

from engine.capacity import IO_THREAD
from engine.counters import Counters
from engine.cursor import Cursor
from engine.errors import LedgerError, TxnConflict
from engine.ids import Design, TxnID
from engine.ledger import LedgerFactory, ManagedLedger
from engine.pending_acks import PendingAcks
from engine.ports import AckKind, CursorPort, EngineContext, PendingAckStore, RecoveryStats, TxnAction
from engine.records import EARLIEST, EntryData, Position
from legacy_v4.buffer import LivenessCheck, ParticipantClosed
from legacy_v4.codec import pos_in, pos_out, txn_in, txn_out
from legacy_v4.options import V4Options

PENDING_ACK_SUFFIX = "__transaction_pending_ack"
LOG_CURSOR = "__pending_ack_log"


def pending_ack_ledger_name(ledger_name: str, subscription: str) -> str:
    """``MLPendingAckStore.getTransactionPendingAckStoreSuffix``: ``<topic>-<sub>__transaction_pending_ack``."""
    return f"{ledger_name}-{subscription}{PENDING_ACK_SUFFIX}"


class MLPendingAckStore(PendingAckStore):
    """Counters: ``log_creations``, ``appends`` (``.ack``, ``.commit``, ``.abort``), ``conflicts`` (each also one
    ``appends.ack``), ``lwm_aborts``, ``log_trimmed_entries``, ``recovery_entries_replayed``,
    ``recovery_acks_dropped`` (logged ACK records that conflict on replay), ``commit_cursor_writes``
    (commits that waited for the cursor's ledger write)."""

    def __init__(
        self,
        ledger: ManagedLedger,
        subscription: str,
        cursor: CursorPort,
        ctx: EngineContext,
        options: V4Options,
        is_live: LivenessCheck | None = None,
    ) -> None:
        self._where = f"{ledger.name} [{subscription}]"
        self._ledgers: LedgerFactory = ctx.ledgers
        self._sched = ctx.scheduler
        self._meter = ctx.meter  # bills an ack's log append, the recovery reads and a commit's cursor write
        self._log_name = pending_ack_ledger_name(ledger.name, subscription)
        self._cursor = cursor
        self._opts = options
        self._is_live = is_live
        self._acks = PendingAcks(cursor, self._where)
        self._log: ManagedLedger | None = None
        self._log_cursor: Cursor | None = None
        self._index: list[tuple[Position, Position]] = []  # (max acked position, log position)
        self._max_ack = EARLIEST
        self._lag = 0
        self._lwm: dict[int, int] = {}
        self._closed = False
        self._recovery: RecoveryStats | None = None
        self.stats = Counters()

    @property
    def log_name(self) -> str:
        return self._log_name

    def _open(self, create: bool) -> ManagedLedger | None:
        if self._log is None:
            exists = self._ledgers.exists(self._log_name)
            if not create and not exists:
                return None
            if not exists:
                self._bill_creation()
            self._log = self._ledgers.open(self._log_name)
            self._log_cursor = Cursor(self._log, LOG_CURSOR)
        return self._log

    def _bill_creation(self) -> None:
        """The log's creation, which the op that needs it waits for (PendingAckHandleImpl parks a
        subscription's first txn ack until initPendingAckStore completes), one call after another:
        ``MLPendingAckStoreProvider.newPendingAckStore`` looks the ledger up (``asyncExists``) and
        opens it. ``ManagedLedgerImpl.initialize`` reads and creates its info
        (``MetaStoreImpl.getManagedLedgerInfo``). A BookKeeper ledger: ``PulsarLedgerIdGenerator``
        puts and deletes an id node, ``PulsarLedgerManager`` puts its metadata. The info is updated
        with it (``asyncUpdateLedgerIds``) and the cursors listed (``initializeCursors``). Then
        ``asyncOpenCursor`` puts the new cursor's info (``ManagedCursorImpl.initialize``)."""
        bill = self._meter.bill
        bill("meta.read", times=2)
        bill("meta.write", "metadata", IO_THREAD, 4)  # the info; the id node, put and deleted; the ledger's
        bill("meta.cas", "metadata", IO_THREAD)
        bill("meta.list")
        bill("meta.write", "metadata", IO_THREAD)  # the cursor's info
        self.stats["log_creations"] += 1

    def _append(self, op: str, txn: TxnID, **fields: object) -> Position:
        if self._closed:
            raise ParticipantClosed(f"pending-ack store of {self._where} is closed")
        log = self._open(create=True)
        assert log is not None
        record: dict[str, object] = {"op": op, "txn": txn_out(txn), **fields}
        trimmed = log.stats["trimmed_entries"]
        pos = log.append(EntryData(size=32, publish_ts_us=self._sched.now_us(), payload=record))
        if log.stats["trimmed_entries"] != trimmed:  # a rollover trimmed consumed ledgers (trims_consumed)
            self.stats["log_trimmed_entries"] += log.stats["trimmed_entries"] - trimmed
        self.stats["appends"] += 1
        self.stats[f"appends.{op}"] += 1
        return pos

    # -- acks ----------------------------------------------------------------------------------

    def ack(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        txn.require(Design.V4)
        # PendingAckHandleImpl appends the ACK record first (appendIndividualAck /
        # appendCumulativeAck) and checks for conflicts in the append's callback: a conflicting
        # ack costs a log entry, dropped again on replay (PendingAcks.recover).
        log_pos = self._append("ack", txn, kind=kind.value, positions=[pos_out(p) for p in positions])
        # the ack's answer waits for that append (MLPendingAckStore.appendIndividualAck's callback)
        self._meter.bill("ledger.append", "bookie", self._log_name)
        self._index_record(log_pos, positions)
        try:
            self._acks.check(txn, positions, kind)
        except TxnConflict:
            self.stats["conflicts"] += 1
            self._clear_useless_log_data()
            raise
        self._acks.apply(txn, positions, kind)
        self._clear_useless_log_data()

    def is_pending(self, position: Position) -> bool:
        return position in self._acks.individual  # PendingAcks.is_pending, inlined (per dispatched entry)

    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
        if self._acks.individual:  # nothing pending: nothing to clear (per plain ack)
            self._acks.on_non_txn_ack(positions)

    def pending_txns(self) -> list[TxnID]:
        return self._acks.txns()

    # -- END_TXN_ON_SUBSCRIPTION -----------------------------------------------------------------

    def end_txn(self, txn: TxnID, action: TxnAction, low_water_mark: int) -> None:
        txn.require(Design.V4)
        # internalCommitTxn / internalAbortTxn: handleLowWaterMark runs after either, when the
        # txn held individual acks here (PendingAckHandleImpl, D21).
        had_individual = self._acks.has_individual(txn)
        if action is TxnAction.COMMIT:
            self._append("commit", txn)
            persisted = self._cursor.persisted
            self._acks.commit(txn)
            if self._cursor.persisted != persisted:
                # internalCommitTxn answers once acknowledgeMessageAsync completes: after the
                # cursor's ledger write when the mark-delete limiter granted one (engine.cursor)
                self._meter.bill("ledger.append", "bookie", f"{self._where} cursor")
                self.stats["commit_cursor_writes"] += 1
        else:
            self._append("abort", txn)
            self._acks.abort(txn)
        if had_individual:
            self._handle_low_water_mark(txn, low_water_mark)
        self._clear_useless_log_data()

    def _handle_low_water_mark(self, txn: TxnID, lwm: int) -> None:
        """``handleLowWaterMark``: raise the coordinator's mark; abort the oldest txn holding
        individual acks if it is at or below it. That abort runs ``internalAbortTxn``, which
        calls ``handleLowWaterMark`` again once the Semaphore(1) is released, so stale txns are
        aborted one after another (a chain, as in the transaction buffer)."""
        old = self._lwm.get(txn.most_bits)
        if old is None or old < lwm:
            self._lwm[txn.most_bits] = lwm
        while (first := self._acks.first_individual()) is not None:
            mark = self._lwm.get(first.most_bits)
            if mark is None or first.least_bits > mark:
                return
            self.stats["lwm_aborts"] += 1
            try:
                self._append("abort", first)
            except LedgerError:
                return  # logged and dropped in Pulsar; the next end-txn tries again
            self._acks.abort(first)

    # -- log trimming ----------------------------------------------------------------------------

    def _index_record(self, log_pos: Position, positions: list[Position]) -> None:
        self._lag += 1
        if positions:
            top = max(positions)
            if top > self._max_ack:
                self._max_ack = top
        if self._lag >= self._opts.pending_ack_log_index_min_lag and self._max_ack != EARLIEST:
            if self._index and self._index[-1][0] == self._max_ack:
                self._index[-1] = (self._max_ack, log_pos)
            else:
                self._index.append((self._max_ack, log_pos))
            self._lag = 0

    def _clear_useless_log_data(self) -> None:
        mark_delete = self._cursor.mark_delete
        delete: Position | None = None
        while self._index and self._index[0][0] <= mark_delete:
            delete = self._index.pop(0)[1]
        if delete is None or self._log is None or self._log_cursor is None:
            return
        trimmed = self._log.stats["trimmed_entries"]
        self._log_cursor.ack_cumulative(delete)  # a ledger that trims_consumed trims here already
        self._log.trim(self._log.next_position(self._log_cursor.mark_delete))
        self.stats["log_trimmed_entries"] += self._log.stats["trimmed_entries"] - trimmed

    # -- recovery --------------------------------------------------------------------------------

    def recover(self) -> None:
        log = self._open(create=False)
        if log is None:
            self._recovery = RecoveryStats("pending-ack", 0)
            return
        assert self._log_cursor is not None
        log_cursor = self._log_cursor
        lac = log.last_confirmed()
        start = log.next_position(log_cursor.mark_delete)
        batch = self._opts.recovery_read_batch
        replayed = reads = 0
        while start <= lac:
            entries = log.read(start, lac, batch)
            reads += 1
            if not entries:
                break
            for entry in entries:
                if log_cursor.is_acked(entry.position):
                    continue
                replayed += 1
                payload = entry.data.payload
                assert payload is not None
                self._replay(entry.position, dict(payload))
            start = log.next_position(entries[-1].position)
        self.stats["recovery_entries_replayed"] += replayed
        # each read of the log, as the loop issues them (skipped, acked entries are read too)
        modelled = self._meter.took("ledger.read", "bookie", self._log_name, times=reads) if reads else 0
        self._recovery = RecoveryStats("pending-ack", entries_replayed=replayed, modelled_us=modelled)
        self._clear_useless_log_data()

    def _replay(self, log_pos: Position, record: dict[str, object]) -> None:
        txn = txn_in(record["txn"])  # type: ignore[arg-type]
        op = record["op"]
        if op == "ack":
            raw = record["positions"]
            assert isinstance(raw, list)
            positions = [pos_in(p) for p in raw]
            kind = AckKind(record["kind"])
            if not self._acks.recover(txn, positions, kind):
                self.stats["recovery_acks_dropped"] += 1
            self._index_record(log_pos, positions)
        elif op == "commit":
            self._acks.commit(txn)
        elif op == "abort":
            self._acks.abort(txn)

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery

    def close(self) -> None:
        self._closed = True
        if self._log is not None:
            self._log.close()

    def check(self) -> None:
        self._acks.check_invariants()
        if self._is_live is not None:
            for txn in self._acks.txns():
                assert self._is_live(txn), f"{self._where}: finished txn {txn} still holds pending acks"
