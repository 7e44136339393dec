"""Migrating a topic's transactional state from v4 (markers) to v5 (PIP-473 metadata).

What is read (never written): the topic's ledger(s) — data entries carrying v4 txn ids, commit
and abort markers —, the topic's latest transaction-buffer snapshot (its aborted list), and the
coordinators' ``__transaction_log_<tc>`` ledgers (each txn's status, deadline, participants).

What is derived, per txn with entries on the topic:

* **committed** — a commit marker on the topic (or COMMITTED in the log);
* **aborted** — an abort marker, or listed in the snapshot (or ABORTED in the log);
* **open** — entries and no marker, OPEN in the coordinator's log.

Migration is **refused** (:class:`MigrationRefused`, nothing written) while any txn that touched
the topic is COMMITTING or ABORTING (its markers are still being written: the outcome is decided
but not yet in the data), when an entry's txn is unknown to the log and has no marker, and when an
open txn holds pending acks on the topic (they live in the v4 pending-ack log, which v5 does not
read: end or abort that txn first).

What is written, through the record layer (``metadata_v5.store.records``), so that a v5 reader of
the old data skips exactly the aborted entries and waits on exactly the open ones:

* aborted txn: a header finalized ABORTED with ``finalized_us`` = :data:`PINNED_US` (the v5 GC
  only collects headers finalized before ``now - retention``, so these are never collected while
  the v4 data exists), plus an abort range per ledger (unless the v5 GC mode is ``force``);
* committed txn: nothing when abort ranges are kept (a txn the store does not know is committed
  there); with the ``force`` GC mode, the PIP's sweep (unknown = aborted), a pinned COMMITTED header;
* open txn: an OPEN header with the v4 deadline and one write op record per entry: the v5
  buffer pins maxReadPosition before its first entry; the v5 timeout sweep aborts it at the
  deadline, as the v4 coordinator would have. The v4 client cannot end it through v5 (its id is
  refused with ForeignTxnId), so migrate once v4 producers of the topic have stopped;
* the v5 id counter ``/txn-ids/<tc>`` of every v4 coordinator id seen is moved past the highest
  v4 sequence, so no v5 txn ever gets the (most, least) bits of a migrated one.

Rollback: the v4 ledgers, markers, snapshot, coordinator logs and cursors are untouched, so the
topic can be switched back to v4 (delete the records written here or just ignore them) **until
the first v5 transactional write or transactional ack on the topic**: from then on the ledger
holds entries of a txn no v4 coordinator issued and no marker will ever close, so a v4 buffer
would pin maxReadPosition before it forever (and a v5 transactional ack is invisible to v4's
pending-ack log). Non-transactional publishes and plain acks under v5 do not end the window.
A migrated open txn aborted by the v5 timeout sweep does not end it either: v4's coordinator
still holds it OPEN and aborts it itself after the switch back.

A migrated open txn that the v5 timeout sweep aborts stays aborted for a reader of the old data
after the v5 GC collects its header: its op records keep the v4 design of its id
(``StoreTxnRecords.add_op``), so the abort range the buffer writes names the id the entries carry
(``tests/unit/test_migrate.py::test_an_open_txn_that_times_out_after_migration_stays_aborted_after_gc``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.clock import VirtualScheduler
from engine.errors import BadVersion, TxnbenchError
from engine.ids import Design, TxnID
from engine.ledger import LedgerFactory, scan_entries
from engine.ports import TxnStatus
from engine.records import MarkerKind, Position
from legacy_v4.snapshot import SnapshotService
from metadata_v5.options import GcMode, V5Options
from metadata_v5.store.port import ABSENT, MetadataStore
from metadata_v5.store.records import StoreTxnRecords
from metadata_v5.txnrecords import AbortedRange, Op

LOG_PREFIX = "persistent://pulsar/system/__transaction_log_"
PINNED_US = 2**52  # finalized_us of migrated headers: beyond every GC horizon
READ_BATCH = 1_000


class MigrationRefused(TxnbenchError):
    """The topic cannot be migrated now; nothing was written."""


@dataclass
class V4Txn:
    txn: TxnID
    positions: dict[str, list[Position]] = field(default_factory=dict)  # ledger -> entries
    marker: MarkerKind | None = None
    status: TxnStatus | None = None  # from the coordinator's log (None: not in the log)
    deadline_us: int | None = None


@dataclass
class MigrationPlan:
    ledgers: list[str]
    committed: list[V4Txn]
    aborted: list[V4Txn]
    open: list[V4Txn]
    entries_scanned: int
    markers: int
    snapshot_aborts: int
    max_seq: dict[int, int]  # v4 coordinator id -> highest sequence seen


@dataclass
class MigrationResult:
    plan: MigrationPlan
    headers: int = 0
    op_records: int = 0
    abort_ranges: int = 0
    id_counters: int = 0


def _coordinator_log(ledgers: LedgerFactory) -> dict[TxnID, dict[str, object]]:
    """Each txn's last known state in the v4 coordinators' logs (read only)."""
    out: dict[TxnID, dict[str, object]] = {}
    for name in ledgers.names(LOG_PREFIX):
        log = ledgers.open(name)
        for e in scan_entries(log, READ_BATCH):
            rec = e.data.payload or {}
            txn = TxnID(Design.V4, int(rec["tc"]), int(rec["txn"]))  # type: ignore[call-overload]
            meta = out.setdefault(txn, {"status": TxnStatus.OPEN, "partitions": set(), "subs": set()})
            op = rec.get("op")
            if op == "new":
                meta["deadline_us"] = int(rec["start_us"]) + int(rec["timeout_ms"]) * 1000  # type: ignore[call-overload]
            elif op == "add_partition":
                meta["partitions"].add(str(rec["partition"]))  # type: ignore[attr-defined]
            elif op == "add_subscription":
                meta["subs"].add(str(rec["partition"]))  # type: ignore[attr-defined]
            elif op == "update":
                meta["status"] = TxnStatus(rec["new"])
    return out


def plan_migration(ledgers: LedgerFactory, topic_ledgers: list[str]) -> MigrationPlan:
    """Derive the transactional state of the topic from v4's durable data; raises
    :class:`MigrationRefused` when it cannot be migrated now. Reads only."""
    log = _coordinator_log(ledgers)
    txns: dict[TxnID, V4Txn] = {}
    scanned = markers = snap_aborts = 0
    snapshots = SnapshotService(ledgers, VirtualScheduler())
    snapshot_aborted: set[TxnID] = set()
    for name in topic_ledgers:
        if not ledgers.exists(name):
            raise MigrationRefused(f"no ledger {name!r} in this ledger store")
        snap = snapshots.latest(name)
        if snap is not None:
            snapshot_aborted.update(t for t, _ in snap.aborts)
        ml = ledgers.open(name)
        for e in scan_entries(ml, READ_BATCH):
            scanned += 1
            txn = e.data.txn
            if txn is None:
                continue
            if txn.design is not Design.V4:
                raise MigrationRefused(f"{name}: entry {e.position} belongs to {txn}: the topic already has v5 transactions")
            t = txns.setdefault(txn, V4Txn(txn))
            if e.data.marker is not None:
                markers += 1
                t.marker = e.data.marker
            else:
                t.positions.setdefault(name, []).append(e.position)
    snap_aborts = len(snapshot_aborted)
    for txn, meta in log.items():  # txns still ending elsewhere that touched this topic
        if meta["status"] in (TxnStatus.COMMITTING, TxnStatus.ABORTING) and (
                set(meta["partitions"]) | set(meta["subs"])) & set(topic_ledgers):  # type: ignore[call-overload]
            raise MigrationRefused(f"txn {txn} is {meta['status'].value} (markers still being written); retry when it has ended")  # type: ignore[attr-defined]
        if meta["status"] is TxnStatus.OPEN and set(meta["subs"]) & set(topic_ledgers):  # type: ignore[call-overload]
            raise MigrationRefused(f"open txn {txn} holds pending acks on the topic; end or abort it first")
    committed, aborted, opened = [], [], []
    for txn, t in txns.items():
        if not t.positions:
            continue  # only a marker left (data trimmed): nothing for a reader to decide
        logged = log.get(txn)
        if logged is not None:
            t.status = logged["status"]  # type: ignore[assignment]
            t.deadline_us = logged.get("deadline_us")  # type: ignore[assignment]
        if t.marker is MarkerKind.ABORT or txn in snapshot_aborted or (t.marker is None and t.status is TxnStatus.ABORTED):
            aborted.append(t)
        elif t.marker is MarkerKind.COMMIT or t.status is TxnStatus.COMMITTED:
            committed.append(t)
        elif t.status is TxnStatus.OPEN:
            opened.append(t)
        else:
            raise MigrationRefused(f"txn {txn} has entries but no marker and is unknown to the coordinator log")
    max_seq: dict[int, int] = {}
    for txn in list(txns) + list(log):
        max_seq[txn.most_bits] = max(max_seq.get(txn.most_bits, -1), txn.least_bits)
    return MigrationPlan(list(topic_ledgers), committed, aborted, opened, scanned, markers, snap_aborts, max_seq)


def migrate(ledgers: LedgerFactory, topic_ledgers: list[str], store: MetadataStore, *, gc: GcMode = GcMode.WAIT,
            dry_run: bool = False) -> MigrationResult:
    """Plan, then write the v5 records of the topic's v4 transactions (see the module doc) for
    the readers of a v5 run with GC mode ``gc``: abort ranges unless the GC force-deletes
    (``V5Options.keeps_abort_ranges``), pinned committed headers when it does."""
    keeps_abort_ranges = V5Options(gc=gc).keeps_abort_ranges
    plan = plan_migration(ledgers, topic_ledgers)
    result = MigrationResult(plan)
    if dry_run:
        return result
    records = StoreTxnRecords(store, lambda deliver: None)
    for tc, seq in plan.max_seq.items():  # reserve the v4 id range in v5's counter
        key = f"/txn-ids/{tc}"
        while True:
            rec = store.get(key)
            current = int(rec.fields["next"]) if rec else 0
            if current > seq:
                break
            try:
                store.put(key, {"next": str(seq + 1)}, rec.version if rec else ABSENT)
                result.id_counters += 1
                break
            except BadVersion:
                continue
    final = [(t, TxnStatus.ABORTED) for t in plan.aborted]
    if not keeps_abort_ranges:  # unknown = aborted under the forced sweep: say committed
        final += [(t, TxnStatus.COMMITTED) for t in plan.committed]
    for t, state in final:
        header = records.get_header(t.txn) or records.create_header(t.txn, PINNED_US, 0)
        if header.state is TxnStatus.OPEN:
            records.finalize(header, state, PINNED_US)
            result.headers += 1
        if state is TxnStatus.ABORTED and keeps_abort_ranges:
            for name, positions in t.positions.items():
                records.put_aborted(name, [AbortedRange(t.txn, positions[0], positions[-1])])
                result.abort_ranges += 1
    for t in plan.open:
        if records.get_header(t.txn) is not None:
            continue  # migrated before (idempotent re-run)
        records.create_header(t.txn, t.deadline_us if t.deadline_us is not None else PINNED_US, 0)
        result.headers += 1
        for name, positions in t.positions.items():
            for pos in positions:
                records.add_op(t.txn, Op("write", name, pos))
                result.op_records += 1
    return result


def summary(result: MigrationResult) -> str:
    p = result.plan
    return (f"scanned {p.entries_scanned} entries ({p.markers} markers, {p.snapshot_aborts} snapshot aborts) on "
            f"{len(p.ledgers)} ledger(s): {len(p.committed)} committed, {len(p.aborted)} aborted, {len(p.open)} open txns; "
            f"wrote {result.headers} headers, {result.op_records} op records, {result.abort_ranges} abort ranges, "
            f"{result.id_counters} id counters")
