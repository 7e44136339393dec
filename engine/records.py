"""Positions and ledger entries: the records every engine and backend share.

The records are typed named tuples rather than frozen dataclasses: they are just as immutable
and typed, but hashing, equality and ordering run in C. A replay creates, hashes and compares
them several times per trace event (ledger appends and reads, cursor acks, dispatch), and the
dataclass versions' Python-level ``__init__``/``__hash__``/``__lt__`` were the largest single
cost of the engine core. Positions compare as ``(ledger_id, entry_id)`` tuples, exactly like the
``order=True`` dataclass did.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Mapping, NamedTuple

from engine.ids import TxnID


class Position(NamedTuple):
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


class EntryData(NamedTuple):
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


class Entry(NamedTuple):
    position: Position
    data: EntryData


class MessageId(NamedTuple):
    """A message as a client sees it: the ledger (partition or segment) and its position there."""

    ledger: str
    position: Position

    def __str__(self) -> str:
        return f"{self.ledger}@{self.position}"
