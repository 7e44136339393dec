"""The traces and the arithmetic behind where a txn's broker CPU goes (benchmarks/txn_cpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.trace.trace import read_events, validate
from benchmarks.txn_cpu import CONFIGS, Config, marginals, ops_span, write_trace


def test_a_txn_config_writes_its_subscriptions_then_one_txn_every_20_ms(tmp_path: Path) -> None:
    path = write_trace(Config(8, 4), 3, tmp_path / "t.parquet")
    assert validate(path) == 4 * 8 + 3 * (1 + 8 + 1)
    events = list(read_events(path))
    assert [e.op for e in events[:32]] == ["subscribe"] * 32
    assert len({(e.topic, e.subscription) for e in events[:32]}) == 32
    txns = [e for e in events if e.op == "new_txn"]
    assert [e.ts_us for e in txns] == [500_000, 520_000, 540_000]
    second = [e for e in events if e.txn == "t1"]
    assert [e.op for e in second] == ["new_txn"] + ["publish"] * 8 + ["commit"]
    assert len({e.topic for e in second if e.op == "publish"}) == 8


def test_units_closer_than_a_txn_lasts_overlap(tmp_path: Path) -> None:
    events = list(read_events(write_trace(Config(1, 0), 3, tmp_path / "t.parquet", every_us=4_000)))
    assert [e.ts_us for e in events if e.op == "new_txn"] == [500_000, 504_000, 508_000]
    # t0 commits 12 ms after it opens, after t1 and t2 have opened and sent
    assert [(e.op, e.txn) for e in events][:5] == [("new_txn", "t0"), ("new_txn", "t1"), ("publish", "t0"),
                                                  ("new_txn", "t2"), ("publish", "t1")]


def test_a_plain_config_sends_the_same_messages_without_a_txn(tmp_path: Path) -> None:
    path = write_trace(Config(8, 0, txn=False), 2, tmp_path / "p.parquet")
    events = list(read_events(path))
    assert [e.op for e in events] == ["publish"] * 16 and all(e.txn is None for e in events)


def test_the_ops_span_runs_from_the_first_issue_to_the_last_answer() -> None:
    events = [{"ev": "ready", "t0_epoch_ms": 1_000.0},
              {"ev": "op", "op": "subscribe", "start_us": 0, "end_us": 900_000},  # setup: not counted
              {"ev": "op", "op": "new_txn", "start_us": 500_000, "end_us": 502_000},
              {"ev": "op", "op": "publish", "start_us": 505_000, "end_us": 509_000},
              {"ev": "op", "op": "commit", "start_us": 512_000, "end_us": 530_000}]
    assert ops_span(events) == (1_500.0, 1_530.0)
    # a delivery after the last answer (a backlog the subscriptions are still working off) ends it
    late = [*events, {"ev": "deliver", "t_us": 545_000}, {"ev": "deliver", "t_us": 520_000}]
    assert ops_span(late) == (1_500.0, 1_545.0)
    assert ops_span([*events, {"ev": "deliver", "t_us": 525_000}]) == (1_500.0, 1_530.0)
    with pytest.raises(SystemExit, match="no ready line"):
        ops_span(events[1:])


def test_the_marginal_costs_come_back_from_the_configurations_they_priced() -> None:
    # price each configuration from known costs (µs), and the marginals must return them
    units, idle, empty, first, further, sub1, sub_more, plain_send, delivered = 150, 300_000, 2_000, 1_300, 200, 250, 62, 300, 56

    def priced(c: Config) -> float:
        us = idle + units * c.topics * (0 if c.txn else plain_send)
        if c.txn:
            us += units * (empty + (first if c.topics else 0) + further * max(0, c.topics - 1))
            us += units * c.topics * (sub1 * min(1, c.subscriptions) + sub_more * max(0, c.subscriptions - 1))
        else:
            us += units * c.topics * c.subscriptions * delivered
        return us / 1000  # ms
    got = dict(marginals({c: priced(c) for c in CONFIGS}, units))
    assert got == pytest.approx({"a txn's first topic (per txn)": first, "each further topic of a txn": further,
                                 "a txn topic's first subscription (per topic and txn)": sub1,
                                 "each further subscription (per topic and txn)": sub_more,
                                 "a plain message delivered to a subscription": delivered})
