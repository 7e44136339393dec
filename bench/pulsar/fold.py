"""The trace client's events (``jvm/PROTOCOL.md``, "Output") -> the result contract of a model run.

What each field means follows :mod:`bench.replay.replay`, in the client's wall time (µs since t0):

- a txn's ``end_ts_us`` is when the client heard the answer to its commit/abort,
  ``commit_requested_ts_us`` when it issued it, ``visible_ts_us`` when the last of its messages
  was first delivered on any subscription (committed txns whose messages all arrived);
- ``new_txn_us``: new_txn -> the coordinator's answer (the txn's sends and acks wait for it);
- ``publish_nontxn_us`` / ``publish_txn_us``: send -> the broker's answer; ``end_txn_us``: commit or
  abort -> answer; ``dispatch_*_us``: send -> first delivery; ``commit_to_visible_us``: commit
  request -> the txn's last message first delivered;
- deliveries keep the trace's topic names (the broker's names are per-run renames).

Events may come in any order the client's threads finish in (a delivery can be reported before
the send's answer), so everything that relates two events is computed in :meth:`EventFold.finish`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bench.replay.measure import Histograms, committed_rate

# Errors of a commit/abort meaning the coordinator no longer holds the txn open: Pulsar aborts a
# txn at its timeout (TransactionMetadataStore timeout tracker / TransactionCoordinatorV5), so it
# ended aborted, whatever the client asked.
_GONE = ("TransactionNotFound", "InvalidTxnStatus", "TransactionTimeout", "TxnTimeout", "CoordinatorNotFound")
_INTS = re.compile(r"(?<![A-Za-z_])-?\d+")  # numbers, not digits ending a name (MessageIdV5)
_CLASSIC_ID = re.compile(r"(-?\d+):(-?\d+):(-?\d+)(?::(-?\d+))?")


@dataclass
class _Txn:
    label: str
    opened: bool | None = None  # None: new_txn not answered
    opened_us: int | None = None  # when the client issued new_txn
    answered_us: int | None = None  # when its answer came back (ok or not)
    requested_us: int | None = None
    action: str | None = None
    end_us: int | None = None
    outcome: str | None = None
    msgs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Published:
    topic: str  # the trace's name
    txn: str | None
    key: str | None
    start_us: int
    ledger: str
    position: tuple[int, ...]


@dataclass(frozen=True)
class MessageRef:
    """What :meth:`bench.check.History.publish` reads of a message id."""

    ledger: str
    position: tuple[int, ...]


@dataclass(frozen=True)
class _Delivery:
    msg: str
    redelivery: bool


@dataclass
class Folded:
    deliveries: dict[str, list[Any]]
    txns: dict[str, list[Any]]
    counts: dict[str, int]
    latency: dict[str, Any]
    client: dict[str, Any]
    done: dict[str, Any]
    rates: dict[str, Any]
    history: Any = None  # bench.check.History when asked for


def position_of(message_id: str | None) -> tuple[int, ...]:
    """The stored position a message id string names, as an order key: ``ledger:entry`` (and a
    batch index) of the classic client's ``ledger:entry:partition[:batch]`` (MessageIdImpl,
    BatchMessageIdImpl toString), the V5 SDK's ``MessageIdV5{segment=S, id=L:E:P, ...}`` with its
    other numbers kept around it. The partition index is left out: it names no position, and the
    two sides of one entry disagree on it (a send on a partition addressed as a topic is answered
    with -1, ProducerImpl; the consumer's id of the same entry carries the partition, ConsumerImpl)."""
    s = message_id or ""
    m = _CLASSIC_ID.search(s)
    if m is None:
        return tuple(int(n) for n in _INTS.findall(s))
    ledger, entry, _partition, batch = m.groups()
    return (tuple(int(n) for n in _INTS.findall(s[:m.start()])) + (int(ledger), int(entry))
            + (() if batch is None else (int(batch),)) + tuple(int(n) for n in _INTS.findall(s[m.end():])))


class EventFold:
    """Feed events in the order they were read; call :meth:`finish` once after ``done``."""

    def __init__(self, label: str, rows: list[tuple[str | None, str | None, str | None, str | None]],
                 back: dict[str, str], *, trace_span_us: int = 0, history: bool = False,
                 ended: frozenset[str] = frozenset()) -> None:
        """``rows[n]`` = (trace topic, key, subscription, ack_kind) of trace row ``n``; ``back``
        maps the broker's topic names to the trace's; ``ended``: the txns the trace commits or
        aborts (one whose end the client never reported ends the run ``unfinished``, not ``open``)."""
        self.ended = ended
        self.label = label
        self.rows = rows
        self.back = back
        self.trace_span_us = trace_span_us
        self.want_history = history
        self.txns: dict[str, _Txn] = {}
        self.pubs: dict[str, Published] = {}
        # broker topic, sub, msg, t, redelivery, stored position (from the message id)
        self.deliveries: list[tuple[str, str, str, int, bool, tuple[int, ...]]] = []
        self.counts: dict[str, int] = {}
        self.hist = Histograms()
        self.client: dict[str, Any] = {}
        self.done: dict[str, Any] = {}
        self.subscribed: set[str] = set()  # trace topics with a subscription
        self.subs: set[tuple[str, str]] = set()
        self.crashes: list[int] = []
        self.resumed: list[int] = []
        self.op_starts: list[int] = []  # issue times of the rows that wait for no delivery
        self.max_issue_lag_us = 0
        self.events: list[tuple[int, float, str, tuple[Any, ...]]] = []  # history: (t, rank, kind, args)
        self.answers: list[tuple[int, str, int]] = []  # (answer time, publish|commit|abort, latency): time series

    def _count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def _txn(self, label: str) -> _Txn:
        t = self.txns.get(label)
        if t is None:
            t = self.txns[label] = _Txn(label)
        return t

    def _log(self, t: int, rank: float, kind: str, *args: Any) -> None:
        if self.want_history:
            self.events.append((t, rank, kind, args))

    # -- events -----------------------------------------------------------------------------------

    def feed(self, ev: dict[str, Any]) -> None:
        kind = ev.get("ev")
        if kind == "op":
            self._op(ev)
        elif kind == "deliver":
            self.deliveries.append((ev["topic"], ev["subscription"], ev["msg"], int(ev["t_us"]), bool(ev.get("redelivery")),
                                    position_of(ev.get("message_id"))))
        elif kind == "subscribed":
            topic = self._trace_topic(ev.get("row"), ev.get("topic"))
            self.subscribed.add(topic)
            self.subs.add((topic, str(ev["subscription"])))
            # after the publishes issued at the same instant: the cursor starts at the latest
            # entry (the client asks for SubscriptionInitialPosition.Latest), which may be theirs
            self._log(int(ev["t_us"]), 1.5, "subscribe", topic, ev["subscription"])
        elif kind == "ready":
            self.client = {k: v for k, v in ev.items() if k != "ev"}
        elif kind == "crash":
            self.crashes.append(int(ev["t_us"]))
            self._count("crashes.broker")
            self._log(int(ev["t_us"]), 4, "fault", "crash_broker")
        elif kind == "resumed":
            self.resumed.append(int(ev["t_us"]))
            # back up: every consumer reconnects and gets what it has not acked again
            for topic, sub in sorted(self.subs):
                self._log(int(ev["t_us"]), 4, "fault", "redeliver", sub)
        elif kind == "done":
            self.done = {k: v for k, v in ev.items() if k != "ev"}

    def _trace_topic(self, row: int | None, broker_topic: str | None) -> str:
        if row is not None and 0 <= row < len(self.rows) and self.rows[row][0]:
            return str(self.rows[row][0])
        return self.back.get(broker_topic or "", broker_topic or "")

    def _op(self, ev: dict[str, Any]) -> None:
        op, row = ev["op"], int(ev["row"])
        start, end = int(ev["start_us"]), int(ev["end_us"])
        if op != "ack":  # an ack waits for its message to arrive (the deferred ack): no measure of pace
            self.op_starts.append(start)
            self.max_issue_lag_us = max(self.max_issue_lag_us, start - int(ev.get("due_us", start)))
        ok = bool(ev.get("ok"))
        if not ok:
            error = str(ev.get("error") or "Error")
            self._count("client_errors." + error.split(":", 1)[0].rsplit(".", 1)[-1].strip())
        topic, key, sub, ack_kind = self.rows[row] if 0 <= row < len(self.rows) else (None, None, None, None)
        txn_label = ev.get("txn")
        if op == "new_txn":
            txn = self._txn(str(txn_label))
            txn.opened, txn.opened_us, txn.answered_us = ok, start, end
            if ok:
                self._count("txns.started")
                self.hist.record("new_txn_us", end - start)
        elif op == "publish":
            if not ok:
                return
            msg = str(ev["msg"])
            self.pubs[msg] = Published(str(topic), txn_label, key, start, str(topic), position_of(ev.get("message_id")))
            self.hist.record("publish_nontxn_us" if txn_label is None else "publish_txn_us", end - start)
            self.answers.append((end, "publish", end - start))
            if txn_label is not None:
                self._txn(str(txn_label)).msgs.append(msg)
            self._log(start, 1, "publish", msg)
        elif op == "ack":
            if ok:
                self._log(start, 3, "ack", sub, str(ev["msg"]), ack_kind == "cumulative", txn_label)
        elif op in ("commit", "abort"):
            txn = self._txn(str(txn_label))
            txn.requested_us, txn.action = start, op
            self._log(start, 2, "end", txn.label, op)
            txn.end_us = end
            self.hist.record("end_txn_us", end - start)
            self.answers.append((end, op if ok else "end_failed", end - start))
            if ok:
                txn.outcome = "committed" if op == "commit" else "aborted"
                if op == "commit":
                    self._log(end, 6, "heard", txn.label)
            else:
                error = str(ev.get("error") or "")
                txn.outcome = "aborted" if any(g in error for g in _GONE) else "unfinished"
        elif op in ("split", "merge") and not ok:
            self._count(f"admin_errors.{op}")

    # -- the result -----------------------------------------------------------------------------

    def finish(self) -> Folded:
        deliveries: dict[str, list[Any]] = {k: [] for k in ("engine", "topic", "subscription", "msg", "delivered_ts_us", "redelivery")}
        first: dict[str, int] = {}
        stored = self._stored_positions()
        for broker_topic, sub, msg, t, redelivery, position in self.deliveries:
            pub = self.pubs.get(msg)
            topic = pub.topic if pub is not None else self.back.get(broker_topic, broker_topic)
            deliveries["engine"].append(self.label)
            deliveries["topic"].append(topic)
            deliveries["subscription"].append(sub)
            deliveries["msg"].append(msg)
            deliveries["delivered_ts_us"].append(t)
            deliveries["redelivery"].append(redelivery)
            if redelivery and self._restarting(t):
                # The broker went down and came back somewhere in [crash, resumed] (stopping takes
                # seconds: its shutdown closes the topics and consumers reconnect); a message
                # seen again in that window came back because of the restart.
                self._log(t, 4, "fault", "redeliver", sub)
            if position != stored.get(msg, position):
                # a later stored copy of the message: the producer re-sent it after a reconnection
                # (ProducerImpl.resendMessages) and, without deduplication (brokerDeduplicationEnabled
                # is off), the broker stored both. Kept in the deliveries; the checker judges the
                # broker's delivery of what it stored once per publish
                self._count("deliveries.of_resent_copies")
                continue
            self._log(t, 5, "deliver", topic, sub, msg, redelivery)
            if msg not in first or t < first[msg]:
                first[msg] = t
        self._count("deliveries", len(self.deliveries))
        for msg, t in first.items():
            pub = self.pubs.get(msg)
            if pub is not None:
                self.hist.record("dispatch_nontxn_us" if pub.txn is None else "dispatch_txn_us", t - pub.start_us)
        for i, crash in enumerate(self.crashes):
            if i >= len(self.resumed):
                break
            # crash -> first delivery once the restarted broker is up (what came in between was
            # the old broker shutting down); the restart itself is scripts/pulsar.sh restart's time
            back = self.resumed[i]
            self._count("pulsar.restart_ms", (back - crash) // 1000)
            after = [t for _topic, _sub, _msg, t, *_ in self.deliveries if t >= back]
            if after:
                self.hist.record("time_to_first_dispatch_after_crash_us", min(after) - crash)

        txns: dict[str, list[Any]] = {k: [] for k in ("engine", "txn", "outcome", "end_ts_us", "visible_ts_us", "commit_requested_ts_us",
                                                      "messages", "opened_ts_us", "new_txn_answered_ts_us")}
        aborted: set[str] = set()
        for txn in self.txns.values():
            if txn.opened is False:
                outcome = "never_opened"
            elif txn.outcome is not None:
                outcome = txn.outcome
            else:
                asked = txn.requested_us is not None or txn.label in self.ended
                outcome = "unfinished" if asked else "open"
            if outcome != "committed":
                aborted.add(txn.label)
            visible = None
            if outcome == "committed" and txn.msgs:
                times = [first.get(m) for m in txn.msgs]
                if all(t is not None for t in times):
                    visible = max(t for t in times if t is not None)
                    assert txn.requested_us is not None
                    self.hist.record("commit_to_visible_us", visible - txn.requested_us)
                else:
                    self._count("txns.committed_not_visible")
            self._count("txns." + outcome)
            self._log(1 << 62, 7, "outcome", txn.label, outcome)
            txns["engine"].append(self.label)
            txns["txn"].append(txn.label)
            txns["outcome"].append(outcome)
            txns["end_ts_us"].append(txn.end_us)
            txns["visible_ts_us"].append(visible)
            txns["commit_requested_ts_us"].append(txn.requested_us)
            txns["messages"].append(len(txn.msgs))
            txns["opened_ts_us"].append(txn.opened_us)
            txns["new_txn_answered_ts_us"].append(txn.answered_us)
        self.counts["undelivered_at_end"] = sum(
            1 for msg, p in self.pubs.items()
            if msg not in first and p.topic in self.subscribed and (p.txn is None or p.txn not in aborted))
        self.counts["hist_clamped"] = self.hist.clamped
        return Folded(deliveries=deliveries, txns=txns, counts=dict(sorted(self.counts.items())),
                      latency=self.hist.summary(), client=self.client, done=self.done, rates=self._rates(),
                      history=self._history(stored) if self.want_history else None)

    def _stored_positions(self) -> dict[str, tuple[int, ...]]:
        """The copy the history judges of each message delivered under more than one message id
        (the producer re-sent it, the broker stored each copy): the one stored first. Every cursor
        reads it before the later copies, and the client acks what it received first (TraceRunner's
        plain ack), so the acks in the history are of that copy; the send may have been answered
        with another one (ProducerImpl.resendMessages: the first receipt was lost)."""
        seen: dict[str, set[tuple[int, ...]]] = {}
        for _topic, _sub, msg, _t, _redelivery, position in self.deliveries:
            seen.setdefault(msg, set()).add(position)
        return {msg: min(ids) for msg, ids in seen.items() if len(ids) > 1}

    def _restarting(self, t: int) -> bool:
        return any(c <= t <= (self.resumed[i] if i < len(self.resumed) else 1 << 62) for i, c in enumerate(self.crashes))

    def _rates(self) -> dict[str, Any]:
        """Offered (the trace's) vs achieved (the client's) rate of rows, and txns per second.
        The achieved rate and ``max_issue_lag_us`` leave acks out: an ack is issued when its
        message arrives, which a txn still open may hold back for as long as the trace says."""
        n = int(self.done.get("rows") or len(self.op_starts))
        issued = len(self.op_starts)
        issued_us = max(self.op_starts) - min(self.op_starts) if issued > 1 else 0
        span = self.trace_span_us
        return {
            "rows": n,
            "offered_rows_per_s": round(n / (span / 1e6), 1) if span else None,
            "achieved_rows_per_s": round(issued / (issued_us / 1e6), 1) if issued_us else None,
            "issue_span_us": issued_us,
            "max_issue_lag_us": self.max_issue_lag_us,
            "committed_txns_per_s": committed_rate({"outcome": t.outcome, "end_ts_us": t.end_us, "opened_ts_us": t.opened_us}
                                                   for t in self.txns.values()),
            "max_lag_us": self.done.get("max_lag_us"),  # the client's: every row, acks included
            "paused_us": self.done.get("paused_us"),  # the paced clock stopped for subscribes (jvm/PROTOCOL.md)
        }

    def _history(self, stored: dict[str, tuple[int, ...]]) -> Any:
        """A :class:`bench.check.History` of the run: the client's operations, faults and
        deliveries in time order (requests at their issue time, answers heard when they came)."""
        from bench.check import History

        h = History()
        for _t, _rank, kind, args in sorted(self.events, key=lambda e: (e[0], e[1])):
            if kind == "subscribe":
                topic, sub = args
                h.subscribe(topic, sub, latest=True)
            elif kind == "publish":
                p = self.pubs[args[0]]
                # where the copy the history judges is stored (its deliveries are the ones kept)
                h.publish(args[0], p.topic, p.txn, p.key, MessageRef(p.ledger, stored.get(args[0], p.position)))
            elif kind == "ack":
                sub, msg, cumulative, txn = args
                h.ack(sub, [msg], cumulative, txn)
            elif kind == "end":
                h.end(*args)
            elif kind == "heard":
                h.heard(args[0], "committed")
            elif kind == "fault":
                h.fault(*args)
            elif kind == "deliver":
                topic, sub, msg, redelivery = args
                h.deliver(topic, sub, [_Delivery(msg, redelivery)])
            elif kind == "outcome":
                h.outcome(*args)
        return h
