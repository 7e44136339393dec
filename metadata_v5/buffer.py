"""MetadataTransactionBuffer (PIP-473): a topic's transactional state as op records in the
metadata store, materialised from header watches (or event records), never from the log.

``max_read_position()`` = just before the smallest first position of the OPEN txns that wrote
here, else the last confirmed entry. Commit/abort need no ledger write, so a sealed segment
commits like any other.
"""

from __future__ import annotations

from collections import deque

from engine.counters import Counters
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.ports import EngineContext, MaxReadListener, RecoveryStats, TransactionBuffer, TxnStatus
from engine.records import EARLIEST, EntryData, Position
from metadata_v5.headers import HeaderCache
from metadata_v5.options import V5Options, Variant
from metadata_v5.txnrecords import EVENT, AbortedRange, Op, OpRecord, TxnRecords


def _before(p: Position) -> Position:
    return Position(p.ledger_id, p.entry_id - 1)


class MetadataTransactionBuffer(TransactionBuffer):
    def __init__(self, ctx: EngineContext, records: TxnRecords, ledger: ManagedLedger, opts: V5Options) -> None:
        self._sched = ctx.scheduler
        self._meter = ctx.meter  # bills every store call (the records are metered)
        self._records = records
        self._ledger = ledger
        self._segment = ledger.name
        self._opts = opts
        self.stats = Counters()
        self._headers = HeaderCache(records, self, self._segment, self.stats, self._materialise,
                                    watch=opts.variant is Variant.PIP)
        # OPEN txns in first-append order -> their first position here (append order is
        # position order, so the first item holds the smallest position).
        self._ongoing: dict[TxnID, Position] = {}
        self._owned: dict[TxnID, list[OpRecord]] = {}  # op records this buffer wrote
        self._last: dict[TxnID, Position] = {}
        self._aborted: set[TxnID] = set()
        # Txns materialised here, by their last position here: forgotten once the ledger has
        # trimmed past it (nothing can read their entries again), so the cache and the aborted
        # set stay bounded by the untrimmed data, as in Pulsar master's MetadataTransactionBuffer.
        self._decided: deque[tuple[Position, TxnID]] = deque()
        self._listeners: list[MaxReadListener] = []
        self._ready = False
        self._recovery: RecoveryStats | None = None
        self._max_read = EARLIEST
        self._closed = False

    # -- the write path -----------------------------------------------------------------------------

    def append_buffer_to_txn(self, txn: TxnID, data: EntryData) -> Position:
        txn.require(Design.V5)
        self._headers.require_open(txn)
        if self._opts.variant is Variant.STATE_EVENTS:
            # Master writes the op record before the ledger append, so a crash between the two
            # leaves a record naming a position, never an entry no record claims.
            if self._ledger.sealed:
                self._ledger.append(data)  # raises LedgerSealed without writing a record
            pos = self._ledger.next_position(self._ledger.last_confirmed())
            rec = self._records.add_op(txn, Op("write", self._segment, pos))
            appended = self._ledger.append(data)
            assert appended == pos, f"{self._segment}: predicted {pos}, appended at {appended}"
        else:
            pos = self._ledger.append(data)
            rec = self._records.add_op(txn, Op("write", self._segment, pos))
        self.stats["op_writes"] += 1
        self._owned.setdefault(txn, []).append(rec)
        self._last[txn] = pos
        if txn not in self._ongoing:
            self._ongoing[txn] = pos
            self._headers.track(txn)
        return pos

    def sync_max_read_position_for_normal_publish(self, position: Position) -> None:
        if self._ready and not self._ongoing:
            self._advance(position)

    # -- what the dispatcher asks ----------------------------------------------------------------

    def max_read_position(self) -> Position:
        return self._max_read

    def is_txn_aborted(self, txn: TxnID, position: Position) -> bool:
        if txn in self._aborted:
            return True
        state = self._headers.lookup(txn)
        if state is None:
            # The header is gone (collected by GC). The PIP falls back to "aborted" for unknown
            # txns; the safe GC keeps abort ranges per segment (loaded into _aborted), so an
            # unknown txn there was committed.
            self.stats["unknown_txn_lookups"] += 1
            return not self._opts.keeps_abort_ranges
        return state is TxnStatus.ABORTED

    def add_max_read_listener(self, listener: MaxReadListener) -> None:
        self._listeners.append(listener)

    # -- materialisation ----------------------------------------------------------------------------

    def _materialise(self, txn: TxnID, state: TxnStatus) -> None:
        with self._records.on(EVENT):  # the header watch fires on the store's notification thread
            self._materialise_now(txn, state)

    def _materialise_now(self, txn: TxnID, state: TxnStatus) -> None:
        if self._closed:
            return
        first = self._ongoing.pop(txn, None)
        owned = self._owned.pop(txn, [])
        last = self._last.pop(txn, None)
        if state is TxnStatus.ABORTED:
            self._aborted.add(txn)
            if self._opts.keeps_abort_ranges and first is not None and last is not None:
                self._records.put_aborted(self._segment, [AbortedRange(txn, first, last)])
                self.stats["aborted_range_writes"] += 1
        if owned:
            self._records.delete_ops(owned)
            self.stats["op_deletes"] += len(owned)
        self.stats["materialised." + state.value] += 1
        if self._opts.variant is Variant.STATE_EVENTS:
            self._records.delete_event(self._segment, None, txn)
        if last is not None:
            self._decided.append((last, txn))
        self._forget_trimmed()
        self._recompute()

    def _forget_trimmed(self) -> None:
        """Forget decided txns whose entries here are all trimmed: their cached state, their
        place in the aborted set and, with the safe GC, their abort-range records (master
        range-deletes those once the segment trims past them). Decisions arrive roughly in
        position order, so a look at the oldest ones is enough."""
        decided = self._decided
        is_trimmed = self._ledger.is_trimmed
        gone: list[TxnID] = []
        while decided and is_trimmed(decided[0][0]):
            txn = decided.popleft()[1]
            self._headers.forget(txn)
            if txn in self._aborted:
                self._aborted.discard(txn)
                gone.append(txn)
            self.stats["decided_forgotten"] += 1
        if gone and self._opts.keeps_abort_ranges:
            self._records.delete_aborted(self._segment, gone)
            self.stats["aborted_range_deletes"] += len(gone)

    def _on_event(self, txn: TxnID, state: TxnStatus) -> None:
        self.stats["watch_events"] += 1
        if txn in self._ongoing or txn in self._owned:
            self._headers.final(txn, state)
        else:  # not ours (any more): just clear the event
            with self._records.on(EVENT):
                self._records.delete_event(self._segment, None, txn)

    def _recompute(self) -> None:
        if not self._ready:
            return
        if self._ongoing:
            target = _before(next(iter(self._ongoing.values())))
        else:
            target = self._ledger.last_confirmed()
        self._advance(target)

    def _advance(self, target: Position) -> None:
        if target > self._max_read:
            self._max_read = target
            for listener in self._listeners:
                listener()
        elif target < self._max_read:  # cannot move back; a new txn pins from its first entry on
            pass

    # -- recovery -----------------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild from the store only: one index query for this segment's write records, the
        headers of the txns found (read at once), and (safe GC) one query for the abort ranges."""
        with self._meter.tab() as took:  # the scans, then the headers at once, then the rest
            records = self._records.writes_on(self._segment)
            queries = 1
            by_txn: dict[TxnID, list[OpRecord]] = {}
            for rec in records:
                by_txn.setdefault(rec.txn, []).append(rec)
            headers_read = 0
            decided: list[tuple[TxnID, TxnStatus]] = []
            with self._meter.batch():  # every header at once (FutureUtil.waitForAll)
                for txn, recs in sorted(by_txn.items(), key=lambda kv: min(r.op.position for r in kv[1])):
                    header = self._records.get_header(txn)
                    headers_read += 1
                    recs.sort(key=lambda r: r.op.position)
                    self._owned[txn] = recs
                    self._last[txn] = recs[-1].op.position
                    self._ongoing[txn] = recs[0].op.position
                    if header is None:
                        decided.append((txn, TxnStatus.COMMITTED if self._opts.keeps_abort_ranges else TxnStatus.ABORTED))
                    elif header.state is TxnStatus.OPEN:
                        self._headers.track(txn)
                    else:
                        decided.append((txn, header.state))
            if self._opts.keeps_abort_ranges:
                self._aborted.update(r.txn for r in self._records.aborted_on(self._segment))
                queries += 1
            if self._opts.variant is Variant.STATE_EVENTS:
                self._records.watch_events(self._segment, None, self, self._on_event)
                for txn, state in self._records.events_for(self._segment, None):
                    decided.append((txn, state))
                queries += 1
        modelled = took.us
        self._recovery = RecoveryStats(f"tb-v5:{self._segment}", records_read=len(records) + headers_read,
                                       queries=queries, modelled_us=modelled)
        self.stats["recovery_records_read"] += len(records) + headers_read

        def ready() -> None:
            if self._closed:
                return
            self._ready = True
            for txn, state in decided:
                self._headers.final(txn, state)
            self._recompute()

        self._sched.call_later(modelled, ready)

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery if self._ready else None

    def ongoing_txn_count(self) -> int:
        return len(self._ongoing)

    def close(self) -> None:
        self._closed = True

    def check(self) -> None:
        """The port's name for :meth:`_check`."""
        self._check()

    def _check(self) -> None:
        """Invariants of the PIP's buffer:

        * once ready, every ongoing txn's cached header state is OPEN: the header watch (or an
          event) materialises a final one, which removes it from ``_ongoing`` (recovery holds
          the txns it found decided until it is ready, then materialises them at once).
        * once ready, maxReadPosition stays before the first ongoing txn and never passes the
          last entry: it is recomputed from them on every change.
        * ongoing txns are in position order (joined at their first append, appends in order).
        * ``_ongoing``, ``_last`` and ``_owned`` track the same txns, first position at or
          before last: one append or one recovery fills all three, one materialisation empties
          them; no ongoing txn is in the aborted set.
        """
        assert self._max_read <= self._ledger.last_confirmed(), (
            f"{self._segment}: max read {self._max_read} beyond the last entry {self._ledger.last_confirmed()}")
        assert set(self._ongoing) == set(self._last) == set(self._owned), f"{self._segment}: txn maps disagree"
        for txn, first in self._ongoing.items():
            assert first <= self._last[txn], f"{self._segment}: {txn} first {first} after last {self._last[txn]}"
        assert not (set(self._ongoing) & self._aborted), f"{self._segment}: an ongoing txn is in the aborted set"
        for txn in self._ongoing if self._ready else ():  # recovery decides what it found when ready
            state = self._headers.states.get(txn)
            assert state is TxnStatus.OPEN, f"{self._segment}: {txn} pins maxReadPosition but is {state}"
        if self._ready and self._ongoing:
            first = next(iter(self._ongoing.values()))
            assert self._max_read < first, f"{self._segment}: max read {self._max_read} passes open txn at {first}"
        positions = list(self._ongoing.values())
        assert positions == sorted(positions), f"{self._segment}: ongoing txns out of position order"
