"""The shared dispatcher: one per (subscription, partition/segment), the same for both designs.

Like Pulsar's persistent dispatchers it asks the topic's transaction buffer only for
``max_read_position()`` and ``is_txn_aborted(...)``. It reads from the cursor's read position up
to ``min(last confirmed, max read position)``, auto-acks markers and aborted entries, skips
acked and pending-ack positions, and hands the rest to the consumer.

When blocked at the max read position (entries exist beyond it) it behaves per mode:

* ``polling`` — what Pulsar ships: re-issue the read after a delay (``PollingPolicy``); every
  such read returns nothing dispatchable and is counted in ``empty_reads``. The ``pulsar``
  preset follows the subscription type (D19): the cursor waits
  ``managedLedgerNewEntriesCheckDelayInMillis`` (10 ms, ``ManagedCursorImpl
  .asyncReadEntriesWithSkipOrWait`` L1180-1182) and re-reads; Exclusive and Failover
  (``PersistentDispatcherSingleActiveConsumer``) go again at once, so their period is 10 ms;
  Shared and Key_Shared (``PersistentDispatcherMultipleConsumers.reScheduleReadWithBackoff``
  L812-837) back off 1→10 ms on top, 11-20 ms. Other presets: ``shared-backoff`` (the 1→10 ms
  backoff alone, as this project modelled Shared before) and ``spin`` (releases before August
  2024: re-read at once, bounded here by one empty-read round trip).
* ``notify`` — wait for the buffer's advance notification; no empty reads while blocked. No
  Pulsar release has it (neither buffer wakes dispatchers; D20): a what-if, labelled so.

When simply caught up (nothing beyond the read position) both modes wait for the ledger's
new-entry notification, as a Pulsar cursor with a waiting read op does. With the ``pulsar``
preset the cursor registers for it only after ``managedLedgerNewEntriesCheckDelayInMillis``
(``ManagedCursorImpl.asyncReadEntriesWithSkipOrWait`` L1139-1141, ``checkForNewEntries``
L1161-1194): an entry added within 10 ms of the read that found nothing is read at that check,
one added later at once (``PollingPolicy.check_us``). In polling mode that
waiting read keeps the max read position it was created with (D20, ``OpReadEntry.create``), so
with an enabled buffer each wake-up first reads nothing (``stale_wakeups``, one empty read) and
the dispatcher re-reads: at once for single-active types, after the 1 ms first backoff step for
Shared and Key_Shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Callable, NamedTuple

from sortedcontainers import SortedSet

from engine.capacity import IO_THREAD
from engine.clock import LatencyModel, Scheduler
from engine.counters import Counters
from engine.cursor import Cursor
from engine.ledger import ManagedLedger
from engine.metering import Meter
from engine.ports import PendingAckStore, TransactionBuffer
from engine.records import Entry, MessageId, Position


class DispatchMode(str, Enum):
    POLLING = "polling"
    NOTIFY = "notify"  # not in any Pulsar release (D20)


class SubscriptionType(str, Enum):
    """Pulsar's subscription types; they pick the dispatcher and so its read-retry timing."""

    EXCLUSIVE = "Exclusive"
    FAILOVER = "Failover"
    SHARED = "Shared"
    KEY_SHARED = "Key_Shared"

    @property
    def single_active(self) -> bool:
        """Served by ``PersistentDispatcherSingleActiveConsumer`` (re-reads at once)."""
        return self is SubscriptionType.EXCLUSIVE or self is SubscriptionType.FAILOVER

    @classmethod
    def parse(cls, text: str | None) -> SubscriptionType:
        """``None`` is Failover: what this project modelled before traces named the type."""
        if text is None:
            return DEFAULT_SUB_TYPE
        try:
            return cls(text)
        except ValueError:
            from engine.errors import ConfigError

            names = ", ".join(t.value for t in cls)
            raise ConfigError(f"unknown subscription type {text!r}; expected one of {names}") from None


DEFAULT_SUB_TYPE = SubscriptionType.FAILOVER


# managedLedgerNewEntriesCheckDelayInMillis (ServiceConfiguration, 10 by default): a cursor's read
# that finds nothing checks again after it (ManagedCursorImpl.asyncReadEntriesWithSkipOrWait)
NEW_ENTRIES_CHECK_US = 10_000
DISPATCH_ENTRY = "dispatch.entry"  # engine.clock: an entry's pass on the host's cores


@dataclass(frozen=True)
class PollingPolicy:
    """Re-read delay while blocked: ``wait_us`` (the cursor's own wait) plus a backoff that
    starts at ``first_us``, doubles per consecutive empty read, capped at ``max_us``; reset by a
    read that dispatches something. ``by_sub_type``: the policy is resolved per subscription
    (:meth:`for_sub_type`), as Pulsar's dispatchers differ. ``check_us``: after a read that
    caught up, how long the cursor waits before it registers for the next entry; an entry added
    meanwhile is read then."""

    first_us: int = 10_000
    max_us: int = 10_000
    wait_us: int = 0
    by_sub_type: bool = False
    check_us: int = 0

    PRESETS = ("pulsar", "shared-backoff", "spin")

    @classmethod
    def preset(cls, name: str) -> PollingPolicy:
        from engine.errors import ConfigError

        if name == "pulsar":  # per subscription type, as released (D19)
            return cls(10_000, 10_000, by_sub_type=True, check_us=NEW_ENTRIES_CHECK_US)
        if name == "shared-backoff":  # Shared dispatcher's read-retry backoff alone, 1 ms -> 10 ms
            return cls(1_000, 10_000)
        if name == "spin":  # releases before August 2024: re-read at once
            return cls(0, 0)
        raise ConfigError(f"unknown polling preset {name!r}; expected one of {', '.join(cls.PRESETS)}")

    def for_sub_type(self, sub_type: SubscriptionType) -> PollingPolicy:
        if not self.by_sub_type:
            return self
        if sub_type.single_active:  # the cursor's 10 ms, then at once (D19)
            return PollingPolicy(10_000, 10_000, check_us=self.check_us)
        # the cursor's 10 ms, then reScheduleReadWithBackoff 1 -> 10 ms (D19)
        return PollingPolicy(1_000, 10_000, wait_us=10_000, check_us=self.check_us)

    def delay_us(self, consecutive_empty: int) -> int:
        if self.first_us <= 0:
            return self.wait_us
        return self.wait_us + min(self.first_us << min(consecutive_empty, 20), self.max_us)


class Delivery(NamedTuple):
    """One message handed to a consumer (a named tuple: built once per delivery, see
    :mod:`engine.records`)."""

    message_id: MessageId
    msg: str | None
    delivered_ts_us: int
    publish_ts_us: int
    redelivery: bool


DeliverFn = Callable[[list[Delivery]], None]

# Build records without the named tuples' Python-level ``__new__`` (once per dispatched entry).
_delivery: Callable[[tuple[MessageId, str | None, int, int, bool]], Delivery] = partial(tuple.__new__, Delivery)  # type: ignore[assignment]
_message_id: Callable[[tuple[str, Position]], MessageId] = partial(tuple.__new__, MessageId)  # type: ignore[assignment]


class Dispatcher:
    def __init__(
        self,
        *,
        scheduler: Scheduler,
        latency: LatencyModel,
        mode: DispatchMode,
        polling: PollingPolicy,
        ledger: ManagedLedger,
        cursor: Cursor,
        tb: TransactionBuffer,
        pending: PendingAckStore,
        deliver: DeliverFn,
        read_batch: int = 100,
        gate: Callable[[], bool] | None = None,
        sub_type: SubscriptionType = DEFAULT_SUB_TYPE,
        meter: Meter | None = None,
    ) -> None:
        self._sched = scheduler
        # every read, empty read and delivery is billed (and counted) by the broker's meter; the
        # reads go through the ledger's bookie, the empty reads and deliveries through dispatch
        meter = meter or Meter(latency, scheduler)
        self._bill = meter.took
        self._task = meter.took_task
        self._behind = meter.behind
        self._hold = meter.hold
        self._next_io_thread = meter.next_io_thread
        self._mode = mode
        self.sub_type = sub_type
        self._polling = polling.for_sub_type(sub_type)
        # D20: a wake-up of a caught-up cursor first reads up to a stale bound (polling mode,
        # enabled buffer); the retry goes at once (single active) or after 1 ms (Shared).
        self._stale_reads = mode is DispatchMode.POLLING and tb.bounds_waiting_reads
        self._stale_retry_us = 0 if sub_type.single_active else 1_000
        # a Shared/Key_Shared retry runs on the IO group, a single-active one on its topic worker
        self._retries_on_io = not sub_type.single_active
        self._waiting = False  # a caught-up read is waiting with a (now stale) bound
        self._ledger = ledger
        self._cursor = cursor
        self._tb = tb
        self._pending = pending
        self._deliver = deliver
        self._batch = read_batch
        self._gate = gate
        self.stats = Counters()
        self._busy = False  # a read or a poll is scheduled
        self._closed = False
        self._consecutive_empty = 0
        self._blocked_since: int | None = None
        self._replay: SortedSet = SortedSet()  # positions to redeliver before new reads
        self._outstanding: set[Position] = set()  # dispatched, not yet acked
        self._drained_listeners: list[Callable[[], None]] = []
        self._drained_fired = False
        cursor.redeliver_hook = self.redeliver
        self._check_us = self._polling.check_us
        self._caught_up_at: int | None = None  # the last read found nothing, at this time (check_us)
        ledger.add_listener(self._new_entry)  # a new entry may be dispatchable
        if mode is DispatchMode.NOTIFY:
            tb.add_max_read_listener(self.kick)

    # -- wake-ups ------------------------------------------------------------------------------

    def kick(self, _position: Position | None = None) -> None:
        """Something may be dispatchable now: schedule a read unless one is already scheduled.
        Also the ledger's new-entry listener (``_position`` is the new entry's)."""
        if self._busy or self._closed:
            return
        self._busy = True
        self._sched.call_later(0, self._try_read)

    def _new_entry(self, _position: Position) -> None:
        """The ledger's new-entry listener: a read at once, or, within ``check_us`` of the read
        that caught up, at the cursor's check (``checkForNewEntries``)."""
        caught_up_at = self._caught_up_at
        if caught_up_at is None or self._busy or self._closed:
            self.kick()
            return
        wait = caught_up_at + self._check_us - self._sched.now_us()
        if wait <= 0:
            self.kick()
            return
        self._busy = True
        self._sched.call_later(wait, self._try_read)

    def redeliver(self, positions: list[Position]) -> None:
        """Dispatch these positions again (unless acked or pending by then). Positions at or
        beyond the read position were never dispatched: the normal read reaches them in order
        (replaying them would read past maxReadPosition and deliver them twice)."""
        read_position = self._cursor.read_position
        positions = [p for p in positions if p < read_position]
        self._replay.update(positions)
        self._outstanding.difference_update(positions)
        self.kick()

    def redeliver_unacked(self) -> None:
        """Redeliver everything dispatched and not acked (consumer reconnect / explicit request)."""
        self.redeliver(sorted(self._outstanding))

    def on_acked(self, positions: list[Position]) -> None:
        self._outstanding.difference_update(positions)

    def on_drained(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` once this sealed ledger has been read to its end."""
        self._drained_listeners.append(listener)
        self._check_drained()

    @property
    def drained(self) -> bool:
        return self._drained_fired

    # -- the read loop -------------------------------------------------------------------------

    def _try_read(self, resumed: bool = False) -> None:
        """One read, or one poll while blocked at maxReadPosition (``resumed``: the same poll,
        once the buffer's lock it waited for is free)."""
        if self._closed:
            return
        if self._gate is not None and not self._gate():
            self._busy = False  # the gate's owner kicks us when it opens
            return
        self._caught_up_at = None  # set again below if this read finds nothing
        if self._replay:
            self._waiting = False  # a redelivery cancels the waiting read (cancelPendingReadRequest)
            batch = list(self._replay.islice(0, self._batch))
            del self._replay[: len(batch)]
            self.stats["reads"] += 1
            self._sched.call_later(self._bill("ledger.read", "bookie", self._ledger.name), self._complete_replay, batch)
            return
        start = self._cursor.read_position
        lac = self._ledger.last_confirmed()
        if start > lac:  # caught up: wait for a new entry
            self._busy = False
            self._caught_up_at = self._sched.now_us() if self._check_us else None
            self._waiting = self._stale_reads
            self._unblocked()
            self._check_drained()
            return
        if self._waiting:  # the waiting read, re-issued with its old bound: nothing (D20)
            self._waiting = False
            self.stats["reads"] += 1
            self.stats["empty_reads"] += 1
            self.stats["stale_wakeups"] += 1
            empty_us = self._bill("cursor.empty_read", "dispatch")
            self._sched.call_later(max(self._stale_retry_us, empty_us), self._try_read)
            return
        if not resumed and self._waited_for_lock():
            return
        max_read = self._tb.max_read_position()
        if start > max_read:  # blocked at maxReadPosition
            if self._blocked_since is None:
                self._blocked_since = self._sched.now_us()
            if self._mode is DispatchMode.NOTIFY:
                self._busy = False
                self.stats["blocked_waits"] += 1
                return
            self.stats["reads"] += 1
            self.stats["empty_reads"] += 1
            delay = max(self._polling.delay_us(self._consecutive_empty), self._bill("cursor.empty_read", "dispatch"))
            self._consecutive_empty += 1
            self._sched.call_later(delay, self._try_read)
            return
        self._unblocked()
        self.stats["reads"] += 1
        self._sched.call_later(self._bill("ledger.read", "bookie", self._ledger.name),
                               self._complete_read, start, min(lac, max_read))

    def _waited_for_lock(self) -> bool:
        """``getMaxReadPosition`` takes the buffer's lock (MetadataTransactionBuffer L647): when
        the buffer's own work holds it (TransactionBuffer.lock_free_at), the read waits, and goes
        on at once after (True: it was put off). A Shared or Key_Shared poll after an empty one
        is a retry on the IO event loop group (PersistentDispatcherMultipleConsumers
        .reScheduleReadInMs L514, through BrokerService.executor()): it lands on the next IO
        thread in turn, and when that is the one serving the client's connection, the
        connection's commands wait with it. A single-active dispatcher re-reads on its topic
        worker instead (PersistentDispatcherSingleActiveConsumer L89, L239: the topic ordered
        executor), which the model does not carry: its read only waits."""
        now = self._sched.now_us()
        on_client_io = self._consecutive_empty > 0 and self._retries_on_io and self._next_io_thread()
        free = self._tb.lock_free_at(now)
        if free <= now:
            return False
        self.stats["lock_waits"] += 1
        if on_client_io:
            self.stats["lock_waits_on_client_io"] += 1
            self._hold("metadata", IO_THREAD, free)
        self._sched.call_later(free - now, self._try_read, True)
        return True

    def _complete_read(self, start: Position, upto: Position) -> None:
        if self._closed:
            return
        if self._cursor.read_position != start:  # rewound or advanced meanwhile: re-evaluate
            self._busy = False
            self.kick()
            return
        entries = self._ledger.read(start, upto, self._batch)
        if entries:
            self._cursor.read_position = self._ledger.next_position(entries[-1].position)
        else:
            self._cursor.read_position = self._ledger.next_position(upto)
        self._dispatch(entries, redelivery=False)
        self._busy = False
        self.kick()

    def _complete_replay(self, positions: list[Position]) -> None:
        if self._closed:
            return
        entries: list[Entry] = []
        for pos in positions:
            entries.extend(self._ledger.read(pos, pos, 1))
        self._dispatch(entries, redelivery=True)
        self._busy = False
        self.kick()

    def _dispatch(self, entries: list[Entry], *, redelivery: bool) -> None:
        stats = self.stats
        stats["entries_read"] += len(entries)
        out: list[Delivery] = []
        auto_ack: list[Position] = []
        cursor = self._cursor
        # the write to the consumer's connection is a task on its IO thread, after what that
        # thread has queued (PulsarCommandSenderImpl.sendMessagesToConsumer: capacity.IO_THREAD)
        waited = self._behind("metadata", IO_THREAD, in_tab=False)
        if entries:  # passed one after another on the topic's thread, a task on the cores, before the write
            waited += self._task(DISPATCH_ENTRY, len(entries))
        deliver_ts = self._sched.now_us() + waited + self._bill("consumer.deliver", "dispatch")
        is_aborted = self._tb.is_txn_aborted
        is_pending = self._pending.is_pending
        is_acked = cursor.is_acked
        outstanding = self._outstanding
        name = self._ledger.name
        markers = aborted = 0
        for pos, data in entries:
            if data.marker is not None:
                auto_ack.append(pos)
                markers += 1
                continue
            if data.txn is not None and is_aborted(data.txn, pos):
                auto_ack.append(pos)
                aborted += 1
                continue
            if is_acked(pos) or is_pending(pos):
                continue
            out.append(_delivery((_message_id((name, pos)), data.msg, deliver_ts, data.publish_ts_us, redelivery)))
            outstanding.add(pos)
        if markers:
            stats["markers_skipped"] += markers
        if aborted:
            stats["aborted_skipped"] += aborted
        if auto_ack:
            cursor.ack_individual(auto_ack)
        if out:
            stats["entries_dispatched"] += len(out)
            if redelivery:
                stats["redelivered"] += len(out)
            self._consecutive_empty = 0
            self._deliver(out)  # stamped with now + consumer.deliver latency above
        elif entries or not redelivery:
            stats["empty_reads"] += 1

    def _unblocked(self) -> None:
        if self._blocked_since is not None:
            self.stats["blocked_us"] += self._sched.now_us() - self._blocked_since
            self._blocked_since = None

    def _check_drained(self) -> None:
        if self._drained_fired or not self._ledger.sealed or self._replay:
            return
        if self._gate is not None and not self._gate():  # an empty segment waits for its parents too
            return
        if self._cursor.read_position > self._ledger.last_confirmed():
            self._drained_fired = True
            for listener in self._drained_listeners:
                listener()

    def close(self) -> None:
        self._unblocked()
        self._closed = True
