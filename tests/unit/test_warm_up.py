"""bench.pulsar.validate_run.warm_up_broker: discarded asap runs until each design's rows held its
goal of txns, a design's runs stopping once it has, each later run as long as the last one's rate
asks. The broker is a stand-in here (``pulsar_replay`` answering fixed rates); the real one runs
in tests/integration/test_pulsar_validate.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.pulsar import run as pulsar_run
from bench.pulsar import validate_run
from bench.pulsar.target import parse_target
from bench.trace.trace import TraceWriter
from bench.trace.tracestats import summarize

T = "persistent://public/default/t-partition-0"
RATES = {"v4": 100.0, "v5": 20.0}  # committed txn/s the stand-in broker answers
TARGET = parse_target("pulsar://127.0.0.1:1", "http://127.0.0.1:1")  # never reached: the stand-in answers


def _trace(path: Path, txns: int = 10) -> Path:
    with TraceWriter(path, metadata={"profile": "hand", "seed": "1"}) as w:
        w.add(0, "subscribe", topic=T, subscription="s")
        for i in range(txns):
            w.add(10 + 10 * i, "new_txn", txn=f"t{i}")
            w.add(11 + 10 * i, "publish", txn=f"t{i}", topic=T, msg=f"m{i}", size=8)
            w.add(12 + 10 * i, "commit", txn=f"t{i}")
    return path


# per design, the JIT compiler threads' cores the stand-in broker's runs record, run by run (of 1.0
# broker cores; the last repeats); a design without one records no CPU
JIT: dict[str, list[float]] = {}


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """Each stand-in run: (its set's name, design, txns its trace held)."""
    done: list[tuple[str, str, int]] = []
    JIT.clear()

    def cpu(d: str) -> dict[str, Any]:
        if d not in JIT:
            return {}
        ran = sum(1 for _, design, _ in done if design == d)
        return {"cpu": {"machine_busy_cores": 1.5, "broker_cores": 1.0, "jit_cores": JIT[d][min(ran, len(JIT[d]) - 1)]}}

    def replay(trace: Path, designs: list[str], target: Any, out: Path, **_: Any) -> dict[str, Any]:
        txns = summarize(trace).txns
        runs = {d: {"events": 1, "wall_seconds": 0.1, "rates": {"committed_txns_per_s": RATES[d]}, **cpu(d)}
                for d in designs}
        out.mkdir(parents=True)
        (out / "manifest.json").write_text(json.dumps({"runs": runs}))
        done.extend((out.name, d, txns) for d in designs)
        return {"runs": runs}

    monkeypatch.setattr(pulsar_run, "pulsar_replay", replay)
    return done


def test_a_designs_runs_go_on_until_their_rows_held_its_goal(tmp_path: Path, replays: list[tuple[str, str, int]]) -> None:
    said: list[str] = []
    state, traces = validate_run.warm_up_broker(_trace(tmp_path / "t.parquet"), TARGET, tmp_path, 1, True, said.append,
                                                goal={"v4": 250, "v5": 15})
    # first run once over; then a txn phase of 2 s at the last rate: v4 100 txn/s x 2 s = 20 passes
    # of 10 txns, v5 20 txn/s x 2 s = 4 passes; v4 done at 10 + 200 + 200 txns, v5 at 10 + 40
    assert replays == [("broker-warm-up", "v4", 10), ("broker-warm-up", "v5", 10),
                       ("broker-warm-up-2-v4", "v4", 200), ("broker-warm-up-2-v5", "v5", 40),
                       ("broker-warm-up-3", "v4", 200)]
    assert state == {"validate": {"broker": {"fresh": True, "warm_up_runs": 3, "warm_up_txns": {"v4": 410, "v5": 50}}}}
    # the measured runs: a txn phase of 1 s at the last warm-up run's rate
    assert traces == {"v4": tmp_path / "saturation-trace-x10.parquet", "v5": tmp_path / "saturation-trace-x2.parquet"}
    assert summarize(traces["v4"]).txns == 100
    assert said[-1].startswith("saturation: v4 replays the trace's rows 10 times over, v5 replays the trace's rows 2 times")
    # each warm-up run's manifest says what ran before it
    second = json.loads((tmp_path / "broker-warm-up-2-v4" / "manifest.json").read_text())
    assert second["runs"]["v4"]["rates"]["committed_txns_per_s"] == 100.0


def test_the_runs_stop_at_the_limit_and_say_how_far_short(tmp_path: Path, replays: list[tuple[str, str, int]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_run, "MAX_WARM_UP_RUNS", 2)
    said: list[str] = []
    state, _ = validate_run.warm_up_broker(_trace(tmp_path / "t.parquet"), TARGET, tmp_path, 1, False, said.append,
                                           goal={"v4": 1_000_000, "v5": 0})
    assert [(name, d) for name, d, _ in replays] == [("broker-warm-up", "v4"), ("broker-warm-up", "v5"),
                                                    ("broker-warm-up-2", "v4")]
    assert "warm-up: stopped after 2 runs, short of 1,000,000 v4 txns (210)" in said
    assert state["validate"]["broker"]["warm_up_txns"] == {"v4": 210, "v5": 10}


def test_no_goal_and_no_runs_run_nothing_and_a_fixed_repeat_holds(tmp_path: Path,
                                                                   replays: list[tuple[str, str, int]]) -> None:
    trace = _trace(tmp_path / "t.parquet")
    state, traces = validate_run.warm_up_broker(trace, TARGET, tmp_path, 0, False, goal={"v4": 0, "v5": 0})
    assert replays == [] and traces == {"v4": trace, "v5": trace}
    assert state == {"validate": {"broker": {"fresh": False, "warm_up_runs": 0, "warm_up_txns": {}}}}
    state, traces = validate_run.warm_up_broker(trace, TARGET, tmp_path, 0, False, repeat=3, goal={"v4": 50, "v5": 0})
    assert replays == [("broker-warm-up", "v4", 30), ("broker-warm-up-2", "v4", 30)]  # 30, then 60 >= 50
    assert traces == {"v4": tmp_path / "saturation-trace-x3.parquet", "v5": tmp_path / "saturation-trace-x3.parquet"}


def test_with_a_jit_share_a_designs_runs_go_on_while_its_broker_compiled_more(tmp_path: Path,
                                                                            replays: list[tuple[str, str, int]]) -> None:
    JIT.update({"v4": [0.6, 0.3, 0.04, 0.2], "v5": [0.01]})
    said: list[str] = []
    state, _ = validate_run.warm_up_broker(_trace(tmp_path / "t.parquet"), TARGET, tmp_path, 1, True, said.append,
                                           goal={"v4": 0, "v5": 0}, jit_share=0.05)
    # v4 ran while its last run's share was above 0.05 (0.6, 0.3), and stopped after the 0.04;
    # v5's first run was below it
    assert [(name, d) for name, d, _ in replays] == [("broker-warm-up", "v4"), ("broker-warm-up", "v5"),
                                                    ("broker-warm-up-2", "v4"), ("broker-warm-up-3", "v4")]
    assert state["validate"]["broker"]["warm_up_runs"] == 3
    assert state["validate"]["broker"]["warm_up_jit"] == {"v4": 0.04, "v5": 0.01}
    # without a share, the same broker's warm-up is the one run
    replays.clear()
    state, _ = validate_run.warm_up_broker(_trace(tmp_path / "u.parquet"), TARGET, tmp_path / "u", 1, True,
                                           goal={"v4": 0, "v5": 0})
    assert len(replays) == 2 and "warm_up_jit" not in state["validate"]["broker"]


def test_a_jit_share_never_reached_stops_at_the_limit_and_a_run_without_cpu_is_not_judged(
        tmp_path: Path, replays: list[tuple[str, str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate_run, "MAX_WARM_UP_RUNS", 3)
    JIT.update({"v4": [0.5, 0.4, 0.3]})  # v5 records no CPU
    said: list[str] = []
    state, _ = validate_run.warm_up_broker(_trace(tmp_path / "t.parquet"), TARGET, tmp_path, 1, False, said.append,
                                           goal={"v4": 0, "v5": 0}, jit_share=0.1)
    assert [d for _, d, _ in replays] == ["v4", "v5", "v4", "v4"]
    assert "warm-up: stopped after 3 runs, short of a v4 JIT share of 0.1 (0.3)" in said
    assert "warm-up: v5's run recorded no JIT cores (bench.pulsar.cpu): its JIT share not judged" in said
    assert state["validate"]["broker"]["warm_up_jit"] == {"v4": 0.3}
