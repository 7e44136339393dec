"""A run's requests split by whether they overlapped one of its end-txns (bench.report.behind_end_txn)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.replay.results import result_dir
from bench.report.behind_end_txn import (SECTION_COLUMNS, SOON_AFTER_US, Modes, crowd_modes, end_spans, modes, new_txn_spans,
                                         note, publish_spans, section)


def _row(opened: int | None, answered: int | None, asked: int | None = None, ended: int | None = None) -> dict[str, Any]:
    return {"opened_ts_us": opened, "new_txn_answered_ts_us": answered, "commit_requested_ts_us": asked,
            "end_ts_us": ended}


def _modes(rows: list[dict[str, Any]]) -> Modes | None:
    return modes(new_txn_spans(rows), end_spans(rows))


def test_a_request_is_behind_an_end_txn_when_each_began_before_the_other_ended() -> None:
    rows = [_row(None, None, 100, 200), _row(None, None, 500, 900),  # two end-txns: 100-200, 500-900
            _row(0, 50),  # before both
            _row(40, 100),  # answered as the first was asked: no overlap
            _row(150, 180),  # inside the first
            _row(190, 260),  # began inside it
            _row(300, 420),  # between them
            _row(880, 1_000),  # began inside the second
            _row(900, 960),  # began as it was answered: no overlap
            _row(10, None),  # never answered: not a new-txn here
            _row(None, None, 950, None)]  # asked, never answered: no end-txn to wait behind
    # behind: 30, 70, 120 (the last two answered after the end-txn they overlapped): p50 70, p99 120;
    # the rest: 50, 60, 120, 60: p50 60 (the lower middle), p99 120; of those, sent within 10 ms
    # after an end-txn's answer: 120 (100 µs after the first's) and 60 (as the second was answered)
    assert _modes(rows) == Modes(7, 3, 70, 60, after=2, behind_p99_us=120, rest_p99_us=120,
                                 soon=2, soon_p50_us=60, soon_p99_us=120)


def test_a_request_sent_soon_after_an_end_txn_s_answer_is_counted_apart() -> None:
    assert SOON_AFTER_US == 10_000
    ends = [(0, 1_000), (50_000, 52_000)]
    spans = [(500, 2_500),  # behind the first: not among the rest
             (1_000, 1_900),  # sent as it was answered
             (10_999, 11_700),  # 9,999 µs after
             (11_000, 11_300),  # 10,000 µs after: no longer soon
             (40_000, 40_100),  # long after
             (52_001, 52_800)]  # 1 µs after the second's answer
    got = modes(spans, ends)
    assert got is not None
    assert (got.behind, got.soon, got.soon_p50_us, got.soon_p99_us) == (1, 3, 799, 900)  # 900, 701, 799
    assert got.to_json()["soon_after_end_txn"] == 3 and got.to_json()["soon_after_us"] == 10_000
    assert "soon_after_end_txn" not in Modes(1, 0, None, 4).to_json()  # end-txns are not split so


def test_no_answer_times_no_kinds() -> None:
    assert _modes([{"opened_ts_us": 0, "commit_requested_ts_us": 5, "end_ts_us": 9}]) is None  # written before the column
    assert _modes([]) is None
    assert _modes([_row(0, 10)]) == Modes(1, 0, None, 10, rest_p99_us=10, soon=0)


def test_p99_is_the_nearest_rank() -> None:
    spans = [(0, us) for us in range(1, 201)]  # 1..200 µs, no end-txn
    got = modes(spans, [])
    assert got is not None and (got.rest_p50_us, got.rest_p99_us) == (100, 198)  # ranks 100 and 198 of 200


_span = st.tuples(st.integers(0, 1_000), st.integers(1, 300)).map(lambda p: (p[0], p[0] + p[1]))


@given(st.lists(_span, min_size=1, max_size=30), st.lists(_span, max_size=30))
def test_the_split_is_every_pair_compared(news: list[tuple[int, int]], ends: list[tuple[int, int]]) -> None:
    rows = [_row(a, b) for a, b in news] + [_row(None, None, a, b) for a, b in ends]
    behind = [b - a for a, b in news if any(x < b and y > a for x, y in ends)]
    rest = [b - a for a, b in news if not any(x < b and y > a for x, y in ends)]
    soon = [b - a for a, b in news if not any(x < b and y > a for x, y in ends)
            and any(y <= a and a - y < SOON_AFTER_US for _, y in ends)]
    after = sum(1 for a, b in news if any(x < b and y > a for x, y in ends)
                and b > max(y for x, y in ends if x < b and y > a))
    got = _modes(rows)
    assert got is not None
    assert (got.total, got.behind, got.behind_p50_us, got.rest_p50_us, got.after) == (
        len(news), len(behind), statistics.median_low(behind) if behind else None,
        statistics.median_low(rest) if rest else None, after)
    # at most 30 of each: the nearest rank of 0.99 is the last
    assert (got.behind_p99_us, got.rest_p99_us) == (max(behind, default=None), max(rest, default=None))
    assert (got.soon, got.soon_p50_us, got.soon_p99_us) == (
        len(soon), statistics.median_low(soon) if soon else None, max(soon, default=None))


def test_the_model_s_publishes_from_its_parquet_the_broker_s_from_its_client_events(tmp_path: Path) -> None:
    with result_dir(tmp_path / "model") as w:
        w.publishes({"engine": ["v5-shipped", "v5-shipped", "v4"], "msg": ["m0", "m1", "m2"], "txn": [None, "t0", None],
                     "issued_ts_us": [10, 20, 30], "answered_ts_us": [15, 28, 39]})
        w.finish(counts={}, latency={}, recovery=[], manifest={})
    assert publish_spans(tmp_path / "model", "v5-shipped", "v5") == {True: [(10, 15)], False: [(20, 28)]}
    broker = tmp_path / "broker"
    broker.mkdir()
    events = [{"ev": "ready"}, {"ev": "op", "op": "publish", "start_us": 5, "end_us": 9, "ok": True, "msg": "m0"},
              {"ev": "op", "op": "publish", "start_us": 6, "end_us": 19, "ok": True, "msg": "m1", "txn": "t0"},
              {"ev": "op", "op": "publish", "start_us": 7, "end_us": 8, "ok": False, "msg": "m2"},  # failed: no span
              {"ev": "op", "op": "commit", "start_us": 20, "end_us": 30, "ok": True, "txn": "t0"}]
    (broker / "pulsar-events-v5.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert publish_spans(broker, "v5", "v5") == {True: [(5, 9)], False: [(6, 19)]}
    assert publish_spans(broker, "v4", "v4") is None  # neither kept


def test_a_run_without_publish_spans_writes_no_file(tmp_path: Path) -> None:
    with result_dir(tmp_path / "out") as w:
        w.publishes({"engine": [], "msg": [], "txn": [], "issued_ts_us": [], "answered_ts_us": []})
        w.finish(counts={}, latency={}, recovery=[], manifest={})
    assert not (tmp_path / "out" / "publishes.parquet").exists()


def test_an_end_txn_is_in_a_crowd_when_another_overlapped_it() -> None:
    ends = [(0, 100),  # alone
            (200, 260), (210, 300), (220, 240),  # three at once: the second answered after both others
            (300, 350),  # asked as the second was answered: alone
            (400, 450), (400, 450)]  # two asked and answered together: a crowd, neither after the other
    # crowd: 60, 90, 20, 50, 50: p50 50, p99 90; alone: 100, 50: p50 50 (the lower middle), p99 100
    assert crowd_modes(ends) == Modes(7, 5, 50, 50, after=1, behind_p99_us=90, rest_p99_us=100)
    assert crowd_modes([(5, 9)]) == Modes(1, 0, None, 4, rest_p99_us=4)
    assert crowd_modes([]) is None


@given(st.lists(_span, max_size=30))
def test_the_crowd_is_every_other_end_txn_compared(ends: list[tuple[int, int]]) -> None:
    def others(i: int) -> list[tuple[int, int]]:
        a, b = ends[i]
        return [(x, y) for j, (x, y) in enumerate(ends) if j != i and x < b and y > a]
    crowd = [b - a for i, (a, b) in enumerate(ends) if others(i)]
    alone = [b - a for i, (a, b) in enumerate(ends) if not others(i)]
    after = sum(1 for i, (a, b) in enumerate(ends) if others(i) and b > max(y for _, y in others(i)))
    got = crowd_modes(ends)
    if not ends:
        assert got is None
        return
    assert got == Modes(len(ends), len(crowd), statistics.median_low(crowd) if crowd else None,
                        statistics.median_low(alone) if alone else None, after,
                        max(crowd, default=None), max(alone, default=None))


def test_the_note_needs_both_runs() -> None:
    m = Modes(10, 4, 11_000, 2_000, after=1, behind_p99_us=30_000, rest_p99_us=4_000)
    assert note("v5 new-txn", m, None) == "" and note("v5 new-txn", None, m) == ""
    text = note("v5 publish (plain)", m, Modes(10, 5, 10_000, 2_500, after=4, behind_p99_us=20_000, rest_p99_us=5_000))
    assert text.startswith("v5 publish (plain) by kind: 5 of the broker's 10 overlapped one of the client's end-txns "
                           "(4 of 10 in the model), and 4 of those were answered after it (1 in the model). Their "
                           "p50 / p99 were 10,000 / 20,000 µs at the broker and 11,000 (+10%) / 30,000 (+50%) in the "
                           "model; the others' 2,500 / 5,000 and 2,000 (-20%) / 4,000 (-20%)")
    assert "sent within" not in text  # neither run split the rest by when it was sent
    soon = note("v5 publish (plain)", Modes(10, 4, 11_000, 2_000, soon=3, soon_p50_us=2_400, soon_p99_us=3_000),
                Modes(10, 5, 10_000, 2_500, soon=2, soon_p50_us=4_000, soon_p99_us=6_000))
    assert ("Of the others, 2 were sent within 10 ms after an end-txn's answer (3 in the model): p50 / p99 "
            "4,000 / 6,000 µs at the broker and 2,400 (-40%) / 3,000 (-50%) in the model "
            "(bench/report/behind_end_txn.py).") in soon
    crowd = note("v4 end-txn", m, m, "another of the client's end-txns")
    assert crowd.startswith("v4 end-txn by kind: 4 of the broker's 10 overlapped another of the client's end-txns "
                            "(4 of 10 in the model)")


def test_replay_keeps_each_publish_s_span_when_asked(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from bench.replay.config import RunConfig
    from bench.replay.runner import replay_trace

    trace = Path(__file__).resolve().parents[2] / "datasets" / "samples" / "small.parquet"
    configs = [RunConfig(engine="v4"), RunConfig(engine="v5")]
    replay_trace(trace, configs, tmp_path / "kept", publish_spans=True)
    replay_trace(trace, configs, tmp_path / "not")
    assert not (tmp_path / "not" / "publishes.parquet").exists()
    rows = pq.read_table(tmp_path / "kept" / "publishes.parquet").to_pylist()
    counts = json.loads((tmp_path / "kept" / "counts.json").read_text())
    for cfg in configs:
        mine = [r for r in rows if r["engine"] == cfg.label]
        assert len(mine) == counts[cfg.label]["events.publish"] > 0
        assert all(r["answered_ts_us"] > r["issued_ts_us"] for r in mine)  # every publish takes modelled time
        spans = publish_spans(tmp_path / "kept", cfg.label, cfg.engine)
        assert spans is not None and len(spans[True]) + len(spans[False]) == len(mine)


def test_the_report_section_gives_each_kind_in_both_runs() -> None:
    from bench.report.rows import Row

    model = Modes(10, 4, 4_000, 2_000, soon=3, soon_p50_us=2_100, soon_p99_us=2_500)
    broker = Modes(10, 5, 9_000, 2_200, soon=2, soon_p50_us=3_800, soon_p99_us=5_000)
    crowd = Modes(6, 2, 30_000, 12_000)  # end-txns: not split by when they were sent
    got = section([("v5 publish (plain)", model, broker), ("v5 end-txn", crowd, crowd), ("v4 new-txn", None, broker)],
                  Row)
    assert got is not None
    title, columns, rows, note = got
    assert columns == SECTION_COLUMNS and "within 10 ms after an end-txn's answer" in note
    assert [(r.section, r.metric) for r in rows] == [("Around END_TXNs v5", "publish (plain)"),
                                                      ("Around END_TXNs v5", "end-txn")]  # v4's model run kept none
    assert rows[0].values == {"behind (n): broker": 5, "behind p50: broker": 9_000, "behind p50: model": 4_000,
                              "soon (n): broker": 2, "soon p50: broker": 3_800, "soon p50: model": 2_100,
                              "rest p50: broker": 2_200, "rest p50: model": 2_000}
    assert rows[1].values["soon (n): broker"] is None and rows[1].values["rest p50: model"] == 12_000
    assert section([("v5 new-txn", None, None)], Row) is None
