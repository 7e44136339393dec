"""Per-key order across generations of scalable-topic segments, in every combination and mode."""

from __future__ import annotations

from tests.harness import System

S = "topic://public/default/events"


def test_a_grandchild_waits_for_its_grandparent_through_empty_segments(system: System) -> None:
    """Split, then merge the two children before they get a message: the empty sealed children
    count as drained only once their own parent is (they used to count at once, and the
    grandchild's message overtook the grandparent's backlog)."""
    backlog = [f"old{i}" for i in range(300)]  # several read batches on the grandparent
    for m in backlog:
        system.publish(S, m, key="a")
    left, right = system.broker.split(S)
    merged = system.broker.merge(S, [left, right])
    system.publish(S, "new", key="a")
    assert system.ids["new"].ledger == merged
    system.subscribe(S, "late")  # reads from the earliest: the grandparent first
    system.run()
    assert system.msgs(S, "late") == backlog + ["new"]
