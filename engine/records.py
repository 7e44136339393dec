"""Positions and ledger entries: the records every engine and backend share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping

from engine.ids import TxnID


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A managed-ledger position ``(ledger_id, entry_id)``, ordered like Pulsar's ``Position``.

    ``(L, -1)`` is the position just before the first entry of ledger ``L`` (Pulsar's
    ``getPreviousPosition`` of ``(L, 0)``); it sorts after every entry of earlier ledgers.
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger, _, entry = text.partition(":")
        return cls(int(ledger), int(entry))


EARLIEST = Position(-1, -1)
"""Before every entry of every ledger: a max read position that lets nothing through."""


class MarkerKind(str, Enum):
    COMMIT = "commit"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class EntryData:
    """What a writer appends. ``payload`` carries structured records of system ledgers (txn log,
    snapshots, pending acks, topic layout) and must be JSON-serialisable so that any ledger
    backend can store it; data entries carry only their size."""

    size: int
    publish_ts_us: int
    msg: str | None = None
    txn: TxnID | None = None
    marker: MarkerKind | None = None
    key: str | None = None
    payload: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: EntryData


@dataclass(frozen=True, slots=True)
class MessageId:
    """A message as a client sees it: the ledger (partition or segment) and its position there."""

    ledger: str
    position: Position

    def __str__(self) -> str:
        return f"{self.ledger}@{self.position}"
