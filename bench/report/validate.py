"""The "model vs broker" validation (issue 17, item 5): the same trace through the model and the
real broker, held against the goals.

Inputs are three result sets of one trace: the model's (both designs, virtual time), the
broker's at the trace's timestamps (counts and latencies) and the broker's as fast as possible
(``--pacing asap``: throughput at saturation). This module only computes; :mod:`bench.pulsar.validate_run`
runs them and :mod:`bench.report.report` renders the section.

- **Counts** the broker exports under the models' names (:data:`bench.report.model_vs_broker.COUNTS`):
  "exact", or "explained" when they differ in a direction Pulsar's code says they may, by no more
  than what the runs count of that reason (:data:`EXPLAINED`: :class:`Why`, with class refs), else
  "differs".
- **Latency** p50/p99 of new-txn, publish, end-txn, commit-to-visible and dispatch (new-txn
  where the broker run recorded it: sets folded before 2026-11-26 did not): the model's relative
  error ``(model - broker) / broker`` against :class:`Goals` (p50 ±20 %, p99 ±35 %).
- **Throughput at saturation**: committed txns per second over the txn phase
  (:func:`bench.replay.measure.committed_rate`, as :mod:`bench.pulsar.fold` computes the broker's) per design and the v5/v4
  ratio, whose error is held against ±25 %. The broker's is the median of its asap runs; the model's
  from its replay of the trace as written ("as fast as the trace demands").

Where a latency goal is missed the section names the operation kinds the model bills for it
(:data:`BILLED`), so the note says which operation's model is wrong and in which direction.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow.parquet as pq

from bench.replay.measure import committed_rate, mean_put_us
from bench.report.model_vs_broker import COUNTS, engine_of
from bench.report.behind_end_txn import Modes, crowd_modes, end_spans, modes, new_txn_spans, note as modes_note, publish_spans
from bench.report.miss_causes import cause
from bench.report.client_events import events

LAG_NOTE_US = 1_000_000  # a broker run this far behind the trace measured an overloaded broker


@dataclass(frozen=True)
class Goals:
    p50: float = 0.20
    p99: float = 0.35
    ratio: float = 0.25  # the v5/v4 throughput ratio at saturation


GOALS = Goals()

# (label, latency.json metric): the operations the goals name
LATENCY_OPS = (
    ("new-txn", "new_txn_us"), ("publish (txn)", "publish_txn_us"), ("publish (plain)", "publish_nontxn_us"),
    ("end-txn", "end_txn_us"),
    ("commit-to-visible", "commit_to_visible_us"), ("dispatch (txn)", "dispatch_txn_us"),
    ("dispatch (plain)", "dispatch_nontxn_us"),
)

# What the model bills for each measured operation (engine/clock.py kinds), per design: named when
# a goal is missed so that the note says whose model is wrong. From the engines' code:
# engine/broker.py (publish), legacy_v4/coordinator.py (end-txn: the log append, the END_TXN
# fan-out, the final append and answer), metadata_v5/shipped_coordinator.py (end_txn, _fan_out),
# metadata_v5/shipped_buffer.py (the reconcile), engine/dispatcher.py (reads and deliveries).
BILLED: dict[str, dict[str, str]] = {
    "v4": {
        "new_txn_us": "rpc + the request's handling (coordinator.v4) + a coordinator-log ledger.append "
                      "(MLTransactionMetadataStore.newTransaction) + rpc back",
        "publish_txn_us": "2 rpc + ledger.append (engine/broker.py), plus the txn's registration of a new partition "
                          "with the coordinator (its handling, coordinator.v4, and a coordinator-log ledger.append)",
        "publish_nontxn_us": "2 rpc + ledger.append (engine/broker.py)",
        "end_txn_us": "from when the txn exists and its publishes and acks are answered (jvm TraceRunner.end): rpc to the broker, "
                      "the request's handling (coordinator.v4), a coordinator-log ledger.append, the END_TXN fan-out "
                      "(rpc + a marker ledger.append per partition and subscription, concurrently; a commit on a "
                      "subscription also waits for the cursor's ledger.append when its mark-delete limiter, 1 a "
                      "second, grants one), then the final log append + rpc back",
        "commit_to_visible_us": "the marker append, then the dispatcher's next read once maxReadPosition moves (its "
                                "polling delay, cursor.empty_read, ledger.read, consumer.deliver)",
        "dispatch_txn_us": "ledger.read + consumer.deliver after the polling delay, from the publish",
        "dispatch_nontxn_us": "ledger.read + consumer.deliver, from the publish",
    },
    "v5": {
        "new_txn_us": "rpc + the request's handling (coordinator.v5) + the sequence key (meta.read + meta.cas) + the "
                      "header create (meta.write) + rpc back; "
                      "the writes queue for the profile's metadata service time when the profile has one, behind "
                      "whatever the connection's thread holds (an END_TXN's whole chain of store calls on the "
                      "emulated store)",
        "publish_txn_us": "2 rpc + ledger.append (engine/broker.py), after what the connection's IO thread has queued "
                          "(capacity.IO_THREAD), plus the op-record write (emulated sequence key: meta.read + meta.cas "
                          "+ meta.write) and, on a txn's first publish to a segment, the coordinator's registration "
                          "(2 rpc, coordinator.v5, the ownership meta.read)",
        "publish_nontxn_us": "2 rpc + ledger.append (engine/broker.py), after what the connection's IO thread has "
                             "queued (capacity.IO_THREAD), plus the segment's watermark meta.cas when its state tail "
                             "is idle (run before the receipt on the managed ledger's thread: "
                             "PersistentTopic.addComplete, syncMaxReadPositionForNormalPublish)",
        "end_txn_us": "from when the txn exists and its publishes and acks are answered (jvm TraceRunner.end): rpc to the broker, "
                      "the request's handling (coordinator.v5), 2 meta.read (the header, twice) + meta.cas, then the "
                      "fan-out: meta.list + meta.list_keys per thousand keys walked (and meta.list_entries per thousand "
                      "memtable entries passed, where the profile sets it) + a meta.scan_get per op record the "
                      "emulated scan fetches, and the events "
                      "(emulated sequence key: meta.read + meta.cas + meta.write) right after the CAS, then rpc back; "
                      "its writes queue in arrival order on the broker's IO thread, each holding it for the "
                      "profile's metadata service time when the profile has one, the whole chain before any "
                      "request that arrives after it",
        "commit_to_visible_us": "the event reaching the buffer (meta.watch), after the store's notification thread "
                                "has finished the participants notified before it (capacity.EVENT_THREAD: each one's "
                                "watermark meta.cas and cleanup scan, meta.list + meta.list_keys per thousand keys "
                                "walked + a meta.scan_get per op record, then a meta.write per delete) and the "
                                "notifications of the writes before it (meta.notify per thousand listener calls: every "
                                "listener the store holds, on each), its reconcile's header reads (meta.read) and the "
                                "dispatcher's next read",
        "dispatch_txn_us": "ledger.read + consumer.deliver after the polling delay, from the publish; the delivery "
                           "after what the connection's IO thread has queued",
        "dispatch_nontxn_us": "ledger.read + consumer.deliver, from the publish; the delivery after what the "
                              "connection's IO thread has queued",
    },
}



def _reconcile_reads(model: Mapping[str, Any], broker: Mapping[str, Any]) -> int:
    """The shipped participants' triggerReconcile header reads (buffer and pending-ack store)."""
    return sum(int(v) for k, v in model.items() if k.endswith("reconcile_header_reads"))


@dataclass(frozen=True)
class Why:
    """One reason Pulsar's code gives for a count to differ: the direction it makes the difference
    go ("broker>model" or "broker<model"), the reason, and, where a run counts what the reason is
    about, a bound the difference must keep (``bound(model_counts, broker_counts)``: at most this
    far apart)."""

    direction: str
    text: str
    bound: Callable[[Mapping[str, Any], Mapping[str, Any]], int] | None = None

    def holds(self, m: float, b: float, model: Mapping[str, Any], broker: Mapping[str, Any]) -> bool:
        way = (self.direction == "broker>model" and b > m) or (self.direction == "broker<model" and b < m)
        return way and (self.bound is None or abs(b - m) <= self.bound(model, broker))


def _txn_acks_first(model: Mapping[str, Any], broker: Mapping[str, Any]) -> int:
    """(subscription, message) pairs a txn acked before the model delivered the message there."""
    return int(model.get("acks.txn_before_delivery", 0))


def _undelivered_here(model: Mapping[str, Any], broker: Mapping[str, Any]) -> int:
    """Deliveries the model does not make and the broker does: txn acks that came first (model),
    copies of messages the broker stored twice (bench.pulsar.fold)."""
    return _txn_acks_first(model, broker) + int(broker.get("deliveries.of_resent_copies", 0))


_TXN_ACK_FIRST = (
    "a txn ack of a message not yet delivered (the trace acks it by the id its publish returned) puts its "
    "position in pending ack, and the dispatcher skips positions in pending ack (AbstractBaseDispatcher."
    "filterEntriesForConsumer, PersistentSubscription.getPositionInPendingAck, M1), then the commit acks them: "
    "such a (subscription, message) is never delivered. In the model the ack came first for the pairs it counts "
    "as acks.txn_before_delivery (the difference is at most those); the broker, slower to apply a txn ack (the "
    "client registers the subscription with the coordinator first; the V5 SDK's acks also wait in its ack "
    "grouping), had delivered them (many-participants-2000-s2: 1439 + 23 and 1435 + 27 = the broker's 1462)")
def _txn_acks_after(model: Mapping[str, Any], broker: Mapping[str, Any]) -> int:
    """(subscription, message) pairs a txn acked after the model had delivered the message there."""
    return int(model.get("acks.txn_after_delivery", 0))


_TXN_ACK_FIRST_ON_THE_BROKER = (
    "the same rule the other way: a txn ack the model applied after delivering its message reached the broker "
    "before the broker's dispatcher did (the broker dispatches later than the model's next read: its polling and "
    "its own load), so the position was in pending ack and skipped (AbstractBaseDispatcher."
    "filterEntriesForConsumer, PersistentSubscription.getPositionInPendingAck, M1) and the commit acked it: a "
    "delivery the model made and the broker did not. At most the pairs the model counts as "
    "acks.txn_after_delivery")
_RESENT = (
    "; and the broker delivers each copy of a message its producer re-sent after a reconnection "
    "(ProducerImpl.resendMessages) and it stored twice (brokerDeduplicationEnabled is off), counted apart as "
    "deliveries.of_resent_copies (bench.pulsar.fold); the model stores each publish once")
_UNDELIVERED_TXN_ACK_FIRST = (
    "a message every subscription of which a txn acked before it was delivered is never delivered "
    "(AbstractBaseDispatcher.filterEntriesForConsumer skips positions in pending ack, M1; see deliveries), so the "
    "model counts it as undelivered; the broker had delivered them before the txn acks were applied")


# Counts that differ for a reason in Pulsar's code: (design, count) -> the reasons (Why), each with
# the direction the code makes the difference go. A difference no reason covers, or in a count not
# listed, is "differs".
EXPLAINED: dict[tuple[str, str], tuple[Why, ...]] = {
    ("v5", "meta.reads"): (Why("broker>model", (
        "the broker's pulsar_metadata_store_ops_latency_ms_count{type=get} (MetadataStoreStats) counts every "
        "metadata store of the broker — topic ownership and lookups (NamespaceService, OwnershipCache), managed-"
        "ledger and cursor metadata (MetaStoreImpl), load reports (ModularLoadManagerImpl) and the scalable "
        "topics' segment layout — besides the transaction records the model counts")),
        Why("broker<model", (
            "MetadataTransactionBuffer.triggerReconcile (M1 L420-444) reads, on every segment event, the header of "
            "every txn it tracks as OPEN, and a decided txn stays OPEN while it waits on the buffer's serial "
            "stateTail (enqueueApplyTerminal L458-466; applyTerminalNow puts the aborted record, CASes the "
            "watermark, scans the op records with one storeGet each, deletes them): how many it re-reads follows "
            "how long that tail is, i.e. the store's latency. The model bills a networked store (meta.read 300 µs, "
            "meta.write/cas 1 ms) where the standalone broker runs RocksDB in its own process; the model's other "
            "reads (ownership, header, sequence counters) are the release's and do not depend on it (small: 1,244 "
            "at 2,500 rows/s and 1,231 at 61 rows/s). With meta.read 20 µs and writes/CAS/list/watch 50 µs the "
            "model's reads fall below the broker's on small, omb-1-topic-16-partitions-1kb and many-participants "
            "(1,776 / 2,046 / 3,119 against 1,857 / 2,119 / 3,833): the excess is reconcile re-reads"),
            _reconcile_reads),
    ),
    ("v5", "meta.writes"): (Why("broker>model", (
        "pulsar_metadata_store_ops_latency_ms_count{type=put|del} counts every store write of the broker: "
        "managed-ledger and cursor metadata (MetaStoreImpl.asyncUpdateLedgerIds / asyncUpdateCursorInfo), "
        "topic creation and the segment layout, besides the transaction records; and 5.0.1 CASes a per-segment "
        "watermark on plain publishes (MetadataTransactionBuffer.syncMaxReadPositionForNormalPublish L689-703), "
        "which the model does not write")),),
    ("v4", "meta.reads"): (Why("broker>model", (
        "the v4 design keeps no transaction state in the metadata store; the broker's gets are topic lookups, "
        "ownership and managed-ledger/cursor metadata (MetaStoreImpl) of the run's topics and system topics")),),
    ("v4", "meta.writes"): (Why("broker>model", (
        "the v4 design writes no transaction state to the metadata store; the broker's puts are ledger and "
        "cursor metadata (MetaStoreImpl.asyncUpdateLedgerIds / asyncUpdateCursorInfo) of the run's topics and "
        "of the system topics the transactions use (__transaction_buffer_snapshot, __transaction_pending_ack)")),),
    ("v4", "tc.log_appends"): (Why("broker>model", (
        "pulsar_txn_append_log_count (MLTransactionMetadataStore.appendLogCount) is broker-wide: any other client "
        "of the broker during the run adds to it")),),
    ("v4", "tc.txns.created"): (Why("broker>model", (
        "pulsar_txn_created_count is broker-wide, and a newTransaction the client gave up on (its answer later than "
        "the client's operation timeout, TransactionCoordinatorClientImpl) and asked again leaves the coordinator "
        "with a txn no row uses, which times out later (TransactionTimeoutTrackerImpl) — likely on a loaded "
        "broker, not confirmed from its logs")),),
    ("v5", "tc.log_appends"): (Why("broker>model", (
        "the v5 design does not use the v4 coordinator (TransactionCoordinatorV5 keeps its state in the metadata "
        "store); pulsar_txn_append_log_count is broker-wide, so during the v5 run it counts the v4 coordinator's "
        "work left from the v4 run before it: a timed-out txn appends its ABORTING and ABORTED records "
        "(MLTransactionMetadataStore, TransactionTimeoutTrackerImpl)")),),
    ("v4", "tc.txns.timed_out"): (Why("broker>model", (
        "pulsar_txn_timeout_count is broker-wide: a txn an earlier run on this broker left open (a warm-up's "
        "newTransaction the client gave up on, see coordinator txns created) times out during this run when its "
        "timeout falls in it; the run's own txns ended as the trace says (its txn outcomes). Which earlier txns "
        "they were is not confirmed from the broker's logs")),),
    ("v5", "tc.txns.timed_out"): (Why("broker>model", (
        "pulsar_txn_timeout_count is the v4 coordinator's, broker-wide: txns the v4 run left open (see v4 "
        "coordinator txns created) time out during the v5 run that follows it")),),
    ("v4", "snapshot.writes"): (Why("broker>model", (
        "TopicTransactionBuffer takes a snapshot on its timer (takeSnapshotByTimeout M1 L601-607, every "
        "transactionBufferSnapshotMinTimeInMillis = 5 s from the first snapshot) when maxReadPosition moved since "
        "the last one (updateMaxReadPosition L635-642), so the wall time the broker run lasts decides how many "
        "timer snapshots it writes; the model's virtual run takes fewer seconds")),
        Why("broker<model", (
            "TopicTransactionBuffer's timer snapshots (takeSnapshotByTimeout M1 L601-607: every 5 s from the first "
            "snapshot, only if updateMaxReadPosition L635-642 counted a move since the last) number the 5-s windows "
            "per topic in which a commit or abort moved maxReadPosition; the model follows the same rule "
            "(legacy_v4/buffer.py) on the trace's timestamps, while a broker that falls behind the trace bunches "
            "the commits into fewer windows (small-slow-2000: up to 6.4 s behind, 28 against 31). The first "
            "snapshots (one per topic) are not timed and are not in the bound"),
            lambda model, broker: int(model.get("tb.snapshot_writes.by_time", 0))),
    ),
    ("v4", "ledger.appends.data"): (Why("broker>model", (
        "the broker stores a message twice when its producer re-sends it after a reconnection "
        "(ProducerImpl.resendMessages) and deduplication is off (brokerDeduplicationEnabled=false): each "
        "extra stored copy is an entry the model, which stores each publish once, does not write; their "
        "deliveries are counted as deliveries.of_resent_copies (bench.pulsar.fold), at least one per copy stored "
        "and delivered; a copy of a message in a txn that aborted is stored and never delivered (the dispatcher "
        "skips aborted txns' entries: AbstractBaseDispatcher.filterEntriesForConsumer, "
        "TopicTransactionBuffer.isTxnAborted), so those copies are at most the aborted entries the model's "
        "dispatchers skipped (dispatch.aborted_skipped)"),
        lambda model, broker: int(broker.get("deliveries.of_resent_copies", 0))
        + int(model.get("dispatch.aborted_skipped", 0))),),
    ("v4", "deliveries"): (Why("broker>model", _TXN_ACK_FIRST + _RESENT, _undelivered_here),
                           Why("broker<model", _TXN_ACK_FIRST_ON_THE_BROKER, _txn_acks_after)),
    ("v5", "deliveries"): (Why("broker>model", _TXN_ACK_FIRST + _RESENT, _undelivered_here),
                           Why("broker<model", _TXN_ACK_FIRST_ON_THE_BROKER, _txn_acks_after)),
    ("v4", "undelivered_at_end"): (Why("broker>model", (
        "the broker's client drains until no delivery came for a quiet spell (bench.pulsar.target.DRAIN_MS); "
        "messages of txns still open at the end stay behind maxReadPosition on both, the model's drain lets "
        "their timeouts (TransactionTimeoutTrackerImpl) abort them first")),
        Why("broker<model", _UNDELIVERED_TXN_ACK_FIRST, _txn_acks_first)),
    ("v5", "undelivered_at_end"): (Why("broker>model", (
        "the broker's client drains until no delivery came for a quiet spell (bench.pulsar.target.DRAIN_MS); "
        "the model's drain runs 70 s of virtual time, past the txns' timeouts (TransactionTimeoutTrackerImpl)")),
        Why("broker<model", _UNDELIVERED_TXN_ACK_FIRST, _txn_acks_first)),
}


@dataclass(frozen=True)
class Check:
    """One row of the section."""

    design: str  # v4, v5, or "v5/v4"
    section: str  # Counts, Latency, Throughput
    metric: str
    unit: str
    model: float | None
    broker: float | None
    error: float | None  # (model - broker) / broker; None when either side is missing or the broker's is 0
    verdict: str  # exact | explained | differs | within goal | missed | n/a
    why: str = ""


def relative_error(model: float | None, broker: float | None) -> float | None:
    if model is None or broker is None or broker == 0:
        return None
    return (model - broker) / broker


def goal_verdict(error: float | None, tolerance: float) -> str:
    if error is None:
        return "n/a"
    return "within goal" if abs(error) <= tolerance else "missed"


def count_checks(design: str, model: dict[str, Any], broker: dict[str, Any]) -> list[Check]:
    """Every mapped count the broker exported for this run, exact or explained."""
    out = []
    for label, key in COUNTS:
        if key not in broker:
            continue
        m, b = model.get(key, 0), broker[key]
        if m == b:
            out.append(Check(design, "Counts", label, "", m, b, relative_error(m, b), "exact"))
            continue
        why = next((w.text for w in EXPLAINED.get((design, key), ()) if w.holds(m, b, model, broker)), None)
        out.append(Check(design, "Counts", label, "", m, b, relative_error(m, b),
                         "differs" if why is None else "explained", why or ""))
    return out


def latency_checks(design: str, model: dict[str, Any], broker: dict[str, Any], goals: Goals = GOALS) -> list[Check]:
    out = []
    for label, metric in LATENCY_OPS:
        if metric not in broker:
            continue
        for pct, tol in (("p50", goals.p50), ("p99", goals.p99)):
            m = model.get(metric, {}).get(f"{pct}_us")
            b = broker[metric].get(f"{pct}_us")
            err = relative_error(m, b)
            verdict = goal_verdict(err, tol)
            why = ""
            if verdict == "missed":
                way = "above" if err is not None and err > 0 else "below"
                why = f"the model's is {abs(err or 0):.0%} {way} the broker's"
            out.append(Check(design, "Latency", f"{label} {pct}", "µs", m, b, err, verdict, why))
    return out


def throughput_checks(model: dict[str, float | None], broker: dict[str, float | None], goals: Goals = GOALS,
                      capacity: bool = False, model_asap: bool = False,
                      broker_range: tuple[float, float] | None = None) -> list[Check]:
    """Per design the committed rate (broker: at saturation; model: as fast as possible when
    ``model_asap``, else at the trace's pace), then the v5/v4 ratio, the one figure the goal holds.
    ``broker_range``: the lowest and highest v5/v4 ratio of the broker's asap runs one by one (a
    missed ratio says whether the model's lies inside the broker's own spread)."""
    out = [Check(d, "Throughput", "committed txns per second", "txn/s", model.get(d), broker.get(d),
                 relative_error(model.get(d), broker.get(d)), "n/a") for d in ("v4", "v5") if d in model or d in broker]
    mr = _ratio(model.get("v5"), model.get("v4"))
    br = _ratio(broker.get("v5"), broker.get("v4"))
    err = relative_error(mr, br)
    verdict = goal_verdict(err, goals.ratio)
    why = ""
    if verdict == "missed" and not (capacity and model_asap):
        why = ("the model ran " + ("as fast as possible" if model_asap else "at the trace's pace")
               + " with shared resources that " + ("queue work beyond their concurrency" if capacity else
                                                    "have no capacity (the latency profile gives none)")
               + ", so its rate follows what the trace offers while the broker's is bound by what saturates first "
               "(for v5 the metadata store's writes: every op record, delete and CAS goes through it)")
    elif verdict == "missed":
        why = (f"both as fast as possible, the model's resources as the latency profile gives them: its v5/v4 "
               f"ratio is {err:+.0%} off the broker's, so the profile's resources (fitted by calibrate on its own "
               "saturation trace) do not carry over to this trace's mix of operations")
    errs = [relative_error(model.get(d), broker.get(d)) for d in ("v4", "v5")]
    if verdict == "within goal" and all(e is not None and abs(e) > goals.ratio for e in errs) \
            and (errs[0] or 0) * (errs[1] or 0) > 0:
        # two brokers' rates moved 1.5x apart with their ratio held (datasets/validation/README.md,
        # session 35): a ratio met this way says nothing of either design's rate
        why = (f"met with both designs' rates off the broker's in one direction (v4 {errs[0]:+.0%}, v5 "
               f"{errs[1]:+.0%}): the designs' rates move together from broker to broker, and the ratio with them")
    if verdict == "missed" and mr is not None and broker_range is not None:
        lo, hi = broker_range
        where = "inside" if lo <= mr <= hi else "outside"
        why += (f"; the model's {mr:.2f} is {where} the broker's own spread, its runs one by one giving "
                f"{lo:.2f}-{hi:.2f}")
    out.append(Check("v5/v4", "Throughput", "v5/v4 committed-rate ratio at saturation", "ratio",
                     None if mr is None else round(mr, 3), None if br is None else round(br, 3), err, verdict, why))
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _txns(rs: dict[str, Any], label: str) -> list[dict[str, Any]]:
    path = Path(rs.get("dir", rs["path"])) / "txns.parquet"  # "dir": where it is now (bench.report.report.build)
    return [r for r in pq.read_table(path).to_pylist() if r["engine"] == label]


def _by_design(rs: dict[str, Any]) -> dict[str, str]:
    """design (v4/v5) -> run label; v5 is the shipped variant when a set ran several."""
    out: dict[str, str] = {}
    for label in rs["manifest"].get("runs", {}):
        d = engine_of(rs, label)
        if d not in out or label == "v5-shipped":
            out[d] = label
    return out


OUT_OF_ORDER = "client_warnings.out_of_order_receipt"  # bench.pulsar.client.LOG_WARNINGS


# a broker run's cores over its txn phase (bench.pulsar.cpu): the machine's busy ones, the broker
# process's, of those the v5 coordinator's sweep thread's (None: not recorded), the seconds the
# run waited first for that thread to idle (None: no such thread, or not recorded), and of the
# broker's, its JIT compiler threads' (None: not recorded, sets written before it was)
RunCpu = tuple[float, float | None, float | None, float | None, float | None]


def run_cpu(run: Mapping[str, Any]) -> RunCpu | None:
    """A broker run's :data:`RunCpu` from its manifest entry; None without a CPU record."""
    cpu = run.get("cpu")
    if not cpu:
        return None
    return (cpu["machine_busy_cores"], cpu["broker_cores"], cpu.get("sweep_cores"), run.get("sweep_wait_s"),
            cpu.get("jit_cores"))


def _cpu_json(c: RunCpu | None) -> dict[str, Any] | None:
    return None if c is None else {"machine_busy_cores": c[0], "broker_cores": c[1], "sweep_cores": c[2],
                                   "sweep_wait_s": c[3], "jit_cores": c[4]}


@dataclass(frozen=True)
class Validation:
    checks: tuple[Check, ...]
    model_path: str
    broker_path: str
    saturation_path: str | None
    profile_note: str
    unmapped: int  # broker counters that moved and map onto no model count
    broker_lag_us: tuple[tuple[str, int], ...] = ()  # per design: how far the broker run fell behind the trace (acks aside)
    duplicates: tuple[tuple[str, int], ...] = ()  # per design: (subscription, msg) the broker delivered more than once
    model_store: str = ""  # the model's v5 metadata store URL
    saturation_runs: tuple[tuple[str, tuple[float, ...]], ...] = ()  # per design: the broker's asap rates
    # the broker's state when its runs began (bench.pulsar.validate_run): restarted with fresh data,
    # discarded warm-up runs, per design the txns their rows held (empty: not recorded, sets written
    # before it was); None: none of it recorded (sets written before validate recorded it)
    broker_state: tuple[bool, int, tuple[tuple[str, int], ...]] | None = None
    # operations the broker's client saw fail, by error class: per design, in the run at the
    # trace's pace; and per design, the count in each asap run (a lost connection, a txn the
    # coordinator did not know: the run's counts and rate are then partly that run's trouble)
    broker_failures: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    saturation_failures: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # the broker's mean metadata put (µs, MetadataStoreStats' sum over its count) per design: in the
    # run at the trace's pace, and in each asap run (None where the run exported no sum)
    broker_put_us: tuple[tuple[str, float | None], ...] = ()
    saturation_put_us: tuple[tuple[str, tuple[float | None, ...]], ...] = ()
    # per design, each asap run's cores over its txn phase (bench.pulsar.cpu: :data:`RunCpu`), None
    # where the run recorded none; and the machine's cores
    saturation_cpu: tuple[tuple[str, tuple[RunCpu | None, ...]], ...] = ()
    cores: int | None = None
    # per design, how many times over its asap runs replayed the trace's rows (bench.trace.repeated),
    # and their txn phases' shortest and longest span in ms (bench.pulsar.cpu; None: not recorded)
    saturation_repeat: tuple[tuple[str, int], ...] = ()
    saturation_span_ms: tuple[float, float] | None = None
    # per design, the txns its coordinator had created before each asap run (:func:`txns_before`;
    # None where the run recorded no txn id): on a RocksDB store v5's rate falls with them
    saturation_txns_before: tuple[tuple[str, tuple[int | None, ...]], ...] = ()
    # the txns the model's v5 store started from (V5Options.history): in its trace-paced run and
    # in its asap run (None: no v5 model run there)
    model_v5_history: tuple[int | None, int | None] = (None, None)
    # validate --calibrate: the model's profile measured on this broker before its measured runs,
    # its saturation trace's rates then and again after them (bench.calibrate.in_session)
    calibration: Mapping[str, Any] | None = None
    broker_cpu: tuple[tuple[str, RunCpu | None], ...] = ()  # per design, its run at the trace's pace
    # per design, in each asap run: the receipts the client got out of order and closed its
    # connection on (client_warnings.out_of_order_receipt, from its log: bench.pulsar.client)
    saturation_reorders: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # per design, the new-txns of the model's run and of the broker's at the trace's pace in two
    # kinds: behind one of the client's end-txns or not (None: the run recorded no answer times)
    new_txn_modes: tuple[tuple[str, Modes | None, Modes | None], ...] = ()
    # the watches of topics loaded before that the model's v5 store started with
    # (V5Options.history_listeners), as model_v5_history
    model_v5_listeners: tuple[int | None, int | None] = (None, None)
    # per design, the JIT compiler threads' share of the broker's cores in its last warm-up run,
    # where the warm-up went on until it was low enough (bench.pulsar.validate_run.WARM_UP_JIT)
    warm_up_jit: tuple[tuple[str, float], ...] = ()
    # per design and kind of publish ("plain", "txn"), the model's and the broker's at the trace's
    # pace in the two kinds of new_txn_modes (None: the run kept no publish spans)
    publish_modes: tuple[tuple[str, str, Modes | None, Modes | None], ...] = ()
    # per design, the end-txns of the model's run and of the broker's at the trace's pace in two
    # kinds: those that overlapped another end-txn (a crowd, as every trace's last instant) or not
    end_txn_modes: tuple[tuple[str, Modes | None, Modes | None], ...] = ()

    def request_kinds(self) -> list[tuple[str, Modes | None, Modes | None]]:
        """Every request kind split around the client's end-txns, as (what, the model's, the
        broker's), for :func:`bench.report.behind_end_txn.section`."""
        designs = dict.fromkeys([d for d, *_ in self.new_txn_modes] + [d for d, *_ in self.end_txn_modes])
        out: list[tuple[str, Modes | None, Modes | None]] = []
        for design in designs:
            out += [(f"{design} new-txn", m, b) for d, m, b in self.new_txn_modes if d == design]
            out += [(f"{design} publish ({k})", m, b) for d, k, m, b in self.publish_modes if d == design]
            out += [(f"{design} end-txn", m, b) for d, m, b in self.end_txn_modes if d == design]
        return out

    def broker_state_note(self) -> str:
        if self.broker_state is None:
            return "the broker's state before its runs was not recorded"
        fresh, warm, txns = self.broker_state
        held = " and ".join(f"{n:,} {d} txns" for d, n in txns if n)
        return ("the broker restarted with its data wiped before this trace" if fresh else
                "the broker as earlier runs left it (no --fresh-broker)") + (
                f", then {warm} discarded as-fast-as-possible run{'s' if warm != 1 else ''} of the trace"
                + (f" (their rows held {held})" if held else "") if warm else ", no warm-up run") + (
                "; its JIT compiler threads' share of its cores in the last one: "
                + ", ".join(f"{d} {share:g}" for d, share in self.warm_up_jit) if self.warm_up_jit else "")

    def missed(self) -> list[Check]:
        return [c for c in self.checks if c.verdict in ("missed", "differs")]

    def met(self) -> list[Check]:
        return [c for c in self.checks if c.verdict in ("exact", "explained", "within goal")]

    def tally(self) -> str:
        judged = len(self.met()) + len(self.missed())
        return f"{len(self.met())} of {judged} judged rows meet them ({len(self.checks) - judged} n/a)"

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model_path, "broker": self.broker_path, "saturation": self.saturation_path,
                "profile": self.profile_note, "unmapped_broker_counters": self.unmapped,
                "broker_lag_us": dict(self.broker_lag_us), "broker_duplicate_deliveries": dict(self.duplicates),
                "broker_saturation_runs": {d: list(r) for d, r in self.saturation_runs},
                "broker_state": None if self.broker_state is None else {
                    "fresh": self.broker_state[0], "warm_up_runs": self.broker_state[1],
                    "warm_up_txns": dict(self.broker_state[2]),
                    **({"warm_up_jit": dict(self.warm_up_jit)} if self.warm_up_jit else {})},
                "broker_failed_ops": {d: dict(f) for d, f in self.broker_failures},
                "broker_saturation_failed_ops": {d: list(n) for d, n in self.saturation_failures},
                "broker_saturation_out_of_order_receipts": {d: list(n) for d, n in self.saturation_reorders},
                "broker_mean_put_us": dict(self.broker_put_us),
                "broker_saturation_mean_put_us": {d: list(n) for d, n in self.saturation_put_us},
                "broker_saturation_cpu": {d: [_cpu_json(c) for c in n] for d, n in self.saturation_cpu},
                "broker_cpu": {d: _cpu_json(c) for d, c in self.broker_cpu},
                "cores": self.cores, "saturation_repeat": dict(self.saturation_repeat),
                "broker_saturation_span_ms": None if self.saturation_span_ms is None else list(self.saturation_span_ms),
                "broker_saturation_txns_before": {d: list(n) for d, n in self.saturation_txns_before},
                "new_txn_modes": {d: {"model": None if m is None else m.to_json(),
                                      "broker": None if b is None else b.to_json()} for d, m, b in self.new_txn_modes},
                "publish_modes": {d: {k: {"model": None if m is None else m.to_json(),
                                          "broker": None if b is None else b.to_json()}
                                      for dd, k, m, b in self.publish_modes if dd == d}
                                  for d in dict.fromkeys(d for d, *_ in self.publish_modes)},
                "end_txn_modes": {d: {"model": None if m is None else m.to_json(),
                                      "broker": None if b is None else b.to_json()} for d, m, b in self.end_txn_modes},
                "model_v5_history": {"trace_pacing": self.model_v5_history[0], "asap": self.model_v5_history[1]},
                **({"model_v5_listeners": {"trace_pacing": self.model_v5_listeners[0], "asap": self.model_v5_listeners[1]}}
                   if any(self.model_v5_listeners) else {}),  # judgements of before wrote none
                "calibration": None if self.calibration is None else dict(self.calibration),
                "goals": {"p50": GOALS.p50, "p99": GOALS.p99, "ratio": GOALS.ratio},
                "tally": self.tally(),
                "checks": [c.__dict__ for c in self.checks]}


def calibration_note(cal: Mapping[str, Any]) -> str:
    """validate --calibrate's record (bench.calibrate.in_session.InSession.recheck) in a sentence:
    the broker's saturated rates on the calibration's trace before and after the measured runs."""
    before, after = cal.get("saturation_before") or {}, cal.get("saturation_after") or {}

    def rate(rec: Mapping[str, Any], d: str) -> float | None:
        got = (rec.get("committed_txns_per_s") or {}).get(d)
        return None if got is None else float(got)

    def rates(rec: Mapping[str, Any]) -> str:
        return ", ".join(f"{d} {r:,.1f}" for d in ("v4", "v5") for r in [rate(rec, d)] if r is not None)

    moved = [f"{d} {a / b - 1:+.0%}" for d in ("v4", "v5")
             for b, a in [(rate(before, d), rate(after, d))] if b and a is not None]
    text = (f"The model's profile ({cal.get('profile', 'profile.json')}) was calibrated on this broker in this session, "
            f"before its measured runs (validate --calibrate). The calibration's saturation trace ran at {rates(before)} "
            f"committed txn/s then; {cal.get('minutes_after_calibration', '?')} min later, after the measured runs, at "
            f"{rates(after)} ({', '.join(moved) or 'not comparable'}): how far the broker itself moved while it was judged.")
    model = cal.get("model_v5") or {}
    mb, ma = (model.get(w) or {} for w in ("before", "after"))
    b, a = rate(before, "v5"), rate(after, "v5")
    if mb.get("committed_txns_per_s") and ma.get("committed_txns_per_s") is not None and b and a is not None:
        expected = float(ma["committed_txns_per_s"]) / float(mb["committed_txns_per_s"])
        text += (f" v5's rate falls with the txns its store holds: the calibrated model gives {mb['committed_txns_per_s']:g} "
                 f"committed txn/s at the first measurement's history ({int(mb['history']):,} txns) and "
                 f"{ma['committed_txns_per_s']:g} at the second's ({int(ma['history']):,}), {expected - 1:+.0%}; the broker's "
                 f"v5 moved {a / b / expected - 1:+.0%} beyond that.")
    failed = after.get("failed_runs") or {}
    if failed:
        text += (" Left out of the second: " + ", ".join(f"{n} {d} run{'s' if n != 1 else ''}" for d, n in sorted(failed.items()))
                 + " in which the broker committed no txn (the client lost its connection).")
    return text


def _model_history_note(history: tuple[int | None, int | None]) -> str:
    paced, asap = history
    if not paced and not asap:
        return ("The model's v5 store started empty: its rate is that of a broker with no history (validate "
                "starts it from the broker's: --v5-option history=N).")
    return ("The model's v5 store started from " + " and ".join(
        f"{n:,} txns ({where})" for n, where in ((paced, "at the trace's pace"), (asap, "as fast as possible"))
        if n is not None) + ": each of its scans walks their counters (meta.list_keys).")


def _model_listeners_note(listeners: tuple[int | None, int | None]) -> str:
    paced, asap = listeners
    if not paced and not asap:
        return ""
    return (" It also held the watches of the v5 topics the broker had loaded before: " + " and ".join(
        f"{n:,} ({where})" for n, where in ((paced, "at the trace's pace"), (asap, "as fast as possible"))
        if n is not None) + ", each run on every store notification (meta.notify).")


def profile_note(model: dict[str, Any]) -> str:
    """Which latencies the model ran with, from its manifest (calib's profile record, if any),
    and the seed of its draws."""
    for run in model["manifest"].get("runs", {}).values():
        prof = run.get("latency_profile") or run.get("config", {}).get("latency_profile")
        if isinstance(prof, dict) and prof.get("name"):
            seed = f", latency seed {prof['seed']}" if prof.get("seed") is not None else ""
            return (f"latency profile {prof['name']} ({prof.get('path', '?')}, sha256 "
                    f"{str(prof.get('sha256', '?'))[:12]}{seed})")
    note = model["manifest"].get("validate", {}).get("profile_note")
    return str(note) if note else "today's hand-written constants (engine/clock.py DEFAULT_LATENCIES_US)"


def validate_sets(model: dict[str, Any], broker: dict[str, Any],
                  saturation: dict[str, Any] | list[dict[str, Any]] | None,
                  goals: Goals = GOALS, model_saturation: dict[str, Any] | list[dict[str, Any]] | None = None) -> Validation:
    """The section's rows from loaded result sets (:func:`bench.replay.results.load`); the model's
    throughput from ``model_saturation`` (its asap replay) when given, else from ``model``; the
    broker's from ``saturation``, one asap set or several (each design's median rate: the broker's
    own rate moves from run to run)."""
    mlab, blab = _by_design(model), _by_design(broker)
    checks: list[Check] = []
    unmapped = set()
    mapped = {k for _, k in COUNTS}
    for d in ("v4", "v5"):
        if d not in mlab or d not in blab:
            continue
        bc = broker["counts"].get(blab[d], {})
        checks += count_checks(d, model["counts"].get(mlab[d], {}), bc)
        checks += latency_checks(d, model["latency"].get(mlab[d], {}), broker["latency"].get(blab[d], {}), goals)
        unmapped |= {k for k in bc if k.startswith("pulsar.") and k not in mapped}
    rated_sets = ([model_saturation] if isinstance(model_saturation, dict) else list(model_saturation or [])) or [model]
    mrate: dict[str, float | None] = {}
    for rated in rated_sets:  # the first set that ran a design gives its rate
        for d, lab in _by_design(rated).items():
            if d in ("v4", "v5") and d not in mrate:
                mrate[d] = committed_rate(_txns(rated, lab))
    sat_sets = [saturation] if isinstance(saturation, dict) else list(saturation or [])
    runs: dict[str, list[float]] = {}
    sat_failed: dict[str, list[int]] = {}
    sat_reorder: dict[str, list[int]] = {}
    sat_put: dict[str, list[float | None]] = {}
    sat_cpu: dict[str, list[RunCpu | None]] = {}
    cores = None
    spans: list[float] = []
    repeats: dict[str, int] = {}
    before: dict[str, list[int | None]] = {}
    for rs in sat_sets:
        for d, lab in _by_design(rs).items():
            repeats.setdefault(d, int(rs["manifest"].get("trace", {}).get("repeated") or 1))
            before.setdefault(d, []).append(txns_before(rs, lab))
            sat_failed.setdefault(d, []).append(sum(failed_ops(rs, lab).values()))
            sat_reorder.setdefault(d, []).append(int(rs["counts"].get(lab, {}).get(OUT_OF_ORDER, 0)))
            sat_put.setdefault(d, []).append(mean_put_us(rs["counts"].get(lab, {})))
            cpu = rs["manifest"]["runs"][lab].get("cpu")
            sat_cpu.setdefault(d, []).append(run_cpu(rs["manifest"]["runs"][lab]))
            cores = cpu["cores"] if cpu else cores
            if cpu and cpu.get("span_ms"):
                spans.append(float(cpu["span_ms"]))
            rate = rs["manifest"]["runs"][lab].get("rates", {}).get("committed_txns_per_s")
            rate = rate if rate is not None else committed_rate(_txns(rs, lab))
            if rate is not None:
                runs.setdefault(d, []).append(rate)
    # v5/v4 of each run, the designs' runs paired in order (in one set, or one set per design)
    ratios = [v5 / v4 for v4, v5 in zip(runs.get("v4", []), runs.get("v5", [])) if v4]
    brate: dict[str, float | None] = {d: statistics.median(rates) for d, rates in runs.items()}
    capacity = any((run.get("config", {}).get("latency_profile") or {}).get("resources")
                   for rated in rated_sets for run in rated["manifest"].get("runs", {}).values())
    checks += throughput_checks(mrate, brate, goals, capacity, model_saturation is not None,
                                (min(ratios), max(ratios)) if len(ratios) > 1 else None)
    lag = tuple((d, _issue_lag(broker["manifest"]["runs"][lab])) for d, lab in blab.items())
    kinds = {d: (_request_kinds(model, mlab[d], d), _request_kinds(broker, blab[d], d))
             for d in ("v4", "v5") if d in mlab and d in blab}
    return Validation(tuple(checks), str(model["path"]), str(broker["path"]),
                      str(sat_sets[0]["path"]) if sat_sets else None, profile_note(model), len(unmapped),
                      lag, tuple((d, duplicate_deliveries(broker, lab)) for d, lab in blab.items()),
                      str(model["manifest"]["runs"].get(mlab.get("v5", ""), {}).get("config", {}).get("metadata_url", "")),
                      tuple((d, tuple(rates)) for d, rates in sorted(runs.items())), _broker_state(broker),
                      tuple((d, tuple(sorted(failed_ops(broker, lab).items()))) for d, lab in sorted(blab.items())),
                      tuple((d, tuple(n)) for d, n in sorted(sat_failed.items())),
                      tuple((d, mean_put_us(broker["counts"].get(lab, {}))) for d, lab in sorted(blab.items())),
                      tuple((d, tuple(n)) for d, n in sorted(sat_put.items())),
                      tuple((d, tuple(n)) for d, n in sorted(sat_cpu.items()) if any(n)), cores,
                      tuple(sorted(repeats.items())), (min(spans), max(spans)) if spans else None,
                      tuple((d, tuple(n)) for d, n in sorted(before.items()) if any(x is not None for x in n)),
                      _paced_and_asap(model, rated_sets if model_saturation is not None else [], "history"),
                      model["manifest"].get("validate", {}).get("calibration"),
                      tuple((d, run_cpu(broker["manifest"]["runs"][lab])) for d, lab in sorted(blab.items())),
                      tuple((d, tuple(n)) for d, n in sorted(sat_reorder.items()) if any(n)),
                      tuple((d, kinds[d][0][0], kinds[d][1][0]) for d in kinds),
                      _paced_and_asap(model, rated_sets if model_saturation is not None else [], "history_listeners"),
                      _warm_up_jit(broker),
                      tuple((d, kind, m[kind], b[kind]) for d, ((_, m, _), (_, b, _)) in kinds.items()
                            if m is not None and b is not None for kind in ("plain", "txn")),
                      tuple((d, kinds[d][0][2], kinds[d][1][2]) for d in kinds))


def _request_kinds(rs: dict[str, Any], label: str, design: str
                   ) -> tuple[Modes | None, dict[str, Modes | None] | None, Modes | None]:
    """A run's new-txns, and its publishes per kind ("plain", "txn"; None: the run kept no publish
    spans), each in the two kinds against its end-txns, and its end-txns against one another
    (bench.report.behind_end_txn)."""
    txns = _txns(rs, label)
    ends = end_spans(txns)
    spans = publish_spans(rs.get("dir", rs["path"]), label, design)
    return (modes(new_txn_spans(txns), ends),
            None if spans is None else {kind: modes(spans[plain], ends) for kind, plain in (("plain", True), ("txn", False))},
            crowd_modes(ends))


def _paced_and_asap(model: dict[str, Any], asap: list[dict[str, Any]], option: str) -> tuple[int | None, int | None]:
    """A v5 option of the model's trace-paced set and of its first asap set that ran v5."""
    return model_history(model, option), next((h for h in (model_history(r, option) for r in asap) if h is not None), None)


def model_history(rs: dict[str, Any], option: str = "history") -> int | None:
    """The txns a model set's v5 store started from (its run's ``options.history``, 0 when not
    set; ``option``: another of its history options); None when the set ran no v5."""
    lab = _by_design(rs).get("v5")
    if lab is None:
        return None
    return int((rs["manifest"]["runs"][lab].get("config", {}).get("options") or {}).get(option) or 0)


def failed_ops(rs: dict[str, Any], label: str) -> dict[str, int]:
    """A broker run's operations that failed at its client, by error class (the part of the
    error before its first colon; ``pulsar-events-<label>.jsonl``); empty for a model set."""
    out: dict[str, int] = {}
    for e in events(Path(rs.get("dir", rs["path"])) / f"pulsar-events-{label}.jsonl", "false"):
        if e.get("ev") == "op" and e.get("ok") is False:
            cls = str(e.get("error") or "unknown").split(":", 1)[0].strip() or "unknown"
            out[cls] = out.get(cls, 0) + 1
    return out


def txns_before(rs: dict[str, Any], label: str) -> int | None:
    """How many txns the broker's coordinator had created before this run: the lowest sequence of
    the txn ids its client was given (``(0,N)``: a coordinator numbers its txns from 0 since the
    broker's data was wiped; the client's warm-up rows' txns come before it, and the v4 and v5
    coordinators number apart); None for a model set or a run that recorded no txn id."""
    path = Path(rs.get("dir", rs["path"])) / f"pulsar-events-{label}.jsonl"
    if not path.exists():
        return None
    low = None
    for e in events(path, '"txn_id"'):
        seq = str(e.get("txn_id") or "").strip("()").rpartition(",")[2]
        if seq.isdigit():
            low = int(seq) if low is None else min(low, int(seq))
    return low


def broker_state_manifest(fresh: bool, warm_up_runs: int, warm_up_txns: Mapping[str, int] | None = None,
                          warm_up_jit: Mapping[str, float] | None = None) -> dict[str, Any]:
    """What a broker set's manifest records of the broker's state (read back by :func:`validate_sets`):
    ``warm_up_txns``, per design the txns the discarded runs' rows held; ``warm_up_jit`` (when the
    warm-up judged it), per design the JIT share of the broker's cores in its last discarded run."""
    state: dict[str, Any] = {"fresh": fresh, "warm_up_runs": warm_up_runs,
                             "warm_up_txns": dict(sorted((warm_up_txns or {}).items()))}
    if warm_up_jit:
        state["warm_up_jit"] = dict(sorted(warm_up_jit.items()))
    return {"validate": {"broker": state}}


def _broker_state(broker: dict[str, Any]) -> tuple[bool, int, tuple[tuple[str, int], ...]] | None:
    state = broker["manifest"].get("validate", {}).get("broker")
    if not isinstance(state, dict):
        return None
    txns = state.get("warm_up_txns") or {}
    return bool(state.get("fresh")), int(state.get("warm_up_runs") or 0), tuple(sorted((d, int(n)) for d, n in txns.items()))


def _warm_up_jit(broker: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    state = broker["manifest"].get("validate", {}).get("broker")
    shares = (state.get("warm_up_jit") if isinstance(state, dict) else None) or {}
    return tuple(sorted((d, float(share)) for d, share in shares.items()))


def _issue_lag(run: Mapping[str, Any]) -> int:
    """How far the broker run fell behind the trace issuing its rows, acks aside (an ack goes out
    once its message was delivered, which a txn's commit decides: it lags by design); the run's
    lag over all rows where the run did not record that."""
    lag = (run.get("rates") or {}).get("max_issue_lag_us")
    return int(lag if lag is not None else run.get("max_lag_us") or 0)


def duplicate_deliveries(rs: dict[str, Any], label: str) -> int:
    """(subscription, msg) pairs delivered more than once: on the broker, a message stored twice
    (two message ids) or redelivered; the models deliver each stored entry once per cursor."""
    path = Path(rs.get("dir", rs["path"])) / "deliveries.parquet"
    seen: dict[tuple[str, str], int] = {}
    for r in pq.read_table(path, columns=["engine", "subscription", "msg"]).to_pylist():
        if r["engine"] == label:
            k = (r["subscription"], r["msg"])
            seen[k] = seen.get(k, 0) + 1
    return sum(1 for n in seen.values() if n > 1)


SHORT_PHASE_MS = 500  # an asap run's txn phase below this measures no steady rate (the note says so)


def _repeats(repeats: tuple[tuple[str, int], ...]) -> str:
    """", v4 on the trace's rows 8 times over, v5 on the trace's rows once" when a design's runs
    repeated them."""
    if all(n == 1 for _, n in repeats):
        return ""
    return ", " + ", ".join(f"{d} on the trace's rows " + (f"{n} times over" if n > 1 else "once") for d, n in repeats)


def _saturation_runs(runs: tuple[tuple[str, tuple[float, ...]], ...]) -> str:
    """", 3 runs, the median per design (v4 136-203, v5 ...)" when there were several."""
    if not runs or max(len(r) for _, r in runs) < 2:
        return ""
    spans = ", ".join(f"{d} {min(r):g}-{max(r):g} txn/s" for d, r in runs)
    return f", {max(len(r) for _, r in runs)} runs, the median per design ({spans})"


def _saturation_cpu_note(runs: tuple[tuple[str, tuple[RunCpu | None, ...]], ...], cores: int | None) -> str:
    """Who used the cores in the asap runs (bench.pulsar.cpu), and which design's rate the broker
    did not limit: one whose broker process used under half the machine's busy cores, with the
    machine near full, ran into the trace client sharing the machine."""
    parts, client_bound = [], []

    def cores_of(c: RunCpu | None) -> str:
        if c is None:
            return "-"
        jit = "" if c[4] is None else f", JIT {c[4]:g}"
        return f"{c[0]:g} ({'?' if c[1] is None else f'{c[1]:g}'}{jit})"

    for d, n in runs:
        parts.append(f"{d} " + ", ".join(cores_of(c) for c in n))
        full = [(busy, broker) for busy, broker, *_ in filter(None, n)
                if broker is not None and cores and busy >= 0.8 * cores]
        if full and all(broker < busy / 2 for busy, broker in full):
            client_bound.append(d)
    jit = any(c is not None and c[4] is not None for _, n in runs for c in n)
    note = ("Cores in use over the txn phase of each asap run, the machine's busy (the broker process's"
            + (", of them its JIT compiler threads'" if jit else "") + f") of its "
            f"{cores if cores else '?'}: " + "; ".join(parts) + ".")
    if jit:
        note += (" The broker's JIT compiler (C1 and C2 threads) is no cost of the operations: it compiles what the "
                 "runs make hot, and a fresh broker's v4 rate on small's saturation trace rose from 396 to 1,808 "
                 "txn/s over twelve runs as its compiler threads' share fell from 1,123 µs of a core per txn to "
                 "none (bench.pulsar.cpu), so a run whose JIT was busy measured the broker still warming.")
    if client_bound:
        note += (f" In {' and '.join(client_bound)} the machine was near full and the broker used under half of it: "
                 "the rest was the trace client (a JVM started for the run, its JIT included) and this program, "
                 "so that rate is the client's limit on this machine as much as the broker's.")
    return note


def _sweep_note(paced: tuple[tuple[str, RunCpu | None], ...],
                asap: tuple[tuple[str, tuple[RunCpu | None, ...]], ...]) -> str:
    """What the broker's v5 sweep thread took of the runs, and how long they waited for it first
    (bench.pulsar.cpu); "" when no run recorded it."""
    runs = [c for _, c in paced if c] + [c for _, n in asap for c in n if c]
    if not any(c[2] is not None for c in runs):
        return ""
    show = lambda c: "-" if c is None or c[2] is None else f"{c[2]:g}"  # noqa: E731
    waits = [c[3] for c in runs if c[3]]
    return ("The broker's v5 sweep thread (pulsar-txn-v5-sweep: TransactionCoordinatorV5's timeout and GC sweeps, "
            "which list the store's keys; a GC sweep on a broker with thousands of finalized txns can hold a core for "
            "a minute) used, in cores over each run's txn phase: at the trace's pace "
            + ", ".join(f"{d} {show(c)}" for d, c in paced)
            + ("; asap " + "; ".join(f"{d} " + ", ".join(show(c) for c in n) for d, n in asap) if asap else "")
            + ". Each run first waited for it to idle: "
            + (f"{sum(waits):.0f} s in all, before {len(waits)} of {len(runs)} runs." if waits
               else "none had to wait."))


def section(v: Validation, row_cls: Callable[..., Any]) -> tuple[str, list[str], list[Any], str]:
    """The report section: (heading, columns, rows, note); rows are ``row_cls`` (bench.report.report.Row)
    with values {model, broker, error}."""
    rows = []
    for c in v.checks:
        err = None if c.error is None else round(100 * c.error, 1)
        rows.append(row_cls(f"{c.section} {c.design}", c.metric, c.unit, {"model": c.model, "broker": c.broker,
                            "error %": err}, None, c.verdict))
    store = ("on the emulated store a standalone broker runs" if "emulated=1" in v.model_store else
             f"on {v.model_store or 'its default store'}, not the emulated store a standalone broker runs (AbstractMetadataStore "
             "emulates index scans and sequence keys on RocksDB): v5's metadata counts and latencies differ for that "
             "reason too; `txnbench validate` runs the emulated one")
    notes = [f"The same trace through the model (`{v.model_path}`, virtual time, v5 as shipped {store}) and the real broker (`{v.broker_path}` at the trace's timestamps"
             + ((f"; `{v.saturation_path}` as fast as possible"
                 + _repeats(v.saturation_repeat)
                 + _saturation_runs(v.saturation_runs))
                if v.saturation_path else "; no asap run: no saturation figure")
             + f"; {v.broker_state_note()}). Model latencies: {v.profile_note}. Error = (model - broker) / broker. Goals: p50 within "
             f"±{GOALS.p50:.0%}, p99 within ±{GOALS.p99:.0%}, v5/v4 saturation ratio within ±{GOALS.ratio:.0%}; "
             f"counts exact or explained. {v.tally()}."]
    if v.calibration:
        notes.append(calibration_note(v.calibration))
    behind = [(d, us) for d, us in v.broker_lag_us if us >= LAG_NOTE_US]
    if behind:
        notes.append("The broker fell behind the trace (largest lag issuing a row, acks aside: "
                     + ", ".join(f"{d} {us / 1e6:.1f} s" for d, us in behind)
                     + "): its latencies include the queueing of an overloaded broker and client, which a model "
                     "without capacity does not have; latency errors there measure load as much as the model.")
    failed = [(d, f) for d, f in v.broker_failures if f]
    if failed:
        notes.append("Operations failed at the broker's client in its run at the trace's pace: "
                     + "; ".join(f"{d} " + ", ".join(f"{n} {cls}" for cls, n in f) for d, f in failed)
                     + " (pulsar-events-*.jsonl): counts of txns that differ may be those operations' txns.")
    puts = [(d, us) for d, us in v.broker_put_us if us is not None]
    if puts:
        sat_puts = [(d, n) for d, n in v.saturation_put_us if any(x is not None for x in n)]
        notes.append("The broker's mean metadata put (MetadataStoreStats: from the call to its completion, on the "
                     "caller's thread, the WAL's fsync included), at the trace's pace: "
                     + ", ".join(f"{d} {us:g} µs" for d, us in puts)
                     + ("; in its asap runs: " + "; ".join(f"{d} " + ", ".join("-" if x is None else f"{x:g}" for x in n)
                                                            + " µs" for d, n in sat_puts) if sat_puts else "")
                     + ".")
    if v.saturation_cpu:
        notes.append(_saturation_cpu_note(v.saturation_cpu, v.cores))
    sweep = _sweep_note(v.broker_cpu, v.saturation_cpu)
    if sweep:
        notes.append(sweep)
    if v.saturation_span_ms is not None and v.saturation_span_ms[0] < SHORT_PHASE_MS:
        lo, hi = v.saturation_span_ms
        notes.append(f"The broker's asap runs saturated it for {lo:.0f}-{hi:.0f} ms (their txn phases): too short "
                     "to measure a rate. Over phases of 90-520 ms one trace's v4 rate moved 4.5x from run to run; "
                     "over 560-630 ms (its rows four times over) +-5 % (`validate` replays them as many times over as "
                     "make a phase of about 1 s, or `--saturation-repeat N`).")
    history = dict(v.saturation_txns_before).get("v5")
    if history and any(history):
        notes.append("v5's asap runs began after its coordinator had created "
                     + ", ".join("-" if n is None else f"{n:,}" for n in history)
                     + " txns on this broker (the client's warm-up rows' included). On the standalone's RocksDB "
                     "store v5's rate falls with them (98 to 23 committed txn/s over nine runs of 1,264 txns each, "
                     "and a restart keeps it): every index scan on /txn/op lists each key under it "
                     "(RocksdbMetadataStore.getChildrenFromStore), the never-deleted __seq_counter__ of every txn "
                     "there (AbstractMetadataStore.putWithSequenceKeysCompat). "
                     + _model_history_note(v.model_v5_history) + _model_listeners_note(v.model_v5_listeners))
    sat_failed = [(d, n) for d, n in v.saturation_failures if any(n)]
    if sat_failed:
        notes.append("Operations failed in the broker's asap runs, run by run: "
                     + "; ".join(f"{d} " + ", ".join(map(str, n)) for d, n in sat_failed)
                     + ": a run with failures is a rate of that run's trouble as much as of the broker.")
    if v.saturation_reorders:
        notes.append("Receipts the trace client got out of order in the broker's asap runs (a producer's later send "
                     "acknowledged first), run by run: "
                     + "; ".join(f"{d} " + ", ".join(map(str, n)) for d, n in v.saturation_reorders)
                     + " (pulsar-client-*.log). The client closes its connection on each (ProducerImpl.ackReceived), "
                     "failing the ops in flight on it. On 2026-11-27 each came 8-20 ms after that topic's transaction "
                     "buffer flushed the txn publishes it held during its first snapshot; how the broker reorders them "
                     "is not established (datasets/validation/README.md).")
    dups = [(d, n) for d, n in v.duplicates if n]
    if dups:
        notes.append("The broker delivered " + ", ".join(f"{n} (subscription, msg) pairs more than once on {d}" for d, n in dups)
                     + " (pulsar-events-*.jsonl: one under two message ids was stored twice, another id was a "
                     "redelivery). A likely cause, not confirmed from the logs: the producer re-sends its pending "
                     "messages after a reconnection (ProducerImpl.resendMessages) and without deduplication "
                     "(brokerDeduplicationEnabled=false) the broker stores both. The models store each publish once, "
                     "so deliveries and data entries differ by about that many.")
    if v.unmapped:
        notes.append(f"{v.unmapped} further broker counters moved that map onto no model count (pulsar.* in the "
                     "broker's counts.json).")
    for c in v.checks:
        if c.verdict == "explained" or (c.why and c.section == "Throughput"):
            notes.append(f"{c.design} {c.metric} ({c.verdict}): {c.why}.")
    missed: dict[tuple[str, str], list[Check]] = {}  # per operation, its missed percentiles
    for c in v.checks:
        if c.section == "Latency" and c.verdict == "missed":
            missed.setdefault((c.design, c.metric.rsplit(" ", 1)[0]), []).append(c)
    for (design, label), checks in missed.items():
        metric = next(m for lab, m in LATENCY_OPS if lab == label)
        pcts = "; ".join(f"{c.metric.rsplit(' ', 1)[1]} {c.why.removeprefix('the model' + chr(39) + 's is ')}"
                         for c in checks)
        notes.append(f"{design} {label} missed ({pcts}): the model bills "
                     f"{BILLED.get(design, {}).get(metric, 'no modelled cost')}.")
        what, against = f"{design} {label}", "one of the client's end-txns"
        split: tuple[Modes | None, Modes | None] = (None, None)
        if metric == "new_txn_us":
            split = next(((m, b) for d, m, b in v.new_txn_modes if d == design), split)
        elif metric in ("publish_nontxn_us", "publish_txn_us"):
            kind = "plain" if metric == "publish_nontxn_us" else "txn"
            split = next(((m, b) for d, k, m, b in v.publish_modes if d == design and k == kind), split)
        elif metric == "end_txn_us":
            split = next(((m, b) for d, m, b in v.end_txn_modes if d == design), split)
            against = "another of the client's end-txns"
        kinds = modes_note(what, *split, against)
        if kinds:
            notes.append(kinds)
        # what the kept validations showed of such a miss, where this run's split shows the same
        ways = sorted({(c.error or 0) < 0 for c in checks})  # below the broker's, above it, or both
        why = next(filter(None, (cause(design, metric, below, *split) for below in ways)), "")
        if why:
            notes.append(f"Why, likely: {why}.")
    troubled = {d for d, f in failed}
    for c in v.checks:
        if c.verdict == "differs":
            notes.append(f"{c.design} {c.metric} differs (model {c.model}, broker {c.broker}) and Pulsar's code, as "
                         "far as read here, does not explain it: "
                         + ("the broker run's failed operations (above) may; else a count the model may get wrong."
                            if c.design in troubled else "a count the model may get wrong."))
    return (f"Model vs broker — {Path(v.model_path).name} vs {Path(v.broker_path).name}",
            ["model", "broker", "error %"], rows, " ".join(notes))
