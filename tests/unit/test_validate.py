"""The "model vs broker" validation section (bench.report.validate): relative errors against the goals,
counts exact / explained / differing, the saturation ratio, and the section in a report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.replay.measure import Histograms
from bench.report.report import build
from bench.replay.results import load, result_dir
from bench.replay.measure import committed_rate
from bench.report.behind_end_txn import Modes
from bench.report.validate import (GOALS, count_checks, latency_checks, relative_error, throughput_checks,
                            validate_sets)
from bench.pulsar.validate_run import model_latency
from engine.clock import DEFAULT_LATENCIES_US
from engine.errors import ConfigError

T = "persistent://public/b/t0-partition-0"


def test_relative_error_is_model_against_broker() -> None:
    assert relative_error(12.0, 10.0) == pytest.approx(0.2)
    assert relative_error(5.0, 10.0) == pytest.approx(-0.5)
    assert relative_error(None, 10.0) is None and relative_error(3.0, 0) is None


def test_latency_goals_p50_20_percent_p99_35_percent() -> None:
    broker = {"end_txn_us": {"p50_us": 1000, "p99_us": 1000}, "publish_txn_us": {"p50_us": 4000, "p99_us": 10000}}
    model = {"end_txn_us": {"p50_us": 1190, "p99_us": 1340}, "publish_txn_us": {"p50_us": 3000, "p99_us": 6000}}
    rows = {c.metric: c for c in latency_checks("v4", model, broker)}
    assert set(rows) == {"end-txn p50", "end-txn p99", "publish (txn) p50", "publish (txn) p99"}  # broker's metrics only
    assert rows["end-txn p50"].verdict == "within goal" and rows["end-txn p99"].verdict == "within goal"
    assert rows["publish (txn) p50"].verdict == "missed"  # -25 %
    assert rows["publish (txn) p99"].verdict == "missed"  # -40 %
    why = rows["publish (txn) p50"].why
    assert why == "the model's is 25% below the broker's"
    assert rows["end-txn p50"].why == ""


def test_counts_exact_explained_or_differs() -> None:
    broker = {"deliveries": 10, "meta.reads": 900, "meta.writes": 3, "tc.log_appends": 8}
    model = {"deliveries": 10, "meta.reads": 300, "meta.writes": 50, "tc.log_appends": 8, "ledger.appends.data": 7}
    rows = {c.metric: c for c in count_checks("v5", model, broker)}
    assert "data entries" not in rows  # the broker did not export it
    assert rows["deliveries"].verdict == "exact"
    assert rows["metadata reads"].verdict == "explained"  # broker-wide gets: more on the broker
    assert "MetadataStoreStats" in rows["metadata reads"].why
    # fewer writes on the broker than in the model: not what the code explains
    assert rows["metadata puts + deletes"].verdict == "differs" and rows["metadata puts + deletes"].why == ""
    v4 = {c.metric: c for c in count_checks("v4", {"deliveries": 9}, {"deliveries": 10})}
    assert v4["deliveries"].verdict == "differs"  # no explanation for a lost delivery


def test_saturation_ratio_against_25_percent() -> None:
    rows = throughput_checks({"v4": 100.0, "v5": 100.0}, {"v4": 100.0, "v5": 40.0})
    ratio = rows[-1]
    assert ratio.design == "v5/v4" and ratio.model == 1.0 and ratio.broker == 0.4
    assert ratio.error == pytest.approx(1.5) and ratio.verdict == "missed"
    assert "at the trace's pace" in ratio.why and "no capacity" in ratio.why
    both = throughput_checks({"v4": 100.0, "v5": 100.0}, {"v4": 100.0, "v5": 40.0}, capacity=True, model_asap=True)[-1]
    assert both.verdict == "missed" and "+150%" in both.why and "do not carry over" in both.why
    ok = throughput_checks({"v4": 100.0, "v5": 45.0}, {"v4": 100.0, "v5": 40.0})[-1]
    assert ok.verdict == "within goal" and ok.why == ""
    # met, but with both rates off by more than the ratio's goal, one way: said so
    shared = throughput_checks({"v4": 156.0, "v5": 40.0}, {"v4": 100.0, "v5": 30.0})[-1]
    assert shared.verdict == "within goal" and shared.why.startswith(
        "met with both designs' rates off the broker's in one direction (v4 +56%, v5 +33%)")
    # ... not when one is within it, or they are off in opposite directions (then the ratio misses)
    assert throughput_checks({"v4": 124.0, "v5": 30.0}, {"v4": 100.0, "v5": 24.0})[-1].why == ""
    assert throughput_checks({"v4": 100.0, "v5": 45.0}, {})[-1].verdict == "n/a"  # no asap run
    assert GOALS.ratio == 0.25


def test_a_missed_ratio_says_whether_it_lies_in_the_brokers_own_spread() -> None:
    model, broker = {"v4": 100.0, "v5": 31.0}, {"v4": 100.0, "v5": 21.0}  # +48 %
    inside = throughput_checks(model, broker, capacity=True, model_asap=True, broker_range=(0.21, 0.40))[-1]
    assert inside.verdict == "missed" and inside.why.endswith("the model's 0.31 is inside the broker's own spread, "
                                                              "its runs one by one giving 0.21-0.40")
    outside = throughput_checks(model, broker, capacity=True, model_asap=True, broker_range=(0.18, 0.24))[-1]
    assert "0.31 is outside the broker's own spread" in outside.why
    met = throughput_checks({"v4": 100.0, "v5": 22.0}, broker, broker_range=(0.18, 0.24))[-1]
    assert met.verdict == "within goal" and met.why == ""


def test_committed_rate_counts_committed_over_the_txn_phase() -> None:
    # written before opened_ts_us: from the run's start to the last commit's answer
    txns: list[dict[str, Any]] = [{"outcome": "committed", "end_ts_us": 500_000}, {"outcome": "committed", "end_ts_us": 1_000_000},
            {"outcome": "aborted", "end_ts_us": 2_000_000}, {"outcome": "committed", "end_ts_us": None}]
    assert committed_rate(txns) == 2.0
    assert committed_rate([{"outcome": "aborted", "end_ts_us": 5}]) is None
    # from the first new_txn issued (any txn's, the aborted one's here): the subscribes before it stay out
    opened = [{**t, "opened_ts_us": o} for t, o in zip(txns, (700_000, 650_000, 600_000, 800_000))]
    assert committed_rate(opened) == 5.0  # 2 over 0.4 s
    assert committed_rate([{"outcome": "committed", "end_ts_us": 5, "opened_ts_us": 5}]) is None  # no span


def _latency(samples: dict[str, list[int]]) -> dict[str, object]:
    h = Histograms()
    for name, values in samples.items():
        for v in values:
            h.record(name, v)
    return h.summary()


def _set(out: Path, trace: Path, *, broker: bool, pacing: str = "trace", ends: tuple[int, int] = (1_000_000, 1_000_000),
         end_txn_p50: tuple[int, int] = (5000, 5000), appends: int = 4, meta_reads: int = 40, lag_us: int = 7,
         issue_lag_us: int | None = None, state: dict[str, Any] | None = None,
         store: dict[str, int] | None = None, cpu: dict[str, dict[str, Any]] | None = None, repeated: int | None = None,
         only: str | None = None, sweep_wait_s: dict[str, float | None] | None = None,
         v5_txns: list[tuple[int, int, int, int]] | None = None,
         v5_publishes: list[tuple[int, int, str | None]] | None = None, v5_end_from_txns: bool = False) -> None:
    """A result set of v4 and v5 (``only``: of that design) as bench.replay.runner (model) or
    bench.pulsar.run (broker) writes it: one committed txn per design, ending at ``ends``, its
    new_txn answered at 50 µs; ``v5_txns``: v5's committed txns instead, each (new_txn issued,
    answered, commit issued, answered), with their new_txn latencies; ``v5_publishes``: v5's
    publishes (issued, answered, txn or None), with their latencies, in the model's
    ``publishes.parquet`` or the broker's ``pulsar-events-v5.jsonl``; ``v5_end_from_txns``: v5's
    end-txn latencies are those of ``v5_txns`` (else 5 ms each)."""
    both = ("v4", "v5") if broker else ("v4", "v5-shipped")
    labels = tuple(lab for lab in both if only is None or lab.startswith(only))
    ends = tuple(e for lab, e in zip(both, ends) if lab in labels)
    end_txn_p50 = tuple(e for lab, e in zip(both, end_txn_p50) if lab in labels)
    with result_dir(out) as w:
        # the broker's v4 delivers m1 twice (stored twice or redelivered)
        engines = list(labels) + ([labels[0]] if broker else [])
        w.deliveries({"engine": engines, "topic": [T] * len(engines), "subscription": ["s"] * len(engines),
                      "msg": ["m1"] * len(engines), "delivered_ts_us": [9000] * len(engines),
                      "redelivery": [False] * len(engines)})
        counts = {both[0]: {"deliveries": 1, "txns.committed": 1, "tc.log_appends": appends, "meta.reads": 0},
                  both[1]: {"deliveries": 1, "txns.committed": 1, "meta.reads": meta_reads}}
        counts = {lab: c for lab, c in counts.items() if lab in labels}
        if broker and "v4" in counts:
            counts["v4"]["pulsar.some_counter_total"] = 3
            for lab in labels:  # the broker's metadata store counters (bench.pulsar.metrics)
                counts[lab].update(store or {})
        runs = {lab: {"config": {"engine": lab[:2], **({"target": "pulsar"} if broker else {"pacing": pacing})}, "events": 4,
                      "wall_seconds": 1.0, **({"pacing": pacing, "pulsar": {"version": "5.0.0-M1"}, "max_lag_us": lag_us,
                                               "rates": {"committed_txns_per_s": None,
                                                         **({"max_issue_lag_us": issue_lag_us} if issue_lag_us is not None else {})},
                                               **({"cpu": cpu[lab]} if cpu and lab in cpu else {}),
                                               **({"sweep_wait_s": sweep_wait_s[lab]} if sweep_wait_s else {})}
                                            if broker else {})}
                for lab in labels}
        manifest = {"trace": {"path": str(trace), "rows": 4, "profile": "hand", "seed": "1",
                              **({"repeated": str(repeated)} if repeated else {})}, "runs": runs}
        if broker:
            manifest["target"] = {"kind": "pulsar", "version": "5.0.0-M1", "pacing": pacing}
            if state is not None:
                manifest["validate"] = {"broker": state}
        latency = {lab: _latency({"end_txn_us": [p50] * 98 + [2 * p50] * 2}) for lab, p50 in zip(labels, end_txn_p50)}
        # (engine, txn, new_txn issued, answered, commit issued, answered)
        rows = [(lab, "t0", 0, 50, e - 100, e) for lab, e in zip(labels, ends)]
        if v5_txns is not None:
            v5 = labels[-1]
            rows = [r for r in rows if r[0] != v5] + [(v5, f"t{i}", *t) for i, t in enumerate(v5_txns)]
            latency[v5] = _latency({"end_txn_us": [d - c for _, _, c, d in v5_txns] if v5_end_from_txns else [5000] * 100,
                                    "new_txn_us": [b - a for a, b, _, _ in v5_txns]})
        if v5_publishes is not None:
            v5 = labels[-1]
            latency[v5] = {**latency[v5], **_latency({
                "publish_nontxn_us": [b - a for a, b, t in v5_publishes if t is None],
                "publish_txn_us": [b - a for a, b, t in v5_publishes if t is not None]})}
            if not broker:
                w.publishes({"engine": [v5] * len(v5_publishes), "msg": [f"m{i}" for i in range(len(v5_publishes))],
                             "txn": [t for _, _, t in v5_publishes], "issued_ts_us": [a for a, _, _ in v5_publishes],
                             "answered_ts_us": [b for _, b, _ in v5_publishes]})
        w.finish(counts=counts, recovery=[], latency=latency,
                 txns={"engine": [r[0] for r in rows], "txn": [r[1] for r in rows], "outcome": ["committed"] * len(rows),
                       "end_ts_us": [r[5] for r in rows], "visible_ts_us": [r[5] + 10 for r in rows],
                       "commit_requested_ts_us": [r[4] for r in rows], "messages": [1] * len(rows),
                       "opened_ts_us": [r[2] for r in rows], "new_txn_answered_ts_us": [r[3] for r in rows]},
                 manifest=manifest)
    if broker and v5_publishes is not None:  # the broker's client's events (bench.pulsar.client)
        (out / "pulsar-events-v5.jsonl").write_text("".join(
            json.dumps({"ev": "op", "op": "publish", "start_us": a, "end_us": b, "ok": True, "msg": f"m{i}",
                        **({"txn": t} if t is not None else {})}) + "\n" for i, (a, b, t) in enumerate(v5_publishes)))


def test_section_in_the_report_from_model_broker_and_asap_sets(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False, end_txn_p50=(3600, 5800), meta_reads=30)
    # behind the trace by 2.5 s over all rows, 1.5 s acks aside (an ack waits for its delivery)
    _set(tmp_path / "broker", trace, broker=True, appends=5, meta_reads=900, lag_us=2_500_000, issue_lag_us=1_500_000)
    # as fast as possible: v4 ends its one txn after 20 ms (50/s), v5 after 50 ms (20/s)
    _set(tmp_path / "asap", trace, broker=True, pacing="asap", ends=(20_000, 50_000))
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), load(tmp_path / "asap"))
    rows = {(c.design, c.section, c.metric): c for c in v.checks}
    assert rows[("v4", "Counts", "coordinator log appends (v4)")].verdict == "explained"  # broker-wide counter: 5 > 4
    assert rows[("v5", "Counts", "metadata reads")].verdict == "explained"
    assert rows[("v4", "Counts", "deliveries")].verdict == "exact"
    v4_end, v5_end = rows[("v4", "Latency", "end-txn p50")], rows[("v5", "Latency", "end-txn p50")]
    assert v4_end.model is not None and v4_end.broker is not None
    assert v4_end.verdict == "missed" and v4_end.error == pytest.approx((v4_end.model - v4_end.broker) / v4_end.broker)
    assert v4_end.error == pytest.approx(-0.28, abs=0.01)
    assert v5_end.verdict == "within goal" and v5_end.error == pytest.approx(0.16, abs=0.01)
    # the model runs the trace's pace (1/s each), the broker at saturation 50/s and 20/s: ratio 1.0 vs 0.4
    assert rows[("v4", "Throughput", "committed txns per second")].broker == 50.0
    ratio = rows[("v5/v4", "Throughput", "v5/v4 committed-rate ratio at saturation")]
    assert (ratio.model, ratio.broker, ratio.verdict) == (1.0, 0.4, "missed")
    assert v.unmapped == 1 and "constants" in v.profile_note
    # missed: v4 end-txn p50 (-28 %; its p99 is within ±35 %) and the ratio; n/a: the two per-design rates
    assert v.tally() == f"{len(v.checks) - 4} of {len(v.checks) - 2} judged rows meet them (2 n/a)"
    assert dict(v.duplicates) == {"v4": 1, "v5": 0} and dict(v.broker_lag_us) == {"v4": 1_500_000, "v5": 1_500_000}

    rep = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap"], tmp_path / "rep")
    md = rep.markdown.read_text()
    assert "## Model vs broker — model vs broker" in md
    assert "Goals: p50 within ±20%, p99 within ±35%, v5/v4 saturation ratio within ±25%" in md
    assert ("v4 end-txn missed (p50 28% below the broker's): the model bills from when the txn exists and its "
            "publishes and acks are answered (jvm TraceRunner.end): rpc to the broker, the request's handling "
            "(coordinator.v4), "
            "a coordinator-log ledger.append") in md
    assert "**Model vs broker, against the goals**" in md
    assert "v5 as shipped on its default store, not the emulated store a standalone broker runs" in md  # no URL recorded
    assert "The broker fell behind the trace (largest lag issuing a row, acks aside: v4 1.5 s, v5 1.5 s)" in md
    assert "1 (subscription, msg) pairs more than once on v4" in md
    assert "the broker's state before its runs was not recorded" in md and v.broker_state is None
    assert "vs asap" not in md  # the asap set measures saturation, not a row-by-row pair
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["validation"]["saturation"] == str(tmp_path / "asap")
    assert len(summary["validation"]["checks"]) == len(v.checks)


def _judged(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """The report of ``tmp_path``'s model and broker sets: its markdown and its validation object."""
    rep = build([tmp_path / "model", tmp_path / "broker"], tmp_path / "rep")
    return rep.markdown.read_text(), json.loads((tmp_path / "rep" / "summary.json").read_text())["validation"]


def test_a_missed_new_txn_row_gives_each_kind_of_new_txn_in_both_runs(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    # the broker: t1-t3 wait behind t0's end-txn (10 ms each, t3 answered after it), t0 and t4 do
    # not (2 ms): p50 10 ms
    _set(tmp_path / "broker", trace, broker=True, v5_txns=[
        (0, 2_000, 3_000, 16_500), (5_000, 15_000, 60_000, 61_000), (6_000, 16_000, 62_000, 63_000),
        (7_000, 17_000, 64_000, 65_000), (70_000, 72_000, 73_000, 74_000)])
    # the model: each kind 5 % slower, but t3 comes after t0's end: two behind, three not, p50 2.1 ms
    _set(tmp_path / "model", trace, broker=False, v5_txns=[
        (0, 2_100, 3_000, 50_000), (5_000, 15_500, 60_000, 61_000), (6_000, 16_500, 62_000, 63_000),
        (51_000, 53_100, 64_000, 65_000), (70_000, 72_100, 73_000, 74_000)])
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), None)
    assert {c.metric: c.verdict for c in v.checks if c.design == "v5" and c.section == "Latency"}["new-txn p50"] == "missed"
    kinds = {d: (m, b) for d, m, b in v.new_txn_modes}
    # sent within 10 ms after an end-txn's answer: the broker's t4 (5 ms after t3's end), the model's
    # t3 (1 ms after t0's) and t4
    assert kinds["v5"] == (Modes(5, 2, 10_500, 2_100, behind_p99_us=10_500, rest_p99_us=2_100,
                                 soon=2, soon_p50_us=2_100, soon_p99_us=2_100),
                           Modes(5, 3, 10_000, 2_000, after=1, behind_p99_us=10_000, rest_p99_us=2_000,
                                 soon=1, soon_p50_us=2_000, soon_p99_us=2_000))
    assert kinds["v4"] == (Modes(1, 0, None, 50, rest_p99_us=50, soon=0), Modes(1, 0, None, 50, rest_p99_us=50, soon=0))
    md, doc = _judged(tmp_path)
    assert ("v5 new-txn by kind: 3 of the broker's 5 overlapped one of the client's end-txns (2 of 5 in the "
            "model), and 1 of those were answered after it (0 in the model). Their p50 / p99 were 10,000 / 10,000 µs "
            "at the broker and 10,500 (+5%) / 10,500 (+5%) in the model; the others' 2,000 / 2,000 and 2,100 (+5%) / "
            "2,100 (+5%)") in md
    assert "v4 new-txn by kind" not in md  # v4's new-txn rows have no broker latency here: nothing missed
    assert "Why, likely" not in md  # the model's new-txns behind the end-txn are not the faster ones: no known cause
    assert doc["new_txn_modes"]["v5"]["broker"] == {"requests": 5, "behind_end_txn": 3, "behind_p50_us": 10_000, "behind_p99_us": 10_000,
                                                    "rest_p50_us": 2_000, "rest_p99_us": 2_000,
                                                    "answered_after_the_end_txn": 1, "soon_after_end_txn": 1,
                                                    "soon_after_us": 10_000, "soon_p50_us": 2_000, "soon_p99_us": 2_000}


def test_a_missed_publish_row_gives_each_kind_of_publish_in_both_runs(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    end = [(0, 2_000, 3_000, 16_500)]  # one v5 txn, its end-txn 3-16.5 ms
    # the broker: three plain publishes sent during the end-txn wait for it (the last answered after
    # it), two others do not: p50 10 ms
    _set(tmp_path / "broker", trace, broker=True, v5_txns=end, v5_publishes=[
        (4_000, 14_000, None), (5_000, 15_000, None), (6_000, 17_500, None), (20_000, 22_000, None),
        (30_000, 32_000, None)])
    # the model: the same publishes, those behind the end-txn answered in 4 ms: p50 4 ms
    _set(tmp_path / "model", trace, broker=False, v5_txns=end, v5_publishes=[
        (4_000, 8_000, None), (5_000, 9_000, None), (6_000, 10_000, None), (20_000, 22_000, None),
        (30_000, 32_000, None)])
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), None)
    rows = {c.metric: c.verdict for c in v.checks if c.design == "v5" and c.section == "Latency"}
    assert rows["publish (plain) p50"] == "missed" and "publish (txn) p50" not in rows  # no txn publish
    kinds = {(d, k): (m, b) for d, k, m, b in v.publish_modes}
    # the publish at 20 ms was sent 3.5 ms after the end-txn's answer, the one at 30 ms 13.5 ms after
    soon = {"soon": 1, "soon_p50_us": 2_000, "soon_p99_us": 2_000}
    assert kinds[("v5", "plain")] == (Modes(5, 3, 4_000, 2_000, behind_p99_us=4_000, rest_p99_us=2_000, **soon),
                                      Modes(5, 3, 10_000, 2_000, after=1, behind_p99_us=11_500, rest_p99_us=2_000, **soon))
    assert kinds[("v5", "txn")] == (None, None)
    assert ("v4", "plain") not in kinds  # v4's runs kept no publish spans
    md, doc = _judged(tmp_path)
    assert ("v5 publish (plain) by kind: 3 of the broker's 5 overlapped one of the client's end-txns (3 of 5 in the "
            "model), and 1 of those were answered after it (0 in the model). Their p50 / p99 were 10,000 / 11,500 µs "
            "at the broker and 4,000 (-60%) / 4,000 (-65%) in the model; the others' 2,000 / 2,000 and 2,000 (+0%) / "
            "2,000 (+0%)") in md
    # the model answers those behind the end-txn sooner: the kept sets' cause of such a miss follows
    assert "Why, likely: the publishes the model answers too soon are the ones sent while their client's END_TXN " \
           "was in flight: at the broker they wait behind that END_TXN on their connection" in md
    kept = doc["publish_modes"]["v5"]
    assert kept["plain"]["model"]["behind_end_txn"] == 3 and kept["txn"] == {"model": None, "broker": None}
    assert "Requests around the client's END_TXNs, model vs broker" in md  # every kind, missed or not


def test_a_missed_end_txn_row_gives_the_end_txns_in_a_crowd_and_alone_in_both_runs(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    # the broker: three end-txns asked at one instant (4, 5 and 6 ms), two alone (4 ms): p50 4 ms
    crowd = [(0, 1_000, 100_000, 104_000), (0, 1_000, 100_000, 105_000), (0, 1_000, 100_000, 106_000)]
    alone = [(0, 1_000, 10_000, 14_000), (0, 1_000, 50_000, 54_000)]
    _set(tmp_path / "broker", trace, broker=True, v5_txns=alone + crowd, v5_end_from_txns=True)
    # the model: the crowd queues (8, 12 and 16 ms), those alone as the broker's: p50 8 ms
    _set(tmp_path / "model", trace, broker=False, v5_end_from_txns=True, v5_txns=alone + [
        (0, 1_000, 100_000, 108_000), (0, 1_000, 100_000, 112_000), (0, 1_000, 100_000, 116_000)])
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), None)
    rows = {c.metric: c.verdict for c in v.checks if c.design == "v5" and c.section == "Latency"}
    assert rows["end-txn p50"] == "missed" and rows["end-txn p99"] == "missed"
    kinds = {d: (m, b) for d, m, b in v.end_txn_modes}
    assert kinds["v5"] == (Modes(5, 3, 12_000, 4_000, after=1, behind_p99_us=16_000, rest_p99_us=4_000),
                           Modes(5, 3, 5_000, 4_000, after=1, behind_p99_us=6_000, rest_p99_us=4_000))
    md, doc = _judged(tmp_path)
    assert ("v5 end-txn by kind: 3 of the broker's 5 overlapped another of the client's end-txns (3 of 5 in the "
            "model), and 1 of those were answered after it (1 in the model). Their p50 / p99 were 5,000 / 6,000 µs "
            "at the broker and 12,000 (+140%) / 16,000 (+167%) in the model; the others' 4,000 / 4,000 and "
            "4,000 (+0%) / 4,000 (+0%)") in md
    assert doc["end_txn_modes"]["v5"]["model"]["behind_end_txn"] == 3
    assert "Why, likely" not in md  # a v5 crowd: the kept sets showed v4's
    assert doc["end_txn_modes"]["v4"]["broker"] == {"requests": 1, "behind_end_txn": 0, "behind_p50_us": None,
                                                    "behind_p99_us": None, "rest_p50_us": 100, "rest_p99_us": 100,
                                                    "answered_after_the_end_txn": 0}


def test_the_broker_saturation_rate_is_each_designs_median_of_its_asap_runs(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    # three asap runs: v4 ends its txn after 20, 10 and 25 ms (50, 100, 40 txn/s), v5 after 50, 40, 100 ms
    for i, ends in enumerate([(20_000, 50_000), (10_000, 40_000), (25_000, 100_000)]):
        _set(tmp_path / f"asap{i}", trace, broker=True, pacing="asap", ends=ends)
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / f"asap{i}") for i in range(3)])
    rows = {(c.design, c.metric): c for c in v.checks if c.section == "Throughput"}
    assert rows[("v4", "committed txns per second")].broker == 50.0  # median of 50, 100, 40
    assert rows[("v5", "committed txns per second")].broker == 20.0  # median of 20, 25, 10
    ratio = rows[("v5/v4", "v5/v4 committed-rate ratio at saturation")]
    assert ratio.broker == 0.4 and ratio.verdict == "missed"
    # each asap run's own ratio: 20/50, 25/100, 10/40
    assert ratio.why.endswith("the model's 1.00 is outside the broker's own spread, its runs one by one giving 0.25-0.40")
    assert dict(v.saturation_runs) == {"v4": (50.0, 100.0, 40.0), "v5": (20.0, 25.0, 10.0)}
    assert v.to_json()["broker_saturation_runs"] == {"v4": [50.0, 100.0, 40.0], "v5": [20.0, 25.0, 10.0]}
    rep = build([tmp_path / "model", tmp_path / "broker"] + [tmp_path / f"asap{i}" for i in range(3)], tmp_path / "rep")
    assert "3 runs, the median per design (v4 40-100 txn/s, v5 10-25 txn/s)" in rep.markdown.read_text()


def test_the_section_says_what_state_the_broker_was_in(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "fresh", trace, broker=True, state={"fresh": True, "warm_up_runs": 2,
                                                         "warm_up_txns": {"v5": 300, "v4": 6420}})
    _set(tmp_path / "as-left", trace, broker=True, state={"fresh": False, "warm_up_runs": 0})
    _set(tmp_path / "before", trace, broker=True, state={"fresh": True, "warm_up_runs": 2})  # written before the volume was
    _set(tmp_path / "jit", trace, broker=True, state={"fresh": True, "warm_up_runs": 9, "warm_up_txns": {"v4": 17655},
                                                       "warm_up_jit": {"v5": 0.033, "v4": 0.043}})
    fresh = validate_sets(load(tmp_path / "model"), load(tmp_path / "fresh"), None)
    assert fresh.broker_state == (True, 2, (("v4", 6420), ("v5", 300)))
    assert fresh.to_json()["broker_state"] == {"fresh": True, "warm_up_runs": 2, "warm_up_txns": {"v4": 6420, "v5": 300}}
    assert fresh.broker_state_note() == ("the broker restarted with its data wiped before this trace, then 2 discarded "
                                         "as-fast-as-possible runs of the trace (their rows held 6,420 v4 txns and "
                                         "300 v5 txns)")
    before = validate_sets(load(tmp_path / "model"), load(tmp_path / "before"), None)
    assert before.broker_state == (True, 2, ()) and before.to_json()["broker_state"]["warm_up_txns"] == {}
    assert before.broker_state_note().endswith("then 2 discarded as-fast-as-possible runs of the trace")
    assert "warm_up_jit" not in fresh.to_json()["broker_state"] and fresh.warm_up_jit == ()
    # a warm-up that went on until its broker's JIT was quiet says how quiet in its last run
    jit = validate_sets(load(tmp_path / "model"), load(tmp_path / "jit"), None)
    assert jit.to_json()["broker_state"]["warm_up_jit"] == {"v4": 0.043, "v5": 0.033}
    assert jit.broker_state_note().endswith("(their rows held 17,655 v4 txns); its JIT compiler threads' share of its "
                                            "cores in the last one: v4 0.043, v5 0.033")
    left = validate_sets(load(tmp_path / "model"), load(tmp_path / "as-left"), None)
    assert left.broker_state_note() == "the broker as earlier runs left it (no --fresh-broker), no warm-up run"
    md = build([tmp_path / "model", tmp_path / "fresh"], tmp_path / "rep").markdown.read_text()
    assert "the broker restarted with its data wiped before this trace, then 2 discarded" in md


def _events(run: Path, label: str, *errors: str | None) -> None:
    """A broker run's client events file (jvm/PROTOCOL.md): one op line per entry, ok when None."""
    lines = [json.dumps({"ev": "ready", "t0_epoch_ms": 0})]
    lines += [json.dumps({"ev": "op", "row": i, "op": "publish", "start_us": i, "end_us": i + 1, "ok": err is None,
                          "error": err}) for i, err in enumerate(errors)]
    (run / f"pulsar-events-{label}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_section_names_the_operations_that_failed_at_the_brokers_client(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    lost = "ConnectException: Disconnected from server at 127.0.0.1/127.0.0.1:6650"
    _events(tmp_path / "broker", "v4", None, lost, lost, "TransactionNotFoundException: The transaction (0,9) not found")
    _events(tmp_path / "broker", "v5", None, None)
    with (tmp_path / "broker" / "pulsar-events-v4.jsonl").open("a") as f:
        f.write('{"ev":"op","ok":false,"err\n')  # a client killed mid-line: not an op (the run failed on it)
    for i, errs in enumerate([(lost, None), (None,)]):
        _set(tmp_path / f"asap{i}", trace, broker=True, pacing="asap", ends=(20_000, 50_000))
        _events(tmp_path / f"asap{i}", "v4", *errs)
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / f"asap{i}") for i in range(2)])
    assert dict(v.broker_failures) == {"v4": (("ConnectException", 2), ("TransactionNotFoundException", 1)), "v5": ()}
    assert dict(v.saturation_failures) == {"v4": (1, 0), "v5": (0, 0)}  # v5 wrote no events file: none seen
    assert v.to_json()["broker_failed_ops"] == {"v4": {"ConnectException": 2, "TransactionNotFoundException": 1}, "v5": {}}
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap0", tmp_path / "asap1"],
               tmp_path / "rep").markdown.read_text()
    assert ("Operations failed at the broker's client in its run at the trace's pace: v4 2 ConnectException, "
            "1 TransactionNotFoundException") in md
    assert "Operations failed in the broker's asap runs, run by run: v4 1, 0:" in md
    # a clean broker run says nothing of failures
    clean = validate_sets(load(tmp_path / "model"), load(tmp_path / "asap1"), None)
    assert all(not f for _, f in clean.broker_failures)


def test_the_section_gives_the_brokers_mean_metadata_put(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True, store={"pulsar.metadata.puts": 40, "pulsar.metadata.puts_ms": 14})
    _set(tmp_path / "asap", trace, broker=True, pacing="asap", ends=(20_000, 50_000),
         store={"pulsar.metadata.puts": 200, "pulsar.metadata.puts_ms": 100})
    _set(tmp_path / "old-asap", trace, broker=True, pacing="asap", ends=(20_000, 50_000))  # no sum recorded
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "asap"), load(tmp_path / "old-asap")])
    assert dict(v.broker_put_us) == {"v4": 350.0, "v5": 350.0}  # 14 ms over 40 puts
    assert dict(v.saturation_put_us) == {"v4": (500.0, None), "v5": (500.0, None)}
    assert v.to_json()["broker_saturation_mean_put_us"] == {"v4": [500.0, None], "v5": [500.0, None]}
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap", tmp_path / "old-asap"],
               tmp_path / "rep").markdown.read_text()
    assert "at the trace's pace: v4 350 µs, v5 350 µs; in its asap runs: v4 500, - µs; v5 500, - µs." in md


def test_the_section_says_who_used_the_cores_in_the_asap_runs(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    # v4: the machine full, the broker on 0.4 of its 1.9 busy cores (the client the rest); v5: the
    # broker on 1.2 of 1.8; the second run recorded no CPU (no broker pid, or a set written before)
    _set(tmp_path / "asap", trace, broker=True, pacing="asap", ends=(20_000, 50_000),
         cpu={"v4": {"span_ms": 300.0, "cores": 2, "machine_busy_cores": 1.9, "broker_cores": 0.4},
              "v5": {"span_ms": 900.0, "cores": 2, "machine_busy_cores": 1.8, "broker_cores": 1.2}})
    _set(tmp_path / "asap2", trace, broker=True, pacing="asap", ends=(20_000, 50_000))
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "asap"), load(tmp_path / "asap2")])
    # sets written before the sweep thread and the JIT were read: their cores and the wait are None
    assert dict(v.saturation_cpu) == {"v4": ((1.9, 0.4, None, None, None), None),
                                      "v5": ((1.8, 1.2, None, None, None), None)}
    assert v.cores == 2
    assert v.to_json()["broker_saturation_cpu"]["v4"] == [{"machine_busy_cores": 1.9, "broker_cores": 0.4,
                                                           "sweep_cores": None, "sweep_wait_s": None,
                                                           "jit_cores": None}, None]
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap", tmp_path / "asap2"],
               tmp_path / "rep").markdown.read_text()
    assert "Cores in use over the txn phase of each asap run, the machine's busy (the broker process's) of its 2: " \
           "v4 1.9 (0.4), -; v5 1.8 (1.2), -." in md
    assert "In v4 the machine was near full and the broker used under half of it" in md  # v5's broker had 2/3
    assert "sweep thread" not in md and "compiler threads" not in md  # no run recorded them
    # a set that read the broker's compiler threads gives their share of each run, and says why
    _set(tmp_path / "jit", trace, broker=True, pacing="asap", ends=(20_000, 50_000),
         cpu={"v4": {"span_ms": 300.0, "cores": 2, "machine_busy_cores": 1.9, "broker_cores": 1.2, "jit_cores": 0.6},
              "v5": {"span_ms": 900.0, "cores": 2, "machine_busy_cores": 1.8, "broker_cores": 1.2, "jit_cores": 0.0}})
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "jit"], tmp_path / "rep-jit").markdown.read_text()
    assert ("the machine's busy (the broker process's, of them its JIT compiler threads') of its 2: "
            "v4 1.9 (1.2, JIT 0.6); v5 1.8 (1.2, JIT 0).") in md
    assert "a run whose JIT was busy measured the broker still warming" in md
    # sets without CPU records say nothing of it
    none = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "asap2")])
    assert none.saturation_cpu == () and none.to_json()["broker_saturation_cpu"] == {}


def test_the_section_counts_the_receipts_the_client_got_out_of_order_in_each_asap_run(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    # the first asap run's client closed its connection on two out-of-order receipts, the second on none
    _set(tmp_path / "asap", trace, broker=True, pacing="asap", ends=(20_000, 50_000),
         store={"client_warnings.out_of_order_receipt": 2})
    _set(tmp_path / "asap2", trace, broker=True, pacing="asap", ends=(20_000, 50_000))
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "asap"), load(tmp_path / "asap2")])
    assert dict(v.saturation_reorders) == {"v4": (2, 0), "v5": (2, 0)}
    assert v.to_json()["broker_saturation_out_of_order_receipts"] == {"v4": [2, 0], "v5": [2, 0]}
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap", tmp_path / "asap2"],
               tmp_path / "rep").markdown.read_text()
    assert "acknowledged first), run by run: v4 2, 0; v5 2, 0 (pulsar-client-*.log)" in md
    # none anywhere: nothing said, an empty mapping
    quiet = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "asap2")])
    assert quiet.saturation_reorders == () and quiet.to_json()["broker_saturation_out_of_order_receipts"] == {}


def test_the_section_says_what_the_brokers_v5_sweep_took_of_each_run_and_how_long_runs_waited_for_it(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    run = lambda sweep: {"span_ms": 900.0, "cores": 2, "machine_busy_cores": 1.5, "broker_cores": 1.0,  # noqa: E731
                         "sweep_cores": sweep}
    # at the trace's pace: v4 waited 61.5 s for a GC sweep to end, v5 none; the second asap run's
    # v5 had the sweep start inside its txn phase (0.9 of a core), after waiting 0.25 s itself
    _set(tmp_path / "broker", trace, broker=True, cpu={"v4": run(0.0), "v5": run(0.0)},
         sweep_wait_s={"v4": 61.5, "v5": 0.0})
    _set(tmp_path / "asap", trace, broker=True, pacing="asap", ends=(20_000, 50_000),
         cpu={"v4": run(0.0), "v5": run(0.01)}, sweep_wait_s={"v4": 0.0, "v5": 0.0})
    _set(tmp_path / "asap2", trace, broker=True, pacing="asap", ends=(20_000, 50_000),
         cpu={"v4": run(0.0), "v5": run(0.9)}, sweep_wait_s={"v4": 0.0, "v5": 0.25})
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "asap"), load(tmp_path / "asap2")])
    assert dict(v.broker_cpu) == {"v4": (1.5, 1.0, 0.0, 61.5, None), "v5": (1.5, 1.0, 0.0, 0.0, None)}
    assert dict(v.saturation_cpu)["v5"] == ((1.5, 1.0, 0.01, 0.0, None), (1.5, 1.0, 0.9, 0.25, None))
    doc = v.to_json()
    assert doc["broker_cpu"]["v4"] == {"machine_busy_cores": 1.5, "broker_cores": 1.0, "sweep_cores": 0.0,
                                       "sweep_wait_s": 61.5, "jit_cores": None}
    assert doc["broker_saturation_cpu"]["v5"][1]["sweep_cores"] == 0.9
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap", tmp_path / "asap2"],
               tmp_path / "rep").markdown.read_text()
    assert ("in cores over each run's txn phase: at the trace's pace v4 0, v5 0; asap v4 0, 0; v5 0.01, 0.9. "
            "Each run first waited for it to idle: 62 s in all, before 2 of 6 runs.") in md
    # a set whose runs found no sweep thread (a broker without the v5 coordinator) says nothing of it
    _set(tmp_path / "plain", trace, broker=True, cpu={"v4": {**run(None)}, "v5": {**run(None)}})
    assert "sweep thread" not in build([tmp_path / "model", tmp_path / "plain"], tmp_path / "rep2").markdown.read_text()


def test_the_section_says_how_often_the_asap_runs_replayed_the_rows_and_flags_short_phases(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    cpu = lambda v4_ms, v5_ms: {"v4": {"span_ms": v4_ms, "cores": 2, "machine_busy_cores": 1.9, "broker_cores": 1.0},  # noqa: E731
                                "v5": {"span_ms": v5_ms, "cores": 2, "machine_busy_cores": 1.8, "broker_cores": 1.2}}
    _set(tmp_path / "short", trace, broker=True, pacing="asap", ends=(20_000, 50_000), cpu=cpu(130.0, 940.0))
    _set(tmp_path / "long", trace, broker=True, pacing="asap", ends=(20_000, 50_000), cpu=cpu(590.0, 3500.0), repeated=4)
    once = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "short")])
    assert (once.saturation_repeat, once.saturation_span_ms) == ((("v4", 1), ("v5", 1)), (130.0, 940.0))
    four = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), [load(tmp_path / "long")])
    assert four.to_json()["saturation_repeat"] == {"v4": 4, "v5": 4}
    assert four.to_json()["broker_saturation_span_ms"] == [590.0, 3500.0]
    short_md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "short"], tmp_path / "r1").markdown.read_text()
    long_md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "long"], tmp_path / "r2").markdown.read_text()
    assert "saturated it for 130-940 ms (their txn phases): too short to measure a rate" in short_md
    assert "too short to measure" not in long_md
    assert "as fast as possible, v4 on the trace's rows 4 times over, v5 on the trace's rows 4 times over" in long_md
    assert "times over" not in short_md.split("too short to measure")[0]


def test_one_asap_set_per_design_each_on_its_own_trace(tmp_path: Path) -> None:
    """validate's asap runs, one set per design when the designs replay the rows a different number
    of times: the model's rate of each design from its own set, the broker's medians from its
    sets, the v5/v4 ratio of each run pairing the designs' runs in order."""
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    _set(tmp_path / "model-asap-v4", trace, broker=False, pacing="asap", ends=(100_000, 0), repeated=8, only="v4")  # 10 txn/s
    _set(tmp_path / "model-asap-v5", trace, broker=False, pacing="asap", ends=(0, 500_000), only="v5")  # 2 txn/s
    for i, (e4, e5) in enumerate(((50_000, 250_000), (25_000, 500_000))):  # v4 20 then 40 txn/s, v5 4 then 2
        _set(tmp_path / f"broker-asap-v4-{i}", trace, broker=True, pacing="asap", ends=(e4, 0), repeated=8, only="v4")
        _set(tmp_path / f"broker-asap-v5-{i}", trace, broker=True, pacing="asap", ends=(0, e5), only="v5")
    names = ["model", "model-asap-v4", "model-asap-v5", "broker"] + [f"broker-asap-{d}-{i}" for i in (0, 1) for d in ("v4", "v5")]
    rep = build([tmp_path / n for n in names], tmp_path / "rep")
    doc = rep.summary["validation"]
    rows = {(c["design"], c["metric"]): c for c in doc["checks"] if c["section"] == "Throughput"}
    assert rows[("v4", "committed txns per second")]["model"] == 10.0 and rows[("v5", "committed txns per second")]["model"] == 2.0
    assert doc["broker_saturation_runs"] == {"v4": [20.0, 40.0], "v5": [4.0, 2.0]}
    ratio = rows[("v5/v4", "v5/v4 committed-rate ratio at saturation")]
    assert ratio["model"] == pytest.approx(0.2, abs=1e-3) and ratio["broker"] == pytest.approx(3 / 30, abs=1e-3)
    assert doc["saturation_repeat"] == {"v4": 8, "v5": 1}
    md = rep.markdown.read_text()
    assert "v4 on the trace's rows 8 times over, v5 on the trace's rows once" in md
    assert "its runs one by one giving 0.05-0.20" in ratio["why"]  # 4/20 and 2/40: each run's designs paired


def test_latency_profile_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no-such.json"):
        model_latency(tmp_path / "no-such.json", 1)
    latency, note = model_latency(None, 1)  # the default profile: the measured Pulsar standalone one
    assert "latency profile pulsar-standalone-5.0.0-M1" in note
    assert latency.of("ledger.append") != DEFAULT_LATENCIES_US["ledger.append"]
    latency, note = model_latency("constants", 1)  # the constants stay a named profile
    assert dict(latency.latencies_us) == dict(DEFAULT_LATENCIES_US) and "latency profile constants" in note
    latency, note = model_latency("redis-local", 1)  # a shipped profile by name
    assert latency.of("meta.read") != DEFAULT_LATENCIES_US["meta.read"] and "redis-local" in note


def test_reconcile_rereads_explain_v5_reads_above_the_broker_within_their_number() -> None:
    # model 300 reads, 120 of them triggerReconcile's re-reads; a broker at 200 is 100 below: explained
    model = {"meta.reads": 300, "tb.reconcile_header_reads": 90, "pending_ack.reconcile_header_reads": 30}
    row = {c.metric: c for c in count_checks("v5", model, {"meta.reads": 200})}["metadata reads"]
    assert row.verdict == "explained" and "triggerReconcile" in row.why
    # 130 below is more than the 120 re-reads can account for
    row = {c.metric: c for c in count_checks("v5", model, {"meta.reads": 170})}["metadata reads"]
    assert row.verdict == "differs" and row.why == ""
    # more on the broker: its other stores' gets, the older reason
    row = {c.metric: c for c in count_checks("v5", model, {"meta.reads": 400})}["metadata reads"]
    assert row.verdict == "explained" and "MetadataStoreStats" in row.why


def test_deliveries_below_the_broker_explained_by_txn_acks_first_and_resent_copies() -> None:
    model = {"deliveries": 100, "acks.txn_before_delivery": 3}
    rows = {c.metric: c for c in count_checks("v4", model, {"deliveries": 105, "deliveries.of_resent_copies": 2})}
    assert rows["deliveries"].verdict == "explained"  # 5 = 3 acked first + 2 copies
    assert "filterEntriesForConsumer" in rows["deliveries"].why and "resendMessages" in rows["deliveries"].why
    rows = {c.metric: c for c in count_checks("v5", model, {"deliveries": 106, "deliveries.of_resent_copies": 2})}
    assert rows["deliveries"].verdict == "differs"  # one delivery more than both reasons allow
    rows = {c.metric: c for c in count_checks("v5", model, {"deliveries": 99})}
    assert rows["deliveries"].verdict == "differs"  # a delivery the broker did not make, and no txn ack came after one
    # ... unless a txn ack the model applied after delivering reached the broker first (at most those)
    after = {**model, "acks.txn_after_delivery": 2}
    rows = {c.metric: c for c in count_checks("v4", after, {"deliveries": 98})}
    assert rows["deliveries"].verdict == "explained" and "getPositionInPendingAck" in rows["deliveries"].why
    rows = {c.metric: c for c in count_checks("v4", after, {"deliveries": 97})}
    assert rows["deliveries"].verdict == "differs"  # 3 fewer than the 2 such acks allow
    # undelivered at end: the model's own, bounded by the pairs acked first
    rows = {c.metric: c for c in count_checks("v5", {"undelivered_at_end": 2, "acks.txn_before_delivery": 4},
                                              {"undelivered_at_end": 0})}
    assert rows["undelivered at end"].verdict == "explained" and "pending ack" in rows["undelivered at end"].why


def test_timer_snapshots_differ_either_way_by_at_most_the_timed_ones() -> None:
    # 4 topics: 4 first snapshots (untimed) + 27 on the timer in the model
    model = {"snapshot.writes": 31, "tb.snapshot_writes.by_time": 27, "tb.snapshot_writes.first": 4}
    rows = {c.metric: c for c in count_checks("v4", model, {"snapshot.writes": 28})}
    assert rows["TB snapshot writes (v4)"].verdict == "explained"
    assert "takeSnapshotByTimeout" in rows["TB snapshot writes (v4)"].why
    rows = {c.metric: c for c in count_checks("v4", model, {"snapshot.writes": 3})}
    assert rows["TB snapshot writes (v4)"].verdict == "differs"  # fewer than the first snapshots alone
    rows = {c.metric: c for c in count_checks("v4", model, {"snapshot.writes": 40})}
    assert rows["TB snapshot writes (v4)"].verdict == "explained"  # a longer broker run: more timer windows


def test_data_entries_above_the_model_explained_by_the_copies_the_broker_delivered() -> None:
    rows = {c.metric: c for c in count_checks("v4", {"ledger.appends.data": 936},
                                              {"ledger.appends.data": 1103, "deliveries.of_resent_copies": 167})}
    assert rows["data entries"].verdict == "explained" and "resendMessages" in rows["data entries"].why
    rows = {c.metric: c for c in count_checks("v4", {"ledger.appends.data": 936},
                                              {"ledger.appends.data": 1103, "deliveries.of_resent_copies": 100})}
    assert rows["data entries"].verdict == "differs"  # more extra entries than copies seen
    # copies never delivered: at most those of aborted txns (small, re-run: 959 = 936 + 23, 16 copies
    # delivered, 48 aborted entries skipped)
    rows = {c.metric: c for c in count_checks("v4", {"ledger.appends.data": 936, "dispatch.aborted_skipped": 48},
                                              {"ledger.appends.data": 959, "deliveries.of_resent_copies": 16})}
    assert rows["data entries"].verdict == "explained" and "isTxnAborted" in rows["data entries"].why
    rows = {c.metric: c for c in count_checks("v4", {"ledger.appends.data": 936, "dispatch.aborted_skipped": 6},
                                              {"ledger.appends.data": 959, "deliveries.of_resent_copies": 16})}
    assert rows["data entries"].verdict == "differs"  # 23 extra, at most 16 + 6 accounted for


def test_the_section_says_how_many_txns_v5s_coordinator_had_created_before_each_asap_run(tmp_path: Path) -> None:
    """The lowest txn id the broker's client was given, ``(0,N)``: N txns came before the run on
    this broker (v5's rate falls with them on a RocksDB store); sets without txn ids say nothing."""
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    for i, first in enumerate((1264, 2528)):
        _set(tmp_path / f"asap{i}", trace, broker=True, pacing="asap", ends=(20_000, 50_000))
        labels = json.loads((tmp_path / f"asap{i}" / "manifest.json").read_text())["runs"]
        for lab in labels:
            offset = 0 if lab.startswith("v5") else 100_000
            lines = [{"ev": "op", "op": "new_txn", "ok": True, "txn": f"t{k}", "txn_id": f"(0,{offset + first + k})"}
                     for k in (3, 0, 1)] + [{"ev": "op", "op": "commit", "ok": True, "txn": "t0"}]
            (tmp_path / f"asap{i}" / f"pulsar-events-{lab}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    sets = [load(tmp_path / f"asap{i}") for i in (0, 1)]
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), sets)
    assert v.to_json()["broker_saturation_txns_before"] == {"v4": [101264, 102528], "v5": [1264, 2528]}
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap0", tmp_path / "asap1"], tmp_path / "rep")
    assert "v5's asap runs began after its coordinator had created 1,264, 2,528 txns on this broker" \
        in md.markdown.read_text()
    assert "The model's v5 store started empty" in md.markdown.read_text()
    # a model whose v5 store started from a history (validate gives it the broker's): said so
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    for run in manifest["runs"].values():
        if run["config"]["engine"] == "v5":
            run["config"]["options"] = {"history": 2033, "history_listeners": 1755}
    (tmp_path / "model" / "manifest.json").write_text(json.dumps(manifest))
    aged = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), sets)
    assert aged.model_v5_history == (2033, None) and aged.to_json()["model_v5_history"]["trace_pacing"] == 2033
    assert aged.to_json()["model_v5_listeners"] == {"trace_pacing": 1755, "asap": None}
    assert "model_v5_listeners" not in v.to_json()  # none held: a judgement as it was written before
    md = build([tmp_path / "model", tmp_path / "broker", tmp_path / "asap0", tmp_path / "asap1"], tmp_path / "rep2")
    assert "The model's v5 store started from 2,033 txns (at the trace's pace)" in md.markdown.read_text()
    assert ("It also held the watches of the v5 topics the broker had loaded before: 1,755 (at the trace's pace)"
            in md.markdown.read_text())
    plain = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), None)
    assert plain.to_json()["broker_saturation_txns_before"] == {}


def test_the_models_v5_store_starts_from_the_median_history_of_the_broker_runs_it_stands_beside(tmp_path: Path) -> None:
    """``validate_run.broker_history``: the txns v5's coordinator had created before the broker's
    runs (their lowest txn id), the median over the sets that recorded one; 0 when none did."""
    from bench.pulsar.validate_run import broker_history

    dirs = []
    for i, first in enumerate((4924, 2396, 3660)):
        d = tmp_path / f"asap{i}"
        d.mkdir()
        lines = [{"ev": "op", "op": "new_txn", "ok": True, "txn": f"t{k}", "txn_id": f"(0,{first + k})"} for k in (2, 0)]
        (d / "pulsar-events-v5.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
        dirs.append(d)
    (tmp_path / "v4only").mkdir()
    assert broker_history(dirs + [tmp_path / "v4only"]) == 3660
    assert broker_history(dirs[:2]) == 2396  # of two, the lower
    assert broker_history([tmp_path / "v4only"]) == 0


def test_the_models_v5_store_holds_the_watches_of_the_v5_topics_the_broker_loaded_before(tmp_path: Path) -> None:
    """``validate_run.broker_listeners``: each v5 run before leaves its segments' and
    subscriptions' watches (its pulsar_topics_count + pulsar_subscriptions_count), twice over
    when its client warmed up on the trace's rows in a namespace of its own; a run's own
    warm-up is loaded before its measured rows; v4 runs leave none."""
    from bench.pulsar.validate_run import broker_listeners

    def run(name: str, finished: str, counts: dict[str, dict[str, int]], warmed: bool) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"finished_at": finished}))
        (d / "counts.json").write_text(json.dumps(counts))
        first = {"ev": "warmed", "rows": 10, "ms": 5} if warmed else {"ev": "ready", "t0_epoch_ms": 0}
        (d / "pulsar-events-v5.jsonl").write_text(json.dumps(first) + "\n")
        return d

    def gauges(topics: int, subs: int) -> dict[str, int]:
        return {"pulsar.pulsar_topics_count": topics, "pulsar.pulsar_subscriptions_count": subs}

    warm = run("broker-warm-up", "2026-11-27T10:00:00Z", {"v4": gauges(9, 9), "v5": gauges(64, 128)}, True)
    cold = run("broker-warm-up-2-v5", "2026-11-27T10:01:00Z", {"v5": gauges(10, 20)}, False)
    v4 = run("broker-warm-up-3-v4", "2026-11-27T10:02:00Z", {"v4": gauges(50, 50)}, True)
    paced = run("broker", "2026-11-27T10:03:00Z", {"v4": gauges(64, 128), "v5": gauges(64, 128)}, True)
    asap = [run(f"broker-asap-v5{s}", f"2026-11-27T10:0{4 + i}:00Z", {"v5": gauges(64, 128)}, True)
            for i, s in enumerate(("", "-2", "-3"))]
    runs = [warm, cold, v4, paced, *asap]
    assert broker_listeners([paced], runs) == 2 * 192 + 30 + 192  # the warm-ups', then its own warm-up's
    # the asap runs, after the paced run's measured rows (192): 990, 1,374 and 1,758; the median of the three
    assert broker_listeners(asap, runs) == (606 + 192) + 2 * 192 + 192
    assert broker_listeners([v4], runs) == 0  # not a v5 run
    assert broker_listeners([paced], [paced]) == 192  # a broker whose earlier runs are not known: a lower bound


def test_the_section_says_how_far_the_broker_moved_after_the_calibration_in_its_session(tmp_path: Path) -> None:
    """validate --calibrate records the calibration's saturation rates before and after the measured
    runs in the model's manifest (bench.calibrate.in_session); the section quotes both and the change."""
    trace = tmp_path / "t.parquet"
    _set(tmp_path / "model", trace, broker=False)
    _set(tmp_path / "broker", trace, broker=True)
    cal = {"profile": "profile.json", "minutes_after_calibration": 9.5,
           "saturation_before": {"committed_txns_per_s": {"v4": 600.0, "v5": 40.0}, "txns_before": {"v5": [2000, 2400, 2800]}},
           "saturation_after": {"committed_txns_per_s": {"v4": 540.0, "v5": 30.0}, "txns_before": {"v5": [5000, 5400, 5800]},
                                "failed_runs": {"v4": 1}},
           "model_v5": {"before": {"history": 2400, "committed_txns_per_s": 40.0},
                        "after": {"history": 5400, "committed_txns_per_s": 32.0}}}
    manifest_path = tmp_path / "model" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["validate"] = {"calibration": cal}
    manifest_path.write_text(json.dumps(manifest))
    v = validate_sets(load(tmp_path / "model"), load(tmp_path / "broker"), None)
    assert v.to_json()["calibration"] == cal
    md = build([tmp_path / "model", tmp_path / "broker"], tmp_path / "rep").markdown.read_text()
    assert ("The model's profile (profile.json) was calibrated on this broker in this session, before its measured runs "
            "(validate --calibrate). The calibration's saturation trace ran at v4 600.0, v5 40.0 committed txn/s then; "
            "9.5 min later, after the measured runs, at v4 540.0, v5 30.0 (v4 -10%, v5 -25%): how far the broker itself "
            "moved while it was judged. v5's rate falls with the txns its store holds: the calibrated model gives 40 "
            "committed txn/s at the first measurement's history (2,400 txns) and 32 at the second's (5,400), -20%; "
            "the broker's v5 moved -6% beyond that.") in md
    assert "Left out of the second: 1 v4 run in which the broker committed no txn (the client lost its connection)." in md
    # a set validated with a profile from a file says nothing of it
    assert validate_sets(load(tmp_path / "broker"), load(tmp_path / "broker"), None).to_json()["calibration"] is None


def test_calibrate_and_a_latency_profile_are_refused_together_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    trace = tmp_path / "t.parquet"
    trace.write_bytes(b"")  # refused before the trace is read
    code = main(["validate", "--trace", str(trace), "--target", "pulsar://127.0.0.1:1", "--admin-url",
                 "http://127.0.0.1:1", "--calibrate", "--latency-profile", "constants", "--out", str(tmp_path / "v")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert "validate --calibrate measures the model's profile on this broker: not with --latency-profile constants" in err[0]
    assert not (tmp_path / "v").exists()


def test_rejudge_refuses_what_is_not_an_earlier_validation_and_runs_no_broker(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import EXIT_USAGE, main

    assert main(["validate", "--rejudge", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert "not an earlier validate --out" in capsys.readouterr().err and not (tmp_path / "o").exists()
    earlier = tmp_path / "earlier"
    _set(earlier / "broker", tmp_path / "gone.parquet", broker=True)
    (earlier / "validation.json").write_text("{}")
    assert main(["validate", "--rejudge", str(earlier), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert f"the trace its broker ran, {tmp_path / 'gone.parquet'}, is not there" in capsys.readouterr().err
    assert main(["validate", "--rejudge", str(earlier), "--target", "pulsar://127.0.0.1:1", "--out",
                 str(tmp_path / "o")]) == EXIT_USAGE
    assert "runs no broker: not with --target" in capsys.readouterr().err
    (tmp_path / "bad.tar.xz").write_bytes(b"not an archive")
    assert main(["validate", "--rejudge", str(tmp_path / "bad.tar.xz"), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert "cannot unpack it" in capsys.readouterr().err
    assert main(["validate", "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert "validate needs --trace and --target" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("trace", ["small-slow-2000", "omb-slow-2000"])
def test_the_kept_judgements_of_fresh_default_7_are_this_model_on_its_kept_broker_runs(tmp_path: Path,
                                                                                      trace: str) -> None:
    # the broker runs are kept packed beside the judgements: judged again by this model and the
    # default profile, without a broker, they give the kept rows (a model change that moves them
    # asks for `validate --rejudge` of the kept runs)
    from bench.cli import main

    kept = Path("datasets/validation/fresh-default-7")
    out = tmp_path / "again"
    assert main(["validate", "--rejudge", str(kept / "broker-runs" / f"{trace}.tar.xz"),
                 "--trace", f"datasets/validation/{trace}.parquet", "--out", str(out)]) == 0
    again = json.loads((out / "validation.json").read_text())
    assert again["checks"] == json.loads((kept / f"{trace}.json").read_text())["checks"]
    assert (out / "broker-runs" / trace / "broker" / "manifest.json").exists()
