"""The modules each v5 variant is made of, selected once by ``V5Options.variant``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.ledger import ManagedLedger
from engine.ports import CursorPort, EngineContext, PendingAckStore, TransactionBuffer
from metadata_v5.buffer import MetadataTransactionBuffer
from metadata_v5.coordinator import CoordinatorV5
from metadata_v5.options import V5Options, Variant
from metadata_v5.pending_ack import MetadataPendingAckStore
from metadata_v5.shipped_buffer import ShippedTransactionBuffer
from metadata_v5.shipped_coordinator import ShippedCoordinator
from metadata_v5.shipped_pending_ack import ShippedPendingAckStore
from metadata_v5.txnrecords import TxnRecords

BufferFactory = Callable[[EngineContext, TxnRecords, ManagedLedger, V5Options], TransactionBuffer]
PendingAckFactory = Callable[[EngineContext, TxnRecords, ManagedLedger, str, CursorPort, V5Options], PendingAckStore]


@dataclass(frozen=True)
class VariantParts:
    coordinator: type[CoordinatorV5]
    buffer: BufferFactory
    pending_ack: PendingAckFactory
    released: bool  # whether a Pulsar release runs this design
    # whether the writes its participants watch (the END_TXN's events) are made at their commits,
    # so a watcher hears of one meta.watch after it (ShippedCoordinator, as RocksdbMetadataStore.
    # storePut notifies right after its commit); else at their issue, a write's time before that
    writes_at_commit: bool


PARTS: dict[Variant, VariantParts] = {
    Variant.SHIPPED: VariantParts(ShippedCoordinator, ShippedTransactionBuffer, ShippedPendingAckStore, True, True),
    # the PIP and the state-events ablation share their modules; their options select the wake-up
    Variant.PIP: VariantParts(CoordinatorV5, MetadataTransactionBuffer, MetadataPendingAckStore, False, False),
    Variant.STATE_EVENTS: VariantParts(CoordinatorV5, MetadataTransactionBuffer, MetadataPendingAckStore, False,
                                       False),
}


def parts_of(opts: V5Options) -> VariantParts:
    return PARTS[opts.variant]
