"""Transaction Coordinator V5 (PIP-473): every operation reads or CAS's a header in the
metadata store; no log, no participant RPCs. End-txn is one CAS (plus, in the ``events``
variant, listing the txn's ops and writing one event record per participant)."""

from __future__ import annotations

from typing import Callable, Iterator

from engine.clock import Timer
from engine.counters import Counters
from engine.errors import InvalidTxnState, TxnNotFound
from engine.ids import Design, TxnID
from engine.ports import EndTxnCallback, EngineContext, RecoveryStats, TransactionCoordinator, TxnAction, TxnStatus
from metadata_v5.gcmodes import policy_of
from metadata_v5.options import V5Options, Variant
from metadata_v5.txnrecords import IO, SWEEP, Header, OpRecord, SweepCursor, TxnRecords

FINAL = {TxnAction.COMMIT: TxnStatus.COMMITTED, TxnAction.ABORT: TxnStatus.ABORTED}


class CoordinatorV5(TransactionCoordinator):
    design = Design.V5

    def __init__(self, ctx: EngineContext, records: TxnRecords, opts: V5Options,
                 observe_query: Callable[[float], None] | None = None) -> None:
        self._ctx = ctx
        self._sched = ctx.scheduler
        self._meter = ctx.meter  # bills every store call through the metered records
        self._records = records
        self._opts = opts
        self._leftovers = policy_of(opts)
        self._observe = observe_query or (lambda _s: None)
        self.stats = Counters()
        self._timers: dict[str, Timer] = {}
        self._recovery: RecoveryStats | None = None
        self._closed = False

    # -- client operations ------------------------------------------------------------------------

    def new_txn(self, timeout_ms: int) -> TxnID:
        self._live()
        txn = TxnID(Design.V5, self._opts.tc_id, self._records.next_txn_seq(self._opts.tc_id))
        now = self._sched.now_us()
        self._records.create_header(txn, now + timeout_ms * 1000, now)
        self.stats["header_creates"] += 1
        return txn

    def _open_header(self, txn: TxnID) -> Header:
        txn.require(Design.V5)
        header = self._records.get_header(txn)
        self.stats["header_reads"] += 1
        if header is None:
            raise TxnNotFound(f"v5 coordinator {self._opts.tc_id}: no txn {txn}")
        return header

    def add_produced_partition(self, txn: TxnID, ledger: str) -> None:
        # A no-op at the v5 coordinator (the participant writes its own op record); the id is
        # still checked so that a v4 id is refused here as it would be at the wire.
        txn.require(Design.V5)
        self.stats["add_partition_noops"] += 1

    def add_acked_subscription(self, txn: TxnID, ledger: str, subscription: str) -> None:
        txn.require(Design.V5)
        self.stats["add_subscription_noops"] += 1

    def end_txn(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None = None) -> None:
        self._live()
        with self._meter.tab() as took:  # the request hop, the header read, the CAS (a conflict re-reads, re-CASes)
            self._meter.bill("rpc")  # the client's END_TXN reaching the broker (ServerCnx.handleEndTxn)
            self._meter.serve("coordinator")
            self._meter.bill("coordinator.v5")
            header = self._open_header(txn)
            final = self._finalize(header, FINAL[action])
            if final is None:
                raise InvalidTxnState(f"{txn} is {header.state.value}; cannot {action.value} it")
            if self._opts.variant is Variant.STATE_EVENTS:
                self._write_events(txn, final.state)
        if on_done is not None:
            self._answer_later(took.us, on_done, txn, final.state)

    def _answer_later(self, took_us: int, answer: Callable[..., None], *args: object) -> None:
        """``answer(*args)`` when the answer of the request just billed (its chain done ``took_us``
        from now) reaches the client: it leaves with the batch of commands the connection's
        thread read it in, once the last of them is done, then takes its hop. The broker
        flushes a batch's writes when the batch is done (``PulsarChannelInitializer``: Netty's
        ``FlushConsolidationHandler(1024, true)`` holds a flush while a read is in progress and
        flushes at ``channelReadComplete``), so END_TXNs that queued behind one another are
        answered together."""
        read = self._meter.read_of_last_task("metadata", IO)  # when the thread read the request
        hop = self._meter.took("rpc")

        def flush() -> None:
            # by now every command read with it has arrived and is booked on the thread
            now = self._sched.now_us()
            at = now if read is None else self._meter.flushed_at("metadata", IO, read, now)
            self._sched.call_later(at - now + hop, answer, *args)
        self._sched.call_later(took_us, flush)

    def _finalize(self, header: Header, state: TxnStatus) -> Header | None:
        """The commit point: CAS OPEN -> final. Counts ok / conflict / reject."""
        if header.state is not TxnStatus.OPEN:
            self.stats["header_cas.reject"] += 1
            return None
        new = self._records.finalize(header, state, self._sched.now_us())
        if new is None:
            self.stats["header_cas.conflict"] += 1
            latest = self._records.get_header(header.txn)
            self.stats["header_reads"] += 1
            if latest is not None and latest.state is TxnStatus.OPEN:
                return self._finalize(latest, state)
            return None
        self.stats["header_cas.ok"] += 1
        self.stats["ended." + state.value] += 1
        return new

    def _write_events(self, txn: TxnID, state: TxnStatus) -> None:
        """Events variant: list the txn's ops, write one event per participant (one batch)."""
        ops = self._records.ops_of_txn(txn)
        self.stats["op_lists"] += 1
        participants = sorted({(r.op.segment, r.op.subscription if r.op.kind == "ack" else None) for r in ops},
                              key=lambda p: (p[0], p[1] or ""))
        if participants:
            self._records.put_events(txn, state, participants)
            self.stats["event_writes"] += len(participants)

    def status(self, txn: TxnID) -> TxnStatus:
        return self._open_header(txn).state

    # -- sweeps -------------------------------------------------------------------------------------

    def _timeout_sweep(self) -> None:
        if self._closed:
            return
        now = self._sched.now_us()
        for txn in self._scan(lambda after: self._records.expired(now, self._opts.sweep_limit, after)):
            header = self._records.get_header(txn)
            self.stats["header_reads"] += 1
            if header is not None and self._finalize(header, TxnStatus.ABORTED) is not None:
                self.stats["timeouts"] += 1
                if self._opts.variant is Variant.STATE_EVENTS:
                    self._write_events(txn, TxnStatus.ABORTED)
        self._timers["timeout"] = self._sched.call_later(self._opts.timeout_sweep_ms * 1000, self._timeout_sweep)

    def _repair(self, txn: TxnID, ops: list[OpRecord]) -> bool:
        """Re-publish ``txn``'s events for its leftover ``ops`` (GcMode.REPAIR); the PIP's
        participants have no events to re-publish: False."""
        return False

    def _gc_sweep(self) -> None:
        if self._closed:
            return
        horizon = self._sched.now_us() - self._opts.retention_ms * 1000
        for txn in self._scan(lambda after: self._records.finalized_before(horizon, self._opts.sweep_limit, after)):
            leftovers = self._records.ops_of_txn(txn)
            self.stats["op_lists"] += 1
            # a participant has not materialised yet (slow, or down): the GC mode decides
            if leftovers and self._leftovers.keep_header(txn, leftovers, self._records, self.stats, self._repair):
                continue
            self._records.delete_header(txn)
            self.stats["gc.headers_deleted"] += 1
        self._timers["gc"] = self._sched.call_later(self._opts.gc_sweep_ms * 1000, self._gc_sweep)

    def _scan(self, page: Callable[[SweepCursor | None], tuple[list[TxnID], SweepCursor | None]]) -> Iterator[TxnID]:
        """Everything a sweep's range holds, a page (one index query) at a time, as master's
        sweeps scan the whole range: a sweep that stopped at one page would fall behind for good
        once more txns end per sweep interval than a page holds."""
        after: SweepCursor | None = None
        while True:
            # The query's latency by the injected clock: measured in wall time, where the model
            # is all zeros; the modelled list latency in virtual time, where a call takes none.
            start = self._sched.now_us()
            # part of a recovery's time when one is open; on the sweep executor's thread
            with self._meter.unit() as took, self._records.on(SWEEP):
                txns, after = page(after)
            took_us = max(self._sched.now_us() - start, took.us)
            self._observe(took_us / 1e6)
            self.stats["index_queries"] += 1
            yield from txns
            if after is None:
                return

    # -- lifecycle ----------------------------------------------------------------------------------

    def recover(self) -> None:
        """No log to replay: state is in the store. Cold start is one deadline-index scan (the
        first timeout sweep, run now) and arming the sweeps."""
        with self._meter.tab() as took:
            self._timeout_sweep()
        self._timers["gc"] = self._sched.call_later(self._opts.gc_sweep_ms * 1000, self._gc_sweep)
        self._recovery = RecoveryStats("tc-v5", queries=1, modelled_us=took.us)

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery

    def close(self) -> None:
        self._closed = True
        for t in self._timers.values():
            t.cancel()

    def _live(self) -> None:
        if self._closed:
            from engine.errors import TxnbenchError

            raise TxnbenchError("the v5 coordinator is closed")

    def check(self) -> None:
        """The port's name for :meth:`_check`."""
        self._check()

    def _check(self) -> None:
        """The coordinator's state is in the store; what it holds itself is its two sweep timers.

        * once recovered and while open, each sweep has one live timer due within its interval:
          every sweep re-arms itself last (a sweep that stopped re-arming would stop timeouts or
          GC for good, silently).
        * once closed, every timer is cancelled (a closed coordinator must not sweep).
        """
        intervals = {"timeout": self._opts.timeout_sweep_ms, "gc": self._opts.gc_sweep_ms}
        now = self._sched.now_us()
        for name, timer in self._timers.items():
            if self._closed:
                assert timer.dead, f"v5 coordinator: closed but its {name} sweep is armed"
            else:
                assert not timer.dead and now <= timer.when_us <= now + intervals[name] * 1000, (
                    f"v5 coordinator: {name} sweep due at {timer.when_us}, now {now}")
        if self._recovery is not None and not self._closed:
            assert set(self._timers) == set(intervals), f"v5 coordinator: sweeps armed {sorted(self._timers)}"
