"""Dispatcher behaviour when blocked at maxReadPosition, per mode, with a buffer whose max read
position the test sets by hand (the dispatcher is the unit under test here)."""

from __future__ import annotations

from engine.clock import LatencyModel, VirtualScheduler
from engine.cursor import Cursor
from engine.dispatcher import Delivery, DispatchMode, Dispatcher, PollingPolicy
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


def _setup(mode: DispatchMode, policy: PollingPolicy):  # type: ignore[no-untyped-def]
    sched = VirtualScheduler()
    ledger = MemoryLedgerFactory().open("persistent://t/n/x")
    tb = PinnedBuffer(ledger)
    got: list[Delivery] = []
    d = Dispatcher(
        scheduler=sched, latency=LatencyModel(), mode=mode, polling=policy, ledger=ledger,
        cursor=Cursor(ledger, "sub"), tb=tb, pending=PendingAckStoreDisabled("x"), deliver=got.extend,
    )
    return sched, ledger, tb, d, got


def _blocked_second(mode: DispatchMode, policy: PollingPolicy) -> tuple[dict[str, int], list[Delivery], int]:
    sched, ledger, tb, d, got = _setup(mode, policy)
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
