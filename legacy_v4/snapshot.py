"""Transaction-buffer snapshots: one ``__transaction_buffer_snapshot`` ledger per namespace,
records keyed by topic (Pulsar's ``SystemTopicTxnBufferSnapshotService`` with the
``SingleSnapshotAbortedTxnProcessorImpl`` record: max read position plus the aborted set).

Pulsar reads the latest snapshot of a topic through a per-namespace TableView that the broker
keeps up to date; here :class:`SnapshotService` loads each namespace's view once per broker life
(reading every record of that ledger, counted in ``table_view_entries_read``) and then updates it
with its own writes, so a TB's lookup costs no ledger read.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.clock import Scheduler
from engine.counters import Counters
from engine.ids import TxnID
from engine.ledger import LedgerFactory, ManagedLedger
from engine.records import EntryData, Position
from legacy_v4.codec import pos_in, pos_out, txn_in, txn_out

SNAPSHOT_TOPIC = "__transaction_buffer_snapshot"


def snapshot_ledger_name(ledger_name: str) -> str:
    """``persistent://t/ns/x`` or ``segment://t/ns/x/<desc>`` -> ``persistent://t/ns/__transaction_buffer_snapshot``."""
    scheme, _, rest = ledger_name.partition("://")
    parts = rest.split("/")
    if not scheme or len(parts) < 3:
        raise ValueError(f"not a topic ledger name: {ledger_name!r}")
    return f"persistent://{parts[0]}/{parts[1]}/{SNAPSHOT_TOPIC}"


@dataclass(frozen=True, slots=True)
class TBSnapshot:
    topic: str
    max_read: Position
    aborts: tuple[tuple[TxnID, Position], ...]  # in insertion order (Pulsar's LinkedMap)

    def to_payload(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "max_read": pos_out(self.max_read),
            "aborts": [[*txn_out(t), *pos_out(p)] for t, p in self.aborts],
        }

    @classmethod
    def from_payload(cls, payload: dict[str, object]) -> TBSnapshot:
        aborts = payload["aborts"]
        assert isinstance(aborts, list)
        return cls(
            str(payload["topic"]),
            pos_in(payload["max_read"]),  # type: ignore[arg-type]
            tuple((txn_in(a[:2]), pos_in(a[2:])) for a in aborts),
        )


class SnapshotService:
    """Writer and table view of every namespace's snapshot ledger, shared by the broker's TBs.

    Counters: ``writes``, ``table_view_loads``, ``table_view_entries_read``.
    """

    def __init__(self, ledgers: LedgerFactory, scheduler: Scheduler) -> None:
        self._ledgers = ledgers
        self._sched = scheduler
        self._handles: dict[str, ManagedLedger] = {}
        self._views: dict[str, dict[str, TBSnapshot]] = {}
        self.stats = Counters()

    def _view(self, ledger_name: str) -> tuple[ManagedLedger, dict[str, TBSnapshot]]:
        name = snapshot_ledger_name(ledger_name)
        view = self._views.get(name)
        if view is None:
            view = {}
            ledger = self._handles[name] = self._ledgers.open(name)
            self.stats["table_view_loads"] += 1
            entries = ledger.read(ledger.first_position(), ledger.last_confirmed(), 1 << 62)
            self.stats["table_view_entries_read"] += len(entries)
            for entry in entries:
                assert entry.data.payload is not None
                snap = TBSnapshot.from_payload(dict(entry.data.payload))
                view[snap.topic] = snap
            self._views[name] = view
        return self._handles[name], view

    def latest(self, topic: str) -> TBSnapshot | None:
        """The last snapshot written for ``topic`` (a partition or segment ledger name)."""
        return self._view(topic)[1].get(topic)

    def write(self, snapshot: TBSnapshot) -> Position:
        ledger, view = self._view(snapshot.topic)
        size = 48 + 32 * len(snapshot.aborts)
        pos = ledger.append(EntryData(size=size, publish_ts_us=self._sched.now_us(), payload=snapshot.to_payload()))
        view[snapshot.topic] = snapshot
        self.stats["writes"] += 1
        return pos

    def close(self) -> None:
        for ledger in self._handles.values():
            ledger.close()
        self._handles.clear()
        self._views.clear()
