"""MetadataPendingAckStore (PIP-473): transactional acks as op records indexed by
``(segment, subscription)``; applied to the cursor when the header watch (or the event record)
says COMMITTED, dropped on ABORTED. Recovery is one index query, no log replay. Conflict rules
are Pulsar's, shared with v4 (:mod:`engine.pending_acks`)."""

from __future__ import annotations

from typing import Iterable

from engine.counters import Counters
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.pending_acks import PendingAcks
from engine.ports import AckKind, CursorPort, EngineContext, PendingAckStore, RecoveryStats, TxnStatus
from engine.records import Position
from metadata_v5.headers import HeaderCache
from metadata_v5.options import V5Options, Variant
from metadata_v5.txnrecords import EVENT, Op, OpRecord, TxnRecords


class MetadataPendingAckStore(PendingAckStore):
    def __init__(self, ctx: EngineContext, records: TxnRecords, ledger: ManagedLedger, subscription: str,
                 cursor: CursorPort, opts: V5Options) -> None:
        self._meter = ctx.meter  # bills every store call (the records are metered)
        self._sched = ctx.scheduler
        self._records = records
        self._segment = ledger.name
        self._sub = subscription
        self._opts = opts
        where = f"{ledger.name} [{subscription}]"
        self.stats = Counters()
        self._pending = PendingAcks(cursor, where)
        self._headers = HeaderCache(records, self, where, self.stats, self._materialise,
                                    watch=opts.variant is Variant.PIP)
        self._owned: dict[TxnID, list[OpRecord]] = {}
        self._recovery: RecoveryStats | None = None
        self._closed = False

    def ack(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        txn.require(Design.V5)
        self._headers.require_open(txn)
        self._pending.check(txn, positions, kind)
        written = [
            self._records.add_op(txn, Op("ack", self._segment, pos, self._sub, kind)) for pos in positions
        ]
        self.stats["op_writes"] += len(written)
        self._owned.setdefault(txn, []).extend(written)
        self._pending.apply(txn, positions, kind)
        self._headers.track(txn)

    def is_pending(self, position: Position) -> bool:
        return self._pending.is_pending(position)

    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
        self._pending.on_non_txn_ack(positions)

    def _materialise(self, txn: TxnID, state: TxnStatus) -> None:
        with self._records.on(EVENT):  # the header watch fires on the store's notification thread
            self._materialise_now(txn, state)

    def _materialise_now(self, txn: TxnID, state: TxnStatus) -> None:
        if self._closed:
            return
        if state is TxnStatus.COMMITTED:
            self._pending.commit(txn)
        else:
            self._pending.abort(txn)
        owned = self._owned.pop(txn, [])
        if owned:
            self._records.delete_ops(owned)
            self.stats["op_deletes"] += len(owned)
        if self._opts.variant is Variant.STATE_EVENTS:
            self._records.delete_event(self._segment, self._sub, txn)
        self.stats["materialised." + state.value] += 1
        # Nothing here needs the decision any more (the acks are applied or dropped; a repeated
        # decision finds no owned records, a late ack reads the header): keep the cache bounded
        # by the open txns.
        self._headers.forget(txn)

    def _on_event(self, txn: TxnID, state: TxnStatus) -> None:
        self.stats["watch_events"] += 1
        if txn in self._owned:
            self._headers.final(txn, state)
        else:
            with self._records.on(EVENT):
                self._records.delete_event(self._segment, self._sub, txn)

    def recover(self) -> None:
        with self._meter.tab() as took:  # the scan(s), the headers at once
            records = self._records.acks_on(self._segment, self._sub)
            queries = 1
            by_txn: dict[TxnID, list[OpRecord]] = {}
            for rec in records:
                by_txn.setdefault(rec.txn, []).append(rec)
            headers_read = 0
            decided: list[tuple[TxnID, TxnStatus]] = []
            with self._meter.batch():  # every header at once, as master's replayAsync does
                for txn, recs in sorted(by_txn.items()):
                    recs.sort(key=lambda r: r.seq)
                    self._owned[txn] = recs
                    for rec in recs:
                        assert rec.op.ack_kind is not None
                        self._pending.apply(txn, [rec.op.position], rec.op.ack_kind)
                    header = self._records.get_header(txn)
                    headers_read += 1
                    if header is None:
                        # Collected while we were away: the PIP's sweep force-deleted our records too,
                        # so this only happens mid-sweep; nothing is known, drop the acks.
                        decided.append((txn, TxnStatus.ABORTED))
                    elif header.state is TxnStatus.OPEN:
                        self._headers.track(txn)
                    else:
                        decided.append((txn, header.state))
            if self._opts.variant is Variant.STATE_EVENTS:
                self._records.watch_events(self._segment, self._sub, self, self._on_event)
                decided.extend(self._records.events_for(self._segment, self._sub))
                queries += 1
        for txn, state in decided:
            self._headers.states.setdefault(txn, TxnStatus.OPEN)
            self._headers.final(txn, state)
        self._recovery = RecoveryStats(
            f"pending-ack-v5:{self._segment}[{self._sub}]", records_read=len(records) + headers_read, queries=queries,
            modelled_us=took.us,
        )

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery

    def close(self) -> None:
        self._closed = True

    def check(self) -> None:
        self._pending.check_invariants()
        for txn in self._pending.by_txn:
            assert self._headers.states.get(txn) is TxnStatus.OPEN, f"{txn} has pending acks but is not open"
