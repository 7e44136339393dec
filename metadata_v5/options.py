"""Options of the v5 engine. The defaults are Pulsar 5.0.1's (``ServiceConfiguration`` in
5.0.0-M1: L3999, L4008, L4018) and its design (``Variant.SHIPPED``, ``GcMode.REPAIR``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any

from engine.errors import ConfigError


class Variant(str, enum.Enum):
    """Which v5 design the engine runs (each a module set: :mod:`metadata_v5.variants`)."""

    # Pulsar 5.0.1: the coordinator fans out sequence-key events after the CAS; participants
    # re-read the header of every open txn they track on each event and materialise serially.
    SHIPPED = "shipped"
    # PIP-473's text: participants point-watch the headers they cached; end-txn is one CAS.
    PIP = "pip"
    # An ablation between the two: events that carry the decided state (one per participant,
    # deleted once applied), read without any header re-read. Not in any release.
    STATE_EVENTS = "state-events"


class GcMode(str, enum.Enum):
    """What the coordinator's GC sweep does with a finished txn whose op records are left."""

    # Pulsar 5.0.1 (TransactionCoordinatorV5.gcOneTxn L608-633): keep the header and re-publish
    # the txn's events, so a participant that missed them materialises it.
    REPAIR = "repair"
    # Keep the header and wait for the participants (no re-publish); with the PIP/state-events
    # variants, buffers also keep abort ranges so an unknown txn id reads as committed.
    WAIT = "wait"
    # PIP-473's sweep as written: force-delete the leftover op records and the header.
    FORCE = "force"


def _enum(cls: type[enum.Enum], value: Any, what: str) -> Any:
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        raise ConfigError(f"unknown v5 {what} {value!r}; expected one of "
                          f"{', '.join(m.value for m in cls)}") from None  # type: ignore[attr-defined]


# The store's listeners a 5.0.0-M1 standalone broker runs on every notification before any v5
# topic loads: its 36 metadata caches (class histogram of the running broker), which the store's
# own listener runs, and a few of the broker's (its event thread's JFR stacks show
# ScalableTopicResources.handleNotification and BrokerService.handleMetadataChanges)
BROKER_LISTENERS = 40


@dataclass(frozen=True)
class V5Options:
    variant: Variant = Variant.SHIPPED
    gc: GcMode = GcMode.REPAIR
    tc_id: int = 0
    timeout_sweep_ms: int = 60_000  # TimeoutSweepIntervalSeconds = 60 (M1 ServiceConfiguration L3999)
    gc_sweep_ms: int = 300_000  # GcIntervalSeconds = 300 (L4008)
    retention_ms: int = 900_000  # GcRetentionSeconds = 900 (L4018)
    sweep_limit: int = 10_000  # rows per index query of a sweep (a sweep pages through its whole range)
    # txns the coordinator ran before this replay (a broker's history: bench.report.validate.txns_before);
    # on a store without native sequences each left its op records' counter, which every scan's
    # listing walks (StoreTxnRecords.seed_history)
    history: int = 0
    # op records each of those txns wrote (and had collected): each left its records' puts and
    # tombstones and its counter's versions in RocksDB's memtable, which the listings pass too
    history_ops: int = 1
    # listeners the broker's store held before this replay besides the broker's own
    # (BROKER_LISTENERS): one subscribeSequence watch per segment's buffer and per subscription's
    # pending-ack store of the v5 topics it loaded before (they stay while the topic is loaded);
    # each runs on every notification (MeteredTxnRecords, meta.notify)
    history_listeners: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "variant", _enum(Variant, self.variant, "variant"))
        object.__setattr__(self, "gc", _enum(GcMode, self.gc, "GC mode"))
        for name in ("timeout_sweep_ms", "gc_sweep_ms", "sweep_limit"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"v5 option {name} must be > 0, got {getattr(self, name)}")
        if self.history < 0:
            raise ConfigError(f"v5 option history must be >= 0, got {self.history}")
        if self.history_listeners < 0:
            raise ConfigError(f"v5 option history_listeners must be >= 0, got {self.history_listeners}")
        if self.history_ops < 1:
            raise ConfigError(f"v5 option history_ops must be >= 1, got {self.history_ops}")
        if self.retention_ms < 0:
            raise ConfigError(f"v5 option retention_ms must be >= 0, got {self.retention_ms}")

    @property
    def keeps_abort_ranges(self) -> bool:
        """PIP/state-events buffers: abort ranges per segment unless the GC force-deletes (an
        unknown txn id then reads as committed). The shipped buffer always writes its aborted
        records (D12) and is not asked."""
        return self.gc is not GcMode.FORCE

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> V5Options:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown v5 options {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**kwargs)
