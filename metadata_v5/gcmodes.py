"""What a coordinator's GC sweep does with a finished txn whose op records are left after the
retention: one policy per :class:`~metadata_v5.options.GcMode`, selected once by
``V5Options.gc`` (:func:`policy_of`). The sweep itself (which txns, how their records are listed)
is the coordinator's."""

from __future__ import annotations

from typing import Callable, Protocol

from engine.counters import Counters
from engine.ids import TxnID
from metadata_v5.options import GcMode, V5Options
from metadata_v5.txnrecords import OpRecord, TxnRecords

# the coordinator's re-publication of a txn's events (True), or False when its design has none
Repair = Callable[[TxnID, "list[OpRecord]"], bool]


class LeftoverPolicy(Protocol):
    def keep_header(self, txn: TxnID, ops: list[OpRecord], records: TxnRecords, stats: Counters,
                    repair: Repair) -> bool:
        """Act on ``txn``'s leftover ``ops``; True keeps its header for a later sweep."""


class RepairLeftovers:
    """Pulsar 5.0.1 (``TransactionCoordinatorV5.gcOneTxn`` L608-633): keep the header and
    re-publish the events, so a participant that missed them materialises the txn. The PIP
    variants have no events: they wait."""

    def keep_header(self, txn: TxnID, ops: list[OpRecord], records: TxnRecords, stats: Counters,
                    repair: Repair) -> bool:
        if not repair(txn, ops):
            stats["gc.waiting_for_participants"] += 1
        return True


class WaitForParticipants:
    """Keep the header and the op records until the participants materialise (no re-publish)."""

    def keep_header(self, txn: TxnID, ops: list[OpRecord], records: TxnRecords, stats: Counters,
                    repair: Repair) -> bool:
        stats["gc.waiting_for_participants"] += 1
        return True


class ForceDelete:
    """PIP-473's sweep as written: force-delete the leftover op records, then the header (5.0.1
    never does this)."""

    def keep_header(self, txn: TxnID, ops: list[OpRecord], records: TxnRecords, stats: Counters,
                    repair: Repair) -> bool:
        records.delete_ops(ops)
        stats["gc.forced_op_deletes"] += len(ops)
        return False


POLICIES: dict[GcMode, LeftoverPolicy] = {
    GcMode.REPAIR: RepairLeftovers(),
    GcMode.WAIT: WaitForParticipants(),
    GcMode.FORCE: ForceDelete(),
}


def policy_of(opts: V5Options) -> LeftoverPolicy:
    return POLICIES[opts.gc]
