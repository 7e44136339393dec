"""The ManagedLedger port: Pulsar's append-only log of a topic partition or segment, plus the
durable cursor state of its subscriptions.

A :class:`LedgerFactory` owns the *durable* data. A :class:`ManagedLedger` is a handle onto it:
handles (and the listeners registered on them) belong to a broker and die with it in a crash;
what was appended, sealed, trimmed or saved as cursor state survives and is seen by the next
handle opened on the same name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Iterator, NamedTuple

from engine.counters import Counters
from engine.records import Entry, EntryData, Position


class CursorState(NamedTuple):
    """A subscription's durable position: everything at or before ``mark_delete`` is acked, and
    so is each position in ``individually_acked`` (all strictly after ``mark_delete``)."""

    mark_delete: Position
    individually_acked: tuple[Position, ...] = ()


class ManagedLedger(ABC):
    """One named log. Positions are ``(ledger_id, entry_id)``; a managed ledger rolls over to a
    new ledger id as it grows, so positions of consecutive entries are not always adjacent:
    walk them with :meth:`next_position`.

    Counters (``stats``): ``appends``, ``appends.<kind>`` (data/marker/system), ``reads``,
    ``entries_read``, ``cursor_writes``, ``trimmed_entries``, ``trimmed_ledgers`` (whole-ledger
    backends).

    Capabilities, where backends legitimately differ (callers and tests ask these, never the type):
    ``rolls_over`` -- positions may move to a new ledger id as the log grows (``memory://``, like
    BookKeeper-backed Pulsar); ``False`` means one ledger id for life (``kafka://``).
    ``trims_whole_ledgers`` -- :meth:`trim` deletes whole ledgers and never the current one;
    ``False`` means it deletes every entry before the position (``kafka://`` delete-records).
    ``trims_consumed`` -- the backend deletes consumed ledgers by itself, as Pulsar does with the
    default retention: when a ledger rolls over or the slowest saved cursor's mark-delete moves to
    another ledger, every ledger wholly at or before the slowest mark-delete goes (never the
    current one; a ledger with no saved cursor keeps everything). Counted in ``trimmed_entries``
    and ``trimmed_ledgers`` like :meth:`trim`. ``False`` (``kafka://``): only :meth:`trim`
    deletes (Kafka's own retention is the broker's business).
    """

    name: str
    stats: Counters
    rolls_over: bool = True
    trims_whole_ledgers: bool = True
    trims_consumed: bool = False

    @abstractmethod
    def append(self, data: EntryData) -> Position:
        """Append one entry and return its position. Durable when it returns.
        Raises :class:`~engine.errors.LedgerSealed` if the ledger is sealed."""

    @abstractmethod
    def read(self, start: Position, end: Position, max_entries: int) -> list[Entry]:
        """Entries with ``start <= position <= end`` (both inclusive), in order, at most
        ``max_entries``. Trimmed positions are skipped silently; an empty range gives ``[]``."""

    @abstractmethod
    def last_confirmed(self) -> Position:
        """Position of the last entry; for an empty ledger, ``(current_ledger_id, -1)``."""

    @abstractmethod
    def first_position(self) -> Position:
        """Position of the first entry still stored (after trimming); if none is stored, the
        position the next append will get."""

    @abstractmethod
    def next_position(self, position: Position) -> Position:
        """The position of the entry after ``position`` (crossing into the next ledger when
        ``position`` is the last entry of a closed one). Defined for any position up to
        ``last_confirmed()``; for ``last_confirmed()`` it is where the next append lands."""

    @abstractmethod
    def seal(self) -> None:
        """Refuse every later append, durably (a sealed segment stays sealed after restart).
        Idempotent."""

    @property
    @abstractmethod
    def sealed(self) -> bool: ...

    @abstractmethod
    def trim(self, before: Position) -> int:
        """Delete whole ledgers all of whose entries are before ``before`` (Pulsar trims by
        ledger). The current ledger is never deleted. Returns the number of entries deleted.
        Without ``trims_whole_ledgers``, deletes every entry before ``before`` instead."""

    @abstractmethod
    def is_trimmed(self, position: Position) -> bool:
        """True if the entry at ``position`` has been deleted by :meth:`trim` (with
        ``trims_whole_ledgers``: if the ledger holding it has)."""

    @abstractmethod
    def entry_count(self) -> int:
        """Entries currently stored (appended minus trimmed)."""

    @abstractmethod
    def add_listener(self, listener: Callable[[Position], None]) -> None:
        """Call ``listener(position)`` after every append through *any* handle of this process.
        Listeners are volatile: they die with the handle (``close``)."""

    @abstractmethod
    def save_cursor(self, name: str, state: CursorState) -> None:
        """Durably store a subscription's cursor state (replaces the previous one)."""

    @abstractmethod
    def load_cursor(self, name: str) -> CursorState | None:
        """The last saved state of cursor ``name``, or ``None`` if it never existed."""

    @abstractmethod
    def delete_cursor(self, name: str) -> None:
        """Forget cursor ``name``; idempotent."""

    @abstractmethod
    def cursor_names(self) -> list[str]:
        """Names of every saved cursor, sorted."""

    @abstractmethod
    def close(self) -> None:
        """Drop this handle's listeners. The data stays."""

    def _check(self) -> None:
        """Assert the backend's in-memory invariants (tests call it through ``Broker._check``).
        Nothing here: a backend whose state is another process's (Kafka) has none of its own to
        check; the embedded backend overrides it."""


class LedgerFactory(ABC):
    """Opens managed ledgers by name over one durable store (``memory://`` or ``kafka://...``)."""

    url: str

    @abstractmethod
    def open(self, name: str) -> ManagedLedger:
        """A new handle on ledger ``name``, created empty if it does not exist."""

    @abstractmethod
    def exists(self, name: str) -> bool: ...

    @abstractmethod
    def names(self, prefix: str = "") -> list[str]:
        """Names of the existing ledgers that start with ``prefix``, sorted."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Delete ledger ``name`` with its cursors; idempotent."""

    def close(self) -> None:
        """Release connections; the durable data stays."""


def scan_entries(ledger: ManagedLedger, batch: int = 1_000) -> Iterator[Entry]:
    """Every stored entry of ``ledger`` from the first to the last confirmed one, read in
    batches of ``batch`` (recovery-style scans: migration, layout replay)."""
    start, lac = ledger.first_position(), ledger.last_confirmed()
    while start <= lac:
        entries = ledger.read(start, lac, batch)
        if not entries:
            return
        yield from entries
        start = ledger.next_position(entries[-1].position)


def entry_kind(data: EntryData) -> str:
    """Counter label of an entry: ``marker``, ``system`` (payload-carrying records) or ``data``."""
    if data.marker is not None:
        return "marker"
    if data.payload is not None:
        return "system"
    return "data"
