"""The buffer and pending-ack store of a topic with transactions disabled (Pulsar's
``TransactionBufferDisable`` / no pending-ack handle): never blocks, refuses transactional use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from engine.counters import Counters
from engine.errors import ConfigError, UnsupportedOperation
from engine.ids import TxnID
from engine.ledger import ManagedLedger
from engine.ports import AckKind, MaxReadListener, PendingAckStore, RecoveryStats, TransactionBuffer
from engine.records import EntryData, Position
from engine.registry import EngineSpec, Opened, RunVariant, TestCombo


class TransactionBufferDisabled(TransactionBuffer):
    bounds_waiting_reads = False  # maxReadPosition is LATEST (TransactionBufferDisable L122)

    def __init__(self, ledger: ManagedLedger) -> None:
        self._ledger = ledger
        self.stats = Counters()

    def append_buffer_to_txn(self, txn: TxnID, data: EntryData) -> Position:
        raise UnsupportedOperation(f"transactions are disabled on {self._ledger.name}; txn {txn} cannot publish")

    def sync_max_read_position_for_normal_publish(self, position: Position) -> None:
        pass  # max read position is always the last confirmed entry

    def max_read_position(self) -> Position:
        return self._ledger.last_confirmed()

    def is_txn_aborted(self, txn: TxnID, position: Position) -> bool:
        return False

    def add_max_read_listener(self, listener: MaxReadListener) -> None:
        pass  # it advances only with new entries, which dispatchers hear from the ledger

    def recover(self) -> None:
        pass

    def recovery_stats(self) -> RecoveryStats | None:
        return RecoveryStats("tb-disabled")

    def ongoing_txn_count(self) -> int:
        return 0

    def close(self) -> None:
        pass


class PendingAckStoreDisabled(PendingAckStore):
    def __init__(self, where: str) -> None:
        self._where = where
        self.stats = Counters()

    def ack(self, txn: TxnID, positions: list[Position], kind: AckKind) -> None:
        raise UnsupportedOperation(f"transactions are disabled on {self._where}; txn {txn} cannot ack")

    def is_pending(self, position: Position) -> bool:
        return False

    def on_non_txn_ack(self, positions: Iterable[Position]) -> None:
        pass

    def recover(self) -> None:
        pass

    def recovery_stats(self) -> RecoveryStats | None:
        return RecoveryStats("pending-ack-disabled")

    def close(self) -> None:
        pass


# -- registry ---------------------------------------------------------------------------------

NAME = "none"


@dataclass(frozen=True)
class NoOptions:
    """Transactions disabled has no settings."""

    @classmethod
    def from_kwargs(cls, **options: Any) -> NoOptions:
        if options:
            raise ConfigError(f"engine {NAME} takes no options, got {', '.join(sorted(options))}")
        return cls()


def _open(metadata_url: str, namespace: str, options: Mapping[str, Any]) -> Opened:
    NoOptions.from_kwargs(**options)
    return Opened(None)  # the broker builds these components itself when it has no engine


SPEC = EngineSpec(
    name=NAME,
    transactional=False,
    options_class=NoOptions,
    open=_open,
    label=lambda options: NAME,
    describe=lambda options: "transactions disabled",
    variants=(RunVariant(NAME, {}),),
    test_combos=lambda: [TestCombo("txn-disabled/memory", lambda services: Opened(None))],
)
