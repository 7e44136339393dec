"""The header cache every v5 participant keeps (PIP-473 "Notification mechanism"): populated
by the read that authorises a write or ack, kept fresh by a point watch on each cached header."""

from __future__ import annotations

from typing import Callable

from engine.counters import Counters
from engine.errors import TxnNotFound, TxnNotOpen
from engine.ids import Design, TxnID
from engine.ports import TxnStatus
from metadata_v5.txnrecords import Header, TxnRecords


class HeaderCache:
    def __init__(self, records: TxnRecords, owner: object, where: str, stats: Counters,
                 on_final: Callable[[TxnID, TxnStatus], None], watch: bool) -> None:
        self._records = records
        self._owner = owner
        self._where = where
        self._stats = stats
        self._on_final = on_final
        self._watch = watch  # False in the events variant: participants watch event records
        self.states: dict[TxnID, TxnStatus] = {}

    def require_open(self, txn: TxnID) -> None:
        """Authorise a write/ack: cache-first header read; TxnConflict unless OPEN."""
        txn.require(Design.V5)
        state = self.states.get(txn)
        if state is None:
            # on a publish's path the read holds the request up: the metered records bill it to
            # the request in progress
            header = self._records.get_header(txn)
            self._stats["header_reads"] += 1
            if header is None:
                raise TxnNotFound(f"{self._where}: no header for {txn}")
            state = header.state
            if state is TxnStatus.OPEN:
                self.track(txn)
            else:
                self.states[txn] = state
        else:
            self._stats["header_cache_hits"] += 1
        if state is not TxnStatus.OPEN:
            self._stats["rejected_not_open"] += 1
            raise TxnNotOpen(f"{self._where}: {txn} is {state.value}, not open; write refused")

    def track(self, txn: TxnID) -> None:
        """Cache ``txn`` as OPEN and watch its header (watch variant)."""
        if txn in self.states:
            return
        self.states[txn] = TxnStatus.OPEN
        if self._watch:
            def changed(header: Header | None) -> None:
                self._changed(txn, header)

            self._records.watch_header(txn, self._owner, changed)

    def _changed(self, txn: TxnID, header: Header | None) -> None:
        self._stats["watch_events"] += 1
        if header is None or header.state is TxnStatus.OPEN:
            return
        self.final(txn, header.state)

    def final(self, txn: TxnID, state: TxnStatus) -> None:
        """Materialise a decision once (from a header watch, an event record or recovery)."""
        if self.states.get(txn) is state:
            return
        self.states[txn] = state
        if self._watch:
            self._records.unwatch_header(txn, self._owner)
        self._on_final(txn, state)

    def forget(self, txn: TxnID) -> None:
        self.states.pop(txn, None)

    def lookup(self, txn: TxnID) -> TxnStatus | None:
        """State for the dispatcher: cache, else one header read (cached if found)."""
        state = self.states.get(txn)
        if state is None:
            header = self._records.get_header(txn)
            self._stats["header_reads"] += 1
            if header is None:
                return None
            state = header.state
            if state is TxnStatus.OPEN:
                self.track(txn)
            else:
                self.states[txn] = state
        return state
