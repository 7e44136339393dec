"""The broker: topics and their ledgers, subscriptions and dispatchers, and the engine (v4, v5,
or none: transactions disabled) that serves each topic's transactions.

A broker is the volatile half of the system. :meth:`Broker.crash` drops it whole: every timer it
or its engine scheduled, every handle and listener, every in-memory state. A new ``Broker`` on
the same :class:`~engine.ledger.LedgerFactory` (and, for v5, the same metadata store) recovers
from what is durable only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterable

from engine.capacity import IO_THREAD
from engine.clock import LatencyModel, Scheduler, Scope, VirtualScheduler, coordinator_kind
from engine.counters import Counters
from engine.cursor import Cursor
from engine.dispatcher import DEFAULT_SUB_TYPE, DeliverFn, DispatchMode, Dispatcher, PollingPolicy, SubscriptionType
from engine.errors import ConfigError, MessageTooBig, TopicError, TxnbenchError, UnsupportedOperation
from engine.ids import TxnID
from engine.ledger import LedgerFactory, ManagedLedger, scan_entries
from engine.ports import (
    AckKind,
    Engine,
    EngineContext,
    EngineFactory,
    EndTxnCallback,
    PendingAckStore,
    RecoveryStats,
    TransactionBuffer,
    TransactionCoordinator,
    TxnAction,
)
from engine.records import EntryData, MessageId, Position
from engine.topics import Segment, SegmentLayout, TopicName, key_hash
from engine.txn_disabled import PendingAckStoreDisabled, TransactionBufferDisabled


# Build records without the named tuples' Python-level ``__new__`` (once per publish).
_entry_data: Callable[[tuple[object, ...]], EntryData] = partial(tuple.__new__, EntryData)  # type: ignore[assignment]
_message_id: Callable[[tuple[str, Position]], MessageId] = partial(tuple.__new__, MessageId)  # type: ignore[assignment]


@dataclass(frozen=True)
class BrokerConfig:
    dispatch: DispatchMode = DispatchMode.POLLING
    polling: PollingPolicy = field(default_factory=PollingPolicy)
    read_batch: int = 100  # Pulsar's dispatcherMaxReadBatchSize
    # ServiceConfiguration.maxMessageSize (Commands.DEFAULT_MAX_MESSAGE_SIZE): the client learns it
    # on connect and refuses larger sends (ProducerImpl, chunking off), as the broker would.
    max_message_size: int = 5 * 1024 * 1024
    latency: LatencyModel = field(default_factory=LatencyModel)


class BrokerClosed(TxnbenchError):
    """The broker crashed or was closed; build a new one on the same durable stores."""


class _Subscription:
    """One subscription on one partition/segment."""

    def __init__(self, ledger: ManagedLedger, name: str, pending: Callable[["Cursor"], PendingAckStore],
                 now: Callable[[], int]) -> None:
        self.name = name
        self.cursor = Cursor(ledger, name, now)
        self.pending = pending(self.cursor)
        self.pending.recover()
        self.dispatcher: Dispatcher | None = None


class _Partition:
    """A partition or segment: its ledger handle, buffer and subscriptions."""

    def __init__(self, ledger: ManagedLedger, tb: TransactionBuffer, transactional: bool) -> None:
        self.ledger = ledger
        self.tb = tb
        self.transactional = transactional
        self.subs: dict[str, _Subscription] = {}


class Broker:
    def __init__(
        self,
        scheduler: Scheduler,
        ledgers: LedgerFactory,
        config: BrokerConfig | None = None,
        engine: EngineFactory | None = None,
        transactional: Callable[[str], bool] | None = None,
    ) -> None:
        """``engine`` serves transactions on every topic for which ``transactional(topic)`` is
        true (default: all); other topics, or all when ``engine`` is None, have them disabled."""
        self.config = config or BrokerConfig()
        self._scope = Scope(scheduler)
        self._now_us = self._scope.parent.now_us
        self._ledgers = ledgers
        self._ctx = EngineContext(self._scope, self.config.latency, ledgers, participants=self)
        self._meter = self._ctx.meter
        self.last_publish_us = 0  # modelled latency of the last publish, engine charges included
        self.last_publish_hop_us = 0  # of it, the receipt's hop back to the client
        self.last_publish_ledger = ""  # where it went (receipt_leaves_at)
        # a txn send whose buffer may hold its lock: when, after its issue, the connection's IO
        # thread handles it (send_lock_wait); None otherwise
        self.last_publish_io_us: int | None = None
        self.last_ack_us = 0  # modelled latency of the last txn ack, until its answer
        self.last_new_txn_us = 0  # modelled latency of the last new_txn (the client waits for its id)
        self._engine: Engine | None = engine(self._ctx) if engine is not None else None
        self._transactional = transactional or (lambda _topic: True)
        self._partitions: dict[str, _Partition] = {}
        self._layouts: dict[str, SegmentLayout] = {}
        self._layout_ledgers: dict[str, ManagedLedger] = {}
        self._consumers: dict[tuple[str, str], DeliverFn] = {}
        self._sub_types: dict[tuple[str, str], SubscriptionType] = {}
        self._plain_topics: dict[str, str] = {}  # partition topic as given -> its ledger name
        self._closed = False

    # -- topics ---------------------------------------------------------------------------------

    @property
    def scheduler(self) -> Scheduler:
        return self._scope

    @property
    def engine(self) -> Engine | None:
        return self._engine

    def _live(self) -> None:
        if self._closed:
            raise BrokerClosed("the broker has crashed or closed; open a new one on the same stores")

    def _layout(self, name: TopicName) -> SegmentLayout:
        key = str(name)
        layout = self._layouts.get(key)
        if layout is None:
            layout = SegmentLayout(name)
            ledger = self._ledgers.open(name.layout_ledger())
            self._layout_ledgers[key] = ledger
            records = list(scan_entries(ledger))
            if not records:  # a new scalable topic: one segment over the whole hash space
                seg = layout.initial()
                self._append_layout(key, {"created": [seg.to_record()], "sealed": []})
            for entry in records:
                assert entry.data.payload is not None
                layout.apply(dict(entry.data.payload))
            self._layouts[key] = layout
        return layout

    def _append_layout(self, topic: str, record: dict[str, object]) -> None:
        now = self._scope.now_us()
        self._layout_ledgers[topic].append(EntryData(size=0, publish_ts_us=now, payload=record))

    def _partition(self, ledger_name: str) -> _Partition:
        part = self._partitions.get(ledger_name)
        if part is None:
            self._live()
            topic = _topic_of_ledger(ledger_name)
            ledger = self._ledgers.open(ledger_name)
            transactional = self._engine is not None and self._transactional(topic)
            if transactional:
                assert self._engine is not None
                tb = self._engine.transaction_buffer(ledger)
            else:
                tb = TransactionBufferDisabled(ledger)
            part = self._partitions[ledger_name] = _Partition(ledger, tb, transactional)
            tb.recover()
        return part

    def _ledger_for_publish(self, topic: str, key: str | None, msg: str | None) -> str:
        plain = self._plain_topics.get(topic)
        if plain is not None:
            return plain
        name = TopicName.parse(topic)
        if not name.scalable:
            plain = self._plain_topics[topic] = str(name)
            return plain
        route_key = key if key is not None else (msg or "")
        return self._layout(name).route(key_hash(route_key)).ledger

    def ledgers_of(self, topic: str) -> list[str]:
        """Every ledger of a topic: itself for a partition, every segment (sealed too) for a
        scalable topic, in creation order."""
        name = TopicName.parse(topic)
        if not name.scalable:
            return [str(name)]
        layout = self._layout(name)
        return [layout.segments[i].ledger for i in sorted(layout.segments)]

    def active_segments(self, topic: str) -> list[str]:
        return [s.ledger for s in self._layout(_scalable(topic)).active()]

    # -- producing ------------------------------------------------------------------------------

    def publish(
        self, topic: str, msg: str | None, size: int, *, txn: TxnID | None = None, key: str | None = None
    ) -> MessageId:
        if self._closed:
            self._live()
        ledger_name = self._plain_topics.get(topic) or self._ledger_for_publish(topic, key, msg)
        part = self._partitions.get(ledger_name) or self._partition(ledger_name)
        # What every publish waits for: the request hop, the connection's IO thread (ServerCnx
        # handles the send after the commands before it: capacity.IO_THREAD), what the engine
        # does on its path (billed to the open request by the meter), the ledger append, the
        # answer hop.
        bill = self._meter.bill
        with self._ctx.request as request:  # engine calls on the way are billed to it
            bill("rpc")
            self._meter.behind("metadata", IO_THREAD)
            self.last_publish_io_us = request.us if txn is not None and part.tb.locks else None
            data = _entry_data((size, self._now_us(), msg, txn, None, key, None))
            if txn is None:
                if size > self.config.max_message_size:
                    raise self._too_big(topic, msg, size)
                pos = part.ledger.append(data)
                bill("ledger.append", "bookie", ledger_name)
                # once the add is done: PersistentTopic.addComplete (M1 L747-760), before the receipt
                part.tb.sync_max_read_position_for_normal_publish(pos)
            else:
                if not part.transactional:
                    raise UnsupportedOperation(f"transactions are disabled on {topic}; txn {txn} cannot publish")
                assert self._engine is not None  # part.transactional implies an engine
                # ProducerImpl.internalSendWithTxnAsync registers the partition with the txn first,
                # then sends: an oversized message has cost the registration when it fails.
                self._engine.coordinator().add_produced_partition(txn, ledger_name)
                if size > self.config.max_message_size:
                    raise self._too_big(topic, msg, size)
                pos = part.tb.append_buffer_to_txn(txn, data)
                bill("ledger.append", "bookie", ledger_name)
            hop = bill("rpc")
        self.last_publish_us = request.us
        self.last_publish_hop_us = hop
        self.last_publish_ledger = ledger_name
        return _message_id((ledger_name, pos))

    def receipts_wait(self) -> bool:
        """Whether a publish's receipt may wait for the connection's IO thread
        (:meth:`receipt_leaves_at`): once a store call has held that thread."""
        return self._meter.in_use("metadata", IO_THREAD)

    def receipt_leaves_at(self, ready_us: int, ledger: str = "") -> int | None:
        """When a publish receipt to ``ledger`` written at ``ready_us`` leaves for the client.
        The add completes on its managed ledger's thread, which first syncs the buffer's max
        read position under the buffer's lock (``PersistentTopic.addComplete`` M1 L747-760,
        ``MetadataTransactionBuffer.syncMaxReadPositionForNormalPublish`` L669:
        ``synchronized (lock)``; a txn entry's ``trackPosition`` L398-399 takes the same lock),
        so it waits for whatever buffer work holds that lock then
        (``TransactionBuffer.lock_free_at``: the shipped v5 buffer's apply of a commit). It hands
        the write to the connection's IO thread (``ServerCnx``), so it goes once the batch of
        commands that thread runs then is done (Netty's ``FlushConsolidationHandler`` in
        ``PulsarChannelInitializer``). None when neither holds it: at once."""
        free = self._lock_free_at(ledger, ready_us)
        done = self._meter.batch_done_at("metadata", IO_THREAD, free)
        if done is None:
            return None if free == ready_us else free
        return done

    def send_lock_wait(self, ledger: str) -> int:
        """A txn send to ``ledger`` reaching the connection's IO thread now: ``ServerCnx`` hands
        it to ``MetadataTransactionBuffer.appendBufferToTxn``, whose ``readStateCacheFirst``
        (M1 L366-367) is ``synchronized (lock)`` there, so it waits for whatever buffer work
        holds that lock (the apply of a commit) and the thread, with every command behind it,
        waits too (Java Flight Recorder caught it on the IO threads: datasets/validation/README.md,
        session 42). Returns the wait, holding the thread for it; 0 when the lock is free."""
        now = self._now_us()
        free = self._lock_free_at(ledger, now)
        if free <= now:
            return 0
        self._partitions[ledger].tb.stats["lock_waits_on_send"] += 1
        self._meter.hold("metadata", IO_THREAD, free)
        return free - now

    def _lock_free_at(self, ledger: str, at_us: int) -> int:
        """When ``ledger``'s buffer lock, taken at ``at_us``, is got (``at_us`` for a ledger this
        broker does not hold)."""
        part = self._partitions.get(ledger)
        return at_us if part is None else part.tb.lock_free_at(at_us)

    def _too_big(self, topic: str, msg: str | None, size: int) -> MessageTooBig:
        return MessageTooBig(
            f"publish of {msg!r} to {topic}: {size} bytes exceed maxMessageSize {self.config.max_message_size}"
        )

    # -- consuming ------------------------------------------------------------------------------

    def _sub(self, ledger_name: str, subscription: str) -> _Subscription:
        part = self._partition(ledger_name)
        sub = part.subs.get(subscription)
        if sub is None:
            if part.transactional:
                assert self._engine is not None
                engine = self._engine
                factory: Callable[[Cursor], PendingAckStore] = lambda c: engine.pending_ack_store(  # noqa: E731
                    part.ledger, subscription, c
                )
            else:
                factory = lambda _c: PendingAckStoreDisabled(f"{ledger_name} [{subscription}]")  # noqa: E731
            sub = part.subs[subscription] = _Subscription(part.ledger, subscription, factory, self._now_us)
        return sub

    def subscribe(
        self, topic: str, subscription: str, deliver: DeliverFn, sub_type: SubscriptionType = DEFAULT_SUB_TYPE
    ) -> None:
        """Create (or reconnect to) ``subscription`` and push its messages to ``deliver``.
        A new subscription starts at the earliest stored entry. ``sub_type`` picks the
        dispatcher's read-retry timing (see :mod:`engine.dispatcher`)."""
        self._live()
        self._consumers[(topic, subscription)] = deliver
        self._sub_types[(topic, subscription)] = sub_type
        for ledger_name in self.ledgers_of(topic):
            self._attach(topic, ledger_name, subscription)

    def _attach(self, topic: str, ledger_name: str, subscription: str) -> None:
        sub = self._sub(ledger_name, subscription)
        if sub.dispatcher is not None:
            return
        part = self._partitions[ledger_name]
        gate = self._gate(topic, ledger_name, subscription)
        cfg = self.config
        sub.dispatcher = Dispatcher(
            scheduler=self._scope,
            latency=cfg.latency,
            mode=cfg.dispatch,
            polling=cfg.polling,
            ledger=part.ledger,
            cursor=sub.cursor,
            tb=part.tb,
            pending=sub.pending,
            deliver=self._consumers[(topic, subscription)],
            read_batch=cfg.read_batch,
            gate=gate,
            sub_type=self._sub_types.get((topic, subscription), DEFAULT_SUB_TYPE),
            meter=self._meter,
        )
        if TopicName.parse(topic).scalable:
            layout = self._layout(TopicName.parse(topic))
            seg = layout.find(ledger_name)
            children = [s for s in layout.segments.values() if seg.id in s.parents]
            for child in children:
                sub.dispatcher.on_drained(partial(self._kick, child.ledger, subscription))
        sub.dispatcher.kick()

    def _gate(self, topic: str, ledger_name: str, subscription: str) -> Callable[[], bool] | None:
        name = TopicName.parse(topic)
        if not name.scalable:
            return None
        layout = self._layout(name)
        seg = layout.find(ledger_name)
        if not seg.parents:
            return None
        parent_ledgers = [layout.segments[p].ledger for p in seg.parents]

        def parents_drained() -> bool:
            for p in parent_ledgers:
                d = self._sub(p, subscription).dispatcher
                if d is None or not d.drained:
                    return False
            return True

        return parents_drained

    def _kick(self, ledger_name: str, subscription: str) -> None:
        part = self._partitions.get(ledger_name)
        sub = part.subs.get(subscription) if part else None
        if sub is not None and sub.dispatcher is not None:
            sub.dispatcher.kick()

    def ack(
        self,
        subscription: str,
        message_ids: Iterable[MessageId],
        kind: AckKind = AckKind.INDIVIDUAL,
        *,
        txn: TxnID | None = None,
    ) -> None:
        """Ack messages on ``subscription``; with ``txn``, a pending (transactional) ack."""
        if self._closed:
            self._live()
        if type(message_ids) is list and len(message_ids) == 1:  # the common case: one message
            ledger_name, position = message_ids[0]
            self._ack_on(subscription, ledger_name, [position], kind, txn)
            return
        by_ledger: dict[str, list[Position]] = {}
        for mid in message_ids:
            by_ledger.setdefault(mid.ledger, []).append(mid.position)
        for ledger_name, positions in by_ledger.items():
            self._ack_on(subscription, ledger_name, positions, kind, txn)

    def _ack_on(
        self, subscription: str, ledger_name: str, positions: list[Position], kind: AckKind, txn: TxnID | None
    ) -> None:
        part = self._partitions.get(ledger_name)
        if part is None and not self._ledgers.exists(ledger_name):
            raise TopicError(f"ack on {subscription}: no ledger {ledger_name!r}")
        sub = part.subs.get(subscription) if part is not None else None
        if sub is None:
            sub = self._sub(ledger_name, subscription)
        if txn is not None:
            if not self._partitions[ledger_name].transactional:
                raise UnsupportedOperation(f"transactions are disabled on {ledger_name}; txn {txn} cannot ack")
            assert self._engine is not None  # a transactional partition implies an engine
            # A txn ack is answered (ConsumerImpl.doTransactionAcknowledgeForResponse), after the
            # client registered the subscription with the coordinator (ConsumerBase L739-742:
            # registerAckedTopic, then the ack); TransactionImpl.commit waits for that answer.
            with self._ctx.request as request:  # engine calls on the way are billed to it
                self._engine.coordinator().add_acked_subscription(txn, ledger_name, subscription)
                self._meter.bill("rpc")
                self._meter.behind("metadata", IO_THREAD)
                sub.pending.ack(txn, positions, kind)
                self._meter.bill("rpc")
            self.last_ack_us = request.us
            return
        if kind is AckKind.CUMULATIVE:
            if len(positions) != 1:
                raise TopicError(f"a cumulative ack takes one message per ledger, got {len(positions)}")
            sub.cursor.ack_cumulative(positions[0])
        else:
            sub.cursor.ack_individual(positions)
        sub.pending.on_non_txn_ack(positions)
        if sub.dispatcher is not None:
            sub.dispatcher.on_acked(positions)

    def redeliver_unacked(self, topic: str, subscription: str) -> None:
        for ledger_name in self.ledgers_of(topic):
            d = self._sub(ledger_name, subscription).dispatcher
            if d is not None:
                d.redeliver_unacked()

    # -- scalable topics ------------------------------------------------------------------------

    def split(self, topic: str, target: str | None = None, key: str | None = None) -> list[str]:
        """Split the segment ``target`` (descriptor or ledger name), or the active one that
        serves ``key``, or the first active one. Returns the new segments' ledger names."""
        self._live()
        name = _scalable(topic)
        layout = self._layout(name)
        seg = self._pick(layout, target, key)
        children = layout.split(seg)
        self._seal_and_record(str(name), [seg], children)
        return [c.ledger for c in children]

    def merge(self, topic: str, targets: list[str] | None = None, key: str | None = None) -> str:
        """Merge two adjacent active segments: ``targets``, or the one serving ``key`` (or the
        first active one) with its right-hand neighbour (left-hand if it is the last)."""
        self._live()
        name = _scalable(topic)
        layout = self._layout(name)
        if targets:
            if len(targets) != 2:
                raise TopicError(f"{topic}: merge takes two segments, got {len(targets)}")
            a, b = layout.find(targets[0]), layout.find(targets[1])
        else:
            a = self._pick(layout, None, key)
            active = layout.active()
            i = active.index(a)
            if len(active) < 2:
                raise TopicError(f"{topic}: only one active segment; nothing to merge")
            b = active[i + 1] if i + 1 < len(active) else active[i - 1]
        child = layout.merge(a, b)
        self._seal_and_record(str(name), [a, b], [child])
        return child.ledger

    def _pick(self, layout: SegmentLayout, target: str | None, key: str | None) -> Segment:
        if target:
            return layout.find(target)
        if key is not None:
            return layout.route(key_hash(key))
        active = layout.active()
        return active[0]

    def _seal_and_record(self, topic: str, sealed: list[Segment], created: list[Segment]) -> None:
        for seg in sealed:
            self._partition(seg.ledger).ledger.seal()
        self._append_layout(
            topic, {"sealed": [s.id for s in sealed], "created": [c.to_record() for c in created]}
        )
        for (t, subscription) in list(self._consumers):
            if t != topic:
                continue
            for child in created:
                self._attach(t, child.ledger, subscription)
            for seg in sealed:
                d = self._sub(seg.ledger, subscription).dispatcher
                if d is not None:
                    for child in created:
                        d.on_drained(partial(self._kick, child.ledger, subscription))
                    d.kick()

    # -- transactions ---------------------------------------------------------------------------

    def coordinator(self) -> TransactionCoordinator:
        self._live()
        if self._engine is None:
            raise UnsupportedOperation("transactions are disabled on this broker")
        return self._engine.coordinator()

    def new_txn(self, timeout_ms: int = 60_000) -> TxnID:
        # ServerCnx.handleNewTxn: the request hop, the coordinator's thread, its handling and what
        # it does there (v4 its log append, v5 its sequence and header writes; billed to the open
        # request), the answer hop. The client's TransactionImpl exists only once that answer is back.
        coordinator = self.coordinator()
        assert self._engine is not None  # coordinator() refuses a broker without one
        bill = self._meter.bill
        with self._ctx.request as request:
            bill("rpc")
            self._meter.serve("coordinator")
            bill(coordinator_kind(self._engine.design.value))
            txn = coordinator.new_txn(timeout_ms)
            bill("rpc")
        self.last_new_txn_us = request.us
        return txn

    def end_txn(self, txn: TxnID, action: TxnAction, on_done: EndTxnCallback | None = None) -> None:
        self.coordinator().end_txn(txn, action, on_done)

    def restart_coordinator(self) -> None:
        self._live()
        if self._engine is None:
            raise UnsupportedOperation("transactions are disabled on this broker")
        self._engine.restart_coordinator()

    # Participants: END_TXN RPC handlers a fan-out coordinator calls.

    def end_txn_on_partition(self, ledger: str, txn: TxnID, action: TxnAction, low_water_mark: int) -> None:
        self._live()
        self._partition(ledger).tb.end_txn(txn, action, low_water_mark)

    def end_txn_on_subscription(
        self, ledger: str, subscription: str, txn: TxnID, action: TxnAction, low_water_mark: int
    ) -> None:
        self._live()
        self._sub(ledger, subscription).pending.end_txn(txn, action, low_water_mark)

    # -- introspection ----------------------------------------------------------------------------

    def transaction_buffer(self, ledger: str) -> TransactionBuffer:
        return self._partition(ledger).tb

    def managed_ledger(self, ledger: str) -> ManagedLedger:
        return self._partition(ledger).ledger

    def cursor(self, ledger: str, subscription: str) -> Cursor:
        return self._sub(ledger, subscription).cursor

    def pending_ack_store(self, ledger: str, subscription: str) -> PendingAckStore:
        return self._sub(ledger, subscription).pending

    def stats(self) -> Counters:
        """Every count of this broker's life, prefixed by component: ``ledger.``, ``dispatch.``,
        ``tb.``, ``pending_ack.``, and the engine's own."""
        total = Counters()
        for part in self._partitions.values():
            total.update(part.ledger.stats.prefixed("ledger."))
            total.update(part.tb.stats.prefixed("tb."))
            for sub in part.subs.values():
                total.update(sub.pending.stats.prefixed("pending_ack."))
                if sub.dispatcher is not None:
                    total.update(sub.dispatcher.stats.prefixed("dispatch."))
        for ledger in self._layout_ledgers.values():
            total.update(ledger.stats.prefixed("ledger."))
        if self._engine is not None:
            total.update(self._engine.stats())
        total.update(self._meter.billed.prefixed("billed."))  # what the meter billed, per kind
        local, run = self._meter.capacity_stats()
        total.update({f"capacity.{k}": v for k, v in local.items()})
        for k, v in run.items():  # the run's own figures, not added to a crashed broker's retired copy
            total[f"capacity.{k}"] = v
        return total

    def blocked_us(self) -> int:
        """``dispatch.blocked_us`` of :meth:`stats`, without building the rest (the time series
        reads it at every window's end)."""
        return sum(sub.dispatcher.stats["blocked_us"] for part in self._partitions.values()
                   for sub in part.subs.values() if sub.dispatcher is not None)

    def backlog(self) -> dict[str, int]:
        """The engine's :meth:`~engine.ports.Engine.backlog` (empty without transactions)."""
        return self._engine.backlog() if self._engine is not None else {}

    def recovery_stats(self) -> list[RecoveryStats]:
        out: list[RecoveryStats] = []
        for part in self._partitions.values():
            if (s := part.tb.recovery_stats()) is not None:
                out.append(s)
            for sub in part.subs.values():
                if (s := sub.pending.recovery_stats()) is not None:
                    out.append(s)
        if self._engine is not None:
            if (s := self._engine.coordinator().recovery_stats()) is not None:
                out.append(s)
        return out

    def check(self) -> None:
        """Run every component's invariant check, starting the coordinator if it has not."""
        self._check()
        if self._engine is not None:
            self._engine.coordinator().check()

    def _check(self) -> None:
        """Recurse into every in-memory part, starting nothing: the virtual scheduler's queue,
        then per partition its ledger, buffer, and each subscription's cursor and pending-ack
        store, then the engine (its coordinator, if started). Each part's docstring says what
        it asserts and why it holds. A crashed broker holds no parts."""
        sched = self._scope.parent
        if isinstance(sched, VirtualScheduler):
            sched._check()
        for part in self._partitions.values():
            part.ledger._check()
            part.tb.check()
            for sub in part.subs.values():
                sub.cursor._check()
                sub.pending.check()
        if self._engine is not None:
            self._engine._check()

    # -- lifecycle ------------------------------------------------------------------------------

    def crash(self) -> None:
        """Drop everything volatile at once, flushing nothing."""
        if self._closed:
            return
        self._closed = True
        self._scope.close()
        for part in self._partitions.values():
            for sub in part.subs.values():
                if sub.dispatcher is not None:
                    sub.dispatcher.close()
                sub.pending.close()
            part.tb.close()
            part.ledger.close()
        for ledger in self._layout_ledgers.values():
            ledger.close()
        if self._engine is not None:
            self._engine.close()
        self._partitions.clear()
        self._layouts.clear()
        self._layout_ledgers.clear()

    close = crash  # nothing is buffered in memory that a clean close would flush


def _topic_of_ledger(ledger_name: str) -> str:
    """``segment://t/ns/x/<desc>`` -> ``topic://t/ns/x``; a partition is its own topic."""
    if ledger_name.startswith("segment://"):
        return "topic://" + ledger_name[len("segment://"):].rsplit("/", 1)[0]
    return ledger_name


def _scalable(topic: str) -> TopicName:
    name = TopicName.parse(topic)
    if not name.scalable:
        raise TopicError(f"{topic} is not a scalable topic (topic://...); split/merge need one")
    return name


def require_mode(text: str) -> DispatchMode:
    try:
        return DispatchMode(text)
    except ValueError:
        raise ConfigError(f"unknown dispatch mode {text!r}; expected polling or notify") from None
