"""The ports both transaction designs implement, mirroring Pulsar's interfaces.

* :class:`TransactionBuffer` — Pulsar's ``TransactionBuffer`` (one per topic partition/segment).
* :class:`PendingAckStore` — Pulsar's ``PendingAckHandle`` with its store (one per subscription).
* :class:`TransactionCoordinator` — Pulsar's ``TransactionMetadataStoreService`` as a client sees it.
* :class:`Engine` — builds the three for a broker; an :data:`EngineFactory` builds an engine from
  an :class:`EngineContext`.

The shared dispatcher asks a buffer only ``max_read_position()`` and ``is_txn_aborted()`` (and,
in notify mode, subscribes to advances), exactly as Pulsar's dispatchers do.

Timing: every method here is synchronous and takes effect when it returns. Work that in Pulsar
happens later (END_TXN fan-out, watch callbacks, snapshot timers, retries, sweeps) is scheduled
on ``EngineContext.scheduler`` with delays from ``EngineContext.latency``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Protocol

from engine.clock import LatencyModel, Scheduler
from engine.counters import Counters
from engine.ids import Design, TxnID
from engine.ledger import LedgerFactory, ManagedLedger
from engine.metering import Meter, RequestCost
from engine.records import EntryData, Position


class TxnAction(str, Enum):
    COMMIT = "commit"
    ABORT = "abort"


class TxnStatus(str, Enum):
    OPEN = "open"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTING = "aborting"
    ABORTED = "aborted"

    @property
    def final(self) -> bool:
        return self in (TxnStatus.COMMITTED, TxnStatus.ABORTED)


class AckKind(str, Enum):
    INDIVIDUAL = "individual"
    CUMULATIVE = "cumulative"


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """What a component read to rebuild its state after a crash (counts, not times)."""

    component: str
    entries_replayed: int = 0  # ledger entries read (data, markers, log records, snapshots)
    records_read: int = 0  # metadata-store records read
    queries: int = 0  # metadata-store index queries
    modelled_us: int = 0  # virtual time the recovery took under the latency model
    # each design's component names map to a common kind (tb, pending-ack, tc) in its spec:
    # EngineSpec.recovery_kinds, bench.replay.registry.kind_of


MaxReadListener = Callable[[], None]


class TransactionBuffer(ABC):
    """Transactional state of one topic partition or segment.

    Lifecycle: created by :meth:`Engine.transaction_buffer` and started with :meth:`recover`;
    until recovery completes ``max_read_position()`` is ``EARLIEST`` (nothing dispatchable) and
    listeners are told once it is ready.
    """

    stats: Counters
    # A caught-up cursor's waiting read keeps the maxPosition it was created with
    # (OpReadEntry.create L125-128, re-issued by ManagedCursorImpl.notifyEntriesAvailable): with
    # any enabled buffer that bound is stale by the time a new entry wakes it (D20). A disabled
    # buffer answers LATEST (TransactionBufferDisable L122): no stale bound.
    bounds_waiting_reads: bool = True

    @abstractmethod
    def append_buffer_to_txn(self, txn: TxnID, data: EntryData) -> Position:
        """Append a transactional entry (Pulsar ``appendBufferToTxn``). Raises
        :class:`~engine.errors.TxnConflict` if the txn can no longer take writes,
        :class:`~engine.errors.LedgerSealed` on a sealed segment."""

    @abstractmethod
    def sync_max_read_position_for_normal_publish(self, position: Position) -> None:
        """A non-transactional entry was appended at ``position``; advance if nothing pins."""

    @abstractmethod
    def max_read_position(self) -> Position:
        """Dispatchers read up to and including this position, never past it."""

    # whether the buffer's own work holds a lock its callers take (lock_free_at: the shipped v5 buffer)
    locks: bool = False

    def lock_free_at(self, at_us: int) -> int:
        """When a caller taking the buffer's lock at ``at_us`` gets it: at once, unless the
        buffer's own work holds it then (the shipped v5 buffer). Taken by a dispatcher asking
        ``max_read_position()``, by a plain publish's add completion before its receipt
        (``Broker.receipt_leaves_at``) and by a txn send on the connection's IO thread
        (``Broker.send_lock_wait``)."""
        return at_us

    @abstractmethod
    def is_txn_aborted(self, txn: TxnID, position: Position) -> bool:
        """True if the entry of ``txn`` at ``position`` belongs to an aborted txn and must be
        skipped (and acked) by every dispatcher."""

    @abstractmethod
    def add_max_read_listener(self, listener: MaxReadListener) -> None:
        """Call ``listener()`` whenever ``max_read_position()`` advances (notify-mode
        dispatchers subscribe; polling dispatchers don't)."""

    def end_txn(self, txn: TxnID, action: TxnAction, low_water_mark: int) -> None:
        """END_TXN_ON_PARTITION from a fan-out coordinator (v4). Raises on failure so the
        coordinator retries. Designs without fan-out (v5) never receive it."""
        from engine.errors import UnsupportedOperation

        raise UnsupportedOperation(f"{type(self).__name__} takes no END_TXN_ON_PARTITION")

    @abstractmethod
    def recover(self) -> None:
        """Start recovery from the durable stores only (snapshot + replay, or an index query).
        May complete later on the scheduler; see :meth:`recovery_stats`."""

    @abstractmethod
    def recovery_stats(self) -> RecoveryStats | None:
        """Counts of the last completed recovery, ``None`` before it completes."""

    @abstractmethod
    def ongoing_txn_count(self) -> int: ...

    @abstractmethod
    def close(self) -> None:
        """Stop timers and watches; durable state stays."""

    def check(self) -> None:
        """Assert internal consistency (stateful tests call it after every step)."""


class PendingAckStore(ABC):
    """Transactional acks of one subscription on one partition/segment (Pulsar's
    ``PendingAckHandle`` + ``PendingAckStore``). Conflict rules are those of Pulsar's
    ``PendingAckHandleImpl``; see :mod:`engine.pending_acks`."""

    stats: Counters

    @abstractmethod
    def ack(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        """Record a transactional ack. Raises :class:`~engine.errors.TxnConflict` per Pulsar's
        rules; on conflict nothing is recorded."""

    @abstractmethod
    def is_pending(self, position: Position) -> bool:
        """True while ``position`` is acked by a txn that has not ended: it is not dispatched."""

    @abstractmethod
    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
        """A plain ack of these positions succeeded: clear them from any pending txn."""

    def end_txn(self, txn: TxnID, action: TxnAction, low_water_mark: int) -> None:
        """END_TXN_ON_SUBSCRIPTION from a fan-out coordinator (v4)."""
        from engine.errors import UnsupportedOperation

        raise UnsupportedOperation(f"{type(self).__name__} takes no END_TXN_ON_SUBSCRIPTION")

    @abstractmethod
    def recover(self) -> None:
        """Rebuild pending acks from the durable stores only."""

    @abstractmethod
    def recovery_stats(self) -> RecoveryStats | None: ...

    @abstractmethod
    def close(self) -> None: ...

    def check(self) -> None:
        """Assert internal consistency."""


EndTxnCallback = Callable[[TxnID, TxnStatus], None]


class TransactionCoordinator(ABC):
    """The coordinator a client talks to."""

    design: Design
    stats: Counters

    @abstractmethod
    def new_txn(self, timeout_ms: int) -> TxnID:
        """Open a transaction that the coordinator aborts after ``timeout_ms``."""

    @abstractmethod
    def add_produced_partition(self, txn: TxnID, ledger: str) -> None:
        """Register a partition/segment the txn writes to (v5: a no-op). Raises
        :class:`~engine.errors.ForeignTxnId`, :class:`~engine.errors.TxnNotFound`,
        :class:`~engine.errors.InvalidTxnState` if the txn is not OPEN."""

    @abstractmethod
    def add_acked_subscription(self, txn: TxnID, ledger: str, subscription: str) -> None:
        """Register a (partition/segment, subscription) the txn acks on (v5: a no-op)."""

    @abstractmethod
    def end_txn(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None = None) -> None:
        """Commit or abort. Validation errors raise at once (foreign/unknown id, not OPEN);
        otherwise the outcome reaches ``on_done(txn, final status)`` when the coordinator
        answers the client, possibly later on the scheduler."""

    @abstractmethod
    def status(self, txn: TxnID) -> TxnStatus:
        """Current state as the coordinator knows it; raises TxnNotFound if it knows none."""

    @abstractmethod
    def recover(self) -> None:
        """Rebuild from the durable stores only and re-drive unfinished txns."""

    @abstractmethod
    def recovery_stats(self) -> RecoveryStats | None: ...

    @abstractmethod
    def close(self) -> None: ...

    def check(self) -> None:
        """Assert internal consistency."""


class Participants(Protocol):
    """What the broker offers a fan-out coordinator: END_TXN RPC handlers. Each raises on
    failure (e.g. :class:`~engine.errors.LedgerSealed`); the coordinator models RPC latency,
    timeouts and retries on the scheduler."""

    def end_txn_on_partition(self, ledger: str, txn: TxnID, action: TxnAction, low_water_mark: int) -> None: ...

    def end_txn_on_subscription(
        self, ledger: str, subscription: str, txn: TxnID, action: TxnAction, low_water_mark: int
    ) -> None: ...


@dataclass
class EngineContext:
    """What a broker hands an engine: time, the durable ledger store, the participants, the
    meter that bills port calls in virtual time (:mod:`engine.metering`) and the client
    request in progress (its tab: what engine code bills while it is open, the client waits)."""

    scheduler: Scheduler
    latency: LatencyModel
    ledgers: LedgerFactory
    participants: Participants
    stats: Counters = field(default_factory=Counters)
    meter: Meter = field(init=False)
    request: RequestCost = field(init=False)

    def __post_init__(self) -> None:
        self.meter = Meter(self.latency, self.scheduler)
        self.request = self.meter.request


class Engine(ABC):
    """One transaction design wired into one broker."""

    design: Design

    @abstractmethod
    def coordinator(self) -> TransactionCoordinator:
        """The coordinator (created and recovered on first use)."""

    @abstractmethod
    def restart_coordinator(self) -> None:
        """Crash the coordinator alone: drop its memory and recover it from durable stores."""

    @abstractmethod
    def transaction_buffer(self, ledger: ManagedLedger) -> TransactionBuffer:
        """A new, not yet recovered buffer for the partition/segment ``ledger``."""

    @abstractmethod
    def pending_ack_store(self, ledger: ManagedLedger, subscription: str, cursor: "CursorPort") -> PendingAckStore:
        """A new, not yet recovered pending-ack store for ``subscription`` on ``ledger``."""

    def stats(self) -> Counters:
        """Engine-wide counts (coordinator, metadata store...)."""
        return Counters()

    def backlog(self) -> dict[str, int]:
        """What the design still stores of finished txns, counted once at the end of a run (it
        may read every record: not for a hot path). Names start with ``gc.``."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Drop every volatile component (a crash calls this too: nothing is flushed)."""

    def _check(self) -> None:
        """Assert the invariants of the engine's own in-memory parts (its coordinator once it has
        started; never start one to check it: that would change what a test runs). Buffers and
        pending-ack stores are checked by the broker that holds them."""


class CursorPort(Protocol):
    """What a pending-ack store may do with its subscription's cursor."""

    def is_acked(self, position: Position) -> bool: ...

    @property
    def mark_delete(self) -> Position: ...

    def ack_individual(self, positions: Iterable[Position]) -> None: ...

    def ack_cumulative(self, position: Position) -> None: ...

    @property
    def persisted(self) -> int:
        """How many acks so far waited for the cursor's ledger write (``engine.cursor``)."""
        ...

    def redeliver(self, positions: Iterable[Position]) -> None:
        """Make these (unacked) positions dispatchable again now."""
        ...


EngineFactory = Callable[[EngineContext], Engine]
