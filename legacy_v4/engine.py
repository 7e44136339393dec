"""The v4 engine: Pulsar's marker-based transactions (PIP-31) wired into a broker.

``v4_engine(**options)`` returns the :data:`~engine.ports.EngineFactory` a broker (or a test
combo) takes; options are the fields of :class:`~legacy_v4.options.V4Options`.

The coordinator service lives with the broker, as Pulsar's TC lives in the broker that owns its
``__transaction_log_<tcId>`` topic: it is built and recovered when the engine is built, so a
restarted broker re-drives txns left COMMITTING/ABORTING and restarts their timeouts without
waiting for a client.
"""

from __future__ import annotations

from typing import Any

from engine.counters import Counters
from engine.ids import Design, TxnID
from engine.ledger import ManagedLedger
from engine.ports import CursorPort, Engine, EngineContext, EngineFactory, PendingAckStore, TransactionBuffer
from legacy_v4.buffer import TopicTransactionBuffer
from legacy_v4.coordinator import V4CoordinatorService
from legacy_v4.options import V4Options
from legacy_v4.pending_ack import MLPendingAckStore
from legacy_v4.snapshot import SnapshotService


class V4Engine(Engine):
    """Engine-wide counts (``stats()``): ``tc.*`` (every coordinator, restarts included) and
    ``snapshot.*`` (the snapshot service); per-partition counts come from each TB and
    pending-ack store through ``Broker.stats()`` as ``tb.*`` and ``pending_ack.*``."""

    design = Design.V4

    def __init__(self, ctx: EngineContext, options: V4Options | None = None) -> None:
        self._ctx = ctx
        self.options = options or V4Options()
        self._snapshots = SnapshotService(ctx.ledgers, ctx.scheduler)
        self._retired = Counters()  # counts of coordinators that were restarted
        self._tc = self._start_coordinator()

    def _start_coordinator(self) -> V4CoordinatorService:
        tc = V4CoordinatorService(self._ctx, self.options)
        tc.recover()
        return tc

    def coordinator(self) -> V4CoordinatorService:
        return self._tc

    def _check(self) -> None:
        self._tc._check()

    def restart_coordinator(self) -> None:
        self._retired.update(self._tc.stats)
        self._tc.close()
        self._tc = self._start_coordinator()

    def _is_live(self, txn: TxnID) -> bool:
        return self._tc.is_live(txn)

    def transaction_buffer(self, ledger: ManagedLedger) -> TransactionBuffer:
        return TopicTransactionBuffer(ledger, self._ctx, self._snapshots, self.options, self._is_live)

    def pending_ack_store(self, ledger: ManagedLedger, subscription: str, cursor: CursorPort) -> PendingAckStore:
        return MLPendingAckStore(ledger, subscription, cursor, self._ctx, self.options, self._is_live)

    @property
    def snapshots(self) -> SnapshotService:
        return self._snapshots

    def stats(self) -> Counters:
        total = Counters()
        tc = Counters(self._retired)
        tc.update(self._tc.stats)
        total.update(tc.prefixed("tc."))
        total.update(self._snapshots.stats.prefixed("snapshot."))
        return total

    def close(self) -> None:
        self._tc.close()
        self._snapshots.close()


def v4_engine(**options: Any) -> EngineFactory:
    """An engine factory for Pulsar v4 transactions. Unknown or invalid options raise
    :class:`~engine.errors.ConfigError` here, before any broker is built."""
    opts = V4Options.from_kwargs(**options)

    def factory(ctx: EngineContext) -> Engine:
        return V4Engine(ctx, opts)

    return factory
