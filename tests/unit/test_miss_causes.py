"""Why the model misses what it misses most (bench/report/miss_causes.py): said only where the
run's own split of the operation shows the kept sets' pattern."""

from __future__ import annotations

from bench.report.behind_end_txn import Modes
from bench.report.miss_causes import cause


def _split(model_behind: int, broker_behind: int, behind: int = 3) -> tuple[Modes, Modes]:
    return Modes(10, behind, model_behind, 2_000), Modes(10, behind, broker_behind, 2_000)


def test_a_v5_publish_below_the_brokers_is_the_queue_behind_an_end_txn_where_the_model_answers_it_sooner() -> None:
    assert cause("v5", "publish_nontxn_us", True, *_split(4_000, 10_000)).startswith(
        "the publishes the model answers too soon are the ones sent while their client's END_TXN was in flight")
    assert cause("v5", "publish_txn_us", True, *_split(4_000, 10_000)).startswith("the txn publishes")
    assert cause("v5", "new_txn_us", True, *_split(4_000, 10_000)).startswith("the new-txns")
    assert cause("v5", "publish_nontxn_us", True, *_split(9_000, 10_000)) == ""  # within a p50's goal: not that
    assert cause("v5", "publish_nontxn_us", False, *_split(4_000, 10_000)) == ""  # missed above: not that
    assert cause("v5", "publish_nontxn_us", True, *_split(4_000, 10_000, behind=0)) == ""  # none queued
    assert cause("v4", "publish_nontxn_us", True, *_split(4_000, 10_000)) == ""  # v4 has no such queue
    assert cause("v5", "publish_nontxn_us", True, None, None) == ""


def test_a_v4_end_txn_above_the_brokers_is_the_crowd_where_the_model_answers_it_later() -> None:
    assert "issued together with others" in cause("v4", "end_txn_us", False, *_split(14_700, 5_400))
    assert cause("v4", "end_txn_us", False, *_split(7_500, 7_500)) == ""  # the crowd as the broker's: another cause
    assert cause("v4", "end_txn_us", True, *_split(14_700, 5_400)) == ""
