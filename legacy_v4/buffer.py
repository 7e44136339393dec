"""Pulsar's ``TopicTransactionBuffer``: transactional state of one partition/segment kept in the
data stream itself (commit/abort markers) plus snapshots.

* ``ongoing``: txns in first-append order, each mapped to its first entry (``LinkedMap
  ongoingTxns``). ``maxReadPosition`` is the position just before the first entry of the
  earliest-inserted ongoing txn, else the last confirmed entry (``handleTransactionMessage``,
  ``removeTxnAndUpdateMaxReadPosition``).
* ``aborts``: aborted txn -> position of its abort marker (``SingleSnapshotAbortedTxnProcessorImpl``);
  an entry leaves it when its marker's ledger was trimmed and a later end-txn runs
  (``trimExpiredAbortedTxns``).
* low-water marks per coordinator (``handleLowWaterMark``): appends at or below are refused
  (``internalAppendBufferToTxn``); after each end-txn a stale first ongoing txn is aborted, and
  the aborts chain.
* states (``TopicTransactionBufferState``): Initializing -> Ready (a snapshot was found and the
  replay finished) or NoSnapshot (none found); NoSnapshot -> FirstSnapshotting -> Ready on the
  first transactional publish (``takeFirstSnapshot``); Close. ``getMaxReadPosition`` is
  ``EARLIEST`` unless Ready or NoSnapshot.
* snapshots (``takeSnapshotByChangeTimes``/``takeSnapshotByTimeout``): after every
  ``snapshot_max_txn_count`` maxReadPosition advances (checked at end-txn), and every
  ``snapshot_min_time_ms`` if it advanced at all.

Modelling choices (ports are synchronous):

* Recovery (``TopicTransactionBufferRecover``) rebuilds the state at once from the snapshot and
  a replay of the data ledger, but the TB stays Initializing for the modelled read time
  (``ceil(entries / recovery_read_batch)`` x ``ledger.read``). Transactional appends meanwhile are
  appended and tracked (Pulsar parks them until recovery completes, then appends; the receipt
  comes later there, the visibility is the same). END_TXN_ON_PARTITION meanwhile raises
  :class:`ParticipantNotReady` so the coordinator waits for readiness within its RPC timeout,
  as Pulsar's ``commitTxn`` waits on ``transactionBufferFuture``.
* Every start looks the snapshot up (``TableView.readLatest``): at least one
  ``hasMoreEventsAsync`` round trip (``rpc``), during which the TB is Initializing and dispatch
  is blocked at ``EARLIEST`` (D17); then NoSnapshot, or the replay.
* The first transactional append takes the first snapshot (``takeFirstSnapshot`` L421-439):
  the record is durable at once, but the TB stays FirstSnapshotting (``getMaxReadPosition`` =
  ``EARLIEST`` L811-814, so all dispatch on the topic stops, plain messages included) for the
  producer send to the snapshot topic, ``rpc + ledger.append``, and the append that triggered
  it (and any other txn append meanwhile) waits for it (D18). Txn appends during the lookup take
  the first snapshot when it finds none.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable

from engine.clock import Scope, Timer
from engine.counters import Counters
from engine.errors import LedgerError, TxnbenchError, TxnConflict
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.ports import EngineContext, MaxReadListener, RecoveryStats, TransactionBuffer, TxnAction
from engine.records import EARLIEST, EntryData, MarkerKind, Position
from legacy_v4.codec import previous
from legacy_v4.options import V4Options
from legacy_v4.snapshot import SnapshotService, TBSnapshot, snapshot_ledger_name


class TBState(str, Enum):
    NONE = "None"
    INITIALIZING = "Initializing"
    READY = "Ready"
    NO_SNAPSHOT = "NoSnapshot"
    FIRST_SNAPSHOTTING = "FirstSnapshotting"
    CLOSE = "Close"


class ParticipantNotReady(TxnbenchError):
    """A participant is still recovering and will be ready at ``ready_at_us``: an END_TXN RPC to
    it waits (Pulsar: the request waits on ``transactionBufferFuture``) until then or its timeout."""

    def __init__(self, message: str, ready_at_us: int) -> None:
        super().__init__(message)
        self.ready_at_us = ready_at_us


class ParticipantClosed(LedgerError):
    """The participant was closed (Pulsar ``ServiceUnitNotReadyException``: retryable)."""


LivenessCheck = Callable[[TxnID], bool]


class TopicTransactionBuffer(TransactionBuffer):
    """Counters (``stats``): ``appends.data``, ``appends.marker``, ``appends.refused_lwm``,
    ``markers.commit``, ``markers.abort``, ``marker_append_failed``, ``aborts_without_marker``,
    ``lwm_aborts``, ``aborts_trimmed``, ``snapshot_writes`` (``.first``, ``.by_count``,
    ``.by_time``), ``first_snapshot_blocked_us``, ``snapshot_lookups``, ``max_read_advances``,
    ``recovery_entries_replayed``, ``recovery_reads``."""

    def __init__(
        self,
        ledger: ManagedLedger,
        ctx: EngineContext,
        snapshots: SnapshotService,
        options: V4Options,
        is_live: LivenessCheck | None = None,
    ) -> None:
        self._ledger = ledger
        self._scope = Scope(ctx.scheduler)
        self._request = ctx.request
        self._meter = ctx.meter  # bills the snapshot sends, lookups and recovery reads
        self._snapshots = snapshots
        self._opts = options
        self._is_live = is_live
        self.stats = Counters()
        self.state = TBState.NONE
        self._max_read = ledger.last_confirmed()
        self._ongoing: dict[TxnID, Position] = {}
        self._aborts: dict[TxnID, Position] = {}
        self._lwm: dict[int, int] = {}
        self._in_lwm = False
        self._change_count = 0
        self._listeners: list[MaxReadListener] = []
        self._recovery: RecoveryStats | None = None
        self._ready_at_us = 0
        self._snapshot_timer: Timer | None = None
        self._found_no_snapshot = False  # the lookup in flight will find none
        self._first_record_written = False  # the first snapshot's record is durable, its send not taken yet

    # -- reads (dispatcher side) ---------------------------------------------------------------

    def max_read_position(self) -> Position:
        if self.state is TBState.READY or self.state is TBState.NO_SNAPSHOT:
            return self._max_read
        return EARLIEST

    def is_txn_aborted(self, txn: TxnID, position: Position) -> bool:
        return txn in self._aborts

    def add_max_read_listener(self, listener: MaxReadListener) -> None:
        self._listeners.append(listener)

    def ongoing_txn_count(self) -> int:
        return len(self._ongoing)

    def aborted_txn_count(self) -> int:
        return len(self._aborts)

    def ongoing(self) -> dict[TxnID, Position]:
        """Ongoing txns and their first entry, in first-append order (a copy)."""
        return dict(self._ongoing)

    def aborted(self) -> dict[TxnID, Position]:
        """Aborted txns and their abort marker, in insertion order (a copy)."""
        return dict(self._aborts)

    def low_water_marks(self) -> dict[int, int]:
        return dict(self._lwm)

    # -- writes --------------------------------------------------------------------------------

    def append_buffer_to_txn(self, txn: TxnID, data: EntryData) -> Position:
        txn.require(Design.V4)
        if self.state is TBState.CLOSE or self.state is TBState.NONE:
            raise ParticipantClosed(f"transaction buffer of {self._ledger.name} is {self.state.value}")
        if self.state is TBState.NO_SNAPSHOT:
            self._take_first_snapshot()
        if self.state is TBState.FIRST_SNAPSHOTTING or self.state is TBState.INITIALIZING:
            # appendBufferToTxn parks the append until the TB is ready (and, after a lookup that
            # found no snapshot, until the first snapshot is written too)
            wait = self._ready_at_us - self._scope.now_us()
            if self.state is TBState.INITIALIZING and self._found_no_snapshot:
                # then the first snapshot's send, billed when it is taken (_take_first_snapshot)
                wait += self._meter.of("rpc.broker") + self._meter.of("ledger.append")
                if not self._ongoing:
                    # Pulsar's parked append reaches the ledger only after the first snapshot, so
                    # a txn entry never lies in the ledger without one (a crash in between loses
                    # the parked append; the next TB finds no snapshot and no txn entry either:
                    # noNeedToRecover). This model appends at once, so that snapshot's record is
                    # made durable first (at the last entry, as noNeedToRecover would set it);
                    # its send is timed and counted when the lookup answers, as before.
                    self._snapshots.write(TBSnapshot(self._ledger.name, self._ledger.last_confirmed(), tuple(self._aborts.items())))
                    self._first_record_written = True
            self._request.us += max(0, wait)
        lwm = self._lwm.get(txn.most_bits)
        if lwm is not None and lwm >= txn.least_bits:  # internalAppendBufferToTxn
            self.stats["appends.refused_lwm"] += 1
            raise TxnConflict(
                f"{self._ledger.name}: txn {txn} has been ended (low-water mark {lwm}); use a new transaction"
            )
        pos = self._ledger.append(data)
        self.stats["appends.data"] += 1
        self._handle_transaction_message(txn, pos)
        return pos

    def sync_max_read_position_for_normal_publish(self, position: Position) -> None:
        if self.state is TBState.NO_SNAPSHOT:
            self._update_max_read(position)
        elif self.state is TBState.READY and not self._ongoing:
            self._update_max_read(position)

    def end_txn(self, txn: TxnID, action: TxnAction, low_water_mark: int) -> None:
        txn.require(Design.V4)
        if self.state is TBState.INITIALIZING or self.state is TBState.FIRST_SNAPSHOTTING:
            raise ParticipantNotReady(
                f"transaction buffer of {self._ledger.name} is {self.state.value}", self._ready_at_us
            )
        if self.state is TBState.CLOSE or self.state is TBState.NONE:
            raise ParticipantClosed(f"transaction buffer of {self._ledger.name} is {self.state.value}")
        if action is TxnAction.COMMIT:
            self._commit(txn, low_water_mark)
        else:
            self._abort(txn, low_water_mark)

    def _marker(self, txn: TxnID, kind: MarkerKind) -> Position:
        data = EntryData(size=0, publish_ts_us=self._scope.now_us(), txn=txn, marker=kind)
        try:
            pos = self._ledger.append(data)
        except LedgerError:
            self.stats["marker_append_failed"] += 1
            raise
        self.stats["appends.marker"] += 1
        self.stats[f"markers.{kind.value}"] += 1
        return pos

    def _commit(self, txn: TxnID, lwm: int) -> None:
        """``commitTxn``: marker, then remove, low-water mark, trim aborts, snapshot check."""
        self._marker(txn, MarkerKind.COMMIT)
        self._remove_txn_and_update_max_read(txn)
        self._handle_low_water_mark(txn, lwm)
        self._trim_expired_aborts()
        self._snapshot_by_change_times()

    def _abort(self, txn: TxnID, lwm: int) -> None:
        """``abortTxn``: without a snapshot no message was sent here, so no marker is written."""
        if self.state is not TBState.READY:
            self.stats["aborts_without_marker"] += 1
            return
        pos = self._marker(txn, MarkerKind.ABORT)
        self._aborts[txn] = pos
        self._remove_txn_and_update_max_read(txn)
        self._trim_expired_aborts()
        self._snapshot_by_change_times()
        self._handle_low_water_mark(txn, lwm)

    def _handle_low_water_mark(self, txn: TxnID, lwm: int) -> None:
        old = self._lwm.get(txn.most_bits)
        if old is None or old < lwm:
            self._lwm[txn.most_bits] = lwm
        if self._in_lwm:  # the Semaphore(1) of Pulsar: the outer loop continues the chain
            return
        self._in_lwm = True
        try:
            while self._ongoing:
                first = next(iter(self._ongoing))
                mark = self._lwm.get(first.most_bits)
                if mark is None or first.least_bits > mark:
                    break
                self.stats["lwm_aborts"] += 1
                try:
                    self._abort(first, mark)
                except LedgerError:
                    break  # logged and dropped in Pulsar; the next end-txn tries again
                if first in self._ongoing:  # NoSnapshot: nothing removed it
                    break
        finally:
            self._in_lwm = False

    def _handle_transaction_message(self, txn: TxnID, pos: Position) -> None:
        ongoing = self._ongoing
        if txn not in ongoing and txn not in self._aborts:
            ongoing[txn] = pos
            first = pos if len(ongoing) == 1 else next(iter(ongoing.values()))
            new = previous(first)
            if new != self._max_read:  # equal: _update_max_read would change nothing
                self._update_max_read(new)

    def _remove_txn_and_update_max_read(self, txn: TxnID) -> None:
        self._ongoing.pop(txn, None)
        if self._ongoing:
            self._update_max_read(previous(next(iter(self._ongoing.values()))))
        else:
            self._update_max_read(self._ledger.last_confirmed())

    def _update_max_read(self, new: Position) -> None:
        before = self._max_read
        self._max_read = new
        if before < new:
            self.stats["max_read_advances"] += 1
            if self.state is not TBState.NO_SNAPSHOT:
                self._change_count += 1
            if self.state is TBState.READY or self.state is TBState.NO_SNAPSHOT:
                self._notify()

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def _trim_expired_aborts(self) -> None:
        while self._aborts:
            txn, pos = next(iter(self._aborts.items()))
            if not self._ledger.is_trimmed(pos):
                break
            del self._aborts[txn]
            self.stats["aborts_trimmed"] += 1

    # -- snapshots -----------------------------------------------------------------------------

    def _take_snapshot(self, why: str) -> int:
        """Write a snapshot: a send to __transaction_buffer_snapshot (an RPC and that topic's
        append, D18; the broker's own client sends it, SystemTopicClient, so ``rpc.broker``);
        returns its time."""
        if not self._first_record_written:  # else the parked first append wrote it already
            self._snapshots.write(TBSnapshot(self._ledger.name, self._max_read, tuple(self._aborts.items())))
        self._first_record_written = False
        self.stats["snapshot_writes"] += 1
        self.stats[f"snapshot_writes.{why}"] += 1
        with self._meter.tab() as took:
            self._meter.bill("rpc.broker")
            self._meter.bill("ledger.append", "bookie", snapshot_ledger_name(self._ledger.name))
        return took.us

    def _take_first_snapshot(self) -> None:
        self.state = TBState.FIRST_SNAPSHOTTING
        wait = self._take_snapshot("first")  # appends wait for it
        self._ready_at_us = self._scope.now_us() + wait
        self.stats["first_snapshot_blocked_us"] += wait
        self._scope.call_later(wait, self._first_snapshot_written)

    def _first_snapshot_written(self) -> None:
        if self.state is not TBState.FIRST_SNAPSHOTTING:
            return
        self._become_ready()

    def _become_ready(self) -> None:
        if not self._ongoing:
            self._max_read = self._ledger.last_confirmed()
        else:
            self._max_read = previous(next(iter(self._ongoing.values())))
        self.state = TBState.READY
        self._arm_snapshot_timer()
        self._notify()

    def _snapshot_by_change_times(self) -> None:
        if self._change_count >= self._opts.snapshot_max_txn_count:
            self._change_count = 0
            self._take_snapshot("by_count")

    def _arm_snapshot_timer(self) -> None:
        if self._snapshot_timer is None:
            self._snapshot_timer = self._scope.call_later(self._opts.snapshot_min_time_ms * 1000, self._on_snapshot_timer)

    def _on_snapshot_timer(self) -> None:
        self._snapshot_timer = None
        if self.state is not TBState.READY:
            return
        if self._change_count > 0:
            self._change_count = 0
            self._take_snapshot("by_time")
        self._arm_snapshot_timer()

    # -- recovery ------------------------------------------------------------------------------

    def recover(self) -> None:
        self.state = TBState.INITIALIZING
        snap = self._snapshots.latest(self._ledger.name)
        # TableView.readLatest: at least one hasMoreEventsAsync round trip before the answer (D17),
        # on the broker's own client
        lookup = self._meter.took("rpc.broker")
        self.stats["snapshot_lookups"] += 1
        if snap is None:  # noNeedToRecover, once the lookup has answered
            self._found_no_snapshot = True
            self._recovery = RecoveryStats("tb", 0, modelled_us=lookup)
            self._ready_at_us = self._scope.now_us() + lookup
            self._scope.call_later(lookup, self._no_snapshot_found)
            return
        self._aborts.update(snap.aborts)
        lac = self._ledger.last_confirmed()
        start = self._ledger.next_position(snap.max_read)
        batch = self._opts.recovery_read_batch
        replayed = reads = 0
        while start <= lac:
            entries = self._ledger.read(start, lac, batch)
            reads += 1
            if not entries:
                break
            for entry in entries:
                data = entry.data
                if data.txn is None:
                    continue
                if data.marker is not None:
                    if data.marker is MarkerKind.ABORT:
                        self._aborts[data.txn] = entry.position
                    self._remove_txn_and_update_max_read(data.txn)
                else:
                    self._handle_transaction_message(data.txn, entry.position)
            replayed += len(entries)
            start = self._ledger.next_position(entries[-1].position)
        modelled = lookup + (self._meter.took("ledger.read", "bookie", self._ledger.name, times=reads) if reads else 0)
        self.stats["recovery_entries_replayed"] += replayed
        self.stats["recovery_reads"] += reads
        self._recovery = RecoveryStats("tb", entries_replayed=replayed + 1, modelled_us=modelled)
        self._ready_at_us = self._scope.now_us() + modelled
        if modelled == 0:
            self._recover_complete()
        else:
            self._scope.call_later(modelled, self._recover_complete)

    def _no_snapshot_found(self) -> None:
        if self.state is not TBState.INITIALIZING:
            return
        if self._ongoing:  # txn appends parked during the lookup: the first takes the first snapshot
            self._take_first_snapshot()
            return
        self._max_read = self._ledger.last_confirmed()
        self.state = TBState.NO_SNAPSHOT
        self._notify()

    def _recover_complete(self) -> None:
        if self.state is not TBState.INITIALIZING:
            return
        self._become_ready()

    def recovery_stats(self) -> RecoveryStats | None:
        return self._recovery if self.state is not TBState.INITIALIZING else None

    def close(self) -> None:
        self.state = TBState.CLOSE
        self._scope.close()
        self._listeners.clear()

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        """The port's name for :meth:`_check`."""
        self._check()

    def _check(self) -> None:
        """Invariants (``TopicTransactionBuffer``'s ongoingTxns / aborts / maxReadPosition):

        * no txn is both ongoing and aborted: an abort marker moves it from one to the other.
        * ongoing txns start at or before the last entry, in position order: a txn joins
          ``_ongoing`` at its first append, and appends come in position order (the linked map
          of Pulsar, whose first entry pins maxReadPosition).
        * once ready, maxReadPosition is just before the first ongoing txn, else the last entry:
          every append, marker and normal publish recomputes it (``updateMaxReadPosition``).
        * with a liveness oracle (the coordinator), no finished txn still pins it.
        """
        name = self._ledger.name
        lac = self._ledger.last_confirmed()
        both = set(self._ongoing) & set(self._aborts)
        assert not both, f"{name}: txns both ongoing and aborted: {both}"
        for txn, pos in self._ongoing.items():
            assert pos <= lac, f"{name}: ongoing {txn} starts at {pos} beyond the last entry {lac}"
        firsts = list(self._ongoing.values())
        assert firsts == sorted(firsts), f"{name}: ongoing txns out of position order"
        if self.state in (TBState.READY, TBState.NO_SNAPSHOT):
            expected = previous(firsts[0]) if firsts else lac
            assert self._max_read == expected, f"{name}: maxReadPosition {self._max_read}, expected {expected}"
        if self._is_live is not None:
            for txn in self._ongoing:
                assert self._is_live(txn), f"{name}: finished txn {txn} still pins maxReadPosition"
