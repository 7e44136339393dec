"""Non-transactional behaviour every combination must show, in both dispatch modes."""

from __future__ import annotations

import pytest

from engine.errors import LedgerSealed, TopicError
from engine.ports import AckKind
from tests.harness import System

T = "persistent://public/default/orders"
S = "topic://public/default/events"


def test_messages_arrive_once_in_publish_order(system: System) -> None:
    system.subscribe(T, "sub")
    system.run(100_000)  # the topic loads (a buffer may need a store round trip to recover)
    loading = system.stats().get("dispatch.empty_reads", 0)
    for i in range(250):  # more than one read batch and several ledgers (64 entries each)
        system.publish(T, f"m{i}")
    system.run()
    assert system.msgs(T, "sub") == [f"m{i}" for i in range(250)]
    stats = system.stats()
    assert stats["dispatch.entries_dispatched"] == 250
    # none once loaded (nothing is pinned) but the waiting read's stale bound (D20): with an
    # enabled buffer in polling mode, one per wake-up, and the 250 arrive in one
    stale = stats.get("dispatch.stale_wakeups", 0)
    assert stats.get("dispatch.empty_reads", 0) - loading == stale
    assert stale == (1 if system.combo.transactional and system.mode.value == "polling" else 0)


def test_new_subscription_starts_at_earliest_and_subscriptions_are_independent(system: System) -> None:
    system.subscribe(T, "a")
    system.publish(T, "m0")
    system.run()
    system.subscribe(T, "b")
    system.publish(T, "m1")
    system.run()
    assert system.msgs(T, "a") == ["m0", "m1"]
    assert system.msgs(T, "b") == ["m0", "m1"]


def test_redelivery_resends_only_unacked(system: System) -> None:
    system.subscribe(T, "sub")
    for i in range(6):
        system.publish(T, f"m{i}")
    system.run()
    system.ack("sub", "m0", "m2", "m5")
    system.broker.redeliver_unacked(T, "sub")
    system.run()
    assert system.msgs(T, "sub")[6:] == ["m1", "m3", "m4"]
    assert all(d.redelivery for d in system.received[(T, "sub")][6:])


def test_cumulative_ack_acks_everything_up_to_it(system: System) -> None:
    system.subscribe(T, "sub")
    for i in range(6):
        system.publish(T, f"m{i}")
    system.run()
    system.ack("sub", "m3", kind=AckKind.CUMULATIVE)
    system.broker.redeliver_unacked(T, "sub")
    system.run()
    assert system.msgs(T, "sub")[6:] == ["m4", "m5"]
    assert system.broker.cursor(system.ids["m3"].ledger, "sub").mark_delete == system.ids["m3"].position


def test_acked_before_delivery_is_never_delivered(system: System) -> None:
    system.subscribe(T, "sub")
    system.publish(T, "m0")
    system.publish(T, "m1")
    system.ack("sub", "m0")  # the client knows the id from the publish receipt
    system.run()
    assert system.msgs(T, "sub") == ["m1"]


def test_crash_redelivers_unacked_and_keeps_acks(system: System) -> None:
    system.subscribe(T, "sub")
    for i in range(5):
        system.publish(T, f"m{i}")
    system.run()
    system.ack("sub", "m0", "m1", "m3")
    system.crash()
    system.publish(T, "m5")
    system.run()
    assert system.msgs(T, "sub")[5:] == ["m2", "m4", "m5"]


def test_split_keeps_per_key_order_and_routes_new_messages_to_children(system: System) -> None:
    system.subscribe(S, "sub")
    keys = [f"k{i}" for i in range(8)]
    for round_ in range(3):
        for k in keys:
            system.publish(S, f"{k}-{round_}", key=k)
    children = system.broker.split(S)
    assert len(children) == 2
    for round_ in range(3, 6):
        for k in keys:
            system.publish(S, f"{k}-{round_}", key=k)
    system.run()
    got = system.msgs(S, "sub")
    assert sorted(got) == sorted(f"{k}-{r}" for k in keys for r in range(6))  # type: ignore[type-var]
    for k in keys:
        assert [m for m in got if m and m.startswith(f"{k}-")] == [f"{k}-{r}" for r in range(6)]
    for child in children:
        assert all(system.ids[m].ledger in children for m in got[24:] if m)  # type: ignore[index]
    assert {system.ids[f"{k}-5"].ledger for k in keys} <= set(children)


def test_children_wait_until_parent_is_drained(system: System) -> None:
    system.publish(S, "old", key="a")
    children = system.broker.split(S)
    system.publish(S, "new", key="a")
    system.subscribe(S, "late")  # subscribes after the split: reads the sealed parent first
    system.run()
    assert system.msgs(S, "late") == ["old", "new"]
    assert system.ids["new"].ledger in children


def test_merge_seals_both_parents_and_creates_one_child(system: System) -> None:
    system.subscribe(S, "sub")
    left, right = system.broker.split(S)
    system.publish(S, "l1", key="x")
    merged = system.broker.merge(S, [left, right])
    system.publish(S, "after", key="x")
    system.run()
    assert system.broker.active_segments(S) == [merged]
    assert system.msgs(S, "sub") == ["l1", "after"]
    for ledger in (left, right):
        assert system.broker.managed_ledger(ledger).sealed


def test_sealed_segment_rejects_appends_and_further_splits(system: System) -> None:
    system.publish(S, "m0", key="a")
    first = system.ids["m0"].ledger
    system.broker.split(S)
    with pytest.raises(LedgerSealed, match="sealed"):
        system.broker.managed_ledger(first).append(system.broker.managed_ledger(first).read(
            system.ids["m0"].position, system.ids["m0"].position, 1)[0].data)
    with pytest.raises(TopicError, match="sealed"):
        system.broker.split(S, target=first)


def test_layout_and_seals_survive_a_crash(system: System) -> None:
    system.subscribe(S, "sub")
    system.publish(S, "m0", key="a")
    children = system.broker.split(S)
    system.crash()
    assert system.broker.active_segments(S) == children
    system.publish(S, "m1", key="a")
    system.run()
    assert system.unique_msgs(S, "sub") == ["m0", "m1"]
    assert system.ids["m1"].ledger in children


def test_bad_topic_names_and_unknown_ledgers_are_refused(system: System) -> None:
    with pytest.raises(TopicError, match="bad topic name"):
        system.publish("orders", "m0")
    with pytest.raises(TopicError, match="not a scalable topic"):
        system.broker.split(T)
    system.publish(T, "m0")
    from engine.records import MessageId

    with pytest.raises(TopicError, match="no ledger"):
        system.broker.ack("sub", [MessageId("persistent://x/y/nope", system.ids["m0"].position)])


def test_caught_up_subscription_issues_no_reads_in_either_mode(system: System) -> None:
    system.subscribe(T, "sub")
    system.publish(T, "m0")
    system.run()
    reads = system.stats()["dispatch.reads"]
    system.run(10_000_000)  # ten idle seconds
    assert system.stats()["dispatch.reads"] == reads
