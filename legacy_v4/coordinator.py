"""The v4 transaction coordinator: Pulsar's ``MLTransactionMetadataStore`` (state + the
``__transaction_log_<tcId>`` ledger) with the end-txn driver of ``TransactionMetadataStoreService``
and the ``TransactionTimeoutTracker``.

Transaction log (one record per entry, as ``TransactionMetadataEntry``):
NEW, one ADD_PARTITION per produced partition, one ADD_SUBSCRIPTION per acked (partition,
subscription), UPDATE OPEN->COMMITTING/ABORTING, UPDATE ->COMMITTED/ABORTED: ``3 + k`` entries.
When a txn finishes, all its entries are deleted on the log's cursor (``deletePosition``) and
whole ledgers behind the cursor's mark-delete are trimmed, so recovery (``replayAsync``) reads
only live txns' entries. Every record carries ``max_local_txn_id``; the sequence is recovered
from the last entry (``MLTransactionSequenceIdGenerator``), starting at 0.

End-txn (``endTransaction`` / ``endTxnInTransactionBuffer``): UPDATE to COMMITTING/ABORTING,
then END_TXN_ON_SUBSCRIPTION and END_TXN_ON_PARTITION to every participant in parallel with the
low-water mark (smallest live sequence - 1; 0 when none, ``getLowWaterMark``); when all have
answered and all succeeded, UPDATE to COMMITTED/ABORTED and answer the client. Each RPC fails
after ``end_txn_rpc_timeout_ms``; any failure repeats the whole end step after
``end_txn_retry_interval_ms`` (Pulsar treats managed-ledger, timeout and not-ready errors as
retryable and retries without bound).

Modelled time: a log append is durable when the synchronous call returns, and the step that
waits for it continues ``ledger.append`` later. An RPC's handler runs when the request has
travelled (``rpc.broker``: the coordinator's broker sends it on its own client,
``TransactionBufferClientImpl``) and the participant's write has completed (``ledger.append``);
its answer travels back (``rpc.broker``). The client hears the outcome ``ledger.append + rpc``
after the final UPDATE was appended.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from engine.clock import Scope, Timer
from engine.counters import Counters
from engine.cursor import Cursor
from engine.errors import InvalidTxnState, TxnbenchError, TxnNotFound, TxnTimeout
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.ports import (
    EndTxnCallback,
    EngineContext,
    RecoveryStats,
    TransactionCoordinator,
    TxnAction,
    TxnStatus,
)
from engine.records import EntryData, Position
from legacy_v4.buffer import ParticipantNotReady
from legacy_v4.options import V4Options

LOG_CURSOR = "transaction.subscription"  # MLTransactionLogImpl's cursor name


def transaction_log_name(tc_id: int) -> str:
    return f"persistent://pulsar/system/__transaction_log_{tc_id}"


_ENDING = {TxnAction.COMMIT: TxnStatus.COMMITTING, TxnAction.ABORT: TxnStatus.ABORTING}
_FINAL = {TxnStatus.COMMITTING: TxnStatus.COMMITTED, TxnStatus.ABORTING: TxnStatus.ABORTED}
_ACTION = {TxnStatus.COMMITTING: TxnAction.COMMIT, TxnStatus.ABORTING: TxnAction.ABORT}


@dataclass
class TxnMeta:
    """``TxnMetaImpl`` plus the log positions of its records."""

    id: TxnID
    status: TxnStatus
    start_us: int
    timeout_ms: int
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    log_positions: list[Position] = field(default_factory=list)
    timed_out: bool = False
    waiters: list[EndTxnCallback] = field(default_factory=list)
    ending: bool = False  # an end step is scheduled or in flight
    retries: int = 0


@dataclass
class _Round:
    """One fan-out of END_TXN RPCs."""

    pending: int
    failed: int = 0


class V4TransactionCoordinator(TransactionCoordinator):
    """One coordinator ``tc_id``. Counters: ``log_appends`` (``.new``, ``.add_partition``,
    ``.add_subscription``, ``.update``), ``log_deleted_entries``, ``log_trimmed_entries``,
    ``txns.created``, ``txns.committed``, ``txns.aborted``, ``txns.timed_out``,
    ``end_txn.rpcs_sent`` (``.partition``, ``.subscription``), ``end_txn.rpcs_failed``,
    ``end_txn.rpcs_timed_out``, ``end_txn.rpcs_waited_not_ready``, ``end_txn.retries``,
    ``end_txn.gave_up``, ``recovery_entries_replayed``, ``recovery_redriven``."""

    design = Design.V4

    def __init__(self, tc_id: int, ctx: EngineContext, options: V4Options) -> None:
        self.tc_id = tc_id
        self._ctx = ctx
        self._scope = Scope(ctx.scheduler)
        self._opts = options
        self._meter = ctx.meter  # bills every log append/read and RPC hop (engine/metering.py)
        self.stats = Counters()
        self._log: ManagedLedger | None = None
        self._log_cursor: Cursor | None = None
        self._seq = -1  # MLTransactionSequenceIdGenerator: incrementAndGet from -1
        self._txns: dict[int, TxnMeta] = {}  # by sequence, in creation order (txnMetaMap)
        self._deadlines: list[tuple[int, int]] = []  # (deadline_us, seq) heap
        self._tick: Timer | None = None
        self._tick_at: int | None = None
        self._recovery: RecoveryStats | None = None
        self._closed = False

    # -- the log --------------------------------------------------------------------------------

    @property
    def log_name(self) -> str:
        return transaction_log_name(self.tc_id)

    def _append(self, meta: TxnMeta, op: str, **fields: object) -> Position:
        assert self._log is not None
        now = self._scope.now_us()
        record: dict[str, object] = {
            "op": op,
            "tc": self.tc_id,
            "txn": meta.id.least_bits,
            "max_local_txn_id": self._seq,
            "ts_us": now,
            **fields,
        }
        log_stats = self._log.stats
        trimmed = log_stats["trimmed_entries"]
        pos = self._log.append(EntryData(size=48, publish_ts_us=now, payload=record))
        self._meter.bill("ledger.append", "bookie", self._log.name)
        if log_stats["trimmed_entries"] != trimmed:  # a rollover trimmed consumed ledgers (trims_consumed)
            self.stats["log_trimmed_entries"] += log_stats["trimmed_entries"] - trimmed
        meta.log_positions.append(pos)
        self.stats["log_appends"] += 1
        self.stats["log_appends." + op] += 1
        return pos

    def _delete_positions(self, positions: list[Position]) -> None:
        """``MLTransactionLogImpl.deletePosition``: individual deletes on the log cursor; ledgers
        entirely behind its mark-delete are trimmed (by the ledger itself where it
        ``trims_consumed``, as Pulsar's managed ledger does; explicitly otherwise).
        ``log_trimmed_entries`` counts what left the log either way."""
        assert self._log is not None and self._log_cursor is not None
        log_stats = self._log.stats
        trimmed = log_stats["trimmed_entries"]
        self._log_cursor.ack_individual(sorted(positions))
        self.stats["log_deleted_entries"] += len(positions)
        self._log.trim(self._log.next_position(self._log_cursor.mark_delete))
        self.stats["log_trimmed_entries"] += log_stats["trimmed_entries"] - trimmed

    # -- client API -----------------------------------------------------------------------------

    def _get(self, txn: TxnID) -> TxnMeta:
        txn.require(Design.V4)
        if self._closed:
            raise TxnNotFound(f"coordinator {self.tc_id} is closed")
        if txn.most_bits != self.tc_id:
            raise TxnNotFound(f"txn {txn} does not belong to coordinator {self.tc_id}")
        meta = self._txns.get(txn.least_bits)
        if meta is None:
            raise TxnNotFound(f"coordinator {self.tc_id} knows no txn {txn} (never opened, or already ended)")
        return meta

    @staticmethod
    def _not_open(meta: TxnMeta, what: str) -> InvalidTxnState:
        if meta.timed_out:
            return TxnTimeout(f"txn {meta.id} was aborted by its timeout; cannot {what}")
        return InvalidTxnState(f"txn {meta.id} is {meta.status.value}; cannot {what}")

    def new_txn(self, timeout_ms: int) -> TxnID:
        if self._closed:
            raise TxnNotFound(f"coordinator {self.tc_id} is closed")
        self._seq += 1
        now = self._scope.now_us()
        meta = TxnMeta(TxnID(Design.V4, self.tc_id, self._seq), TxnStatus.OPEN, now, int(timeout_ms))
        self._append(meta, "new", timeout_ms=int(timeout_ms), start_us=now)
        self._txns[self._seq] = meta
        self.stats["txns.created"] += 1
        self._track_timeout(meta)
        return meta.id

    def add_produced_partition(self, txn: TxnID, ledger: str) -> None:
        meta = self._txns.get(txn.least_bits)
        if (  # the common case: a registered partition of an open txn of ours (checks of _get)
            meta is not None and meta.status is TxnStatus.OPEN and ledger in meta.partitions
            and txn.design is Design.V4 and txn.most_bits == self.tc_id and not self._closed
        ):
            return
        meta = self._get(txn)
        if meta.status is not TxnStatus.OPEN:
            raise self._not_open(meta, f"publish to {ledger}")
        if ledger in meta.partitions:  # the client registers each partition once per txn
            return
        # The producer's send waits for addPublishPartitionToTxn (billed to the publish's open request)
        self._register(meta, "add_partition", partition=ledger)
        meta.partitions.append(ledger)

    def add_acked_subscription(self, txn: TxnID, ledger: str, subscription: str) -> None:
        meta = self._get(txn)
        if meta.status is not TxnStatus.OPEN:
            raise self._not_open(meta, f"ack on {ledger} [{subscription}]")
        if (ledger, subscription) in meta.subscriptions:
            return
        # The consumer's txn ack waits for addSubscriptionToTxn (TransactionImpl.registerAckedTopic;
        # billed to the ack's open request)
        self._register(meta, "add_subscription", partition=ledger, subscription=subscription)
        meta.subscriptions.append((ledger, subscription))

    def _register(self, meta: TxnMeta, op: str, **fields: object) -> None:
        """A client's registration of a participant: a round trip to the TC, whose single thread
        handles it, and its log append."""
        bill = self._meter.bill
        bill("rpc")
        self._meter.serve("coordinator")
        bill("coordinator.v4")
        self._append(meta, op, **fields)
        bill("rpc")

    def status(self, txn: TxnID) -> TxnStatus:
        return self._get(txn).status

    def is_live(self, txn: TxnID) -> bool:
        """True while the coordinator still tracks ``txn`` (open or ending)."""
        return txn.design is Design.V4 and txn.most_bits == self.tc_id and txn.least_bits in self._txns

    def low_water_mark(self) -> int:
        """``getLowWaterMark``: smallest live sequence - 1, or 0 with no live txn."""
        return next(iter(self._txns)) - 1 if self._txns else 0

    def end_txn(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None = None) -> None:
        self._end(txn, action, on_done, request=True)

    def _end(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None, request: bool) -> None:
        """END_TXN from the client (``request``: its hop to the broker first, ``ServerCnx.handleEndTxn``)
        or the coordinator's own timeout abort (``endTransactionForTimeout``: no hop)."""
        meta = self._get(txn)
        ending = _ENDING[TxnAction(action)]
        with self._meter.tab() as took:  # the end step waits for the TC and its log update
            if request:
                self._meter.bill("rpc")
            self._meter.serve("coordinator")
            if request:
                self._meter.bill("coordinator.v4")
            if meta.status is TxnStatus.OPEN:
                self._append(meta, "update", expected=TxnStatus.OPEN.value, new=ending.value)
                meta.status = ending
            elif meta.status is not ending:  # fakeAsyncCheckTxnStatus
                raise self._not_open(meta, action.value)
        if on_done is not None:
            meta.waiters.append(on_done)
        if not meta.ending:  # a repeated request joins the end step in flight
            meta.ending = True
            self._scope.call_later(took.us, self._end_step, meta)

    # -- the end step ---------------------------------------------------------------------------

    def _end_step(self, meta: TxnMeta) -> None:
        if self._txns.get(meta.id.least_bits) is not meta:
            return
        action = _ACTION[meta.status]
        lwm = self.low_water_mark()
        targets: list[tuple[str, str | None]] = [(p, s) for p, s in meta.subscriptions]
        targets += [(p, None) for p in meta.partitions]
        if not targets:
            self._finish(meta)
            return
        rnd = _Round(len(targets))
        deadline = self._scope.now_us() + self._opts.end_txn_rpc_timeout_ms * 1000
        for ledger, sub in targets:
            self.stats["end_txn.rpcs_sent"] += 1
            self.stats["end_txn.rpcs_sent." + ("partition" if sub is None else "subscription")] += 1
            # the END_TXN RPC and the participant's marker (or pending-ack log) append; the RPC
            # goes on the broker's own client (TransactionBufferClientImpl), so its hops are
            # ``rpc.broker``, not the client's ``rpc``
            with self._meter.tab() as took:
                self._meter.bill("rpc.broker")
                self._meter.bill("ledger.append", "bookie", ledger)
            self._scope.call_later(took.us, self._rpc, meta, rnd, ledger, sub, action, lwm, deadline)

    def _rpc(
        self, meta: TxnMeta, rnd: _Round, ledger: str, sub: str | None, action: TxnAction, lwm: int, deadline: int
    ) -> None:
        participants = self._ctx.participants
        try:
            with self._meter.tab() as applied:  # what the participant waits for before it answers
                if sub is None:
                    participants.end_txn_on_partition(ledger, meta.id, action, lwm)
                else:
                    participants.end_txn_on_subscription(ledger, sub, meta.id, action, lwm)
        except ParticipantNotReady as e:
            if e.ready_at_us < deadline:  # the request waits for the participant's recovery
                self.stats["end_txn.rpcs_waited_not_ready"] += 1
                self._scope.call_at(e.ready_at_us, self._rpc, meta, rnd, ledger, sub, action, lwm, deadline)
            else:
                self.stats["end_txn.rpcs_timed_out"] += 1
                self._scope.call_at(deadline, self._answer, meta, rnd, False)
            return
        except TxnbenchError:
            self._scope.call_later(self._meter.took("rpc.broker"), self._answer, meta, rnd, False)
            return
        self._scope.call_later(applied.us + self._meter.took("rpc.broker"), self._answer, meta, rnd, True)

    def _answer(self, meta: TxnMeta, rnd: _Round, ok: bool) -> None:
        rnd.pending -= 1
        if not ok:
            rnd.failed += 1
            self.stats["end_txn.rpcs_failed"] += 1
        if rnd.pending:
            return
        if not rnd.failed:
            self._finish(meta)
            return
        limit = self._opts.end_txn_max_retries
        if limit is not None and meta.retries >= limit:
            self.stats["end_txn.gave_up"] += 1
            meta.ending = False
            self._answer_client(meta, meta.status)
            return
        meta.retries += 1
        self.stats["end_txn.retries"] += 1
        self._scope.call_later(self._opts.end_txn_retry_interval_ms * 1000, self._end_step, meta)

    def _finish(self, meta: TxnMeta) -> None:
        final = _FINAL[meta.status]
        with self._meter.tab() as took:
            self._append(meta, "update", expected=meta.status.value, new=final.value)
        meta.status = final
        del self._txns[meta.id.least_bits]
        self._delete_positions(meta.log_positions)
        self.stats["txns.committed" if final is TxnStatus.COMMITTED else "txns.aborted"] += 1
        self._answer_client(meta, final, took.us)

    def _answer_client(self, meta: TxnMeta, status: TxnStatus, logged_us: int = 0) -> None:
        """Answer every waiter once the final log update (``logged_us``, none when giving up)
        is written: one answer hop each."""
        waiters, meta.waiters = meta.waiters, []
        for cb in waiters:
            self._scope.call_later(logged_us + self._meter.took("rpc"), cb, meta.id, status)

    # -- timeouts -------------------------------------------------------------------------------

    def _track_timeout(self, meta: TxnMeta) -> None:
        deadline = meta.start_us + meta.timeout_ms * 1000
        heapq.heappush(self._deadlines, (deadline, meta.id.least_bits))
        self._arm_tick()

    def _arm_tick(self) -> None:
        if not self._deadlines or self._closed:
            return
        tick = self._opts.timeout_tick_ms * 1000
        at = max(-(-self._deadlines[0][0] // tick) * tick, self._scope.now_us())  # next tick at/after it
        if self._tick is not None and self._tick_at is not None and self._tick_at <= at:
            return
        if self._tick is not None:
            self._tick.cancel()
        self._tick_at = at
        self._tick = self._scope.call_at(at, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = self._tick_at = None
        now = self._scope.now_us()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq = heapq.heappop(self._deadlines)
            meta = self._txns.get(seq)
            if meta is not None and meta.status is TxnStatus.OPEN:  # endTransactionForTimeout
                meta.timed_out = True
                self.stats["txns.timed_out"] += 1
                self._end(meta.id, TxnAction.ABORT, None, request=False)
        self._arm_tick()

    # -- recovery -------------------------------------------------------------------------------

    def recover(self) -> None:
        log = self._log = self._ctx.ledgers.open(self.log_name)
        cursor = self._log_cursor = Cursor(log, LOG_CURSOR)
        batch = self._opts.recovery_read_batch
        lac = log.last_confirmed()
        replayed = reads = 0
        if lac.entry_id >= 0:  # onManagedLedgerLastLedgerInitialize: the last entry's max id
            last = log.read(lac, lac, 1)
            reads += 1
            replayed += len(last)
            if last and last[0].data.payload is not None:
                self._seq = int(last[0].data.payload["max_local_txn_id"])
        start = log.next_position(cursor.mark_delete)
        while start <= lac:
            entries = log.read(start, lac, batch)
            reads += 1
            if not entries:
                break
            for entry in entries:
                if cursor.is_acked(entry.position):
                    continue  # deleted: a managed cursor skips it without reading
                replayed += 1
                assert entry.data.payload is not None
                self._replay(entry.position, dict(entry.data.payload))
            start = log.next_position(entries[-1].position)
        modelled = self._meter.took("ledger.read", "bookie", log.name, times=reads) if reads else 0
        self.stats["recovery_entries_replayed"] += replayed
        self._recovery = RecoveryStats("tc", entries_replayed=replayed, modelled_us=modelled)
        for meta in list(self._txns.values()):  # TransactionRecoverTracker
            if meta.status is TxnStatus.OPEN:
                self._track_timeout(meta)
            else:
                self.stats["recovery_redriven"] += 1
                meta.ending = True
                self._scope.call_later(modelled, self._end_step, meta)

    def _replay(self, pos: Position, rec: dict[str, object]) -> None:
        seq = int(rec["txn"])  # type: ignore[call-overload]
        op = rec["op"]
        meta = self._txns.get(seq)
        if op == "new":
            if meta is None:
                meta = TxnMeta(
                    TxnID(Design.V4, self.tc_id, seq),
                    TxnStatus.OPEN,
                    int(rec["start_us"]),  # type: ignore[call-overload]
                    int(rec["timeout_ms"]),  # type: ignore[call-overload]
                )
                self._txns[seq] = meta
            meta.log_positions.append(pos)
            return
        if meta is None:  # a record of a txn that is gone: delete it
            self._delete_positions([pos])
            return
        meta.log_positions.append(pos)
        if op == "add_partition":
            meta.partitions.append(str(rec["partition"]))
        elif op == "add_subscription":
            meta.subscriptions.append((str(rec["partition"]), str(rec["subscription"])))
        elif op == "update":
            meta.status = TxnStatus(rec["new"])
            if meta.status.final:
                del self._txns[seq]
                self._delete_positions(meta.log_positions)

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery

    def close(self) -> None:
        self._closed = True
        self._scope.close()
        if self._log is not None:
            self._log.close()

    # -- invariants -----------------------------------------------------------------------------

    def live(self) -> list[TxnMeta]:
        return list(self._txns.values())

    def check(self) -> None:
        """The port's name for :meth:`_check`."""
        self._check()

    def _check(self) -> None:
        """Invariants (``MLTransactionMetadataStore``'s txnMetaMap and its log):

        * live txns are kept in sequence order, none beyond the last sequence handed out: ids
          come from one counter and the map is insertion-ordered.
        * no live txn is final: a final state removes it (Pulsar drops finished txns).
        * each live txn's log records are all undeleted, and there is one per state change:
          the new-txn record, one per partition and subscription added, one for COMMITTING or
          ABORTING (the log cursor acks them only once the txn is gone).
        * the timeout heap holds a deadline for every live txn still OPEN (the tracker aborts
          from it; a stale entry for a finished one is skipped when it fires), and while it
          holds any a tick is armed (every push and every tick re-arms).
        """
        assert list(self._txns) == sorted(self._txns), f"tc {self.tc_id}: live txns out of sequence order"
        deadlined = {seq for _, seq in self._deadlines}
        for seq, meta in self._txns.items():
            if meta.status is TxnStatus.OPEN:
                assert seq in deadlined, f"tc {self.tc_id}: open txn {meta.id} has no timeout deadline"
        if self._deadlines and not self._closed:
            assert self._tick is not None and not self._tick.cancelled, f"tc {self.tc_id}: deadlines but no tick armed"
        cursor = self._log_cursor
        for seq, meta in self._txns.items():
            assert 0 <= seq <= self._seq, f"tc {self.tc_id}: txn {seq} beyond the sequence {self._seq}"
            assert not meta.status.final, f"tc {self.tc_id}: finished txn {meta.id} still live"
            assert meta.log_positions, f"tc {self.tc_id}: txn {meta.id} has no log record"
            if cursor is not None:
                for pos in meta.log_positions:
                    assert not cursor.is_acked(pos), f"tc {self.tc_id}: live txn {meta.id}'s record {pos} deleted"
            expected = 1 + len(meta.partitions) + len(meta.subscriptions) + (0 if meta.status is TxnStatus.OPEN else 1)
            assert len(meta.log_positions) == expected, (
                f"tc {self.tc_id}: txn {meta.id} has {len(meta.log_positions)} log records, expected {expected}"
            )


class V4CoordinatorService(TransactionCoordinator):
    """``TransactionMetadataStoreService``: every coordinator of the cluster behind one client
    endpoint. New txns go round-robin over coordinators; others route by the txn's high part."""

    design = Design.V4

    def __init__(self, ctx: EngineContext, options: V4Options) -> None:
        self._tcs = [V4TransactionCoordinator(i, ctx, options) for i in range(options.coordinators)]
        self._next = 0

    @property
    def coordinators(self) -> list[V4TransactionCoordinator]:
        return list(self._tcs)

    @property
    def stats(self) -> Counters:  # type: ignore[override]
        return Counters.merged(tc.stats for tc in self._tcs)

    def _tc(self, txn: TxnID) -> V4TransactionCoordinator:
        txn.require(Design.V4)
        if not 0 <= txn.most_bits < len(self._tcs):
            raise TxnNotFound(f"no coordinator {txn.most_bits} for txn {txn}")
        return self._tcs[txn.most_bits]

    def new_txn(self, timeout_ms: int) -> TxnID:
        tc = self._tcs[self._next]
        self._next = (self._next + 1) % len(self._tcs)
        return tc.new_txn(timeout_ms)

    def add_produced_partition(self, txn: TxnID, ledger: str) -> None:
        tcs = self._tcs
        if txn.design is Design.V4 and 0 <= txn.most_bits < len(tcs):  # _tc, inlined (per txn publish)
            tcs[txn.most_bits].add_produced_partition(txn, ledger)
        else:
            self._tc(txn).add_produced_partition(txn, ledger)

    def add_acked_subscription(self, txn: TxnID, ledger: str, subscription: str) -> None:
        self._tc(txn).add_acked_subscription(txn, ledger, subscription)

    def end_txn(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None = None) -> None:
        self._tc(txn).end_txn(txn, action, on_done)

    def status(self, txn: TxnID) -> TxnStatus:
        return self._tc(txn).status(txn)

    def is_live(self, txn: TxnID) -> bool:
        if txn.design is not Design.V4 or not 0 <= txn.most_bits < len(self._tcs):
            return False
        return self._tcs[txn.most_bits].is_live(txn)

    def recover(self) -> None:
        for tc in self._tcs:
            tc.recover()

    def recovery_stats(self) -> RecoveryStats | None:
        parts = [tc.recovery_stats() for tc in self._tcs]
        if any(p is None for p in parts):
            return None
        done = [p for p in parts if p is not None]
        return RecoveryStats(
            "tc",
            entries_replayed=sum(p.entries_replayed for p in done),
            modelled_us=max((p.modelled_us for p in done), default=0),
        )

    def close(self) -> None:
        for tc in self._tcs:
            tc.close()

    def check(self) -> None:
        """The port's name for :meth:`_check`."""
        self._check()

    def _check(self) -> None:
        """Each coordinator's invariants; the round-robin index names one of them."""
        assert 0 <= self._next < len(self._tcs), f"round-robin index {self._next} of {len(self._tcs)} coordinators"
        for tc in self._tcs:
            tc._check()

