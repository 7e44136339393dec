"""Transaction-buffer snapshots: one ``__transaction_buffer_snapshot`` topic per namespace,
records keyed by topic (Pulsar's ``SystemTopicTxnBufferSnapshotService`` with the
``SingleSnapshotAbortedTxnProcessorImpl`` record: max read position plus the aborted set).

Pulsar reads the latest snapshot of a topic through a per-namespace TableView that the broker
keeps up to date; here :class:`SnapshotService` loads each namespace's view once per broker life
(reading every stored record, counted in ``table_view_entries_read``) and then updates it with
its own writes, so a TB's lookup costs no ledger read.

The snapshot topic is compacted, as Pulsar compacts every system topic (``SystemTopic`` enables
compaction; with the default threshold of 0 bytes the compaction monitor, every
``brokerServiceCompactionMonitorIntervalInSeconds`` = 60 s, compacts any backlog): a compaction
writes the latest record of each topic to a new ledger and deletes the older ones (Pulsar keeps
a compacted ledger and trims the topic's consumed ledgers behind the compaction cursor). The
topic is the sequence of its *generations*: the base ledger, then ``<base>-compacted-<n>``; a
reader replays them in order, later records winning, which is right at every point of a
compaction, so the table view, and the memory a long replay needs, stay bounded by the number of
topics instead of growing with every snapshot ever taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.clock import Scheduler, Timer
from engine.counters import Counters
from engine.ids import TxnID
from engine.ledger import LedgerFactory, ManagedLedger, scan_entries
from engine.records import EntryData, Position
from legacy_v4.codec import pos_in, pos_out, txn_in, txn_out

SNAPSHOT_TOPIC = "__transaction_buffer_snapshot"
COMPACTED = "-compacted-"  # <base>-compacted-<n>: generation n of a namespace's snapshot topic
COMPACTION_CHECK_MS = 60_000  # brokerServiceCompactionMonitorIntervalInSeconds


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
    """Writer, table view and compactor of every namespace's snapshot topic, shared by the
    broker's TBs.

    Counters: ``writes``, ``table_view_loads``, ``table_view_entries_read``, ``compactions``,
    ``compaction_entries_written``, ``compaction_entries_dropped``.
    """

    def __init__(self, ledgers: LedgerFactory, scheduler: Scheduler,
                 compaction_check_ms: int = COMPACTION_CHECK_MS) -> None:
        self._ledgers = ledgers
        self._sched = scheduler
        self._check_us = compaction_check_ms * 1000
        self._handles: dict[str, ManagedLedger] = {}  # namespace topic -> its newest generation
        self._views: dict[str, dict[str, TBSnapshot]] = {}
        self._stored: dict[str, int] = {}  # namespace topic -> records stored over its generations
        self._check: Timer | None = None
        self.stats = Counters()

    def _generations(self, name: str) -> list[str]:
        """The ledgers of snapshot topic ``name``, oldest first (just ``name`` if none exists)."""
        gens = [(0, name)] if self._ledgers.exists(name) else []
        for ledger in self._ledgers.names(name + COMPACTED):
            suffix = ledger[len(name) + len(COMPACTED):]
            if suffix.isdigit():
                gens.append((int(suffix), ledger))
        return [ledger for _, ledger in sorted(gens)] or [name]

    def _view(self, ledger_name: str) -> tuple[ManagedLedger, dict[str, TBSnapshot]]:
        name = snapshot_ledger_name(ledger_name)
        view = self._views.get(name)
        if view is None:
            view = {}
            self.stats["table_view_loads"] += 1
            stored = 0
            for gen in self._generations(name):
                ledger = self._ledgers.open(gen)
                if name in self._handles:
                    self._handles[name].close()
                self._handles[name] = ledger
                for entry in scan_entries(ledger, 1 << 30):
                    assert entry.data.payload is not None
                    snap = TBSnapshot.from_payload(dict(entry.data.payload))
                    view[snap.topic] = snap
                    stored += 1
            self.stats["table_view_entries_read"] += stored
            self._stored[name] = stored
            self._views[name] = view
        return self._handles[name], view

    def latest(self, topic: str) -> TBSnapshot | None:
        """The last snapshot written for ``topic`` (a partition or segment ledger name)."""
        return self._view(topic)[1].get(topic)

    def write(self, snapshot: TBSnapshot) -> Position:
        ledger, view = self._view(snapshot.topic)
        pos = ledger.append(self._entry(snapshot))
        view[snapshot.topic] = snapshot
        self._stored[snapshot_ledger_name(snapshot.topic)] += 1
        self.stats["writes"] += 1
        if self._check is None:  # the next compaction check: there is a backlog now
            self._check = self._sched.call_later(self._check_us, self._compact_backlogs)
        return pos

    def _entry(self, snapshot: TBSnapshot) -> EntryData:
        return EntryData(size=48 + 32 * len(snapshot.aborts), publish_ts_us=self._sched.now_us(),
                         payload=snapshot.to_payload())

    def _compact_backlogs(self) -> None:
        self._check = None
        for name, view in self._views.items():
            if self._stored[name] > len(view):  # superseded records: compact (threshold 0)
                self._compact(name, view)

    def _compact(self, name: str, view: dict[str, TBSnapshot]) -> None:
        """Write the latest record per topic to a new generation, then delete the older ones."""
        old = self._generations(name)
        last = old[-1]
        n = int(last[len(name) + len(COMPACTED):]) + 1 if last != name else 1
        ledger = self._ledgers.open(f"{name}{COMPACTED}{n}")
        for snapshot in view.values():
            ledger.append(self._entry(snapshot))
        self._handles[name].close()
        self._handles[name] = ledger
        for gen in old:
            self._ledgers.delete(gen)
        self.stats["compactions"] += 1
        self.stats["compaction_entries_written"] += len(view)
        self.stats["compaction_entries_dropped"] += self._stored[name] - len(view)
        self._stored[name] = len(view)

    def close(self) -> None:
        if self._check is not None:
            self._check.cancel()
            self._check = None
        for ledger in self._handles.values():
            ledger.close()
        self._handles.clear()
        self._views.clear()
        self._stored.clear()
