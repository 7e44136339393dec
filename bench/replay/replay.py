"""Replays a trace through one engine in virtual (or wall) time and collects the results.

Each row is applied when the clock reaches its ``ts_us``. The replayer plays the clients: it
maps trace labels to txn ids and message ids, keeps consumers subscribed (re-subscribing after a
broker crash) and records deliveries, txn outcomes, latencies and exact counts.

A consumer acks only what it has received: a plain ack whose message has not reached that
subscription yet waits for the delivery and is applied then (``acks.deferred``); the acks that
waited for one delivery go out as one request, as the Java client groups acks by default
(``acks.grouped_requests``; the cursor saves once per request). Acks inside a txn are applied as
written (``acks.txn_before_delivery`` counts those ahead of their message, ``acks.txn_after_delivery``
the txn acks of a message already delivered there).

Memory stays flat on long traces: a message's id is dropped once every subscription of its
topic has acked it (a txn ack counts when the txn commits), and a txn's row leaves for the sink
once its outcome is known and its messages were delivered (or it aborted). A later ack of a
message every subscription already acked is a no-op in Pulsar and is counted, not replayed
(``acks.after_all_acked``).

Client-visible failures that a real client would see (a txn conflict on an ack, a publish to a
txn the coordinator already timed out, a message over ``maxMessageSize``) are counted under
``client_errors.<Error>`` and the run goes on; a malformed trace is refused before anything runs
(see :mod:`bench.trace.trace`).

In virtual time the replayer issues rows as the trace client does (jvm ``TraceRunner``): a txn's
publishes and acks wait for its ``new_txn`` answer (the client has no txn before it), a send waits
for the sends before it on its topic to be issued (one producer per topic keeps their order), and
a commit or abort waits for the txn's sends to be answered (``client.ops_gated`` counts the rows
that waited). Each latency starts when its request goes out, as the broker run measures it.

The replayer also plays the Java client's own transaction logic (``TransactionImpl``):

* its timer: ``timeout_ms`` after ``new_txn``'s answer the client moves the txn OPEN -> TIME_OUT
  (``TransactionImpl.run``) unless a commit or abort was requested first (both cancel it); from
  then on every publish, ack, commit and abort of it fails at the client (``checkIfOpen``:
  ``InvalidTxnStatusException``, counted as ``client_errors.TxnClientTimeout``), whatever the
  coordinator's sweep interval; the coordinator's timeout aborts it, so it is reported
  ``aborted`` at its deadline (``txns.client_timed_out``);
* failed ops: a publish or ack of a txn that fails marks the txn (``hasOpsFailed``); its commit
  is sent as an abort and fails with ``TransactionHasOperationFailedException``
  (``client_errors.TxnOpFailed``; ``TransactionImpl.commit``);
* its request timeout: a commit or abort no answer reaches (a broker or coordinator crash cut it
  off) fails ``operationTimeoutMs`` (30 s) after it was sent with ``TimeoutException``
  (``client_errors.TimeoutException``; ``TransactionMetaStoreHandler.run``, see
  :data:`engine.scripted.OPERATION_TIMEOUT_US`) and a late answer is dropped; the txn's row says
  ``end_timed_out`` (``txns.end_timed_out``), and what the coordinator decided goes to the checker's
  history (ambiguous if it no longer knows). A later commit or abort row of it is a retry.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from engine.broker import Broker, BrokerConfig
from engine.clock import LatencyModel, Scheduler, Timer, VirtualScheduler, WallScheduler
from engine.counters import Counters
from engine.dispatcher import Delivery, SubscriptionType
from engine.errors import (
    LedgerSealed,
    MessageTooBig,
    TopicError,
    TxnbenchError,
    TxnClientTimeout,
    TxnError,
    TxnOpFailed,
    UnsupportedOperation,
)
from engine.ids import TxnID
from engine.ports import AckKind, TxnAction, TxnStatus
from engine.records import MessageId
from engine.scripted import OPERATION_TIMEOUT_US
from bench.replay.config import RunConfig
from bench.replay.engines import Setup, build
from bench.replay.gcpolicy import replay_gc
from bench.replay.measure import Histograms, peak_rss_mb
from bench.replay.timeseries import Series
from bench.replay.walltime import Pacing
from bench.trace.trace import OPS, Event

# the rows the trace client issues under its in-flight bound (jvm TraceRunner.issue: each takes a
# permit until answered; acks and subscribes do not)
_IN_FLIGHT_OPS = frozenset({"new_txn", "publish", "commit", "abort"})

_SUB_TYPE = Event._fields.index("sub_type")
CLIENT_ERRORS = (TxnError, LedgerSealed, UnsupportedOperation, MessageTooBig)


@dataclass
class _Txn:
    label: str
    id: TxnID | None
    opened_us: int  # when the client issued new_txn
    end_requested_us: int | None = None
    action: str | None = None
    outcome: str | None = None
    end_us: int | None = None
    visible_us: int | None = None
    msgs: set[str] = field(default_factory=set)  # published, not yet delivered anywhere
    published: int = 0
    acked: list[tuple[str, str]] = field(default_factory=list)  # (subscription, msg) acked in this txn
    deadline_us: int = 0  # when the client's TransactionImpl timer fires
    client_timed_out: bool = False  # TransactionImpl state TIME_OUT
    ops_failed: bool = False  # TransactionImpl.hasOpsFailed
    end_timed_out: bool = False  # its END_TXN went unanswered for the client's operation timeout
    end_in_flight: bool = False  # its END_TXN holds one of the asap client's in-flight slots
    sends_done_us: int = 0  # virtual time: when its last publish is answered (its END_TXN waits)
    acks_done_us: int = 0  # virtual time: when its last ack is answered (its END_TXN waits too)
    end_waiting: bool = False  # a commit or abort row waits for its sends (_end_after_sends)
    open_us: int = 0  # virtual time: when new_txn's answer is back (its ops wait for it)
    answered_us: int | None = None  # when new_txn's answer came back (txns.parquet new_txn_answered_ts_us)
    gated: int = 0  # its publishes and acks not issued yet (waiting for open_us, or for its topic)
    end_row: tuple[Event, TxnAction] | None = None  # its commit or abort row, waiting for those


@dataclass
class RunResult:
    label: str
    deliveries: dict[str, list[Any]]
    txns: dict[str, list[Any]]
    counts: dict[str, int]
    latency: dict[str, Any]
    recovery: list[dict[str, Any]]
    wall_seconds: float
    events: int
    virtual_end_us: int
    peak_rss_mb: float = 0.0
    # what was still in flight when the drain ended (Replayer.in_flight): all zero = quiescent
    in_flight: dict[str, int] = field(default_factory=dict)
    drained_us: int = 0  # time run after the last event
    series: list[dict[str, Any]] = field(default_factory=list)  # bench.replay.timeseries windows
    rates: dict[str, Any] | None = None  # wall time: bench.replay.walltime.Pacing.rates()
    engine_metrics: list[Any] = field(default_factory=list)  # the engine's own prometheus families, if any


DeliverySink = Callable[[dict[str, list[Any]]], None]
TxnSink = Callable[[dict[str, list[Any]]], None]
PublishSink = Callable[[dict[str, list[Any]]], None]


@dataclass(slots=True)
class _Msg:
    id: MessageId
    key: str | None
    acks_left: int  # subscriptions of the topic (at publish) that have not acked it yet


class Replayer:
    def __init__(self, cfg: RunConfig, *, delivery_sink: DeliverySink | None = None, sink_rows: int = 100_000,
                 history: Any = None, txn_sink: TxnSink | None = None, publish_sink: PublishSink | None = None) -> None:
        self.cfg = cfg
        self.history = history  # optional bench.check.History recording ops, faults, deliveries
        self.label = cfg.label
        wall = cfg.time_mode == "wall"
        self._wall = wall
        self.sched: Scheduler = WallScheduler() if wall else VirtualScheduler()
        latency = LatencyModel.zero() if wall else cfg.latency.fresh()  # each run draws from the seed anew
        self.broker_config = BrokerConfig(dispatch=cfg.dispatch, polling=cfg.polling_policy(), latency=latency)
        self.setup: Setup = build(cfg)
        self.broker = self._new_broker()
        self.counts = Counters()
        self.hist = Histograms()
        self.txns: dict[str, _Txn] = {}  # not yet retired to the txn rows
        self.by_id: dict[TxnID, _Txn] = {}
        self.msgs: dict[str, _Msg] = {}  # not yet acked by every subscription
        self.msg_txn: dict[str, _Txn] = {}
        self.undelivered: set[str] = set()  # first delivery not yet seen
        self.subs: list[tuple[str, str]] = []
        self.sub_types: dict[tuple[str, str], SubscriptionType] = {}
        self._client_sub_types = {(topic, sub): t for topic, sub, t in cfg.sub_types}
        self.subs_per_topic: dict[str, int] = {}
        self.received: set[tuple[str, str]] = set()  # (subscription, msg) delivered, not yet acked
        self.deferred: dict[tuple[str, str], AckKind] = {}  # plain acks waiting for their message
        self.held: dict[tuple[str, str], str] = {}
        self._timed_out: list[tuple[str, TxnID]] = []  # client-timed-out txns the history awaits  # (subscription, msg) received, acked in this open txn
        self.recovery: list[dict[str, Any]] = []
        self._crash_at: int | None = None
        self._retired = Counters()
        self._sink = delivery_sink
        self._sink_rows = sink_rows
        self._deliveries: dict[str, list[Any]] = _empty_deliveries()
        self._txn_sink = txn_sink
        self._txn_rows: dict[str, list[Any]] = _empty_txns()
        # each publish's issue and answer (bench.report.behind_end_txn), kept only for a sink
        self._publish_sink = publish_sink
        self._publish_rows: dict[str, list[Any]] | None = _empty_publishes() if publish_sink is not None else None
        self._ops = {op: getattr(self, "_op_" + op) for op in OPS}
        self._op_counts = dict.fromkeys(OPS, 0)
        self.series = Series(self.label, self._gauges, self.sched.now_us)
        self.pacing: Pacing | None = Pacing() if wall else None
        self.result: RunResult | None = None
        # the asap client's in-flight bound (RunConfig.asap_in_flight): answer times of the
        # publishes in flight (a heap), and the END_TXNs in flight (answered by callback)
        self._bound = cfg.asap_in_flight if cfg.pacing == "asap" else None
        self._answers: list[int] = []
        self._ends_in_flight = 0
        self._receipts_pending = 0  # publishes whose receipt is not written yet (_receipt)
        # Virtual time: ops the trace client has not issued yet (jvm TraceRunner): a txn's
        # publishes and acks wait for its new_txn answer, and a send waits for the sends before
        # it on its topic to be issued (the producer keeps their order). Per topic, when its
        # last waiting send goes out; the waiting sends holding asap slots; the timers, in order.
        self._topic_gate: dict[str, int] = {}
        self._gated_in_flight = 0
        self._gated: dict[int, Timer] = {}
        self._gated_seq = 0
        # acks of messages whose publish has not gone out yet: they go right after it (the trace
        # client's ack waits for the publish's message id)
        self._after_publish: dict[str, list[tuple[_Txn | None, Callable[[Event], None], Event]]] = {}

    def _new_broker(self) -> Broker:
        return Broker(self.sched, self.setup.ledgers, self.broker_config, self.setup.engine)

    def _gauges(self) -> tuple[int, int]:
        """The time series' gauges now: backlog, and blocked time so far (crashed brokers' too)."""
        return len(self.undelivered), self._retired["dispatch.blocked_us"] + self.broker.blocked_us()

    def _advance(self, when_us: int) -> int:
        """Run the clock up to each window end before ``when_us`` and close those windows;
        returns the open window's end."""
        series = self.series
        while series.due() <= when_us:
            self.sched.run_until(series.due() - 1)  # a sample at the window's end opens the next
            series.close()
        return series.due()

    # -- consumers ------------------------------------------------------------------------------

    def _consumer(self, topic: str, sub: str) -> Callable[[list[Delivery]], None]:
        label = self.label

        def deliver(batch: list[Delivery]) -> None:
            rows = self._deliveries
            if self.history is not None:
                self.history.deliver(topic, sub, batch)
            acks: list[tuple[str, str, AckKind]] = []
            for d in batch:
                msg = d.msg
                ts = d.delivered_ts_us
                rows["engine"].append(label)
                rows["topic"].append(topic)
                rows["subscription"].append(sub)
                rows["msg"].append(msg)
                rows["delivered_ts_us"].append(ts)
                rows["redelivery"].append(d.redelivery)
                if msg in self.undelivered:
                    self.undelivered.discard(msg)
                    self._first_delivery(msg, ts, ts - d.publish_ts_us)
                if msg is None:
                    continue
                key = (sub, msg)
                kind = self.deferred.pop(key, None)
                if kind is None:
                    self.received.add(key)
                else:
                    acks.append((sub, msg, kind))
            if acks:  # after this delivery, not inside it (one timer: they run back to back anyway)
                self.sched.call_later(0, self._deferred_acks, acks)
            self.counts["deliveries"] += len(batch)
            self.series.count("consume", len(batch))
            if self._crash_at is not None:
                self.hist.record("time_to_first_dispatch_after_crash_us", batch[0].delivered_ts_us - self._crash_at)
                self._crash_at = None
            if len(rows["msg"]) >= self._sink_rows:
                self._flush_deliveries()

        return deliver

    def _first_delivery(self, msg: str, ts: int, latency_us: int) -> None:
        self.series.latency("end_to_end", latency_us)  # OMB's end-to-end: publish -> first receive
        txn = self.msg_txn.pop(msg, None)
        if txn is None:
            self.hist.record("dispatch_nontxn_us", latency_us)
            return
        self.hist.record("dispatch_txn_us", latency_us)
        txn.msgs.discard(msg)
        if not txn.msgs and txn.visible_us is None and txn.end_requested_us is not None:
            txn.visible_us = ts
            self.hist.record("commit_to_visible_us", ts - txn.end_requested_us)
            if txn.outcome is not None:
                self._retire(txn)

    def _flush_deliveries(self) -> None:
        if self._sink is not None and self._deliveries["msg"]:
            self._sink(self._deliveries)
            self._deliveries = _empty_deliveries()

    def _flush_publishes(self) -> None:
        if self._publish_sink is not None and self._publish_rows and self._publish_rows["msg"]:
            self._publish_sink(self._publish_rows)
            self._publish_rows = _empty_publishes()

    # -- applying events ------------------------------------------------------------------------

    def apply(self, e: Event) -> None:
        """Apply one row (for callers that pace rows themselves, e.g. the Kafka stream)."""
        self.sched.run_until(e.ts_us)
        if self.pacing is not None:
            self.pacing.issued(e.ts_us, self.sched.now_us())
        self._op_counts[e.op] += 1
        try:
            self._ops[e.op](e)
        except CLIENT_ERRORS as exc:
            self.counts["client_errors." + type(exc).__name__] += 1

    def _op_subscribe(self, e: Event) -> None:
        assert e.topic and e.subscription
        key = (e.topic, e.subscription)
        # the trace's optional sub_type column; null (or a row built without it): the type the
        # run's client gives it (RunConfig.sub_types), else Failover
        named = e.sub_type if len(e) > _SUB_TYPE else None
        sub_type = SubscriptionType.parse(named if named is not None else self._client_sub_types.get(key))
        if key not in self.subs:
            self.subs.append(key)
            self.subs_per_topic[e.topic] = self.subs_per_topic.get(e.topic, 0) + 1
            self.counts["subscriptions." + sub_type.value] += 1
        self.sub_types[key] = sub_type
        self.broker.subscribe(e.topic, e.subscription, self._consumer(e.topic, e.subscription), sub_type)
        if self.history is not None:
            self.history.subscribe(e.topic, e.subscription)

    def _op_new_txn(self, e: Event) -> None:
        assert e.txn
        timeout_ms = e.timeout_ms or 60_000
        now = self.sched.now_us()
        txn = self.txns[e.txn] = _Txn(e.txn, None, now)  # in wall time a lagging replay issues it late
        txn.id = self.broker.new_txn(timeout_ms)
        took_us = 0 if self._wall else self.broker.last_new_txn_us  # wall time: answered on return
        txn.open_us = now + took_us
        txn.answered_us = self.sched.now_us() if self._wall else txn.open_us
        self.hist.record("new_txn_us", took_us)
        if self._bound is not None:
            heapq.heappush(self._answers, txn.open_us)
        # TransactionImpl (and its timeout timer) exists once the answer is back
        txn.deadline_us = txn.open_us + timeout_ms * 1000
        self.by_id[txn.id] = txn
        self.counts["txns.started"] += 1

    def _txn(self, label: str | None) -> TxnID | None:
        if label is None:
            return None
        txn = self.txns[label]
        if txn.id is None:  # its new_txn failed (e.g. transactions disabled): so does every use
            raise UnsupportedOperation(f"txn {label} was never opened")
        if self._client_timer(txn):  # TransactionImpl.checkIfOpen
            raise TxnClientTimeout(f"txn {label} timed out at the client ({txn.deadline_us} us); state TIME_OUT")
        return txn.id

    def _client_timer(self, txn: _Txn) -> bool:
        """True once ``txn`` is TIME_OUT at the client (``TransactionImpl.run``: OPEN ->
        TIME_OUT when its timer fires; a commit or abort request cancels the timer). The first
        time, the txn is settled as aborted at its deadline: the coordinator's own timeout
        aborts it, and nothing of it can be delivered or committed."""
        if txn.client_timed_out:
            return True
        if txn.id is None or txn.end_requested_us is not None or txn.outcome is not None:
            return False
        if self.sched.now_us() < txn.deadline_us:
            return False
        txn.client_timed_out = True
        txn.outcome = TxnStatus.ABORTED.value
        txn.end_us = txn.deadline_us
        self.counts["txns.client_timed_out"] += 1
        self._drop_unvisible(txn)
        self._release_acks(txn)
        return True

    def _release_acks(self, txn: _Txn) -> None:
        for key in txn.acked:
            if self.held.get(key) == txn.label:
                del self.held[key]
        txn.acked.clear()

    def _drop_unvisible(self, txn: _Txn) -> None:
        """An aborted txn's messages: never delivered, so never acked."""
        for msg in txn.msgs:
            self.msg_txn.pop(msg, None)
            self.undelivered.discard(msg)
            self.msgs.pop(msg, None)
        txn.msgs.clear()

    def _op_publish(self, e: Event) -> None:
        assert e.topic and e.msg
        if not self._wall:
            now = self.sched.now_us()
            at = self._topic_gate.get(e.topic, 0)
            txn = self.txns.get(e.txn) if e.txn is not None else None
            if txn is not None and txn.open_us > at:
                at = txn.open_us
            if at > now:
                self._topic_gate[e.topic] = at
                if self._bound is not None:  # it took its slot at the row (TraceRunner.publish)
                    self._gated_in_flight += 1
                self._after_publish[e.msg] = []
                self._gate(at, txn, self._publish_gated, e)
                return
        self._publish(e)

    def _gate(self, at: int | None, txn: _Txn | None, fn: Callable[[Event], None], e: Event) -> None:
        """Issue row ``e`` (``fn``) at ``at``, or (None) right after its message's waiting publish
        goes out, as the trace client does once its gates open."""
        if txn is not None:
            txn.gated += 1
        self.counts["client.ops_gated"] += 1
        if at is None:
            assert e.msg is not None
            self._after_publish[e.msg].append((txn, fn, e))
            return
        self._gated_seq += 1
        key = self._gated_seq
        self._gated[key] = self.sched.call_at(at, self._ungate, key, txn, fn, e)

    def _ungate(self, key: int, txn: _Txn | None, fn: Callable[[Event], None], e: Event) -> None:
        del self._gated[key]
        self._issue(txn, fn, e)

    def _issue(self, txn: _Txn | None, fn: Callable[[Event], None], e: Event) -> None:
        """A row that waited goes out now; its txn's END_TXN goes after the last of them."""
        try:
            if txn is not None and self.txns.get(txn.label) is not txn:
                raise UnsupportedOperation(f"txn {txn.label} ended before its op (row {e.op} {e.msg}) was issued")
            fn(e)
        except CLIENT_ERRORS as exc:
            self.counts["client_errors." + type(exc).__name__] += 1
        finally:
            if txn is not None:
                txn.gated -= 1
                if txn.gated == 0 and txn.end_row is not None:  # its END_TXN waited for these
                    row, action = txn.end_row
                    txn.end_row = None
                    self._end_later(row, action)

    def _publish_gated(self, e: Event) -> None:
        assert e.msg is not None
        if self._bound is not None:
            self._gated_in_flight -= 1
        try:
            self._publish(e)
        finally:
            for txn, fn, ack in self._after_publish.pop(e.msg, ()):
                self._issue(txn, fn, ack)

    def _publish(self, e: Event) -> None:
        assert e.topic and e.msg
        txn_id = self._txn(e.txn)
        try:
            if self._wall:  # what the real backends took
                started = time.perf_counter_ns()
                mid = self.broker.publish(e.topic, e.msg, e.size or 0, txn=txn_id, key=e.key)
                took_us = (time.perf_counter_ns() - started) // 1000
            else:  # what the modelled operations on the publish's path take
                mid = self.broker.publish(e.topic, e.msg, e.size or 0, txn=txn_id, key=e.key)
                took_us = self.broker.last_publish_us
        except CLIENT_ERRORS:
            if e.txn is not None:  # TransactionImpl.registerSendOp: the failed send marks the txn
                self.txns[e.txn].ops_failed = True
            raise
        issued_us = self.sched.now_us()
        self.series.count("publish")
        io_us = None if self._wall or txn_id is None else self.broker.last_publish_io_us
        if not self._wall and (txn_id is None or io_us is not None) and self.broker.receipts_wait():
            # the receipt goes after whatever batch the connection's thread runs when it is
            # written (Broker.receipt_leaves_at), and a txn send first takes its buffer's lock on
            # that thread (Broker.send_lock_wait): each known once the send gets there, so looked
            # up then
            hop = self.broker.last_publish_hop_us
            ledger = self.broker.last_publish_ledger
            self._receipts_pending += 1
            if io_us is None:
                self.sched.call_later(took_us - hop, self._receipt, e.msg, issued_us, took_us - hop, hop, ledger)
            else:
                self.sched.call_later(io_us, self._txn_send_at_io, e.msg, e.txn, issued_us, took_us - hop, hop, ledger)
        else:
            self._publish_answered(e.msg, e.txn, issued_us, took_us)
        self.msgs[e.msg] = _Msg(mid, e.key, self.subs_per_topic.get(e.topic, 0))
        if self.history is not None:
            self.history.publish(e.msg, e.topic, e.txn, e.key, mid)
        if self.subs:
            self.undelivered.add(e.msg)
        if e.txn is not None:
            txn = self.txns[e.txn]
            txn.msgs.add(e.msg)
            txn.published += 1
            self.msg_txn[e.msg] = txn
            if not self._wall:
                txn.sends_done_us = max(txn.sends_done_us, issued_us + took_us)

    def _txn_send_at_io(self, msg: str, txn: str | None, issued_us: int, ready_us: int, hop_us: int,
                        ledger: str) -> None:
        """A txn send reaches the connection's IO thread: it waits there for its buffer's lock
        when the buffer's work holds it (``readStateCacheFirst``), and its receipt, written
        ``ready_us`` after its issue, that much later."""
        waited = self.broker.send_lock_wait(ledger)
        self.sched.call_at(issued_us + ready_us + waited, self._receipt, msg, issued_us, ready_us + waited, hop_us,
                           ledger, txn)

    def _receipt(self, msg: str, issued_us: int, ready_us: int, hop_us: int, ledger: str,
                 txn: str | None = None) -> None:
        """A publish's receipt, written ``ready_us`` after its issue where its add completed: it
        leaves once its buffer's lock is free (a plain one's ``syncMaxReadPositionForNormalPublish``,
        a txn one's ``trackPosition``, M1 L398-399) and the batch the connection's thread runs
        then is done, then takes its hop. A txn send's END_TXN waits for it."""
        now = self.sched.now_us()
        leaves = self.broker.receipt_leaves_at(now, ledger)
        self._receipts_pending -= 1
        held = 0 if leaves is None else leaves - now
        took_us = ready_us + held + hop_us
        t = self.txns.get(txn) if txn is not None else None
        if t is not None:
            t.sends_done_us = max(t.sends_done_us, issued_us + took_us)
        self._publish_answered(msg, txn, issued_us, took_us)

    def _publish_answered(self, msg: str, txn: str | None, issued_us: int, took_us: int) -> None:
        """A publish answered ``took_us`` after its issue: its span, its slot among the asap
        client's in-flight requests and its latency."""
        answered_us = issued_us + took_us
        spans = self._publish_rows
        if spans is not None:
            spans["engine"].append(self.label)
            spans["msg"].append(msg)
            spans["txn"].append(txn)
            spans["issued_ts_us"].append(issued_us)
            spans["answered_ts_us"].append(answered_us)
            if len(spans["msg"]) >= self._sink_rows:
                self._flush_publishes()
        if self._bound is not None:
            heapq.heappush(self._answers, answered_us)
        self.hist.record("publish_nontxn_us" if txn is None else "publish_txn_us", took_us)
        self.series.latency("publish", took_us)

    def _op_ack(self, e: Event) -> None:
        assert e.msg and e.subscription
        if e.msg in self._after_publish:  # its publish waits to go out: the ack needs its id
            self._gate(None, self.txns.get(e.txn) if e.txn is not None else None, self._op_ack, e)
            return
        if e.txn is not None and not self._wall:  # a txn ack waits for its txn (TraceRunner.ack)
            txn = self.txns.get(e.txn)
            if txn is not None and txn.open_us > self.sched.now_us():
                self._gate(txn.open_us, txn, self._ack, e)
                return
        self._ack(e)

    def _ack(self, e: Event) -> None:
        assert e.msg and e.subscription
        m = self.msgs.get(e.msg)
        if m is None:  # every subscription acked it already: a no-op for the broker
            self.counts["acks.after_all_acked"] += 1
            return
        kind = AckKind.CUMULATIVE if e.ack_kind == "cumulative" else AckKind.INDIVIDUAL
        key = (e.subscription, e.msg)
        received = key in self.received
        if e.txn is None and key in self.held:
            # The consumer holds the message (acked in a txn still open): a plain ack goes out at
            # once and applies to the cursor (PendingAckHandleImpl is not consulted); the txn
            # no longer covers it.
            owner = self.txns.get(self.held.pop(key))
            if owner is not None and key in owner.acked:
                owner.acked.remove(key)
            received = True
        elif e.txn is None and not received:
            self.deferred[key] = kind
            self.counts["acks.deferred"] += 1
            return
        if not received:
            self.counts["acks.txn_before_delivery"] += 1
        elif e.txn is not None:  # a broker slower to dispatch may see this ack first (validate's bound)
            self.counts["acks.txn_after_delivery"] += 1
        self.received.discard(key)
        txn_id = self._txn(e.txn)
        try:
            self.broker.ack(e.subscription, [m.id], kind, txn=txn_id)
        except CLIENT_ERRORS:
            if e.txn is not None:  # TransactionImpl.registerAckOp: the failed ack marks the txn
                self.txns[e.txn].ops_failed = True
            raise
        if self.history is not None:
            self.history.ack(e.subscription, [e.msg], kind is AckKind.CUMULATIVE, e.txn)
        if e.txn is None:
            self._acked(e.msg, m)
        else:
            txn = self.txns[e.txn]
            txn.acked.append(key)
            if received:
                self.held[key] = e.txn
            if not self._wall:  # TransactionImpl.registerAckOp: the commit waits for the answer
                txn.acks_done_us = max(txn.acks_done_us, self.sched.now_us() + self.broker.last_ack_us)

    def _acked(self, msg: str, m: _Msg) -> None:
        m.acks_left -= 1
        if m.acks_left <= 0:
            del self.msgs[msg]

    def _deferred_acks(self, acks: list[tuple[str, str, AckKind]]) -> None:
        """The acks that waited for one delivery (one subscription, one ledger), sent as the Java
        client sends acks by default: individual acks grouped into one request
        (``acknowledgementsGroupTime``), each cumulative ack on its own, in trace order."""
        msgs = self.msgs
        group: list[tuple[str, _Msg]] = []
        sub = acks[0][0]
        for _sub, msg, kind in acks:
            m = msgs.get(msg)
            if m is None:
                self.counts["acks.after_all_acked"] += 1
            elif kind is AckKind.INDIVIDUAL:
                group.append((msg, m))
            else:
                self._ack_request(sub, group)
                group = []
                self._ack_request(sub, [(msg, m)], AckKind.CUMULATIVE)
        self._ack_request(sub, group)

    def _ack_request(self, sub: str, acked: list[tuple[str, _Msg]], kind: AckKind = AckKind.INDIVIDUAL) -> None:
        if not acked:
            return
        try:
            self.broker.ack(sub, [m.id for _, m in acked], kind)
        except CLIENT_ERRORS as exc:
            self.counts["client_errors." + type(exc).__name__] += 1
            return
        self.counts["acks.grouped_requests"] += 1
        if self.history is not None:
            self.history.ack(sub, [msg for msg, _ in acked], kind is AckKind.CUMULATIVE, None)
        for msg, m in acked:
            self._acked(msg, m)

    def _end(self, e: Event, action: TxnAction) -> None:
        assert e.txn
        txn = self.txns[e.txn]
        try:
            txn_id = self._txn(e.txn)
        except TxnClientTimeout:  # checkIfOpenOrCommitting/-Aborting: the txn's story is over
            self._retire(txn)
            raise
        assert txn_id is not None
        failed = action is TxnAction.COMMIT and txn.ops_failed
        if failed:  # TransactionImpl.commit: hasOpsFailed -> abort(), then fail the commit
            action = TxnAction.ABORT
        if self._end_timer(txn):  # a retry after the last request timed out
            txn.end_timed_out = False
            txn.outcome = None
        txn.end_requested_us = self.sched.now_us()  # in wall time a lagging replay issues it late
        txn.action = action.value
        self.broker.end_txn(txn_id, action, self._on_end)
        self._end_holds_slot(txn)
        if self.history is not None:
            self.history.end(e.txn, action.value)
        if failed:
            raise TxnOpFailed(f"txn {e.txn}: a publish or ack failed; its commit was sent as an abort")

    def _on_end(self, txn_id: TxnID, status: TxnStatus) -> None:
        txn = self.by_id.get(txn_id)
        if txn is None:  # already retired: an answer repeated after a coordinator restart
            return
        self._end_answered(txn)
        if self._end_timer(txn):  # the client failed the request already: no pending op, dropped
            return
        txn.outcome = status.value
        if self.history is not None:
            self.history.heard(txn.label, status)
        txn.end_us = self.sched.now_us()
        if txn.end_requested_us is not None:
            self.hist.record("end_txn_us", txn.end_us - txn.end_requested_us)
            self.series.latency("end_txn", txn.end_us - txn.end_requested_us)
        if status is TxnStatus.COMMITTED or status is TxnStatus.ABORTED:
            self.series.count("commit" if status is TxnStatus.COMMITTED else "abort")
        if status is TxnStatus.ABORTED:
            self._drop_unvisible(txn)
        elif status is TxnStatus.COMMITTED:
            for _sub, msg in txn.acked:
                m = self.msgs.get(msg)
                if m is not None:
                    self._acked(msg, m)
        self._release_acks(txn)
        if status.final and (not txn.msgs or txn.visible_us is not None):
            self._retire(txn)

    def _end_timer(self, txn: _Txn) -> bool:
        """True once ``txn``'s END_TXN has gone unanswered for the client's operation timeout
        (``TransactionMetaStoreHandler.run`` fails it with ``TimeoutException``); the first
        time, the request is failed at its deadline."""
        if txn.end_timed_out:
            return True
        if txn.outcome is not None or txn.end_requested_us is None or txn.id is None:
            return False
        deadline = txn.end_requested_us + OPERATION_TIMEOUT_US
        if self.sched.now_us() < deadline:
            return False
        txn.end_timed_out = True
        self._end_answered(txn)
        txn.outcome = "end_timed_out"
        txn.end_us = deadline
        self.counts["client_errors.TimeoutException"] += 1
        return True

    def _end_holds_slot(self, txn: _Txn) -> None:
        """Its END_TXN (sent, or waiting for its sends) holds one of the asap client's in-flight slots."""
        if self._bound is not None and not txn.end_in_flight:
            txn.end_in_flight = True
            self._ends_in_flight += 1

    def _end_answered(self, txn: _Txn) -> None:
        """Its END_TXN is answered (or failed by the client's timeout): its in-flight slot is free."""
        if txn.end_in_flight:
            txn.end_in_flight = False
            self._ends_in_flight -= 1

    def _op_commit(self, e: Event) -> None:
        self._end_after_sends(e, TxnAction.COMMIT)

    def _op_abort(self, e: Event) -> None:
        self._end_after_sends(e, TxnAction.ABORT)

    def _end_after_sends(self, e: Event, action: TxnAction) -> None:
        """END_TXN goes once the txn exists and its publishes and acks are answered, as the trace
        client sends it (jvm ``TraceRunner.end`` chains it on the txn's ops, as
        ``TransactionImpl.commit`` waits for its send and ack futures), and its latency starts
        then: in virtual time a commit row that comes before those answers waits for them,
        holding its in-flight slot meanwhile. (In wall time a publish has returned by the next
        row.)"""
        assert e.txn
        txn = self.txns[e.txn]
        if txn.gated:  # some of its ops are not issued yet: it goes after them (_issue)
            txn.end_row = (e, action)
            txn.end_waiting = True
            self._end_holds_slot(txn)
            return
        wait = max(txn.sends_done_us, txn.acks_done_us, txn.open_us) - self.sched.now_us()
        if wait <= 0:
            self._end(e, action)
            return
        txn.end_waiting = True
        self._end_holds_slot(txn)
        self.sched.call_later(wait, self._end_later, e, action)

    def _end_later(self, e: Event, action: TxnAction) -> None:
        assert e.txn
        txn = self.txns.get(e.txn)
        if txn is None:  # retired meanwhile: nothing is left to end
            return
        txn.end_waiting = False
        try:
            self._end_after_sends(e, action)  # its sends and acks are answered by now, unless just issued
        except CLIENT_ERRORS as exc:
            if txn.end_requested_us is None:  # refused before it went out: its slot is free
                self._end_answered(txn)
            self.counts["client_errors." + type(exc).__name__] += 1

    def _key_of(self, msg: str | None) -> str | None:
        """The routing key of a split/merge row's ``msg``: the message's key, else the label."""
        if not msg:
            return None
        m = self.msgs.get(msg)
        return m.key if m is not None and m.key is not None else msg

    def _op_split(self, e: Event) -> None:
        assert e.topic
        key = self._key_of(e.msg)
        try:
            self.broker.split(e.topic, target=e.target, key=key)
        except TopicError:  # an admin request the broker refuses (e.g. a one-hash segment)
            self.counts["admin_errors.split"] += 1

    def _op_merge(self, e: Event) -> None:
        assert e.topic
        targets = e.target.split(",") if e.target else None
        key = self._key_of(e.msg)
        try:
            self.broker.merge(e.topic, targets, key=key)
        except TopicError:  # e.g. only one active segment left, or not adjacent
            self.counts["admin_errors.merge"] += 1

    def _op_crash_broker(self, e: Event) -> None:
        # The trace client waits for every outstanding op before the crash (TraceRunner.crash):
        # what it has not issued yet goes out now, on the broker about to crash.
        for timer in list(self._gated.values()):
            timer.cancel()
            timer.fn(*timer.args)
        self._topic_gate.clear()
        now = self.sched.now_us()
        for txn in self.txns.values():
            txn.open_us = min(txn.open_us, now)
        self._collect_recovery()
        self._retired.update(self.broker.stats())
        self.broker.crash()
        if self.history is not None:
            self.history.fault("crash_broker")
        self.counts["crashes.broker"] += 1
        self._crash_at = e.ts_us
        self.broker = self._new_broker()
        for topic, sub in self.subs:
            self.broker.subscribe(topic, sub, self._consumer(topic, sub), self.sub_types[(topic, sub)])

    def _op_crash_tc(self, e: Event) -> None:
        self.broker.restart_coordinator()
        if self.history is not None:
            self.history.fault("crash_tc")
        self.counts["crashes.tc"] += 1

    def _collect_recovery(self) -> None:
        for s in self.broker.recovery_stats():
            if s.entries_replayed or s.records_read or s.queries:
                self.recovery.append({"engine": self.label, **dataclasses.asdict(s)})

    # -- the run --------------------------------------------------------------------------------

    def run(self, events: Iterable[Event], progress: Callable[[int], None] | None = None) -> RunResult:
        for n in self.steps(events):
            if progress is not None:
                progress(n)
        assert self.result is not None
        return self.result

    def steps(self, events: Iterable[Event], every: int = 16_384) -> Iterator[int]:
        """Replay ``events``, yielding the number applied so far every ``every`` events (for
        progress, or for a caller that streams the sinks' output meanwhile), then drain the
        clock and set :attr:`result`. The broker and backends are closed at the end."""
        start = time.perf_counter()
        n = 0
        last_ts = 0
        # apply() inlined: this loop runs once per trace event
        sched = self.sched
        ops = self._ops
        op_counts = self._op_counts
        pacing = self.pacing
        asap = self.cfg.pacing == "asap"
        bound = self._bound
        due = self.series.due()
        try:
            with replay_gc():
                for e in events:
                    if asap:  # one microsecond after the row before, or once a slot is free
                        ts = last_ts + 1 if n else 0
                        if bound is not None and e.op in _IN_FLIGHT_OPS:
                            ts = self._slot(ts, bound)
                        e = e._replace(ts_us=ts)
                    if e.ts_us >= due or (pacing is not None and sched.now_us() >= due):
                        # wall time: a replay behind the trace closes windows by the clock, not the rows
                        due = self._advance(max(e.ts_us, sched.now_us()))
                    sched.run_until(e.ts_us)
                    if pacing is not None:
                        pacing.issued(e.ts_us, sched.now_us())
                    op_counts[e.op] += 1
                    try:
                        ops[e.op](e)
                    except CLIENT_ERRORS as exc:
                        self.counts["client_errors." + type(exc).__name__] += 1
                    last_ts = e.ts_us
                    n += 1
                    if n % every == 0:
                        yield n
                in_flight = self._drain(last_ts)
            self.result = self._result(n, time.perf_counter() - start)
            self.result.in_flight = in_flight
            self.result.drained_us = self.sched.now_us() - last_ts
        finally:
            self.broker.close()
            self.setup.close()

    def _slot(self, ts: int, bound: int) -> int:
        """When a row issued no earlier than ``ts`` gets one of the asap client's ``bound``
        in-flight slots: the clock runs on (answers come back) until fewer are unanswered."""
        answers, sched = self._answers, self.sched
        while True:
            while answers and answers[0] <= ts:
                heapq.heappop(answers)
            if len(answers) + self._ends_in_flight + self._gated_in_flight + self._receipts_pending < bound:
                return ts
            nxt = sched.next_due_us()
            if answers and (nxt is None or answers[0] < nxt):
                nxt = answers[0]
            if nxt is None:  # nothing left to answer (END_TXNs lost): the client would wait 30 s
                return ts
            nxt = max(nxt, ts)
            if nxt >= self.series.due():
                self._advance(nxt)
            sched.run_until(nxt)
            ts = nxt

    DRAIN_STEP_US = 100_000  # how often an extended drain looks at what is still in flight

    def _drain(self, last_ts: int) -> dict[str, int]:
        """Run ``drain_ms`` after the last event (as always: the model's virtual-time results do
        not change), then, while anything is in flight, on up to ``drain_max_ms`` (e.g. a Kafka
        ledger still delivering: 5 s left 71 of 888 messages behind). Returns what is still in
        flight at the end, so a run that did not quiesce can say so."""
        sched = self.sched
        self._advance(last_ts + self.cfg.drain_ms * 1000)  # the time series' windows close on the way
        sched.run_until(last_ts + self.cfg.drain_ms * 1000)
        limit = last_ts + max(self.cfg.drain_max_ms or 0, self.cfg.drain_ms) * 1000
        in_flight = self.in_flight()
        while any(in_flight.values()) and sched.now_us() < limit:
            step = min(limit, sched.now_us() + self.DRAIN_STEP_US)
            self._advance(step)
            sched.run_until(step)
            in_flight = self.in_flight()
        return in_flight

    def in_flight(self) -> dict[str, int]:
        """Work a quiescent system has none of: messages that some subscription should receive
        (non-transactional or of a committed txn, on a topic with subscriptions) never delivered,
        committed txns whose messages are not all visible yet, txns whose commit or abort was
        requested and has not finished, and rows the client has not sent yet (waiting for their
        txn's new_txn answer or for an earlier send on their topic)."""
        undelivered = 0
        for msg in self.undelivered:
            txn = self.msg_txn.get(msg)
            m = self.msgs.get(msg)
            if m is not None and m.acks_left > 0 and (txn is None or txn.outcome == "committed"):
                undelivered += 1
        not_visible = ending = 0
        for t in self.txns.values():
            if t.outcome == "committed" and t.msgs and t.visible_us is None:
                not_visible += 1
            elif t.end_waiting or (t.outcome is None and t.end_requested_us is not None and t.id is not None
                                   and not self._end_timer(t)):
                ending += 1  # commit or abort requested (or waiting for its sends), not answered, not timed out
        return {"undelivered": undelivered, "committed_not_visible": not_visible, "ending_txns": ending,
                "unsent": len(self._gated) + sum(len(acks) for acks in self._after_publish.values())}

    def _retire(self, txn: _Txn) -> None:
        """Move a txn whose story is over (or the run is) to the txn rows."""
        self._client_timer(txn)  # an open txn past its deadline ended at the client
        self._end_timer(txn)  # so did an END_TXN unanswered past the operation timeout
        self.txns.pop(txn.label, None)
        if txn.id is not None:
            self.by_id.pop(txn.id, None)
        if txn.id is None:
            outcome = "never_opened"  # its new_txn was refused (transactions disabled)
        else:
            outcome = txn.outcome or ("open" if txn.end_requested_us is None else "unfinished")
        decided = outcome  # what the coordinator decided, if it still knows: for the checker
        if (txn.outcome is None or txn.end_timed_out) and txn.id is not None:
            try:  # e.g. aborted by the coordinator's timeout without a client request
                status = self.broker.coordinator().status(txn.id)
                decided = status.value if status.final else outcome
            except TxnbenchError:
                pass
            if not txn.end_timed_out:
                outcome = decided
        self.counts["txns." + outcome] += 1
        if self.history is not None:
            if txn.client_timed_out and txn.id is not None:  # the system's outcome: settled at the end
                self._timed_out.append((txn.label, txn.id))
            else:
                self.history.outcome(txn.label, decided)
        if outcome == "committed" and txn.published and txn.visible_us is None and txn.msgs:
            self.counts["txns.committed_not_visible"] += 1
        rows = self._txn_rows
        rows["engine"].append(self.label)
        rows["txn"].append(txn.label)
        rows["outcome"].append(outcome)
        rows["end_ts_us"].append(txn.end_us)
        rows["visible_ts_us"].append(txn.visible_us)
        rows["commit_requested_ts_us"].append(txn.end_requested_us)
        rows["messages"].append(txn.published)
        rows["opened_ts_us"].append(txn.opened_us)
        rows["new_txn_answered_ts_us"].append(txn.answered_us)
        if self._txn_sink is not None and len(rows["txn"]) >= self._sink_rows:
            self._txn_sink(rows)
            self._txn_rows = _empty_txns()

    def _settle_timed_out(self) -> None:
        """Tell the history what became of the txns the client timed out: aborted once the
        coordinator's timeout has aborted it (v4 then forgets it), else still undecided (v5's
        sweep runs every 60 s): their entries still pin maxReadPosition."""
        assert self.history is not None or not self._timed_out
        for label, txn_id in self._timed_out:
            outcome = TxnStatus.ABORTED.value
            try:
                status = self.broker.coordinator().status(txn_id)
                if not status.final:
                    outcome = status.value
            except TxnbenchError:
                pass
            self.history.outcome(label, outcome)  # type: ignore[union-attr]
        self._timed_out.clear()

    def _result(self, n: int, wall: float) -> RunResult:
        self._collect_recovery()
        counts = Counters(self._retired)
        counts.update(self.broker.stats())  # before the harness asks the coordinator about open txns
        counts.update(self.broker.backlog())
        for txn in list(self.txns.values()):
            self._retire(txn)
        self._settle_timed_out()
        self.counts.update({"events." + op: c for op, c in self._op_counts.items() if c})
        counts.update(self.counts)
        counts["hist_clamped"] = self.hist.clamped
        counts["undelivered_at_end"] = len(self.undelivered)
        counts["acks.never_applied"] = len(self.deferred)
        self._flush_deliveries()
        self._flush_publishes()
        # the engine's own prometheus registry (v5: the PIP's metrics), if it has one; a crash
        # starts a new engine with new metrics, so only a run without broker crashes has them whole
        registry = getattr(getattr(self.broker.engine, "metrics", None), "registry", None)
        if counts.get("crashes.broker"):
            registry = None
        return RunResult(
            label=self.label,
            deliveries=self._deliveries,
            txns=self._txn_rows,
            counts=dict(sorted(counts.items())),
            latency=self.hist.summary(),
            recovery=self.recovery,
            wall_seconds=wall,
            events=n,
            virtual_end_us=self.sched.now_us(),
            peak_rss_mb=peak_rss_mb(),
            series=self.series.finish(self.sched.now_us()),
            rates=self.pacing.rates() if self.pacing is not None else None,
            engine_metrics=list(registry.collect()) if registry is not None else [],
        )


def _empty_deliveries() -> dict[str, list[Any]]:
    return {k: [] for k in ("engine", "topic", "subscription", "msg", "delivered_ts_us", "redelivery")}


def _empty_txns() -> dict[str, list[Any]]:
    return {k: [] for k in ("engine", "txn", "outcome", "end_ts_us", "visible_ts_us", "commit_requested_ts_us", "messages",
                            "opened_ts_us", "new_txn_answered_ts_us")}


def _empty_publishes() -> dict[str, list[Any]]:
    return {k: [] for k in ("engine", "msg", "txn", "issued_ts_us", "answered_ts_us")}
