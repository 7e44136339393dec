"""Dispatcher behaviour when blocked at maxReadPosition, per mode, with a buffer whose max read
position the test sets by hand (the dispatcher is the unit under test here)."""

from __future__ import annotations

from engine.clock import LatencyModel, VirtualScheduler
from engine.cursor import Cursor
from engine.dispatcher import Delivery, DispatchMode, Dispatcher, PollingPolicy, SubscriptionType
from engine.memledger import MemoryLedgerFactory
from engine.ports import MaxReadListener
from engine.records import EntryData, Position
from engine.txn_disabled import PendingAckStoreDisabled, TransactionBufferDisabled


class PinnedBuffer(TransactionBufferDisabled):
    def __init__(self, ledger) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ledger)
        self.pin: Position | None = None
        self.listeners: list[MaxReadListener] = []

    def max_read_position(self) -> Position:
        return self.pin if self.pin is not None else super().max_read_position()

    def add_max_read_listener(self, listener: MaxReadListener) -> None:
        self.listeners.append(listener)

    def release(self) -> None:
        self.pin = None
        for listener in self.listeners:
            listener()


class EnabledBuffer(PinnedBuffer):
    """Any enabled buffer: a waiting read keeps a bound (unlike TransactionBufferDisable)."""

    bounds_waiting_reads = True


def _setup(mode: DispatchMode, policy: PollingPolicy, sub_type: SubscriptionType = SubscriptionType.FAILOVER,
           enabled: bool = False):  # type: ignore[no-untyped-def]
    sched = VirtualScheduler()
    ledger = MemoryLedgerFactory().open("persistent://t/n/x")
    tb = (EnabledBuffer if enabled else PinnedBuffer)(ledger)
    got: list[Delivery] = []
    d = Dispatcher(
        scheduler=sched, latency=LatencyModel(), mode=mode, polling=policy, ledger=ledger,
        cursor=Cursor(ledger, "sub"), tb=tb, pending=PendingAckStoreDisabled("x"), deliver=got.extend,
        sub_type=sub_type,
    )
    return sched, ledger, tb, d, got


def _blocked_second(mode: DispatchMode, policy: PollingPolicy,
                    sub_type: SubscriptionType = SubscriptionType.FAILOVER) -> tuple[dict[str, int], list[Delivery], int]:
    sched, ledger, tb, d, got = _setup(mode, policy, sub_type)
    p0 = ledger.append(EntryData(1, 0, msg="m0"))
    tb.pin = p0  # an open txn pins everything after m0
    ledger.append(EntryData(1, 0, msg="m1"))
    d.kick()
    sched.run_until(1_000_000)
    assert [x.msg for x in got] == ["m0"]
    released_at = sched.now_us()
    tb.release()
    sched.run_until(1_100_000)
    assert [x.msg for x in got] == ["m0", "m1"]
    return dict(d.stats), got, got[-1].delivered_ts_us - released_at


def test_polling_counts_one_empty_read_per_check_delay() -> None:
    stats, _, visible_after = _blocked_second(DispatchMode.POLLING, PollingPolicy.preset("pulsar"))
    assert 99 <= stats["empty_reads"] <= 101  # one per 10 ms over ~1 s blocked
    assert visible_after > LatencyModel().of("ledger.read")  # waits for the next poll
    assert stats["blocked_us"] >= 999_000


def test_spin_polls_at_read_round_trip_rate() -> None:
    stats, _, _ = _blocked_second(DispatchMode.POLLING, PollingPolicy.preset("spin"))
    empty_us = LatencyModel().of("cursor.empty_read")
    assert stats["empty_reads"] >= 1_000_000 // empty_us - 5


def test_backoff_grows_to_its_cap() -> None:
    policy = PollingPolicy.preset("shared-backoff")
    assert [policy.delay_us(n) for n in range(6)] == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]
    stats, _, _ = _blocked_second(DispatchMode.POLLING, policy)
    assert 99 <= stats["empty_reads"] <= 106


def test_notify_issues_no_empty_reads_and_sees_release_at_once() -> None:
    stats, _, visible_after = _blocked_second(DispatchMode.NOTIFY, PollingPolicy())
    assert stats.get("empty_reads", 0) == 0
    latency = LatencyModel()
    assert visible_after == latency.of("ledger.read") + latency.of("consumer.deliver")


def test_the_pulsar_preset_polls_per_subscription_type() -> None:
    # D19: ManagedCursorImpl waits 10 ms (L1180-1182); single-active dispatchers re-read at once,
    # Shared/Key_Shared back off 1 -> 10 ms on top (reScheduleReadWithBackoff L812-837).
    pulsar = PollingPolicy.preset("pulsar")
    for t in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
        assert [pulsar.for_sub_type(t).delay_us(n) for n in range(3)] == [10_000] * 3
    for t in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
        assert [pulsar.for_sub_type(t).delay_us(n) for n in range(6)] == [11_000, 12_000, 14_000, 18_000, 20_000, 20_000]
    failover, _, _ = _blocked_second(DispatchMode.POLLING, pulsar, SubscriptionType.FAILOVER)
    shared, _, _ = _blocked_second(DispatchMode.POLLING, pulsar, SubscriptionType.KEY_SHARED)
    assert 99 <= failover["empty_reads"] <= 101
    # 11 + 12 + 14 + 18 ms, then one every 20 ms over the ~1 s blocked: about 51
    assert 49 <= shared["empty_reads"] <= 53


def _wake_up(sub_type: SubscriptionType, enabled: bool, mode: DispatchMode = DispatchMode.POLLING) -> tuple[dict[str, int], int]:
    """A caught-up dispatcher, then one new entry: its stats and the entry's delivery delay."""
    sched, ledger, _tb, d, got = _setup(mode, PollingPolicy.preset("pulsar"), sub_type, enabled)
    ledger.append(EntryData(1, 0, msg="m0"))
    d.kick()
    sched.run_until(100_000)
    assert [x.msg for x in got] == ["m0"]
    appended_at = sched.now_us()
    ledger.append(EntryData(1, appended_at, msg="m1"))
    sched.run_until(200_000)
    assert [x.msg for x in got] == ["m0", "m1"]
    return dict(d.stats), got[-1].delivered_ts_us - appended_at


def test_a_waiting_read_keeps_its_stale_bound_when_a_buffer_is_enabled() -> None:
    # D20: OpReadEntry keeps the maxPosition of its creation; the re-issued read returns nothing
    # and the dispatcher reads again: at once (single active) or after 1 ms (Shared).
    lat = LatencyModel()
    read, deliver, empty = lat.of("ledger.read"), lat.of("consumer.deliver"), lat.of("cursor.empty_read")
    stats, delay = _wake_up(SubscriptionType.FAILOVER, enabled=False)  # TransactionBufferDisable: LATEST
    assert stats.get("stale_wakeups", 0) == 0 and delay == read + deliver
    stats, delay = _wake_up(SubscriptionType.FAILOVER, enabled=True)
    assert stats["stale_wakeups"] == 1 and delay == empty + read + deliver
    stats, delay = _wake_up(SubscriptionType.SHARED, enabled=True)
    assert stats["stale_wakeups"] == 1 and delay == 1_000 + read + deliver
    stats, delay = _wake_up(SubscriptionType.SHARED, enabled=True, mode=DispatchMode.NOTIFY)  # the what-if
    assert stats.get("stale_wakeups", 0) == 0 and delay == read + deliver


def test_an_entry_added_soon_after_a_read_found_nothing_waits_for_the_cursors_check() -> None:
    """ManagedCursorImpl.asyncReadEntriesWithSkipOrWait L1139-1141: a read that finds nothing
    checks again after managedLedgerNewEntriesCheckDelayInMillis (10 ms) and only then registers
    for the next entry (checkForNewEntries L1161-1194). The `pulsar` preset has it; the others
    read an entry at once."""
    lat = LatencyModel()
    read, deliver = lat.of("ledger.read"), lat.of("consumer.deliver")

    def delay(policy: PollingPolicy, after_us: int) -> int:
        sched, ledger, _tb, d, got = _setup(DispatchMode.POLLING, policy)
        ledger.append(EntryData(1, 0, msg="m0"))
        d.kick()  # reads m0 from 0 to `read`, then reads again and finds nothing: caught up at `read`
        sched.run_until(read + after_us)
        ledger.append(EntryData(1, sched.now_us(), msg="m1"))
        sched.run_until(read + after_us + 100_000)
        assert [x.msg for x in got] == ["m0", "m1"]
        return got[-1].delivered_ts_us - (read + after_us)

    pulsar = PollingPolicy.preset("pulsar")
    assert delay(pulsar, 3_000) == (10_000 - 3_000) + read + deliver  # read at the check
    assert delay(pulsar, 9_999) == 1 + read + deliver
    assert delay(pulsar, 10_000) == read + deliver  # registered by then: notified at once
    assert delay(pulsar, 25_000) == read + deliver
    for other in ("spin", "shared-backoff"):
        assert delay(PollingPolicy.preset(other), 3_000) == read + deliver


def test_a_reads_entries_are_one_task_on_a_core() -> None:
    """``dispatch.entry``: every entry a subscription's dispatcher reads is passed on the host's
    cores (AbstractBaseDispatcher.filterEntriesForConsumer: delivered, or acked past as a marker),
    one after another on the topic's thread: a read's entries are one task on one core. One
    entry's pass is inside the measured delivery; the others' come after it, and the task waits
    for a core while another holds it."""
    from engine.clock import ResourceSpec
    from engine.metering import Meter

    def delivered(per_entry_us: int, entries: list[int], cores: int = 1) -> tuple[list[list[int]], int]:
        """Each of ``len(entries)`` topics' dispatchers reading its ``entries[i]`` at once."""
        sched = VirtualScheduler()
        lat = LatencyModel().with_resources({"cpu": ResourceSpec.cores({"dispatch.entry": per_entry_us}, cores)})
        meter = Meter(lat, sched)
        got: list[list[Delivery]] = []
        for t, n in enumerate(entries):
            ledger = MemoryLedgerFactory().open(f"persistent://t/n/x{t}")
            out: list[Delivery] = []
            got.append(out)
            d = Dispatcher(scheduler=sched, latency=lat, mode=DispatchMode.NOTIFY, polling=PollingPolicy(),
                           ledger=ledger, cursor=Cursor(ledger, "sub"), tb=PinnedBuffer(ledger),
                           pending=PendingAckStoreDisabled("x"), deliver=out.extend, meter=meter)
            for i in range(n):
                ledger.append(EntryData(1, 0, msg=f"m{i}"))
            d.kick()
        sched.run_until(1_000_000)
        assert [len(out) for out in got] == entries
        return [sorted({x.delivered_ts_us for x in out}) for out in got], meter.billed["dispatch.entry"]

    lat = LatencyModel()
    base = lat.of("ledger.read") + lat.of("consumer.deliver")
    assert delivered(0, [3]) == ([[base]], 3)  # counted, but free without a price on the cores
    assert delivered(50, [1]) == ([[base]], 1)  # a lone entry: inside the delivery's latency
    assert delivered(50, [3]) == ([[base + 2 * 50]], 3)  # then the 2nd's and the 3rd's work
    assert delivered(50, [3], cores=2) == ([[base + 2 * 50]], 3)  # one thread: a second core does not help
    # two reads at once on one core: the later task waits for the whole earlier one
    assert delivered(50, [3, 2]) == ([[base + 2 * 50], [base + 3 * 50 + 50]], 5)
    assert delivered(50, [3, 2], cores=2) == ([[base + 2 * 50], [base + 50]], 5)


class LockedBuffer(PinnedBuffer):
    """A buffer whose lock its own work holds over ``window`` (lock_free_at), asked when."""

    def __init__(self, ledger) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ledger)
        self.window = (0, 0)
        self.asked: list[int] = []

    def lock_free_at(self, at_us: int) -> int:
        self.asked.append(at_us)
        lo, hi = self.window
        return hi if lo <= at_us < hi else at_us


def _locked(window: tuple[int, int], probe_at: int, sub_type: SubscriptionType = SubscriptionType.SHARED,
            ) -> tuple[dict[str, int], list[int], int]:
    """m0 delivered, m1 pinned: a ``sub_type`` dispatcher polls (the pulsar preset) with the
    buffer's lock held over ``window``; (its stats, when it asked, how long a client command
    arriving at ``probe_at`` waits for the client connection's IO thread)."""
    from engine.capacity import IO_THREAD
    from engine.clock import ResourceSpec
    from engine.metering import Meter

    sched = VirtualScheduler()
    lat = LatencyModel().with_resources({"metadata": ResourceSpec(433, 1)})
    meter = Meter(lat, sched)
    ledger = MemoryLedgerFactory().open("persistent://t/n/x")
    tb = LockedBuffer(ledger)
    tb.window = window
    got: list[Delivery] = []
    d = Dispatcher(scheduler=sched, latency=lat, mode=DispatchMode.POLLING, polling=PollingPolicy.preset("pulsar"),
                   ledger=ledger, cursor=Cursor(ledger, "sub"), tb=tb, pending=PendingAckStoreDisabled("x"),
                   deliver=got.extend, meter=meter, sub_type=sub_type)
    tb.pin = ledger.append(EntryData(1, 0, msg="m0"))
    ledger.append(EntryData(1, 0, msg="m1"))
    d.kick()
    waited = []
    sched.call_later(probe_at, lambda: waited.append(meter.behind("metadata", IO_THREAD, in_tab=False)))
    sched.run_until(200_000)
    assert [x.msg for x in got] == ["m0"]
    return dict(d.stats), tb.asked, waited[0]


def test_a_retry_that_meets_the_buffers_lock_holds_the_io_thread_it_lands_on() -> None:
    """``getMaxReadPosition`` waits for the buffer's lock (MetadataTransactionBuffer L647). A
    Shared poll after an empty one is a retry scheduled on the IO event loop group
    (PersistentDispatcherMultipleConsumers.reScheduleReadInMs): it lands on the IO threads in
    turn, the first the one serving the client's connection, whose commands then wait with it."""
    stats, asked, waited = _locked((0, 0), 150_000)
    assert "lock_waits" not in stats and waited == 0
    # asked: the first read (m0), the first blocked one (on the topic's thread), then retries
    first_blocked, retry1, retry2 = asked[1], asked[2], asked[3]
    stats, _, waited = _locked((retry1, retry1 + 40_000), retry1 + 10_000)
    assert (stats["lock_waits"], stats["lock_waits_on_client_io"]) == (1, 1)
    assert waited == 30_000  # the client's IO thread is held to the lock's end
    stats, _, waited = _locked((retry2, retry2 + 40_000), retry2 + 10_000)
    assert stats["lock_waits"] == 1 and "lock_waits_on_client_io" not in stats
    assert waited == 0  # the second retry landed on another IO thread
    stats, _, waited = _locked((first_blocked, first_blocked + 40_000), first_blocked + 10_000)
    assert stats["lock_waits"] == 1 and "lock_waits_on_client_io" not in stats and waited == 0


def test_a_single_active_retry_waits_for_the_lock_on_its_topic_worker_not_an_io_thread() -> None:
    """Exclusive and Failover dispatchers re-read on their topic's ordered executor
    (PersistentDispatcherSingleActiveConsumer L89, L239), not the IO group: the retry waits for
    the lock, and the client's IO thread stays free."""
    for sub_type in (SubscriptionType.FAILOVER, SubscriptionType.EXCLUSIVE):
        _, asked, _ = _locked((0, 0), 150_000, sub_type)
        retry1 = asked[2]
        assert asked[3] - retry1 == 10_000  # single active: the cursor's 10 ms, no backoff (D19)
        stats, again, waited = _locked((retry1, retry1 + 40_000), retry1 + 10_000, sub_type)
        assert stats["lock_waits"] == 1 and "lock_waits_on_client_io" not in stats and waited == 0
        # it read again when the lock came free, found m1 still pinned, and polled 10 ms later
        assert again[3] == retry1 + 40_000 + 10_000
