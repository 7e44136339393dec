"""Settings of the v4 engine, read once into a frozen object (defaults are Pulsar's)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from engine.errors import ConfigError


@dataclass(frozen=True)
class V4Options:
    """Every knob of the v4 model; each default is the Pulsar setting named beside it."""

    coordinators: int = 1
    """Transaction coordinators (``__transaction_log_<tcId>`` ledgers); new txns round-robin."""

    end_txn_rpc_timeout_ms: int = 3_000
    """``transactionBufferClientOperationTimeoutInMills``: an END_TXN RPC fails after this."""

    end_txn_retry_interval_ms: int = 1_000
    """``TransactionMetadataStoreService.endTransactionRetryIntervalTime``: a retryable failure
    repeats the whole end step after this."""

    end_txn_max_retries: int | None = None
    """``None``: retry forever, as Pulsar does. A number gives up after that many retries (the
    txn stays COMMITTING/ABORTING in the log; the client hears the non-final status)."""

    timeout_tick_ms: int = 100
    """Tick of the coordinator's timeout tracker (``TransactionTimeoutTrackerImpl``)."""

    snapshot_max_txn_count: int = 1_000
    """``transactionBufferSnapshotMaxTransactionCount``: snapshot after this many
    maxReadPosition advances, checked at each end-txn."""

    snapshot_min_time_ms: int = 5_000
    """``transactionBufferSnapshotMinTimeInMillis``: snapshot timer period (if it moved)."""

    recovery_read_batch: int = 100
    """Entries per read while replaying a ledger at recovery (one ``ledger.read`` each)."""

    pending_ack_log_index_min_lag: int = 500
    """``transactionPendingAckLogIndexMinLag``: pending-ack log records between two index
    points; the log is trimmed up to the last index point the subscription has passed."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            minimum = 0 if f.name == "end_txn_max_retries" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"v4 option {f.name} must be an integer >= {minimum}, got {value!r}")

    @classmethod
    def from_kwargs(cls, **options: Any) -> V4Options:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown v4 option(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
        return cls(**options)
