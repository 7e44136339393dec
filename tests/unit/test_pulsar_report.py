"""Reports hold a model run and a broker run of the same trace side by side, as model vs broker
(bench.report.model_vs_broker), not as A/B."""

from __future__ import annotations

import json
from pathlib import Path

from bench.replay.config import RunConfig
from bench.report.model_vs_broker import agreement
from bench.report.report import build_report
from bench.replay.results import result_dir
from bench.replay.runner import replay_trace
from bench.trace.trace import TraceWriter

T = "persistent://public/b/t0-partition-0"


def _trace(path: Path) -> Path:
    with TraceWriter(path, metadata={"profile": "hand", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        w.add(10, "publish", topic=T, msg="m0", size=1)
        w.add(20, "new_txn", txn="t0")
        w.add(30, "publish", txn="t0", topic=T, msg="m1", size=1)
        w.add(40, "publish", topic=T, msg="m2", size=1)
        w.add(50, "commit", txn="t0")
    return path


def _broker_set(out: Path, trace: Path, msgs: list[str], outcome: str) -> None:
    """A broker result set as bench.pulsar.run writes it, with the deliveries given."""
    with result_dir(out) as w:
        w.deliveries({"engine": ["v4"] * len(msgs), "topic": [T] * len(msgs), "subscription": ["s"] * len(msgs),
                      "msg": msgs, "delivered_ts_us": [100 * (i + 1) for i in range(len(msgs))],
                      "redelivery": [False] * len(msgs)})
        w.finish(counts={"v4": {"deliveries": len(msgs), "txns.started": 1, "tc.log_appends": 4, "meta.reads": 0}},
                 latency={}, recovery=[],
                 txns={"engine": ["v4"], "txn": ["t0"], "outcome": [outcome], "end_ts_us": [5000], "visible_ts_us": [None],
                       "commit_requested_ts_us": [4000], "messages": [1], "opened_ts_us": [3000],
                       "new_txn_answered_ts_us": [3100]},
                 manifest={"trace": {"path": str(trace), "rows": 6, "profile": "hand", "seed": "1"},
                           "target": {"kind": "pulsar", "version": "5.0.0-M1"},
                           "runs": {"v4": {"config": {"engine": "v4", "target": "pulsar"}, "target": "pulsar", "pacing": "trace",
                                           "pulsar": {"version": "5.0.0-M1"}, "rates": {"committed_txns_per_s": 2.0},
                                           "max_lag_us": 7, "events": 6, "wall_seconds": 1.0}}})


def test_model_vs_broker_rows_say_equal_or_differs(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    replay_trace(trace, [RunConfig(engine="v4")], tmp_path / "model")
    # the model delivers m0, m2 (plain) and m1 (committed): in position order m0, m1, m2
    _broker_set(tmp_path / "same", trace, ["m0", "m1", "m2"], "committed")
    a = agreement(tmp_path / "model", "v4", tmp_path / "same", "v4")
    assert a.delivered_equal and a.order_equal and a.outcomes_equal and a.delivered_pairs == (3, 3)

    _broker_set(tmp_path / "other", trace, ["m0", "m2"], "aborted")  # m1 lost, t0 aborted
    b = agreement(tmp_path / "model", "v4", tmp_path / "other", "v4")
    assert b.only_model == ("s/m1",) and b.only_broker == () and b.outcomes == (1, 1)

    report = build_report([tmp_path / "model", tmp_path / "other"], tmp_path / "rep")
    md = report.with_suffix(".md").read_text()
    assert "## Model vs broker (v4) — model vs other" in md
    assert "baseline" not in md  # no A/B section between a model set and a broker set
    # the headline names the factor and what differs
    assert "**Model vs broker (v4)** — factor: model → Pulsar 5.0.0-M1 broker:" in md
    assert "differ (delivered (subscription, msg) pairs, txn outcomes" in md
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    (entry,) = summary["model_vs_broker"]
    rows = {r["metric"]: r for r in entry["rows"]}
    assert rows["delivered (subscription, msg) pairs"]["verdict"] == "differs"
    assert rows["txn outcomes"]["verdict"] == "differs"
    assert rows["coordinator log appends (v4)"]["values"]["broker"] == 4
    assert not {r["verdict"] for r in entry["rows"]} & {"better", "worse"}
