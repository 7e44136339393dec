"""A/B between result sets: runs matched by design, the differing setting named as the factor,
"nothing comparable" said when nothing was compared, and ``report --fail-on`` gating on a
planted regression."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.replay.config import RunConfig
from bench.replay.runner import replay_trace
from bench.trace.trace import TraceWriter
from engine.dispatcher import DispatchMode

T = "persistent://public/b/t0-partition-0"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ab") / "t.parquet"
    with TraceWriter(path, metadata={"profile": "hand", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        w.add(10, "publish", topic=T, msg="m0", size=1)
        for i in range(3):
            w.add(20 + 100 * i, "new_txn", txn=f"t{i}")
            w.add(30 + 100 * i, "publish", txn=f"t{i}", topic=T, msg=f"x{i}", size=1)
            w.add(40 + 100 * i, "publish", topic=T, msg=f"p{i}", size=1)
            w.add(50 + 100 * i, "commit", txn=f"t{i}")
    return path


def _set(trace: Path, out: Path, v5_options: dict[str, object] | None = None, **cfg: object) -> Path:
    replay_trace(trace, [RunConfig(engine="v4", **cfg),  # type: ignore[arg-type]
                         RunConfig(engine="v5", options=v5_options or {}, **cfg)], out)  # type: ignore[arg-type]
    return out


def _plant(src: Path, dst: Path, label: str, metric: str, factor: float) -> Path:
    """A copy of a result set whose ``metric`` percentiles for ``label`` are scaled by ``factor``."""
    shutil.copytree(src, dst)
    lat = json.loads((dst / "latency.json").read_text())
    for pct in ("p50_us", "p90_us", "p99_us", "p99.9_us", "max_us"):
        lat[label][metric][pct] = round(lat[label][metric][pct] * factor)
    (dst / "latency.json").write_text(json.dumps(lat))
    return dst


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_planted_2x_end_txn_regression_fails_the_gate_and_1_05x_does_not(tmp_path: Path, trace: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    base = _set(trace, tmp_path / "base")
    slow = _plant(base, tmp_path / "slow", "v5-shipped", "end_txn_us", 2.0)
    code, _, err = _report(capsys, "--results", str(base), str(slow), "--out", str(tmp_path / "r1"),
                           "--fail-on", "end_txn_us.p50:10%")
    assert code == 1
    assert "regression: v5-shipped end_txn_us.p50" in err and "2.00×" in err
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    (comp,) = summary["comparisons"]
    assert comp["comparable"] and comp["factor"] == []  # a rerun: no setting differs
    assert any(c["id"] == "end_txn_us.p50" and c["verdict"] == "worse" for c in comp["changes"])

    near = _plant(base, tmp_path / "near", "v5-shipped", "end_txn_us", 1.05)
    code, _, err = _report(capsys, "--results", str(base), str(near), "--out", str(tmp_path / "r2"),
                           "--fail-on", "end_txn_us.p50:10%")
    assert code == 0, err
    # the same 5 % change does fail a tighter gate (beyond the 1 % noise of exact virtual time)
    assert _report(capsys, "--results", str(base), str(near), "--out", str(tmp_path / "r3"),
                   "--fail-on", "end_txn_us.p50:2%")[0] == 1


def test_fail_on_errors_are_one_clear_line(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _set(trace, tmp_path / "base")
    code, _, err = _report(capsys, "--results", str(base), "--out", str(tmp_path / "r0"), "--fail-on", "end_txn_us.p50")
    assert code == 2 and "METRIC:THRESHOLD" in err and not (tmp_path / "r0").exists()
    code, _, err = _report(capsys, "--results", str(base), "--out", str(tmp_path / "r1"), "--fail-on", "end_txn_us.p50:5%")
    assert code == 2 and "nothing comparable" in err  # one set: never a silent pass
    code, _, err = _report(capsys, "--results", str(base), str(base), "--out", str(tmp_path / "r2"), "--fail-on", "no.such:5%")
    assert code == 2 and "no row 'no.such'" in err


def test_v5_variants_are_matched_by_design_and_the_variant_is_the_factor(tmp_path: Path, trace: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    watch = _set(trace, tmp_path / "watch")
    events = _set(trace, tmp_path / "events", v5_options={"variant": "state-events"})
    labels = list(json.loads((events / "manifest.json").read_text())["runs"])
    assert _report(capsys, "--results", str(watch), str(events), "--out", str(tmp_path / "r"))[0] == 0
    (comp,) = json.loads((tmp_path / "r" / "summary.json").read_text())["comparisons"]
    assert comp["comparable"] and comp["rows_compared"] > 0
    assert [p["design"] for p in comp["pairs"]] == ["v4", "v5"] and comp["pairs"][1]["new"] == labels[1]
    assert comp["factor"] == ["options.variant: shipped → state-events"]
    assert "Factor: options.variant: shipped → state-events" in comp["verdict"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "**A/B events vs baseline watch**: Factor: options.variant: shipped → state-events" in md


def test_dispatch_modes_compare_with_dispatch_as_the_factor_and_name_the_changes(tmp_path: Path, trace: Path,
                                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    polling = _set(trace, tmp_path / "polling")
    notify = _set(trace, tmp_path / "notify", dispatch=DispatchMode.NOTIFY)
    assert _report(capsys, "--results", str(polling), str(notify), "--out", str(tmp_path / "r"))[0] == 0
    (comp,) = json.loads((tmp_path / "r" / "summary.json").read_text())["comparisons"]
    assert comp["factor"] == ["dispatch: polling → notify"]
    assert comp["changes"], "notify dispatch must change something (no empty re-reads)"
    assert all(c["pair"] in ("v4", "v5-shipped") for c in comp["changes"])


def test_sets_of_different_traces_say_nothing_comparable_never_no_change(tmp_path: Path, trace: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = _set(trace, tmp_path / "base")
    other = tmp_path / "other.parquet"
    with TraceWriter(other, metadata={"profile": "hand", "seed": "2"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        w.add(10, "publish", topic=T, msg="m0", size=1)
    _set(other, tmp_path / "o")
    assert _report(capsys, "--results", str(base), str(tmp_path / "o"), "--out", str(tmp_path / "r"))[0] == 0
    (comp,) = json.loads((tmp_path / "r" / "summary.json").read_text())["comparisons"]
    assert comp["comparable"] is False and comp["rows_compared"] == 0 and "different trace" in comp["why_not"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Nothing comparable: different trace" in md and "No change" not in md

    v4only = tmp_path / "v4only"
    replay_trace(trace, [RunConfig(engine="v4")], v4only)
    v5only = tmp_path / "v5only"
    replay_trace(trace, [RunConfig(engine="v5")], v5only)
    assert _report(capsys, "--results", str(v4only), str(v5only), "--out", str(tmp_path / "r2"))[0] == 0
    (comp,) = json.loads((tmp_path / "r2" / "summary.json").read_text())["comparisons"]
    assert comp["why_not"] == "no engine design in common (baseline: v4; new: v5)"


def test_replay_repeat_records_each_repeat_and_the_report_uses_medians_and_spreads(tmp_path: Path, trace: Path,
                                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--trace", str(trace), "--out", str(tmp_path / "a"), "--repeat", "3", "--no-progress",
                 "--latency-profile", "constants"]) == 0
    rep = json.loads((tmp_path / "a" / "repeats.json").read_text())
    assert rep["repeats"] == 3 and len(rep["samples"]["v4"]["end_txn_us.p50"]) == 3
    assert len(set(rep["samples"]["v4"]["end_txn_us.p50"])) == 1  # virtual time: every repeat the same

    # a wall-time-like spread, planted: baseline end-txn p50 over 3 repeats 1000..1400 µs
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for d, samples in ((tmp_path / "a", [1000.0, 1200.0, 1400.0]), (tmp_path / "b", [1300.0, 1500.0, 1700.0])):
        r = json.loads((d / "repeats.json").read_text())
        r["samples"]["v5-shipped"]["end_txn_us.p50"] = samples
        (d / "repeats.json").write_text(json.dumps(r))
    assert _report(capsys, "--results", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "r"),
                   "--fail-on", "end_txn_us.p50:10%")[0] == 0  # medians 1200 → 1500, but the spreads overlap
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    row = next(r for r in summary["result_sets"][1]["rows"] if r["id"] == "end_txn_us.p50")
    assert row["values"]["v5-shipped"] == 1500.0 and row["spread"]["v5-shipped"] == [1300.0, 1700.0]

    r = json.loads((tmp_path / "b" / "repeats.json").read_text())
    r["samples"]["v5-shipped"]["end_txn_us.p50"] = [2300.0, 2400.0, 2500.0]  # clearly apart: a regression
    (tmp_path / "b" / "repeats.json").write_text(json.dumps(r))
    code, _, err = _report(capsys, "--results", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "r2"),
                           "--fail-on", "end_txn_us.p50:10%")
    assert code == 1 and "1200 → 2400" in err


def test_polling_policies_compare_with_the_policy_as_the_factor(tmp_path: Path, trace: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    pulsar = _set(trace, tmp_path / "pulsar")
    spin = _set(trace, tmp_path / "spin", polling="spin")
    assert _report(capsys, "--results", str(pulsar), str(spin), "--out", str(tmp_path / "r"))[0] == 0
    (comp,) = json.loads((tmp_path / "r" / "summary.json").read_text())["comparisons"]
    assert comp["comparable"] and comp["factor"] == ["polling: pulsar → spin"]
    assert [p["baseline"] for p in comp["pairs"]] == [p["new"] for p in comp["pairs"]]  # same labels: matched directly


def test_one_engine_sets_answer_each_question_by_the_ab_not_nothing_to_compare(tmp_path: Path, trace: Path,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``replay --engine v5`` once per variant: the headline ranks the two runs of the A/B."""
    pip = tmp_path / "pip"
    replay_trace(trace, [RunConfig(engine="v5", options={"variant": "pip"})], pip)
    slow = _plant(pip, tmp_path / "slow", "v5-pip", "end_txn_us", 3.0)
    assert _report(capsys, "--results", str(pip), str(slow), "--out", str(tmp_path / "r"))[0] == 0
    headline = {h["metric"]: h for h in json.loads((tmp_path / "r" / "summary.json").read_text())["headline"]}
    end = headline["end_txn_us.p50"]
    assert end["winner"] == "v5-pip (pip)" and end["ratio"] == pytest.approx(3.0, rel=0.01)
    assert "nothing to compare" not in (tmp_path / "r" / "report.md").read_text()
    assert headline["commit_to_visible_us.p50"]["answer"].startswith("tie — identical")  # unchanged by the plant
